-- SO Fig. 24 — a TinyLLaMA-style model with the explicit context-aware scaling factor has no
-- systematic outliers (SO App. D.2).
--
-- Method: the LLaMA-style model of so-fig3 (experiment.llama_lm_spec) and the same spec with
-- only its attention changed to (e) context-aware scaling, S_c(x)·softmax(s)·V with
-- S_c(x) = 2·sigmoid(W_s x + b_s) per token and head (SO Table 2); SO Fig. 1's four views of each
-- (outlierlab.figure.overview) side by side on the same held-out sequence.
local overview = require "outlierlab.figure.overview"
local figure = require "outlierlab.figure"
local recipes = require "outlierlab.recipes"

local FIG = overview.declare("TinyLLaMA-style, default against context-aware scaling (SO Fig. 24, reproduced)")
local VARIANTS = { "softmax", "ca_scale" }
local LABELS = { softmax = "(a) default softmax", ca_scale = "(e) context-aware scaling" }

-- the shared spec, with only the attention changed
local function spec_of(cfg, var)
  local spec = recipes.llama_lm_spec(cfg)
  if var ~= "softmax" then spec.model.overrides.attention = { kind = var } end
  return spec
end

local function train(run)
  return run:sweep(VARIANTS, function(var)
    local spec = spec_of(run.cfg, var)
    return { variant = var, spec = spec, handle = recipes.fit(run, spec) }
  end)
end

local function analyze(run)
  return overview.analyze_sweep(run, function(v) return LABELS[v] end, recipes.load)
end

local function summary(run)
  local v = figure.values(FIG, run.out.analyze)
  local holds, why = overview.prevents(v)
  return {
    paper = "TinyLLaMA-120M with the explicit context-aware scaling factor: the systematic outliers are completely eliminated",
    reproduced = "default: " .. overview.describe(v, 1) .. "; context-aware scaling: " .. overview.describe(v, 2),
    holds = holds,
    notes = why,
  }
end

return {
  id = "so-fig24",
  title = "TinyLLaMA-style model with context-aware scaling against the default: x_down, W_down, h and A",
  source = { paper = "SO (An et al. 2025)", figure = "Fig. 24 (App. D.2)",
             claim = "With the explicit context-aware scaling factor, a TinyLLaMA model has no systematic outliers." },
  profiles = recipes.profiles_with(recipes.LLAMA_LM_PROFILES, { quick = { tau = 10 }, default = { tau = 100 }, paper = { tau = 1000 } }),
  stages = figure.stages(train, analyze, FIG),
  summary = summary,
}
