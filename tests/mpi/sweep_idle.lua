-- A sweep of two members for tests/lua/test_mpi.lua: under `mpirun -np 2` member 1 (rank 0's)
-- sleeps --hold seconds and member 2 (rank 1's) returns at once, so rank 1 waits for rank 0 at
-- the end of the sweep. Rank 0 prints each rank's wall and CPU seconds over the sweep
-- ("rank <r> wall <s> cpu <s>"): a rank that waits must do so asleep (runner/run.lua's quiet
-- barrier), not in the busy poll of an MPI collective. Rank 0's member also reports its thread
-- count after rank 1 went idle (runner/lend: rank 1 lends its threads), and rank 0 its count after
-- the sweep ("threads alone <n> after <n>").
local ol = require "outlierlab"
local dist = require "outlierlab.util.dist"
local lend = require "outlierlab.runner.lend"
local progress = require "outlierlab.util.progress"

local base = { hold = 2 }

local function sweep(run)
  local c0, w0 = os.clock(), progress.now()
  local out = run:sweep({ { label = "holds" }, { label = "returns" } }, function(it, i)
    -- rank 0's member: its threads once rank 1 has gone idle (runner/lend)
    local alone
    if i == 1 then
      progress.sleep(math.floor(run.cfg.hold * 1000))
      alone = lend.poll()
    end
    return { member = i, alone = alone }
  end)
  dist.print0(string.format("threads alone %s after %d", tostring(out[1].alone), ol.num_threads()))
  local mine = { progress.now() - w0, os.clock() - c0 }
  local all = dist.allgather_list(mine)
  for r = 0, dist.size() - 1 do
    dist.print0(string.format("rank %d wall %.3f cpu %.3f", r, all[2 * r + 1], all[2 * r + 2]))
  end
  return out
end

return {
  id = "sweep-idle",
  title = "A sweep's waiting rank sleeps (test)",
  source = { paper = "test", figure = "", claim = "a rank whose members are done waits without a busy poll" },
  profiles = { quick = base, default = base },
  stages = { { "sweep", sweep } },
  summary = function(run)
    local n = 0
    for _ in pairs(run.out.sweep) do n = n + 1 end
    return { reproduced = n .. " members", holds = nil }
  end,
}
