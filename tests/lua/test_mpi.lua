-- Data parallelism: 1 rank and 2 ranks (mpirun -np 2 --oversubscribe) give the same loss
-- curve within fp32 tolerance for the same global batch (rank shards are summed in a
-- different order than one rank's rows, so bits may differ; the bound is 1e-5 relative).
-- Also: an error on one rank stops the job with its message; a sweep's rank that is done waits
-- for the others asleep (dist.quiet_barrier), not in an MPI collective's busy poll.
local t = require "tap"
local root = OUTLIERLAB_ROOT

local run = t.sh   -- output, exited 0
local function losses(out)
  local l = {}
  for s, v in out:gmatch("loss (%d+) ([%d%.eE%-%+]+)") do l[tonumber(s)] = tonumber(v) end
  return l
end

local env = "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
local exe = root .. "/bin/outlierlab run " .. root .. "/tests/mpi/dp_train.lua"
local one = run(env .. exe)
local two = run(env .. "mpirun --oversubscribe -np 2 " .. exe)
local l1, l2 = losses(one), losses(two)
t.is(#l1, 12, "1 rank printed 12 losses")
t.is(#l2, 12, "2 ranks printed 12 losses (rank 0 only)")
local worst = 0
for i = 1, math.min(#l1, #l2) do worst = math.max(worst, math.abs(l1[i] - l2[i]) / math.abs(l1[i])) end
t.ok(#l2 == 12 and worst <= 1e-5, "loss curves agree within 1e-5 relative", string.format("worst %.3g\n1 rank:\n%s\n2 ranks:\n%s", worst, one, two))
t.ok(l1[12] and l1[12] < l1[1] * 0.8, "the model learns (loss falls by 20%+)", one)
local _, n0 = two:gsub("loss %d+", "")
t.is(n0, 12, "only rank 0 prints")
t.ok(two:match("checksum %x+"), "parameters identical across ranks at the end")

-- an error on one rank stops the job with that rank's message
local bad = os.tmpname() .. ".lua"
local f = io.open(bad, "w")
f:write([[local dist = require "outlierlab.util.dist"
if dist.rank() == 1 then error("boom on purpose") end
for i = 1, 50 do dist.barrier() end
]])
f:close()
local out, ok = run(env .. "timeout 60 mpirun --oversubscribe -np 2 " .. root .. "/bin/outlierlab run " .. bad)
t.ok(not ok, "the job exits non-zero when one rank fails")
t.ok(out:find("rank 1 of 2: ", 1, true) and out:find("boom on purpose", 1, true), "the failing rank's message is printed", out)
os.remove(bad)

-- a sweep's rank whose members are done waits for the others asleep (runner/run.lua's
-- dist.quiet_barrier): tests/mpi/sweep_idle.lua holds rank 0's member for 2 s while rank 1's
-- returns at once; in an MPI collective's busy poll rank 1 would spend most of those 2 s on a core
local tmp = os.tmpname()
os.remove(tmp)
out = run(env .. "timeout 60 mpirun --oversubscribe -np 2 " .. root .. "/bin/outlierlab run " .. root ..
  "/tests/mpi/sweep_idle.lua --profile=quick --out=" .. tmp)
local w1, c1 = out:match("rank 1 wall ([%d%.]+) cpu ([%d%.]+)")
w1, c1 = tonumber(w1), tonumber(c1)
t.ok(w1 and w1 >= 1.8, "the sweep's early rank waited for the other's 2 s member", out)
t.ok(c1 and w1 and c1 < 0.25 * w1, "it waited asleep: CPU seconds under a quarter of the wait", out)
-- and lent its thread meanwhile (runner/lend): rank 0's member ran on 2 threads once rank 1 was
-- idle, and rank 0 is back to its own 1 after the sweep
t.is(out:match("threads alone (%d+)"), "2", "rank 0 ran its member on rank 1's thread too while rank 1 waited", out)
t.is(out:match("threads alone %d+ after (%d+)"), "1", "and on its own 1 thread after the sweep", out)
os.execute("rm -rf '" .. tmp .. "'")

-- the quiet barrier itself: a barrier (rank 0 leaves only after rank 1's 1 s sleep), asleep
f = io.open(bad, "w")
f:write([[local dist = require "outlierlab.util.dist"
local progress = require "outlierlab.util.progress"
local c0, w0 = os.clock(), progress.now()
if dist.rank() == 1 then progress.sleep(1000) end
dist.quiet_barrier(5)
if dist.rank() == 0 then print(string.format("quiet wall %.3f cpu %.3f", progress.now() - w0, os.clock() - c0)) end
]])
f:close()
out = run(env .. "timeout 60 mpirun --oversubscribe -np 2 " .. root .. "/bin/outlierlab run " .. bad)
local qw, qc = out:match("quiet wall ([%d%.]+) cpu ([%d%.]+)")
qw, qc = tonumber(qw), tonumber(qc)
t.ok(qw and qw >= 0.9, "dist.quiet_barrier waits for every rank", out)
t.ok(qc and qw and qc < 0.25 * qw, "dist.quiet_barrier waits asleep", out)
os.remove(bad)
-- a poll interval out of range is an error that names it (one process too)
f = io.open(bad, "w")
f:write('require("outlierlab.util.dist").quiet_barrier(0)\n')
f:close()
out, ok = run(env .. root .. "/bin/outlierlab run " .. bad)
t.ok(not ok and out:find("dist_quiet_barrier: poll_ms 0", 1, true), "quiet_barrier(0) is an error naming poll_ms", out)
os.remove(bad)
return t.done()
