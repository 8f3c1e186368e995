-- bounds — what a run's settings must satisfy, checked before anything starts, and whether
-- the run fits in this machine's memory. One place for every batcher and trainer to call
-- (data.batcher's batchers and recipes.fit do), so that a zero, negative or absurd size
-- is one clear error up front, never a crash, a loss of 0 or a swap storm hours later.
--
--   local bounds = require "outlierlab.train.bounds"
--   bounds.check_run(spec)      -- batch + data sizes + training recipe
--   bounds.check_memory(spec)   -- the memory estimate against what this machine has
--   local est = bounds.estimate_memory(spec)   -- { total =, params =, activations =, data =, ... }
-- The profile, batch and data checks and the batch kinds are outlierlab.data.bounds' (every
-- batcher calls them, below the trainers): check_profile, check_batch, register_kind.
--
-- A spec is recipes.fit's: { model = {preset =, overrides =}, data = {n_tokens =,
-- ...}, batch = {B =, T =, kind =}, train = {steps =, lr =, warmup =, ...}, seed = }.
-- The memory estimate is docs/reference/reliability.md's formula; tests/lua/test_hostile_runs.lua
-- checks it against the engine's measured step-arena peak for every text family.
local M = {}

local data_bounds = require "outlierlab.data.bounds"
local function fail(msg) error("settings: " .. msg, 0) end

-- the training recipe: outlierlab.train.loop's own checks (steps >= 1, lr > 0, warmup <= steps, ...)
function M.check_train(tcfg)
  local train = require "outlierlab.train.loop"
  local ok, err = pcall(train.config, tcfg)
  if not ok then fail(tostring(err):gsub("^[^:]*%.lua:%d+: ", "")) end
end

-- ---------------------------------------------------------------- memory
-- Floats one training micro-batch keeps in the step arena per token, measured on this
-- engine (activations saved for backward, their gradients, the logits) and rounded up by
-- about 10 %: per layer 36·C + 5·F (32·C + 8·F for LLaMA: rotary q, k and the gated MLP are
-- fused ops that keep no intermediates), plus 2·V + 8·C for embeddings, head and loss. The fused
-- attention kernels keep O(T) per row; a variant built from plain ops keeps its (T, T)
-- scores, mask, probabilities and their gradients, up to 10·NH·T per layer and token.
local function fused_attention(mcfg)
  local ok, att = pcall(require, "outlierlab.nn.attention")
  if not ok then return true end
  local kind = type(mcfg.attention) == "table" and (mcfg.attention.kind or "softmax") or mcfg.attention or "softmax"
  local def = att.registry[kind]
  if not def or type(def.new) ~= "function" then return true end
  local src = debug.getinfo(def.new, "S").source or ""
  return src:match("lua/outlierlab/nn/attention%.lua$") ~= nil
end

function M.floats_per_token(mcfg, T)
  local C, F, L, NH = mcfg.d_model, mcfg.d_ff, mcfg.n_layer, mcfg.n_head
  local V = mcfg.family == "vit" and mcfg.n_classes or mcfg.vocab_size
  local per_layer = mcfg.family == "llama" and 32 * C + 8 * F or 36 * C + 5 * F
  if not fused_attention(mcfg) then per_layer = per_layer + 10 * NH * T end
  return L * per_layer + 2 * V + 8 * C
end

local function model_cfg(spec) return require("outlierlab.models").spec_cfg(spec) end

-- processes of this run on this machine (MPI ranks of one node), and this process's rows
local function local_ranks()
  return tonumber(os.getenv("OMPI_COMM_WORLD_LOCAL_SIZE") or os.getenv("SLURM_NTASKS_PER_NODE") or "") or 1
end

-- bytes one process needs to train spec: parameters with gradients and AdamW's two moments
-- (16 bytes a parameter), one micro-batch's step arena, the corpus, and the process itself
function M.estimate_memory(spec, opts)
  opts = opts or {}
  local mcfg = model_cfg(spec)
  local models = require "outlierlab.models"
  local nparams = models.count_params(mcfg)
  local ranks = opts.ranks or 1
  local B = math.ceil(spec.batch.B / ranks)
  local T = spec.batch.T
  if spec.batch.kind == "image" then T = (mcfg.image_size / mcfg.patch_size) ^ 2 + 1 end
  local est = {
    params = 16 * nparams,
    activations = 4 * M.floats_per_token(mcfg, T) * B * T + 2 ^ 20,
    data = spec.data and spec.data.n_tokens and 12 * spec.data.n_tokens or 0,
    base = 150 * 2 ^ 20,   -- LuaJIT, OpenBLAS and Open MPI buffers (a quick run's resident size)
    nparams = nparams, B = B, T = T,
  }
  est.total = est.params + est.activations + est.data + est.base
  return est
end

-- memory this process may use: MemAvailable, or less under a cgroup limit (Slurm);
-- $OUTLIERLAB_MEMORY (bytes, or with a K/M/G suffix) overrides it
local function meminfo()
  local f = io.open("/proc/meminfo", "r")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  local total = tonumber(s:match("MemTotal:%s*(%d+)"))
  local avail = tonumber(s:match("MemAvailable:%s*(%d+)"))
  return total and total * 1024, avail and avail * 1024
end

local function read_number(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local v = tonumber(f:read("*l") or "")
  f:close()
  return v
end

function M.available_memory()
  local env = os.getenv("OUTLIERLAB_MEMORY")
  if env and env ~= "" then
    local n, unit = env:match("^(%d+%.?%d*)([KkMmGg]?)$")
    local mult = ({ k = 2 ^ 10, m = 2 ^ 20, g = 2 ^ 30 })[(unit or ""):lower()] or 1
    if not n then error("settings: $OUTLIERLAB_MEMORY = '" .. env .. "': expected bytes, or a number with K, M or G", 0) end
    return tonumber(n) * mult, tonumber(n) * mult, "$OUTLIERLAB_MEMORY"
  end
  local total, avail = meminfo()
  if not avail then return nil end
  local limit = read_number("/sys/fs/cgroup/memory.max")
  local used = read_number("/sys/fs/cgroup/memory.current")
  if limit and used and limit - used < avail then return limit - used, limit, "the cgroup's memory.max" end
  return avail, total, "MemAvailable"
end

local function gib(x)
  if x < 2 ^ 30 then return string.format("%.0f MiB", x / 2 ^ 20) end
  return string.format("%.1f GiB", x / 2 ^ 30)
end

-- error when the estimate does not fit what the machine can give now
function M.check_memory(spec, opts)
  opts = opts or {}
  local ranks = local_ranks()
  local group = opts.ranks
  if not group then
    local ok, dist = pcall(require, "outlierlab.util.dist")
    group = ok and dist.size() or 1
  end
  local est = M.estimate_memory(spec, { ranks = group })
  local need = est.total * ranks
  local avail, total, source = M.available_memory()
  est.need, est.available, est.machine = need, avail, total
  if avail and need > avail then
    fail(string.format("this run needs about %s (parameters and AdamW state %s, one micro-batch of %d×%d tokens' " ..
      "activations %s, data %s, process %s%s) but %s leaves %s of this machine's %s: lower the batch size " ..
      "or the sequence length (a trainer keeps its global batch with gradient accumulation, cfg.accum)",
      gib(need), gib(est.params), est.B, est.T, gib(est.activations), gib(est.data), gib(est.base),
      ranks > 1 and (", times " .. ranks .. " ranks on this machine") or "", source, gib(avail), gib(total)))
  end
  return est
end

-- sizes, data and recipe of one model spec, before any lock is taken or weight is built
-- (check_memory comes when the model is to be trained: a cached model needs no training memory)
function M.check_run(spec)
  if type(spec) ~= "table" or type(spec.batch) ~= "table" then fail("a model spec needs batch = { B =, T =, kind = }") end
  data_bounds.check_batch(spec.batch)
  data_bounds.check_data(spec.data, spec.batch)
  if spec.train ~= nil then M.check_train(spec.train) end
end

return M
