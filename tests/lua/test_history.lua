-- Training histories show the phenomena (issue 23): runner/history.lua and plots/history.gp on
-- hand-made model directories, and the one verdict of judge/thresholds.
--   * judge: the final measurement is the mean over the last 10 % of the tracked steps; a
--     threshold met on the way and lost by the end is "reached on the way at step N", not reached;
--   * a model with the tracker's curve: history.nc holds sink share, value ratio, massive ratio,
--     kurtosis (and the sink rate when the curve has it) with the thresholds and the final means as
--     attributes; history.dat carries the thresholds of judge/thresholds (one place) and the
--     final window; a constant learning rate is a note (no panel, flag 0), a cosine one a curve;
--   * a trainer that recorded only max inf norm and kurtosis (emergence) and one that recorded no
--     curve still give a figure; ensure() rewrites a history of an older version, not a current one.
local t = require "tap"
local th = require "outlierlab.judge.thresholds"
local history = require "outlierlab.runner.history"
local serialize = require "outlierlab.util.serialize"
local fs = require "outlierlab.util.fs"

-- ---------------------------------------------------------------- judge
local function pt(step, share, vr, mr, k, rate)
  return { step = step, sink_share = share, value_ratio = vr, massive_ratio = mr, avg_kurtosis = k, sink_rate = rate }
end
-- 21 points, steps 0..3000 by 150: massive 120 at steps 2550 and 2700, then 95 and 90
-- the curves below count as measured by this tree (recipes/track.lua; a stale one is marked)
local code = require("outlierlab.recipes.track").code()
local curve = {}
for i = 0, 20 do
  local s = i * 150
  local mr = s == 2550 and 120 or s == 2700 and 101 or s == 2850 and 95 or s == 3000 and 90 or 10 + s / 100
  curve[#curve + 1] = pt(s, s >= 900 and 0.9 or 0.3, s >= 900 and 0.1 or 0.8, mr, s >= 1500 and 40 or 5, 0.5)
end
local j = th.judge(curve)
t.is(j.window.from, 2700, "final window: the last 10 % of the tracked steps (2700..3000)")
t.is(#j.window.points, 3, "final window: 3 points")
t.near(j.final.massive_ratio, (101 + 95 + 90) / 3, 1e-12, "final massive ratio = mean over the window")
t.is(j.reached.massive, false, "massive: met on the way, not at the end: not reached")
t.is(j.first.massive, 2550, "massive: first reached at step 2550")
t.ok(th.words(j, "massive"):find("not at the end (final 95); reached on the way at step 2550", 1, true), th.words(j, "massive"))
t.is(j.reached.sink, true, "sink: share 0.9, value ratio 0.1 at the end: reached")
t.is(j.first.sink, 900, "sink: first at 900")
t.is(j.reached.kurtosis, true, "kurtosis 40 at the end: reached")
t.is(j.all, false, "not every condition at the end")
t.is(th.judge({}).all, false, "no curve: nothing reached")
t.is(th.judge({ pt(0, 0.9, 0.1, 200, 50) }).all, true, "one point: the window is that point")

-- ---------------------------------------------------------------- a model directory
local tmp = os.tmpname()
os.remove(tmp)
local function model(name, info)
  local dir = tmp .. "/" .. name
  fs.mkdir_p(dir)
  fs.write_atomic(dir .. "/done.lua", serialize.serialize(info))
  return dir
end
local function steps(n, lr_fn)
  local l, lr, g = {}, {}, {}
  for s = 1, n do l[s], lr[s], g[s] = 4 - s / n, lr_fn(s), 0.5 end
  return l, lr, g
end
local l, lr, g = steps(3000, function() return 0.01 end)
local dir = model("phen", { losses = l, lrs = lr, gnorms = g, val = { { step = 3000, loss = 3.1 } }, curve = curve, curve_code = code })
local files = history.write(dir, nil, {})
t.ok(#files >= 4, "history.nc, .dat, .png, .pdf written", table.concat(files, " "))
local hdr = t.sh("ncdump -h " .. dir .. "/history.nc")
for _, v in ipairs { "sink_share(probe)", "sink_value_ratio(probe)", "massive_ratio(probe)", "avg_kurtosis(probe)", "sink_rate(probe)",
                     ":threshold_sink_share = 0.8", ":threshold_value_ratio = 0.2", ":threshold_massive_ratio = 100",
                     ":threshold_avg_kurtosis = 30", ":final_window_from = 2700", ":final_massive_ratio = 95.3" } do
  t.ok(hdr:find(v, 1, true), "history.nc: " .. v, hdr)
end
local dat = t.slurp(dir .. "/history.dat")
local blocks = {}
for b in (dat .. "\n\n\n"):gmatch("(.-)\n\n\n") do blocks[#blocks + 1] = b end
t.is(#blocks, 5, "history.dat: 5 blocks")
local flags = blocks[1]:match("\n([%d ]+)%s*$")
t.is(flags, "1 1 1 1 1 0 0 0 0", "flags: train, val, curve, phenomena, sink rate present; no max kurtosis; constant lr (no panel); no max inf norm; not stale")
local last = blocks[5]:match("\n([^\n]+)%s*$")
t.ok(last and last:match("^0%.8 0%.2 100 30 2700 3000 "), "thresholds (judge/thresholds) and final window in the data", last)
local png = t.slurp(dir .. "/history.png") or ""
t.ok(#png > 20000 and png:sub(2, 4) == "PNG", "history.png drawn", #png)

-- a cosine schedule: the learning rate is drawn (flag 1)
l, lr, g = steps(200, function(s) return 0.01 * (1 + math.cos(math.pi * s / 200)) / 2 end)
local dir2 = model("cos", { losses = l, lrs = lr, gnorms = g, val = {},
                            curve = { { step = 0, max_inf_norm = 2, avg_kurtosis = 3 }, { step = 200, max_inf_norm = 9, avg_kurtosis = 12 } },
                            curve_code = code })
history.write(dir2, nil, {})
local f2 = t.slurp(dir2 .. "/history.dat"):match("\n([%d ]+)\n")
t.is(f2, "1 0 1 0 0 0 1 1 0", "emergence-like curve (max inf norm, kurtosis): no phenomena panels' data, lr drawn")
t.ok(#(t.slurp(dir2 .. "/history.png") or "") > 10000, "its figure is drawn (phenomena panels say not recorded)")
local dir3 = model("nocurve", { losses = l, lrs = lr, gnorms = g })
history.write(dir3, nil, {})
t.ok(#(t.slurp(dir3 .. "/history.png") or "") > 10000, "a model without a curve still has a figure")

-- a model that never had a sink head (QT's clipped BERT that did not train): the value ratio is
-- NaN at every tracked step, so the final window's mean is NaN too; the figure is still drawn
local nosink = {}
for i = 0, 20 do nosink[#nosink + 1] = pt(i * 150, 0, 0 / 0, 4, 3, 0) end
l, lr, g = steps(3000, function() return 0.003 end)
local dir4 = model("nosink", { losses = l, lrs = lr, gnorms = g, val = { { step = 3000, loss = 4.4 } }, curve = nosink, curve_code = code })
history.write(dir4, nil, {})
local last4 = t.slurp(dir4 .. "/history.dat"):match("\n([^\n]+)%s*$")
t.ok(last4 and last4:match("^0%.8 0%.2 100 30 2700 3000 0 NaN "), "no sink: the final value ratio is NaN in the data", last4)
t.ok(#(t.slurp(dir4 .. "/history.png") or "") > 10000, "no sink at any step: the figure is drawn (the value panel says so)")

-- ensure: an older history is rewritten once, a current one is kept
fs.write_atomic(dir3 .. "/history.version", "1\n")
t.is(history.ensure(dir3, {}), true, "ensure rewrites a history of an older version")
t.is(t.slurp(dir3 .. "/history.version"), history.VERSION .. "\n", "and records the version")
t.is(history.ensure(dir3, {}), false, "ensure keeps a current history")

os.execute("rm -rf '" .. tmp .. "'")
return t.done()
