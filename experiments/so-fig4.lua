-- SO Fig. 4 — activation outliers in the down-projection inputs x_down: which layers, which
-- tokens, which channels, and two layers in detail.
--
-- Method (SO §3.1, Fig. 4, App. B.1): the LLaMA-style model of so-fig3 (same settings, one
-- training). Over held-out sequences, hook the input of every layer's down-projection,
-- x_down = silu(x·W_gateᵀ) ∘ (x·W_upᵀ), and record per sequence the three largest |x_down| and
-- the median (averaged over sequences). An element is an outlier when |x| > τ·mean|x| over the
-- sequence (SO: τ = 1000); a token is an outlier token when one of its elements is. The two
-- layers with the largest top-1/median are shown in detail: |x_down| of one held-out sequence
-- over tokens and channels. SO finds the outliers confined to a few shallow and deep layers, at
-- the start token and weak-semantic tokens, in a few channels.
local analysis = require "outlierlab.measure.metrics"
local probes = require "outlierlab.measure.probes"
local figure = require "outlierlab.figure"
local inspect = require "outlierlab.measure.inspect"
local batcher = require "outlierlab.data.batcher"
local batches = require "outlierlab.measure.batches"
local recipes = require "outlierlab.recipes"

local model_spec = recipes.llama_lm_spec   -- shared with so-fig3: one trained model
local CATS = analysis.categories

local FIG = figure.declare{
  title = "Activation outliers in the down-projection inputs x_down (SO Fig. 4, reproduced)",
  dims = {
    { "layer", long_name = "transformer layer (0-based)" },
    { "rank", long_name = "rank among the largest |x_down| of a sequence (1 = largest)" },
    { "category", long_name = "token category", labels = true },
    { "detail", long_name = "layer shown in detail (the two largest top-1/median)" },
    { "position", long_name = "token of the held-out sequence shown in detail", labels = true },
    { "channel", long_name = "x_down channel (0-based)" },
  },
  vars = {
    { "top_abs", dims = { "layer", "rank" }, long_name = "k-th largest |x_down| per sequence, averaged", units = "1", label = "top-{rank}" },
    { "top1_abs", dims = { "layer" }, long_name = "largest |x_down| per sequence, averaged", units = "1", label = "top-1" },
    { "median_abs", dims = { "layer" }, long_name = "median |x_down| per sequence, averaged", units = "1", label = "median" },
    { "outlier_tokens", dims = { "layer" }, long_name = "tokens with an x_down outlier (|x| > tau mean|x| of the sequence)", units = "1", type = "int", label = "outlier tokens" },
    { "outlier_tokens_by_category", dims = { "category" }, long_name = "x_down outlier tokens over all layers by token category", units = "1", type = "int", label = "outlier tokens" },
    { "outlier_channels", dims = { "layer" }, long_name = "channels with at least one x_down outlier", units = "1", type = "int" },
    { "x_down_abs", dims = { "detail", "position", "channel" }, long_name = "|x_down| of one held-out sequence in the layers shown in detail", units = "1" },
    { "peak_ratio", dims = {}, long_name = "max over layers of top-1 / median |x_down|", units = "1" },
    { "peak_layer", dims = {}, long_name = "layer of the largest top-1 / median", units = "1", type = "int" },
    { "total_outlier_tokens", dims = {}, long_name = "x_down outlier tokens over all layers", units = "1", type = "int" },
    { "initial_weak_share", dims = {}, long_name = "share of x_down outlier tokens at the initial token or weak-semantic tokens", units = "1" },
    { "layers_with_outliers", dims = {}, long_name = "layers with at least one x_down outlier token", units = "1", type = "int" },
  },
  panels = {
    { kind = "line", x = "layer", y = { "top1_abs", "median_abs" }, logy = true, title = "largest and median |x_down| per layer",
      xlabel = "layer", ylabel = "|x_down| (log scale)" },
    { kind = "bars", x = "layer", y = "outlier_tokens", title = "outlier tokens per layer", xlabel = "layer",
      zero_is_empty = true, why_empty = "no x_down outlier at this τ in any layer" },
    { kind = "bars", x = "category", y = "outlier_tokens_by_category", title = "outlier tokens by category",
      zero_is_empty = true, why_empty = "no x_down outlier at this τ" },
    { kind = "heatmap", z = "x_down_abs", each = "detail", title = "|x_down| of one sequence, layer {detail}",
      xlabel = "channel", ylabel = "token", cblabel = "|x_down|" },
  },
}

local function train(run) return recipes.fit(run, model_spec(run.cfg)) end

local function analyze(run)
  local cfg, spec = run.cfg, model_spec(run.cfg)
  local corpus = batcher.corpus(spec.data, run)
  local ctx, m = recipes.load(spec, run.out.train)
  local rule = analysis.rule{ kind = "tau_mean", tau = cfg.tau, scope = "sequence" }
  local F = m.cfg.d_ff
  local stats = analysis.LayerStats{ T = cfg.seq_len, C = F, V = m.cfg.vocab_size, topk = 3, rule = rule,
                                     category = corpus.category }
  local P = probes.new{ points = { "x_down" } }
  P:attach("x_down", stats)
  batches.probe_batches(ctx, m, P, corpus, spec, cfg.eval_batches)
  local res = stats:result()
  local layers, top, top1, med, ntok, nch = {}, {}, {}, {}, {}, {}
  local bycat = { 0, 0, 0, 0 }
  local ratios = {}
  for i, l in ipairs(res.layers) do
    local r = res[l]
    layers[i] = l
    top[i] = { r.avg_topk[1], r.avg_topk[2], r.avg_topk[3] }
    top1[i], med[i] = r.avg_topk[1], r.avg_median
    ntok[i] = r.outliers.tokens
    local c = 0
    for _, n in ipairs(r.outliers.by_channel) do if n > 0 then c = c + 1 end end
    nch[i] = c
    for j, cat in ipairs(CATS) do bycat[j] = bycat[j] + r.outliers.tokens_by_category[cat] end
    ratios[i] = { r.avg_topk[1] / r.avg_median, l }
  end
  -- the two layers of the largest top-1/median, in layer order
  table.sort(ratios, function(a, b) return a[1] > b[1] end)
  local detail = {}
  for k = 1, math.min(2, #ratios) do detail[k] = ratios[k][2] end
  table.sort(detail)
  local cap = inspect.capture(ctx, m, corpus, spec, { points = { "x_down" }, layers = detail })
  local xd = {}
  for k, l in ipairs(detail) do xd[k] = inspect.abs(inspect.get(cap, "x_down", l).data) end
  local total, iw, with = 0, bycat[1] + bycat[3], 0
  for _, n in ipairs(ntok) do total = total + n if n > 0 then with = with + 1 end end
  return {
    coords = { layer = layers, rank = 3, category = CATS, detail = detail, position = cap.labels, channel = F },
    vars = { top_abs = top, top1_abs = top1, median_abs = med, outlier_tokens = ntok, outlier_tokens_by_category = bycat,
             outlier_channels = nch, x_down_abs = xd, peak_ratio = ratios[1][1], peak_layer = ratios[1][2],
             total_outlier_tokens = total, initial_weak_share = total > 0 and iw / total or 0 / 0,
             layers_with_outliers = with },
    attrs = { tau = cfg.tau },
  }
end

local function summary(run)
  local a = run.out.analyze
  local v = figure.values(FIG, a)
  local nl = #a.coords.layer
  local none = v.total_outlier_tokens == 0
  local holds   -- without an outlier there is nothing to locate
  if not none then holds = v.initial_weak_share > 0.5 and v.layers_with_outliers < nl end
  return {
    paper = "LLaMA2-7B: x_down outliers (top-1 in the thousands against a median near 0) only in a few shallow and deep layers (layer 2, layer 31), at the start token and weak-semantic tokens, in a few channels",
    reproduced = string.format("max over layers of top-1/median |x_down| = %.1f (layer %d); %d outlier tokens at τ = %g in %d of %d layers (%.0f %% initial or weak-semantic)",
      v.peak_ratio, v.peak_layer, v.total_outlier_tokens, a.attrs.tau, v.layers_with_outliers, nl, 100 * (none and 0 or v.initial_weak_share)),
    holds = holds,
    notes = "Criterion: at least one x_down outlier token at this τ, more than half of them initial or weak-semantic, and not every layer has them." ..
      (none and " No x_down element exceeds τ·mean|x| here: the layer and category panels say so instead of showing empty bars." or ""),
  }
end

return {
  id = "so-fig4",
  title = "Activation outliers in the down-projection inputs x_down: layers, tokens, two layers in detail",
  source = { paper = "SO (An et al. 2025)", figure = "Fig. 4",
             claim = "Activation outliers in x_down are confined to a few shallow and deep layers, at the start token and weak-semantic tokens, in a few channels." },
  profiles = recipes.profiles_with(recipes.LLAMA_LM_PROFILES, { quick = { tau = 10 }, default = { tau = 100 }, paper = { tau = 1000 } }),
  stages = figure.stages(train, analyze, FIG),
  summary = summary,
}
