-- test_model_cache_key — the trained-model cache retrains only when the code the weights are
-- computed through changes, and a tracked curve carries the key of the code that measured it
-- (outlierlab.runner.cache, outlierlab.recipes.track, docs/reference/experiments.md "Caching").
-- In a copy of the source tree (OUTLIERLAB_ROOT points bin/outlierlab at it) one experiment
-- trains a quick LLaMA-style model through the shared recipe; then
--   * editing a module the training does not run through (measure/inspect.lua, figure/init.lua,
--     runner/report.lua, engine/io_netcdf.c) reuses the cached model;
--   * editing what the tracker measures with (measure/phenomena.lua) reuses the model too, but
--     its curve reads as stale: recipes/track.fresh says so with the command that refreshes
--     it, the model's history is marked (curve_stale), and --refresh_curves retrains it under
--     the same hash, after which the curve is fresh;
--   * editing a recipe module (recipes/init.lua) trains it anew, under a new hash;
-- and an attention variant registered from a file outside the package (examples/
-- attention_example.lua's way), whose file requires a helper module of its own folder: editing
-- the helper, then the variant's file, trains the model anew each time; the same files, the
-- same hash from a second copy of the tree elsewhere.
local t = require "tap"
local ol = require "outlierlab"
local sh = t.sh

local tmp = os.tmpname()
os.remove(tmp)
local tree = tmp .. "/tree"
os.execute(string.format("mkdir -p %s && cp -r %s/engine %s/lua %s/plots %s/", tree, ol.root, ol.root, ol.root, tree))

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end
-- an experiment file that trains one quick LLaMA-style model: prelude, then the train stage's body
-- (it has run and recipes, and returns the model's hash)
local function experiment(path, id, prelude, body)
  write(path, prelude .. [[
local recipes = require "outlierlab.recipes"
return {
  id = "]] .. id .. [[", title = "the model cache's key",
  source = { paper = "none", figure = "", claim = "a model is retrained only when its code changes" },
  profiles = { default = recipes.LLAMA_LM_PROFILES.quick },
  stages = { { "train", function(run)
]] .. body .. [[
  end } },
  summary = function(run) return { reproduced = run.out.train } end,
}
]])
end
experiment(tmp .. "/exp.lua", "cache-key", 'local tracked = require "outlierlab.recipes.track"\n', [[
    local h = recipes.fit(run, recipes.llama_lm_spec(run.cfg))
    local fresh, why = tracked.fresh(h.info, h.hash)
    run:log("curve: %s", fresh and "fresh" or why)
    return h.hash
]])

local function run(file, extra, root)
  local out, ok = sh(string.format("cd %s && OUTLIERLAB_ROOT=%s OMP_NUM_THREADS=1 %s/bin/outlierlab run %s --out=%s/results --cache=%s/cache %s",
                                   tmp, root or tree, ol.root, file, tmp, tmp, extra or ""))
  return out, ok, out:match("model (%x+): training"), out:match("model (%x+): cached")
end
local function edit(rel, base)
  local g = assert(io.open((base or tree) .. "/" .. rel, "a"))
  g:write(rel:match("%.c$") and "\n/* edited */\n" or "\n-- edited\n")
  g:close()
end

local o1, ok1, trained1 = run("exp.lua")
t.ok(ok1 and trained1 and o1:find("curve: fresh", 1, true), "first run trains the model; its curve is fresh", o1)
local done = t.slurp(tmp .. "/cache/models/" .. tostring(trained1) .. "/done.lua") or ""
t.ok(done:find("curve_code", 1, true), "done.lua records the key of the code that measured the curve")

for _, rel in ipairs({ "lua/outlierlab/measure/inspect.lua", "lua/outlierlab/figure/init.lua",
                       "lua/outlierlab/runner/report.lua", "engine/io_netcdf.c" }) do
  edit(rel)
  local o, ok, trained, cached = run("exp.lua")
  t.ok(ok and not trained and cached == trained1 and o:find("curve: fresh", 1, true),
       "editing " .. rel .. " keeps the cached model and its fresh curve", o)
end

-- the tracker's measuring code changes: the model stays, its curve is stale
edit("lua/outlierlab/measure/phenomena.lua")
local o2, ok2, trained2, cached2 = run("exp.lua")
t.ok(ok2 and not trained2 and cached2 == trained1, "editing measure/phenomena.lua keeps the cached model", o2)
t.ok(o2:find("tracked curve was measured by other code", 1, true) and o2:find("--refresh_curves", 1, true),
     "and its curve reads as stale, naming the command that refreshes it", o2)
local hist = tmp .. "/results/cache-key/default/history/" .. tostring(trained1) .. ".nc"
local dump = sh("ncdump -h " .. hist)
t.ok(dump:find("curve_stale", 1, true), "the model's training history is marked stale", dump)
local o3, ok3, trained3 = run("exp.lua", "--refresh_curves")
t.ok(ok3 and trained3 == trained1 and o3:find("curve is stale; retraining", 1, true) and o3:find("curve: fresh", 1, true),
     "--refresh_curves retrains the stale model under the same hash; its curve is fresh", o3)
dump = sh("ncdump -h " .. hist)
t.ok(not dump:find("curve_stale", 1, true), "and its history is no longer marked", dump)
local o4, ok4, trained4, cached4 = run("exp.lua", "--refresh_curves")
t.ok(ok4 and not trained4 and cached4 == trained1, "a fresh curve is not retrained by --refresh_curves", o4)

edit("lua/outlierlab/recipes/init.lua")
local o5, ok5, trained5 = run("exp.lua")
t.ok(ok5 and trained5 and trained5 ~= trained1, "editing a recipe (recipes/init.lua) trains the model anew under a new hash", o5)

-- a variant registered from a file outside the package, which requires a helper of its own folder
os.execute("mkdir -p " .. tmp .. "/user")
write(tmp .. "/user/temp_helper.lua", "return { tau = 1 }\n")
write(tmp .. "/user/temp_variant.lua", "local helper = require \"temp_helper\"\n" ..
      (t.slurp(ol.root .. "/examples/attention_example.lua"):gsub("\"softmax_temp\"", "\"user_temp\"")))
experiment(tmp .. "/var.lua", "cache-key-variant", "package.path = \"" .. tmp .. "/user/?.lua;\" .. package.path\n" ..
           "dofile(\"" .. tmp .. "/user/temp_variant.lua\")\n", [[
    local spec = recipes.llama_lm_spec(run.cfg)
    spec.model.overrides.attention = { kind = "user_temp", tau_init = 1 }
    return recipes.fit(run, spec).hash
]])
local v1, vok1, vt1 = run("var.lua")
t.ok(vok1 and vt1, "a model with the outside variant trains", v1)
local v2, vok2, vt2, vc2 = run("var.lua")
t.ok(vok2 and not vt2 and vc2 == vt1, "unchanged, it is reused (the key is stable run to run)", v2)
edit("temp_helper.lua", tmp .. "/user")
local v3, vok3, vt3 = run("var.lua")
t.ok(vok3 and vt3 and vt3 ~= vt1, "editing the module the variant's file requires trains it anew", v3)
edit("temp_variant.lua", tmp .. "/user")
local v4, vok4, vt4 = run("var.lua")
t.ok(vok4 and vt4 and vt4 ~= vt3, "editing the variant's file trains it anew", v4)
-- the same tree in another directory: the same key (names, not paths, enter the hash)
local tree2 = tmp .. "/elsewhere/tree"
os.execute(string.format("mkdir -p %s/elsewhere && cp -r %s %s", tmp, tree, tree2))
local v5, vok5, vt5, vc5 = run("var.lua", nil, tree2)
t.ok(vok5 and not vt5 and vc5 == vt4, "a copy of the tree elsewhere finds the same model", v5)

os.execute("rm -rf '" .. tmp .. "'")
return t.done()
