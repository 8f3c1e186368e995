-- judge/onsets — when each phenomenon appears: the training step (or checkpoint) at which a tracked
-- quantity first crosses its threshold, and the step from which it stays across to the end.
--
--   local onsets = require "outlierlab.judge.onsets"
--   local o = onsets.of(curve, { sink_rate = 0.5 })     -- curve: { {step =, sink_rate =, ...}, ... }
--   o.sink_rate = { tracked = true, first = 120, held = 160, final = 0.5, threshold = 0.5 }
--   onsets.table(rows) -> markdown lines: rows = { {label =, seed =, curve =}, ... }
--
-- The phenomena and their default thresholds (onsets.THRESHOLDS; every one "≥"):
--   sink_rate      Gu et al.'s share of heads whose mean attention on the first token exceeds 0.3:
--                  ≥ 0.5 (half the heads; OLMo-1B's checkpoints jump from 0.07 to 0.70)
--   massive_ratio  top-1 / median |h| at a sink token, largest over layers: ≥ 100 (the organism's
--                  threshold, judge/thresholds)
--   resid_share    the largest top-3 share of one dimension of h (measure/residual): ≥ 0.9
-- first: the first point at or above the threshold; held: the first point from which every later
-- point is at or above it (nil when the last one is not); final: the last point's value; tracked:
-- whether any point has the quantity (curves recorded before it existed do not). Points are taken
-- in step order; NaN values count as below.
local M = {}

M.THRESHOLDS = { sink_rate = 0.5, massive_ratio = 100, resid_share = 0.9 }
M.ORDER = { "sink_rate", "massive_ratio", "resid_share" }
M.LABEL = { sink_rate = "sink rate", massive_ratio = "massive ratio", resid_share = "residual sink" }

function M.of(curve, thresholds)
  if type(curve) ~= "table" then error("onsets.of: curve must be a list of points { step =, ... }", 2) end
  local th = {}
  for k, v in pairs(M.THRESHOLDS) do th[k] = v end
  for k, v in pairs(thresholds or {}) do
    if M.THRESHOLDS[k] == nil then error("onsets.of: unknown phenomenon '" .. tostring(k) .. "'", 2) end
    th[k] = v
  end
  local pts = {}
  for i, p in ipairs(curve) do
    if type(p.step) ~= "number" then error(string.format("onsets.of: point %d has no step", i), 2) end
    pts[i] = p
  end
  table.sort(pts, function(a, b) return a.step < b.step end)
  local out = {}
  for k, thr in pairs(th) do
    local r = { threshold = thr, tracked = false }
    for _, p in ipairs(pts) do
      local v = p[k]
      if type(v) == "number" then
        r.tracked = true
        r.final = v
        if v >= thr then
          if not r.first then r.first = p.step end
          if not r.held then r.held = p.step end
        else
          r.held = nil
        end
      end
    end
    out[k] = r
  end
  return out
end

-- "120 (held 160)", "160", "—" (never), "n/a" (not tracked)
function M.cell(r)
  if not r.tracked then return "n/a" end
  if not r.first then return "—" end
  if r.held == r.first then return tostring(r.first) end
  return r.held and string.format("%d (held %d)", r.first, r.held) or string.format("%d (lost)", r.first)
end

-- rows = { {label =, seed =, curve =, thresholds =}, ... } -> markdown lines of the onset table
function M.table(rows)
  local lines = { "| model | seed | " .. table.concat((function()
      local h = {}
      for i, k in ipairs(M.ORDER) do h[i] = string.format("%s ≥ %g", M.LABEL[k], M.THRESHOLDS[k]) end
      return h
    end)(), " | ") .. " | steps |",
    "|---|---|" .. string.rep("---|", #M.ORDER) .. "---|" }
  for _, row in ipairs(rows) do
    local o = M.of(row.curve, row.thresholds)
    local cells = { row.label, tostring(row.seed or "") }
    for _, k in ipairs(M.ORDER) do cells[#cells + 1] = M.cell(o[k]) end
    local last = row.curve[#row.curve]
    cells[#cells + 1] = last and tostring(last.step) or "0"
    lines[#lines + 1] = "| " .. table.concat(cells, " | ") .. " |"
  end
  return lines
end

return M
