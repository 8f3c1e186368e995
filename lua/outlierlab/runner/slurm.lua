-- slurm — batch scripts for running an experiment on a cluster (make sbatch-<id>).
--
-- The script asks Slurm for NODES × TASKS_PER_NODE MPI ranks, launches them with
-- `srun --mpi=pmix` (or `mpirun` where a site uses it), and handles the time limit:
-- `--signal=B:USR1@GRACE` makes Slurm signal the batch shell GRACE seconds before the end;
-- the shell forwards SIGUSR1 to the ranks, the training loop checkpoints at the next step
-- boundary and exits with status 75, and the script requeues the job, which resumes from
-- that checkpoint. A sweep becomes a job array: task i runs sweep member i; a second job,
-- submitted with --dependency=afterok on the array, analyses and plots from the cached models.
local M = {}

M.REQUEUE_STATUS = 75   -- EX_TEMPFAIL: "checkpointed on signal, run me again"

local function check_time(t)
  if not (t:match("^%d+$") or t:match("^%d+:%d%d$") or t:match("^%d+:%d%d:%d%d$") or t:match("^%d+%-%d+:%d%d:%d%d$")) then
    error("slurm: TIME '" .. t .. "' is not a Slurm time (MINUTES, HH:MM:SS or D-HH:MM:SS)", 3)
  end
end

local function check_mem(what, v)
  if not tostring(v):match("^%d+[KMGTkmgt]?$") then
    error("slurm: " .. what .. " '" .. tostring(v) .. "' is not a Slurm memory size (a number of MB, or with K, M, G or T: 16G)", 3)
  end
end

-- the lines of the site's environment set-up (SETUP=): a file is sourced, anything else is
-- shell text (e.g. "module load openmpi/4.1"), run with `set -u` off as module systems need
local function setup_lines(setup, add)
  if not setup or setup == "" then return end
  add("# site environment set-up (SETUP=)")
  add("set +u")
  local f = io.open(setup, "r")
  if f and not setup:find("\n", 1, true) then
    f:close()
    add("source " .. (setup:match("^[%w%./_%-]+$") and setup or ("'" .. setup:gsub("'", "'\\''") .. "'")))
  else
    if f then f:close() end
    for line in (setup .. "\n"):gmatch("([^\n]*)\n") do
      if line:match("%S") then add(line) end
    end
  end
  add("set -u")
end

-- The batch script. opts: id, file, profile, nodes, tasks_per_node, cpus_per_task, time,
-- grace (s), launcher ("srun" | "mpirun"), partition, account, mem (--mem, e.g. "16G"),
-- mem_per_cpu (--mem-per-cpu), setup (SETUP: shell text or a file to source), array (number of
-- sweep members, 0 = none), extra (string of --key=value for the run), log_dir (where Slurm
-- writes the job's output, relative to the submit directory), final (true: the analysis run
-- after an array: no --sweep_index, no array), name (job name suffix).
-- Paths are relative to the submit directory (the repository root, where make runs sbatch):
-- the job starts there (Slurm's default working directory) and changes to $SLURM_SUBMIT_DIR.
function M.script(o)
  assert(o.id and o.file, "slurm.script: id and file are required")
  local nodes, tpn = tonumber(o.nodes) or 1, tonumber(o.tasks_per_node) or 1
  if nodes < 1 or tpn < 1 then error("slurm: NODES and TASKS_PER_NODE must be >= 1", 2) end
  local time = tostring(o.time or "01:00:00")
  check_time(time)
  local grace = tonumber(o.grace) or 300
  local launcher = o.launcher or "srun"
  if launcher ~= "srun" and launcher ~= "mpirun" then error("slurm: LAUNCHER must be srun or mpirun", 2) end
  local mem, mpc = o.mem ~= "" and o.mem or nil, o.mem_per_cpu ~= "" and o.mem_per_cpu or nil
  if mem and mpc then error("slurm: give MEM or MEM_PER_CPU, not both (Slurm refuses --mem with --mem-per-cpu)", 2) end
  if mem then check_mem("MEM", mem) end
  if mpc then check_mem("MEM_PER_CPU", mpc) end
  local log_dir = o.log_dir or ("results/" .. o.id)
  local array = o.final and 0 or (tonumber(o.array) or 0)
  local out = {}
  local function add(s) out[#out + 1] = s end
  add("#!/bin/bash")
  add("# outlierlab batch job for experiment " .. o.id .. " (profile " .. (o.profile or "default") .. ")" ..
      (o.final and ": analysis and figures from the models its job array trained" or ""))
  add("# submit from the repository root: sbatch " .. (o.path or "<this file>"))
  add("#SBATCH --job-name=ol-" .. o.id .. (o.final and "-final" or ""))
  add("#SBATCH --nodes=" .. nodes)
  add("#SBATCH --ntasks-per-node=" .. tpn)
  add("#SBATCH --cpus-per-task=" .. (tonumber(o.cpus_per_task) or 1))
  add("#SBATCH --time=" .. time)
  add("#SBATCH --signal=B:USR1@" .. grace)
  add("#SBATCH --requeue")
  add("#SBATCH --open-mode=append")
  if mem then add("#SBATCH --mem=" .. mem) end
  if mpc then add("#SBATCH --mem-per-cpu=" .. mpc) end
  if o.partition and o.partition ~= "" then add("#SBATCH --partition=" .. o.partition) end
  if o.account and o.account ~= "" then add("#SBATCH --account=" .. o.account) end
  if array > 0 then
    add("#SBATCH --array=0-" .. (array - 1))
    add("#SBATCH --output=" .. log_dir .. "/slurm-%A_%a.out")
  else
    add("#SBATCH --output=" .. log_dir .. "/slurm-%j.out")
  end
  add("set -uo pipefail")
  add("cd \"${SLURM_SUBMIT_DIR:-.}\"")
  setup_lines(o.setup, add)
  add("export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}")
  add("export OPENBLAS_NUM_THREADS=$OMP_NUM_THREADS")
  local args = "--profile=" .. (o.profile or "default")
  if array > 0 then args = args .. " --sweep_index=${SLURM_ARRAY_TASK_ID}" end
  if o.extra and o.extra ~= "" then args = args .. " " .. o.extra end
  if launcher == "srun" then
    add("srun --mpi=pmix bin/outlierlab run " .. o.file .. " " .. args .. " &")
  else
    add("mpirun -np $SLURM_NTASKS bin/outlierlab run " .. o.file .. " " .. args .. " &")
  end
  add("pid=$!")
  add("# the time limit is near: ask every rank to checkpoint at the next step boundary")
  add("trap 'echo \"outlierlab: time limit near, checkpointing\"; kill -USR1 $pid' USR1")
  add("wait $pid; rc=$?")
  add("while kill -0 $pid 2>/dev/null; do wait $pid; rc=$?; done")
  add("if [ \"$rc\" -eq " .. M.REQUEUE_STATUS .. " ]; then")
  add("  echo \"outlierlab: checkpoint written; requeueing job $SLURM_JOB_ID\"")
  add("  scontrol requeue \"$SLURM_JOB_ID\"")
  add("  exit 0")
  add("fi")
  add("exit $rc")
  return table.concat(out, "\n") .. "\n"
end

-- An array larger than the experiment's sweep is refused here, at generation time, not by
-- idle array tasks on the cluster: n = the sweep's size (experiment.sweep_size), 0 = no sweep.
function M.check_array(id, profile, array, n)
  array = tonumber(array) or 0
  if array <= 0 then return end
  if n == 0 then
    error(string.format("slurm: ARRAY=%d but experiment %s (profile %s) has no sweep: run it without ARRAY", array, id, profile), 0)
  end
  if array > n then
    error(string.format("slurm: ARRAY=%d but the sweep of experiment %s (profile %s) has %d members: use ARRAY=%d (or less)",
                        array, id, profile, n, n), 0)
  end
end

-- Is there a cluster to submit to? sbatch on the PATH is not enough: Debian's slurm-wlm installs
-- it on machines without a slurm.conf (where sbatch says "fatal: Could not establish a
-- configuration source"), and a configured site's controller may be down. `scontrol ping` asks
-- the controller (SLURM_CONF is honoured), bounded in time: an unreachable one retries for
-- minutes. sh(cmd) -> output, exited 0 (tests pass their own). Returns true, or false and why.
local function shell(cmd)
  local p = io.popen("( " .. cmd .. " ) 2>&1; echo \"__exit=$?\"")
  local out = p:read("*a")
  p:close()
  local code = tonumber(out:match("__exit=(%d+)%s*$"))
  return (out:gsub("__exit=%d+%s*$", "")), code == 0
end
function M.cluster(sh)
  sh = sh or shell
  if not select(2, sh("command -v sbatch")) then return false, "there is no sbatch on this machine" end
  -- a site whose sbatch is a wrapper without scontrol beside it: nothing to ask, so submit
  if not select(2, sh("command -v scontrol")) then return true end
  local out, ok = sh("timeout 20 scontrol ping")
  if ok and out:find("UP", 1, true) then return true end
  local first = (out:match("fatal: ([^\n]+)") or out:match("([^\n]*%S[^\n]*)") or "no answer"):gsub("%s+$", "")
  if out:find("configuration source", 1, true) or out:find("slurm.conf", 1, true) then
    return false, "Slurm is installed here but not configured (scontrol ping: " .. first .. ")"
  end
  return false, "Slurm's controller does not answer (scontrol ping: " .. first .. ")"
end

-- the shell commands that submit the array and, after it succeeded, the final analysis job
function M.submit_commands(array_path, final_path)
  return { "jid=$(sbatch --parsable " .. array_path .. ")",
           "sbatch --dependency=afterok:${jid%%;*} " .. final_path }
end

return M
