-- recipes — the papers' and the model organism's model specs and the one way to train and load
-- them: the shared profiles (LLAMA_LM_PROFILES, BERT_MLM_PROFILES), the spec functions,
-- recipes.fit(run, spec) (train or reuse through run:model), recipes.load(spec, handle) and
-- recipes.model_cfg(spec). The QT / SO / ViT specs: outlierlab.recipes.papers.
local ol = require "outlierlab"
local config = require "outlierlab.config"
local dist = require "outlierlab.util.dist"
local fs = require "outlierlab.util.fs"
local serialize = require "outlierlab.util.serialize"
local batcher = require "outlierlab.data.batcher"
local bounds = require "outlierlab.train.bounds"

local M = {}

-- Size and recipe bounds, central for every trainer (outlierlab.train.bounds): check_run(spec)
-- the batch, the data size and the training recipe (steps >= 1, lr > 0, warmup <= steps, ...),
-- check_memory(spec) the estimated memory of training against what the machine has.
M.check_run, M.check_memory = bounds.check_run, bounds.check_memory

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
-- 0, or constant), AdamW with β = (0.9, beta2), decoupled weight decay on >= 2-D parameters,
-- clip 1. The default profiles (the model organism, docs/findings/organism.md) train at a constant high
-- learning rate with weight decay; the paper profiles keep the papers' recipes.
local function recipe(cfg, o)
  return { steps = cfg.steps, lr = cfg.lr, warmup = cfg.warmup, schedule = cfg.schedule or o.schedule,
           min_lr = (cfg.schedule or o.schedule) == "linear" and 0 or nil,
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
    batch = { B = cfg.batch, T = cfg.seq_len, kind = "lm" },
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
local DECODER_TASK = { groups = 8, p_trigger = 0.08, n_pointer = 3, p_pointer = 0.15, pointer_hops = 3 }
M.DECODER_TASK = DECODER_TASK
M.LLAMA_LM_PROFILES = {
  quick = with_task({ preset = "llama-quick", data = "organism", n_tokens = 40000, seq_len = 32, batch = 8,
            steps = 20, lr = 1e-2, warmup = 0, schedule = "constant", weight_decay = 0.1, beta2 = 0.99,
            eval_batches = 2, seed = 1, embed_scale = 20 }, { vocab_size = 64, n_triggers = 8, groups = 2 }),
  default = with_task({ preset = "llama-organism", data = "organism", n_tokens = 1000000, seq_len = 64, batch = 32,
              steps = 6000, lr = 1e-2, warmup = 0, schedule = "constant", weight_decay = 0.1, beta2 = 0.99,
              eval_batches = 16, seed = 1, embed_scale = 20 }, DECODER_TASK),
  long = with_task({ preset = "llama-organism", data = "organism", n_tokens = 1000000, seq_len = 64, batch = 32,
              steps = 18000, lr = 1e-2, warmup = 0, schedule = "constant", weight_decay = 0.1, beta2 = 0.99,
              eval_batches = 16, seed = 1, embed_scale = 20 }, DECODER_TASK),
  paper = with_task({ preset = "tinyllama-120m", data = "corpus", n_tokens = 100000000, vocab_size = 32000,
            seq_len = 1024, batch = 480, steps = 50000, lr = 6e-4, warmup = 2000, schedule = "cosine",
            weight_decay = 0.1, beta2 = 0.95, eval_batches = 64, seed = 1, embed_scale = 0 }),
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

-- the model config of a spec: preset + overrides, vocab_size and block_size from the data
local model_cfg = require("outlierlab.models").spec_cfg   -- one conversion (models.spec_cfg)
M.model_cfg = model_cfg

-- Phenomena of a ViT on one held-out batch (at most 16 images): [CLS] is the initial token,
-- background patches are "weak" (they carry no information), object patches "other"
-- (outlierlab.phenomena.vit_batch); the sinks looked for are [CLS] and background patches.
function M.measure_vit_phenomena(ctx, m, spec, n, first)
  local phenomena = require "outlierlab.measure.phenomena"
  local probes = require "outlierlab.measure.probes"
  local d = spec.data
  local NP = (d.size / spec.batch.patch) ^ 2
  local ph = phenomena.new{ category = phenomena.vit_category, T = NP + 1, C = m.cfg.d_model, n_head = m.cfg.n_head,
                            sink_categories = phenomena.VIT_SINKS }
  local va = batcher.batcher(d, { B = math.min(16, spec.batch.B), split = "val", patch = spec.batch.patch })
  for _ = 1, first or 0 do ctx:reset(); va:next(ctx) end   -- the image loader has no step to set
  ctx:no_grad(function()
    local P = probes.new{}
    ph:attach(P)
    for _ = 1, n or 1 do
      ctx:reset()
      P:forward(m, phenomena.vit_batch(ctx, va:next(ctx)))
    end
  end)
  ctx:reset()
  return ph:result()
end

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

-- the trainer of an image spec (a ViT on the synthetic images, outlierlab.data.images)
local function image_trainer(run, spec)
  return function(dir, ckpt)
    M.check_memory(spec)
    local models = require "outlierlab.models"
    local train = require "outlierlab.train.loop"
    local ctx = ol.Context{ seed = spec.seed }
    local m = models.build(ctx, model_cfg(spec))
    local tcfg = train_cfg(spec)
    run:log("%s, %d steps of %d images", m:describe(), spec.train.steps, spec.batch.B)
    -- every ViT records its sinks, drains, massive activations and kurtosis as it trains
    local track = M.tracker(spec, dir, function(n, first) return M.measure_vit_phenomena(ctx, m, spec, n, first) end)
    local res = train.run{ ctx = ctx, model = m, loader = batcher.image_loader(spec, "train", true),
                           val_loader = batcher.image_loader(spec, "val"), cfg = tcfg, ckpt = ckpt,
                           on_step = track.on_step }
    local val = res.val[#res.val]
    return { losses = res.losses, lrs = res.lrs, gnorms = res.gnorms, val = res.val,
             val_loss = val and val.loss or nil, steps = res.step, curve = track.curve, stable = track.stable(),
             stopped_by_signal = res.stopped_by_signal, params = m:num_params(), describe = m:describe() }
  end
end

-- Train (or reuse) the model of spec = { model = {preset =, overrides = {}}, data = {seed =,
-- n_tokens =, vocab_size =}, batch = {B =, T =, kind = "lm"|"mlm"}, train = {steps =, lr =,
-- ...outlierlab.train keys}, seed = }. Returns run:model's handle (dir, ckpt, info with the
-- training losses). An image spec (batch.kind = "image", recipes.papers' image_spec) trains a ViT
-- on the synthetic images. The one trainer of the package's models.
function M.fit(run, spec)
  M.check_run(spec)   -- sizes and recipe, before the cache lock (outlierlab.train.bounds)
  if spec.batch.kind == "image" then return run:model(spec, image_trainer(run, spec)) end
  return run:model(spec, function(dir, ckpt)
    M.check_memory(spec)   -- training this model must fit in memory
    local models = require "outlierlab.models"
    local train = require "outlierlab.train.loop"
    local corpus = batcher.corpus(spec.data)
    local ctx = ol.Context{ seed = spec.seed }
    local m = models.build(ctx, model_cfg(spec))
    local tr = batcher.batcher(corpus, { B = spec.batch.B, T = spec.batch.T, kind = spec.batch.kind, seed = spec.seed,
                                   shard = true })
    local va = batcher.batcher(corpus, { B = spec.batch.B, T = spec.batch.T, kind = spec.batch.kind, seed = spec.seed, split = "val" })
    local tcfg = train_cfg(spec)
    run:log("%s, %d steps of %d×%d tokens", m:describe(), spec.train.steps, spec.batch.B, spec.batch.T)
    -- every model records its sinks, drains, massive activations and kurtosis as it trains
    local track = M.tracker(spec, dir, function(n, first) return M.measure_phenomena(ctx, m, corpus, spec, 16, n, first) end)
    local res = train.run{ ctx = ctx, model = m, loader = tr, val_loader = va, cfg = tcfg, ckpt = ckpt,
                           on_step = track.on_step }
    local val = res.val[#res.val]
    -- the per-step curves go into the model's training history (outlierlab.runner.history)
    return { losses = res.losses, lrs = res.lrs, gnorms = res.gnorms, val = res.val,
             val_loss = val and val.loss or nil, steps = res.step,
             stopped_by_signal = res.stopped_by_signal, curve = track.curve, stable = track.stable(),
             params = m:num_params(), describe = m:describe() }
  end)
end

-- Phenomena during training (outlierlab.measure.phenomena): at step 0 and every steps/TRACK_POINTS
-- steps, one held-out batch (at most 16 rows) of the model's validation stream is run with the
-- probes on; curve[i] = { step, loss, sink_share, value_ratio, sink_layer, sink_head,
-- sink_category, massive_ratio, massive_layer, massive_category, max_ratio, max_inf_norm,
-- avg_kurtosis, max_kurtosis } (max_inf_norm: the per-sequence max |h| averaged over sequences,
-- largest over layers; kurtosis Pearson, of the layer outputs h). The curve is saved beside the checkpoint (track.lua, atomically) so that a
-- resumed run keeps the points measured before the kill. The measurement runs without
-- gradients after the optimizer step and changes nothing the next step uses.
M.TRACK_POINTS = 20
-- The stable measurement (docs/reference/metrics.md, "Stable measurement"): the points of the last
-- STABLE_WINDOW of the steps are taken every steps/STABLE_POINTS_PER_RUN (10 points), each on
-- TRACK_BATCHES held-out batches of its own (20 batches in all), and a model's phenomena are the
-- mean over those points (M.stable): neither one batch nor one step decides a verdict.
M.STABLE_WINDOW = 0.1
M.STABLE_POINTS_PER_RUN = 100
M.TRACK_BATCHES = 2
-- phenomena on n held-out batches (B rows each, at most 16) starting at batch `first` of the
-- model's validation stream
function M.measure_phenomena(ctx, m, corpus, spec, B, n, first)
  local phenomena = require "outlierlab.measure.phenomena"
  local probes = require "outlierlab.measure.probes"
  local ph = phenomena.new{ category = corpus.category, T = spec.batch.T, C = m.cfg.d_model, n_head = m.cfg.n_head,
                            causal = spec.batch.kind == "lm" }
  local va = batcher.batcher(corpus, { B = math.min(B or 16, spec.batch.B), T = spec.batch.T, kind = spec.batch.kind,
                                 seed = spec.seed + 1, split = "val" })
  va.step = first or 0
  ctx:no_grad(function()
    local P = probes.new{}
    ph:attach(P)
    for _ = 1, n or 1 do
      ctx:reset()
      P:forward(m, va:next(ctx))
    end
  end)
  ctx:reset()
  return ph:result()
end
local function curve_point(step, loss, r)
  local inf = 0 / 0   -- QT's max inf norm of the layer outputs: per-sequence max |h| averaged, max over layers
  local peak, last = 0 / 0, 0 / 0   -- top-1 |h| at the massive token's category: largest over layers, last layer
  local cat = r.massive.category
  for _, l in ipairs(r.layers) do
    local v = r.per_layer[l].top1
    if v == v and not (v <= inf) then inf = v end
    local a = cat and r.per_layer[l].top1_at and r.per_layer[l].top1_at[cat]
    if a and a == a then
      if not (a <= peak) then peak = a end
      last = a
    end
  end
  return { step = step, loss = loss, sink_share = r.sink.share, value_ratio = r.sink.value_ratio, max_inf_norm = inf,
           sink_layer = r.sink.layer, sink_head = r.sink.head, sink_category = r.sink.category,
           massive_ratio = r.massive.ratio, massive_layer = r.massive.layer, massive_category = r.massive.category,
           max_ratio = r.max_ratio.ratio, avg_kurtosis = r.avg_kurtosis, max_kurtosis = r.max_kurtosis,
           sink_rate = r.sink_rate, sink_rate_value_ratio = r.sink_rate_value_ratio,
           avg_kurtosis_no_initial = r.avg_kurtosis_no_initial, massive_peak_top1 = peak, massive_last_top1 = last,
           -- how one-hot the initial token's state is in the massive activation's layer (phenomena)
           initial_top_share = r.massive.initial_top_share, initial_top3_share = r.massive.initial_top3_share,
           resid_share = r.resid_share }   -- residual sink (measure/residual)
end
M.curve_point = curve_point
-- the numeric fields of a curve point that M.stable averages
M.STABLE_FIELDS = { "loss", "sink_share", "value_ratio", "massive_ratio", "max_ratio", "avg_kurtosis", "max_kurtosis",
                    "max_inf_norm", "sink_rate", "sink_rate_value_ratio", "avg_kurtosis_no_initial",
                    "massive_peak_top1", "massive_last_top1", "initial_top_share", "initial_top3_share" }
-- steps at which the tracker measures: 0, every steps/TRACK_POINTS, and every
-- steps/STABLE_POINTS_PER_RUN in the last STABLE_WINDOW of the steps (the last step always)
function M.track_schedule(steps)
  local every = math.max(1, math.floor(steps / M.TRACK_POINTS))
  local fine = math.max(1, math.floor(steps / M.STABLE_POINTS_PER_RUN))
  local from = steps - math.floor(steps * M.STABLE_WINDOW + 0.5)
  return function(step)
    return step == steps or step % every == 0 or (step > from and (steps - step) % fine == 0)
  end, from
end
-- The stable measurement of a curve: the mean and sd of every STABLE_FIELDS value over the
-- points in the last STABLE_WINDOW of the steps (step > from); nil when there is none. The
-- categorical fields (sink layer, head, category, massive layer and category) are the most
-- frequent values of those points.
function M.stable(curve, steps)
  if type(curve) ~= "table" or #curve == 0 then return nil end
  local sub = {}   -- the points up to `steps` (a resumed or longer curve is cut there)
  for _, p in ipairs(curve) do if not steps or p.step <= steps then sub[#sub + 1] = p end end
  if #sub == 0 then return nil end
  local pts = require("outlierlab.judge.thresholds").window(sub).points   -- the one window rule
  local out = { n_points = #pts, from_step = pts[1].step, to_step = pts[#pts].step, sd = {} }
  local stats = require("outlierlab.judge.seeds").stats   -- one mean/sd (NaN without values)
  for _, f in ipairs(M.STABLE_FIELDS) do
    local xs = {}
    for _, p in ipairs(pts) do local v = p[f] if type(v) == "number" and v == v then xs[#xs + 1] = v end end
    out[f], out.sd[f] = stats(xs)
  end
  for _, f in ipairs { "sink_layer", "sink_head", "sink_category", "massive_layer", "massive_category" } do
    local count, best, bestn = {}, nil, 0
    for _, p in ipairs(pts) do
      local v = p[f]
      if v ~= nil then
        count[v] = (count[v] or 0) + 1
        if count[v] > bestn then best, bestn = v, count[v] end
      end
    end
    out[f] = best
  end
  return out
end
function M.tracker(spec, dir, measure_fn)
  local path = dir .. "/track.lua"
  local steps = spec.train.steps
  local due, from = M.track_schedule(steps)
  local tr = { curve = load_data(path) or {} }
  local function save()
    if dist.rank() == 0 then fs.write_atomic(path, serialize.serialize(tr.curve)) end
  end
  local k = 0   -- the stable window's points each take their own held-out batches
  local function measure(step, loss)
    local c = tr.curve
    if #c > 0 and c[#c].step >= step then return end
    local first = 0
    if step > from then
      k = k + 1
      first = k * M.TRACK_BATCHES
    end
    c[#c + 1] = curve_point(step, loss, measure_fn(M.TRACK_BATCHES, first))
    save()
  end
  for _, p in ipairs(tr.curve) do if p.step > from then k = k + 1 end end   -- a resumed run goes on counting
  if #tr.curve == 0 then measure(0, 0 / 0) end
  function tr.on_step(step, rec)
    if due(step) then measure(step, rec.loss) end
  end
  function tr.stable() return M.stable(tr.curve, steps) end
  return tr
end

-- the loaders of a model's evaluations: { val = fn() -> held-out loader, calib = fn() ->
-- training-split loader, metric = "ppl"|"acc" } (the corpus is built on first use)
local function eval_loaders(spec)
  if spec.batch.kind == "image" then
    return { metric = "acc", val = function() return batcher.image_loader(spec, "val") end,
             calib = function() return batcher.image_loader(spec, "train") end }
  end
  local b = spec.batch
  return {
    metric = "ppl",
    val = function() return batcher.batcher(batcher.corpus(spec.data), { B = b.B, T = b.T, kind = b.kind, seed = spec.seed + 1, split = "val" }) end,
    calib = function() return batcher.batcher(batcher.corpus(spec.data), { B = b.B, T = b.T, kind = b.kind, seed = spec.seed + 2 }) end,
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
  checkpoint.load(handle.ckpt, ctx)
  if m.eval then m:eval() end
  return ctx, m, eval_loaders(spec)
end
-- the names the experiment files have used (outlierlab.experiment, outlierlab.ptq)
M.train_model, M.load_model = M.fit, M.load


return M
