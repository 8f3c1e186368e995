-- test_model_cache_key — the trained-model cache retrains only when the code the weights are
-- computed through changes (outlierlab.runner.cache, docs/reference/experiments.md "Caching"). In a copy
-- of the source tree (OUTLIERLAB_ROOT points bin/outlierlab at it) one experiment trains a
-- quick LLaMA-style model through the shared recipe; then
--   * editing an analysis module (measure/inspect.lua), a figure module (figure/init.lua),
--     the report writer (runner/report.lua) and the NetCDF writer (engine/io_netcdf.c) reuses
--     the cached model (no retraining);
--   * editing a recipe module (recipes/init.lua) trains it anew, under a new hash.
local t = require "outlierlab.tap"
local ol = require "outlierlab"
local sh = t.sh

local tmp = os.tmpname()
os.remove(tmp)
local tree = tmp .. "/tree"
os.execute(string.format("mkdir -p %s && cp -r %s/engine %s/lua %s/", tree, ol.root, ol.root, tree))

local f = assert(io.open(tmp .. "/exp.lua", "w"))
f:write([[
local E = require "outlierlab.experiment"
return {
  id = "cache-key", title = "cache key by folder",
  source = { paper = "none", figure = "", claim = "a model is retrained only when its code changes" },
  profiles = { default = E.LLAMA_LM_PROFILES.quick },
  stages = { { "train", function(run) return E.train_model(run, E.llama_lm_spec(run.cfg)).hash end } },
  summary = function(run) return { reproduced = run.out.train } end,
}
]])
f:close()

local function run()
  local out, ok = sh(string.format("cd %s && OUTLIERLAB_ROOT=%s OMP_NUM_THREADS=1 %s/bin/outlierlab run %s/exp.lua --out=%s/results --cache=%s/cache",
                                   tmp, tree, ol.root, tmp, tmp, tmp))
  return out, ok, out:match("model (%x+): training"), out:match("model (%x+): cached")
end
local function edit(rel)
  local g = assert(io.open(tree .. "/" .. rel, "a"))
  g:write(rel:match("%.c$") and "\n/* edited */\n" or "\n-- edited\n")
  g:close()
end

local o1, ok1, trained1 = run()
t.ok(ok1 and trained1, "first run trains the model", o1)

for _, rel in ipairs({ "lua/outlierlab/measure/inspect.lua", "lua/outlierlab/figure/init.lua",
                       "lua/outlierlab/runner/report.lua", "engine/io_netcdf.c" }) do
  edit(rel)
  local o, ok, trained, cached = run()
  t.ok(ok and not trained and cached == trained1, "editing " .. rel .. " keeps the cached model (no retraining)", o)
end

edit("lua/outlierlab/recipes/init.lua")
local o3, ok3, trained3 = run()
t.ok(ok3 and trained3 and trained3 ~= trained1, "editing a recipe (recipes/init.lua) trains the model anew under a new hash", o3)

os.execute("rm -rf '" .. tmp .. "'")
return t.done()
