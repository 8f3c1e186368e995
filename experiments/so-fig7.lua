-- SO Fig. 7 — a weight outlier makes an activation outlier: in one MLP, the outlier channel of
-- x_down times the outlier column of W_down is the FFN output's massive value.
--
-- Method (SO §4.2, Fig. 7): the LLaMA-style model of so-fig3 (same settings, one training). On
-- one held-out sequence, take the layer whose x_down has the largest top-1/median and its largest
-- element x_down[t, c] (token t, channel c). The FFN output of that token is
-- out_j = Σ_k x_down[t, k]·W_down[j, k]; the part channel c brings to output j is
-- x_down[t, c]·W_down[j, c]. At the output channel j with the largest |out_j|, report that part's
-- share, and how extreme column c of W_down is (its max/mean, against the median column). The
-- SwiGLU inputs of the element, gate and up, are shown with the layer's medians: SO finds weight
-- outliers in the gate and up projections amplified by SiLU and the GLU product.
local analysis = require "outlierlab.measure.metrics"
local figure = require "outlierlab.figure"
local inspect = require "outlierlab.measure.inspect"
local overview = require "outlierlab.figure.overview"
local batcher = require "outlierlab.data.batcher"
local batches = require "outlierlab.measure.batches"
local recipes = require "outlierlab.recipes"

local model_spec = recipes.llama_lm_spec   -- shared with so-fig3: one trained model

local FIG = figure.declare{
  title = "From a weight outlier to an activation outlier in one MLP (SO Fig. 7, reproduced)",
  dims = {
    { "ffn_channel", long_name = "x_down channel (input channel of W_down, 0-based)" },
    { "channel", long_name = "hidden dimension (output channel of W_down, 0-based)" },
    { "quantity", long_name = "SwiGLU quantity at the outlier element", labels = true },
  },
  vars = {
    { "x_down_row", dims = { "ffn_channel" }, long_name = "x_down of the outlier token", units = "1", label = "x_down[t, :]" },
    { "w_down_column", dims = { "channel" }, long_name = "column c of W_down (the outlier channel's weights)", units = "1", label = "W_down[:, c]" },
    { "ffn_out_row", dims = { "channel" }, long_name = "FFN output of the outlier token", units = "1", label = "FFN output" },
    { "contribution", dims = { "channel" }, long_name = "x_down[t, c] W_down[:, c]: the part of the FFN output from channel c", units = "1", label = "x_down[t,c] W_down[:,c]" },
    { "at_outlier", dims = { "quantity" }, long_name = "|value| at the outlier element (token t, channel c)", units = "1", label = "at (t, c)" },
    { "layer_median", dims = { "quantity" }, long_name = "median |value| over the layer's tokens and channels", units = "1", label = "layer median" },
    { "layer", dims = {}, long_name = "layer analysed (largest x_down top-1/median)", units = "1", type = "int" },
    { "token", dims = {}, long_name = "position t of the outlier element", units = "1", type = "int" },
    { "x_channel", dims = {}, long_name = "x_down channel c of the outlier element", units = "1", type = "int" },
    { "out_channel", dims = {}, long_name = "output channel j with the largest |FFN output| of token t", units = "1", type = "int" },
    { "share", dims = {}, long_name = "share of the FFN output at (t, j) brought by channel c", units = "1" },
    { "x_ratio", dims = {}, long_name = "|x_down[t, c]| over mean |x_down| of the layer", units = "1" },
    { "column_ratio", dims = {}, long_name = "max/mean |W_down[:, c]| (column extremal ratio of channel c)", units = "1" },
    { "median_column_ratio", dims = {}, long_name = "median column extremal ratio of W_down in that layer", units = "1" },
  },
  panels = {
    { kind = "line", x = "ffn_channel", y = "x_down_row", title = "x_down of token t (the outlier channel c stands out)", xlabel = "x_down channel" },
    { kind = "line", x = "channel", y = "w_down_column", title = "column c of W_down", xlabel = "output channel" },
    { kind = "line", x = "channel", y = { "ffn_out_row", "contribution" }, title = "FFN output of token t and channel c's part", xlabel = "output channel" },
    { kind = "bars", x = "quantity", y = { "at_outlier", "layer_median" }, logy = true, title = "SwiGLU at the outlier element against the layer's median" },
  },
}

local function train(run) return recipes.fit(run, model_spec(run.cfg)) end

local function analyze(run)
  local cfg, spec = run.cfg, model_spec(run.cfg)
  local corpus = batcher.corpus(spec.data, run)
  local ctx, m = recipes.load(spec, run.out.train)
  local cap = inspect.capture(ctx, m, corpus, spec, { points = { "x_down", "ffn_out", "mlp_gate", "mlp_up" } })
  local best, layer = -1, 0
  for l, x in pairs(cap.t.x_down) do
    local r = overview.ratio_count(x.data, 1)
    if r > best then best, layer = r, l end
  end
  local xd = inspect.get(cap, "x_down", layer)
  local F = xd.shape[2]
  local i = inspect.argmax_abs(xd.data)
  local t, c = math.floor((i - 1) / F) + 1, (i - 1) % F + 1      -- 1-based token and channel
  local row = {}
  for k = 1, F do row[k] = xd.data[(t - 1) * F + k] end
  local fo = inspect.get(cap, "ffn_out", layer)
  local Cd = fo.shape[2]
  local out = {}
  for j = 1, Cd do out[j] = fo.data[(t - 1) * Cd + j] end
  local j = inspect.argmax_abs(out)
  local blk
  for l, b in batches.blocks(m) do if l - 1 == layer then blk = b break end end
  local w = blk.mlp.down.weight
  local W = {}
  for k = 0, Cd * F - 1 do W[k + 1] = w.data[k] end
  local col, contrib = {}, {}
  for jj = 1, Cd do col[jj] = W[(jj - 1) * F + c] contrib[jj] = row[c] * col[jj] end
  local _, share = inspect.channel_contribution(row, W, F, c, j)
  local ws = analysis.weight_stats(w, { tau = 1e30 })
  local at, med = {}, {}
  local function q(x) return math.abs(x.data[(t - 1) * x.shape[2] + c]), inspect.median(inspect.abs(x.data)) end
  at[1], med[1] = q(inspect.get(cap, "mlp_gate", layer))
  at[2], med[2] = q(inspect.get(cap, "mlp_up", layer))
  at[3], med[3] = q(xd)
  local mean = inspect.mean(inspect.abs(xd.data))
  return {
    coords = { ffn_channel = F, channel = Cd, quantity = { "gate", "up", "x_down = silu(gate) up" } },
    vars = { x_down_row = row, w_down_column = col, ffn_out_row = out, contribution = contrib, at_outlier = at, layer_median = med,
             layer = layer, token = t - 1, x_channel = c - 1, out_channel = j - 1, share = share,
             x_ratio = math.abs(row[c]) / mean, column_ratio = ws.col_ratio[c], median_column_ratio = inspect.median(ws.col_ratio) },
    attrs = { tau = cfg.tau, token_label = cap.labels[t] },
  }
end

local function summary(run)
  local a = run.out.analyze
  local v = figure.values(FIG, a)
  local outlier = v.x_ratio > a.attrs.tau
  local holds   -- without an x_down outlier there is nothing to trace
  if outlier then holds = v.share > 0.5 end
  return {
    paper = "LLaMA2-7B layer 2: x_down outliers up to 1000 × the mean (gate/up weight outliers amplified by SiLU and the GLU), turned by W_down's outlier columns into the massive h channels 1415 and 2533",
    reproduced = string.format("layer %d, token %d (%s), x_down channel %d: |x| = %.3g × mean|x_down|; it brings %.0f %% of the FFN output at hidden dim %d; column %d of W_down has max/mean %.3g (median column %.3g)",
      v.layer, v.token, a.attrs.token_label, v.x_channel, v.x_ratio, 100 * v.share, v.out_channel, v.x_channel, v.column_ratio, v.median_column_ratio),
    holds = holds,
    notes = string.format("Criterion: the element is an x_down outlier (|x| > τ·mean|x|, τ = %g) and its channel brings more than half of the token's largest FFN output.", a.attrs.tau) ..
      (outlier and "" or " Here the largest x_down element is no outlier at this τ: the panels show the largest element of an outlier-free layer."),
  }
end

return {
  id = "so-fig7",
  title = "From a weight outlier to an activation outlier: x_down channel times W_down column in one MLP",
  source = { paper = "SO (An et al. 2025)", figure = "Fig. 7",
             claim = "Weight outliers make activation outliers: the outlier channel of x_down times the matching column of W_down gives the massive value of the FFN output." },
  profiles = recipes.profiles_with(recipes.LLAMA_LM_PROFILES, { quick = { tau = 10 }, default = { tau = 100 }, paper = { tau = 1000 } }),
  stages = figure.stages(train, analyze, FIG),
  summary = summary,
}
