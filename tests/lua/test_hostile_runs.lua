-- test_hostile_runs — bad settings, dead lock owners, killed writers and broken paths, as a
-- hostile user meets them on the command line (docs/reference/reliability.md):
--   * a zero, negative or non-finite size or rate is refused up front with one line naming
--     it (lm T >= 1, mlm T >= 3, batch >= 1, steps >= 1, lr > 0, warmup <= steps, corpus size);
--   * a run that cannot fit in memory is refused with the estimate and the machine's memory;
--     the estimate is checked against the engine's measured step-arena peak;
--   * the model-cache lock: under a plain file it is an error within seconds; a lock directory
--     of an older version without a pid, or with a dead pid, is taken over; a live holder is
--     waited for, and its death (kill -9) releases the lock at once;
--   * temporaries of killed writers are removed by the next run, those of live ones kept;
--   * train.run refuses bad recipes, an empty batch and a non-finite validation loss, naming
--     the step; the engine refuses empty reductions and losses instead of dividing by zero;
--   * a results directory that cannot be created names the path and the reason; under MPI a
--     non-string error prints its value.
-- Each run trains a 2-layer GPT-2 of d 64 for 3 steps (well under a second).
local t = require "tap"
local ol = require "outlierlab"
local ffi = require "ffi"
local sh, slurp = t.sh, t.slurp
local root = OUTLIERLAB_ROOT

local tmp = os.tmpname()
os.remove(tmp)
os.execute("mkdir -p " .. tmp)
local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

write(tmp .. "/exp.lua", [[
local recipes = require "outlierlab.recipes"
local function spec(cfg, kind)
  return { model = { preset = kind == "mlm" and "bert-quick" or "gpt2-quick", overrides = { dropout = 0 } },
           data = { seed = 1, n_tokens = cfg.n_tokens, vocab_size = 256 },
           batch = { B = cfg.batch, T = cfg.seq_len, kind = kind },
           train = { steps = cfg.steps, lr = cfg.lr, warmup = cfg.warmup, schedule = "constant", clip = 1.0, eval_batches = 1 },
           seed = 1 }
end
local base = { batch = 2, seq_len = 16, steps = 3, lr = 1e-3, warmup = 1, n_tokens = 4000, kind = "lm" }
local mlm = {}
for k, v in pairs(base) do mlm[k] = v end
mlm.kind = "mlm"
return {
  id = "hostile", title = "hostile settings",
  source = { paper = "none", figure = "", claim = "bad settings are refused up front" },
  profiles = { default = base, mlm = mlm },
  stages = { { "train", function(run) return { hash = recipes.fit(run, spec(run.cfg, run.cfg.kind)).hash } end } },
  summary = function(run) return { reproduced = "model " .. run.out.train.hash, holds = true } end,
}
]])

-- (timeout: before the fix a bad lock waited for ever)
local env = "timeout 60 env -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_RANK -u PMIX_RANK "
local function run(args, prefix)
  local t0 = os.time()
  local out, ok, code = sh(string.format("%s %s %s/bin/outlierlab run %s/exp.lua --out=%s/results --cache=%s/cache %s </dev/null",
                                         env, prefix or "", root, tmp, tmp, tmp, args or ""))
  return out, ok, code, os.time() - t0
end
local function one_line_error(out)
  local msg = out:match("outlierlab: [^\n]*")
  return msg ~= nil and not out:find("stack traceback", 1, true), msg
end

-- ---------------------------------------------------------------- settings refused up front
local refused = {
  { "--seq_len=0", "--seq_len = 0: must be an integer >= 1" },
  { "--profile=mlm --seq_len=2", "sequence length T = 2: must be an integer >= 3" },
  { "--batch=0", "--batch = 0: must be an integer >= 1" },
  { "--steps=0", "--steps = 0: must be an integer >= 1" },
  { "--lr=-1", "--lr = -1: the learning rate must be > 0" },
  { "--lr=nan", "--lr=nan: expected a finite number" },
  { "--warmup=5", "--warmup = 5 is more than --steps = 3" },
  { "--n_tokens=50", "corpus size n_tokens = 50 is too small for T = 16" },
  { "--batch=100000000", "this run needs about" },
}
for _, c in ipairs(refused) do
  local out, ok = run(c[1])
  local single, msg = one_line_error(out)
  t.ok(not ok and single and out:find(c[2], 1, true) and not out:find("| loss ", 1, true),
       c[1] .. " is refused before any training step, in one line: " .. tostring(msg), out)
end
local out = run("--batch=100000000")
t.ok(out:find("GiB", 1, true) and out:find("this machine's", 1, true) and out:find("MemAvailable", 1, true),
     "the memory refusal gives the estimate and the machine's memory", out)
out = run("", "OUTLIERLAB_MEMORY=64M")
t.ok(out:find("needs about", 1, true) and out:find("$OUTLIERLAB_MEMORY leaves 64 MiB", 1, true),
     "a machine with less memory than the estimate refuses even a small run", out)

-- the estimate against the engine's measured step-arena peak (one training micro-batch)
do
  local models = require "outlierlab.models"
  local batcher = require "outlierlab.data.batcher"
  local bounds = require "outlierlab.train.bounds"
  local corpus = batcher.corpus{ seed = 1, n_tokens = 40000, vocab_size = 256 }
  local worst_lo, worst_hi = math.huge, 0
  for _, preset in ipairs { "gpt2-quick", "opt-quick", "llama-quick", "bert-quick" } do
    for _, bt in ipairs { { 4, 64 }, { 2, 128 } } do
      local B, T = bt[1], bt[2]
      local cfg = models.preset(preset, { vocab_size = 256, block_size = T })
      local kind = cfg.family == "bert" and "mlm" or "lm"
      local ctx = ol.Context { seed = 1 }
      local m = models.build(ctx, cfg)
      ctx:reset()
      ol.C.ol_step_reset_peak(ctx.raw)
      m:loss(batcher.batcher(corpus, { B = B, T = T, kind = kind, seed = 1 }):next(ctx), { train = true, step = 1 }):backward()
      local est = bounds.estimate_memory { model = { preset = preset, overrides = {} }, data = { vocab_size = 256 },
                                           batch = { B = B, T = T, kind = kind } }
      local r = est.activations / ctx:step_peak()
      worst_lo, worst_hi = math.min(worst_lo, r), math.max(worst_hi, r)
      ctx:reset()
    end
  end
  t.ok(worst_lo >= 1.0 and worst_hi <= 1.4, string.format(
       "memory estimate of a training step within [1.0, 1.4] x the measured peak (%.2f .. %.2f)", worst_lo, worst_hi))
end

-- ---------------------------------------------------------------- the model-cache lock
write(tmp .. "/plain-file", "x")
local o, ok, _, secs = run("", "")
local h = o:match("model (%x+): training")
t.ok(ok and h, "a good run trains", o)
local cache_file_run, okf, _, sf = sh(string.format("%s%s/bin/outlierlab run %s/exp.lua --out=%s/results --cache=%s/plain-file/cache",
                                                    env, root, tmp, tmp, tmp))
t.ok(not okf and sf == nil and cache_file_run:find("cannot create directory " .. tmp .. "/plain-file", 1, true) and
     one_line_error(cache_file_run), "--cache under a plain file: one-line error naming the path", cache_file_run)

local mdir = tmp .. "/cache/models/" .. tostring(h)
local function reset_model() os.execute("cd '" .. mdir .. "' && rm -rf done.lua model.safetensors .lock") end

reset_model()
os.execute("mkdir '" .. mdir .. "/.lock'")   -- an older version killed between mkdir and writing its pid
-- (a grace of 3 s: the run must still find the directory young when it reaches the lock, also
-- on a loaded machine and under prove -j2, where its start can take more than a second)
o, ok, _, secs = run("", "OUTLIERLAB_LOCK_GRACE=3")
t.ok(ok and o:find("locked by a lock directory without a pid", 1, true) and o:find("model " .. h .. ": training", 1, true)
     and secs <= 30, "a lock directory without a pid is taken over after the grace period (" .. secs .. " s)", o)

reset_model()
-- a pid no process can have (Linux's pids stop at 2^22): an exited shell's pid can be reused
-- by the time it is read under a loaded test suite (pid_max is often 32,768)
local dead = 4194304 + 77
os.execute("mkdir '" .. mdir .. "/.lock' && echo " .. dead .. " > '" .. mdir .. "/.lock/pid'")
o, ok, _, secs = run("")
t.ok(ok and o:find("model " .. h .. ": training", 1, true) and not o:find("locked by", 1, true) and secs <= 30,
     "a lock directory whose pid is dead is taken over at once", o)

-- a live holder (flock(1) on the lock file): waited for while it lives, free when it is killed
reset_model()
os.execute("flock -o '" .. mdir .. "/.lock' sleep 3 >/dev/null 2>&1 &")
os.execute("sleep 0.3")
o, ok, _, secs = run("")
t.ok(ok and o:find("locked by", 1, true) and o:find("model " .. h .. ": training", 1, true) and secs >= 2,
     "a live holder is waited for, then the run trains (" .. secs .. " s)", o)
reset_model()
-- (flock -o: the lock is flock's own, not its child's)
-- The holder's command sleeps 30 s, so a lock kept until it ends cannot pass for one released
-- by the kill, however slow a loaded machine makes the waiter's own run.
os.execute("flock -o '" .. mdir .. "/.lock' sleep 30 >/dev/null 2>&1 & echo $! > " .. tmp .. "/holder.pid")
os.execute("sleep 0.3")
local holder = tonumber(slurp(tmp .. "/holder.pid"))
local sleeper = sh("pgrep -P " .. holder):match("%d+")
local t_wait = os.time()
local waiter = io.popen(string.format("%s%s/bin/outlierlab run %s/exp.lua --out=%s/results --cache=%s/cache 2>&1",
                                      env, root, tmp, tmp, tmp))
os.execute("sleep 1.5; kill -9 " .. holder)
local wout = waiter:read("*a")
waiter:close()
t_wait = os.time() - t_wait
if sleeper then os.execute("kill " .. sleeper .. " 2>/dev/null") end
t.ok(wout:find("locked by", 1, true) and wout:find("model " .. h .. ": training", 1, true) and t_wait <= 20,
     "kill -9 of the holder releases the lock at once (" .. t_wait .. " s, its command runs 30 s)", wout)

-- ---------------------------------------------------------------- temporaries of killed writers
reset_model()
write(mdir .. "/model.safetensors.tmp." .. dead, string.rep("x", 1000))
local live = io.popen("sleep 30 & echo $!"):read("*l")
local rdir = tmp .. "/results/hostile/default"
write(rdir .. "/run.json.tmp." .. dead .. ".0", "half")
write(rdir .. "/run.json.tmp." .. live .. ".0", "being written")
o, ok = run("")
t.ok(ok and not io.open(mdir .. "/model.safetensors.tmp." .. dead), "the model directory's stale temporary is removed", o)
t.ok(not io.open(rdir .. "/run.json.tmp." .. dead .. ".0") and io.open(rdir .. "/run.json.tmp." .. live .. ".0"),
     "in the results directory a dead writer's temporary is removed, a live one's kept")
os.execute("kill " .. live)
do
  local checkpoint = require "outlierlab.train.checkpoint"
  local ctx = ol.Context { params = 64, step_bytes = 2 ^ 20 }
  ctx:param("w", { 2 }):fill_(1)
  write(tmp .. "/ck.safetensors.tmp." .. dead, "half a checkpoint")
  checkpoint.save(tmp .. "/ck.safetensors", ctx, { step = 1 })
  t.ok(not io.open(tmp .. "/ck.safetensors.tmp." .. dead), "checkpoint.save removes a killed writer's temporary next to it")
end

do   -- the one directory listing of the package (util/fs.list_dir): hidden names, a quote, sorted
  local fs = require "outlierlab.util.fs"
  local d = tmp .. "/list it's"
  os.execute("mkdir -p \"" .. d .. "\"")
  write(d .. "/b.nc", "x"); write(d .. "/.a", "x"); write(d .. "/a b", "x")
  t.is(table.concat(fs.list_dir(d), "|"), ".a|a b|b.nc", "fs.list_dir: every name, hidden ones too, sorted, in a path with a quote")
  t.is(#fs.list_dir(d .. "/b.nc"), 0, "fs.list_dir of a file: no names")
  t.is(#fs.list_dir(tmp .. "/absent"), 0, "fs.list_dir of a missing directory: no names")
end

-- ---------------------------------------------------------------- results directory, MPI
o, ok = sh(string.format("%s%s/bin/outlierlab run %s/exp.lua --out=%s/plain-file/results --cache=%s/cache",
                          env, root, tmp, tmp, tmp))
t.ok(not ok and one_line_error(o) and o:find("cannot create directory " .. tmp .. "/plain-file: a file of that name exists", 1, true),
     "a results directory that cannot be created names the path and the reason", o)
write(tmp .. "/tbl.lua", 'local dist = require "outlierlab.util.dist"\nif dist.rank() == 1 then error({ code = 7 }) end\n' ..
      'for i = 1, 50 do dist.barrier() end\n')
o, ok = sh("OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 mpirun --oversubscribe -np 2 " ..
           root .. "/bin/outlierlab run " .. tmp .. "/tbl.lua")
t.ok(not ok and o:find("rank 1 of 2: ", 1, true) and o:find('["code"]=7', 1, true) and not o:find("not a string", 1, true),
     "under MPI a table error prints its value", o)

-- ---------------------------------------------------------------- train.run's own checks
do
  local train = require "outlierlab.train.loop"
  for _, c in ipairs {
    { { steps = 5, lr = 0 }, "cfg.lr (the learning rate) must be > 0" },
    { { steps = 5, lr = -1 }, "must be > 0, got -1" },
    { { steps = 5, warmup = 6 }, "cfg.warmup = 6 is more than cfg.steps = 5" },
    { { steps = 5, betas = { 1, 0.9 } }, "cfg.betas[1] must be in [0, 1)" },
    { { steps = 5, lr = 0 / 0 }, "cfg.lr must be a finite number" },
    { { steps = 5, min_lr = 1 }, "cfg.min_lr must be in [0, lr" },
    { { steps = 5, schedule = "cos" }, "cfg.schedule must be cosine, linear, constant or wsd" },
    { { steps = 5, schedule = "wsd" }, "cfg.schedule wsd needs cfg.cooldown, an integer in [1, steps - warmup = 5], got 0" },
    { { steps = 5, warmup = 2, schedule = "wsd", cooldown = 4 }, "an integer in [1, steps - warmup = 3], got 4" },
  } do
    t.throws(function() train.config(c[1]) end, c[2], "train.config refuses: " .. c[2])
  end
  -- a model whose batches are empty, or whose validation loss is not finite
  local ctx = ol.Context { params = 64, step_bytes = 2 ^ 22 }
  local w = ctx:param("w", { 1 }):fill_(0.5)
  local model = { cfg = { family = "gpt2" } }
  function model:loss(batch)
    local l = (w * 1):sum_all()
    if batch.bad then l = l * (0 / 0) end
    return l, { ntokens = batch.n }
  end
  local function loader(n, bad)
    return { next = function(_, c) return { ids = c:tensor({ 1, n }, { dtype = "i32" }), n = n, bad = bad } end }
  end
  t.throws(function() train.run { ctx = ctx, model = model, loader = loader(0), cfg = { steps = 3, progress = "off" } } end,
           "train: step 1: micro-batch 1 of 1 is empty (no tokens)", "an empty training batch is an error naming the step")
  t.throws(function() train.run { ctx = ctx, model = model, loader = loader(2), val_loader = loader(2, true),
                                  cfg = { steps = 2, eval_every = 1, progress = "off" } } end,
           "train: step 1: the validation loss is nan", "a non-finite validation loss is an error naming the step")
  local empty_targets = { next = function(_, c) return { ids = c:tensor({ 1, 2 }, { dtype = "i32" }), n = 0 } end }
  t.throws(function() train.run { ctx = ctx, model = model, loader = loader(2), val_loader = empty_targets,
                                  cfg = { steps = 1, progress = "off" } } end,
           "the 8 validation batches hold no prediction targets", "validation batches without targets are an error")
end

-- ---------------------------------------------------------------- engine: empty inputs
do
  local ctx = ol.Context { params = 64, step_bytes = 2 ^ 22 }
  local function T(shape) return ctx:tensor(shape, { name = "x" }):fill_(0.5) end
  local z = T({ 2, 0 }):matmul(T({ 0, 3 }))
  t.ok(z.numel == 6 and z:get(1, 2) == 0, "matmul with an empty inner dim is zeros (it divided by zero before)")
  t.ok(T({ 2, 0 }):sum():get(1) == 0, "sum over an empty last dim is 0")
  t.throws(function() return T({ 2, 0 }):mean() end, "mean over an empty last dim", "mean over an empty last dim is an error")
  t.throws(function() return T({ 0, 4 }):cross_entropy(ctx:tensor({ 0 }, { dtype = "i32" }), -100) end,
           "no rows: an empty batch", "cross entropy of an empty batch is an error, not a loss of 0")
  t.throws(function() return T({ 2, 0 }):layernorm() end, "nothing to normalise", "layernorm of an empty last dim is an error")
end

os.execute("rm -rf '" .. tmp .. "'")
return t.done()
