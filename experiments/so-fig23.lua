-- SO Fig. 23 — no systematic outliers with sigmoid attention (SO App. D.1).
--
-- Method: the GPT-2-style models of so-fig11 with default softmax attention and with sigmoid
-- attention, sigmoid(s + b)·V with b = −log T (the same specs through papers.so_spec, so the same
-- cached models); SO Fig. 1's four views of each (outlierlab.figure.overview) side by side on the same
-- held-out sequence. SO finds the sigmoid model free of the outliers the softmax model has.
local overview = require "outlierlab.figure.overview"
local figure = require "outlierlab.figure"
local papers = require "outlierlab.recipes.papers"
local recipes = require "outlierlab.recipes"

local VARIANTS = { "softmax", "sigmoid" }
local FIG = overview.declare("Softmax against sigmoid attention: x_down, W_down, h and A (SO Fig. 23, reproduced)")

local function train(run)
  return run:sweep(VARIANTS, function(var)
    local spec = papers.so_spec(run.cfg, var, 1)
    return { variant = var, spec = spec, handle = recipes.fit(run, spec) }
  end)
end

local function analyze(run)
  return overview.analyze_sweep(run, function(v) return papers.SO_LABELS[v] end)
end

local function summary(run)
  local a = run.out.analyze
  local v = figure.values(FIG, a)
  local holds, why = overview.prevents(v)
  return {
    paper = "GPT-2 with sigmoid attention: no massive activations, no weight or attention outliers (against top-1 |h| in the thousands with softmax)",
    reproduced = "softmax: " .. overview.describe(v, 1) .. "; sigmoid: " .. overview.describe(v, 2),
    holds = holds,
    notes = why,
  }
end

return {
  id = "so-fig23",
  title = "Sigmoid attention against softmax: x_down, W_down, h and the attention map",
  source = { paper = "SO (An et al. 2025)", figure = "Fig. 23 (App. D.1)",
             claim = "Sigmoid attention eliminates the systematic outliers that softmax attention produces." },
  profiles = recipes.single_seed(papers.so_profiles({ quick = { tau = 10 }, default = { tau = 100 }, paper = { tau = 1000 } })),
  stages = figure.stages(train, analyze, FIG),
  summary = summary,
}
