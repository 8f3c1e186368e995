-- test_summary — summary.md reads top down in half a minute (lua/outlierlab/runner/report.lua):
--   * numbers as a person writes them: the shortest of %.15g/%.16g/%.17g that reads back equal;
--   * the verdict is the first line after the title, then one line per criterion, the unmet
--     ones first, from s.criteria or from the "met: …" / "not met: …" items of the notes (which
--     are then said once, not twice);
--   * the settings are a Markdown table, an imported model's with its note.
local t = require "tap"
local report = require "outlierlab.runner.report"
local fs = require "outlierlab.util.fs"

local hn = report.human_number
t.is(hn(0.1), "0.1", "0.1 is written 0.1 (not 0.10000000000000001)")
t.is(hn(0.1 + 0.2), "0.30000000000000004", "0.1 + 0.2 needs its 17 digits to read back")
t.is(hn(1 / 3), "0.3333333333333333", "1/3: 16 digits read back, so not 17")
t.is(tonumber(hn(1 / 3)), 1 / 3, "... and they do")
t.is(hn(3000), "3000", "an integer without a point")
t.is(hn(-2), "-2", "a negative integer")
t.is(hn(1e-5), "1e-05", "1e-5 as %g writes it")
t.is(hn(6e-4), "0.0006", "6e-4")
t.is(hn(2 ^ 60), "1.152921504606847e+18", "an integer beyond 2^53 by %g, in the 16 digits that read back")
t.is(tonumber(hn(2 ^ 60)), 2 ^ 60, "... that reads back equal")
t.is(hn(0 / 0), "NaN", "NaN in words")
t.is(hn(1 / 0), "∞", "infinity")
for _, x in ipairs { 0.1, 0.7, 1 / 7, math.pi, 1e-300, 123456.789, 2.5e-7, 0.95 } do
  t.is(tonumber(hn(x)), x, "reads back equal: " .. hn(x))
end
t.is(report.human_value({ 1, 0.5, "a" }), "1, 0.5, a", "a list, comma-separated")
t.is(report.human_value({ b = 0.1, a = true }), "{a = true, b = 0.1}", "a map in key order")
t.is(report.human_value("x|y"), "x\\|y", "a '|' escaped for the table")

-- the criteria from the notes' items (experiments/so-fig3.lua writes its margins so)
local notes = "Criterion (with margins): outlier tokens at this τ, ≥ 50 % of them initial, and the last layer's top-1 ≤ 0.5 × its peak. " ..
  "met: outlier tokens at τ = 100: 12 (needs ≥ 1); not met: 25 % of the outlier tokens initial/weak/delimiter (needs ≥ 50 %); " ..
  "not met: last layer's top-1 = 0.91 × the peak (needs ≤ 0.5). At the looser τ/4 = 25: 40 tokens."
local failed, met, left = report.criteria{ notes = notes }
t.is(#failed, 2, "two criteria not met")
t.is(failed[1], "25 % of the outlier tokens initial/weak/delimiter (needs ≥ 50 %)", "the first unmet one, with its margin")
t.is(failed[2], "last layer's top-1 = 0.91 × the peak (needs ≤ 0.5)", "the second, its point kept (0.91, 0.5)")
t.is(#met, 1, "one met")
t.is(met[1], "outlier tokens at τ = 100: 12 (needs ≥ 1)", "the met one")
t.is(left, "Criterion (with margins): outlier tokens at this τ, ≥ 50 % of them initial, and the last layer's top-1 ≤ 0.5 × its peak. " ..
  "At the looser τ/4 = 25: 40 tokens.", "the notes keep everything but the items")
local f2, m2, l2 = report.criteria{ notes = "The permeable met: nothing here. Plain text; no items." }
t.is(#f2 + #m2, 0, "no item where no piece starts with met: or not met:")
t.is(l2, "The permeable met: nothing here. Plain text; no items.", "such notes unchanged")
local f3, m3 = report.criteria{ criteria = { { met = true, text = "a (needs ≥ 1)" }, { met = false, text = "b = 0.2 (needs ≥ 0.5)" } },
                                notes = "met: not read when s.criteria is given." }
t.ok(#f3 == 1 and f3[1] == "b = 0.2 (needs ≥ 0.5)" and #m3 == 1 and m3[1] == "a (needs ≥ 1)", "s.criteria, structured, wins over the notes")

-- a whole summary.md
local tmp = os.tmpname()
os.remove(tmp)
fs.mkdir_p(tmp)
local function run_of(cfg)
  return { id = "fake", profile = "default", seed = 0, cfg = cfg, dir = tmp, files = { tmp .. "/fake.nc", tmp .. "/fake.dat" },
           exp = { title = "A fake experiment", source = { paper = "XY (2026)", figure = "Fig. 1", claim = "Things hold." } } }
end
report.write_summary(run_of{ alpha = 0.1, steps = 3000, lr = 6e-4, name = "llama", tau = 1 / 3 },
  { holds = false, paper = "a number", reproduced = "another", notes = notes },
  { { name = "train", seconds = 1.5 } }, {}, nil)
local md = t.slurp(tmp .. "/summary.md") or ""
local lines = {}
for l in md:gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
t.is(lines[3], "Verdict: the claim **does not hold** at this scale.", "the verdict right under the title")
t.is(lines[5], "- **Not met**: 25 % of the outlier tokens initial/weak/delimiter (needs ≥ 50 %)", "then the failed criterion, one line")
t.is(lines[6], "- **Not met**: last layer's top-1 = 0.91 × the peak (needs ≤ 0.5)", "and the next")
t.is(lines[7], "- Met: outlier tokens at τ = 100: 12 (needs ≥ 1)", "then the met one")
t.ok(md:find("| setting | value |\n|---|---|\n| alpha | 0.1 |\n| lr | 0.0006 |\n| name | llama |\n| steps | 3000 |\n| tau | 0.3333333333333333 |\n", 1, true),
     "the settings as a table, numbers as written by hand", md)
t.ok(not md:find("0.10000000000000001", 1, true) and not md:find('"alpha"', 1, true), "no JSON and no binary noise", md)
local _, n_items = md:gsub("needs ≥ 50 %%", "")
t.is(n_items, 1, "each criterion said once")
t.ok(md:find("XY (2026), Fig. 1: Things hold.", 1, true) and md:find("- Stages: train 1.5 s", 1, true)
     and md:find("- Files: `fake.nc`\n", 1, true), "claim, stages and files still there", md)
t.ok(md:find("## Claim", 1, true) < md:find("## Settings", 1, true) and md:find("## Settings", 1, true) < md:find("## Run", 1, true),
     "claim, then settings, then how it was run")

-- quick profile: no verdict; the criteria are listed as measured, not bold
report.write_summary(run_of{ alpha = 0.1 }, { no_verdict = true, criterion_met = false, notes = notes }, {}, {}, nil)
md = t.slurp(tmp .. "/summary.md") or ""
t.ok(md:find("Verdict: **no verdict (quick profile", 1, true) and md:find("\n- Not met: 25 %", 1, true) and not md:find("**Not met**", 1, true),
     "quick: no verdict, the criteria reported unbolded", md)

-- an imported model: its note above the analysis settings
report.write_summary(run_of{ alpha = 0.1, steps = 10 }, { holds = true, settings_note = "Imported model m; nothing trained.", settings = { seq_len = 32 } }, {}, {}, nil)
md = t.slurp(tmp .. "/summary.md") or ""
t.ok(md:find("## Settings\n\nImported model m; nothing trained.\n\n| setting | value |\n|---|---|\n| seq_len | 32 |\n\n## Run", 1, true),
     "an imported model's note and its own settings, not the profile's", md)

os.execute("rm -rf " .. tmp)
return t.done()
