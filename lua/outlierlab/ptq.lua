-- ptq — post-training quantisation (W8A8 and friends) and the other compression evaluations
-- of the papers' tables, on top of outlierlab.compress (docs/COMPRESSION.md).
--
--   local ptq = require "outlierlab.ptq"
--   local fp = ptq.evaluate(ctx, m, { metric = "ppl"|"acc", loader = fn() -> fresh loader, n = 8 })
--   local q  = ptq.w8a8(ctx, m, { metric =, loader =, n =, calib_loader = fn() -> loader,
--                                 n_calib = 16, wbits = 8, abits = 8, weight_range = "minmax"|"mse",
--                                 estimator = "running_minmax"|"percentile", percentile = 99.999 })
--   -- q = { value = metric, loss =, sites = quantised activation sites, weights = n tensors }
--   local r  = ptq.weight_only(ctx, m, { fn = function(params) compress.absmax(params, ...) end, ... })
--   local s  = ptq.outlier_stats(ctx, m, { loader =, n =, points = {"ffn_out", "ln2"} })
--   -- s = { max_inf_norm, avg_kurtosis, n } over the hooked tensors (QT tables, docs/METRICS.md)
--
-- QT's W8A8 setup (QT §5, App. C; docs/COMPRESSION.md):
--   weights: symmetric uniform per tensor, min-max (BERT, ViT) or MSE (OPT) range, every weight
--     matrix (>= 2 dims) except the final head and the gates: ptq.weights(ctx);
--   activations: asymmetric uniform per tensor, static ranges from n_calib calibration batches
--     (running min-max with momentum 0.9, or a percentile), at the output of every op that
--     makes a new activation (linear in/outputs, residual and embedding sums, attention
--     scores, softmax outputs, norm and activation outputs; outlierlab.compress);
--   the attention runs through its plain-op reference path (attention.reference) while
--     quantised, so its scores and probabilities pass the hook (the fused C kernel never
--     materialises them); masks are added outside the hook (attention.add_mask); gates and
--     context-aware scaling factors are computed with ol.without_hook (full precision);
--   the last linear (the head: logits) stays in full precision (compress skip_last_linear).
-- Every evaluation restores the FP weights and the fused attention before it returns.
local ol = require "outlierlab"
local compress = require "outlierlab.compress"
local attention = require "outlierlab.attention"
local analysis = require "outlierlab.analysis"
local probes = require "outlierlab.probes"
local ffi = ol.ffi

local M = {}

-- ---------------------------------------------------------------- what is compressed
-- Parameters that stay in full precision (Lua patterns on the parameter name): the final
-- head and the token embedding tied to it (GPT-2 wte, OPT embed_tokens, BERT's decoder is
-- embeddings.word), QT's gates, SO's context-aware scaling weights and the learned sink /
-- bias vectors of the attention variants (not weights of a linear layer).
M.KEEP_FP = { "^head%.", "^lm_head%.", "^wte%.", "^embed_tokens%.", "^embeddings%.word%.",
              "%.gate%.", "%.scale%.", "%.sink%.", "%.ca_bias%.", "%.v_bias$" }
-- For SO Table 3 ("all layers" of the transformer): the linear layers of the blocks only.
M.LINEAR_ONLY = { "_proj%.weight$" }

-- weights to compress: >= 2-D parameters matching none of skip (default KEEP_FP) and, when
-- only is given, at least one of only
function M.weights(ctx, opts)
  opts = opts or {}
  local out = {}
  for _, p in ipairs(compress.select_weights(ctx, opts.skip or M.KEEP_FP)) do
    local name = ffi.string(p.name)
    local keep = opts.only == nil
    for _, pat in ipairs(opts.only or {}) do if name:match(pat) then keep = true end end
    if keep then out[#out + 1] = p end
  end
  return out
end
function M.names(params)
  local out = {}
  for i, p in ipairs(params) do out[i] = ffi.string(p.name) end
  return out
end

-- ---------------------------------------------------------------- attention switch
-- every attention-variant object inside a model (found by walking its tables)
function M.attention_modules(model)
  local out, seen = {}, {}
  local function walk(t, depth)
    if seen[t] or depth > 8 then return end
    seen[t] = true
    if getmetatable(t) == attention.Attn then out[#out + 1] = t return end
    for k, v in pairs(t) do
      if type(v) == "table" and k ~= "ctx" and k ~= "cfg" then walk(v, depth + 1) end
    end
  end
  walk(model, 0)
  return out
end

-- Route every attention of the model through its plain-op reference (so scores and
-- probabilities are seen by the activation hook) and compute gates / scaling factors with
-- the hook suspended. Returns a function that undoes both.
function M.plain_attention(model)
  local mods = M.attention_modules(model)
  local saved = {}
  for i, A in ipairs(mods) do
    saved[i] = { ref = A.use_reference, factor = rawget(A, "factor") }
    if not attention.reference[A.base] then
      error("ptq: attention kind '" .. tostring(A.kind) .. "' has no plain-op reference path", 2)
    end
    A.use_reference = true
    if saved[i].factor then
      local f = saved[i].factor
      A.factor = function(s, x) return ol.without_hook(f, s, x) end
    end
  end
  return function()
    for i, A in ipairs(mods) do A.use_reference = saved[i].ref; A.factor = saved[i].factor end
  end, #mods
end

-- ---------------------------------------------------------------- evaluation
-- Metric over n batches of a fresh loader (the same batches every call):
--   "ppl": exp(Σ loss·ntokens / Σ ntokens) (LM or MLM perplexity);  "acc": top-1 accuracy in %.
-- run(fn) wraps the per-batch forward (the quantiser); returns { value, loss, ntokens }.
function M.evaluate(ctx, m, o, run)
  local metric = o.metric or "ppl"
  local loader = o.loader()
  local n = o.n or 8
  local lsum, ntok, correct, total = 0, 0, 0, 0
  local function body(reset)
    for _ = 1, n do
      ctx:reset()
      local batch = loader:next(ctx)
      if reset then reset() end
      local loss, info = m:loss(batch, { train = false })
      local l = loss:item()
      if l ~= l then error("ptq.evaluate: the loss is NaN", 0) end
      lsum = lsum + l * info.ntokens
      ntok = ntok + info.ntokens
      if metric == "acc" then
        local lg, lab = info.logits, batch.labels
        local B, K = lg:size(0), lg:size(1)
        for b = 0, B - 1 do
          local best, bi = -math.huge, 0
          for k = 0, K - 1 do
            local v = lg.data[b * K + k]
            if v > best then best, bi = v, k end
          end
          if lab.idata[b] >= 0 then
            total = total + 1
            if bi == lab.idata[b] then correct = correct + 1 end
          end
        end
      end
    end
  end
  ctx:no_grad(function()
    if run then run(body) else body(nil) end
  end)
  ctx:reset()
  local loss = lsum / math.max(ntok, 1)
  local value = metric == "acc" and 100 * correct / math.max(total, 1) or math.exp(loss)
  return { value = value, loss = loss, ntokens = ntok, metric = metric }
end

-- run fn() with the FP weights restored afterwards (also on error)
local function with_snapshot(ctx, fn)
  local snap = compress.snapshot(ctx)
  local res = { pcall(fn) }
  compress.restore(ctx, snap)
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2)
end

-- Static post-training quantisation WxAy (QT §5): quantise the weights, calibrate the
-- activation ranges on n_calib batches (weights already quantised, as in a quantisation
-- simulator), evaluate with every calibrated site quantised, restore.
function M.w8a8(ctx, m, o)
  return with_snapshot(ctx, function()
    local undo = M.plain_attention(m)
    local ok, res = pcall(function()
      local params = M.weights(ctx, { skip = o.skip })
      if (o.wbits or 8) < 32 then
        compress.quantize_weights(params, { bits = o.wbits or 8, range = o.weight_range or "minmax" })
      end
      local q = compress.ActivationQuantizer{ bits = o.abits or 8, estimator = o.estimator or "running_minmax",
                                              momentum = o.momentum or 0.9, percentile = o.percentile }
      local cl = o.calib_loader()
      ctx:no_grad(function()
        for _ = 1, o.n_calib or 16 do
          ctx:reset()
          local batch = cl:next(ctx)
          q:calibrate(function() m:forward(batch, { train = false }) end)
        end
      end)
      ctx:reset()
      local r = M.evaluate(ctx, m, o, function(body) q:run(body) end)
      r.sites, r.weights = q:num_sites(), #params
      return r
    end)
    undo()
    if not ok then error(res, 0) end
    return res
  end)
end

-- Weight-only compression: fn(params) changes the weights in place (AbsMax, pruning); the
-- metric is evaluated (fused attention, FP activations) and the weights restored.
function M.weight_only(ctx, m, o)
  return with_snapshot(ctx, function()
    local params = M.weights(ctx, { skip = o.skip, only = o.only })
    local extra = o.fn(params)
    local r = M.evaluate(ctx, m, o)
    r.weights, r.sparsity, r.extra = #params, compress.sparsity(params), extra
    return r
  end)
end

-- ---------------------------------------------------------------- outlier statistics
-- Streams the probe points over n batches: per (point, layer) the per-sequence max |x| and
-- kurtosis averaged over sequences; summary as QT's tables (analysis.summarize). o.kurtosis =
-- "pearson" (default) | "qt_code" (QT's μ₄/(σ⁴ + 1e-6)), o.median = "mean" (default) | "lower"
-- (torch.median, SO's code): docs/METRICS.md.
-- Returns { max_inf_norm, avg_kurtosis, n, per = { {point, layer, max_inf_norm, kurtosis,
-- topk = {3 values}, median} } }.
function M.outlier_stats(ctx, m, o)
  local loader = o.loader()
  local stats = {}
  local P = probes.new{ points = o.points, layers = "all" }
  for _, pt in ipairs(o.points) do
    local L = { stats = {} }
    function L.probe(_, x, layer, batch)
      local s = L.stats[layer]
      if not s then
        local nd = x.ndim
        s = analysis.Stats{ T = x:size(nd - 2), C = x:size(nd - 1), V = 0, topk = o.topk or 3,
                            rule = analysis.rule{ kind = "none" }, kurtosis = o.kurtosis, median = o.median }
        L.stats[layer] = s
      end
      s:update_batch(x, batch)
    end
    stats[pt] = L
    P:attach(pt, L)
  end
  ctx:no_grad(function()
    for _ = 1, o.n or 8 do
      ctx:reset()
      local batch = loader:next(ctx)
      P:forward(m, batch)
    end
  end)
  ctx:reset()
  local per, list = {}, {}
  for _, pt in ipairs(o.points) do
    local layers = {}
    for l in pairs(stats[pt].stats) do layers[#layers + 1] = l end
    table.sort(layers)
    if #layers == 0 then error("ptq.outlier_stats: the model never reported probe point '" .. pt .. "'", 2) end
    for _, l in ipairs(layers) do
      local r = stats[pt].stats[l]:result()
      list[#list + 1] = r
      per[#per + 1] = { point = pt, layer = l, max_inf_norm = r.avg_max_inf_norm, kurtosis = r.avg_kurtosis,
                        topk = r.avg_topk, median = r.avg_median }
    end
  end
  local s = analysis.summarize(list)
  s.per = per
  return s
end

-- ---------------------------------------------------------------- small statistics
-- mean and sample standard deviation (n-1; 0 for one value) of a list
-- the values of field key in the rows whose fields match every pair of where
-- (e.g. values(a.rows, {family = "bert", variant = "vanilla"}, "fp")): one list per table cell,
-- one value per seed
function M.values(rows, where, key)
  local xs = {}
  for _, r in ipairs(rows) do
    local ok = true
    for k, v in pairs(where) do if r[k] ~= v then ok = false break end end
    if ok then xs[#xs + 1] = r[key] end
  end
  return xs
end
-- the mean of a list (first result of mean_std)
function M.mean(xs) return (M.mean_std(xs)) end

function M.mean_std(xs)
  local n = #xs
  if n == 0 then return 0 / 0, 0 / 0 end
  local s = 0
  for _, x in ipairs(xs) do s = s + x end
  local mu = s / n
  if n == 1 then return mu, 0 end
  local v = 0
  for _, x in ipairs(xs) do v = v + (x - mu) ^ 2 end
  return mu, math.sqrt(v / (n - 1))
end
-- "mean ± std" (or the single value) with fmt
function M.pm(xs, fmt)
  fmt = fmt or "%.3g"
  local mu, sd = M.mean_std(xs)
  if #xs <= 1 then return string.format(fmt, mu) end
  return string.format(fmt .. " ± " .. fmt, mu, sd)
end

-- ---------------------------------------------------------------- shared recipes
-- The model specs of the compression experiments. qt-table1 and qt-table2 share the BERT
-- models, so-table3 / so-fig11 / so-fig12 share the GPT-2 variants: the specs come from
-- these functions only, so identical models hash identically (experiment.lua run:model).

-- QT's clipped softmax at sequence length T: the paper's γ is for BERT's T = 128 (Table 1,
-- 2), OPT's is γ = −α/T with α = 12, ViT's γ = −1e−4 at T = 197 tokens. γ is scaled to keep
-- γ·T fixed (the clipping threshold −γ/(ζ−γ) relative to the uniform probability 1/T).
function M.qt_gamma(gamma_paper, T_paper, T) return gamma_paper * T_paper / T end

-- spec for an LM/MLM model (experiment.train_model): family preset, attention, data, recipe
function M.text_spec(cfg, preset, kind, attn, recipe, seed)
  local ov = { dropout = cfg.dropout or 0 }
  if attn and attn ~= "softmax" then ov.attention = attn end
  return {
    model = { preset = preset, overrides = ov },
    data = require("outlierlab.experiment").data_spec(cfg),
    batch = { B = cfg.batch, T = cfg.seq_len, kind = kind },
    train = recipe,
    seed = seed,
  }
end

-- spec for a ViT on the synthetic images (trained by M.train)
-- (cfg.style = "flat": the model organism's images, a small object on a flat background)
function M.image_spec(cfg, preset, attn, recipe, seed)
  local ov = { dropout = 0, n_classes = cfg.classes, image_size = cfg.image_size, patch_size = cfg.patch }
  if attn and attn ~= "softmax" then ov.attention = attn end
  return {
    model = { preset = preset, overrides = ov },
    data = { kind = "image", n = cfg.n_images, size = cfg.image_size, classes = cfg.classes, seed = cfg.data_seed,
             style = cfg.style ~= "textured" and cfg.style or nil },
    batch = { B = cfg.batch, patch = cfg.patch, kind = "image" },
    train = recipe,
    seed = seed,
  }
end

-- shard = true: under MPI this rank takes its rows of every global batch (data parallel)
local function image_loader(spec, split, shard)
  local data = require "outlierlab.data"
  local dist = require "outlierlab.dist"
  local d = spec.data
  return data.ImageLoader{ n = d.n, size = d.size, classes = d.classes, seed = d.seed, B = spec.batch.B,
                           split = split, rank = shard and dist.rank() or 0, world = shard and dist.size() or 1,
                           style = d.style, patch = spec.batch.patch }
end
M.image_loader = image_loader

-- Phenomena of a ViT on one held-out batch (at most 16 images): [CLS] is the initial token,
-- background patches are "weak" (they carry no information), object patches "other"
-- (outlierlab.phenomena.vit_batch); the sinks looked for are [CLS] and background patches.
function M.measure_vit_phenomena(ctx, m, spec)
  local phenomena = require "outlierlab.phenomena"
  local probes = require "outlierlab.probes"
  local data = require "outlierlab.data"
  local d = spec.data
  local NP = (d.size / spec.batch.patch) ^ 2
  local ph = phenomena.new{ category = phenomena.vit_category, T = NP + 1, C = m.cfg.d_model, n_head = m.cfg.n_head,
                            sink_categories = phenomena.VIT_SINKS }
  local va = data.ImageLoader{ n = d.n, size = d.size, classes = d.classes, seed = d.seed, B = math.min(16, spec.batch.B),
                               split = "val", style = d.style, patch = spec.batch.patch }
  ctx:no_grad(function()
    ctx:reset()
    local P = probes.new{}
    ph:attach(P)
    P:forward(m, phenomena.vit_batch(ctx, va:next(ctx)))
  end)
  ctx:reset()
  return ph:result()
end

-- train (or reuse) a model of a spec: text through experiment.train_model, images here
function M.train(run, spec)
  local E = require "outlierlab.experiment"
  if spec.batch.kind ~= "image" then return E.train_model(run, spec) end
  E.check_run(spec)   -- sizes and recipe, before the cache lock (outlierlab.bounds)
  return run:model(spec, function(dir, ckpt)
    E.check_memory(spec)
    local models = require "outlierlab.models"
    local train = require "outlierlab.train"
    local ctx = ol.Context{ seed = spec.seed }
    local mc = {}
    for k, v in pairs(spec.model.overrides) do mc[k] = v end
    mc.seed = spec.seed
    local m = models.build(ctx, models.preset(spec.model.preset, mc))
    local tcfg = {}
    for k, v in pairs(spec.train) do tcfg[k] = v end
    tcfg.progress = tcfg.progress or "plain"
    tcfg.log_every = tcfg.log_every or math.max(1, math.floor(spec.train.steps / 10))
    run:log("%s, %d steps of %d images", m:describe(), spec.train.steps, spec.batch.B)
    -- every ViT records its sinks, drains, massive activations and kurtosis as it trains
    local track = E.tracker(spec, dir, function() return M.measure_vit_phenomena(ctx, m, spec) end)
    local res = train.run{ ctx = ctx, model = m, loader = image_loader(spec, "train", true),
                           val_loader = image_loader(spec, "val"), cfg = tcfg, ckpt = ckpt,
                           on_step = track.on_step }
    local val = res.val[#res.val]
    return { losses = res.losses, lrs = res.lrs, gnorms = res.gnorms, val = res.val,
             val_loss = val and val.loss or nil, steps = res.step, curve = track.curve,
             stopped_by_signal = res.stopped_by_signal, params = m:num_params(), describe = m:describe() }
  end)
end

-- load a trained model (eval mode) and the loaders of its evaluations:
-- returns ctx, m, { val = fn() -> held-out loader, calib = fn() -> training-split loader,
-- metric = "ppl"|"acc" }
function M.load(spec, handle)
  local E = require "outlierlab.experiment"
  local checkpoint = require "outlierlab.checkpoint"
  if spec.batch.kind ~= "image" then
    local ctx, m = E.load_model(spec, handle)
    local corpus = E.corpus(spec.data)
    local b = spec.batch
    return ctx, m, {
      metric = "ppl",
      val = function() return E.batcher(corpus, { B = b.B, T = b.T, kind = b.kind, seed = spec.seed + 1, split = "val" }) end,
      calib = function() return E.batcher(corpus, { B = b.B, T = b.T, kind = b.kind, seed = spec.seed + 2 }) end,
    }
  end
  local models = require "outlierlab.models"
  local ctx = ol.Context{ seed = spec.seed }
  local mc = {}
  for k, v in pairs(spec.model.overrides) do mc[k] = v end
  mc.seed = spec.seed
  local m = models.build(ctx, models.preset(spec.model.preset, mc))
  checkpoint.load(handle.ckpt, ctx)
  if m.eval then m:eval() end
  return ctx, m, {
    metric = "acc",
    val = function() return image_loader(spec, "val") end,
    calib = function() return image_loader(spec, "train") end,
  }
end

-- QT's hooked tensors per family (docs/METRICS.md "Max inf norm"; probe names of lua/outlierlab/models):
-- BERT: FFN output (before the residual) and the LayerNorm outputs of each layer; OPT (and
-- the pre-LN ViT): layer output, fc2 output, attention out-projection output, the attention
-- LayerNorm and the final LayerNorm.
M.QT_POINTS = { bert = { "ffn_out", "ln1", "ln2" }, opt = { "h", "ffn_out", "attn_out", "ln1", "ln_f" },
                vit = { "h", "ffn_out", "attn_out", "ln1", "ln_f" } }

-- One row of QT's tables for a trained model: FP metric, max inf norm, avg kurtosis, and the
-- metric after post-training quantisation (o.wbits/o.abits, default W8A8).
-- o: n_eval, n_calib (16), n_stats, weight_range, estimator, percentile, wbits, abits.
function M.qt_row(spec, handle, family, o)
  local ctx, m, L = M.load(spec, handle)
  local fp = M.evaluate(ctx, m, { metric = L.metric, loader = L.val, n = o.n_eval })
  -- QT's own code's kurtosis μ₄/(σ⁴ + 1e-6) where the paper's numbers are compared (docs/METRICS.md)
  local st = M.outlier_stats(ctx, m, { loader = L.val, n = o.n_stats or o.n_eval, points = M.QT_POINTS[family],
                                       kurtosis = o.kurtosis or "qt_code" })
  local q = M.w8a8(ctx, m, { metric = L.metric, loader = L.val, n = o.n_eval, calib_loader = L.calib,
                             n_calib = o.n_calib or 16, wbits = o.wbits or 8, abits = o.abits or 8,
                             weight_range = o.weight_range, estimator = o.estimator, percentile = o.percentile })
  return { metric = L.metric, fp = fp.value, fp_loss = fp.loss, max_inf_norm = st.max_inf_norm,
           avg_kurtosis = st.avg_kurtosis, q = q.value, q_loss = q.loss, sites = q.sites, weights = q.weights }
end

-- ---------------------------------------------------------------- QT / SO profiles and specs
-- The settings that determine the trained models, one table per profile. The experiment
-- files copy these and add their own keys, so a model that two experiments share has the
-- same spec (and so the same cache hash) in both.
local function copy(t)
  if type(t) ~= "table" then return t end
  local o = {}
  for k, v in pairs(t) do o[k] = copy(v) end
  return o
end
M.copy = copy

-- QT's three families: BERT (encoder), the decoder ("opt": QT's OPT-125m; at the default
-- profiles the model organism's LLaMA-style decoder, because the OPT/GPT-2-style decoders with
-- learned positions form no sink on the organism's task in the budget: docs/ORGANISM.md) and
-- ViT. The settings of a family are the keys of its shared profile with a prefix: bert_<key>
-- from experiment.BERT_MLM_PROFILES, opt_<key> from experiment.LLAMA_LM_PROFILES (seq_len is
-- <family>_T), vit_<key> from M.VIT_PROFILES; qt_spec builds the family's spec through the shared
-- spec functions, so that QT's vanilla BERT of seed 1 is qt-fig1's model (one cached model).
local SPEC_SKIP = { eval_batches = true, seed = true }
local function prefixed(prefix, prof)
  local out = {}
  for k, v in pairs(prof) do
    if not SPEC_SKIP[k] then out[prefix .. "_" .. (k == "seq_len" and "T" or k)] = copy(v) end
  end
  return out
end
local function merge(...)
  local out = {}
  for _, t in ipairs({ ... }) do for k, v in pairs(t) do out[k] = v end end
  return out
end
-- the family's own settings back from the prefixed keys: { T = ..} -> { seq_len = .. }
local function family_cfg(cfg, prefix, seed)
  local c = { seed = seed }
  local n = #prefix + 1
  for k, v in pairs(cfg) do
    if k:sub(1, n) == prefix .. "_" then c[k:sub(n + 1)] = v end
  end
  c.seq_len = c.T
  return c
end
M.family_cfg = family_cfg

-- ViT on the synthetic images: the model organism's flat backgrounds at the default profiles
M.VIT_PROFILES = {
  quick = { preset = "vit-quick", image = 16, patch = 4, classes = 4, images = 64, style = "flat", data_seed = 1, seed = 1,
            batch = 4, steps = 4, lr = 1e-3, warmup = 1, schedule = "cosine", weight_decay = 0.03, beta2 = 0.999 },
  default = { preset = "vit-organism", image = 32, patch = 4, classes = 4, images = 4096, style = "flat", data_seed = 1, seed = 1,
              batch = 32, steps = 2500, lr = 3e-3, warmup = 100, schedule = "constant", weight_decay = 0.1, beta2 = 0.99 },
  long = { preset = "vit-organism", image = 32, patch = 4, classes = 4, images = 4096, style = "flat", data_seed = 1, seed = 1,
           batch = 32, steps = 10000, lr = 3e-3, warmup = 100, schedule = "constant", weight_decay = 0.1, beta2 = 0.99 },
  -- docs/EXPERIMENTS.md, paper-scale settings (ViT-S/16 300 epochs of ImageNet: here 300 epochs of a
  -- 102,400-image synthetic set at 224², batch 512 = 60k steps)
  paper = { preset = "vit-s16", image = 224, patch = 16, classes = 12, images = 102400, style = "textured", data_seed = 1, seed = 1,
            batch = 512, steps = 60000, lr = 1e-3, warmup = 5000, schedule = "cosine", weight_decay = 0.03, beta2 = 0.999 },
}
-- the ViT spec of a profile's settings (family_cfg(cfg, "vit", seed)) and an attention variant
function M.vit_spec(c, attn)
  local spec = M.image_spec({ n_images = c.images, image_size = c.image, classes = c.classes, data_seed = c.data_seed,
                        batch = c.batch, patch = c.patch, style = c.style }, c.preset, attn,
    { steps = c.steps, lr = c.lr, warmup = c.warmup, schedule = c.schedule,
      min_lr = c.schedule ~= "constant" and 0 or nil, weight_decay = c.weight_decay,
      betas = { 0.9, c.beta2 }, eps = 1e-8, clip = 1.0 }, c.seed)
  if c.n_layer then spec.model.overrides.n_layer = c.n_layer end   -- the organism map's depth knob
  return spec
end
-- the organism experiment's ViT: a profile of M.VIT_PROFILES with its seed
function M.vit_organism_spec(c) return M.vit_spec(c) end

local function qt_profile(name, extra)
  local E = require "outlierlab.experiment"
  return merge(prefixed("bert", E.BERT_MLM_PROFILES[name]), prefixed("opt", E.LLAMA_LM_PROFILES[name]),
               prefixed("vit", M.VIT_PROFILES[name]), extra)
end
local QT_PROFILES = {
  quick = qt_profile("quick", { n_seeds = 1, n_eval = 1, n_calib = 2, n_stats = 1 }),
  default = qt_profile("default", { n_seeds = 3, n_eval = 8, n_calib = 16, n_stats = 8 }),
  long = qt_profile("long", { n_seeds = 3, n_eval = 8, n_calib = 16, n_stats = 8 }),
  -- the papers' families and recipes (docs/EXPERIMENTS.md, paper-scale settings): BERT-base 1M
  -- steps, OPT-125m 125k steps (β2 0.95, wd 0.1, linear decay), ViT-S/16
  paper = merge(prefixed("bert", require("outlierlab.experiment").BERT_MLM_PROFILES.paper),
    prefixed("opt", merge(require("outlierlab.experiment").LLAMA_LM_PROFILES.paper,
      { preset = "opt-125m", vocab_size = 50272, seq_len = 512, batch = 192, steps = 125000, lr = 4e-4, warmup = 2000,
        schedule = "linear", weight_decay = 0.1, beta2 = 0.95 })),
    prefixed("vit", M.VIT_PROFILES.paper), { n_seeds = 3, n_eval = 64, n_calib = 16, n_stats = 64 }),
}
M.QT_PROFILES = QT_PROFILES
function M.qt_profiles(extra) return require("outlierlab.experiment").profiles_with(QT_PROFILES, extra or {}) end

-- QT's attention variants at the sequence length of the family (see M.qt_gamma):
--   vanilla: softmax; clipped: BERT γ = −0.025 at T = 128, OPT γ = −α/T with α = 12,
--   ViT γ = −1e−4 at 197 tokens; gated: linear gate per head, π_init = 0.5 (b_init = 0).
function M.qt_tokens(cfg, family)
  if family == "vit" then return (cfg.vit_image / cfg.vit_patch) ^ 2 + 1 end
  return cfg[family .. "_T"]
end
function M.qt_attention(cfg, family, variant)
  if variant == "vanilla" then return nil end
  if variant == "gated" then return { kind = "gated", gate = "linear", pi_init = 0.5 } end
  if variant ~= "clipped" then error("ptq.qt_attention: unknown variant " .. tostring(variant), 2) end
  local T = M.qt_tokens(cfg, family)
  if family == "bert" then return { kind = "clipped_softmax", gamma = M.qt_gamma(-0.025, 128, T) } end
  if family == "opt" then return { kind = "clipped_softmax", alpha = 12 } end
  return { kind = "clipped_softmax", gamma = M.qt_gamma(-1e-4, 197, T) }
end

-- QT's families through the shared spec functions (experiment.bert_mlm_spec / llama_lm_spec,
-- M.vit_spec) from the prefixed settings, with an attention variant and a seed
local function with_attention(spec, attn)
  if attn and attn ~= "softmax" then spec.model.overrides.attention = attn end
  return spec
end
function M.qt_spec(cfg, family, attn, seed)
  local E = require "outlierlab.experiment"
  if family == "bert" then return with_attention(E.bert_mlm_spec(family_cfg(cfg, "bert", seed)), attn)
  elseif family == "opt" then return with_attention(E.llama_lm_spec(family_cfg(cfg, "opt", seed)), attn)
  elseif family == "vit" then return M.vit_spec(family_cfg(cfg, "vit", seed), attn) end
  error("ptq.qt_spec: unknown family " .. tostring(family), 2)
end

-- SO's variant runs (SO Table 2 (a)–(e), App. D.1): at the default profiles the model
-- organism's LLaMA-style decoder (experiment.LLAMA_LM_PROFILES: the softmax model of seed 1 is
-- so-fig3's), at the paper profile SO's GPT-2 (SO App. B.3, docs/EXPERIMENTS.md: nanoGPT recipe,
-- no biases, dropout 0, tied embeddings, 491,520 tokens per step = 480 sequences of 1024).
local function so_profile(name, extra)
  local E = require "outlierlab.experiment"
  return merge(copy(E.LLAMA_LM_PROFILES[name]), extra)
end
local SO_PROFILES = {
  quick = so_profile("quick", { n_seeds = 1, n_eval = 1 }),
  default = so_profile("default", { n_seeds = 3, n_eval = 8 }),
  long = so_profile("long", { n_seeds = 3, n_eval = 8 }),
  paper = so_profile("paper", { preset = "gpt2-124m", vocab_size = 50304, n_tokens = 1000000000, seq_len = 1024,
                                batch = 480, steps = 50000, lr = 6e-4, warmup = 2000, schedule = "cosine",
                                weight_decay = 0.1, beta2 = 0.95, n_seeds = 1, n_eval = 64 }),
}
function M.so_profiles(extra) return require("outlierlab.experiment").profiles_with(SO_PROFILES, extra or {}) end
M.SO_VARIANTS = { "softmax", "fixed_bias", "ca_bias", "attn_bias", "ca_scale", "sigmoid" }
M.SO_LABELS = { softmax = "(a) default softmax", fixed_bias = "(b) fixed bias", ca_bias = "(c) context-aware bias",
                attn_bias = "(d) attention bias", ca_scale = "(e) context-aware scaling", sigmoid = "sigmoid attention" }
function M.so_spec(cfg, variant, seed)
  local c = copy(cfg)
  c.seed = seed
  return with_attention(require("outlierlab.experiment").llama_lm_spec(c), variant ~= "softmax" and { kind = variant } or nil)
end

return M
