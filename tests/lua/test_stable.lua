-- The stable measurement of a model's phenomena (train/track.lua's schedule, recipes/track.lua's
-- stable and tracker): the points of the last 10 % of the steps, each on its own held-out
-- batches, averaged; hand-computed cases and a tiny trained model.
local t = require "tap"
local ol = require "outlierlab"
local recipes = require "outlierlab.recipes"
local track = require "outlierlab.train.track"
local tracked = require "outlierlab.recipes.track"

-- schedule: 200 steps -> every 10 steps, and every 2 steps after step 180 (the last 20 steps)
do
  local due, from = track.schedule(200)
  t.is(from, 180, "the stable window starts after step 180 (last 10 % of 200)")
  local pts = {}
  for s = 1, 200 do if due(s) then pts[#pts + 1] = s end end
  local want = { 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160, 170, 180,
                 182, 184, 186, 188, 190, 192, 194, 196, 198, 200 }
  t.is(table.concat(pts, ","), table.concat(want, ","), "points: every steps/20, then every steps/100 in the window")
  local n = 0
  for _, s in ipairs(pts) do if s > from then n = n + 1 end end
  t.is(n, 10, "ten points in the stable window")
  local due3 = track.schedule(7)
  local c = 0
  for s = 1, 7 do if due3(s) then c = c + 1 end end
  t.is(c, 7, "a run shorter than 20 steps measures every step")
end

-- stable(): mean and sd over the window's points (steps >= 180 of 200), the most frequent sink layer
do
  local curve = {
    { step = 0, sink_share = 0.1, massive_ratio = 1, sink_layer = 0 },
    { step = 100, sink_share = 0.5, massive_ratio = 50, sink_layer = 0 },
    { step = 182, sink_share = 0.8, massive_ratio = 100, sink_layer = 3, avg_kurtosis = 0 / 0 },
    { step = 190, sink_share = 0.9, massive_ratio = 200, sink_layer = 3 },
    { step = 200, sink_share = 1.0, massive_ratio = 300, sink_layer = 2 },
  }
  local st = tracked.stable(curve, 200)
  t.is(st.n_points, 3, "three points after step 180")
  t.near(st.sink_share, 0.9, 1e-12, "mean sink share (0.8 + 0.9 + 1.0) / 3")
  t.near(st.sd.sink_share, 0.1, 1e-12, "sd of the sink share")
  t.near(st.massive_ratio, 200, 1e-12, "mean massive ratio")
  t.near(st.sd.massive_ratio, 100, 1e-12, "sd of the massive ratio")
  t.is(st.sink_layer, 3, "the most frequent sink layer")
  t.ok(st.avg_kurtosis ~= st.avg_kurtosis, "a field no point has is undefined (NaN)")
  t.is(st.from_step, 182, "window's first point")
  t.is(tracked.stable({}, 200), nil, "no curve, no stable measurement")
end

-- a tiny LLaMA on the organism task: the tracker measures on 2 batches per point, the window's
-- points on batches of their own, and stable() averages the points of the window
do
  local models = require "outlierlab.models"
  local batcher = require "outlierlab.data.batcher"
  local spec = { model = { preset = "llama-quick" }, data = { kind = "organism", vocab_size = 64, n_triggers = 8, groups = 2,
                 alpha = 0.1, p_trigger = 0.12, n_delim = 0, p_delim = 0.1, n_weak = 0, p_weak = 0.1, seed = 1 },
                 batch = { B = 4, T = 16, kind = "lm" }, train = { steps = 20 }, seed = 1 }
  local corpus = batcher.corpus(spec.data)
  local ctx = ol.Context{ seed = 1 }
  local m = models.build(ctx, models.spec_cfg(spec))
  local dir = os.tmpname(); os.remove(dir); os.execute("mkdir -p " .. dir)
  local firsts = {}
  local tr = tracked.tracker(spec, dir, function(n, first)
    firsts[#firsts + 1] = first
    t.is(n, track.TRACK_BATCHES, "each point measures TRACK_BATCHES batches")
    return tracked.measure_phenomena(ctx, m, corpus, spec, 4, n, first)
  end)
  for s = 1, 20 do tr.on_step(s, { loss = 1 / s }) end
  t.is(#tr.curve, 21, "step 0 and every step of a 20-step run")
  t.is(firsts[#firsts - 1], track.TRACK_BATCHES, "the window's first point takes batches 2-3")
  t.is(firsts[#firsts], 2 * track.TRACK_BATCHES, "the window's second point takes batches 4-5")
  local fin = tr.finish()
  t.is(fin.curve_code, tracked.code(), "the tracker records the key of the code that measured its curve")
  local st = fin.stable
  t.is(st.n_points, 3, "the window of a 20-step run holds steps 18, 19 and 20")
  t.ok(st.sink_rate >= 0 and st.sink_rate <= 1, "the sink rate is a share of heads", st.sink_rate)
  t.ok(st.avg_kurtosis_no_initial > 0, "kurtosis without the initial token is measured", st.avg_kurtosis_no_initial)
  -- one measurement of 2 batches equals the mean of what the probes saw on those two batches
  local r2 = tracked.measure_phenomena(ctx, m, corpus, spec, 4, 2, 0)
  local ra = tracked.measure_phenomena(ctx, m, corpus, spec, 4, 1, 0)
  t.ok(r2.sink.share == r2.sink.share and ra.sink.share == ra.sink.share, "measurements are defined")
  os.execute("rm -rf " .. dir)
end
t.done()
