-- The Slurm batch script for an experiment holds the lines a cluster run needs, is valid
-- bash, and bad settings are refused with a message naming them.
local t = require "outlierlab.tap"
local slurm = require "outlierlab.slurm"

local s = slurm.script{ id = "so-fig11", file = "experiments/so-fig11.lua", profile = "paper", nodes = 4,
  tasks_per_node = 8, cpus_per_task = 6, time = "12:00:00", grace = 600, root = "/proj/outlierlab" }
local function has(line, name) t.ok(s:find(line, 1, true), name or ("has: " .. line), s) end
has("#!/bin/bash")
has("#SBATCH --nodes=4")
has("#SBATCH --ntasks-per-node=8")
has("#SBATCH --cpus-per-task=6")
has("#SBATCH --time=12:00:00")
has("#SBATCH --signal=B:USR1@600", "signals the batch shell before the time limit")
has("#SBATCH --requeue")
has("srun --mpi=pmix bin/outlierlab run experiments/so-fig11.lua --profile=paper", "launches with srun --mpi=pmix")
has("export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}")
has("kill -USR1 $pid", "forwards the signal to the ranks")
has("scontrol requeue", "requeues after a checkpoint")
t.ok(not s:find("--array", 1, true), "no job array without a sweep")

local a = slurm.script{ id = "x", file = "experiments/x.lua", array = 5, launcher = "mpirun" }
t.ok(a:find("#SBATCH --array=0-4", 1, true), "a sweep of 5 becomes a job array")
t.ok(a:find("--sweep_index=${SLURM_ARRAY_TASK_ID}", 1, true), "array task picks its sweep member")
t.ok(a:find("mpirun -np $SLURM_NTASKS", 1, true), "mpirun launcher")

local path = os.tmpname()
local f = io.open(path, "w") f:write(s) f:close()
t.ok(os.execute("bash -n " .. path) == 0, "the script is valid bash")
os.remove(path)

t.throws(function() slurm.script{ id = "x", file = "f", time = "soon" } end, "TIME 'soon'", "bad TIME is refused")
t.throws(function() slurm.script{ id = "x", file = "f", launcher = "qsub" } end, "LAUNCHER", "bad launcher is refused")
t.throws(function() slurm.script{ id = "x", file = "f", nodes = 0 } end, "NODES", "zero nodes refused")

-- the make-level entry point writes the file and names it
local out = io.popen("cd " .. OUTLIERLAB_ROOT .. " && bin/outlierlab run scripts/sbatch.lua --id=does-not-exist 2>&1"):read("*a")
t.ok(out:find("no experiment file experiments/does-not-exist.lua", 1, true), "unknown experiment id is named", out)
return t.done()
