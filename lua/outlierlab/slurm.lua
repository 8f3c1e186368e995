-- slurm — batch scripts for running an experiment on a cluster (make sbatch-<id>).
--
-- The script asks Slurm for NODES × TASKS_PER_NODE MPI ranks, launches them with
-- `srun --mpi=pmix` (or `mpirun` where a site uses it), and handles the time limit:
-- `--signal=B:USR1@GRACE` makes Slurm signal the batch shell GRACE seconds before the end;
-- the shell forwards SIGUSR1 to the ranks, the training loop checkpoints at the next step
-- boundary and exits with status 75, and the script requeues the job, which resumes from
-- that checkpoint. A sweep becomes a job array: task i runs sweep member i.
local M = {}

M.REQUEUE_STATUS = 75   -- EX_TEMPFAIL: "checkpointed on signal, run me again"

local function check_time(t)
  if not (t:match("^%d+$") or t:match("^%d+:%d%d$") or t:match("^%d+:%d%d:%d%d$") or t:match("^%d+%-%d+:%d%d:%d%d$")) then
    error("slurm: TIME '" .. t .. "' is not a Slurm time (MINUTES, HH:MM:SS or D-HH:MM:SS)", 3)
  end
end

-- opts: id, file, profile, nodes, tasks_per_node, cpus_per_task, time, grace (s), launcher
-- ("srun" | "mpirun"), root, partition, account, array (number of sweep members, 0 = none),
-- extra (string of --key=value for the run)
function M.script(o)
  assert(o.id and o.file, "slurm.script: id and file are required")
  local nodes, tpn = tonumber(o.nodes) or 1, tonumber(o.tasks_per_node) or 1
  if nodes < 1 or tpn < 1 then error("slurm: NODES and TASKS_PER_NODE must be >= 1", 2) end
  local time = tostring(o.time or "01:00:00")
  check_time(time)
  local grace = tonumber(o.grace) or 300
  local launcher = o.launcher or "srun"
  if launcher ~= "srun" and launcher ~= "mpirun" then error("slurm: LAUNCHER must be srun or mpirun", 2) end
  local root = o.root or "."
  local out = {}
  local function add(s) out[#out + 1] = s end
  add("#!/bin/bash")
  add("# outlierlab batch job for experiment " .. o.id .. " (profile " .. (o.profile or "default") .. ")")
  add("#SBATCH --job-name=ol-" .. o.id)
  add("#SBATCH --nodes=" .. nodes)
  add("#SBATCH --ntasks-per-node=" .. tpn)
  add("#SBATCH --cpus-per-task=" .. (tonumber(o.cpus_per_task) or 1))
  add("#SBATCH --time=" .. time)
  add("#SBATCH --signal=B:USR1@" .. grace)
  add("#SBATCH --requeue")
  add("#SBATCH --open-mode=append")
  if o.partition and o.partition ~= "" then add("#SBATCH --partition=" .. o.partition) end
  if o.account and o.account ~= "" then add("#SBATCH --account=" .. o.account) end
  local array = tonumber(o.array) or 0
  if array > 0 then
    add("#SBATCH --array=0-" .. (array - 1))
    add("#SBATCH --output=" .. root .. "/results/" .. o.id .. "/slurm-%A_%a.out")
  else
    add("#SBATCH --output=" .. root .. "/results/" .. o.id .. "/slurm-%j.out")
  end
  add("set -uo pipefail")
  add("cd " .. root)
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

return M
