-- SO Fig. 3 — activation outliers in the layer outputs h_l of a LLaMA-style model.
--
-- Method (SO §3, Fig. 3): train a decoder (RMSNorm, SwiGLU, RoPE: the TinyLLaMA
-- architecture of SO App. D.2) on the profile's data (default: the model organism's task; --data=corpus: the generated corpus), each sequence starting with BOS.
-- Over held-out sequences, hook the output h_l of every layer and record, per sequence, the
-- three largest |h| and the median |h| (averaged over sequences). An element is an activation
-- outlier when |h_ij| > τ·mean|h| over the sequence (SO: τ = 1000); a token is an outlier
-- token when one of its elements is. Count outlier tokens by category (initial, delimiter,
-- weak-semantic, other) and outlier elements by channel. The paper finds outliers from the
-- shallow layers on, persisting through the middle and vanishing in the last layers, at the
-- initial token and weak-semantic tokens, in a few fixed channels.
local analysis = require "outlierlab.measure.metrics"
local remedies = require "outlierlab.measure.recent"
local quant = require "outlierlab.compress.rtn"
local probes = require "outlierlab.measure.probes"
local figure = require "outlierlab.figure"
local views = require "outlierlab.figure.views"
local verdict = require "outlierlab.judge.verdict"
local batcher = require "outlierlab.data.batcher"
local batches = require "outlierlab.measure.batches"
local recipes = require "outlierlab.recipes"

local model_spec = recipes.llama_lm_spec   -- shared with so-fig6: one trained model

local function train(run) return recipes.fit(run, model_spec(run.cfg)) end

local CATS = analysis.categories   -- initial, delimiter, weak, other
-- the verdict's margins (SO §3: outliers at the initial and weak-semantic tokens, a few channels,
-- vanishing in the last layers)
local SHARE_MIN, CHANNELS_MAX, VANISH = 0.9, 4, 0.5
-- the token and channel panels also count at a looser threshold τ/LOOSE, so that a model with no
-- outlier at τ still shows where its largest values sit (the verdict is decided at τ alone)
local LOOSE = 10

local FIG = figure.declare{
  title = "Activation outliers in the layer outputs h_l (SO Fig. 3, reproduced; τ = {@tau})",
  dims = {
    { "layer", long_name = "transformer layer (0-based)" },
    { "rank", long_name = "rank of the value among the largest |h| of a sequence (1 = largest)" },
    { "category", long_name = "token category", labels = true },
    { "channel", long_name = "hidden dimension (0-based)" },
    { "scale", long_name = "factor the initial token's state is multiplied by" },
  },
  vars = {
    { "top_abs", dims = { "layer", "rank" }, long_name = "k-th largest |h| of the layer output per sequence, averaged", units = "1", label = "top-{rank}" },
    { "median_abs", dims = { "layer" }, long_name = "median |h| of the layer output per sequence, averaged", units = "1", label = "median" },
    { "outlier_tokens", dims = { "layer" }, long_name = "tokens with an activation outlier (|h| > tau mean|h| of the sequence)", units = "1", type = "int", label = "τ = {@tau}" },
    { "outlier_tokens_by_category", dims = { "category" }, long_name = "outlier tokens over all layers by token category", units = "1", type = "int", label = "τ = {@tau}" },
    { "outlier_count_by_channel", dims = { "channel" }, long_name = "activation outlier elements over all layers by hidden dimension", units = "1", type = "int", label = "τ = {@tau}" },
    { "outlier_tokens_loose", dims = { "layer" }, long_name = "tokens with an element above tau_loose mean|h| of the sequence (tau_loose = tau/10)", units = "1", type = "int", label = "τ/10 = {@tau_loose}" },
    { "outlier_tokens_by_category_loose", dims = { "category" }, long_name = "tokens above tau_loose over all layers by token category", units = "1", type = "int", label = "τ/10 = {@tau_loose}" },
    { "outlier_count_by_channel_loose", dims = { "channel" }, long_name = "elements above tau_loose over all layers by hidden dimension", units = "1", type = "int", label = "τ/10 = {@tau_loose}" },
    { "peak_ratio", dims = {}, long_name = "max over layers of top-1 / median |h|", units = "1" },
    { "peak_layer", dims = {}, long_name = "layer where the top-1 |h| peaks", units = "1", type = "int" },
    { "peak_top1", dims = {}, long_name = "top-1 |h| at its peak layer", units = "1" },
    { "last_top1", dims = {}, long_name = "top-1 |h| of the last layer", units = "1" },
    { "total_outlier_tokens", dims = {}, long_name = "outlier tokens over all layers", units = "1", type = "int" },
    { "initial_weak_share", dims = {}, long_name = "share of the outlier tokens at the initial token, weak-semantic tokens or delimiters (undefined without outliers)", units = "1" },
    { "outlier_channels", dims = {}, long_name = "hidden dimensions holding at least one outlier element", units = "1", type = "int" },
    { "top_channel", dims = {}, long_name = "hidden dimension with the most outlier elements (undefined without outliers)", units = "1", type = "int" },
    { "total_outlier_tokens_loose", dims = {}, long_name = "tokens above tau_loose over all layers", units = "1", type = "int" },
    { "initial_weak_share_loose", dims = {}, long_name = "share of the tokens above tau_loose at the initial token, weak-semantic tokens or delimiters", units = "1" },
    { "outlier_channels_loose", dims = {}, long_name = "hidden dimensions holding at least one element above tau_loose", units = "1", type = "int" },
    { "top_channel_loose", dims = {}, long_name = "hidden dimension with the most elements above tau_loose", units = "1", type = "int" },
    { "initial_scale_dloss", dims = { "layer", "scale" }, long_name = "held-out loss change when the initial token's state in the layer output is multiplied by the scale before the next layer reads it (models trained here only)", units = "nat", label = "after layer {layer}" },
    { "heldout_loss", dims = {}, long_name = "held-out loss of the batches of initial_scale_dloss", units = "nat" },
  },
  panels = {
    { kind = "line", x = "layer", y = { "top_abs", "median_abs" }, logy = true, title = "largest and median |h| per layer",
      xlabel = "layer", ylabel = "|h| (log scale)" },
    { kind = "bars", x = "layer", y = { "outlier_tokens", "outlier_tokens_loose" }, title = "outlier tokens per layer", xlabel = "layer", ylabel = "outlier tokens",
      zero_is_empty = true, why_empty = "no outlier token at τ = {@tau} or τ/10 in any layer" },
    { kind = "bars", x = "category", y = { "outlier_tokens_by_category", "outlier_tokens_by_category_loose" }, title = "outlier tokens by category", ylabel = "outlier tokens",
      values = "%d", zero_is_empty = true, why_empty = "no outlier token at τ = {@tau} or τ/10" },
    { kind = "bars", x = "channel", y = { "outlier_count_by_channel", "outlier_count_by_channel_loose" }, title = "outlier elements by hidden dimension", xlabel = "hidden dimension",
      ylabel = "outlier elements", zero_is_empty = true, why_empty = "no outlier element at τ = {@tau} or τ/10" },
    { kind = "line", x = "scale", y = "initial_scale_dloss", series = "layer", title = "what the massive activation is worth: Δ loss when <bos>'s state after layer L is scaled (one line per L)",
      xlabel = "scale of the initial token's state", ylabel = "Δ held-out loss (nats)" },
  },
}

-- outlier tokens per layer, by category and by channel over all layers, from one rule's stats
local function tally(res, C)
  local t = { ntok = {}, bycat = { 0, 0, 0, 0 }, bych = {}, total = 0, nch = 0, top_ch = 0 / 0 }
  for c = 1, C do t.bych[c] = 0 end
  for i, l in ipairs(res.layers) do
    local o = res[l].outliers
    t.ntok[i] = o.tokens
    t.total = t.total + o.tokens
    for j, cat in ipairs(CATS) do t.bycat[j] = t.bycat[j] + o.tokens_by_category[cat] end
    for c = 1, C do t.bych[c] = t.bych[c] + o.by_channel[c] end
  end
  local best = 0
  for c, n in ipairs(t.bych) do
    if n > 0 then t.nch = t.nch + 1 end
    if n > best then best, t.top_ch = n, c - 1 end
  end
  t.share = t.total > 0 and (t.bycat[1] + t.bycat[2] + t.bycat[3]) / t.total or 0 / 0
  return t
end

local function analyze(run)
  local cfg, spec = run.cfg, model_spec(run.cfg)
  local corpus = batcher.corpus(spec.data, run)   -- --text with --model: the text in the model's tokens
  local ctx, m, loaders = recipes.load(spec, run.out.train)
  local C = m.cfg.d_model
  local function layer_stats(tau)
    -- median |h| as SO's code takes it (torch.median, the lower middle value; docs/reference/metrics.md)
    return analysis.LayerStats{ T = cfg.seq_len, C = C, V = m.cfg.vocab_size, topk = 3, category = corpus.category, median = "lower",
                                rule = analysis.rule{ kind = "tau_mean", tau = tau, scope = "sequence" } }
  end
  local stats, loose = layer_stats(cfg.tau), layer_stats(cfg.tau / LOOSE)
  local P = probes.new{ points = { "h" } }
  P:attach("h", stats)
  P:attach("h", loose)
  batches.probe_batches(ctx, m, P, corpus, spec, cfg.eval_batches)
  local res = stats:result()
  local t, tl = tally(res, C), tally(loose:result(), C)
  local layers, top, med = {}, {}, {}
  local ratio, peak, peak_l = 0, -1, nil
  for i, l in ipairs(res.layers) do
    local r = res[l]
    layers[i] = l
    top[i] = { r.avg_topk[1], r.avg_topk[2], r.avg_topk[3] }
    med[i] = r.avg_median
    ratio = math.max(ratio, r.avg_topk[1] / r.avg_median)
    if r.avg_topk[1] > peak then peak, peak_l = r.avg_topk[1], l end
  end
  -- the dose-response of the massive activation (docs/findings/organism.md, "Why the ratio stops"): the
  -- held-out loss with the initial token's whole state multiplied by each scale after each layer;
  -- for the models trained here (an imported model would need 6 × L more passes)
  local dloss, scales, base = {}, remedies.STATE_SCALES, 0 / 0
  for i in ipairs(layers) do dloss[i] = {} for j in ipairs(scales) do dloss[i][j] = 0 / 0 end end
  if not run.out.train.pretrained then
    local bs = quant.batches(ctx, loaders.val(), cfg.eval_batches)
    for i, l in ipairs(layers) do
      local r = remedies.scale_state(ctx, m, bs, { layer = l, scales = scales })
      base = r.loss
      for j = 1, #scales do dloss[i][j] = r.delta[j] end
    end
  end
  return {
    coords = { layer = layers, rank = { 1, 2, 3 }, category = CATS, channel = C, scale = scales },
    vars = { top_abs = top, median_abs = med, outlier_tokens = t.ntok, outlier_tokens_by_category = t.bycat,
             outlier_count_by_channel = t.bych, peak_ratio = ratio, peak_layer = peak_l, peak_top1 = peak,
             last_top1 = top[#top][1], total_outlier_tokens = t.total, initial_weak_share = t.share,
             outlier_channels = t.nch, top_channel = t.top_ch,
             outlier_tokens_loose = tl.ntok, outlier_tokens_by_category_loose = tl.bycat,
             outlier_count_by_channel_loose = tl.bych, total_outlier_tokens_loose = tl.total,
             initial_weak_share_loose = tl.share, outlier_channels_loose = tl.nch, top_channel_loose = tl.top_ch,
             initial_scale_dloss = dloss, heldout_loss = base },
    attrs = { tau = cfg.tau, tau_loose = cfg.tau / LOOSE },
  }
end

-- the dose-response sentence: the loss change when <bos>'s state after the first layer is scaled
local function dose(a, v)
  local sc = a.coords.scale
  local d = v.initial_scale_dloss
  if not (d(1, 1) == d(1, 1)) then return "" end
  local parts = {}
  for j, s in ipairs(sc) do parts[#parts + 1] = string.format("×%g %+.4f", s, d(1, j)) end
  return string.format(" What the massive activation is worth (the last panel): the held-out loss (%.4f nats) changes by %s when the initial token's state after layer %d is multiplied by the scale;",
    v.heldout_loss, table.concat(parts, ", "), a.coords.layer[1]) ..
    " a loss that does not fall when the state grows gives training no reason to grow it further (docs/findings/organism.md, \"Why the ratio stops\")."
end

local function summary(run)
  local a = run.out.analyze
  local v = figure.values(FIG, a)
  local none = v.total_outlier_tokens == 0
  -- Verdict with margins (docs/reference/experiments.md, "The verdict is computed from the data"): outlier
  -- tokens exist at this τ, at least SHARE_MIN of them sit at the initial token or
  -- weak-semantic tokens / delimiters, in at most CHANNELS_MAX hidden dimensions, and the top-1
  -- |h| of the last layer is at most VANISH of its peak ("vanishes in the last layers"). SO's
  -- rule finding no outlier at τ is a decided "does not hold at this scale": the outliers the
  -- claim is about are absent (the vanishing is still checked and reported).
  local criteria = { { string.format("outlier tokens at τ = %g", a.attrs.tau), v.total_outlier_tokens, ">=", 1, fmt = "%d" } }
  if not none then
    criteria[#criteria + 1] = { "share of the outlier tokens initial/weak/delimiter", v.initial_weak_share, ">=", SHARE_MIN, scale = 100, fmt = "%.0f", unit = " %" }
    criteria[#criteria + 1] = { "outlier channels", v.outlier_channels, "<=", CHANNELS_MAX, fmt = "%d" }
  end
  criteria[#criteria + 1] = { "last layer's top-1 / its peak", v.last_top1 / v.peak_top1, "<=", VANISH }
  local judged = verdict.judge(criteria)
  local where = none and string.format("no outlier token at τ = %g", a.attrs.tau)
    or string.format("%d outlier tokens at τ = %g (%.0f %% initial, weak-semantic or delimiter) in %d channel(s), most in #%d",
                     v.total_outlier_tokens, a.attrs.tau, 100 * v.initial_weak_share, v.outlier_channels, v.top_channel)
  return {
    paper = "GPT-2 / LLaMA: top-1 |h| in the thousands against a median below 1 from the shallow layers on, vanishing in the last layers; outliers at the initial token and weak-semantic tokens, in a few fixed channels",
    reproduced = string.format("max over layers of top-1/median = %.1f; top-1 |h| peaks at layer %d (%.3g), last layer %.3g; %s",
      v.peak_ratio, v.peak_layer, v.peak_top1, v.last_top1, where),
    holds = judged.holds,
    notes = string.format("Criterion (with margins): outlier tokens at this τ, ≥ %.0f %% of them initial, weak-semantic or delimiter, in ≤ %d channels, and the last layer's top-1 ≤ %.1f × its peak. ",
      100 * SHARE_MIN, CHANNELS_MAX, VANISH) .. judged.text .. "." ..
      (none and " No element exceeds τ·mean|h| here: at this scale the model has none of the outliers SO's rule finds in LLMs, so the claim does not hold." or "") ..
      string.format(" At the looser τ/%d = %g (the second bars of the token and channel panels; not part of the verdict): %s.", LOOSE, a.attrs.tau_loose,
        v.total_outlier_tokens_loose == 0 and "no token either"
        or string.format("%d tokens (share initial, weak-semantic or delimiter %.2f), %d channel(s), the largest count in channel %d",
                         v.total_outlier_tokens_loose, v.initial_weak_share_loose, v.outlier_channels_loose, v.top_channel_loose)) ..
      dose(a, v),
  }
end

return {
  id = "so-fig3",
  title = "Activation outliers in the layer outputs h of a LLaMA-style model: layers, tokens, channels",
  source = { paper = "SO (An et al. 2025)", figure = "Fig. 3",
             claim = "Activation outliers in h appear in shallow layers, persist through the middle layers and vanish in the last ones; they sit at the initial token and weak-semantic tokens, in a few fixed channels." },
  profiles = recipes.profiles_with(recipes.LLAMA_LM_PROFILES, { quick = { tau = 10 }, default = { tau = 100 }, paper = { tau = 1000 } }),
  stages = figure.stages(train, analyze, FIG, { { "views", views.stage{ spec = model_spec } } }),
  summary = summary,
}
