-- recipes/track — what the training tracker measures (train/track.lua decides when): the
-- phenomena of one held-out batch of the model's validation stream (measure/phenomena through
-- the probes), reduced to one curve point, the stable measurement of a curve, and the key of
-- this measuring code.
--
-- The key: the curve of a model is computed by this module and everything it requires
-- (measure/, judge/, data/ ...) and by the engine's analysis kernels, none of which is in the
-- model's cache key (runner/cache.lua stops its require closure at this module). code() hashes
-- that code (util/sources); the trainer stores it in done.lua as curve_code, and fresh(info)
-- tells a reader whether a cached curve was measured by the code of this tree. A stale curve is
-- refreshed by retraining its model (--refresh_curves: training is deterministic, so the same
-- weights come back with a curve of the current code; the checkpoints of the tracked steps are
-- not kept, so there is nothing to re-measure from).
local batcher = require "outlierlab.data.batcher"
local sources = require "outlierlab.util.sources"
local track = require "outlierlab.train.track"
local phenomena = require "outlierlab.measure.phenomena"
local probes = require "outlierlab.measure.probes"
local thresholds = require "outlierlab.judge.thresholds"
local stats = require("outlierlab.judge.seeds").stats   -- one mean/sd (NaN without values)

local M = {}

-- the engine files the curve is not computed through (the rest: the forward pass and the
-- outlier statistics of engine/analysis*.c)
M.ENGINE_NOT_CURVE = { ["io_netcdf.c"] = true, ["io_hf.c"] = true, ["compress.c"] = true, ["quant.c"] = true }
M.MODULE = "outlierlab.recipes.track"

-- the hash of the code that measures a curve (memoised per process)
local code
function M.code()
  code = code or sources.hash(sources.closure{ roots = { M.MODULE } }, sources.engine_files(nil, M.ENGINE_NOT_CURVE))
  return code
end

-- the option that refreshes a stale curve, as the messages name it
M.REFRESH = "--refresh_curves"

-- is the curve in info (a model's done.lua) measured by this tree's code? true, or false and
-- a message naming the model and the command that refreshes it. A model without a curve is
-- not stale (it has nothing to judge; its reader says so).
function M.fresh(info, hash)
  if type(info) ~= "table" or info.curve == nil then return true end
  if info.curve_code == M.code() then return true end
  return false, string.format("model %s: its tracked curve was measured by %s than this tree's " ..
    "(recipes/track.lua, what it requires, engine/analysis*.c); rerun with %s to retrain the models whose curve is " ..
    "stale (the same weights, a curve of the current code)", tostring(hash or "?"),
    info.curve_code and "other code" or "code from before curves were keyed", M.REFRESH)
end

-- phenomena on n held-out batches (B rows each, at most 16) starting at batch `first` of the
-- model's validation stream
function M.measure_phenomena(ctx, m, corpus, spec, B, n, first)
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

-- Phenomena of a ViT on one held-out batch (at most 16 images): [CLS] is the initial token,
-- background patches are "weak" (they carry no information), object patches "other"
-- (measure/phenomena vit_batch); the sinks looked for are [CLS] and background patches.
function M.measure_vit_phenomena(ctx, m, spec, n, first)
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

-- One curve point: curve[i] = { step, loss, sink_share, value_ratio, sink_layer, sink_head,
-- sink_category, massive_ratio, massive_layer, massive_category, max_ratio, max_inf_norm,
-- avg_kurtosis, max_kurtosis, ... } (max_inf_norm: the per-sequence max |h| averaged over
-- sequences, largest over layers; kurtosis Pearson, of the layer outputs h).
function M.curve_point(step, loss, r)
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

-- the numeric fields of a curve point that M.stable averages
M.STABLE_FIELDS = { "loss", "sink_share", "value_ratio", "massive_ratio", "max_ratio", "avg_kurtosis", "max_kurtosis",
                    "max_inf_norm", "sink_rate", "sink_rate_value_ratio", "avg_kurtosis_no_initial",
                    "massive_peak_top1", "massive_last_top1", "initial_top_share", "initial_top3_share" }

-- The stable measurement of a curve: the mean and sd of every STABLE_FIELDS value over the
-- points in the final window (judge/thresholds window, the one window rule) of the points up to
-- `steps`; nil when there is none. The categorical fields (sink layer, head, category, massive
-- layer and category) are the most frequent values of those points.
function M.stable(curve, steps)
  if type(curve) ~= "table" or #curve == 0 then return nil end
  local sub = {}   -- the points up to `steps` (a resumed or longer curve is cut there)
  for _, p in ipairs(curve) do if not steps or p.step <= steps then sub[#sub + 1] = p end end
  if #sub == 0 then return nil end
  local pts = thresholds.window(sub).points
  local out = { n_points = #pts, from_step = pts[1].step, to_step = pts[#pts].step, sd = {} }
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

-- the tracker of one training (train/track.lua) measuring with phenomena_fn(n, first) -> the
-- phenomena result; its finish() gives the fields the trainer stores in done.lua: curve,
-- stable and curve_code
function M.tracker(spec, dir, phenomena_fn)
  local tr = track.new{ steps = spec.train.steps, dir = dir, measure = function(n, first, step, loss)
    return M.curve_point(step, loss, phenomena_fn(n, first))
  end }
  function tr.finish()
    return { curve = tr.curve, stable = M.stable(tr.curve, spec.train.steps), curve_code = M.code() }
  end
  return tr
end

return M
