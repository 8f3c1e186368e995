-- test_runner_resume — a model the runner trains (recipes.fit through run:model) survives a
-- kill -9: it writes its checkpoint every tenth of its steps (recipes.ckpt_every), the next run
-- of the same command says "resuming from its checkpoint", goes on from that step, and ends
-- with the weights, the optimizer's losses and the phenomena tracked during training of a run
-- that was never stopped, bit for bit. (test_resume checks the same of train.run alone.)
-- The model: a 2-layer GPT-2 of d 64 (gpt2-quick), 1,000 steps of 2×16 tokens (a few seconds).
-- Also: the runner's --flush_subnormals puts the mode into the spec (a model of its own).
local t = require "tap"
local recipes = require "outlierlab.recipes"
local cache = require "outlierlab.runner.cache"
local sh, slurp = t.sh, t.slurp
local root = OUTLIERLAB_ROOT

-- the cadence itself
t.is(recipes.ckpt_every(4500), 450, "a 4,500-step model writes its checkpoint every 450 steps")
t.is(recipes.ckpt_every(19), 0, "a run of fewer than 20 steps writes its checkpoint only at the end")
t.is(recipes.ckpt_every(20), 2, "20 steps: every 2")

local tmp = os.tmpname()
os.remove(tmp)
os.execute("mkdir -p " .. tmp)
local f = assert(io.open(tmp .. "/exp.lua", "w"))
f:write([[
local recipes = require "outlierlab.recipes"
local function spec(cfg)
  return { model = { preset = "gpt2-quick", overrides = { dropout = 0 } },
           data = { seed = 1, n_tokens = 4000, vocab_size = 256 },
           batch = { B = 2, T = 16, kind = "lm" },
           train = { steps = cfg.steps, lr = 1e-3, warmup = 10, schedule = "cosine", clip = 1.0, eval_batches = 1 },
           seed = 1 }
end
return {
  id = "resume", title = "a runner-trained model killed and resumed",
  source = { paper = "none", figure = "", claim = "a killed training resumes from its checkpoint" },
  profiles = { default = { steps = 1000 } },
  stages = { { "train", function(run) return { hash = recipes.fit(run, spec(run.cfg)).hash } end } },
  summary = function(run) return { reproduced = "model " .. run.out.train.hash, holds = true } end,
}
]])
f:close()

local env = "env -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_RANK -u PMIX_RANK OMP_NUM_THREADS=1 "
local function command(name)
  return string.format("%s%s/bin/outlierlab run %s/exp.lua --out=%s/results-%s --cache=%s/cache-%s </dev/null",
                       env, root, tmp, tmp, name, tmp, name)
end
local function model_dir(name)
  local p = io.popen("ls -d " .. tmp .. "/cache-" .. name .. "/models/*/ 2>/dev/null")
  local d = p:read("*l")
  p:close()
  return d
end

-- the run that is never stopped
local out_a, ok_a = sh("timeout 300 " .. command("a"))
t.ok(ok_a, "the uninterrupted run ends", out_a)
local dir_a = model_dir("a")

-- the same command, killed with SIGKILL as soon as its first periodic checkpoint is on disk
local p = io.popen(command("b") .. " >" .. tmp .. "/b1.log 2>&1 & echo $!")
local pid = p:read("*l")
p:close()
local dir_b, killed
for _ = 1, 1200 do
  dir_b = model_dir("b")
  if dir_b and slurp(dir_b .. "model.safetensors") then
    os.execute("kill -9 " .. pid .. " 2>/dev/null")
    killed = true
    break
  end
  os.execute("sleep 0.05")
end
os.execute("sleep 0.5")
t.ok(killed, "the second run wrote a checkpoint before its end and was killed (kill -9)", slurp(tmp .. "/b1.log"))
t.ok(dir_b and not slurp(dir_b .. "done.lua"), "the killed run left no finished model (done.lua)", slurp(tmp .. "/b1.log"))

-- the killed run's clock (train_clock.lua) says when it started; moved 100 s earlier, as if it had
-- trained 100 s longer before its checkpoint: the resumed model's train_seconds must count them
local clock = dir_b and cache.load_data(dir_b .. "train_clock.lua")
t.ok(clock and tonumber(clock.start) and clock.before == 0, "the interrupted run left its clock (start, nothing before)",
     slurp((dir_b or "") .. "train_clock.lua"))
if clock then
  clock.start = clock.start - 100
  cache.save_data(dir_b .. "train_clock.lua", clock)
end
-- run again: it resumes and finishes
local t_b = os.time()
local out_b, ok_b = sh("timeout 300 " .. command("b"))
local took_b = os.time() - t_b
t.ok(ok_b, "the same command run again ends", out_b)
t.ok(out_b:find("resuming from its checkpoint", 1, true), "the runner says it resumes from the checkpoint", out_b)
local at = tonumber(out_b:match("resumed from [^\n]- at step (%d+)"))
t.ok(at and at > 0 and at < 1000 and at % 100 == 0, string.format("the training goes on from a periodic checkpoint's step (a multiple of 100: %s)", tostring(at)),
     tostring(at))

t.ok(dir_a and dir_b and dir_a:match("[^/]+/$") == dir_b:match("[^/]+/$"), "both runs cache the same model (one key)",
     tostring(dir_a) .. " " .. tostring(dir_b))
if dir_a and dir_b then
  local wa, wb = slurp(dir_a .. "model.safetensors"), slurp(dir_b .. "model.safetensors")
  t.ok(wa and wa == wb, "the resumed model's weights are bit-identical to the uninterrupted run's")
  t.ok(slurp(dir_a .. "track.lua") == slurp(dir_b .. "track.lua"),
       "the phenomena tracked during training are the same, point for point")
  local da, db = cache.load_data(dir_a .. "done.lua"), cache.load_data(dir_b .. "done.lua")
  t.ok(da and db and db.resumed == true and da.resumed == false, "done.lua says which run was resumed")
  t.ok(db and db.train_seconds >= 100 and db.train_seconds <= 100 + took_b + 3,
       "the resumed model's train_seconds holds the time to its checkpoint (100 s) and the resumed run's",
       string.format("%s s (the resumed run took %d s)", tostring(db and db.train_seconds), took_b))
  t.ok(da and da.train_seconds < 100, "the uninterrupted model's train_seconds is its run's", tostring(da and da.train_seconds))
  local same = da and db and #da.losses == 1000 and #db.losses == 1000
  for i = 1, same and 1000 or 0 do if da.losses[i] ~= db.losses[i] then same = false break end end
  t.ok(same, "the training losses of all 1,000 steps are the same (the killed run's steps kept in the checkpoint)")
end

-- --flush_subnormals (docs/reference/training.md, "Subnormals"): the same experiment trains a model of its
-- own, whose spec says so, beside the IEEE one
local out_f, ok_f = sh("timeout 300 " .. command("a") .. " --flush_subnormals")
t.ok(ok_f, "the run with --flush_subnormals ends", out_f)
local p2 = io.popen("grep -l '\"flush_subnormals\":true' " .. tmp .. "/cache-a/models/*/spec.json 2>/dev/null; ls -d " .. tmp .. "/cache-a/models/*/ | wc -l")
local listing = p2:read("*a")
p2:close()
t.ok(listing:find("spec.json", 1, true) and listing:match("(%d+)%s*$") == "2",
     "--flush_subnormals trains a second model whose spec has train.flush_subnormals = true", listing)
os.execute("rm -rf " .. tmp)
return t.done()
