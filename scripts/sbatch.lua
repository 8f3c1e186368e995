-- Write (and submit, when sbatch exists) a Slurm batch script for one experiment.
-- Used by `make sbatch-<id> NODES=… TASKS_PER_NODE=… TIME=…`; see README "Running on a cluster".
local config = require "outlierlab.config"
local slurm = require "outlierlab.slurm"
local cfg = config.get{
  id = "", profile = "default", nodes = 1, tasks_per_node = 1, cpus_per_task = 1,
  time = "01:00:00", grace = 300, launcher = "srun", partition = "", account = "",
  array = 0, extra = "", submit = true, out = "",
}
if cfg.id == "" then error("sbatch: --id=<experiment id> is required", 0) end
local root = OUTLIERLAB_ROOT or "."
local file = "experiments/" .. cfg.id .. ".lua"
local f = io.open(root .. "/" .. file, "r")
if not f then error("sbatch: no experiment file " .. file, 0) end
f:close()
local text = slurm.script{ id = cfg.id, file = file, profile = cfg.profile, nodes = cfg.nodes,
  tasks_per_node = cfg.tasks_per_node, cpus_per_task = cfg.cpus_per_task, time = cfg.time,
  grace = cfg.grace, launcher = cfg.launcher, root = root, partition = cfg.partition,
  account = cfg.account, array = cfg.array, extra = cfg.extra }
local path = cfg.out ~= "" and cfg.out or (root .. "/results/" .. cfg.id .. "/" .. cfg.id .. ".sbatch")
os.execute("mkdir -p '" .. path:match("^(.*)/") .. "' '" .. root .. "/results/" .. cfg.id .. "'")
local tmp = path .. ".tmp"
local w = assert(io.open(tmp, "w"))
w:write(text)
w:close()
assert(os.rename(tmp, path))
local has_sbatch = os.execute("command -v sbatch >/dev/null 2>&1") == 0
if cfg.submit and has_sbatch then
  print("sbatch: submitting " .. path)
  local rc = os.execute("sbatch '" .. path .. "'")
  if rc ~= 0 then error("sbatch: submission of " .. path .. " failed", 0) end
else
  print("sbatch: wrote " .. path .. (has_sbatch and "" or " (no sbatch on this machine: submit it on the cluster with `sbatch " .. path .. "`)"))
end
