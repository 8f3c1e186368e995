-- One verdict per model (issue 23): the recipe map (experiments/organism.lua) judges each model's
-- final measurement (the mean over the last 10 % of the tracked steps, judge/thresholds) and
-- reports a threshold met only on the way as "reached on the way at step N", which does not count.
--   * the issue's case: top-1/median 120 at step 2550, 95 at the end -> massive "not at the end
--     (final 95); reached on the way at step 2550", the family's default recipe not a model
--     organism, the claim does not hold (before: "reached at step 2550", holds);
--   * every threshold held at the end -> reached, the claim holds;
--   * the summary names the quantity each verdict judges, and so-fig3's (SO's tau rule);
--   * live, quick profile: the recipe map and so-fig3 analyse the same cached LLaMA model (one
--     hash in both run.json files) and the map's summary speaks of the final measurement.
local t = require "tap"
local root = OUTLIERLAB_ROOT
local exp = dofile(root .. "/experiments/organism.lua")
local stage = {}
for _, s in ipairs(exp.stages) do stage[s[1]] = s[2] end

local function curve(massive_at)
  local c = {}
  for i = 0, 20 do
    local s = i * 150
    c[#c + 1] = { step = s, sink_share = s >= 600 and 0.9 or 0.2, value_ratio = s >= 600 and 0.1 or 0.9,
                  massive_ratio = massive_at(s), avg_kurtosis = s >= 900 and 45 or 4 }
  end
  return c
end
local function run_of(massive_at)
  local run = { out = { train = { { family = "llama", base = true, label = "llama default", steps = 3000,
                                    val_loss = 2.9, seconds = 60, curve = curve(massive_at) } } } }
  run.out.analyze = stage.analyze(run)
  return run, exp.summary(run)
end

-- the issue's case: a peak on the way, 95 at the end
local _, s = run_of(function(st) return st == 2550 and 120 or st >= 2700 and 95 or 20 + st / 50 end)
t.ok(s.notes:find("| llama default | reached (final 0.90 / 0.10; first at step 600) | not at the end (final 95); reached on the way at step 2550 | reached (final 45.0; first at step 900) |", 1, true),
     "massive: 95 at the end, 120 on the way at step 2550 -> not at the end, reached on the way", s.notes)
t.is(s.holds, false, "the claim does not hold on a threshold met only on the way")
t.ok(s.reproduced:find("at the end of training", 1, true) and s.reproduced:find(": none (of llama)", 1, true), "reproduced: none at the end", s.reproduced)
t.ok(not s.notes:find("reached at step", 1, true), "no bare 'reached at step' left", s.notes)

-- every threshold held at the end
local _, s2 = run_of(function(st) return st >= 1200 and 150 or 10 end)
t.ok(s2.notes:find("| reached (final 150; first at step 1200) |", 1, true), "massive 150 at the end: reached", s2.notes)
t.is(s2.holds, true, "every threshold at the end: the claim holds")

-- the quantities named
for _, w in ipairs { "final measurement", "last 10 %", "top-1/median |h| at the sink token (layer where largest) >= 100",
                     "sink share of a head >= 0.8", "<= 0.2 of the median", "average kurtosis of the layer outputs h >= 30",
                     "so-fig3", "τ·mean|h|", "history.png" } do
  t.ok(s.notes:find(w, 1, true), "the summary names: " .. w, s.notes)
end

-- live: one cached model for the recipe map's LLaMA default and so-fig3
local tmp = os.tmpname()
os.remove(tmp)
local base = "cd " .. root .. " && OMP_NUM_THREADS=1 OUTLIERLAB_PROGRESS=off bin/outlierlab run experiments/%s.lua --profile=quick --out=" ..
  tmp .. "/out --cache=" .. tmp .. "/cache"
local o1, ok1 = t.sh(string.format(base, "so-fig3"))
local o2, ok2 = t.sh(string.format(base, "organism") .. " --families=llama --llama_vary=")
t.ok(ok1 and ok2, "so-fig3 and the recipe map ran (quick)", o1 .. o2)
t.ok(o2:find("model %x+: cached"), "the recipe map reuses so-fig3's trained LLaMA", o2)
local cjson = require "cjson"
local j1 = cjson.decode(t.slurp(tmp .. "/out/so-fig3/quick/run.json") or "{}")
local j2 = cjson.decode(t.slurp(tmp .. "/out/organism/quick/run.json") or "{}")
t.ok(j1.models and j2.models and j1.models[1] == j2.models[1], "one model hash in both run.json files",
     tostring(j1.models and j1.models[1]) .. " " .. tostring(j2.models and j2.models[1]))
local sm = t.slurp(tmp .. "/out/organism/quick/summary.md") or ""
t.ok(sm:find("| llama default | ", 1, true) and sm:find("final measurement", 1, true), "the map's summary judges the final measurement", sm)
-- the ViT's image knobs: an error naming the knob and family on another family, before any training
local o3, ok3 = t.sh(string.format(base, "organism") .. " --families=llama --llama_vary=image=20")
t.ok(not ok3 and o3:find("the knob image is the ViT's", 1, true) and not o3:find("model %x+: training"),
     "an image knob on the LLaMA map is an error naming it", o3)
-- several knobs in one entry (+): one model with both settings, labelled by the entry
local o4, ok4 = t.sh(string.format(base, "organism") .. " --families=llama --llama_vary=lr=0.003+seed=2")
local s4 = t.slurp(tmp .. "/out/organism/quick/summary.md") or ""
t.ok(ok4 and s4:find("| llama lr=0.003+seed=2 | ", 1, true), "a combined entry is one member of the map", o4 .. s4)
local j4 = cjson.decode(t.slurp(tmp .. "/out/organism/quick/run.json") or "{}")
local spec4
for _, h in ipairs(j4.models or {}) do
  if h ~= j1.models[1] then spec4 = cjson.decode(t.slurp(tmp .. "/cache/models/" .. h .. "/spec.json") or "{}") end
end
t.ok(spec4 and spec4.spec and spec4.spec.seed == 2 and spec4.spec.train and spec4.spec.train.lr == 0.003,
     "both knobs are in its spec (seed 2, lr 0.003)", cjson.encode(spec4 or {}))
local o5, ok5 = t.sh(string.format(base, "organism") .. " --families=llama --llama_vary=lr=0.003+bogus=1")
t.ok(not ok5 and o5:find("entry 'lr=0.003+bogus=1'", 1, true) and not o5:find("model %x+: training"),
     "an unknown knob inside a combined entry is an error naming the entry", o5)
-- the LLaMA decoder's embedding factor: × 20 in its default (and quick) recipe, named in the
-- training log; embed_scale=0 on its map a member without it (the plain embedding); on another
-- family an error naming the knob, before any training
local spec1 = cjson.decode(t.slurp(tmp .. "/cache/models/" .. tostring(j1.models and j1.models[1]) .. "/spec.json") or "{}")
t.ok(spec1.spec and spec1.spec.model.overrides.embed_scale == 20,
     "the LLaMA recipe's model carries embed_scale 20 in its spec", cjson.encode(spec1))
local o6, ok6 = t.sh(string.format(base, "organism") .. " --families=llama --llama_vary=embed_scale=0")
local j6 = cjson.decode(t.slurp(tmp .. "/out/organism/quick/run.json") or "{}")
local spec6
for _, h in ipairs(j6.models or {}) do
  if h ~= j1.models[1] then spec6 = cjson.decode(t.slurp(tmp .. "/cache/models/" .. h .. "/spec.json") or "{}") end
end
t.ok(ok6 and spec6 and spec6.spec and spec6.spec.model.overrides.embed_scale == nil,
     "embed_scale=0: one more model, without the factor in its spec", o6 .. cjson.encode(spec6 or {}))
t.ok(o1:find("token embedding × 20", 1, true) and not o6:find("token embedding ×", 1, true),
     "a training log names the factor of the model that has it and only there", o1 .. o6)
local o7, ok7 = t.sh(string.format(base, "organism") .. " --families=gpt2 --gpt2_vary=embed_scale=20")
t.ok(not ok7 and o7:find("the knob embed_scale is the LLaMA decoder's", 1, true) and not o7:find("model %x+: training"),
     "embed_scale on the GPT-2 map is an error naming it", o7)
os.execute("rm -rf '" .. tmp .. "'")
return t.done()
