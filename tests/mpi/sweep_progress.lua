-- A sweep of tiny decoders (one per seed) for tests/lua/test_mpi_progress.lua: under
-- `mpirun -np 2` member i goes to the group of rank (i - 1) % 2, so seeds 1 and 3 are rank 0's
-- and seeds 2 and 4 rank 1's. Its test first trains seeds 1 and 3 on one rank (--seeds=1,3), then
-- runs all four on two ranks: rank 0's members are cached and rank 1 trains, and every member's
-- progress must reach the output (rank 0 prints rank 1's lines, util/progress).
local config = require "outlierlab.config"
local recipes = require "outlierlab.recipes"

local base = config.deep_copy(recipes.LLAMA_LM_PROFILES.quick)
base.steps = 24
base.seeds = { 1, 2, 3, 4 }

local function train(run)
  local items = {}
  for _, s in ipairs(run.cfg.seeds) do items[#items + 1] = { label = "tiny seed=" .. s, seed = s } end
  return run:sweep(items, function(it)
    local c = config.deep_copy(run.cfg)
    c.seed = it.seed
    local h = recipes.fit(run, recipes.llama_lm_spec(c))
    return { seed = it.seed, steps = h.info and h.info.steps or 0 }
  end)
end

return {
  id = "sweep-progress",
  title = "Progress of a sweep under MPI (test)",
  source = { paper = "test", figure = "", claim = "every member's progress is printed" },
  profiles = { quick = base, default = base },
  stages = { { "train", train } },
  summary = function(run)
    local n = 0
    for _ in pairs(run.out.train) do n = n + 1 end
    return { reproduced = n .. " members", holds = nil }
  end,
}
