-- test_residual — residual sinks and the λ-minimum detector (lua/outlierlab/measure/residual.lua):
-- top-k shares, H_avg, the H_avg order and its stability against numbers worked out by hand in the
-- comments; padding left out; the λ-minimum detector on a built model with one planted gain; and
-- both on an imported model: a LLaMA with a planted residual sink (one embedding column large on
-- every token, that dimension's gain 0.004 in every norm) exported as a Hugging Face directory and
-- read back with hf.load.
local t = require "tap"
local ol = require "outlierlab"
local R = require "outlierlab.measure.residual"
local models = require "outlierlab.models"
local hf = require "outlierlab.pretrained.hf"

local ctx = ol.Context{ params = 2^18, step_bytes = 2^24 }
local function X(shape, vals) return ctx:tensor(shape, { persistent = true, name = "h" }):load(vals) end

-- ---------------------------------------------------------------- shares, H_avg, order (by hand)
-- one sequence, 4 tokens, C = 4:
--   t0 [1, −5, 0.5, 2]    top-2 dims {1, 3}
--   t1 [0.1, 4, −3, 0.2]  top-2 {1, 2}
--   t2 [6, 3, 0, 0]       top-2 {0, 1}
--   t3 [0, −2, 0, 1]      top-2 {1, 3}
-- k = 2 shares: dim 0 1/4, dim 1 4/4, dim 2 1/4, dim 3 2/4; sinks at 0.9: {1}
-- H_avg: dim 0 (1+0.1+6+0)/4 = 1.775, dim 1 14/4 = 3.5, dim 2 3.5/4 = 0.875, dim 3 3.2/4 = 0.8
-- order 1, 0, 2, 3; stability = the share of dim 1 (first by H_avg) = 1
local h0 = X({ 1, 4, 4 }, { 1, -5, 0.5, 2, 0.1, 4, -3, 0.2, 6, 3, 0, 0, 0, -2, 0, 1 })
local s = R.ResidualSinks{ k = 2, share = 0.9 }
s:update(h0, 0)
local r = s:result()
t.is(table.concat(r.top_share, " "), "0.25 1 0.25 0.5", "top-2 shares per dimension (hand)")
t.near(r.h_avg[1], 1.775, 1e-6, "H_avg dim 0 = 1.775")
t.near(r.h_avg[2], 3.5, 1e-6, "H_avg dim 1 = 3.5")
t.near(r.h_avg[3], 0.875, 1e-6, "H_avg dim 2 = 0.875")
t.near(r.h_avg[4], 0.8, 1e-6, "H_avg dim 3 = 0.8")
t.is(table.concat(r.order, " "), "1 0 2 3", "dimensions by H_avg")
t.is(table.concat(r.sinks, " "), "1", "residual sinks at share 0.9: dim 1")
t.is(r.sink_dim, 1, "sink_dim 1")
t.is(r.max_share, 1, "max_share 1")
t.near(r.stability, 1, 1e-12, "stability = share of the first dim by H_avg = 1")
t.is(r.tokens, 4, "4 token rows")

-- k = 1: top-1 dims 1, 1, 0, 1 → shares 0.25, 0.75, 0, 0; no sink at 0.9, one at 0.7
s = R.ResidualSinks{ k = 1, share = 0.9 }
s:update(h0, 0)
r = s:result()
t.is(table.concat(r.top_share, " "), "0.25 0.75 0 0", "top-1 shares (hand)")
t.is(#r.sinks, 0, "no residual sink at 0.9 with k = 1")
t.near(r.stability, 0.75, 1e-12, "k = 1: stability = top-1 share of dim 1 = 0.75")
t.is(table.concat(R.ResidualSinks{ k = 1, share = 0.7 }:result().sinks or {}, " "), "", "an empty accumulator has no sink")

-- padding: t2 masked out → top-2 over t0 {1, 3}, t1 {1, 2}, t3 {1, 3}: dim 0 0, dim 1 1,
-- dim 2 1/3, dim 3 2/3
local mask = ctx:tensor({ 1, 4 }, { dtype = "i32", persistent = true }):load({ 1, 1, 0, 1 })
s = R.ResidualSinks{ k = 2 }
s:update(h0, 0, mask)
r = s:result()
t.ok(r.top_share[1] == 0 and r.top_share[2] == 1 and math.abs(r.top_share[3] - 1 / 3) < 1e-12
     and math.abs(r.top_share[4] - 2 / 3) < 1e-12, "a padded token is left out (shares over 3 tokens)",
     table.concat(r.top_share, " "))

-- two layers: layer 1 is [0.1, 0.2, 0.3, 9] at every token, top-2 {3, 2} → over the 8
-- token·layer rows: dim 0 1/8, dim 1 4/8, dim 2 (1 + 4)/8 = 0.625, dim 3 (2 + 4)/8 = 0.75
local h1 = X({ 1, 4, 4 }, { 0.1, 0.2, 0.3, 9, 0.1, 0.2, 0.3, 9, 0.1, 0.2, 0.3, 9, 0.1, 0.2, 0.3, 9 })
s = R.ResidualSinks{ k = 2 }
s:update(h0, 0); s:update(h1, 1)
r = s:result()
t.is(table.concat(r.top_share, " "), "0.125 0.5 0.625 0.75", "two layers: shares over 8 token·layer rows")
t.is(table.concat(r.by_layer[1].sinks, " "), "2 3", "layer 1 alone: dims 2 and 3 in every token's top-2")
t.is(table.concat(r.by_layer[0].sinks, " "), "1", "layer 0 alone: sink dim 1")
t.is(#r.sinks, 0, "no dimension on top in 90 % of the rows of both layers")
t.ok(not pcall(R.ResidualSinks, { k = 0 }), "k = 0 is refused")
t.ok(not pcall(function() local a = R.ResidualSinks{}; a:update(h0, 0); a:update(X({ 1, 2, 2 }, { 1, 2, 3, 4 }), 1) end),
     "a layer of another width is refused")

-- ties go to the lower dimension: the top-2 of [0, 0, 0, 9] is {3, 0}
s = R.ResidualSinks{ k = 2 }
s:update(X({ 1, 1, 4 }, { 0, 0, 0, 9 }), 0)
t.is(table.concat(s:result().top_share, " "), "1 0 0 1", "a tie goes to the lower dimension")

-- the sorted map: columns in H_avg order
local map = R.sorted_map(h0, 0, { 1, 0, 2, 3 })
t.is(table.concat(map.z[1], " "), "5 1 0.5 2", "sorted map row 0: |h| in the order 1, 0, 2, 3")
t.is(map.rows .. "x" .. map.cols, "4x4", "sorted map 4 tokens × 4 dims")

-- ---------------------------------------------------------------- the λ-minimum detector
do
  local c = ol.Context{ params = 2^18, step_bytes = 2^22 }
  local m = models.build(c, models.preset("llama-quick"))
  local nl = R.norm_layers(m)
  t.is(#nl, 5, "llama-quick: 5 norms of the residual width (2 per layer + final; q/k norms none)")
  m.blocks[2].ln2.weight.data[7] = 0.004
  local lm = R.lambda_minimum(m, { sinks = { 7 } })
  t.is(lm.flagged, 1, "one planted gain 0.004 flagged")
  t.is(lm.coincide, 1, "it sits on the given sink dimension")
  local hit
  for _, l in ipairs(lm.layers) do if l.flagged then hit = l end end
  t.ok(hit and hit.name == "layers1.ln2" and hit.argmin == 7 and math.abs(hit.ratio - 0.004) < 1e-6,
       "flagged: layers1.ln2, argmin 7, ratio 0.004 (median 1)", hit and string.format("%s %d %g", hit.name, hit.argmin, hit.ratio))
  local c2 = ol.Context{ params = 2^18, step_bytes = 2^22 }
  local mp = models.build(c2, models.preset("llama-quick", { norm_variant = "preaffine" }))
  t.is(#R.norm_layers(mp), 5, "PreAffine: the inner gains are found (with λ₁ beside)")
  t.ok(R.norm_layers(mp)[1].pre ~= nil, "PreAffine: λ₁ handed along")
  local c3 = ol.Context{ params = 2^18, step_bytes = 2^22 }
  t.is(#R.norm_layers(models.build(c3, models.preset("llama-quick", { norm_gain = "single" }))), 0,
       "single-gain RMSNorm: no per-channel gain to inspect")
end

-- ---------------------------------------------------------------- an imported model with a planted sink
do
  local dir = os.getenv("TMPDIR") or "/tmp"
  dir = dir .. "/outlierlab-test-residual-" .. tostring(os.time()) .. "-" .. tostring(math.random(1e6))
  local c = ol.Context{ params = 2^18, step_bytes = 2^22, seed = 3 }
  local m = models.build(c, models.preset("llama-quick"))
  local V, Cd, SINK = m.cfg.vocab_size, m.cfg.d_model, 5
  for v = 0, V - 1 do m.embed_tokens.weight.data[v * Cd + SINK] = 8 end   -- dim 5 large on every token
  for _, nl in ipairs(R.norm_layers(m)) do nl.weight.data[SINK] = 0.004 end
  hf.export(dir, c, m)
  local ctx2, m2 = hf.load(dir)
  local batches = dofile(ol.root .. "/tests/lua/lib/id_batches.lua")(ctx2, 2, 2, 16,
    function(i, b) return (i * 7 + b * 13) % V end, function(i, b) return (i * 11 + b) % V end)
  local rs = R.residual_sinks(ctx2, m2, batches, { k = 3 })
  t.is(rs.sink_dim, SINK, "imported: the planted dimension is the residual sink")
  t.is(rs.max_share, 1, "imported: on top at every token of every layer")
  t.is(rs.order[1], SINK, "imported: first in the H_avg order")
  local lm = R.lambda_minimum(m2, { sinks = rs.sinks })
  t.is(lm.flagged, 5, "imported: all 5 norms have a tiny gain")
  t.is(lm.coincide, 5, "imported: every minimum sits on the residual sink")
  os.execute("rm -rf '" .. dir .. "'")
end

t.done()
