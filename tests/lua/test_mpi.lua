-- Data parallelism: 1 rank and 2 ranks (mpirun -np 2 --oversubscribe) give the same loss
-- curve within fp32 tolerance for the same global batch (rank shards are summed in a
-- different order than one rank's rows, so bits may differ; the bound is 1e-5 relative).
local t = require "outlierlab.tap"
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
return t.done()
