-- test_onsets — when each phenomenon appears (lua/outlierlab/judge/onsets.lua): first and held
-- crossings of hand-made curves, NaN and untracked quantities, the table; the phenomena's
-- residual-sink share in a tracked curve point; and a checkpoint series of three exported Hugging
-- Face directories in which a residual sink is planted from the third on (series_point, then
-- scripts/checkpoint-series.lua on the folder).
local t = require "tap"
local ol = require "outlierlab"
local onsets = require "outlierlab.judge.onsets"
local R = require "outlierlab.measure.residual"
local models = require "outlierlab.models"
local hf = require "outlierlab.pretrained.hf"

-- ---------------------------------------------------------------- hand-made curves
local curve = {
  { step = 0, sink_rate = 0.0, massive_ratio = 3, resid_share = 0.1 },
  { step = 20, sink_rate = 0.5, massive_ratio = 120, resid_share = 0.2 },
  { step = 40, sink_rate = 0.25, massive_ratio = 150, resid_share = 0 / 0 },
  { step = 60, sink_rate = 0.75, massive_ratio = 90, resid_share = 0.95 },
  { step = 80, sink_rate = 1.0, massive_ratio = 101, resid_share = 0.97 },
}
local o = onsets.of(curve)
t.is(o.sink_rate.first, 20, "sink rate first ≥ 0.5 at step 20")
t.is(o.sink_rate.held, 60, "and held from step 60 (step 40 fell to 0.25)")
t.is(o.massive_ratio.first, 20, "massive ratio first ≥ 100 at step 20")
t.is(o.massive_ratio.held, 80, "held only from step 80 (90 at step 60)")
t.is(o.resid_share.first, 60, "residual sink first at step 60 (NaN at 40 counts as below)")
t.is(o.resid_share.held, 60, "held from 60")
t.is(o.resid_share.final, 0.97, "final value 0.97")
t.is(onsets.cell(o.sink_rate), "20 (held 60)", "cell: first (held)")
t.is(onsets.cell(o.resid_share), "60", "cell: one step when first = held")
local lost = onsets.of({ { step = 0, sink_rate = 0.6 }, { step = 10, sink_rate = 0.1 } })
t.is(onsets.cell(lost.sink_rate), "0 (lost)", "cell: crossed and lost by the end")
t.is(onsets.cell(lost.resid_share), "n/a", "cell: not tracked")
t.is(onsets.cell(onsets.of({ { step = 5, sink_rate = 0.1 } }).sink_rate), "—", "cell: never")
local shuffled = onsets.of({ curve[5], curve[1], curve[4], curve[2], curve[3] })
t.is(shuffled.sink_rate.held, 60, "points are taken in step order")
t.is(onsets.of(curve, { sink_rate = 0.9 }).sink_rate.first, 80, "a threshold given: sink rate ≥ 0.9 first at 80")
t.ok(not pcall(onsets.of, curve, { bogus = 1 }), "an unknown phenomenon is refused")
local lines = onsets.table{ { label = "vanilla", seed = 1, curve = curve } }
t.is(lines[3], "| vanilla | 1 | 20 (held 60) | 20 (held 80) | 60 | 80 |", "table row")

-- ---------------------------------------------------------------- the tracked curve point has the residual share
do
  local probes = require "outlierlab.measure.probes"
  local phen = require "outlierlab.measure.phenomena"
  local ctx = ol.Context{ params = 2^18, step_bytes = 2^24, seed = 2 }
  local m = models.build(ctx, models.preset("llama-quick"))
  m:eval()
  for v = 0, m.cfg.vocab_size - 1 do m.embed_tokens.weight.data[v * m.cfg.d_model + 9] = 8 end
  local ph = phen.new{ category = function() return "other" end, T = 16, C = m.cfg.d_model, n_head = m.cfg.n_head, causal = true }
  local P = probes.new{}
  ph:attach(P)
  ctx:no_grad(function()
    local ids = ctx:tensor({ 2, 16 }, { dtype = "i32" })
    for i = 0, 31 do ids.idata[i] = (i * 7) % m.cfg.vocab_size end
    P:forward(m, { ids = ids })
  end)
  ctx:reset()
  local p = require("outlierlab.recipes.track").curve_point(10, 1.0, ph:result())
  t.is(p.resid_share, 1, "phenomena → curve point: resid_share 1 with a planted dimension on every token")
end

-- ---------------------------------------------------------------- a checkpoint series
do
  local root = (os.getenv("TMPDIR") or "/tmp") .. "/outlierlab-test-onsets-" .. os.time() .. "-" .. math.random(1e6)
  local scale = { 0, 0, 8 }
  for i, s in ipairs(scale) do
    local c = ol.Context{ params = 2^18, step_bytes = 2^22, seed = 3 }
    local m = models.build(c, models.preset("llama-quick"))
    for v = 0, m.cfg.vocab_size - 1 do m.embed_tokens.weight.data[v * m.cfg.d_model + 5] = s end
    hf.export(root .. "/step" .. (i * 100), c, m)
  end
  local pts = {}
  for i = 1, 3 do
    local ctx, m = hf.load(root .. "/step" .. (i * 100))
    local V = m.cfg.vocab_size
    local p = R.series_point(ctx, m, dofile(ol.root .. "/tests/lua/lib/id_batches.lua")(ctx, 1, 4, 16,
      function(j) return (j * 13) % V end, function(j) return (j * 5) % V end))
    p.step = i * 100
    pts[i] = p
  end
  t.ok(pts[1].resid_share < 0.5 and pts[2].resid_share < 0.5, "series: no residual sink before the plant",
       string.format("%.3f %.3f", pts[1].resid_share, pts[2].resid_share))
  t.is(pts[3].resid_share, 1, "series: the planted checkpoint has share 1")
  t.ok(pts[1].sink_rate >= 0 and pts[1].sink_rate <= 1 and pts[1].massive_ratio > 0, "series: sink rate a fraction, massive ratio positive")
  t.is(onsets.of(pts).resid_share.first, 300, "series: residual sink appears at step 300")
  local f = io.popen(string.format("cd '%s' && bin/outlierlab run scripts/checkpoint-series.lua --dir='%s' 2>&1", ol.root, root))
  local out = f:read("*a")
  f:close()
  t.ok(out:find("| 300 | 300 |", 1, true) and out:find("step300", 1, true),
       "scripts/checkpoint-series.lua: the onset table names step 300 for the residual sink", out)
  os.execute("rm -rf '" .. root .. "'")
end

-- ---------------------------------------------------------------- scripts/onset-table.lua over cached curves
do
  local fs = require "outlierlab.util.fs"
  local json = require "outlierlab.util.json"
  local serialize = require "outlierlab.util.serialize"
  local root = (os.getenv("TMPDIR") or "/tmp") .. "/outlierlab-test-onset-table-" .. os.time() .. "-" .. math.random(1e6)
  local function model(name, overrides, seed, c, training)
    local d = root .. "/" .. name
    fs.mkdir_p(d)
    if not training then fs.write_atomic(d .. "/done.lua", serialize.serialize{ steps = 80 }) end
    local spec = { model = { preset = "llama-quick", overrides = overrides }, train = { steps = 80 }, seed = seed,
                   batch = { B = 1, T = 1, kind = "lm" }, data = { kind = "organism" } }
    fs.write_atomic(d .. "/spec.json", json.encode({ spec = spec }) .. "\n")
    fs.write_atomic(d .. "/track.lua", serialize.serialize(c))
  end
  model("a", { embed_scale = 20 }, 1, curve)
  model("b", { embed_scale = 20, norm_variant = "gated" }, 1, { { step = 0, sink_rate = 0, resid_share = 0.1 }, { step = 80, sink_rate = 0.1, resid_share = 0.2 } })
  model("c", { embed_scale = 20, norm_variant = "dyt" }, 2, { { step = 0, sink_rate = 0 }, { step = 40, sink_rate = 0.9 } }, true)
  local function table_of(args)
    local f = io.popen(string.format("cd '%s' && bin/outlierlab run scripts/onset-table.lua --models='%s' %s 2>&1", ol.root, root, args))
    local out = f:read("*a")
    f:close()
    return out
  end
  local out = table_of("")
  t.ok(out:find("| vanilla (llama-quick, 80 steps) | 1 | 20 (held 60) | 20 (held 80) | 60 | 80 |", 1, true)
       and out:find("| norm_variant=gated (llama-quick, 80 steps) | 1 | — | n/a | — | 80 |", 1, true),
       "scripts/onset-table.lua: one row per cached model, labelled by what its spec sets", out)
  t.ok(not out:find("norm_variant=dyt", 1, true), "onset-table: a model still training (no done.lua) is left out", out)
  t.ok(table_of("--partial"):find("| norm_variant=dyt (llama-quick, 80 steps) | 2 | 40 | n/a | n/a | 40 |", 1, true),
       "onset-table --partial: it is listed with its last tracked step")
  -- another recipe of the same label and seed (a knob of the recipe map): one row of the two is
  -- kept (the later; written in the same second here, so either) and the note counts the other;
  -- --run keeps the models one run.json lists
  model("d", { embed_scale = 0 }, 1, { { step = 0, sink_rate = 0 }, { step = 80, sink_rate = 0.1 } })
  local later = table_of("")
  local _, n_vanilla = later:gsub("| vanilla %(llama%-quick, 80 steps%) | 1 |", "")
  t.ok(n_vanilla == 1 and later:find("1 model(s) with the label and seed of a later one left out", 1, true),
       "onset-table: two models of the same label and seed give one row, and the note counts the other", later)
  fs.write_atomic(root .. "/run.json", json.encode({ models = { "a", "b" } }))
  local picked = table_of("--run='" .. root .. "/run.json'")
  t.ok(picked:find("| vanilla (llama-quick, 80 steps) | 1 | 20 (held 60) |", 1, true) and not picked:find("left out", 1, true),
       "onset-table --run: only the run's models, so the leaderboard's own vanilla is kept", picked)
  fs.write_atomic(root .. "/empty.json", "{}")
  t.ok(table_of("--run='" .. root .. "/empty.json'"):find("lists no models", 1, true), "onset-table --run: a run.json without models is refused")
  os.execute("rm -rf '" .. root .. "'")
end

-- ---------------------------------------------------------------- scripts/snapshot-series.lua: a real run's series
do
  local root = (os.getenv("TMPDIR") or "/tmp") .. "/outlierlab-test-snapshots-" .. os.time() .. "-" .. math.random(1e6)
  local function run(args)
    local f = io.popen(string.format("cd '%s' && bin/outlierlab run scripts/snapshot-series.lua %s 2>&1", ol.root, args))
    local out = f:read("*a")
    f:close()
    return out
  end
  local out = run("--profile=quick --every=8 --out='" .. root .. "'")
  local function exists(p) local f = io.open(p, "rb") if f then f:close() return true end return false end
  local want = { 0, 8, 16, 20 }   -- step 0, every 8 steps, and the last of the quick profile's 20
  local all = true
  for _, s in ipairs(want) do
    all = all and exists(root .. "/series/step" .. s .. "/model.safetensors") and exists(root .. "/series/step" .. s .. "/spec.json")
  end
  t.ok(all and not exists(root .. "/series/step4"), "snapshot-series: weights and spec at steps 0, 8, 16 and 20 only", out)
  t.ok(out:find("The tracked curve of the same run", 1, true), "snapshot-series: prints the tracked curve's onset table", out)
  -- the last snapshot is the trained model's weights; step 0 is the initialisation, not them
  local function params(path)
    local spec = assert(require("outlierlab.runner.cache").read_spec(root .. "/series/step0"))
    local _, m = require("outlierlab.recipes").load(spec, { ckpt = path })
    local w = m.embed_tokens.weight
    local v = {}
    local n = tonumber(w.numel)
    for i = 0, n - 1 do v[i] = w.data[i] end
    return v, n
  end
  local last, n = params(root .. "/series/step20/model.safetensors")
  local final = params(root .. "/final/model.ckpt")
  local init = params(root .. "/series/step0/model.safetensors")
  local same, moved = true, false
  for i = 0, n - 1 do
    if last[i] ~= final[i] then same = false end
    if last[i] ~= init[i] then moved = true end
  end
  t.ok(same and moved, "snapshot-series: step 20's weights are the trained model's bit for bit, and differ from step 0's")
  local f = io.popen(string.format("cd '%s' && bin/outlierlab run scripts/checkpoint-series.lua --dir='%s/series' 2>&1", ol.root, root))
  local series = f:read("*a")
  f:close()
  t.ok(series:find("step16 ", 1, true) and series:find("| " .. root .. "/series |", 1, true),
       "checkpoint-series reads the snapshots: one line per step and the onset table", series)
  t.ok(run("--profile=quick --every=0 --out='" .. root .. "'"):find("--every must be a positive integer", 1, true),
       "snapshot-series: --every=0 is refused with a message")
  t.ok(run("--profile=quick --bogus=1 --out='" .. root .. "'"):find("unknown key --bogus", 1, true),
       "snapshot-series: an unknown key is refused by name")
  os.execute("rm -rf '" .. root .. "'")
end

t.done()
