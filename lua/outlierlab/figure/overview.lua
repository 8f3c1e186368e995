-- overview — SO Fig. 1's four views of one model, used by so-fig1 (the shared LLaMA-style
-- model), so-fig23 (sigmoid attention beside softmax) and so-fig24 (TinyLLaMA with context-aware
-- scaling beside the default): on one held-out sequence,
--   h       |h_l| (token × channel) of the layer whose top-1/median |h| is largest;
--   x_down  |x_down| of the layer whose top-1/median is largest;
--   W_down  |W_down| (output × input channel, max-pooled to at most 96 × 192 cells) of the layer
--           whose largest column extremal ratio max_i|w_ij| / mean_i|w_ij| is largest (SO §3.2);
--   A       the attention map of the head that puts the largest share on the initial token.
-- Each layer is measured as it streams past (only the chosen layer's copy is kept), so the same
-- code runs on an imported 7B model. Outlier counts use SO's rule |x| > τ·mean|x| over the
-- sequence's values of that layer.
local analysis = require "outlierlab.measure.metrics"
local inspect = require "outlierlab.measure.inspect"
local figure = require "outlierlab.figure"
local E = require "outlierlab.measure.batches"
local batcher = require "outlierlab.data.batcher"

local M = {}
M.WMAX_ROWS, M.WMAX_COLS = 96, 192

-- top-1 / median of |x| over a flat list, and the number of |x| > tau·mean|x|
function M.ratio_count(xs, tau)
  local a, s = {}, 0
  for i, v in ipairs(xs) do a[i] = math.abs(v) s = s + a[i] end
  local mean = s / math.max(#a, 1)
  local top, n = 0, 0
  for _, v in ipairs(a) do if v > top then top = v end if v > tau * mean then n = n + 1 end end
  return top / inspect.median(a), n
end

-- |W| (O × I tensor) max-pooled to at most rows × cols cells: returns flat list, nr, nc
function M.pool_abs(w, rows, cols)
  local O, I = w:size(0), w:size(1)
  local fr, fc = math.ceil(O / rows), math.ceil(I / cols)
  local nr, nc = math.ceil(O / fr), math.ceil(I / fc)
  local out = {}
  for i = 1, nr * nc do out[i] = 0 end
  for i = 0, O - 1 do
    local r = math.floor(i / fr)
    for j = 0, I - 1 do
      local k = r * nc + math.floor(j / fc) + 1
      local v = math.abs(w.data[i * I + j])
      if v > out[k] then out[k] = v end
    end
  end
  return out, nr, nc
end

-- the four views of one model (ctx, m loaded), on the first held-out sequence
function M.measure(ctx, m, corpus, spec, tau, also)
  local probes = require "outlierlab.measure.probes"
  local best = { h = { r = -1 }, x_down = { r = -1 }, A = { s = -1 } }
  local ids, T
  local P = probes.new{ points = { "h", "x_down", "attn_probs" } }
  for _, pt in ipairs({ "h", "x_down" }) do
    P:attach(pt, function(t, l, batch)
      local x = inspect.copy_row(t, 0)
      local r, n = M.ratio_count(x.data, tau)
      if r > best[pt].r then best[pt] = { r = r, n = n, layer = l, x = x } end
      if not ids then
        T = batch.ids:size(1)
        ids = {}
        for i = 0, T - 1 do ids[i + 1] = batch.ids.idata[i] end
      end
    end)
  end
  P:attach("attn_probs", function(t, l, batch)
    local A = inspect.copy_row(t, 0)
    local NH, Tq = A.shape[1], A.shape[2]
    local cats = {}
    for i = 0, Tq - 1 do cats[i + 1] = corpus.category(batch.ids.idata[i]) end
    for h = 0, NH - 1 do
      local s = inspect.category_share(inspect.plane(A, h), Tq, cats, "initial")
      if s == s and s > best.A.s then best.A = { s = s, layer = l, head = h, map = inspect.plane(A, h) } end
    end
  end)
  -- also(P): more of the pass on the same probe set (the report's interactive views record)
  if also then also(P) end
  E.probe_batches(ctx, m, P, corpus, spec, 1)
  -- W_down: the largest column extremal ratio over layers
  local wbest = { r = -1 }
  for l, blk in E.blocks(m) do
    local w = blk.mlp.down.weight
    local r = analysis.weight_stats(w, { tau = 1e30 })
    if r.extremal_ratio > wbest.r then
      local pooled, nr, nc = M.pool_abs(w, M.WMAX_ROWS, M.WMAX_COLS)
      wbest = { r = r.extremal_ratio, layer = l - 1, col = r.extremal_col, w = pooled, nr = nr, nc = nc }
    end
  end
  local labels, cats = {}, {}
  for i, id in ipairs(ids) do labels[i], cats[i] = E.token_label(corpus, id), corpus.category(id) end
  return { labels = labels, cats = cats, T = T, h = best.h, x_down = best.x_down, A = best.A, W = wbest }
end

-- the declaration shared by so-fig1, so-fig23 and so-fig24 (one model or several side by side);
-- panels: another choice of panels over the same variables (so-fig10)
function M.declare(title, panels)
  return figure.declare{
    title = title,
    dims = {
      { "model", long_name = "model (attention variant)", labels = true },
      { "position", long_name = "token of the held-out sequence", labels = true },
      { "key", long_name = "key token of the held-out sequence", labels = true },
      { "channel", long_name = "hidden dimension of h (0-based)" },
      { "ffn_channel", long_name = "x_down channel (0-based)" },
      { "w_out", long_name = "W_down output channel, max-pooled block" },
      { "w_in", long_name = "W_down input channel, max-pooled block" },
    },
    vars = {
      { "h_abs", dims = { "model", "position", "channel" }, long_name = "|h_l| of the layer with the largest top-1/median", units = "1" },
      { "x_down_abs", dims = { "model", "position", "ffn_channel" }, long_name = "|x_down| of the layer with the largest top-1/median", units = "1" },
      { "w_down_abs", dims = { "model", "w_out", "w_in" }, long_name = "|W_down| of the layer with the largest column extremal ratio, max-pooled", units = "1" },
      { "attention", dims = { "model", "position", "key" }, long_name = "attention probabilities of the head with the largest share on the initial token", units = "1" },
      { "is_initial", dims = { "key" }, long_name = "1 where the key is the initial token", units = "1", type = "int" },
      { "h_ratio", dims = { "model" }, long_name = "top-1 / median |h| in the chosen layer", units = "1" },
      { "h_layer", dims = { "model" }, long_name = "layer of the largest top-1 / median |h|", units = "1", type = "int" },
      { "h_outliers", dims = { "model" }, long_name = "elements of h with |h| > tau mean|h| in that layer", units = "1", type = "int" },
      { "x_down_ratio", dims = { "model" }, long_name = "top-1 / median |x_down| in the chosen layer", units = "1" },
      { "x_down_layer", dims = { "model" }, long_name = "layer of the largest top-1 / median |x_down|", units = "1", type = "int" },
      { "x_down_outliers", dims = { "model" }, long_name = "elements of x_down with |x| > tau mean|x| in that layer", units = "1", type = "int" },
      { "w_down_ratio", dims = { "model" }, long_name = "largest column extremal ratio of W_down over layers", units = "1" },
      { "w_down_layer", dims = { "model" }, long_name = "layer of the largest W_down extremal ratio", units = "1", type = "int" },
      { "sink_share", dims = { "model" }, long_name = "largest share of attention on the initial token over layers and heads", units = "1" },
      { "sink_layer", dims = { "model" }, long_name = "layer of that head", units = "1", type = "int" },
      { "sink_head", dims = { "model" }, long_name = "head with the largest share on the initial token", units = "1", type = "int" },
    },
    panels = panels or {
      { kind = "heatmap", z = "x_down_abs", each = "model", title = "{model}: |x_down|", xlabel = "channel", ylabel = "token", y_labels = true },
      { kind = "heatmap", z = "w_down_abs", each = "model", title = "{model}: |W_down| (max-pooled)", xlabel = "input channel block", ylabel = "output channel block" },
      { kind = "heatmap", z = "h_abs", each = "model", title = "{model}: |h|", xlabel = "channel", ylabel = "token" },
      { kind = "heatmap", z = "attention", each = "model", marks = "is_initial", title = "{model}: attention of the sink head", xlabel = "key", ylabel = "query" },
    },
  }
end

-- the analysis result (figure data) of a list of { label =, o = M.measure(...) }
function M.data(list, tau)
  local function pad(xs, n) local out = {} for i = 1, n do out[i] = xs[i] or 0 / 0 end return out end
  local C, F, WR, WC = 0, 0, 0, 0
  for _, e in ipairs(list) do
    C = math.max(C, e.o.h.x.shape[2]); F = math.max(F, e.o.x_down.x.shape[2])
    WR = math.max(WR, e.o.W.nr); WC = math.max(WC, e.o.W.nc)
  end
  local T = list[1].o.T
  local v = { h_abs = {}, x_down_abs = {}, w_down_abs = {}, attention = {}, h_ratio = {}, h_layer = {}, h_outliers = {},
              x_down_ratio = {}, x_down_layer = {}, x_down_outliers = {}, w_down_ratio = {}, w_down_layer = {},
              sink_share = {}, sink_layer = {}, sink_head = {} }
  local models = {}
  for k, e in ipairs(list) do
    local o = e.o
    models[k] = e.label
    -- each model's block is padded to the largest shape (undefined beyond its own)
    local function block(x, rows, cols, R, Cc)
      local out = {}
      for i = 0, R - 1 do for j = 0, Cc - 1 do
        out[i * Cc + j + 1] = (i < rows and j < cols) and math.abs(x[i * cols + j + 1]) or 0 / 0
      end end
      return out
    end
    v.h_abs[k] = block(o.h.x.data, T, o.h.x.shape[2], T, C)
    v.x_down_abs[k] = block(o.x_down.x.data, T, o.x_down.x.shape[2], T, F)
    v.w_down_abs[k] = block(o.W.w, o.W.nr, o.W.nc, WR, WC)
    v.attention[k] = o.A.map and block(o.A.map, T, T, T, T) or pad({}, T * T)
    v.h_ratio[k], v.h_layer[k], v.h_outliers[k] = o.h.r, o.h.layer, o.h.n
    v.x_down_ratio[k], v.x_down_layer[k], v.x_down_outliers[k] = o.x_down.r, o.x_down.layer, o.x_down.n
    v.w_down_ratio[k], v.w_down_layer[k] = o.W.r, o.W.layer
    v.sink_share[k], v.sink_layer[k], v.sink_head[k] = o.A.s >= 0 and o.A.s or 0 / 0, o.A.layer or 0 / 0, o.A.head or 0 / 0
  end
  local init = {}
  for i, c in ipairs(list[1].o.cats) do init[i] = c == "initial" and 1 or 0 end
  v.is_initial = init
  return { coords = { model = models, position = list[1].o.labels, key = list[1].o.labels, channel = C, ffn_channel = F,
                      w_out = WR, w_in = WC }, vars = v, attrs = { tau = tau } }
end

-- The analysis of a sweep (run.out.train = list of { variant =, spec =, handle = }): the four
-- views of each model, labelled label_of(variant); load(spec, handle) -> ctx, m (default: recipes.load)
function M.analyze_sweep(run, label_of, load)
  load = load or require("outlierlab.recipes").load
  local list = {}
  for _, t in ipairs(run.out.train) do
    local ctx, m = load(t.spec, t.handle)
    local corpus = batcher.corpus(t.spec.data, run)
    list[#list + 1] = { label = label_of(t.variant), o = M.measure(ctx, m, corpus, t.spec, run.cfg.tau) }
  end
  return M.data(list, run.cfg.tau)
end

-- "h top-1/median 41 (L1, 12 outliers), x_down 88 (L0), W_down 9.3 (L1), sink 0.93 (L1H0)"
function M.describe(v, k)
  return string.format("h top-1/median %.3g (layer %d, %d elements > τ·mean), x_down %.3g (layer %d, %d), W_down extremal ratio %.3g (layer %d), sink share %.2f (layer %s head %s)",
    v.h_ratio[k], v.h_layer[k], v.h_outliers[k], v.x_down_ratio[k], v.x_down_layer[k], v.x_down_outliers[k],
    v.w_down_ratio[k], v.w_down_layer[k], v.sink_share[k], tostring(v.sink_layer[k]), tostring(v.sink_head[k]))
end

-- verdict of a "variant prevents outliers" figure (so-fig23, so-fig24): model 1 = default,
-- model 2 = the variant; prevents = its h top-1/median below half the default's; testable only
-- when the default has massive activations (top-1 >= 20 × median, as so-fig11)
function M.prevents(v)
  local base, var = v.h_ratio[1], v.h_ratio[2]
  if not (base >= 20) then
    return nil, string.format("The default model has no massive activation here (top-1 only %.3g × the median; SO's are ~10³ ×), so the claim cannot be tested at this scale (verdict inconclusive).", base)
  end
  local ok = var < 0.5 * base
  return ok, string.format("Criterion: the variant's top-1/median |h| (%.3g) below half the default's (%.3g): %s.", var, base,
    ok and "it is" or "it is NOT")
end

return M
