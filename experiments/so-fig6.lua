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
local analysis = require "outlierlab.measure.metrics"
local probes = require "outlierlab.measure.probes"
local figure = require "outlierlab.figure"
local views = require "outlierlab.figure.views"
local batcher = require "outlierlab.data.batcher"
local batches = require "outlierlab.measure.batches"
local recipes = require "outlierlab.recipes"

local model_spec = recipes.llama_lm_spec   -- shared with so-fig3: one trained model

local function train(run) return recipes.fit(run, model_spec(run.cfg)) end

local CATS = analysis.categories

local FIG = figure.declare{
  title = "Attention outliers: keys whose cumulative attention exceeds τ·mean, τ = {@tau} (SO Fig. 6, reproduced)",
  dims = {
    { "layer", long_name = "transformer layer (0-based)" },
    { "head", long_name = "attention head (0-based)" },
    { "category", long_name = "key token category", labels = true },
  },
  vars = {
    { "attention_outliers", dims = { "layer" }, long_name = "attention outlier keys (cumulative attention > tau mean), summed over heads and sequences", units = "1", type = "int", label = "τ·mean rule" },
    { "attention_outliers_code_rule", dims = { "layer" }, long_name = "attention outlier keys by the official code's rule (head-averaged cumulative attention >= 0.1 T)", units = "1", type = "int", label = "code rule (≥ 0.1·T)" },
    { "attention_outliers_by_head", dims = { "layer", "head" }, long_name = "attention outlier keys per layer and head", units = "1", type = "int" },
    { "attention_outliers_by_category", dims = { "category" }, long_name = "attention outlier keys by key token category", units = "1", type = "int", label = "τ·mean rule" },
    { "attention_outliers_code_by_category", dims = { "category" }, long_name = "attention outlier keys by key token category, official code's rule", units = "1", type = "int", label = "code rule (≥ 0.1·T)" },
    { "total_outliers", dims = {}, long_name = "attention outlier keys over all layers (tau rule)", units = "1", type = "int" },
    { "code_total_outliers", dims = {}, long_name = "attention outlier keys over all layers (code rule)", units = "1", type = "int" },
    { "n_sequences", dims = {}, long_name = "held-out sequences analysed", units = "1", type = "int" },
    { "initial_share", dims = {}, long_name = "share of the attention outlier keys at the initial token (undefined without outliers)", units = "1" },
    { "initial_weak_share", dims = {}, long_name = "share of the attention outlier keys at the initial token or weak-semantic tokens (undefined without outliers)", units = "1" },
    { "code_initial_share", dims = {}, long_name = "share of the code rule's outlier keys at the initial token (undefined without outliers)", units = "1" },
  },
  panels = {
    { kind = "bars", x = "layer", y = { "attention_outliers", "attention_outliers_code_rule" }, title = "attention outlier keys per layer",
      xlabel = "layer", ylabel = "outlier keys", zero_is_empty = true, why_empty = "no attention outlier key by either rule" },
    { kind = "bars", x = "category", y = { "attention_outliers_by_category", "attention_outliers_code_by_category" },
      title = "attention outlier keys by key category", ylabel = "outlier keys", values = "%d", zero_is_empty = true,
      why_empty = "no attention outlier key by either rule" },
    { kind = "heatmap", z = "attention_outliers_by_head", title = "τ·mean rule per layer and head", xlabel = "head", ylabel = "layer",
      cblabel = "outlier keys", values = "%d", zero_is_empty = true, why_empty = "no key above τ·mean Â at τ = {@tau}" },
  },
}

local function analyze(run)
  local cfg, spec = run.cfg, model_spec(run.cfg)
  local corpus = batcher.corpus(spec.data, run)   -- --text with --model: the text in the model's tokens
  local ctx, m = recipes.load(spec, run.out.train)
  local la = analysis.LayerAttn{ T = cfg.seq_len, NH = m.cfg.n_head, rule = "tau_mean", tau = cfg.tau,
                                 frac = 0.1, category = corpus.category }
  local P = probes.new{ points = { "attn_probs" } }
  P:attach("attn_probs", la)
  batches.probe_batches(ctx, m, P, corpus, spec, cfg.eval_batches)
  local res = la:result()
  if #res.layers == 0 then error("so-fig6: the model reported no attn_probs probe", 0) end
  local NH = m.cfg.n_head
  local per, code, heads, layers = {}, {}, {}, {}
  local bycat, codecat = { 0, 0, 0, 0 }, { 0, 0, 0, 0 }
  local total, code_total, nseq = 0, 0, 0
  for i, l in ipairs(res.layers) do
    local r = res[l]
    layers[i], per[i], code[i] = l, r.count, r.code.count
    total, code_total, nseq = total + r.count, code_total + r.code.count, r.nseq
    heads[i] = {}
    for h = 1, NH do heads[i][h] = r.per_head[h] and r.per_head[h].count or 0 end
    for j, c in ipairs(CATS) do
      bycat[j] = bycat[j] + r.by_category[c]
      codecat[j] = codecat[j] + r.code.by_category[c]
    end
  end
  return {
    coords = { layer = layers, head = NH, category = CATS },
    vars = { attention_outliers = per, attention_outliers_code_rule = code, attention_outliers_by_head = heads,
             attention_outliers_by_category = bycat, attention_outliers_code_by_category = codecat,
             total_outliers = total, code_total_outliers = code_total, n_sequences = nseq,
             initial_share = total > 0 and bycat[1] / total or 0 / 0,
             initial_weak_share = total > 0 and (bycat[1] + bycat[3]) / total or 0 / 0,
             code_initial_share = code_total > 0 and codecat[1] / code_total or 0 / 0 },
    attrs = { tau = cfg.tau },
  }
end

local function summary(run)
  local a = run.out.analyze
  local v = figure.values(FIG, a)
  local function pct(x) return x == x and string.format("%.0f %%", 100 * x) or "undefined" end
  local holds   -- without an attention outlier at this τ there is nothing to locate: inconclusive
  if v.total_outliers > 0 then holds = v.initial_weak_share > 0.5 end
  local tau_part = v.total_outliers > 0
    and string.format("%d attention outlier keys at τ = %g over %d sequences: %s initial token, %s initial or weak-semantic",
                      v.total_outliers, a.attrs.tau, v.n_sequences, pct(v.initial_share), pct(v.initial_weak_share))
    or string.format("no attention outlier key at τ = %g over %d sequences", a.attrs.tau, v.n_sequences)
  local code_part = v.code_total_outliers > 0
    and string.format("code rule (≥ 0.1·T): %d keys, %s initial", v.code_total_outliers, pct(v.code_initial_share))
    or "code rule (≥ 0.1·T): no key"
  return {
    paper = "GPT-2: attention outliers at the initial token and weak-semantic tokens, in most heads of the middle layers (τ = 1000 with T = 1024; code rule Â ≥ 0.1·T)",
    reproduced = tau_part .. "; " .. code_part,
    holds = holds,
    notes = "Criterion: at least one attention outlier at this τ and more than half of them at the initial token or weak-semantic tokens." ..
      (v.total_outliers == 0 and " No key exceeds τ·mean Â here (verdict inconclusive)." or ""),
  }
end

return {
  id = "so-fig6",
  title = "Attention outliers per layer, key token category and head in a LLaMA-style model",
  source = { paper = "SO (An et al. 2025)", figure = "Fig. 6",
             claim = "Attention outliers (keys with a large cumulative attention) sit at the initial token and weak-semantic tokens, the same tokens as the activation outliers." },
  profiles = recipes.profiles_with(recipes.LLAMA_LM_PROFILES, { quick = { tau = 5 }, default = { tau = 10 }, paper = { tau = 1000 } }),
  stages = figure.stages(train, analyze, FIG, { { "views", views.stage{ spec = model_spec } } }),
  summary = summary,
}
