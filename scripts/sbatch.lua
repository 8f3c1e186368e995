-- Write the Slurm batch script of one experiment, and submit it when a cluster answers
-- (runner/slurm.cluster: sbatch alone may be an unconfigured Slurm); otherwise print why, the
-- script's path and the commands, and exit 0.
-- Used by `make sbatch-<id> NODES=… TASKS_PER_NODE=… TIME=…`; see README "Running on a cluster".
-- Scripts and logs go to results/<id>/<profile>/; paths in them are relative to the
-- repository root, which is the submit directory. With ARRAY=n (n ≤ the experiment's sweep)
-- a second script, <id>-final.sbatch, runs the analysis and figures after the array succeeded
-- (submitted with --dependency=afterok:<array job>).
local config = require "outlierlab.config"
local slurm = require "outlierlab.runner.slurm"
local report = require "outlierlab.runner.report"
local runner = require "outlierlab.runner.run"
local cfg = config.get{
  id = "", profile = "default", nodes = 1, tasks_per_node = 1, cpus_per_task = 1,
  time = "01:00:00", grace = 300, launcher = "srun", partition = "", account = "",
  mem = "", mem_per_cpu = "", setup = os.getenv("OUTLIERLAB_SLURM_SETUP") or "",
  array = 0, extra = "", submit = true, out = "", log_dir = "",
}
if cfg.id == "" then error("sbatch: --id=<experiment id> is required", 0) end
local root = OUTLIERLAB_ROOT or "."
local file = "experiments/" .. cfg.id .. ".lua"
local f = io.open(root .. "/" .. file, "r")
if not f then
  local ids = {}
  for _, name in ipairs(require("outlierlab.util.fs").list_dir(root .. "/experiments")) do ids[#ids + 1] = name:match("^(.+)%.lua$") end
  error("sbatch: no experiment file " .. file .. config.did_you_mean(cfg.id, ids) .. "make list shows them all", 0)
end
f:close()
if cfg.setup ~= "" and not cfg.setup:find("\n", 1, true) and cfg.setup:match("%.sh$") and not io.open(cfg.setup, "r") then
  error("sbatch: SETUP=" .. cfg.setup .. " looks like a file but there is none (give a file that exists, or shell commands)", 0)
end
-- a mistyped PROFILE is refused here, not by the job on the cluster
local exp = dofile(root .. "/" .. file)
if type(exp) == "table" and type(exp.profiles) == "table" and type(exp.profiles[cfg.profile]) ~= "table" then
  error("sbatch: " .. require("outlierlab.runner.run").unknown_profile(exp, file, cfg.profile), 0)
end
local extra = {}
for a in cfg.extra:gmatch("%S+") do extra[#extra + 1] = a end
if cfg.array > 0 then
  slurm.check_array(cfg.id, cfg.profile, cfg.array, runner.sweep_size(dofile(root .. "/" .. file), file, cfg.profile, extra))
end

local log_dir = cfg.log_dir ~= "" and cfg.log_dir or report.results_dir("results", cfg.id, { profile = cfg.profile })
local function write(path, text)
  os.execute("mkdir -p '" .. path:match("^(.*)/") .. "'")
  local tmp = path .. ".tmp"
  local w = assert(io.open(tmp, "w"))
  w:write(text)
  w:close()
  assert(os.rename(tmp, path))
end
local opts = { id = cfg.id, file = file, profile = cfg.profile, nodes = cfg.nodes,
  tasks_per_node = cfg.tasks_per_node, cpus_per_task = cfg.cpus_per_task, time = cfg.time,
  grace = cfg.grace, launcher = cfg.launcher, partition = cfg.partition, account = cfg.account,
  mem = cfg.mem, mem_per_cpu = cfg.mem_per_cpu, setup = cfg.setup, array = cfg.array, extra = cfg.extra,
  log_dir = log_dir }
local path = cfg.out ~= "" and cfg.out or (root .. "/" .. log_dir .. "/" .. cfg.id .. ".sbatch")
local rel = cfg.out ~= "" and cfg.out or (log_dir .. "/" .. cfg.id .. ".sbatch")
opts.path = rel
write(path, slurm.script(opts))
local final, final_rel
if cfg.array > 0 then
  final = path:gsub("%.sbatch$", "") .. "-final.sbatch"
  final_rel = rel:gsub("%.sbatch$", "") .. "-final.sbatch"
  opts.final, opts.path = true, final_rel
  write(final, slurm.script(opts))
end

-- submit only to a cluster that answers (runner/slurm.cluster); otherwise say why, name the
-- scripts and print the commands to run on one, and succeed: writing them was the job
local usable, why = true, nil
if cfg.submit then usable, why = slurm.cluster() end
local function run(cmd)
  local p = io.popen("cd '" .. root .. "' && " .. cmd .. " 2>&1")
  local out = p:read("*a")
  local ok = p:close()
  return out, ok
end
if cfg.submit and usable then
  os.execute("mkdir -p '" .. (log_dir:sub(1, 1) == "/" and log_dir or (root .. "/" .. log_dir)) .. "'")   -- Slurm opens the job's log there
  print("sbatch: submitting " .. rel)
  local out = run("sbatch --parsable " .. rel)
  local jid = out:match("^(%d+)")
  if not jid then error("sbatch: submission of " .. rel .. " failed: " .. out, 0) end
  print("sbatch: job " .. jid)
  if final then
    local out2 = run("sbatch --parsable --dependency=afterok:" .. jid .. " " .. final_rel)
    local jid2 = out2:match("^(%d+)")
    if not jid2 then error("sbatch: submission of " .. final_rel .. " failed: " .. out2, 0) end
    print("sbatch: job " .. jid2 .. " (analysis and figures) runs after job array " .. jid .. " succeeded")
  end
else
  print("sbatch: wrote " .. path .. (final and (" and " .. final) or ""))
  if why then print("sbatch: not submitted: " .. why .. ".") end
  print("sbatch: on a cluster, submit from the repository root with:")
  print("  mkdir -p " .. log_dir)
  if final then
    for _, c in ipairs(slurm.submit_commands(rel, final_rel)) do print("  " .. c) end
  else
    print("  sbatch " .. rel)
  end
end
