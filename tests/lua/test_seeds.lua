-- test_seeds — outlierlab.judge.seeds, the rule by which a difference between variants counts
-- (|mean_a − mean_b| > sd_a + sd_b over at least 2 seeds each), on hand-computed cases.
local t = require "tap"
local seeds = require "outlierlab.judge.seeds"

local function near(a, b, msg) t.ok(math.abs(a - b) <= 1e-12, string.format("%s: %.15g vs %.15g", msg, a, b)) end

t.is(table.concat(seeds.list({ n_seeds = 3 }), ","), "1,2,3", "list: seeds 1..n_seeds")
t.is(table.concat(seeds.list({ n_seeds = 2, seed = 5 }), ","), "5,6", "list: from cfg.seed on")
t.is(table.concat(seeds.list({}), ","), "1", "list: one seed by default")

-- {1, 2, 3}: mean 2, sample sd 1; {4, 6}: mean 5, sd √2
local mu, sd, n = seeds.stats({ 1, 2, 3 })
near(mu, 2, "stats: mean") near(sd, 1, "stats: sample sd (n − 1)") t.is(n, 3, "stats: count")
mu, sd = seeds.stats({ 7 })
t.ok(mu == 7 and sd == 0, "stats: one value has sd 0")
mu = seeds.stats({ 1, 0 / 0 })
t.ok(mu ~= mu, "stats: an undefined value makes the mean undefined")

local c = seeds.compare({ 1, 2, 3 }, { 4, 6 })
near(c.diff, -3, "compare: difference of the means") near(c.spread, 1 + math.sqrt(2), "compare: spread sd_a + sd_b")
t.is(c.sign, -1, "compare: 3 > 1 + √2, a below b beyond the spread")
t.is(seeds.compare({ 1, 2, 3 }, { 2.5, 4.5 }).sign, 0, "compare: |2 − 3.5| = 1.5 < 1 + √2: within the spread")
t.is(seeds.compare({ 10, 11 }, { 1, 2 }).sign, 1, "compare: a above b beyond the spread")
t.is(seeds.compare({ 1 }, { 5 }).sign, nil, "compare: one seed: the spread is unknown, no sign")
t.is(seeds.compare({ 1, 0 / 0 }, { 5, 6 }).sign, nil, "compare: an undefined mean: no sign")
t.is(seeds.below({ 1, 2, 3 }, { 4, 6 }), true, "below: true beyond the spread")
t.is(seeds.below({ 1, 2, 3 }, { 2.5, 4.5 }), nil, "below: nil within the spread")

t.is(seeds.outcome(c, -1), "as claimed", "outcome: claimed below, found below")
t.is(seeds.outcome(c, 1), "against", "outcome: claimed above, found below")
t.is(seeds.outcome(seeds.compare({ 1 }, { 5 }), -1), "unresolved", "outcome: one seed is unresolved")
t.is(seeds.verdict({ "as claimed", "as claimed" }), true, "verdict: all as claimed")
t.is(seeds.verdict({ "as claimed", "unresolved" }), nil, "verdict: one unresolved: inconclusive")
t.is(seeds.verdict({ "unresolved", "against" }), false, "verdict: one against: does not hold")
t.is(seeds.verdict({}), nil, "verdict: nothing compared: inconclusive")
-- fraction: at most half of a baseline, by the seed rule
t.is(seeds.fraction({ 0.4, 0.5 }, { 1.7, 1.9 }, 0.5), "as claimed", "fraction: 0.45 ± 0.07 vs half of 1.8 ± 0.14 (0.9 ± 0.07): below beyond the spreads")
t.is(seeds.fraction({ 0.048, 0.07, 0.026 }, { 0.038, 0.06, 0.016 }, 0.5), "unresolved", "fraction: QT Table 2's BERT case, 127 % kept but within the spreads of half: unresolved")
t.is(seeds.fraction({ 1.5, 1.6 }, { 1.7, 1.9 }, 0.5), "against", "fraction: 1.55 vs 0.9: above half beyond the spreads")
t.is(seeds.fraction({ 0.4 }, { 1.7, 1.9 }, 0.5), "unresolved", "fraction: one seed: unresolved")


t.is(seeds.pm({ 1, 2, 3 }, "%.2f"), "2.00 ± 1.00", "pm: mean ± sd")
t.is(seeds.pm({ 4 }, "%.2f"), "4.00", "pm: one value alone")
t.is(seeds.pm_of(2, 1, 3, "%.1f"), "2.0 ± 1.0", "pm_of: from stored mean and sd")
t.is(seeds.word(c, "lower", "higher"), "lower", "word: beyond the spread")
t.is(seeds.word(seeds.compare({ 1, 2, 3 }, { 2.5, 4.5 })), "within the seed spread", "word: within")
t.is(table.concat(seeds.scale({ 2, 4 }, 0.5), ","), "1,2", "scale")

-- trained: the clipped BERT that never trained (ppl 86 against 10.9) and one that did
local ok, why = seeds.trained({ 86.0, 85.2, 86.9 }, { 10.9, 10.4, 11.4 }, "ppl")
t.ok(ok == false and why:find("did not train", 1, true) and why:find("86.03", 1, true), "trained: 86 vs 10.9 ppl did not train (" .. why .. ")")
t.is((seeds.trained({ 16.0 }, { 10.9 }, "ppl")), true, "trained: 1.47 × vanilla's perplexity still counts as trained")
t.is((seeds.trained({ 16.5 }, { 10.9 }, "ppl")), false, "trained: 1.51 × does not")
t.is((seeds.trained({ 71 }, { 90 }, "acc")), true, "trained: 19 points below vanilla's top-1 counts as trained")
t.is((seeds.trained({ 69 }, { 90 }, "acc")), false, "trained: 21 points below does not")
t.is((seeds.trained({ 0 / 0 }, { 10 }, "ppl")), false, "trained: a NaN metric is not trained")

return t.done()
