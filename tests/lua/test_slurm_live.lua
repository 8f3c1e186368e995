-- The generated batch script submitted to a real (one-node, throwaway) Slurm cluster:
-- 2 ranks through `srun --mpi=pmix`; a SIGUSR1 to the batch shell (what --signal sends before
-- the time limit) makes the ranks checkpoint and exit 75, the script requeues the job, and the
-- requeued job resumes training from the checkpoint and finishes the experiment.
-- Skipped where Debian's slurm-wlm and munge are not installed.
local t = require "outlierlab.tap"
local root = OUTLIERLAB_ROOT
local sh = t.sh
local have = select(2, sh("command -v slurmctld && command -v slurmd && command -v sbatch && command -v munged && test -r /etc/munge/munge.key"))
if not have then
  print("1..0 # SKIP slurm-wlm and munge are not installed (apt-get install slurm-wlm)")
  return 0
end
local tmp = os.tmpname()
os.remove(tmp)
local conf, ok = sh(root .. "/tests/slurm/cluster.sh start " .. tmp)
conf = conf:match("(%S+slurm%.conf)")
t.ok(ok and conf, "a one-node Slurm cluster started", conf)
local env = "SLURM_CONF=" .. tostring(conf) .. " "
local function wait_for(check, seconds)
  for _ = 1, seconds * 2 do
    if check() then return true end
    os.execute("sleep 0.5")
  end
  return false
end
local script = tmp .. "/job.sbatch"
local gen = sh(string.format("cd %s && bin/outlierlab run scripts/sbatch.lua --id=so-fig3 --profile=quick --nodes=1 " ..
  "--tasks_per_node=2 --time=00:10:00 --grace=60 --submit=false --out=%s " ..
  "--extra='--steps=3000 --out=%s/res --cache=%s/cache'", root, script, tmp, tmp))
t.ok(gen:find("wrote", 1, true), "batch script written", gen)
local sub = sh(env .. "sbatch --parsable --output=" .. tmp .. "/slurm-%j.out " .. script)
local id = sub:match("^(%d+)")
t.ok(id, "submitted with sbatch", sub)
local log = tmp .. "/slurm-" .. tostring(id) .. ".out"
local function logtext() local f = io.open(log) if not f then return "" end local s = f:read("*a") f:close() return s end
t.ok(wait_for(function() return logtext():find("step %d+/3000") end, 90), "the job trains under srun --mpi=pmix", logtext())
sh(env .. "scancel --batch --signal=USR1 " .. tostring(id))
t.ok(wait_for(function() return logtext():find("requeueing job", 1, true) end, 60), "the signal checkpoints and requeues", logtext())
t.ok(logtext():find("exit code 75", 1, true), "the ranks exited with the requeue status 75")
-- a requeued job waits (BeginTime) before it may start again; once it is pending and the
-- first incarnation's step has been cleaned up, let it start now
local function state() return (sh(env .. "squeue -h -j " .. id .. " -o %T")):match("%u+") end
t.ok(wait_for(function() return state() == "PENDING" end, 60), "the job is back in the queue", tostring(state()))
wait_for(function() return not select(2, sh("pgrep -f 'slurmstepd.*" .. id .. "'")) end, 40)
os.execute("sleep 2")
sh(env .. "scontrol update jobid=" .. id .. " StartTime=now")
t.ok(wait_for(function() return logtext():find("done in", 1, true) end, 150), "the requeued job finished the experiment", logtext())
t.ok(logtext():find("resuming from its checkpoint", 1, true) and logtext():find("resumed from .- at step %d+"), "training resumed from the checkpoint")
local meta = sh("ncdump -h " .. tmp .. "/res/so-fig3/quick/so-fig3.nc")
t.ok(meta:find(":mpi_ranks = 2", 1, true), "the results record 2 ranks", meta)
sh(env .. "scancel " .. tostring(id))
sh(root .. "/tests/slurm/cluster.sh stop " .. tmp)
sh("rm -rf " .. tmp)
return t.done()
