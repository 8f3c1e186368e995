-- SO Fig. 1 — systematic outliers in one model, in four places: activations in the
-- down-projection inputs x_down and the layer outputs h, weights in W_down, attention in A.
--
-- Method (SO §3, Fig. 1): the LLaMA-style model of so-fig3 (same settings, one training); on
-- one held-out sequence, the view of each place where SO finds outliers, at the layer where
-- each is strongest (outlierlab.figure.overview): |x_down| and |h| over tokens and channels, |W_down|
-- over output and input channels, and the attention map of the head that puts the largest
-- share on the initial token. Outlier counts use SO's rule |x| > τ·mean|x|. With --model=DIR
-- --text=FILE the same view of an imported model reproduces SO Fig. 13–22 (other model families
-- and fine-tuned models).
local overview = require "outlierlab.figure.overview"
local figure = require "outlierlab.figure"
local views = require "outlierlab.figure.views"
local batcher = require "outlierlab.data.batcher"
local recipes = require "outlierlab.recipes"

local model_spec = recipes.llama_lm_spec   -- shared with so-fig3: one trained model
local FIG = overview.declare("Systematic outliers in x_down, W_down, h and A (SO Fig. 1, reproduced)")

local function train(run) return recipes.fit(run, model_spec(run.cfg)) end

local function analyze(run)
  local cfg, spec = run.cfg, model_spec(run.cfg)
  local corpus = batcher.corpus(spec.data, run)
  local ctx, m = recipes.load(spec, run.out.train)
  local label = run.pretrained and run.pretrained.name or "LLaMA-style (" .. cfg.preset .. ")"
  return overview.data({ { label = label, o = overview.measure(ctx, m, corpus, spec, cfg.tau) } }, cfg.tau)
end

local function summary(run)
  local a = run.out.analyze
  local v = figure.values(FIG, a)
  local holds = v.h_outliers[1] > 0 and v.x_down_outliers[1] > 0 and v.sink_share[1] > 0.5
  return {
    paper = "LLaMA2-7B: activation outliers in x_down (layer 2: thousands × the mean) and h (from layer 2 on), weight outliers in W_down (layers 2, 31, 32), attention outliers at the initial token in most heads",
    reproduced = overview.describe(v, 1) .. string.format(" (τ = %g)", a.attrs.tau),
    holds = holds,
    notes = "Criterion: elements above τ·mean|x| in both h and x_down of one held-out sequence, and a head that puts more than half of its attention on the initial token." ..
      ((v.h_outliers[1] == 0 and v.x_down_outliers[1] == 0) and " This model has no element above τ·mean|x| on this sequence: the heatmaps show magnitudes without outliers." or ""),
  }
end

return {
  id = "so-fig1",
  title = "Systematic outliers in one model: x_down, W_down, h and the attention map",
  source = { paper = "SO (An et al. 2025)", figure = "Fig. 1 (and Fig. 13–22 with --model)",
             claim = "Outliers appear systematically in four places of one model: activation outliers in x_down and h, weight outliers in W_down, attention outliers at the initial token." },
  profiles = recipes.profiles_with(recipes.LLAMA_LM_PROFILES, { quick = { tau = 10 }, default = { tau = 100 }, paper = { tau = 1000 } }),
  stages = figure.stages(train, analyze, FIG, { { "views", views.stage{ spec = model_spec } } }),
  summary = summary,
}
