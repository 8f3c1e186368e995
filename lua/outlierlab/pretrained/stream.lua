-- stream — run a pretrained decoder larger than memory layer by layer from its memory-mapped
-- checkpoint (docs/reference/pretrained.md "Models larger than memory").
--
--   local stream = require "outlierlab.pretrained.stream"
--   local sm = stream.open("models/llama-2-7b")       -- every tensor's name, shape and dtype checked now
--   sm:probe(P, loader, n_batches)                     -- the probes of n batches, as probe_batches
--   for l, blk in sm:blocks() do ... blk.mlp.down.weight ... end   -- each layer's weights in turn
--   sm.cfg, sm:describe(), sm:close()
--
-- A model of this kind is a "skeleton" of the project's own model: the embeddings, the final
-- norm and ONE block, in fp32. The analysis keeps every batch's hidden state (B, T, C) in
-- memory and walks the layers once: for layer l it converts that layer's F16/BF16/F32 tensors
-- from the file's map into the block (engine/io_hf.c, all threads), hands the map's pages
-- back, and runs every batch through the block with the probes attached. Peak memory is the
-- skeleton (one layer + embeddings) plus the hidden states and one step's activations, not the
-- model: LLaMA-2-7B (13.5 GB of BF16, 27 GB as fp32) needs about 2.5 GB. Each layer's probes
-- see exactly the tensors an in-memory forward produces (the same kernels on the same inputs),
-- so the statistics equal the in-memory path's; only the order differs (layer-major instead of
-- batch-major), which per-layer accumulators do not see. Families: gpt2, opt, llama (and every
-- family hf imports into the llama model).
local ol = require "outlierlab"
local hf = require "outlierlab.pretrained.hf"
local models = require "outlierlab.models"
local progress = require "outlierlab.util.progress"
local C = ol.C

local M = {}
M.FAMILIES = { gpt2 = true, opt = true, llama = true }

-- resident set size of this process and its peak so far (bytes), from /proc/self/status
function M.rss()
  local f = io.open("/proc/self/status", "r")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  local cur, peak = s:match("VmRSS:%s*(%d+) kB"), s:match("VmHWM:%s*(%d+) kB")
  return cur and tonumber(cur) * 1024, peak and tonumber(peak) * 1024
end

-- memory the kernel can give without swapping (bytes), from /proc/meminfo
function M.mem_available()
  local f = io.open("/proc/meminfo", "r")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  local kb = s:match("MemAvailable:%s*(%d+) kB")
  return kb and tonumber(kb) * 1024
end

local Stream = {}
Stream.__index = Stream

local function copy(t) local o = {} for k, v in pairs(t) do o[k] = v end return o end

-- open(dir or an hf.open handle, {log = fn(fmt, ...), name =}) -> streamed model
function M.open(dir, opts)
  opts = opts or {}
  local d = type(dir) == "table" and dir or hf.open(dir, opts)
  local ok, res = pcall(function()
    local cfg = d.cfg
    if not M.FAMILIES[cfg.family] then
      error(string.format("stream: %s: a %s model is not streamed (gpt2, opt and llama are); it is loaded whole", d.dir, cfg.family), 0)
    end
    -- check the whole directory now (names, shapes, dtypes, extras), before any compute
    local used = {}
    d:check_finite(d:resolve(hf.entries(cfg, d.family), used))   -- every layer's values too: refused before any compute
    d:check_extra(used)
    local sk = copy(cfg)
    sk.n_layer = 1
    if cfg.family ~= "opt" then sk.tie_embeddings = true end   -- the head's logits are not needed
    local ctx = ol.Context{ params = models.count_params(sk) + 64 * 1024 * 16, seed = 1 }
    local m = models.build(ctx, sk)
    m:eval()
    m.cfg = cfg                       -- probes and checks see the real model's shape
    local self = setmetatable({ d = d, cfg = cfg, ctx = ctx, m = m, block = m.blocks[1], loaded = nil,
                                params = hf.params_by_name(ctx), log = opts.log, streamed = true, name = cfg.name }, Stream)
    -- the global tensors the skeleton has (not an untied lm_head)
    local global = {}
    for _, e in ipairs(hf.layout[d.family].global(cfg)) do   -- the directory's layout (phi3: fused tensors)
      local has = e.tied == nil and #e.parts > 0
      for _, p in ipairs(e.parts) do if not self.params[p.ours] then has = false end end
      if has then global[#global + 1] = e end
    end
    local filled = {}
    hf.fill(d, d:resolve(global), self.params, filled, { release = true })
    self.load_seconds, self.load_bytes = 0, 0
    return self
  end)
  if not ok then
    if type(dir) ~= "table" then d:close() end
    error(res, 0)
  end
  return res
end

function Stream:describe()
  local c = self.cfg
  return string.format("%s (%s, streamed layer by layer): %s parameters, %dL d%d %dH F%d V%d", c.name, c.family,
    models.commas(models.count_params(c)), c.n_layer, c.d_model, c.n_head, c.d_ff, c.vocab_size)
end
function Stream:num_params() return models.count_params(self.cfg) end

-- convert layer l (0-based) of the checkpoint into the skeleton's block
function Stream:load_layer(l)
  if self.loaded == l then return self.block end
  local t0 = progress.now()
  local entries = self.d:resolve(hf.layout[self.d.family].layer(self.cfg, l, 0))
  local filled = {}
  hf.fill(self.d, entries, self.params, filled, { release = true })
  for _, e in ipairs(entries) do self.load_bytes = self.load_bytes + (e.src and e.src.nbytes or 0) end
  self.load_seconds = self.load_seconds + (progress.now() - t0)
  self.loaded = l
  return self.block
end

-- for l, blk in sm:blocks() do ... end: every layer's weights in turn (l 1-based, as ipairs)
function Stream:blocks()
  local L = self.cfg.n_layer
  return function(_, i)
    if i >= L then return nil end
    return i + 1, self:load_layer(i)
  end, nil, 0
end

local function persistent_copy(ctx, t)
  if not ol.is_tensor(t) then return t end
  local p = ctx:tensor(t:size(), { persistent = true, dtype = t:dtype_name(), name = t:name_str() })
  return p:copy_(t)
end

-- Run the probes P (outlierlab.measure.probes) over n batches of loader (loader:next(ctx)),
-- layer-major. Each batch gets seq_offset = i·B (its first sequence's global index).
function Stream:probe(P, loader, n)
  local ctx, m, cfg = self.ctx, self.m, self.cfg
  local L = cfg.n_layer
  local batches, h = {}, {}
  local fn = P.fn
  local t_all = progress.now()
  local tokens = 0
  ctx:no_grad(function()
    for i = 1, n do
      ctx:reset()
      local b = loader:next(ctx)
      local pb = { seq_offset = (i - 1) * b.ids:size(0) }
      for k, v in pairs(b) do pb[k] = persistent_copy(ctx, v) end
      batches[i] = pb
      tokens = tokens + tonumber(pb.ids.numel)
      P:set_batch(pb)
      local x = m:embed(pb, { probe = fn, train = false })
      h[i] = persistent_copy(ctx, x)
      P:end_batch()
    end
    local t_fwd = 0
    for l = 0, L - 1 do
      self:load_layer(l)
      local t0 = progress.now()
      for i, pb in ipairs(batches) do
        ctx:reset()
        P:set_batch(pb)
        local y = self.block:forward(h[i], m, l, fn, pb.pad_mask)
        h[i]:copy_(y)
        P:end_batch()
      end
      t_fwd = t_fwd + (progress.now() - t0)
      if self.log then
        local el = progress.now() - t_all
        local _, peak = M.rss()
        self.log("layer %d/%d: %.1f s (load %.1f s), %.0f tokens/s, ETA %.0f s, peak RSS %.2f GB", l + 1, L, el,
          self.load_seconds, tokens * (l + 1) / math.max(t_fwd, 1e-9), el / (l + 1) * (L - l - 1), (peak or 0) / 2 ^ 30)
      end
    end
    local norm = m.ln_f or m.norm
    for i, pb in ipairs(batches) do
      ctx:reset()
      P:set_batch(pb)
      local x = norm and norm:forward(h[i]) or h[i]
      fn("ln_f", L, x)
      P:end_batch()
    end
  end)
  ctx:reset()
  self.last = { tokens = tokens, seconds = progress.now() - t_all, load_seconds = self.load_seconds }
  return self.last
end

function Stream:close()
  if self.d then self.d:close() self.d = nil end
end

return M
