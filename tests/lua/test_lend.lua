-- test_lend — the threads idle ranks lend (lua/outlierlab/runner/lend.lua): which markers count.
-- Under mpirun the whole path (an idle rank's marker, the training rank's thread count, and its
-- own count again after the sweep) is tests/lua/test_mpi.lua's, with tests/mpi/sweep_idle.lua.
local t = require "tap"
local lend = require "outlierlab.runner.lend"

local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p '" .. dir .. "'")
local function marker(rank, text)
  local f = assert(io.open(dir .. "/" .. rank, "w"))
  f:write(text)
  f:close()
end

t.is(lend.lent(dir, 0, 4, "nodeA"), 0, "no markers: nothing lent")
marker(1, "nodeA 1\n")
t.is(lend.lent(dir, 0, 4, "nodeA"), 1, "an idle rank of the same host lends its 1 thread")
marker(2, "nodeB 4\n")
t.is(lend.lent(dir, 0, 4, "nodeA"), 1, "a rank of another host lends nothing")
marker(3, "nodeA four\n")
t.is(lend.lent(dir, 0, 4, "nodeA"), 1, "a marker that is not '<host> <threads>' lends nothing")
marker(0, "nodeA 8\n")
t.is(lend.lent(dir, 0, 4, "nodeA"), 1, "a rank's own marker does not count for itself")
t.is(lend.lent(dir, 1, 4, "nodeA"), 8, "rank 1 sees rank 0's 8 threads (and not its own)")
marker(5, "nodeA 2\n")
t.is(lend.lent(dir, 0, 4, "nodeA"), 1, "a marker of a rank beyond the world (an older, larger run) is ignored")
t.is(lend.poll(), require("outlierlab").num_threads(), "outside mpirun: poll changes nothing")

os.execute("rm -rf '" .. dir .. "'")
t.done()
