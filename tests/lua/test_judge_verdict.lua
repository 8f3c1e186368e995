-- test_judge_verdict — criteria with margins (outlierlab.judge.verdict) on hand-made cases:
-- every criterion met holds, one not met does not, an undefined value or a precondition not met
-- is inconclusive, and the text carries each value with what it needed.
local t = require "tap"
local verdict = require "outlierlab.judge.verdict"

local v = verdict.judge{
  { "share", 0.93, ">=", 0.9, scale = 100, fmt = "%.0f", unit = " %" },
  { "channels", 3, "<=", 4, fmt = "%d" },
}
t.is(v.holds, true, "all criteria met: holds")
t.is(v.text, "met: share = 93 % (needs ≥ 90 %); met: channels = 3 (needs ≤ 4)", "the text names each value and its margin")

v = verdict.judge{ { "share", 0.89, ">=", 0.9 }, { "channels", 3, "<=", 4, fmt = "%d" } }
t.is(v.holds, false, "one criterion not met: does not hold")
t.is(v.failed[1], "share", "and it is named")
t.is(v.lines[1], "not met: share = 0.89 (needs ≥ 0.90)", "the failed line")

t.is(verdict.judge{ { "ratio", 0.5, "<", 0.5 } }.holds, false, "a strict bound: equal is not met")
t.is(verdict.judge{ { "ratio", 0.5, "<=", 0.5 } }.holds, true, "a bound with equality: equal is met")

v = verdict.judge{ { "ratio", 0 / 0, "<=", 0.5 }, { "n", 2, ">=", 1 } }
t.is(v.holds, nil, "an undefined value: inconclusive")
t.is(v.lines[1], "undefined: ratio undefined (needs ≤ 0.50)", "and said so")
t.is(verdict.judge{ { "ratio", 0 / 0, "<=", 0.5 }, { "n", 0, ">=", 1 } }.holds, false,
     "a criterion not met decides even beside an undefined one")

v = verdict.judge{ { "outliers", 0, ">=", 1, fmt = "%d", precondition = true }, { "share", 0.1, ">=", 0.9 } }
t.is(v.holds, nil, "a precondition not met: nothing to test, inconclusive (not false)")
t.is(verdict.judge{ { "found", true }, { "share", 0.95, ">=", 0.9 } }.holds, true, "a boolean criterion, met")
t.is(verdict.judge{ { "found", false } }.lines[1], "not met: found", "a boolean criterion, not met")
t.throws(function() verdict.judge{ { "x", 1, "=>", 2 } } end, "direction must be", "a bad direction is an error naming it")
return t.done()
