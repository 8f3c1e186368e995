-- The generated batch scripts submitted to a real (one-node, throwaway) Slurm cluster
-- (tests/slurm/cluster.sh). Skipped where Debian's slurm-wlm and munge are not installed.
--   1. 2 ranks through `srun --mpi=pmix`; a SIGUSR1 to the batch shell (what --signal sends
--      before the time limit) makes the ranks checkpoint and exit 75, the script requeues the
--      job, and the requeued job resumes training from the checkpoint and finishes.
--   2. `make sbatch-so-fig12 ARRAY=6 MEM=… SETUP=… EXTRA=…`: a job array trains the sweep's six
--      models (one per task, the site set-up sourced first), and the analysis job, held by
--      --dependency=afterok until the array succeeded, plots from the six cached models.
-- Every wait and every Slurm command has a time bound, so a stuck cluster fails the test in
-- minutes, naming the step, instead of hanging it.
local t = require "tap"
local root = OUTLIERLAB_ROOT
local sh, slurp = t.sh, t.slurp
local have = select(2, sh("command -v slurmctld && command -v slurmd && command -v sbatch && command -v munged && test -r /etc/munge/munge.key"))
if not have then
  print("1..0 # SKIP slurm-wlm and munge are not installed (apt-get install slurm-wlm)")
  return 0
end
-- one throwaway cluster per machine at a time (two on one host share its name and its CPUs):
-- wait for another run of this test, at most 10 minutes, then skip
local fs = require "outlierlab.util.fs"
local lock
for _ = 1, 600 do
  lock = fs.try_lock("/tmp/outlierlab-slurm-live.lock")
  if lock then break end
  os.execute("sleep 1")
end
if not lock then
  print("1..0 # SKIP another Slurm test cluster ran on this machine for more than 10 minutes")
  return 0
end
local tmp = os.tmpname()
os.remove(tmp)
local conf, ok = sh("timeout 90 " .. root .. "/tests/slurm/cluster.sh start " .. tmp)
conf = conf:match("(%S+slurm%.conf)")
t.ok(ok and conf, "a one-node Slurm cluster started", conf)
if not conf then
  sh(root .. "/tests/slurm/cluster.sh stop " .. tmp)
  lock:release()
  return t.done()
end
local env = "SLURM_CONF=" .. conf .. " "
-- a Slurm client command, bounded (a dead controller makes them retry for minutes)
local function slurm(cmd) return sh("cd " .. root .. " && " .. env .. "timeout 20 " .. cmd) end
local t0 = os.time()
local function wait_for(check, seconds)
  for _ = 1, seconds * 2 do
    if check() then return true end
    os.execute("sleep 0.5")
  end
  return false
end
local function elapsed(what) t.diag(string.format("%s after %d s", what, os.time() - t0)) end
local function state(id) return (slurm("squeue -h -j " .. id .. " -o %T")):match("%u+") end

-- 1. signal, checkpoint, requeue, resume
local script = tmp .. "/job.sbatch"
local gen = sh(string.format("cd %s && bin/outlierlab run scripts/sbatch.lua --id=so-fig3 --profile=quick --nodes=1 " ..
  "--tasks_per_node=2 --time=00:10:00 --grace=60 --submit=false --out=%s " ..
  "--extra='--steps=3000 --out=%s/res --cache=%s/cache'", root, script, tmp, tmp))
t.ok(gen:find("wrote", 1, true), "batch script written", gen)
local sub = slurm("sbatch --parsable --output=" .. tmp .. "/slurm-%j.out " .. script)
local id = sub:match("^(%d+)")
t.ok(id, "submitted with sbatch", sub)
id = id or "0"
local log = tmp .. "/slurm-" .. id .. ".out"
local function logtext() return slurp(log) or "" end
t.ok(wait_for(function() return logtext():find("step %d+/3000") end, 90), "the job trains under srun --mpi=pmix", logtext())
elapsed("training")
slurm("scancel --batch --signal=USR1 " .. id)
t.ok(wait_for(function() return logtext():find("requeueing job", 1, true) end, 60), "the signal checkpoints and requeues", logtext())
t.ok(logtext():find("exit code 75", 1, true), "the ranks exited with the requeue status 75")
-- a requeued job waits (BeginTime) before it may start again; once it is pending and the
-- first incarnation's step has been cleaned up, let it start now
t.ok(wait_for(function() return state(id) == "PENDING" end, 60), "the job is back in the queue", tostring(state(id)))
wait_for(function() return not select(2, sh("pgrep -f 'slurmstepd.*" .. id .. "'")) end, 40)
os.execute("sleep 2")
slurm("scontrol update jobid=" .. id .. " StartTime=now")
t.ok(wait_for(function() return logtext():find("done in", 1, true) end, 150), "the requeued job finished the experiment", logtext())
elapsed("requeued job done")
-- (a source file edited between the two incarnations would give a new model hash and train
-- anew: the cache never resumes weights of other code; CI runs on a clean clone)
t.ok(logtext():find("resuming from its checkpoint", 1, true) and logtext():find("resumed from .- at step %d+"),
     "training resumed from the checkpoint", logtext())
local meta = sh("ncdump -h " .. tmp .. "/res/so-fig3/quick/so-fig3.nc")
t.ok(meta:find(":mpi_ranks = 2", 1, true), "the results record 2 ranks", meta)
slurm("scancel " .. id)

-- 2. a job array over a sweep, then the analysis job after it
local setup = tmp .. "/site-setup.sh"
local sf = io.open(setup, "w")
sf:write('echo "site set-up: sourced on $(hostname -s)"\nexport OUTLIERLAB_SITE=1\n')
sf:close()
local logs = tmp .. "/logs"
local mk = sh(string.format("cd %s && PATH=$PATH %s timeout 120 make -s sbatch-so-fig12 PROFILE=quick ARRAY=6 MEM=500M " ..
  "SETUP=%s LOG_DIR=%s SBATCH_OUT=%s/sweep.sbatch EXTRA='--out=%s/res --cache=%s/cache'", root, env, setup, logs, tmp, tmp, tmp))
local arr, fin = mk:match("sbatch: job (%d+)\n"), mk:match("sbatch: job (%d+) %(analysis and figures%) runs after job array (%d+)")
t.ok(arr and fin, "make sbatch-so-fig12 ARRAY=6 submitted the array and the analysis job", mk)
local sweep_script = slurp(tmp .. "/sweep.sbatch") or ""
t.ok(sweep_script:find("#SBATCH --mem=500M", 1, true) and sweep_script:find("source " .. setup, 1, true),
     "the script asks for the memory and sources the site set-up", sweep_script)
if arr and fin then
  local reason = (slurm("squeue -h -j " .. fin .. " -o %r")):match("%S+")
  t.ok(reason == "Dependency" or (slurp(logs .. "/slurm-" .. fin .. ".out") or "") == "",
       "the analysis job waits for the array (reason: " .. tostring(reason) .. ")")
  local flog = logs .. "/slurm-" .. fin .. ".out"
  t.ok(wait_for(function() return (slurp(flog) or ""):find("done in", 1, true) end, 240),
       "the analysis job ran after the array and finished", slurp(flog) or "(no log)")
  elapsed("array and analysis job done")
  local done, sourced = 0, 0
  for i = 0, 5 do
    local a = slurp(logs .. "/slurm-" .. arr .. "_" .. i .. ".out") or ""
    if a:find("sweep member " .. i .. " of 6 done", 1, true) then done = done + 1 end
    if a:find("site set-up: sourced", 1, true) then sourced = sourced + 1 end
  end
  t.is(done, 6, "each of the 6 array tasks trained its sweep member")
  t.is(sourced, 6, "each array task sourced the site set-up first")
  local ftext = slurp(flog) or ""
  local cached = select(2, ftext:gsub("model %x+: cached", ""))
  t.ok(cached == 6 and not ftext:find(": training", 1, true), "the analysis job reused the 6 models (" .. cached .. " cached)", ftext)
  t.ok(slurp(tmp .. "/res/so-fig12/quick/so-fig12.png"), "the figure was drawn")
else
  for _ = 1, 6 do t.ok(false, "array part not run: submission failed") end
end
slurm("scancel " .. tostring(arr) .. " " .. tostring(fin))
sh(root .. "/tests/slurm/cluster.sh stop " .. tmp)
sh("rm -rf " .. tmp)
lock:release()
return t.done()
