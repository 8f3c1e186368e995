-- judge/verdict — a claim judged by criteria with margins (docs/reference/experiments.md, "The
-- verdict is computed from the data"): each criterion names a measured value, its threshold and
-- the direction it must lie in; the claim holds when every criterion is met, does not hold when
-- one is not, and is inconclusive (nil) when a value is undefined or a precondition is not met.
--
--   local verdict = require "outlierlab.judge.verdict"
--   local v = verdict.judge{
--     { "outlier tokens", n, ">=", 1, fmt = "%d", precondition = true },   -- absent: inconclusive
--     { "share initial/weak/delimiter", share, ">=", 0.9, scale = 100, unit = " %" },
--     { "outlier channels", k, "<=", 4, fmt = "%d" },
--   }
--   v.holds   -- true | false | nil
--   v.text    -- "met: share initial/weak/delimiter = 93 % (needs ≥ 90 %); not met: ..."
--   v.lines   -- one line per criterion, v.failed the names of the criteria not met
--
-- A criterion: { name, value, direction (">=", ">", "<=", "<"), threshold, fmt = "%.2f" (how the
-- numbers are written), scale = 1 (multiplies both, e.g. 100 for a percentage), unit = "",
-- precondition = false (not met: the claim cannot be tested, inconclusive rather than false) }.
-- A value given as a boolean is met when true (name says what), without numbers.
local M = {}

local SYMBOL = { [">="] = "≥", [">"] = ">", ["<="] = "≤", ["<"] = "<" }
local TEST = {
  [">="] = function(a, b) return a >= b end, [">"] = function(a, b) return a > b end,
  ["<="] = function(a, b) return a <= b end, ["<"] = function(a, b) return a < b end,
}

-- one criterion: "met" | "not met" | "undefined", and its text
function M.check(c)
  local name, value, dir, thr = c[1] or c.name, c[2], c[3] or c.direction, c[4] or c.threshold
  if type(name) ~= "string" then error("verdict: a criterion needs a name (its first element)", 3) end
  if type(value) == "boolean" then return value and "met" or "not met", name end
  if not TEST[dir] then error("verdict: criterion '" .. name .. "': direction must be >=, >, <= or <, got " .. tostring(dir), 3) end
  if type(thr) ~= "number" then error("verdict: criterion '" .. name .. "': threshold must be a number", 3) end
  local fmt, scale, unit = c.fmt or "%.2f", c.scale or 1, c.unit or ""
  local need = string.format("needs %s " .. fmt .. "%s", SYMBOL[dir], thr * scale, unit)
  if type(value) ~= "number" or value ~= value then
    return "undefined", string.format("%s undefined (%s)", name, need)
  end
  local text = string.format("%s = " .. fmt .. "%s (%s)", name, value * scale, unit, need)
  return TEST[dir](value, thr) and "met" or "not met", text
end

-- the verdict of a list of criteria (see above)
function M.judge(criteria)
  local untestable, failed_any, undefined = false, false, false
  local lines, failed = {}, {}
  for _, c in ipairs(criteria) do
    local state, text = M.check(c)
    lines[#lines + 1] = state .. ": " .. text
    if state == "not met" then
      failed[#failed + 1] = c[1] or c.name
      if c.precondition then untestable = true else failed_any = true end
    elseif state == "undefined" then
      undefined = true
    end
  end
  -- a precondition not met: nothing to test; else a criterion not met decides; else an
  -- undefined value leaves it open
  local holds
  if untestable then holds = nil elseif failed_any then holds = false elseif undefined then holds = nil else holds = true end
  return { holds = holds, lines = lines, failed = failed, text = table.concat(lines, "; ") }
end

return M
