-- Remedies leaderboard — which of the 2023–2026 remedies remove the attention sink, the massive
-- activation and the heavy tail on the model organism, and which make 4-bit quantisation work.
--
-- Method (docs/reference/attention.md, training.md, metrics.md, compression.md): the LLaMA-style
-- decoder organism (the recipe and data of so-table3/so-fig11, so vanilla is shared through the
-- cache) trained with vanilla softmax and AdamW, and with one remedy at a time: QT's clipped
-- softmax and gated attention, SO's variants (b)–(e), sigmoid attention in its three forms (SO
-- b = −log T, Ramapuram et al. b = −log n, Gu et al. without bias), softmax1, the learned sink
-- logit (gpt-oss), Qiu et al.'s gate after SDPA (headwise, elementwise), softpick; Muon and
-- OrthoAdam instead of AdamW; single-scale RMSNorm; and Outlier-Safe Pre-Training's recipe (Muon,
-- single-scale RMSNorm, orthogonal projections after the embedding and before the head); the rescalers
-- of arXiv 2601.22966 (PreAffine, GatedNorm alone and with Qiu's gate, DyT, residual clipping at 10;
-- nn/norms.lua). cfg.n_seeds seeds each. On held-out batches of each trained model:
-- validation loss; Gu et al.'s sink rate (first-token importance > 0.3, % of heads); the massive
-- ratio at the first token (mean top-1 |h| at position 0 over the mean median |h|, largest over
-- layers); Pearson kurtosis of the block outputs with and without the first token (averaged over
-- layers); the residual-sink share (the largest top-3 share of one dimension of h, measure/residual)
-- and the peak |h| (the Qwen team's "peak activation"); and the loss after RTN W8A8, W4A8, W4A4, W4A4 + Walsh–Hadamard rotation and W4A4 +
-- SmoothQuant (outlierlab.compress.rtn; per-channel weights, per-token activations). Mean ± sd over
-- seeds; a difference against vanilla counts only beyond the seed spread (outlierlab.seeds).
local seeds = require "outlierlab.judge.seeds"
local figure = require "outlierlab.figure"
local views = require "outlierlab.figure.views"
local quant = require "outlierlab.compress.rtn"
local analysis = require "outlierlab.measure.metrics"
local AR = require "outlierlab.measure.recent"
local residual = require "outlierlab.measure.residual"
local config = require "outlierlab.config"
local evaluate = require "outlierlab.compress.evaluate"
local recipes = require "outlierlab.recipes"

-- key, short (the figure's bar label), label (the table's), attention spec (nil: softmax), optimizer,
-- norm_gain, the paper's claim
local ALL = {
  { key = "vanilla", short = "vanilla", label = "vanilla (softmax, AdamW)" },
  { key = "clipped", short = "clipped softmax", label = "QT clipped softmax", attention = { kind = "clipped_softmax", gamma = -0.025 },
    claim = "QT: removes outliers (kurtosis, max inf norm) and makes W8A8 work" },
  { key = "qt_gated", short = "QT gate", label = "QT gated attention", attention = { kind = "gated", gate = "linear" },
    claim = "QT: removes outliers and makes W8A8 work" },
  { key = "fixed_bias", short = "(b) fixed bias", label = "SO (b) fixed bias", attention = "fixed_bias" },
  { key = "ca_bias", short = "(c) ctx bias", label = "SO (c) context-aware bias", attention = "ca_bias" },
  { key = "attn_bias", short = "(d) attn bias", label = "SO (d) attention bias", attention = "attn_bias",
    claim = "SO / Sun et al.: an explicit sink removes the massive activation" },
  { key = "ca_scale", short = "(e) ctx scaling", label = "SO (e) context-aware scaling", attention = "ca_scale",
    claim = "SO: removes systematic outliers" },
  -- the organism trains at T = n (its context length), where SO's b = −log T and Ramapuram et al.'s
  -- b = −log n are the same bias and the same model: one row (same_as), sigmoid_logn kept for --variants
  { key = "sigmoid", short = "sigmoid −log T", label = "sigmoid, b = −log T (SO) = −log n (Ramapuram et al.) at T = n", attention = "sigmoid" },
  { key = "sigmoid_logn", short = "sigmoid −log n", label = "sigmoid, b = −log n (Ramapuram et al.)", attention = "sigmoid_logn", same_as = "sigmoid" },
  { key = "sigmoid_nobias", short = "sigmoid no bias", label = "sigmoid, no bias (Gu et al.)", attention = "sigmoid_nobias",
    claim = "Gu et al.: no attention sink up to 1B parameters" },
  { key = "softmax1", short = "softmax1", label = "softmax1", attention = "softmax1",
    claim = "Kaul et al.: first-token attention 65 % → 3.3 % (with OrthoAdam); StreamingLLM: not enough alone at 160M" },
  { key = "sink_logit", short = "sink logit", label = "learned sink logit (gpt-oss)", attention = "sink_logit" },
  { key = "gated_head", short = "Qiu gate head", label = "Qiu gate after SDPA, headwise", attention = { kind = "gated_sdpa", form = "headwise" },
    claim = "Qiu et al.: first-token attention and the largest activation drop sharply" },
  { key = "gated_elem", short = "Qiu gate elem", label = "Qiu gate after SDPA, elementwise", attention = { kind = "gated_sdpa", form = "elementwise" },
    claim = "Qiu et al.: first-token attention and the largest activation drop sharply" },
  { key = "softpick", short = "softpick", label = "softpick", attention = "softpick",
    claim = "Zuhri et al.: 0 % sink rate, kurtosis 340 vs 33,510 at 340M" },
  { key = "muon", short = "Muon", label = "Muon", optimizer = "muon" },
  { key = "orthoadam", short = "OrthoAdam", label = "OrthoAdam", optimizer = "orthoadam",
    claim = "Kaul et al.: with softmax-1, kurtosis 1,657 → 3.1" },
  { key = "orthoadam_sm1", short = "OrthoAdam+softmax1", label = "OrthoAdam + softmax1", optimizer = "orthoadam", attention = "softmax1",
    claim = "Kaul et al.: kurtosis 1,657 → 3.1, first-token attention 65 % → 3.3 %" },
  { key = "single_norm", short = "single-scale norm", label = "single-scale RMSNorm", norm_gain = "single" },
  { key = "osp", short = "OSP", label = "Outlier-Safe Pre-Training (Muon, single-scale norm, projections)", optimizer = "muon",
    norm_gain = "single", embed_proj = true,
    claim = "Park et al.: excess kurtosis 1,818 → 0.04, far better 4-bit quantisation" },
  -- the rescalers of arXiv 2601.22966 (model = the model-config keys of nn/norms.lua)
  { key = "preaffine", short = "PreAffine", label = "PreAffine RMSNorm", model = { norm_variant = "preaffine" },
    claim = "Qwen team (MoE 24B): W4A4 drop −2.76, worse than GatedNorm's −1.23" },
  { key = "gatednorm", short = "GatedNorm", label = "GatedNorm (r = 16, every norm)", model = { norm_variant = "gated" },
    claim = "Qwen team (2B): with gated attention, peak activation 6,000 → 430, loss 1.964 → 1.951" },
  { key = "ga_gatednorm", short = "GA+GatedNorm", label = "Qiu gate elementwise + GatedNorm", model = { norm_variant = "gated" },
    attention = { kind = "gated_sdpa", form = "elementwise" }, claim = "Qwen team (2B): peak activation 430, loss 1.951 (best)" },
  { key = "dyt", short = "DyT", label = "DyT instead of every norm (α₀ 0.5)", model = { norm_variant = "dyt" },
    claim = "Qwen team (2B): peak activation 73 but loss +0.259" },
  { key = "resid_clip", short = "resid clip 10", label = "residual clipping at 10", model = { residual_clip = 10.0 },
    claim = "Qwen team (2B): clipping at ≤ 100 diverges" },
}
local BY_KEY = {}
for _, v in ipairs(ALL) do BY_KEY[v.key] = v end

-- the settings of outlierlab.compress.rtn (w8a8, w4a8, w4a4, w4a4_hadamard, w4a4_smooth, then the
-- FP8/MXFP4/NVFP4 formats and the KV cache: quant.LEADERBOARD) and their labels
local QUANT, QUANT_NAME, QUANT_AT = {}, {}, {}
for i, s in ipairs(quant.LEADERBOARD) do QUANT[i], QUANT_NAME[s.name], QUANT_AT[s.name] = s.name, s.label, i end
-- the table's quantisation columns
local QUANT_COLS = { "w8a8", "w4a4", "w4a4_hadamard", "w4a4_smooth", "w8a8_e4m3", "w4a4_mxfp4", "w4a4_nvfp4", "kv2", "kv2_keep1", "kv2_top1" }
local METRICS = { "val_loss", "sink_rate", "massive_first", "kurtosis", "kurtosis_no_first", "resid_share", "peak_abs" }
local METRIC_NAME = { val_loss = "validation loss", sink_rate = "sink rate (%)", massive_first = "top-1/median at the first token",
                      kurtosis = "avg kurtosis", kurtosis_no_first = "avg kurtosis without the first token",
                      resid_share = "residual sink: largest top-3 share of one dimension", peak_abs = "peak |h|" }

local FIG = figure.declare{
  title = "Remedies for sinks and outliers on the decoder organism: phenomena and 4-bit quantisation",
  dims = {
    { "variant", long_name = "remedy (attention variant, optimizer or norm) on the LLaMA-style organism", labels = true },
    { "seed", long_name = "training seed" },
    { "metric", long_name = "measurement on held-out batches", labels = true },
    { "setting", long_name = "post-training quantisation setting", labels = true },
  },
  vars = {
    { "metric_value", dims = { "variant", "metric", "seed" }, long_name = "the measurement per seed (see metric)", units = "1" },
    { "metric_mean", dims = { "variant", "metric" }, long_name = "the measurement, mean over seeds", units = "1" },
    { "metric_sd", dims = { "variant", "metric" }, long_name = "the measurement, sample standard deviation over seeds", units = "1" },
    { "quant_loss", dims = { "variant", "setting", "seed" }, long_name = "held-out loss after quantisation, per seed", units = "1" },
    { "quant_delta_mean", dims = { "variant", "setting" }, long_name = "held-out loss after quantisation minus the FP loss, mean over seeds", units = "1" },
    { "quant_delta_sd", dims = { "variant", "setting" }, long_name = "held-out loss after quantisation minus the FP loss, sample standard deviation over seeds", units = "1" },
    { "sink_rate_mean", dims = { "variant" }, long_name = "Gu et al. sink rate (percent of heads with first-token importance above 0.3), mean over seeds", units = "percent" },
    { "sink_rate_sd", dims = { "variant" }, long_name = "Gu et al. sink rate, sample standard deviation over seeds", units = "percent" },
    { "n_seeds", dims = {}, long_name = "training seeds per variant", units = "1", type = "int" },
  },
  panels = {
    { kind = "bars", x = "variant", y = "sink_rate_mean", err = "sink_rate_sd",
      title = "sink rate (Gu et al., ε = 0.3)", ylabel = "% of heads", note = "mean ± sd over {=n_seeds} seed(s)" },
    { kind = "bars", x = "variant", y = "metric_mean", err = "metric_sd", at = { metric = 2 },
      title = "massive activation at the first token", ylabel = "top-1 |h| / median |h|", note = "largest over layers" },
    { kind = "bars", x = "variant", y = "metric_mean", err = "metric_sd", at = { metric = 3 },
      title = "kurtosis of the block outputs", ylabel = "Pearson kurtosis", note = "averaged over layers" },
    { kind = "bars", x = "variant", y = "metric_mean", err = "metric_sd", at = { metric = 5 },
      title = "residual sink", ylabel = "top-3 share of one dimension", note = "over every layer's tokens (arXiv 2601.22966)" },
    { kind = "bars", x = "variant", y = "quant_delta_mean", err = "quant_delta_sd", at = { setting = 2 },
      title = "W4A4 RTN", ylabel = "loss − FP loss", note = "per-channel weights, per-token activations" },
    { kind = "bars", x = "variant", y = "quant_delta_mean", err = "quant_delta_sd", at = { setting = 3 },
      title = "W4A4 + Walsh–Hadamard rotation", ylabel = "loss − FP loss", note = "QuaRot-style, exact in full precision" },
    { kind = "bars", x = "variant", y = "quant_delta_mean", err = "quant_delta_sd", at = { setting = 4 },
      title = "W4A4 + SmoothQuant (α = 0.5)", ylabel = "loss − FP loss", note = "mean ± sd over {=n_seeds} seed(s)" },
  },
}

local function spec_of(cfg, v, seed)
  local c = config.deep_copy(cfg)
  c.seed = seed
  c.optimizer, c.norm_gain, c.embed_proj = v.optimizer, v.norm_gain, v.embed_proj
  for k, x in pairs(v.model or {}) do c[k] = x end
  local spec = recipes.llama_lm_spec(c)
  if v.attention then spec.model.overrides.attention = type(v.attention) == "string" and { kind = v.attention } or v.attention end
  return spec
end

local function train(run)
  local list = {}
  for _, key in ipairs(run.cfg.variants) do
    local v = BY_KEY[key] or error("remedies: unknown variant '" .. tostring(key) .. "'", 0)
    for _, s in ipairs(seeds.list(run.cfg)) do list[#list + 1] = { key = key, seed = s } end
  end
  return run:sweep(list, function(it)
    local spec = spec_of(run.cfg, BY_KEY[it.key], it.seed)
    local h = recipes.fit(run, spec)
    return { key = it.key, seed = it.seed, spec = spec, handle = h }
  end)
end

-- kurtosis of the block outputs (with and without the first token) and the massive ratio at the
-- first token, over the batches
local function outliers(ctx, m, batches, cfg)
  local all, nofirst, first_top, median, peak = {}, {}, {}, {}, 0
  local cur
  AR.run_model(ctx, m, batches, function(name, l, x)
    if name ~= "h" then return end
    local B, T, Cd = x:size(0), x:size(1), x:size(2)
    all[l] = all[l] or analysis.Stats{ T = T, C = Cd, topk = 1 }
    nofirst[l] = nofirst[l] or analysis.Stats{ T = T, C = Cd, topk = 1 }
    local mask = ctx:tensor({ B, T }, { dtype = "i32" })
    for b = 0, B - 1 do for t = 0, T - 1 do mask.idata[b * T + t] = (t > 0 and (not cur.pad_mask or cur.pad_mask.idata[b * T + t] ~= 0)) and 1 or 0 end end
    all[l]:update(x, nil, cur.pad_mask)
    nofirst[l]:update(x, nil, mask)
    local tm = AR.top_median(x, cur.pad_mask)
    local ft = AR.top_median(x:narrow(1, 0, 1))
    first_top[l] = (first_top[l] or 0) + ft.top[1]
    for i = 0, tonumber(x.numel) - 1 do peak = math.max(peak, math.abs(x.data[i])) end   -- Qwen's peak |activation|
    median[l] = (median[l] or 0) + tm.median
  end, function(_, b) cur = b end)
  local k, kn, nl, massive = 0, 0, 0, 0
  for l, s in pairs(all) do
    k = k + s:result().avg_kurtosis
    kn = kn + nofirst[l]:result().avg_kurtosis
    nl = nl + 1
    if median[l] > 0 then massive = math.max(massive, first_top[l] / median[l]) end
  end
  return { kurtosis = k / nl, kurtosis_no_first = kn / nl, massive_first = massive, peak_abs = peak }
end

-- one model per sweep member: under MPI each rank analyses its share (run:sweep)
local function analyze(run)
  local cfg = run.cfg
  local rows = run:sweep(run.out.train, function(t)
    local ctx, m, L = recipes.load(t.spec, t.handle)
    local val = quant.batches(ctx, L.val(), cfg.n_eval)
    local calib = quant.batches(ctx, L.calib(), cfg.n_calib)
    local r = { key = t.key, seed = t.seed }
    r.val_loss = quant.evaluate(ctx, m, val)
    r.sink_rate = AR.sink_rate(ctx, m, val).rate
    local o = outliers(ctx, m, val, cfg)
    r.massive_first, r.kurtosis, r.kurtosis_no_first, r.peak_abs = o.massive_first, o.kurtosis, o.kurtosis_no_first, o.peak_abs
    r.resid_share = residual.residual_sinks(ctx, m, val).max_share
    local q = quant.run(ctx, m, val, { calib = calib, settings = quant.LEADERBOARD, log = function(fmt, ...)
      run:log("%s seed %d: " .. fmt, t.key, t.seed, ...) end })
    for _, s in ipairs(q.settings) do r[s.name] = s.applicable and s.loss or 0 / 0 end
    run:log("%-14s seed %d: loss %.3f, sink rate %.0f%%, massive at first %.1f, kurtosis %.1f (w/o first %.1f), W8A8 %.3f, W4A4 %.3f, +H %.3f, +SQ %.3f",
      t.key, t.seed, r.val_loss, r.sink_rate, r.massive_first, r.kurtosis, r.kurtosis_no_first, r.w8a8, r.w4a4,
      r.w4a4_hadamard, r.w4a4_smooth)
    return r
  end)
  local sl = seeds.list(cfg)
  local v = { metric_value = {}, metric_mean = {}, metric_sd = {}, quant_loss = {}, quant_delta_mean = {}, quant_delta_sd = {},
              sink_rate_mean = {}, sink_rate_sd = {}, n_seeds = #sl }
  local labels = {}
  for vi, key in ipairs(cfg.variants) do
    labels[vi] = BY_KEY[key].short
    v.metric_value[vi], v.metric_mean[vi], v.metric_sd[vi] = {}, {}, {}
    v.quant_loss[vi], v.quant_delta_mean[vi], v.quant_delta_sd[vi] = {}, {}, {}
    local fp = {}
    for si, s in ipairs(sl) do fp[si] = (evaluate.values(rows, { key = key, seed = s }, "val_loss"))[1] end
    for mi, mk in ipairs(METRICS) do
      local xs = {}
      for si, s in ipairs(sl) do xs[si] = (evaluate.values(rows, { key = key, seed = s }, mk))[1] end
      v.metric_value[vi][mi] = xs
      v.metric_mean[vi][mi], v.metric_sd[vi][mi] = seeds.stats(xs)
    end
    v.sink_rate_mean[vi], v.sink_rate_sd[vi] = v.metric_mean[vi][2], v.metric_sd[vi][2]
    for qi, q in ipairs(QUANT) do
      local xs = {}
      for si, s in ipairs(sl) do xs[si] = (evaluate.values(rows, { key = key, seed = s }, q))[1] end
      v.quant_loss[vi][qi] = xs
      v.quant_delta_mean[vi][qi], v.quant_delta_sd[vi][qi] = seeds.stats(seeds.map(xs, function(x, si) return x - fp[si] end))
    end
  end
  local mnames, qnames = {}, {}
  for i, k in ipairs(METRICS) do mnames[i] = METRIC_NAME[k] end
  for i, k in ipairs(QUANT) do qnames[i] = QUANT_NAME[k] end
  return { coords = { variant = labels, seed = sl, metric = mnames, setting = qnames }, vars = v }
end

local function summary(run)
  local cfg = run.cfg
  local v = figure.values(FIG, run.out.analyze)
  local ns = v.n_seeds
  local function per_seed(vi, mi)
    local xs = {}
    for s = 1, ns do xs[s] = v.metric_value(vi, mi, s) end
    return xs
  end
  local function qdelta(vi, qi)
    local xs = {}
    for s = 1, ns do xs[s] = v.quant_loss(vi, qi, s) - v.metric_value(vi, 1, s) end
    return xs
  end
  local function mark(c, lower_is_better)
    if c.sign == nil then return "" end
    if c.sign == 0 then return " (≈)" end
    local better = (c.sign == -1) == lower_is_better
    return better and " (**better**)" or " (worse)"
  end
  local base = nil
  for vi, key in ipairs(cfg.variants) do if key == "vanilla" then base = vi end end
  local lines = {
    "| remedy | val loss | sink rate % | top-1/median at first token | kurtosis | kurtosis w/o first | residual sink share | peak \\|h\\| | ΔW8A8 | ΔW4A4 | ΔW4A4+H | ΔW4A4+SQ " ..
      "| ΔW8A8 FP8 E4M3 | ΔW4A4 MXFP4 | ΔW4A4 NVFP4 | ΔKV2 | ΔKV2, first token kept | ΔKV2, largest token kept | paper's claim |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" }
  for vi, key in ipairs(cfg.variants) do
    local cells = { BY_KEY[key].label }
    for mi = 1, #METRICS do
      local c = base and vi ~= base and seeds.compare(per_seed(vi, mi), per_seed(base, mi)) or { }
      cells[#cells + 1] = seeds.pm_of(v.metric_mean(vi, mi), v.metric_sd(vi, mi), ns, mi == 2 and "%.0f" or "%.3g") .. mark(c, true)
    end
    for _, name in ipairs(QUANT_COLS) do
      local qi = QUANT_AT[name]
      local c = base and vi ~= base and seeds.compare(qdelta(vi, qi), qdelta(base, qi)) or {}
      cells[#cells + 1] = seeds.pm_of(v.quant_delta_mean(vi, qi), v.quant_delta_sd(vi, qi), ns, "%.3f") .. mark(c, true)
    end
    cells[#cells + 1] = BY_KEY[key].claim or ""
    lines[#lines + 1] = "| " .. table.concat(cells, " | ") .. " |"
  end
  -- the claim tested here: on the vanilla organism, W4A4 + Hadamard is never worse than plain W4A4
  -- beyond the seed spread
  local holds, check = nil, "vanilla is not in this profile"
  if base then
    local c = seeds.compare(qdelta(base, 4), qdelta(base, 3))
    holds = seeds.verdict{ c.sign == 1 and "against" or (c.sign ~= nil and "as claimed" or "unresolved") }
    check = string.format("vanilla: W4A4 + Hadamard loss increase %s vs plain W4A4 %s (%s)",
      seeds.pm_of(v.quant_delta_mean(base, 4), v.quant_delta_sd(base, 4), ns, "%.3f"),
      seeds.pm_of(v.quant_delta_mean(base, 3), v.quant_delta_sd(base, 3), ns, "%.3f"), seeds.word(c, "better", "**worse**"))
  end
  local notes = table.concat({
    "Mean ± sd over " .. ns .. " seed(s); (better)/(worse)/(≈) against vanilla by the seed rule: " .. seeds.RULE .. ".",
    "ΔX = held-out loss after quantisation X minus the FP loss of the same model (RTN, per-channel weights, per-token activations; docs/reference/compression.md). NaN: not applicable (QT's per-head gate cannot be rotated).",
    "", table.concat(lines, "\n"), "", "Check: " .. check .. ".",
  }, "\n")
  return {
    paper = "each remedy's paper claims fewer sinks, smaller massive activations and lighter tails (see the last column); QuaRot: W4A4 works after a Hadamard rotation",
    reproduced = check,
    holds = holds,
    notes = notes,
  }
end

local function profile(name, extra)
  local c = config.deep_copy(recipes.LLAMA_LM_PROFILES[name])
  for k, val in pairs(extra) do c[k] = val end
  return c
end
-- every distinct model once (a remedy with same_as is the same model as another at T = n)
local KEYS = {}
for _, v in ipairs(ALL) do if not v.same_as then KEYS[#KEYS + 1] = v.key end end

return {
  id = "remedies",
  title = "Remedies leaderboard: sink rate, massive activation, kurtosis and 4-bit quantisation on the decoder organism",
  source = { paper = "QT, SO and the 2024–2026 work: Gu et al. 2025, Sun et al. 2024, Qiu et al. 2025, gpt-oss, Zuhri et al. 2025, Ramapuram et al. 2025, Park et al. 2025, Kaul et al. 2025, QuaRot, SmoothQuant",
             figure = "leaderboard",
             claim = "On the vanilla organism, W4A4 with a Walsh–Hadamard rotation is never worse than plain W4A4 beyond the seed spread (the rotation is exact in full precision)." },
  profiles = {
    quick = profile("quick", { n_seeds = 1, n_eval = 1, n_calib = 1,
                               variants = { "vanilla", "sink_logit", "softpick", "gated_elem", "muon", "orthoadam", "osp" } }),
    default = profile("default", { n_seeds = 3, n_eval = 8, n_calib = 4, variants = KEYS }),
    long = profile("long", { n_seeds = 3, n_eval = 8, n_calib = 4, variants = KEYS }),
  },
  stages = figure.stages(train, analyze, FIG, { { "views", views.stage{ key = function(it) return it.key end, label = function(it) return BY_KEY[it.key].label end,
                                   keep = function(it, run) return it.seed == run.cfg.seed end } } }),
  summary = summary,
}
