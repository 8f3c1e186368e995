-- SO Fig. 6 — attention outliers: keys that collect a large cumulative attention.
--
-- Method (SO §3, Fig. 6): the LLaMA-style model of so-fig3 (same settings, one training).
-- For every layer and head, the cumulative attention of key j over the queries of a
-- sequence is Â_j = Σ_i A_ij. A key is an attention outlier when Â_j > τ·mean_j Â_j (paper
-- rule). Each query row sums to 1, so mean Â = 1 and Â_j ≤ T: τ = 1000 can only flag keys
-- when T > 1000, hence τ is a setting of each profile (stated in the summary and the file).
-- The official code's rule, Â_j ≥ 0.1·T on the head-averaged map, is recorded alongside.
-- Count outliers per layer, per key token category and per (layer, head). The paper finds
-- attention outliers at the same tokens as the activation outliers: the initial token and
-- weak-semantic tokens.
local exp_runner = require "outlierlab.experiment"
local analysis = require "outlierlab.analysis"
local probes = require "outlierlab.probes"

local model_spec = exp_runner.llama_lm_spec   -- shared with so-fig3: one trained model

local function train(run) return exp_runner.train_model(run, model_spec(run.cfg)) end

local CATS = analysis.categories

local function analyze(run)
  local cfg, spec = run.cfg, model_spec(run.cfg)
  local corpus = exp_runner.corpus(spec.data, run)   -- --text with --model: the text in the model's tokens
  local ctx, m = exp_runner.load_model(spec, run.out.train)
  local la = analysis.LayerAttn{ T = cfg.seq_len, NH = m.cfg.n_head, rule = "tau_mean", tau = cfg.tau,
                                 frac = 0.1, category = corpus.category }
  local P = probes.new{ points = { "attn_probs" } }
  P:attach("attn_probs", la)
  exp_runner.probe_batches(ctx, m, P, corpus, spec, cfg.eval_batches)
  local res = la:result()
  if #res.layers == 0 then error("so-fig6: the model reported no attn_probs probe", 0) end
  local out = { layers = {}, per_layer = {}, code_per_layer = {}, heads = {}, by_category = { 0, 0, 0, 0 },
                code_by_category = { 0, 0, 0, 0 }, n_head = m.cfg.n_head, tau = cfg.tau, nseq = 0, total = 0, code_total = 0 }
  for i, l in ipairs(res.layers) do
    local r = res[l]
    out.layers[i] = l
    out.per_layer[i] = r.count
    out.code_per_layer[i] = r.code.count
    out.total = out.total + r.count
    out.code_total = out.code_total + r.code.count
    out.nseq = r.nseq
    out.heads[i] = {}
    for h = 1, m.cfg.n_head do out.heads[i][h] = r.per_head[h] and r.per_head[h].count or 0 end
    for j, c in ipairs(CATS) do
      out.by_category[j] = out.by_category[j] + r.by_category[c]
      out.code_by_category[j] = out.code_by_category[j] + r.code.by_category[c]
    end
  end
  return out
end

local function plot(run)
  local a = run.out.analyze
  local nc = run:netcdf()
  nc:dim("layer", #a.layers, a.layers, { long_name = "transformer layer (0-based)" })
  nc:dim("head", a.n_head, nil, { long_name = "attention head (0-based)" })
  nc:dim("category", 4, nil, { long_name = "key token category index: 0 initial, 1 delimiter, 2 weak-semantic, 3 other" })
  nc:var("attention_outliers", { "layer" }, a.per_layer, { long_name = "attention outlier keys (cumulative attention > tau mean), summed over heads and sequences", units = "1", type = "int" })
  nc:var("attention_outliers_code_rule", { "layer" }, a.code_per_layer, { long_name = "attention outlier keys by the official code's rule (head-averaged cumulative attention >= 0.1 T)", units = "1", type = "int" })
  nc:var("attention_outliers_by_head", { "layer", "head" }, a.heads, { long_name = "attention outlier keys per layer and head", units = "1", type = "int" })
  nc:var("attention_outliers_by_category", { "category" }, a.by_category, { long_name = "attention outlier keys by key token category", units = "1", type = "int" })
  nc:attr("tau", a.tau)
  nc:close()
  local lrows, crows = {}, {}
  for i, l in ipairs(a.layers) do lrows[i] = { l, a.per_layer[i] } end
  for j, c in ipairs(CATS) do crows[j] = { c, a.by_category[j] } end
  run:figure(run.id, "so-fig6", {
    { columns = { "layer", string.format("attention outliers (tau = %g)", a.tau) }, rows = lrows },
    { columns = { "category", "attention outliers" }, rows = crows },
    { matrix = a.heads },
  })
end

local function summary(run)
  local a = run.out.analyze
  local init_share = a.total > 0 and a.by_category[1] / a.total or 0
  local iw_share = a.total > 0 and (a.by_category[1] + a.by_category[3]) / a.total or 0
  local code_init = a.code_total > 0 and a.code_by_category[1] / a.code_total or 0
  return {
    paper = "GPT-2: attention outliers at the initial token and weak-semantic tokens, in most heads of the middle layers (τ = 1000 with T = 1024; code rule Â ≥ 0.1·T)",
    reproduced = string.format("%d attention outlier keys at τ = %g over %d sequences: %.0f %% initial token, %.0f %% initial or weak-semantic; code rule (≥ 0.1·T): %d keys, %.0f %% initial",
      a.total, a.tau, a.nseq, 100 * init_share, 100 * iw_share, a.code_total, 100 * code_init),
    holds = a.total > 0 and iw_share > 0.5,
    notes = "Criterion: at least one attention outlier at this τ and more than half of them at the initial token or weak-semantic tokens.",
  }
end

return {
  id = "so-fig6",
  title = "Attention outliers per layer, key token category and head in a LLaMA-style model",
  source = { paper = "SO (An et al. 2025)", figure = "Fig. 6",
             claim = "Attention outliers (keys with a large cumulative attention) sit at the initial token and weak-semantic tokens, the same tokens as the activation outliers." },
  profiles = exp_runner.profiles_with(exp_runner.LLAMA_LM_PROFILES, { quick = { tau = 5 }, default = { tau = 10 }, paper = { tau = 1000 } }),
  stages = { { "train", train }, { "analyze", analyze, cache = true }, { "plot", plot } },
  summary = summary,
}
