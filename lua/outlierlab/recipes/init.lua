-- recipes — the papers' and the model organism's model specs and the one way to train and load
-- them: the shared profiles (LLAMA_LM_PROFILES, BERT_MLM_PROFILES), the spec functions,
-- recipes.fit(run, spec) (train or reuse through run:model), recipes.load(spec, handle) and
-- (the model config of a spec is models.spec_cfg). The QT / SO / ViT specs: outlierlab.recipes.papers.
local ol = require "outlierlab"
local config = require "outlierlab.config"
local dist = require "outlierlab.util.dist"
local fs = require "outlierlab.util.fs"
local serialize = require "outlierlab.util.serialize"
local batcher = require "outlierlab.data.batcher"
local bounds = require "outlierlab.train.bounds"
local tracked = require "outlierlab.recipes.track"

local M = {}


local function load_data(path)
  local s = fs.read_file(path)
  if not s then return nil end
  return serialize.deserialize(s, "@" .. path)
end

-- ---------------------------------------------------------------- shared models
-- Figures that analyse the same trained model take its settings from here, so that they
-- hash to the same cached model and cannot drift apart.

-- Every shared profile carries the settings of both data sources, so that --data=corpus or
-- --data=organism switches a profile's data from the command line: the organism task
-- (data.organism: vocab_size, n_triggers, groups, alpha, p_trigger, n_delim, p_delim, n_weak, p_weak) and
-- the generated corpus (n_tokens, vocab_size). data_seed seeds either.
local ORGANISM_TASK = { vocab_size = 128, n_triggers = 24, groups = 6, alpha = 0.1, p_trigger = 0.12, n_delim = 0,
                        p_delim = 0.1, n_weak = 0, p_weak = 0.1, data_seed = 1,
                        p_text = 0 }   -- > 0: that share of the LM rows King James text (data/mix.lua)
local function with_task(t, task)
  local o = config.deep_copy(ORGANISM_TASK)
  for k, v in pairs(task or {}) do o[k] = v end
  for k, v in pairs(t) do o[k] = v end
  return o
end
M.ORGANISM_TASK = ORGANISM_TASK

-- The training recipe of a shared profile: warmup, then the schedule (cosine to lr/10, linear to
-- 0, constant, or wsd: constant, then linear to 0 over the last cooldown steps), AdamW with
-- β = (0.9, beta2), decoupled weight decay on >= 2-D parameters, clip 1. The default profiles (the model organism, docs/findings/organism.md) train at a constant high
-- learning rate with weight decay; the paper profiles keep the papers' recipes.
local function recipe(cfg, o)
  local schedule = cfg.schedule or o.schedule
  return { steps = cfg.steps, lr = cfg.lr, warmup = cfg.warmup, schedule = schedule,
           min_lr = (schedule == "linear" or schedule == "wsd") and 0 or nil,
           -- wsd's decay (optim.schedule): absent for the other schedules, so their specs (and
           -- hashes) stay what they were before the key existed
           cooldown = schedule == "wsd" and cfg.cooldown or nil,
           weight_decay = cfg.weight_decay or o.weight_decay, betas = { 0.9, cfg.beta2 or o.beta2 },
           eps = o.eps, clip = 1.0,
           -- the token embeddings' own decay (optim.AdamW), only when a profile sets it
           embed_weight_decay = cfg.embed_weight_decay,
           -- the remedies' optimizers (docs/reference/training.md); absent = AdamW, and the spec (and its
           -- hash) stays what it was before these keys existed
           optimizer = cfg.optimizer, optimizer_opts = cfg.optimizer_opts }
end
M.recipe = recipe
local function overrides(cfg, base)
  local ov = base or {}
  -- the organism map's depth knob; the BERT profiles' --n_layer (0: the preset's depth)
  if cfg.n_layer and cfg.n_layer > 0 then ov.n_layer = cfg.n_layer end
  if cfg.norm_gain then ov.norm_gain = cfg.norm_gain end   -- single-scale RMSNorm (llama)
  if cfg.embed_proj then ov.embed_proj = true end           -- Park et al.'s orthogonal projections (llama)
  -- the norm variants and residual clipping (nn/norms.lua), only when set away from their defaults
  for k, d in pairs(require("outlierlab.nn.norms").CONFIG_DEFAULTS) do if cfg[k] ~= nil and cfg[k] ~= d then ov[k] = cfg[k] end end
  -- a fixed factor on the token embedding (llama; docs/findings/organism.md, "Why the ratio stops")
  if cfg.embed_scale and cfg.embed_scale > 0 then ov.embed_scale = cfg.embed_scale end
  -- its width and heads knobs (only when set: other specs keep their hash)
  if cfg.d_model then ov.d_model, ov.d_ff = cfg.d_model, cfg.d_ff or 4 * cfg.d_model end
  if cfg.n_head then ov.n_head = cfg.n_head; if cfg.n_kv_head == nil then ov.n_kv_head = cfg.n_head end end
  local gain = M.init_gain(cfg, ov)
  if gain then ov.init_gain = gain end
  return ov
end

-- --scale_rule: "paper" keeps the papers' absolute initialisation (std 0.02 at any width);
-- "width" applies the width-translation rule (models.width_gain: the block projections' init
-- × √(d_paper/d), so that the attention scores spread at the start as in the paper's model;
-- docs/reference/models.md). Returns the gain for a spec's overrides, or nil for "paper" (the
-- spec and its hash then stay what they were before the rule existed).
function M.init_gain(cfg, ov)
  local rule = cfg.scale_rule or "paper"
  if rule == "paper" then return nil end
  if rule ~= "width" then
    error(string.format("--scale_rule must be 'paper' or 'width', got '%s'", tostring(rule)), 0)
  end
  local o = {}
  for k, v in pairs(ov or {}) do o[k] = v end
  o.init_gain = nil
  local models = require "outlierlab.models"
  local gain = models.width_gain(models.preset(cfg.preset, o))
  if gain ~= 1 then return gain end
end

-- QT's BERT pre-training recipe (docs/reference/experiments.md, paper-scale settings: AdamW β (0.9, 0.999),
-- ε 1e-6, wd 0.01, linear decay to 0, clip 1) with MLM batches (qt-fig1, qt-fig2, qt-fig10-13 ...)
function M.bert_mlm_spec(cfg)
  return {
    model = { preset = cfg.preset, overrides = overrides(cfg, { dropout = cfg.dropout }) },
    data = batcher.data_spec(cfg),
    batch = { B = cfg.batch, T = cfg.seq_len, kind = "mlm" },
    train = recipe(cfg, { schedule = "linear", weight_decay = 0.01, beta2 = 0.999, eps = 1e-6 }),
    seed = cfg.seed,
  }
end
M.BERT_MLM_PROFILES = {
  quick = with_task({ preset = "bert-quick", data = "organism", n_tokens = 40000, seq_len = 32, batch = 8,
            steps = 20, lr = 3e-3, warmup = 2, schedule = "constant", weight_decay = 0.1, beta2 = 0.99,
            dropout = 0.0, eval_batches = 2, seed = 1, n_layer = 0, sep_every = 0, segment_cls = false }, { vocab_size = 64, n_triggers = 8, groups = 2 }),
  default = with_task({ preset = "bert-organism", data = "organism", n_tokens = 1000000, seq_len = 64, batch = 32,
              steps = 2500, lr = 3e-3, warmup = 200, schedule = "constant", weight_decay = 0.1, beta2 = 0.99,
              dropout = 0.0, eval_batches = 16, seed = 1, n_layer = 0, sep_every = 0, segment_cls = false }),
  long = with_task({ preset = "bert-organism", data = "organism", n_tokens = 1000000, seq_len = 64, batch = 32,
              steps = 10000, lr = 3e-3, warmup = 200, schedule = "constant", weight_decay = 0.1, beta2 = 0.99,
              dropout = 0.0, eval_batches = 16, seed = 1, n_layer = 0, sep_every = 0, segment_cls = false }),
  paper = with_task({ preset = "bert-base", data = "corpus", n_tokens = 100000000, vocab_size = 30522, seq_len = 128,
            batch = 256, steps = 1000000, lr = 1e-4, warmup = 10000, schedule = "linear", weight_decay = 0.01,
            beta2 = 0.999, dropout = 0.1, eval_batches = 64, seed = 1, n_layer = 0, sep_every = 0, segment_cls = false }),
}

-- SO's nanoGPT recipe (AdamW β (0.9, 0.95), wd 0.1, warmup + cosine, clip 1) for the
-- LLaMA-style decoder on LM batches (so-fig3, so-fig6, so-fig5, so-table1, ...)
function M.llama_lm_spec(cfg)
  return {
    model = { preset = cfg.preset, overrides = overrides(cfg) },
    data = batcher.data_spec(cfg),
    -- eval_B: the held-out batches' rows when the profile's eval_rows is set (> 0) and differs from
    -- its batch (absent otherwise, so the spec and its hash stay what they were before the key existed)
    batch = { B = cfg.batch, T = cfg.seq_len, kind = "lm",
              eval_B = (cfg.eval_rows or 0) > 0 and cfg.eval_rows ~= cfg.batch and cfg.eval_rows or nil },
    train = recipe(cfg, { schedule = "cosine", weight_decay = 0.1, beta2 = 0.95 }),
    seed = cfg.seed,
  }
end
-- The decoder organism's task (docs/findings/organism.md, "The search"): 8 groups of back-copy offsets
-- (trigger mass 0.08) and 3 pointer tokens of 1, 2 and 3 hops (mass 0.15): a pointer of h hops
-- needs h + 1 attention layers in turn, each used only after its pointer token, so that heads in
-- every layer are needed rarely and must do nothing elsewhere (sink rate 0.75-0.88 of the heads
-- instead of 0.25 with the copies alone, which one layer serves). The token embedding enters the
-- blocks × 20 (embed_scale; docs/findings/organism.md, "Why the ratio stops"): at × 1 layer 0 writes a
-- large per-token table that holds <bos>'s state to 30-120 × the median, at × 20 it does not
-- and <bos> reaches about 300 × (the paper profile keeps TinyLLaMA's plain embedding).
-- The default profile trains 6,000 steps of 16 × 64 tokens at 0.02, the last 1,200 decaying to 0
-- (wsd), and measures on held-out batches of 32 rows (eval_rows): against the earlier 6,000
-- steps of 32 × 64 at a constant 0.01 it reaches <bos> 378-591 × the median (234-346) at a
-- lower validation loss on 3 seeds, with half the tokens (docs/journal/2026-12-performance.md,
-- "a recipe at half the tokens"). The long profile keeps the earlier recipe, three times longer.
local DECODER_TASK = { groups = 8, p_trigger = 0.08, n_pointer = 3, p_pointer = 0.15, pointer_hops = 3 }
M.DECODER_TASK = DECODER_TASK
M.LLAMA_LM_PROFILES = {
  quick = with_task({ preset = "llama-quick", data = "organism", n_tokens = 40000, seq_len = 32, batch = 8,
            steps = 20, lr = 1e-2, warmup = 0, schedule = "constant", weight_decay = 0.1, beta2 = 0.99,
            eval_batches = 2, seed = 1, embed_scale = 20, cooldown = 0, eval_rows = 0 }, { vocab_size = 64, n_triggers = 8, groups = 2 }),
  default = with_task({ preset = "llama-organism", data = "organism", n_tokens = 1000000, seq_len = 64, batch = 16,
              steps = 6000, lr = 2e-2, warmup = 0, schedule = "wsd", cooldown = 1200, weight_decay = 0.1, beta2 = 0.99,
              eval_batches = 16, seed = 1, embed_scale = 20, eval_rows = 32 }, DECODER_TASK),
  long = with_task({ preset = "llama-organism", data = "organism", n_tokens = 1000000, seq_len = 64, batch = 32,
              steps = 18000, lr = 1e-2, warmup = 0, schedule = "constant", weight_decay = 0.1, beta2 = 0.99,
              eval_batches = 16, seed = 1, embed_scale = 20, cooldown = 0, eval_rows = 0 }, DECODER_TASK),
  paper = with_task({ preset = "tinyllama-120m", data = "corpus", n_tokens = 100000000, vocab_size = 32000,
            seq_len = 1024, batch = 480, steps = 50000, lr = 6e-4, warmup = 2000, schedule = "cosine",
            weight_decay = 0.1, beta2 = 0.95, eval_batches = 64, seed = 1, embed_scale = 0, cooldown = 0, eval_rows = 0 }),
}

-- every shared profile says which initialisation rule it trains with (M.init_gain)
for _, profiles in ipairs({ M.BERT_MLM_PROFILES, M.LLAMA_LM_PROFILES }) do
  for _, p in pairs(profiles) do p.scale_rule = p.scale_rule or "paper" end
end

-- base profiles with each profile's extra settings added: profiles_with(base, {quick = {tau = 10}, ...})
-- (the long profile takes the default profile's extras unless it has its own)
function M.profiles_with(base, extra)
  local out = {}
  for name, p in pairs(base) do
    local q = config.deep_copy(p)
    for k, v in pairs(extra[name] or (name == "long" and extra.default) or {}) do q[k] = v end
    out[name] = q
  end
  return out
end

-- the profiles of an experiment that judges one model (seed 1, or --seed=S): n_seeds = 1 in every
-- profile, so its run file and the verdict table state the one seed it judges, not the three its
-- family's profiles train elsewhere (changes and returns the tables profiles_with made)
function M.single_seed(profiles)
  for _, p in pairs(profiles) do p.n_seeds = 1 end
  return profiles
end

-- the model config of a spec: preset + overrides, vocab_size and block_size from the data
local model_cfg = require("outlierlab.models").spec_cfg   -- one conversion (models.spec_cfg)

-- How often a model the runner trains writes its checkpoint (besides the end and the batch
-- system's signal): every CKPT_PARTS-th of its steps, so that a killed run (kill -9, a lost
-- node, Ctrl-C) loses at most that share of the training; run it again and run:model resumes
-- from the checkpoint, bit for bit as if never stopped (tests/lua/test_runner_resume.lua).
-- Short runs (under 2·CKPT_PARTS steps) write only at the end. A checkpoint does not touch the
-- numbers, so it is not part of the model's cache key; a spec's train.ckpt_every overrides it.
M.CKPT_PARTS = 10
function M.ckpt_every(steps)
  if steps < 2 * M.CKPT_PARTS then return 0 end
  return math.floor(steps / M.CKPT_PARTS)
end

-- train.run's cfg of a spec: its train settings, plain progress lines every tenth of the steps
-- and the checkpoint cadence above, unless the spec sets them
local function train_cfg(spec)
  local tcfg = {}
  for k, v in pairs(spec.train) do tcfg[k] = v end
  tcfg.progress = tcfg.progress or "plain"
  tcfg.log_every = tcfg.log_every or math.max(1, math.floor(spec.train.steps / 10))
  tcfg.ckpt_every = tcfg.ckpt_every or M.ckpt_every(spec.train.steps)
  return tcfg
end

-- the training facts stored in done.lua: the per-step curves (the model's training history,
-- runner/history.lua), the tracked curve, its stable measurement and the key of the code that
-- measured it (recipes/track.lua)
local function facts(res, m, track)
  local val = res.val[#res.val]
  local f = { losses = res.losses, lrs = res.lrs, gnorms = res.gnorms, val = res.val,
              val_loss = val and val.loss or nil, steps = res.step,
              stopped_by_signal = res.stopped_by_signal, params = m:num_params(), describe = m:describe() }
  for k, v in pairs(track.finish()) do f[k] = v end
  return f
end

-- The trainer of a spec, which needs no Run: trainer(dir, ckpt, o) trains the model into dir
-- (resuming from ckpt when an interrupted run left one) and returns the training facts for
-- done.lua. o = { cache_root = where a paper-scale corpus file goes (data/corpus_file), log =
-- function(fmt, ...) }, both optional; the runner's cache passes them (runner/cache.lua), a
-- script may call the trainer on a directory of its own. bench/organism.lua adds o.on_step
-- (called after the tracker's, as o.on_step(step, rec, ctx)) and o.stop_after (train.run's) to time
-- the real loop's first steps; scripts/snapshot-series.lua adds o.on_start(ctx) (before the first
-- step of a run that does not resume) and o.on_step to save the weights along the way. An image spec (batch.kind = "image",
-- recipes.papers' image_spec) trains a ViT on the synthetic images.
function M.trainer(spec)
  return function(dir, ckpt, o)
    o = o or {}
    local log = o.log or function(fmt, ...) io.write(string.format(fmt, ...), "\n") io.flush() end
    bounds.check_memory(spec)   -- training this model must fit in memory (outlierlab.train.bounds)
    local models = require "outlierlab.models"
    local train = require "outlierlab.train.loop"
    local b = spec.batch
    -- (each branch builds its parts in the order they always were built)
    local ctx, m, loader, val_loader, track
    if b.kind == "image" then
      ctx = ol.Context{ seed = spec.seed }
      m = models.build(ctx, model_cfg(spec))
      log("%s, %d steps of %d images", m:describe(), spec.train.steps, b.B)
      -- every model records its sinks, drains, massive activations and kurtosis as it trains
      track = tracked.tracker(spec, dir, function(n, first) return tracked.measure_vit_phenomena(ctx, m, spec, n, first) end)
      loader, val_loader = batcher.image_loader(spec, "train", true), batcher.image_loader(spec, "val")
    else
      local corpus = batcher.corpus(spec.data, { cache_root = o.cache_root })
      ctx = ol.Context{ seed = spec.seed }
      m = models.build(ctx, model_cfg(spec))
      loader = batcher.batcher(corpus, { B = b.B, T = b.T, kind = b.kind, seed = spec.seed, shard = true })
      val_loader = batcher.batcher(corpus, { B = batcher.eval_B(spec), T = b.T, kind = b.kind, seed = spec.seed, split = "val" })
      log("%s, %d steps of %d×%d tokens", m:describe(), spec.train.steps, b.B, b.T)
      track = tracked.tracker(spec, dir, function(n, first) return tracked.measure_phenomena(ctx, m, corpus, spec, 16, n, first) end)
    end
    if o.on_start then
      local f = ckpt and io.open(ckpt, "rb")
      if f then f:close() else o.on_start(ctx) end   -- (a resumed run has passed its start)
    end
    local res = train.run{ ctx = ctx, model = m, loader = loader, val_loader = val_loader, cfg = train_cfg(spec), ckpt = ckpt,
                           stop_after = o.stop_after,
                           on_step = o.on_step and function(step, rec) track.on_step(step, rec) o.on_step(step, rec, ctx) end
                             or track.on_step }
    return facts(res, m, track)
  end
end

-- Train (or reuse) the model of spec = { model = {preset =, overrides = {}}, data = {seed =,
-- n_tokens =, vocab_size =}, batch = {B =, T =, kind = "lm"|"mlm"|"image"}, train = {steps =,
-- lr =, ...outlierlab.train keys}, seed = } through the run's cache: its sizes and recipe are
-- checked before the cache lock (outlierlab.train.bounds), then run:model finds the model or
-- trains it with M.trainer(spec). Returns run:model's handle (dir, ckpt, info with the training
-- facts). The one trainer of the package's models.
function M.fit(run, spec)
  if not run.count_sweep then bounds.check_run(spec) end   -- (counting a sweep's members trains nothing)
  return run:model(spec, M.trainer(spec))
end

-- the loaders of a model's evaluations: { val = fn() -> held-out loader, calib = fn() ->
-- training-split loader, metric = "ppl"|"acc" } (the corpus is built on first use)
local function eval_loaders(spec, cache_root)
  if spec.batch.kind == "image" then
    return { metric = "acc", val = function() return batcher.image_loader(spec, "val") end,
             calib = function() return batcher.image_loader(spec, "train") end }
  end
  local b = spec.batch
  return {
    metric = "ppl",
    val = function() return batcher.batcher(batcher.corpus(spec.data, { cache_root = cache_root }), { B = batcher.eval_B(spec), T = b.T, kind = b.kind, seed = spec.seed + 1, split = "val" }) end,
    calib = function() return batcher.batcher(batcher.corpus(spec.data, { cache_root = cache_root }), { B = batcher.eval_B(spec), T = b.T, kind = b.kind, seed = spec.seed + 2 }) end,
  }
end

-- a fresh context with the trained model loaded from the cache (eval mode), and the loaders of
-- its evaluations: returns ctx, m, { val =, calib =, metric = } (eval_loaders). An imported
-- model (--model=DIR) stands in for the trained one. The one loader of the package's models.
function M.load(spec, handle)
  if handle.pretrained then
    local ctx, m = handle.pretrained:load(function(...) io.write("[stream] ", string.format(...), "\n") io.flush() end)
    return ctx, m, eval_loaders(spec)
  end
  local models = require "outlierlab.models"
  local checkpoint = require "outlierlab.train.checkpoint"
  local ctx = ol.Context{ seed = spec.seed }
  local m = models.build(ctx, model_cfg(spec))
  checkpoint.load(handle.ckpt, ctx, { optim = false })   -- evaluation: the weights (a snapshot has no moments)
  if m.eval then m:eval() end
  return ctx, m, eval_loaders(spec, handle.cache_root)
end


return M
