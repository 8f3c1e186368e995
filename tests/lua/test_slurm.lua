-- The Slurm batch script for an experiment holds the lines a cluster run needs, is valid
-- bash, and bad settings are refused with a message naming them.
local t = require "tap"
local slurm = require "outlierlab.runner.slurm"
local runner = require "outlierlab.runner.run"

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

-- paths are relative to the submit directory (the repository root)
t.ok(s:find('cd "${SLURM_SUBMIT_DIR:-.}"', 1, true) and s:find("#SBATCH --output=results/so-fig11/slurm-%j.out", 1, true)
     and not s:find("/proj/outlierlab", 1, true), "paths relative to the submit directory", s)

-- memory and the site's set-up
local m = slurm.script{ id = "x", file = "experiments/x.lua", mem = "16G", setup = "module load openmpi/4.1\nmodule load netcdf" }
t.ok(m:find("#SBATCH --mem=16G", 1, true), "MEM becomes --mem")
t.ok(m:find("set +u\nmodule load openmpi/4.1\nmodule load netcdf\nset -u\n", 1, true), "SETUP commands run before the launch, with set -u off", m)
t.ok(m:find("module load netcdf", 1, true) < m:find("srun ", 1, true), "set-up comes before srun")
local setup_file = os.tmpname()
local sf = io.open(setup_file, "w") sf:write("export SITE=1\n") sf:close()
local fs = slurm.script{ id = "x", file = "experiments/x.lua", mem_per_cpu = "4000", setup = setup_file }
t.ok(fs:find("#SBATCH --mem-per-cpu=4000", 1, true) and fs:find("source " .. setup_file, 1, true), "MEM_PER_CPU; a SETUP file is sourced", fs)
os.remove(setup_file)
t.throws(function() slurm.script{ id = "x", file = "f", mem = "16G", mem_per_cpu = "2G" } end, "not both", "MEM with MEM_PER_CPU refused")
t.throws(function() slurm.script{ id = "x", file = "f", mem = "lots" } end, "MEM 'lots'", "bad MEM refused")

-- the analysis job after an array: no array, no sweep index
local fin = slurm.script{ id = "x", file = "experiments/x.lua", array = 5, final = true, extra = "--steps=9" }
t.ok(not fin:find("--array", 1, true) and not fin:find("sweep_index", 1, true) and fin:find("--steps=9", 1, true)
     and fin:find("--job-name=ol-x-final", 1, true), "the final job runs the whole experiment once", fin)
local cmds = table.concat(slurm.submit_commands("a.sbatch", "b.sbatch"), "\n")
t.ok(cmds:find("--dependency=afterok:${jid", 1, true), "the final job depends on the array (afterok)", cmds)
t.throws(function() slurm.check_array("so-fig12", "quick", 7, 6) end, "has 6 members: use ARRAY=6", "an array larger than the sweep is refused")
t.throws(function() slurm.check_array("qt-fig1", "quick", 2, 0) end, "has no sweep", "an array on an experiment without a sweep is refused")
t.lives(function() slurm.check_array("so-fig12", "quick", 6, 6) end, "an array of the sweep's size is accepted")

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
out = io.popen("cd " .. OUTLIERLAB_ROOT .. " && bin/outlierlab run scripts/sbatch.lua --id=so-fg3 2>&1"):read("*a")
t.ok(out:find("did you mean so-fig3?", 1, true), "a mistyped id: the nearest is named", out)
out = io.popen("cd " .. OUTLIERLAB_ROOT .. " && bin/outlierlab run scripts/sbatch.lua --id=so-fig3 --profile=defualt --submit=false --out=/nonexistent/x.sbatch 2>&1"):read("*a")
t.ok(out:find("unknown profile 'defualt'; did you mean default?", 1, true), "a mistyped profile is refused before any script is written", out)
-- make sbatch-<id>: the sweep's size is found without training (so-fig12: 6 attention variants)
local tmp = os.tmpname()
os.remove(tmp)
local function mk(args)
  return t.sh("cd " .. OUTLIERLAB_ROOT .. " && make -s sbatch-so-fig12 PROFILE=quick SBATCH_OUT=" .. tmp .. "/s.sbatch " .. args)
end
local o7, ok7 = mk("ARRAY=7")
t.ok(not ok7 and o7:find("ARRAY=7 but the sweep of experiment so-fig12 (profile quick) has 6 members", 1, true),
     "make sbatch-so-fig12 ARRAY=7 is refused at generation time", o7)
local o6, ok6 = mk("ARRAY=6 MEM=2G SETUP='module load openmpi' EXTRA='--steps=5 --retrain' SUBMIT=false")
local a6, f6 = t.slurp(tmp .. "/s.sbatch") or "", t.slurp(tmp .. "/s-final.sbatch") or ""
t.ok(ok6 and a6:find("#SBATCH --array=0-5", 1, true) and a6:find("#SBATCH --mem=2G", 1, true) and
     a6:find("module load openmpi", 1, true) and a6:find("--sweep_index=${SLURM_ARRAY_TASK_ID} --steps=5 --retrain", 1, true),
     "make passes ARRAY, MEM, SETUP and EXTRA into the script", o6 .. a6)
t.ok(f6:find("--profile=quick --steps=5 --retrain", 1, true) and o6:find("--dependency=afterok", 1, true),
     "and writes the dependent analysis job with its submission commands", o6 .. f6)
-- A usable cluster, told from an installed but unconfigured Slurm (slurm.cluster): a fake shell
-- answers each command as the machine would
local function fake(answers)
  return function(cmd)
    for pat, a in pairs(answers) do if cmd:find(pat, 1, true) then return a[1], a[2] end end
    return "", false
  end
end
t.is(slurm.cluster(fake{ ["command -v sbatch"] = { "/usr/bin/sbatch\n", true }, ["command -v scontrol"] = { "/usr/bin/scontrol\n", true },
                          ["scontrol ping"] = { "Slurmctld(primary) at node1 is UP\n", true } }), true, "a controller that answers UP: a cluster")
local u, why = slurm.cluster(fake{ ["command -v sbatch"] = { "/usr/bin/sbatch\n", true }, ["command -v scontrol"] = { "/usr/bin/scontrol\n", true },
  ["scontrol ping"] = { "scontrol: error: fetch_config: DNS SRV lookup failed\nscontrol: fatal: Could not establish a configuration source\n", false } })
t.ok(u == false and why:find("installed here but not configured", 1, true) and why:find("Could not establish a configuration source", 1, true),
     "Debian's slurm-wlm without a slurm.conf: not a cluster, and says so", why)
u, why = slurm.cluster(fake{ ["command -v sbatch"] = { "/usr/bin/sbatch\n", true }, ["command -v scontrol"] = { "/usr/bin/scontrol\n", true },
  ["scontrol ping"] = { "Slurmctld(primary) at node1 is DOWN\n", false } })
t.ok(u == false and why:find("does not answer", 1, true) and why:find("is DOWN", 1, true), "a controller that is down: not a cluster", why)
u, why = slurm.cluster(fake{})
t.ok(u == false and why:find("no sbatch", 1, true), "no sbatch: not a cluster", why)

-- make sbatch-<id> on a machine whose Slurm is installed but not configured (fake sbatch and
-- scontrol first on the PATH, as Debian's would answer): the script is written, nothing is
-- submitted, the commands are printed and make succeeds
local bin = tmp .. "/fakebin"
os.execute("mkdir -p " .. bin)
local function script(name, body)
  local w = assert(io.open(bin .. "/" .. name, "w")) w:write("#!/bin/sh\n" .. body .. "\n") w:close()
  os.execute("chmod +x " .. bin .. "/" .. name)
end
script("sbatch", "echo \"$@\" >> " .. tmp .. "/sbatch.calls\necho 'sbatch: fatal: Could not establish a configuration source' >&2\nexit 1")
script("scontrol", "echo 'scontrol: fatal: Could not establish a configuration source' >&2\nexit 1")
local function mk3(extra)
  return t.sh("cd " .. OUTLIERLAB_ROOT .. " && PATH=" .. bin .. ":$PATH make -s sbatch-so-fig3 PROFILE=quick NODES=2 SBATCH_OUT=" .. tmp .. "/f3.sbatch " .. (extra or ""))
end
local o3, ok3 = mk3()
t.ok(ok3 and o3:find("sbatch: wrote " .. tmp .. "/f3.sbatch", 1, true) and o3:find("not submitted: Slurm is installed here but not configured", 1, true)
     and o3:find("  sbatch " .. tmp .. "/f3.sbatch", 1, true), "unconfigured Slurm: make succeeds, names the script, says why and prints the command", o3)
t.ok(not t.slurp(tmp .. "/sbatch.calls"), "and sbatch was never called")
t.ok((t.slurp(tmp .. "/f3.sbatch") or ""):find("#SBATCH --nodes=2", 1, true), "the script is there")
-- a cluster that answers: submitted
script("scontrol", "echo 'Slurmctld(primary) at node1 is UP'")
script("sbatch", "echo \"$@\" >> " .. tmp .. "/sbatch.calls\necho 4242")
o3, ok3 = mk3()
t.ok(ok3 and o3:find("sbatch: job 4242", 1, true) and (t.slurp(tmp .. "/sbatch.calls") or ""):find("--parsable " .. tmp .. "/f3.sbatch", 1, true),
     "a controller that answers: the script is submitted", o3)
-- this machine's own Slurm, when installed and unconfigured (CI: make test-deps installs it)
local ping, pinged = t.sh("command -v sbatch >/dev/null && timeout 20 scontrol ping")
if not pinged and ping:find("configuration source", 1, true) then
  local or_, okr = t.sh("cd " .. OUTLIERLAB_ROOT .. " && make -s sbatch-so-fig3 PROFILE=quick SBATCH_OUT=" .. tmp .. "/real.sbatch")
  t.ok(okr and or_:find("not configured", 1, true) and or_:find("  sbatch " .. tmp .. "/real.sbatch", 1, true),
       "this machine's unconfigured slurm-wlm: make sbatch-so-fig3 prints the commands and succeeds", or_)
else
  t.skip("this machine's Slurm is not an installed-but-unconfigured one")
end

-- the compression tables train their members through run:sweep, so they run as MPI sweep groups and
-- as Slurm job arrays like every other sweep: the sweep's size per profile, found without training
for id, want in pairs({ ["qt-table1"] = { quick = 3, default = 12 }, ["qt-table2"] = { quick = 9, default = 27 },
                        ["so-table3"] = { quick = 2, default = 6 } }) do
  local f = OUTLIERLAB_ROOT .. "/experiments/" .. id .. ".lua"
  for prof, n in pairs(want) do
    t.is(runner.sweep_size(dofile(f), f, prof, {}), n, id .. " (" .. prof .. "): a sweep of " .. n .. " members (a job array of " .. n .. ")")
  end
end
os.execute("rm -rf '" .. tmp .. "'")
return t.done()
