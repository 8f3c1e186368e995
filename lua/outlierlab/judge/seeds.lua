-- seeds — when a difference between two variants counts (docs/reference/experiments.md, "Seeds and the
-- verdict"). Every comparison between variants trains each variant with cfg.n_seeds seeds and
-- reports mean ± sample standard deviation; the verdicts use one rule:
--
--   a difference counts only when |mean_a − mean_b| > sd_a + sd_b, with at least 2 seeds on
--   each side (sd: sample standard deviation, n − 1); otherwise it is within the seed spread.
--
-- With one seed the spread is unknown and no difference counts (the verdict is inconclusive).
--
--   local seeds = require "outlierlab.judge.seeds"
--   for _, s in ipairs(seeds.list(cfg)) do ... end          -- cfg.seed (1) .. cfg.seed + cfg.n_seeds - 1
--   seeds.members({ "softmax", "ca_scale" }, cfg)            -- every {variant =, seed =} pair
--   local mu, sd, n = seeds.stats(xs)                        -- NaN mean when a value is NaN
--   local c = seeds.compare(xs, ys)                          -- { sign = -1 | 0 | 1 | nil, diff, spread, ... }
--   seeds.below(xs, ys)   -- true: xs below ys beyond the spread, false: above it, nil: within it
--   seeds.verdict{ seeds.outcome(c1, -1), ... }   -- true / false / nil from "as claimed" / "against" / "unresolved"
--   seeds.pm(xs, "%.3g")  -- "12.3 ± 0.4" (one value: "12.3")
--   seeds.trained(ppl_variant, ppl_vanilla, "ppl")   -- false, "did not train: …" when far from vanilla
--   seeds.fraction(xs, base, 0.5)   -- "as claimed" / "against" / "unresolved": mean(xs) below / above
--                                   -- 0.5 × mean(base) beyond sd(xs) + 0.5 × sd(base)
local M = {}

M.RULE = "a difference between two variants counts only when |mean_a − mean_b| > sd_a + sd_b " ..
  "(sample standard deviations over at least 2 seeds each); a smaller one is within the seed spread"

-- the seeds of a profile: cfg.seed (default 1) and the next ones, cfg.n_seeds in all (at least one)
function M.list(cfg)
  local out = {}
  local first = cfg.seed or 1
  for i = 1, math.max(1, cfg.n_seeds or 1) do out[i] = first + i - 1 end
  return out
end

-- every (variant, seed) pair, variant by variant: { {variant =, seed =}, ... } (the models of a
-- comparison; run:sweep spreads them over MPI ranks)
function M.members(variants, cfg)
  local out = {}
  for _, v in ipairs(variants) do
    for _, s in ipairs(M.list(cfg)) do out[#out + 1] = { variant = v, seed = s } end
  end
  return out
end

-- mean, sample standard deviation (n − 1; 0 for one value; NaN for none) and count of a list;
-- a NaN value (an undefined quantity) makes the mean and sd NaN
function M.stats(xs)
  local n = #xs
  if n == 0 then return 0 / 0, 0 / 0, 0 end
  local s = 0
  for _, x in ipairs(xs) do s = s + x end
  local mu = s / n
  if n == 1 then return mu, mu == mu and 0 or 0 / 0, 1 end
  local v = 0
  for _, x in ipairs(xs) do v = v + (x - mu) ^ 2 end
  return mu, math.sqrt(v / (n - 1)), n
end

-- Compare two lists of per-seed values by the rule: sign 1 (a above b), -1 (a below b), 0 (within
-- the spread), nil (undefined: a NaN mean or fewer than 2 seeds on a side).
function M.compare(a, b)
  local ma, sa, na = M.stats(a)
  local mb, sb, nb = M.stats(b)
  local c = { mean_a = ma, sd_a = sa, n_a = na, mean_b = mb, sd_b = sb, n_b = nb, diff = ma - mb, spread = sa + sb }
  if ma ~= ma or mb ~= mb or na < 2 or nb < 2 then return c end
  if math.abs(c.diff) > c.spread then c.sign = c.diff > 0 and 1 or -1 else c.sign = 0 end
  return c
end

-- true: a below b beyond the spread; false: a above b beyond it; nil: within it or undefined
function M.below(a, b)
  local s = M.compare(a, b).sign
  if s == -1 then return true end
  if s == 1 then return false end
  return nil
end

-- the outcome of a comparison for a claim that a is below (want = -1) or above (want = 1) b:
-- "as claimed", "against" (the other way, beyond the spread) or "unresolved"
function M.outcome(c, want)
  if c.sign == want then return "as claimed" end
  if c.sign == -want then return "against" end
  return "unresolved"
end

-- the words for a comparison of a against b: below / above (beyond the spread), "within the
-- seed spread", "undefined" or "one seed: spread unknown"
function M.word(c, below, above)
  if c.sign == -1 then return below or "below" end
  if c.sign == 1 then return above or "above" end
  if c.sign == 0 then return "within the seed spread" end
  if c.mean_a ~= c.mean_a or c.mean_b ~= c.mean_b then return "undefined" end
  return "one seed: spread unknown"
end

-- the verdict of a list of outcomes (M.outcome): false when one is against the claim, true when
-- all are as claimed, nil (inconclusive) otherwise
function M.verdict(outcomes)
  local all = #outcomes > 0
  for _, o in ipairs(outcomes) do
    if o == "against" then return false end
    if o ~= "as claimed" then all = false end
  end
  return all or nil
end

-- Is a variant's quantity (xs) at most a fraction f (> 0) of a baseline's (base), by the rule above?
-- The comparison of xs with the scaled baseline f·base (mean f·mean(base), sd f·sd(base)):
-- "as claimed" below it beyond the spreads, "against" above it, else "unresolved"
function M.fraction(xs, base, f)
  local scaled = {}
  for i, x in ipairs(base) do scaled[i] = f * x end
  return M.outcome(M.compare(xs, scaled), -1)
end

-- "mean ± sd" (or the single value) with fmt
function M.pm(xs, fmt)
  fmt = fmt or "%.3g"
  local mu, sd, n = M.stats(xs)
  if n <= 1 then return string.format(fmt, mu) end
  return string.format(fmt .. " ± " .. fmt, mu, sd)
end

-- the same from a stored mean, sd and seed count (the numbers of the NetCDF file)
function M.pm_of(mu, sd, n, fmt)
  fmt = fmt or "%.3g"
  if (n or 1) <= 1 or sd ~= sd then return string.format(fmt, mu) end
  return string.format(fmt .. " ± " .. fmt, mu, sd)
end

-- Did a variant train at all? A variant whose full-precision metric is far from vanilla's did
-- not learn what vanilla learned (e.g. clipped softmax whose clip zeroes every attention
-- probability from initialisation), and its outlier numbers say nothing about the variant:
-- comparisons with it are unresolved. kind "ppl" (lower is better): trained when the mean
-- perplexity is at most M.TRAINED_PPL_RATIO × vanilla's; kind "acc" (top-1 %, higher is better):
-- when it is at most M.TRAINED_ACC_DROP points below vanilla's. Returns trained, and a phrase.
M.TRAINED_PPL_RATIO, M.TRAINED_ACC_DROP = 1.5, 20
function M.trained(variant, vanilla, kind)
  local mv, mb = M.stats(variant), M.stats(vanilla)
  if mv ~= mv or mb ~= mb then return false, "has no held-out metric to judge it by" end
  if kind == "acc" then
    if mv >= mb - M.TRAINED_ACC_DROP then return true, "" end
    return false, string.format("did not train: top-1 %.3g %% against vanilla's %.3g %%", mv, mb)
  end
  if mv <= M.TRAINED_PPL_RATIO * mb then return true, "" end
  return false, string.format("did not train: perplexity %.4g against vanilla's %.4g", mv, mb)
end

-- element-wise helpers over per-seed lists
function M.map(xs, f)
  local out = {}
  for i, x in ipairs(xs) do out[i] = f(x, i) end
  return out
end
function M.scale(xs, k) return M.map(xs, function(x) return k * x end) end

return M
