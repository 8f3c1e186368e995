-- train — the training loop: AdamW steps with gradient accumulation, clipping and a warmup +
-- decay schedule, periodic evaluation, atomic checkpoints, bit-identical resume, and a stop
-- on divergence. The papers' recipes (docs/reference/experiments.md, "Paper-scale settings") are configurations of this one loop.
--
--   local train = require "outlierlab.train.loop"
--   local res = train.run{ ctx = ctx, model = m, loader = tr, val_loader = va,
--                          cfg = { steps = 2000, lr = 6e-4, warmup = 100, accum = 2, clip = 1.0,
--                                  eval_every = 200, ckpt_every = 500 },
--                          ckpt = "runs/gpt2/ckpt.safetensors" }
--   -- res.losses[s] = training loss of step s, res.val = { {step=, loss=, ppl=|acc=}, ... }
--
-- One optimizer step s (1-based) is:
--   zero the flat gradient buffer;
--   for each of cfg.accum micro-batches: ctx:reset() (frees the step arena), batch =
--     loader:next(ctx), loss = model:loss(batch, {train = true}), check the loss is finite,
--     loss:backward() (gradients accumulate, +=, in the flat buffer);
--   ctx:reset(); scale the gradients by 1/accum; global norm (clipped to cfg.clip when > 0),
--     check it is finite; AdamW step with lr = schedule(s).
-- The reported step loss is the mean of the micro-batch losses. See docs/reference/training.md.
local ol = require "outlierlab"
local optim = require "outlierlab.optim"
local progress = require "outlierlab.util.progress"
local ffi = require "ffi"
local C = ol.C

local M = {}

-- Defaults: nanoGPT's GPT-2 recipe (SO). Every key here may be set in cfg; any other key is
-- an error (a misspelt option must not be silently ignored).
M.defaults = {
  steps = 0,                  -- optimizer steps to reach (required, >= 1)
  lr = 6e-4,                  -- peak learning rate
  min_lr = false,             -- end of the decay; false = lr/10 (nanoGPT); 0 for BERT/OPT linear decay
  warmup = 0,                 -- linear warmup steps (lr·s/warmup)
  schedule = "cosine",        -- cosine | linear | constant | wsd (after warmup)
  cooldown = 0,               -- wsd: the last this many steps decay linearly from lr to min_lr
  betas = { 0.9, 0.95 },
  eps = 1e-8,
  weight_decay = 0.1,         -- decoupled, on parameters with >= 2 dims
  optimizer = "adamw",        -- adamw | muon | orthoadam (outlierlab.nn.optim_extra, docs/reference/training.md)
  optimizer_opts = {},        -- their own options (muon: momentum, ns_steps, scale, …; orthoadam: seed, …)
  decay_norm_gains = false,   -- also decay LayerNorm/RMSNorm gains (QT's OPT runs)
  embed_weight_decay = false, -- a number: the token embeddings' own decoupled decay (optim.AdamW)
  clip = 1.0,                 -- max global gradient norm; 0 = no clipping
  accum = 1,                  -- micro-batches per optimizer step
  shards = 0,                 -- rank invariance: the global batch as this many fixed shards (a power of two, a
                              -- multiple of the rank count) whose gradients are added as a fixed tree, so e.g.
                              -- shards = 4 gives the same bits on 1, 2 and 4 ranks; 0 = off: one shard per rank,
                              -- summed by MPI_Allreduce (see docs/reference/training.md)
  eval_every = 0,             -- evaluate every n steps (0: only at the end) when val_loader is given
  eval_batches = 8,           -- validation batches per evaluation (the same batches every time)
  ckpt_every = 0,             -- checkpoint every n steps (0: only at the end) when ckpt is given
  log_every = 10,             -- plain log line every n steps (when stdout is not a terminal)
  flush_subnormals = false,   -- train with flush-to-zero on every thread (engine ol_set_flush_subnormals:
                              -- results below FLT_MIN become 0; avoids the CPU's slow path, changes the
                              -- numbers where subnormals occur; docs/reference/training.md, "Subnormals")
  progress = "auto",          -- auto | tty | plain | off
}

local function is_finite(x) return x == x and x ~= math.huge and x ~= -math.huge end
M.is_finite = is_finite

local function file_exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

-- cfg merged over the defaults, with every key and type checked
function M.config(cfg)
  cfg = cfg or {}
  local out = {}
  for k, v in pairs(M.defaults) do out[k] = v end
  local valid = {}
  for k in pairs(M.defaults) do valid[#valid + 1] = k end
  table.sort(valid)
  for k, v in pairs(cfg) do
    local d = M.defaults[k]
    if d == nil then
      error(string.format("train: unknown cfg key '%s'; valid keys: %s", tostring(k), table.concat(valid, ", ")), 3)
    end
    local want = type(d)
    if k == "min_lr" or k == "embed_weight_decay" then want = "number" end
    if type(v) ~= want and not ((k == "min_lr" or k == "embed_weight_decay") and v == false) then
      error(string.format("train: cfg.%s must be a %s, got %s", k, want, tostring(v)), 3)
    end
    out[k] = v
  end
  if out.steps < 1 or out.steps ~= math.floor(out.steps) then
    error("train: cfg.steps must be an integer >= 1, got " .. tostring(out.steps), 3)
  end
  if out.accum < 1 or out.accum ~= math.floor(out.accum) then
    error("train: cfg.accum must be an integer >= 1, got " .. tostring(out.accum), 3)
  end
  if out.clip < 0 then error("train: cfg.clip must be >= 0, got " .. out.clip, 3) end
  if out.shards < 0 or out.shards ~= math.floor(out.shards) or (out.shards > 0 and bit.band(out.shards, out.shards - 1) ~= 0) then
    error("train: cfg.shards must be 0 or a power of two, got " .. tostring(out.shards), 3)
  end
  if out.shards > 1 and out.accum > 1 then
    error("train: cfg.shards > 1 with cfg.accum > 1 is not supported (use a larger batch and more shards)", 3)
  end
  for _, k in ipairs { "eval_every", "ckpt_every", "log_every", "eval_batches", "warmup" } do
    if out[k] < 0 or out[k] ~= math.floor(out[k]) then
      error(string.format("train: cfg.%s must be an integer >= 0, got %s", k, tostring(out[k])), 3)
    end
  end
  -- values that would train silently wrong: every number finite, a positive learning rate,
  -- a warmup inside the run, moments' betas in [0, 1)
  for _, k in ipairs { "steps", "lr", "eps", "weight_decay", "clip", "warmup", "min_lr" } do
    if type(out[k]) == "number" and not is_finite(out[k]) then
      error(string.format("train: cfg.%s must be a finite number, got %s", k, tostring(out[k])), 3)
    end
  end
  if not (out.lr > 0) then error("train: cfg.lr (the learning rate) must be > 0, got " .. tostring(out.lr), 3) end
  if out.warmup > out.steps then
    error(string.format("train: cfg.warmup = %d is more than cfg.steps = %d (the run would end inside its warmup)", out.warmup, out.steps), 3)
  end
  if out.min_lr ~= false and (out.min_lr < 0 or out.min_lr > out.lr) then
    error(string.format("train: cfg.min_lr must be in [0, lr = %g], got %g", out.lr, out.min_lr), 3)
  end
  if out.eps <= 0 then error("train: cfg.eps must be > 0, got " .. tostring(out.eps), 3) end
  if out.weight_decay < 0 then error("train: cfg.weight_decay must be >= 0, got " .. tostring(out.weight_decay), 3) end
  if out.embed_weight_decay ~= false and not (is_finite(out.embed_weight_decay) and out.embed_weight_decay >= 0) then
    error("train: cfg.embed_weight_decay must be a finite number >= 0, got " .. tostring(out.embed_weight_decay), 3)
  end
  if type(out.betas) ~= "table" or #out.betas ~= 2 then error("train: cfg.betas must be two numbers {beta1, beta2}", 3) end
  for i, b in ipairs(out.betas) do
    if type(b) ~= "number" or not (b >= 0 and b < 1) then
      error(string.format("train: cfg.betas[%d] must be in [0, 1), got %s", i, tostring(b)), 3)
    end
  end
  if not optim.SCHEDULES[out.schedule] then
    error("train: cfg.schedule must be cosine, linear, constant or wsd, got " .. tostring(out.schedule), 3)
  end
  local bad = out.schedule == "wsd" and optim.cooldown_problem(out.steps, out.warmup, out.cooldown)
  if bad then error("train: cfg.schedule wsd needs cfg.cooldown, " .. bad, 3) end
  if out.min_lr == false then out.min_lr = out.lr / 10 end
  return out
end

-- ---------------------------------------------------------------- RNG / dropout counters
-- The models (models/common.lua) draw dropout masks from (cfg.seed, opts.step, site): the
-- loop passes opts.step = the global micro-batch number, (step-1)·accum + micro, so a
-- resumed run draws the same masks without any saved state. nn.Dropout modules draw from
-- (seed, call counter) instead: a resumed run must continue the counters. A model may provide rng_state()/set_rng_state(s); otherwise every
-- nn.Dropout reachable from the model is found by a walk in sorted key order (the same
-- paths in the run that saves and the run that resumes).
local function walk_dropouts(model)
  local nn = require "outlierlab.nn"
  local found, seen = {}, {}
  local function walk(t, path, depth)
    if seen[t] or depth > 12 then return end
    seen[t] = true
    if getmetatable(t) == nn.Dropout then found[#found + 1] = { path = path, m = t } return end
    local keys = {}
    for k, v in pairs(t) do
      if type(v) == "table" and k ~= "ctx" and k ~= "cfg" then keys[#keys + 1] = k end
    end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(keys) do walk(t[k], path .. "." .. tostring(k), depth + 1) end
  end
  walk(model, "model", 0)
  return found
end

function M.rng_state(model)
  if model.rng_state then return { model = model:rng_state() } end
  local s = {}
  for _, d in ipairs(walk_dropouts(model)) do s[d.path] = d.m.calls end
  return { dropout = s, nforward = type(model.nforward) == "number" and model.nforward or nil }
end

function M.set_rng_state(model, s)
  if type(s) ~= "table" then return end
  if s.model ~= nil then
    if not model.set_rng_state then error("train: the checkpoint has a model RNG state but the model has no set_rng_state", 2) end
    model:set_rng_state(s.model)
    return
  end
  for _, d in ipairs(walk_dropouts(model)) do
    local c = s.dropout and s.dropout[d.path]
    if c ~= nil then d.m.calls = c end
  end
  if s.nforward ~= nil then model.nforward = s.nforward end
end

-- ---------------------------------------------------------------- batches
-- items a batch contributes to the throughput: tokens (ids) or images
local function batch_items(batch)
  if batch.ids ~= nil then return tonumber(batch.ids.numel), "tok/s" end
  if batch.images ~= nil then return tonumber(batch.images.shape[0]), "img/s" end
  return 0, "items/s"
end
M.batch_items = batch_items

-- ---------------------------------------------------------------- evaluation
local decoder_families = { gpt2 = true, opt = true, llama = true }

-- top-1 over the rows of logits (B, K) against labels (B) int32 (−100 = ignored):
-- (correct, counted). Ties go to the lowest class index.
local function top1(logits, labels)
  local nb, k = tonumber(logits.shape[0]), tonumber(logits.shape[1])
  local correct, n = 0, 0
  for b = 0, nb - 1 do
    local lab = labels.idata[b]
    if lab ~= -100 then
      local best, arg = logits.data[b * k], 0
      for j = 1, k - 1 do
        local v = logits.data[b * k + j]
        if v > best then best, arg = v, j end
      end
      n = n + 1
      if arg == lab then correct = correct + 1 end
    end
  end
  return correct, n
end
M.top1 = top1

-- Evaluates n batches of loader without gradients, in eval mode (no dropout). Returns
--   { loss = token-weighted mean loss, ntokens =, ppl = exp(loss) }       decoders (gpt2,
--     opt, llama) and BERT (MLM: loss, count and perplexity over the masked tokens only, as
--     m:loss reports them; also mlm_loss)
--   { loss =, ntokens =, acc = top-1 accuracy, n = images }                ViT
-- The weight of a batch is info.ntokens (else 1). ViT accuracy is the argmax of info.logits
-- (B, n_classes) against batch.labels (or info.correct/info.n when a model reports them).
function M.evaluate(ctx, model, loader, n)
  local family = model.cfg and model.cfg.family
  local sum, cnt, correct, ncls = 0, 0, 0, 0
  for _ = 1, n do
    ctx:reset()
    local batch = loader:next(ctx)
    local lv, info, c, k = ctx:no_grad(function()
      local loss, info = model:loss(batch, { train = false })
      info = info or {}
      local c, k
      if info.correct ~= nil then
        c, k = info.correct, info.n
      elseif family == "vit" and info.logits ~= nil and batch.labels ~= nil then
        c, k = top1(info.logits, batch.labels)
      end
      return loss:item(), info, c, k
    end)
    local w = info.ntokens or 1
    sum, cnt = sum + lv * w, cnt + w
    if c ~= nil then correct, ncls = correct + c, ncls + (k or w) end
  end
  ctx:reset()
  local r = { loss = cnt > 0 and sum / cnt or 0 / 0, ntokens = cnt, batches = n }
  if family == "vit" or ncls > 0 then
    if ncls == 0 then error("train.evaluate: the " .. tostring(family) .. " model's loss reports neither info.logits nor info.correct: cannot compute top-1 accuracy", 2) end
    r.acc, r.n = correct / ncls, ncls
  end
  if family ~= "vit" then r.ppl = math.exp(r.loss) end
  if family == "bert" then r.mlm_loss = r.loss end
  return r
end

local function eval_text(step, r)
  local s = string.format("eval step %d | val loss %.4f", step, r.loss)
  if r.ppl then s = s .. string.format(" | ppl %.3f", r.ppl) end
  if r.acc then s = s .. string.format(" | top-1 %.2f%%", 100 * r.acc) end
  return s
end

-- ---------------------------------------------------------------- parameters finite
local function params_finite(ctx)
  local p = C.ol_params_data(ctx.raw)
  local n = tonumber(C.ol_params_numel(ctx.raw))
  local inf = math.huge
  for i = 0, n - 1 do
    local x = p[i]
    if x ~= x or x == inf or x == -inf then return false, i end
  end
  return true
end
M.params_finite = params_finite

-- ---------------------------------------------------------------- MPI
-- The data-parallel layer (outlierlab.util.dist) when it is built in: gradients are averaged over
-- the ranks (one allreduce of the flat buffer) before clipping, only rank 0 writes
-- checkpoints, and a watched signal (Slurm --signal=USR1@...) makes every rank save and stop.
local function dist_layer()
  local ok, d = pcall(require, "outlierlab.util.dist")
  if not ok or type(d) ~= "table" then return nil end
  local ok2, n = pcall(d.size)
  if not ok2 then return nil end
  return d, n
end

-- ---------------------------------------------------------------- rank-invariant shards
-- A batch's tensors (every field with `rows` leading rows) copied to host strings, and shard j
-- of k rebuilt from them as step tensors (rows j·rows/k ...), so that each shard's forward and
-- backward run after a ctx:reset().
local tensor_t = ffi.typeof("ol_tensor")
local function save_batch(batch, rows)
  local saved = {}
  for key, v in pairs(batch) do
    if type(v) == "cdata" and ffi.istype(tensor_t, v) and v.ndim >= 1 and tonumber(v.shape[0]) == rows then
      local shape = {}
      for d = 0, v.ndim - 1 do shape[d + 1] = tonumber(v.shape[d]) end
      saved[key] = { shape = shape, dtype = v.dtype == 1 and "i32" or "f32", bytes = ffi.string(v.data, v.numel * 4),
                     name = ffi.string(v.name) }
    else
      saved[key] = { value = v }
    end
  end
  return saved
end
local function shard_batch(ctx, saved, j, k)
  local b = {}
  for key, e in pairs(saved) do
    if e.value ~= nil then b[key] = e.value
    else
      local shape = { unpack(e.shape) }
      shape[1] = shape[1] / k
      local t = ctx:tensor(shape, { dtype = e.dtype, name = e.name })
      local per = #e.bytes / k
      ffi.copy(t.data, ffi.cast("const char *", e.bytes) + j * per, per)
      b[key] = t
    end
  end
  return b
end

-- ---------------------------------------------------------------- the loop
local known_args = { ctx = true, model = true, loader = true, val_loader = true, cfg = true,
                     ckpt = true, log = true, on_step = true, decay = true, out = true, stop_after = true }

-- train.run{ ctx, model, loader, val_loader = nil, cfg = {...}, ckpt = path or nil,
--            log = fn(record) or nil, on_step = fn(step, record) or nil,
--            decay = fn(p) -> bool or nil (replaces the >= 2-D weight decay rule),
--            stop_after = n or nil (stop after step n, as a signal would: bench/organism.lua times
--            the first steps of a recipe with the full recipe's schedules and cadences) }
-- -> { losses = {[s] = loss}, lrs =, gnorms =, val = { {step=, loss=, ...} }, step = n,
--      resumed_from = step or nil, tok_s = mean throughput of this process's steps }
-- Records given to log: {kind="step", step, loss, lr, gnorm, dt, items, tok_s},
-- {kind="eval", step, loss, ppl|acc, ...}, {kind="ckpt", step, path}, {kind="resume", step, path}.
function M.run(a)
  if type(a) ~= "table" then error("train.run: expected a table of arguments", 2) end
  for k in pairs(a) do
    if not known_args[k] then error("train.run: unknown argument '" .. tostring(k) .. "'", 2) end
  end
  local ctx, model, loader = a.ctx, a.model, a.loader
  if type(ctx) ~= "table" or ctx.raw == nil then error("train.run: ctx must be an outlierlab Context", 2) end
  if type(model) ~= "table" or type(model.loss) ~= "function" then error("train.run: model must have a loss(batch, opts) method", 2) end
  if type(loader) ~= "table" or type(loader.next) ~= "function" then error("train.run: loader must have a next(ctx) method", 2) end
  local cfg = M.config(a.cfg)
  local log = a.log or function() end
  -- the run's floating-point mode on every thread, whatever an earlier run left; the caller's
  -- mode comes back when the run returns
  local fp_prev = C.ol_flushes_subnormals()
  C.ol_set_flush_subnormals(cfg.flush_subnormals and 1 or 0)

  local oopts = { lr = cfg.lr, betas = cfg.betas, eps = cfg.eps, weight_decay = cfg.weight_decay,
                  decay_norm_gains = cfg.decay_norm_gains, decay = a.decay }
  if cfg.embed_weight_decay then oopts.embed_weight_decay = cfg.embed_weight_decay end
  for k, v in pairs(cfg.optimizer_opts) do oopts[k] = v end
  local opt = require("outlierlab.nn.optim_extra").new(cfg.optimizer, ctx, oopts)
  local lr_at = optim.schedule { kind = cfg.schedule, lr = cfg.lr, min_lr = cfg.min_lr, warmup = cfg.warmup,
                                 steps = cfg.steps, cooldown = cfg.cooldown }
  local res = { losses = {}, lrs = {}, gnorms = {}, val = {}, step = 0 }
  local start = 0
  local last_good = nil        -- step of the checkpoint on disk (for the divergence message)

  -- resume
  local checkpoint
  if a.ckpt then checkpoint = require "outlierlab.train.checkpoint" end
  if a.ckpt and file_exists(a.ckpt) then
    local meta = checkpoint.load(a.ckpt, ctx)
    if type(meta) ~= "table" or type(meta.step) ~= "number" then
      error("train.run: checkpoint " .. a.ckpt .. " has no step in its metadata", 2)
    end
    start = meta.step
    if meta.optim then opt:load_state(meta.optim) end
    if meta.data ~= nil then
      if not loader.set_state then error("train.run: resuming from " .. a.ckpt .. " needs loader:set_state", 2) end
      loader:set_state(meta.data)
    end
    local extra = meta.extra or {}
    M.set_rng_state(model, extra.rng)
    for _, name in ipairs { "losses", "lrs", "gnorms" } do
      if type(extra[name]) == "table" then
        for i = 1, math.min(#extra[name], start) do res[name][i] = extra[name][i] end
      end
    end
    if type(extra.val) == "table" then res.val = extra.val end
    res.resumed_from = start
    last_good = start
    log { kind = "resume", step = start, path = a.ckpt }
  end
  res.step = start

  local is_rank0 = progress.is_rank0()
  -- the rank that writes checkpoints: rank 0 of this run's group (the world, or a sweep group)
  local dl = dist_layer()
  local writes = dl and dl.rank() == 0 or (not dl and is_rank0)
  local val_state0 = a.val_loader and a.val_loader.state and a.val_loader:state()
  local prog = progress.new { total = cfg.steps, every = cfg.log_every, mode = cfg.progress, start_step = start }
  if res.resumed_from then prog:note(string.format("resumed from %s at step %d", a.ckpt, start)) end

  local function diverged(step, what)
    prog:finish()
    local where
    if not a.ckpt then where = "no checkpoint path was given"
    elseif last_good then where = string.format("the last good checkpoint %s (step %d) was left untouched", a.ckpt, last_good)
    else where = "no checkpoint had been written yet (" .. a.ckpt .. " does not exist)" end
    error(string.format("train: step %d: %s: training diverged and was stopped; %s", step, what, where), 0)
  end

  local function evaluate(step)
    if a.val_loader.set_state and val_state0 ~= nil then a.val_loader:set_state(val_state0) end
    local r = M.evaluate(ctx, model, a.val_loader, math.max(1, cfg.eval_batches))
    r.step = step
    if not (r.ntokens > 0) then
      prog:finish()
      error(string.format("train: step %d: the %d validation batches hold no prediction targets (empty batches): " ..
                          "the validation split or the batch is too small", step, r.batches), 0)
    end
    if not is_finite(r.loss) then diverged(step, "the validation loss is " .. tostring(r.loss)) end
    if r.ppl and not is_finite(r.ppl) then
      diverged(step, string.format("the validation loss is %.4g (its perplexity overflows)", r.loss))
    end
    res.val[#res.val + 1] = r
    prog:note(eval_text(step, r))
    local rec = { kind = "eval" }
    for k, v in pairs(r) do rec[k] = v end
    log(rec)
    return r
  end

  local function save(step)
    local ok, i = params_finite(ctx)
    if not ok then diverged(step, string.format("parameter %d is not finite after the update", i)) end
    -- data parallel: every rank must hold the same parameters; a checksum is compared across
    -- the ranks (an error names the rank that differs) and recorded in the checkpoint
    local checksum
    if dl then
      if dl.size() > 1 then dl.check_params(ctx) end
      checksum = dl.checksum(ctx)
    end
    if not writes then last_good = step return end
    local extra = { rng = M.rng_state(model), losses = res.losses, lrs = res.lrs, gnorms = res.gnorms, val = res.val,
                    param_checksum = checksum, ranks = dl and dl.size() or 1 }
    checkpoint.save(a.ckpt, ctx, { config = { train = cfg, model = model.cfg }, step = step, optim = opt:state(),
                                   data = loader.state and loader:state() or nil, extra = extra })
    last_good = step
    log { kind = "ckpt", step = step, path = a.ckpt }
  end

  local dist, nranks = dist_layer()
  nranks = nranks or 1
  local accum, inv_accum = cfg.accum, 1 / cfg.accum
  -- rank-invariant shards: this rank computes shards [rank·k, (rank+1)·k) of the S = cfg.shards
  -- (S = -1: off, one shard per rank summed by MPI_Allreduce, not rank-invariant)
  local S, k_local, shard0 = cfg.shards, 1, 0
  if S > 0 and (S % nranks ~= 0) then
    error(string.format("train: cfg.shards = %d is not a multiple of the %d ranks", S, nranks), 2)
  end
  if S == 0 or (S == 1 and accum > 1) then S = -1 end
  if S > 0 then
    k_local = S / nranks
    shard0 = dist and dist.rank() * k_local or 0
  end
  local t_items, t_time = 0, 0
  local red = ffi.new("double[2]")
  for step = start + 1, cfg.steps do
    local t0 = progress.now()
    ctx:zero_grad()
    local lsum, items, unit = 0, 0, "tok/s"
    local shard_losses, shard_counts = {}, {}
    -- forward and backward of one (micro-)batch; opts.step numbers the global micro-batch (and,
    -- with shards, the shard: the same dropout masks on any rank count). A shard's gradient is
    -- weighted by its count of prediction targets (the mean over the global batch, also when
    -- shards count differently, as BERT's masked tokens do); a shard without targets adds nothing.
    local function fwd_bwd(batch, micro, gstep, shard)
      local loss, info = model:loss(batch, { train = true, step = gstep })
      local n, u = batch_items(batch)
      if shard then
        local cnt = type(info) == "table" and info.ntokens or n
        shard_counts[shard] = cnt
        items, unit = items + n, u
        if cnt == 0 then shard_losses[shard] = 0 return end
        local lv = loss:item()
        if not is_finite(lv) then diverged(step, string.format("the loss is %s (shard %d)", tostring(lv), shard)) end
        loss:backward()
        shard_losses[shard] = lv
        if cnt ~= 1 then C.ol_grad_scale(ctx.raw, cnt) end
        return
      end
      local no_items = n == 0 and (batch.ids ~= nil or batch.images ~= nil)
      if no_items or (type(info) == "table" and info.ntokens == 0) then
        prog:finish()
        error(string.format("train: step %d: micro-batch %d of %d is empty (%s): the batch size or sequence length is too " ..
                            "small for this data", step, micro, accum, no_items and "no " .. (u == "img/s" and "images" or "tokens")
                            or "no prediction targets"), 0)
      end
      local lv = loss:item()
      if not is_finite(lv) then
        diverged(step, string.format("the loss is %s (micro-batch %d of %d)", tostring(lv), micro, accum))
      end
      loss:backward()
      lsum = lsum + lv
      items, unit = items + n, u
      return lv
    end
    for micro = 1, accum do
      ctx:reset()
      local batch = loader:next(ctx)
      if S < 0 then
        fwd_bwd(batch, micro, (step - 1) * accum + micro)
      elseif k_local == 1 then
        fwd_bwd(batch, micro, (step - 1) * S + shard0 + 1, 1)
      else
        local rows = batch.ids ~= nil and tonumber(batch.ids.shape[0]) or batch.images ~= nil and tonumber(batch.images.shape[0])
        if not rows or rows % k_local ~= 0 then
          error(string.format("train: step %d: cfg.shards = %d: this rank's batch of %s rows does not split into %d shards",
                              step, S, tostring(rows), k_local), 0)
        end
        local saved = save_batch(batch, rows)
        for j = 0, k_local - 1 do
          ctx:reset()
          fwd_bwd(shard_batch(ctx, saved, j, k_local), micro, (step - 1) * S + shard0 + j + 1, j + 1)
          ol.check_status(C.ol_grad_shard_push(ctx.raw))
        end
        ol.check_status(C.ol_grad_shard_finish(ctx.raw))
      end
    end
    ctx:reset()
    if accum > 1 then C.ol_grad_scale(ctx.raw, inv_accum) end
    if S > 0 then
      -- every shard's loss and count, in shard order (the same lists on any rank count)
      if nranks > 1 then
        shard_losses = dist.allgather_list(shard_losses)
        shard_counts = dist.allgather_list(shard_counts)
        red[0] = items
        dist.allreduce_f64(red, 1, "sum")
        items = red[0]
      end
      local total = 0
      lsum = 0
      for j, l in ipairs(shard_losses) do lsum, total = lsum + l * shard_counts[j], total + shard_counts[j] end
      if total == 0 then
        prog:finish()
        error(string.format("train: step %d: the batch is empty (no prediction targets in any of its %d shards): the batch " ..
                            "size or sequence length is too small for this data", step, S), 0)
      end
      lsum = lsum / total
      -- the ranks' subtrees added as the top of the fixed tree; the count-weighted sum / total
      ol.check_status(C.ol_dist_allreduce_grads_tree(ctx.raw, 1 / total))
    elseif nranks > 1 then
      dist.allreduce_grads(ctx, true)
      -- the step's loss and item count over the global batch, not this rank's shard
      red[0], red[1] = lsum, items
      dist.allreduce_f64(red, 2, "sum")
      lsum, items = red[0] / nranks, red[1]
    end
    -- the clipping factor is applied inside the AdamW pass (no pass of its own)
    local gnorm, gscale = optim.clip_factor(ctx, cfg.clip)
    ctx:reset()
    if not is_finite(gnorm) then diverged(step, "the gradient norm is " .. tostring(gnorm)) end
    local lr = lr_at(step)
    opt:step(lr, gscale)
    local dt = progress.now() - t0
    t_items, t_time = t_items + items, t_time + dt
    local loss = lsum / accum
    res.losses[step], res.lrs[step], res.gnorms[step], res.step = loss, lr, gnorm, step
    local rec = { kind = "step", step = step, loss = loss, lr = lr, gnorm = gnorm, dt = dt, items = items,
                  tok_s = dt > 0 and items / dt or 0, unit = unit }
    prog:step(rec)
    log(rec)
    if a.val_loader and cfg.eval_every > 0 and step % cfg.eval_every == 0 and step < cfg.steps then evaluate(step) end
    -- on_step before the step's checkpoint: what it records for this step (the runner's tracked
    -- phenomena) is on disk before a checkpoint says the step is done, so a run killed between
    -- the two redoes the step from the previous checkpoint instead of skipping its record
    if a.on_step then a.on_step(step, rec) end
    if a.ckpt and cfg.ckpt_every > 0 and step % cfg.ckpt_every == 0 and step < cfg.steps then save(step) end
    if a.stop_after and step >= a.stop_after then break end
    if dist and dist.signal_pending and step < cfg.steps and dist.signal_pending() > 0 then
      prog:note(string.format("signal received: saving a checkpoint at step %d and stopping", step))
      res.stopped_by_signal = step
      if dist.clear_signal then dist.clear_signal() end   -- handled: a later run in this process trains normally
      break
    end
  end
  prog:finish()
  if a.val_loader and res.step > start then evaluate(res.step)
  elseif a.val_loader and #res.val == 0 then evaluate(res.step) end
  if a.ckpt and res.step > start then save(res.step) end
  res.tok_s = t_time > 0 and t_items / t_time or 0
  C.ol_set_flush_subnormals(fp_prev)
  return res
end

return M
