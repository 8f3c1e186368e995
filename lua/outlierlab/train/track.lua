-- train/track — the training tracker: when during a training the model is measured, and the
-- curve of those measurements, saved beside the checkpoint.
--
-- The tracker knows nothing of what is measured: the caller passes measure(n, first) -> point
-- (a table of numbers; recipes/track.lua measures the phenomena) and the hash of the code that
-- measures (curve_code). The training layer so stays below the measuring layers, and the
-- curve carries the key of the code that drew it: done.lua records curve_code, and a reader of
-- a cached curve compares it with the current code (recipes/track.lua, fresh).
--
-- When: at step 0 and every steps/TRACK_POINTS steps, and in the last STABLE_WINDOW of the
-- steps every steps/STABLE_POINTS_PER_RUN steps (10 points), each of those on TRACK_BATCHES
-- held-out batches of its own (first = k · TRACK_BATCHES), so that neither one batch nor one step
-- decides a verdict (docs/reference/metrics.md, "Stable measurement"). The curve is written to
-- <dir>/track.lua atomically at every point, so that a resumed run keeps the points measured
-- before the kill. The measurement runs after the optimizer step and changes nothing the next
-- step uses.
local dist = require "outlierlab.util.dist"
local fs = require "outlierlab.util.fs"
local serialize = require "outlierlab.util.serialize"

local M = {}

M.TRACK_POINTS = 20
M.STABLE_WINDOW = 0.1
M.STABLE_POINTS_PER_RUN = 100
M.TRACK_BATCHES = 2

-- steps at which the tracker measures: 0, every steps/TRACK_POINTS, and every
-- steps/STABLE_POINTS_PER_RUN in the last STABLE_WINDOW of the steps (the last step always);
-- returns due(step) and the first step of the window
function M.schedule(steps)
  local every = math.max(1, math.floor(steps / M.TRACK_POINTS))
  local fine = math.max(1, math.floor(steps / M.STABLE_POINTS_PER_RUN))
  local from = steps - math.floor(steps * M.STABLE_WINDOW + 0.5)
  return function(step)
    return step == steps or step % every == 0 or (step > from and (steps - step) % fine == 0)
  end, from
end

-- tracker{ steps =, dir =, measure = function(n, first, step, loss) -> point } -> tr with
-- tr.curve (the points, each with step and loss added) and tr.on_step(step, rec) for train.run
function M.new(o)
  local path = o.dir .. "/track.lua"
  local due, from = M.schedule(o.steps)
  local s = fs.read_file(path)
  local tr = { curve = s and serialize.deserialize(s, "@" .. path) or {} }
  local function save()
    if dist.rank() == 0 then fs.write_atomic(path, serialize.serialize(tr.curve)) end
  end
  local k = 0   -- the stable window's points each take their own held-out batches
  local function measure(step, loss)
    local c = tr.curve
    if #c > 0 and c[#c].step >= step then return end
    local first = 0
    if step > from then
      k = k + 1
      first = k * M.TRACK_BATCHES
    end
    c[#c + 1] = o.measure(M.TRACK_BATCHES, first, step, loss)
    save()
  end
  for _, p in ipairs(tr.curve) do if p.step > from then k = k + 1 end end   -- a resumed run goes on counting
  if #tr.curve == 0 then measure(0, 0 / 0) end
  function tr.on_step(step, rec)
    if due(step) then measure(step, rec.loss) end
  end
  return tr
end

return M
