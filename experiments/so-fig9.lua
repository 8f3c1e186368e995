-- SO Fig. 9 — the massive activation is cancelled in the final layers by updates of the
-- opposite sign.
--
-- Method (SO §4.2, Fig. 9): the LLaMA-style model of so-fig3 (same settings, one training). On
-- one held-out sequence, find the massive element: the token t and channel c of the largest |h|
-- over all layers. Follow h_l[t, c] through the layers with the two updates that make it,
-- h_l = h_{l-1} + attn_out_l + ffn_out_l (pre-LN residual stream): after its peak, the element
-- shrinks where the updates have the sign opposite to h. Report the peak, the last layer's
-- value, the share cancelled, and how many layers after the peak bring an opposite update (SO:
-- the neutralisation is progressive rather than abrupt).
local figure = require "outlierlab.figure"
local inspect = require "outlierlab.measure.inspect"
local batcher = require "outlierlab.data.batcher"
local recipes = require "outlierlab.recipes"

local model_spec = recipes.llama_lm_spec   -- shared with so-fig3: one trained model

local FIG = figure.declare{
  title = "Cancellation of the massive activation in the final layers (SO Fig. 9, reproduced)",
  dims = { { "layer", long_name = "transformer layer (0-based)" } },
  vars = {
    { "h_value", dims = { "layer" }, long_name = "h_l[t, c]: the massive element after each layer", units = "1", label = "h[t,c]" },
    { "attn_update", dims = { "layer" }, long_name = "attention output added to the residual at (t, c)", units = "1", label = "attention update" },
    { "ffn_update", dims = { "layer" }, long_name = "FFN output added to the residual at (t, c)", units = "1", label = "FFN update" },
    { "top1_abs", dims = { "layer" }, long_name = "largest |h_l| of the sequence", units = "1", label = "top-1 |h|" },
    { "median_abs", dims = { "layer" }, long_name = "median |h_l| of the sequence", units = "1", label = "median |h|" },
    { "token", dims = {}, long_name = "position t of the massive element", units = "1", type = "int" },
    { "channel", dims = {}, long_name = "channel c of the massive element", units = "1", type = "int" },
    { "peak_layer", dims = {}, long_name = "layer where |h[t, c]| peaks", units = "1", type = "int" },
    { "peak_value", dims = {}, long_name = "h[t, c] at its peak", units = "1" },
    { "last_value", dims = {}, long_name = "h[t, c] after the last layer", units = "1" },
    { "cancelled", dims = {}, long_name = "1 - |h_last[t, c]| / |h_peak[t, c]|", units = "1" },
    { "opposite_layers", dims = {}, long_name = "layers after the peak whose update at (t, c) has the sign opposite to h", units = "1", type = "int" },
    { "layers_after_peak", dims = {}, long_name = "layers after the peak", units = "1", type = "int" },
  },
  panels = {
    { kind = "line", x = "layer", y = { "h_value", "attn_update", "ffn_update" }, title = "the massive element and its updates", xlabel = "layer" },
    { kind = "line", x = "layer", y = { "top1_abs", "median_abs" }, logy = true, title = "largest and median |h| per layer", xlabel = "layer" },
  },
}

local function train(run) return recipes.fit(run, model_spec(run.cfg)) end

local function analyze(run)
  local spec = model_spec(run.cfg)
  local corpus = batcher.corpus(spec.data, run)
  local ctx, m = recipes.load(spec, run.out.train)
  local cap = inspect.capture(ctx, m, corpus, spec, { points = { "h", "attn_out", "ffn_out" } })
  local layers = {}
  for l in pairs(cap.t.h) do layers[#layers + 1] = l end
  table.sort(layers)
  local best, at = -1, nil
  for _, l in ipairs(layers) do
    local i, v = inspect.argmax_abs(inspect.get(cap, "h", l).data)
    if math.abs(v) > best then best, at = math.abs(v), i end
  end
  local C = inspect.get(cap, "h", layers[1]).shape[2]
  local t, c = math.floor((at - 1) / C), (at - 1) % C
  local hv, av, fv, top, med = {}, {}, {}, {}, {}
  for k, l in ipairs(layers) do
    local h = inspect.get(cap, "h", l).data
    hv[k] = h[at]
    av[k] = inspect.get(cap, "attn_out", l).data[at]
    fv[k] = inspect.get(cap, "ffn_out", l).data[at]
    local a = inspect.abs(h)
    local _, mx = inspect.argmax_abs(h)
    top[k], med[k] = math.abs(mx), inspect.median(a)
  end
  local pk = 1
  for k = 1, #hv do if math.abs(hv[k]) > math.abs(hv[pk]) then pk = k end end
  local opp = 0
  for k = pk + 1, #hv do
    if (av[k] + fv[k]) * hv[k - 1] < 0 then opp = opp + 1 end
  end
  return {
    coords = { layer = layers },
    vars = { h_value = hv, attn_update = av, ffn_update = fv, top1_abs = top, median_abs = med, token = t, channel = c,
             peak_layer = layers[pk], peak_value = hv[pk], last_value = hv[#hv],
             cancelled = 1 - math.abs(hv[#hv]) / math.abs(hv[pk]), opposite_layers = opp, layers_after_peak = #hv - pk },
    attrs = { token_label = cap.labels[t + 1] },
  }
end

local function summary(run)
  local a = run.out.analyze
  local v = figure.values(FIG, a)
  local after = v.layers_after_peak
  local holds
  if after > 0 then holds = v.cancelled > 0.5 and v.opposite_layers >= 1 end
  return {
    paper = "LLaMA2-7B: the massive activations vanish in the final layers, neutralised progressively by values of the opposite sign",
    reproduced = string.format("massive element: token %d (%s), channel %d; peaks at layer %d (%.3g), last layer %.3g: %.0f %% cancelled; %d of the %d layers after the peak add an update of the opposite sign",
      v.token, a.attrs.token_label, v.channel, v.peak_layer, v.peak_value, v.last_value, 100 * v.cancelled, v.opposite_layers, after),
    holds = holds,
    notes = "Criterion: after the peak, more than half of the element is cancelled by the last layer, by at least one update of the opposite sign." ..
      (after == 0 and " The element peaks in the last layer, so there is nothing after it to cancel it (verdict inconclusive)." or ""),
  }
end

return {
  id = "so-fig9",
  title = "Cancellation of the massive activation in the final layers by updates of the opposite sign",
  source = { paper = "SO (An et al. 2025)", figure = "Fig. 9",
             claim = "Outliers vanish in the final layers, cancelled progressively by updates of the opposite sign." },
  profiles = recipes.profiles_with(recipes.LLAMA_LM_PROFILES, {}),
  stages = figure.stages(train, analyze, FIG),
  summary = summary,
}
