-- runner/lend — a rank with nothing left to train lends its threads to the ranks of its host that
-- still train (`make reproduce-<id> RANKS=N`: every model on one rank, --model_ranks=1).
--
-- Why. Under RANKS=N each rank runs nproc/N threads. A sweep whose member count is not a multiple
-- of N, or a lone model (rank 0 trains it, the others wait), leaves ranks asleep in
-- dist.quiet_barrier while one rank trains on its own share of the cores: so-fig3 under RANKS=2
-- trained on one core of two. A model's bits do not depend on the thread count (the engine's
-- fixed work items, docs/reference/training.md), so the training rank may take the idle ranks'
-- threads: the same weights, sooner.
--
-- How. Each rank owns one marker file, <run dir>/.lend/<world rank>, which holds "<host> <threads>"
-- while the rank is idle (lend.idle(true) before its quiet barrier, lend.idle(false) after). A
-- training rank reads the other ranks' markers at its first step and every lend.POLL steps (one
-- file open per rank) and runs with its own threads plus those of the idle ranks on its host.
-- Ranks on other hosts lend nothing. Outside mpirun (one rank), or with OUTLIERLAB_LEND=0 (every
-- rank keeps its own threads), every call does nothing.
local ol = require "outlierlab"
local dist = require "outlierlab.util.dist"
local fs = require "outlierlab.util.fs"

local M = { POLL = 25 }
local S = nil   -- this rank's state once set up: { dir, rank, world, host, base, current }

-- The threads that the idle ranks of `host` lend: the markers in dir of every rank but `me` of
-- `world` ranks (a missing or unreadable marker lends nothing).
function M.lent(dir, me, world, host)
  local n = 0
  for r = 0, world - 1 do
    if r ~= me then
      local f = io.open(dir .. "/" .. r)
      if f then
        local h, t = (f:read("*l") or ""):match("^(%S+) (%d+)$")
        f:close()
        if h == host then n = n + tonumber(t) end
      end
    end
  end
  return n
end

local function set_threads(n)
  if n ~= S.current then
    ol.set_num_threads(n)
    S.current = n
  end
end

-- Called by the runner when a run starts: markers go under run_dir/.lend (shared by the ranks).
-- A marker this rank left in a killed run is removed.
function M.setup(run_dir)
  S = nil
  if dist.world_size() <= 1 or os.getenv("OUTLIERLAB_LEND") == "0" then return end
  local host = fs.hostname()
  if host == "?" then return end   -- no host name: no telling which ranks share this machine
  local dir = run_dir .. "/.lend"
  fs.mkdir_p(dir)
  S = { dir = dir, rank = dist.world_rank(), world = dist.world_size(), host = host, base = ol.num_threads() }
  S.current = S.base
  os.remove(dir .. "/" .. S.rank)
end

-- This rank has nothing to train until the next collective (true), or is back (false); either
-- way it runs its own threads again.
function M.idle(on)
  if not S then return end
  local path = S.dir .. "/" .. S.rank
  if on then fs.write_atomic(path, S.host .. " " .. S.base .. "\n") else os.remove(path) end
  set_threads(S.base)
end

-- A training rank: its own threads plus those lent now. Returns the thread count.
function M.poll()
  if not S then return ol.num_threads() end
  set_threads(S.base + M.lent(S.dir, S.rank, S.world, S.host))
  return S.current
end

-- the trainer's on_step hook (recipes.trainer's o.on_step; runner/cache.lua passes it)
function M.on_step(step)
  if S and (step <= 1 or step % M.POLL == 0) then M.poll() end
end

return M
