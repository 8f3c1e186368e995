-- test_runner_cache — the trained-model cache never returns weights trained by other code,
-- and runs of different profiles keep their own results (lua/outlierlab/runner/):
--   * a user attention variant (attention.register in a file outside the package) is part of
--     the model's hash: editing its formula, then rerunning, trains anew under a new hash;
--     the unchanged file is reused ("cached");
--   * --retrain trains a cached model again; --reanalyze recomputes a cached stage;
--   * the content hash of the code changes with the engine's numerics and the numerics folders of
--     the package and not with a file that only writes results (figure/gnuplot.lua);
--   * cache.read_spec reads a model directory's spec.json or names the file it could not use;
--   * results/<id>/<profile>/: a quick run after a default run leaves the default results, and
--     each writes run.json (claim, verdict, profile, seconds, files) and the model's history.
-- Each run trains a 2-layer GPT-2 of d 64 for 3 steps (well under a second).
local t = require "tap"
local report = require "outlierlab.runner.report"
local runner = require "outlierlab.runner.run"
local sh, slurp = t.sh, t.slurp
local cjson = require "cjson"
local ol = require "outlierlab"
local results = require "outlierlab.figure.netcdf"

local tmp = os.tmpname()
os.remove(tmp)
os.execute("mkdir -p " .. tmp)

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- a user variant: softmax attention with the scores multiplied by SCALE (the "formula")
local function variant(scale)
  write(tmp .. "/variant.lua", string.format([[
local attention = require "outlierlab.nn.attention"
attention.register("test_scaled", {
  params = { scale = 1 },
  new = function(ctx, spec, dims)
    local self = {}
    function self:parameters() return {} end
    function self:forward(q, k, v, x, opts)
      local s = attention.scores(q, k, opts.pad_mask) * (spec.scale * %s)
      local p = s:softmax(opts.causal)
      if opts.probe then opts.probe("attn_probs", p) end
      return p:matmul(v)
    end
    return self
  end,
})
]], scale))
end

write(tmp .. "/exp.lua", string.format([[
dofile(%q)
local recipes = require "outlierlab.recipes"
local function spec(cfg)
  return { model = { preset = "gpt2-quick", overrides = { attention = { kind = "test_scaled" }, dropout = 0 } },
           data = { seed = 1, n_tokens = 4000, vocab_size = 256 },
           batch = { B = 2, T = 16, kind = "lm" },
           train = { steps = cfg.steps, lr = 1e-3, warmup = 1, schedule = "constant", clip = 1.0, eval_batches = 1 },
           seed = cfg.seed }
end
return {
  id = "cache-test", title = "cache test",
  source = { paper = "none", figure = "", claim = "the cache never reuses weights trained by other code" },
  profiles = { quick = { steps = 3, seed = 1 }, default = { steps = 4, seed = 1 } },
  stages = {
    { "train", function(run) return { hash = recipes.fit(run, spec(run.cfg)).hash } end },
    { "analyze", function(run) return { n = 1 } end, cache = true },
    { "plot", function(run)
        local nc = run:netcdf()
        nc:dim("x", 1)
        nc:var("v", { "x" }, { 1 }, { long_name = "v", units = "1" })
        nc:close()
      end },
  },
  summary = function(run) return { reproduced = "model " .. run.out.train.hash, holds = true } end,
}
]], tmp .. "/variant.lua"))

local function run(args)
  local out, ok = sh(string.format("bin/outlierlab run %s/exp.lua --out=%s/results --cache=%s/cache %s",
                                   tmp, tmp, tmp, args or ""))
  return out, ok
end
local function trained(out) return out:match("model (%x+): training") end
local function cached(out) return out:match("model (%x+): cached") end

variant("1.0")
local o1, ok1 = run("--profile=default")
local h1 = trained(o1)
t.ok(ok1 and h1, "first run trains the model", o1)
local o2 = run("--profile=default")
t.ok(cached(o2) == h1 and o2:find("stage analyze: cached", 1, true), "unchanged code and settings: model and analysis reused", o2)
do   -- what the reused work cost: the stage's seconds when it was computed, the models' training
  local rj = cjson.decode(slurp(tmp .. "/results/cache-test/default/run.json") or "{}")
  local an = rj.stages and rj.stages[2] or {}
  t.ok(an.name == "analyze" and an.cached == true and type(an.computed_seconds) == "number" and an.computed_seconds >= 0,
       "run.json: a cached stage records the seconds it took when computed", cjson.encode(rj.stages or {}))
  local done = slurp(tmp .. "/cache/models/" .. tostring(h1) .. "/done.lua") or ""
  local ts = tonumber(done:match('%["train_seconds"%]=([%d.e+-]+)'))
  t.ok(ts and rj.models_train_seconds and math.abs(rj.models_train_seconds - ts) < 1e-6,
       "run.json: models_train_seconds is the cached model's training time", tostring(rj.models_train_seconds) .. " vs " .. tostring(ts))
  local sm = slurp(tmp .. "/results/cache-test/default/summary.md") or ""
  t.ok(sm:find("analyze [%d.]+ s %(cached; computed in [%d.]+ s%)") and sm:find("- Models: 1, %d+ s of training in all"),
       "summary.md: the cached stage's computed time and the models' training", sm)
  -- where it was computed: the CPU, OpenBLAS's kernels and the threads (bits depend on the kernels)
  local want = results.machine()
  local mj = rj.machine or {}
  t.ok(type(mj.cpu) == "string" and mj.cpu ~= "" and mj.blas_core == want.blas_core and mj.threads == ol.num_threads(),
       "run.json: the machine (cpu, blas_core, threads)", cjson.encode(mj))
  t.ok(sm:find("- Machine: " .. want.cpu:gsub("%p", "%%%0") .. ", OpenBLAS " .. want.blas_core:gsub("%p", "%%%0")
       .. " kernels, %d+ threads? × 1 rank"), "summary.md names the machine", sm)
  t.ok(done:find('["blas_core"]="' .. want.blas_core .. '"', 1, true) and done:find('["ranks"]=1', 1, true),
       "done.lua: the model records the machine it was trained on", done:match("machine.-}") or done:sub(1, 200))
end

variant("0.5")   -- the variant's formula changes: its weights would differ
local o3 = run("--profile=default")
local h3 = trained(o3)
t.ok(h3 and h3 ~= h1, "editing the variant's formula retrains under a new hash (" .. tostring(h1) .. " -> " .. tostring(h3) .. ")", o3)
t.ok(o3:find("stage analyze\n", 1, true) and not o3:find("stage analyze: cached", 1, true),
     "the analysis of the retrained model is recomputed", o3)
do   -- the first model's history does not stay beside the new one's (a reader would take it for this run's)
  local hist = sh("ls " .. tmp .. "/results/cache-test/default/history")
  t.ok(hist:find(tostring(h3) .. ".nc", 1, true) and hist:find(tostring(h3) .. ".png", 1, true) and
       not hist:find(tostring(h1), 1, true), "history/ holds the retrained model's history alone", hist)
end
local spec = cjson.decode(slurp(tmp .. "/cache/models/" .. tostring(h3) .. "/spec.json") or "{}")
local code = "\n" .. (slurp(tmp .. "/cache/models/" .. tostring(h3) .. "/code.txt") or "")
t.ok(type(spec.code) == "string" and code:find("\nvariant%.lua:%x+\n") and code:find("\noutlierlab%.models%.gpt2:%x+\n"),
     "spec.json records the code hash, code.txt the files it covers: the variant's file and the package's", code)

local o4 = run("--profile=default --retrain")
t.ok(trained(o4) == h3 and not cached(o4), "--retrain trains the cached model again", o4)
local o5 = run("--profile=default --reanalyze")
t.ok(cached(o5) == h3 and o5:find("stage analyze\n", 1, true), "--reanalyze recomputes the cached stage, keeps the model", o5)

-- per-profile results: quick after default leaves the default files
local o6, ok6 = run("--profile=quick")
t.ok(ok6 and trained(o6), "quick profile runs", o6)
for _, prof in ipairs({ "default", "quick" }) do
  local dir = tmp .. "/results/cache-test/" .. prof
  local rec = cjson.decode(slurp(dir .. "/run.json") or "{}")
  local want = prof == "quick" and report.NO_VERDICT or "holds"   -- the quick profile gives no verdict
  t.ok(rec.profile == prof and rec.verdict == want and rec.claim and type(rec.seconds) == "number" and
       rec.id == "cache-test", prof .. ": run.json with claim, verdict, profile, seconds", slurp(dir .. "/run.json"))
  local files = table.concat(rec.files or {}, " ")
  t.ok(files:find("cache-test.nc", 1, true) and files:find("summary.md", 1, true) and files:find("history/%x+%.nc"),
       prof .. ": run.json lists the NetCDF file, the summary and the model's history", files)
  t.ok(slurp(dir .. "/cache-test.nc") and slurp(dir .. "/summary.md"):find("Profile: " .. prof, 1, true),
       prof .. ": its own NetCDF file and summary.md")
  local hist = sh("ncdump -h " .. dir .. "/" .. (files:match("(history/%x+%.nc)") or "none"))
  t.ok(hist:find("double loss(step)", 1, true) and hist:find("double learning_rate(step)", 1, true) and
       hist:find("double grad_norm(step)", 1, true) and hist:find("double val_loss(eval)", 1, true),
       prof .. ": the history holds loss, learning rate, gradient norm and validation loss", hist)
end
t.is(report.results_dir("R", "qt-fig1", { profile = "quick" }), "R/qt-fig1/quick", "results_dir: <id>/<profile>")
t.is(report.results_dir("R", "qt-fig1", { profile = "default", model = "/data/bert base/" }), "R/qt-fig1/bert_base-default",
     "results_dir: an imported model gets <id>/<model name>-<profile>")
t.is(report.results_dir("R", "so-fig3", { profile = "default", data = "kjv" }), "R/so-fig3/kjv-default",
     "results_dir: a run on the real text gets <id>/kjv-<profile> (the organism's results stay)")
t.is(runner.data_leaf{ data = "kjv" }, "kjv", "data_leaf: --data=kjv")
t.is(runner.data_leaf{ data = "organism", p_text = 0.5 }, "mix50", "data_leaf: --p_text=0.5 with the organism")
t.is(runner.data_leaf{ data = "organism", p_text = 0 }, nil, "data_leaf: the organism alone keeps <id>/<profile>")

-- the cached-stage code hash follows the package's folders (outlierlab.runner.cache): the engine
-- and the numerics and analysis folders, never a file that only writes results
-- (figure/gnuplot.lua, engine/io_netcdf.c). The trained model's key (the require closure of its
-- training) is tests/lua/test_model_cache_key.lua's.
local cache = require "outlierlab.runner.cache"
os.execute(string.format("mkdir -p %s/tree && cp -r %s/engine %s/lua %s/tree/", tmp, OUTLIERLAB_ROOT, OUTLIERLAB_ROOT, tmp))
local root = tmp .. "/tree"
local base = cache.code_hash(root)
local files = table.concat(cache.code_files(root), " ")
t.ok(files:find("engine/attention.c", 1, true) and files:find("engine/outlierlab.h", 1, true) and
     files:find("lua/outlierlab/nn/attention.lua", 1, true) and files:find("lua/outlierlab/models/gpt2.lua", 1, true) and
     files:find("lua/outlierlab/measure/inspect.lua", 1, true) and
     not files:find("lua/outlierlab/figure/gnuplot.lua", 1, true) and not files:find("engine/io_netcdf.c", 1, true),
     "hashed: engine C, headers, the numerics and analysis folders; not figure/gnuplot.lua, not io_netcdf.c", files)
local function changed(rel)
  local f = io.open(root .. "/" .. rel, "a")
  f:write("\n-- edited\n")
  f:close()
  local E2 = dofile(OUTLIERLAB_ROOT .. "/lua/outlierlab/runner/cache.lua")   -- fresh memo
  return E2.code_hash(root)
end
local after_plot = changed("lua/outlierlab/figure/gnuplot.lua")
t.is(after_plot, base, "editing figure/gnuplot.lua keeps the stage code hash")
local after_inspect = changed("lua/outlierlab/measure/inspect.lua")
t.ok(after_inspect ~= base, "editing an analysis module (measure/inspect.lua) changes it (the analysis is recomputed)")
local after_model = changed("lua/outlierlab/models/gpt2.lua")
t.ok(after_model ~= after_inspect, "editing a model file changes it")
local after_c = changed("engine/attention.c")
t.ok(after_c ~= after_model, "editing engine C code changes it")

-- cache.read_spec: the spec a model directory was trained from, or the reason naming the file
do
  local cache = require "outlierlab.runner.cache"
  local d = tmp .. "/specdir"
  os.execute("mkdir -p " .. d)
  local spec, why = cache.read_spec(d)
  t.ok(spec == nil and why:find(d .. "/spec.json", 1, true) and why:find("not a model directory", 1, true), "read_spec: no spec.json, named", why)
  write(d .. "/spec.json", "{ not json")
  spec, why = cache.read_spec(d)
  t.ok(spec == nil and why:find(d .. "/spec.json", 1, true), "read_spec: a file that is not JSON, named", why)
  write(d .. "/spec.json", '{"engine": "x"}')
  spec, why = cache.read_spec(d)
  t.ok(spec == nil and why == d .. "/spec.json holds no spec", "read_spec: a key without a spec, named", why)
  write(d .. "/spec.json", '{"spec": {"seed": 7}, "engine": "x"}')
  spec, why = cache.read_spec(d)
  t.ok(spec and spec.seed == 7 and why == d .. "/spec.json", "read_spec: the spec and its path")
end

os.execute("rm -rf '" .. tmp .. "'")
return t.done()
