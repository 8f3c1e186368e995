-- thresholds — the model organism's thresholds and the one way a training curve is judged against
-- them, shared by the recipe map's summary (experiments/organism.lua) and the training histories
-- (runner/history.lua, plots/history.gp draws the same numbers).
--
--   local th = require "outlierlab.judge.thresholds"
--   th.THRESHOLDS                       -- { sink_share = 0.8, value_ratio = 0.2, massive_ratio = 100, avg_kurtosis = 30 }
--   local j = th.judge(curve)           -- curve: recipes' tracker points { {step =, sink_share =, ...}, ... }
--   j.final.sink_share, j.reached.sink, j.first.sink, j.window = { from =, to =, points = }
--
-- A curve point (recipes/track.lua curve_point, measure/phenomena) holds, on one held-out batch at one
-- training step: sink_share (the largest share of attention of other tokens on the sink tokens,
-- over heads), value_ratio (that head's value norm at the sink over the median value norm),
-- massive_ratio (top-1/median |h| at a sink token, in the layer where it is largest),
-- avg_kurtosis (Pearson kurtosis of the layer outputs h, averaged), and, where tracked,
-- sink_rate (Gu et al.'s share of heads whose attention on the first key exceeds ε).
--
-- The verdict is the FINAL measurement: the mean of each quantity over the points of the last
-- FINAL_SHARE (10 %) of the tracked steps (at least the last point) — the end-of-training state
-- the figures analyse, not a peak on the way. first[k] is the first tracked step at which the
-- condition held ("reached on the way at step N"), reported separately; a condition met on the
-- way and lost by the end is not reached.
local stats = require("outlierlab.judge.seeds").stats   -- one mean/sd
local binomial_tail = require("outlierlab.measure.metrics").binomial_tail

local M = {}

M.THRESHOLDS = { sink_share = 0.8, value_ratio = 0.2, massive_ratio = 100, avg_kurtosis = 30 }
M.FINAL_SHARE = 0.1

-- the three conditions of a model organism, on one point (or on the final means)
M.CONDITIONS = {
  sink = function(p) return (p.sink_share or 0) >= M.THRESHOLDS.sink_share and (p.value_ratio or 1 / 0) <= M.THRESHOLDS.value_ratio end,
  massive = function(p) return (p.massive_ratio or 0) >= M.THRESHOLDS.massive_ratio end,
  kurtosis = function(p) return (p.avg_kurtosis or 0) >= M.THRESHOLDS.avg_kurtosis end,
}
M.ORDER = { "sink", "massive", "kurtosis" }
-- what each condition judges, for summaries
M.WHAT = {
  sink = string.format("largest sink share of a head >= %g with that head's value norm at the sink <= %g of the median",
                       M.THRESHOLDS.sink_share, M.THRESHOLDS.value_ratio),
  massive = string.format("top-1/median |h| at the sink token (layer where largest) >= %g", M.THRESHOLDS.massive_ratio),
  kurtosis = string.format("average kurtosis of the layer outputs h >= %g", M.THRESHOLDS.avg_kurtosis),
}
-- the quantities averaged into the final measurement
M.KEYS = { "sink_share", "value_ratio", "massive_ratio", "avg_kurtosis", "max_kurtosis", "sink_rate", "max_inf_norm", "max_ratio" }

-- the points of the final window: step >= the last tracked step less FINAL_SHARE of it, rounded
-- to a step (at least the last point). The tracker (train/track.lua) measures 10 more points in
-- that window, each on held-out batches of its own; recipes/track.lua stable averages the same points.
function M.window(curve)
  local n = #curve
  if n == 0 then return { from = 0 / 0, to = 0 / 0, points = {} } end
  local last = curve[n].step or 0
  local from = last - math.floor(M.FINAL_SHARE * last + 0.5)
  local pts = {}
  for _, p in ipairs(curve) do if (p.step or 0) >= from then pts[#pts + 1] = p end end
  if #pts == 0 then pts[1] = curve[n] end
  return { from = pts[1].step or last, to = last, points = pts }
end

-- the final measurement: the mean over the final window of every quantity in M.KEYS (NaN values
-- left out; NaN when none is defined)
function M.final(curve)
  local w = M.window(curve)
  local out = { step = w.to, from = w.from, points = #w.points }
  for _, k in ipairs(M.KEYS) do
    local xs = {}
    for _, p in ipairs(w.points) do
      local v = p[k]
      if type(v) == "number" and v == v then xs[#xs + 1] = v end
    end
    local mu, _, n = stats(xs)
    out[k] = n > 0 and mu or nil
  end
  return out, w
end

-- first tracked step at which cond holds, or nil
function M.first_step(curve, cond)
  for _, p in ipairs(curve) do if cond(p) then return p.step end end
  return nil
end

-- judge(curve) -> { final = means over the window, window = {from, to, points}, reached = {k = bool}
-- (on the final measurement), first = {k = step or nil} (on the way), all = bool (every condition reached) }
function M.judge(curve)
  local final, w = M.final(curve or {})
  local j = { final = final, window = w, reached = {}, first = {}, all = #(curve or {}) > 0 }
  for _, k in ipairs(M.ORDER) do
    j.reached[k] = #(curve or {}) > 0 and M.CONDITIONS[k](final) or false
    j.first[k] = M.first_step(curve or {}, M.CONDITIONS[k])
    j.all = j.all and j.reached[k]
  end
  return j
end

-- "reached (final 0.91 / 0.05)", "reached on the way at step 2550, not at the end (final 95)",
-- "not reached (best ...)" — the words of one condition
function M.words(j, k)
  local f = j.final
  local val
  if k == "sink" then val = string.format("%.2f / %.2f", f.sink_share or 0 / 0, f.value_ratio or 0 / 0)
  elseif k == "massive" then val = string.format("%.0f", f.massive_ratio or 0 / 0)
  else val = string.format("%.1f", f.avg_kurtosis or 0 / 0) end
  if j.reached[k] then
    return string.format("reached (final %s%s)", val, j.first[k] and ("; first at step " .. j.first[k]) or "")
  elseif j.first[k] then
    return string.format("not at the end (final %s); reached on the way at step %d", val, j.first[k])
  end
  return string.format("not reached (final %s)", val)
end

-- QT Fig. 3's ViT picture, judged with margins (qt-fig3, qt-fig16; docs/reference/metrics.md, "The ViT
-- verdicts"): at least VIT.min_patches outlier patches (fewer: where they sit is not measurable,
-- the verdict is inconclusive); more of them at background patches (and in the border ring)
-- than chance, by a one-sided binomial test at level VIT.alpha over the outlier patches; the next
-- layer's chosen head's attention on them at least VIT.enrichment × their share of the patches;
-- their values at most VIT.value_ratio × the other patches'; where given, the inf norm peaking
-- in the second half of the layers at VIT.inf_rise × the first half's largest or more.
M.VIT = { min_patches = 10, alpha = 0.01, enrichment = 2, value_ratio = 0.5, inf_rise = 1.5 }

-- o = { n = outlier patches, background = { share =, p = } (the share of them at background,
-- p the background share of all patches), border = { share =, p = } or nil, head = "layer 3 head 1" (words),
-- enrichment =, value_ratio = (‖v‖ outlier / other), inf = { peak_layer =, n_layers =, peak =,
-- first_half_max = } or nil } -> checks { { text, true | false | nil } }, holds (nil: inconclusive);
-- M.vit_lines(checks) -> the summary's lines
function M.vit_checks(o)
  local V = M.VIT
  local enough = o.n >= V.min_patches
  local function t(c) if enough then return c end return nil end
  local function g(fmt, x) return x == x and string.format(fmt, x) or "n/a" end
  local cs = { { string.format("at least %d outlier patches to locate (%d)", V.min_patches, o.n), enough } }
  local function beyond_chance(what, set)
    local k = o.n > 0 and math.floor(set.share * o.n + 0.5) or 0   -- the count behind the share
    local pv = binomial_tail(o.n, k, set.p)
    cs[#cs + 1] = { string.format("%s: %d of %d outlier patches (%s) against %.3f of all patches, binomial P(≥ %d) = %.2g ≤ %g",
      what, k, o.n, o.n > 0 and string.format("%.3f", k / o.n) or "n/a", set.p, k, pv, V.alpha), t(pv <= V.alpha) }
  end
  beyond_chance("background", o.background)
  if o.border then beyond_chance("border ring", o.border) end
  cs[#cs + 1] = { string.format("%s attention enrichment on outlier patches %s ≥ %g", o.head, g("%.3f", o.enrichment), V.enrichment),
                  t(o.enrichment >= V.enrichment) }
  cs[#cs + 1] = { string.format("its ‖v‖ of outlier patches over the other patches' %s ≤ %g", g("%.3f", o.value_ratio), V.value_ratio),
                  t(o.value_ratio <= V.value_ratio) }
  if o.inf then
    local i = o.inf
    cs[#cs + 1] = { string.format("inf norm of h peaks in the second half of the layers (layer %d of %d) at ≥ %g × the first half's largest (%s × %.3g)",
      i.peak_layer, i.n_layers, V.inf_rise, g("%.2f", i.peak / i.first_half_max), i.first_half_max),
      i.peak_layer >= i.n_layers / 2 and i.peak >= V.inf_rise * i.first_half_max }
  end
  local holds
  if enough then
    holds = true
    for _, c in ipairs(cs) do if c[2] == false then holds = false end end
  end
  return cs, holds
end
-- the checks of vit_checks as the summary's list lines ("- <check>: yes / **no** / not testable")
function M.vit_lines(cs)
  local lines = {}
  for _, c in ipairs(cs) do
    lines[#lines + 1] = string.format("- %s: %s", c[1], c[2] == nil and "not testable (too few outlier patches)" or c[2] and "yes" or "**no**")
  end
  return lines
end

return M
