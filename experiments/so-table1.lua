-- SO Table 1 — consistency between the three types of outliers.
--
-- Method (SO §4.1, Table 1, App. B.2): the LLaMA-style model of so-fig3/so-fig5/so-fig6 (same
-- settings, one training), in eval mode over held-out sequences. Outlier sets:
--   activation outliers: per token, max_j |x_ij| > τ·mean|x| over the sequence (SO §3), in the
--     layer outputs h_ℓ (τ = tau_h) and the down-projection inputs x_down_ℓ (τ = tau_x);
--     per channel: the channels holding such elements;
--   attention outliers: per head, keys with cumulative attention Â_j = Σ_i A_ij > τ·mean Â
--     (τ = tau_att; the paper's rule), and the official code's Â_j ≥ 0.1·T (here per head);
--   weight outliers: |w_ij| > τ_w·mean_j |w_ij| (row-wise mean) in W_down (shape d_model × d_ff).
-- Table 1's four rows:
--   (1) W_down ~ x_down, feature dimension: the weight-outlier columns of W_down_ℓ (input dims)
--       against the activation-outlier channels of x_down_ℓ, pooled as (layer, channel) pairs;
--       consistency = |W ∩ A| / |A| (analysis.feature_consistency), the reverse |W ∩ A| / |W| too;
--   (2) W_down ~ h, feature dimension: the weight-outlier rows of W_down (output dims = channels
--       of the residual stream), union over layers, against h's outlier channels, union over
--       layers (the residual stream shares its channels across layers);
--   (3) x_down ~ h, sequence dimension: per sample and layer, |O_x ∩ O_h| / |O_x| with O_x, O_h
--       the outlier token positions of x_down_ℓ and h_ℓ, averaged over (sample, layer);
--   (4) h ~ A, sequence dimension: Overlap_i = |O_act ∩ O_att,i| / |O_act| per sample and head,
--       h_ℓ paired with A_ℓ (shift 0, as Table 1 writes it), averaged over (sample, head, layer)
--       (analysis.Overlap via P:attach_overlap); samples without activation outliers are skipped
--       (the overlap is undefined there). Reported with both attention rules, and for x_down too.
-- A row whose activation set is empty at the profile's τ is undefined (NaN); a τ sweep of the
-- activation rule reports at which τ activation outliers exist and what the overlap is there.
-- Chance levels: (1) fraction of W_down columns that are weight-outlier columns, (2) the same
-- for rows, (3) fraction of tokens that are h outliers, (4) fraction of keys that are
-- attention outliers: what random positions/channels would give.
-- SO (LLaMA2-7B, 100 RedPajama samples of 2048 tokens): 100 %, 100 %, 100 %, 95 %.
local probes = require "outlierlab.measure.probes"
local consistency = require "outlierlab.measure.consistency"   -- the rows' numbers (shared with the model report)
local figure = require "outlierlab.figure"
local batcher = require "outlierlab.data.batcher"
local batches = require "outlierlab.measure.batches"
local recipes = require "outlierlab.recipes"

local model_spec = recipes.llama_lm_spec   -- shared with so-fig3/so-fig5/so-fig6: one trained model

-- activation τ values of the sweep (the paper's 1000 down to 2)
local TAU_GRID = consistency.TAU_GRID
-- the verdict: every paper row defined, at least this consistency, and above chance
local MIN_CONSISTENCY = 0.8

local ROWS = {
  { key = "w_x", label = "W_down cols ~ x_down", type1 = "weight outliers in W_down (columns)", type2 = "activation outliers in x_down", dim = "feature", paper = 1.00 },
  { key = "w_h", label = "W_down rows ~ h", type1 = "weight outliers in W_down (rows)", type2 = "activation outliers in h", dim = "feature", paper = 1.00 },
  { key = "x_h", label = "x_down ~ h", type1 = "activation outliers in x_down", type2 = "activation outliers in h", dim = "sequence", paper = 1.00 },
  { key = "h_a", label = "h ~ A (tau)", type1 = "activation outliers in h", type2 = "attention outliers in A (τ·mean rule, per head)", dim = "sequence", paper = 0.95 },
  { key = "h_a_code", label = "h ~ A (0.1T)", type1 = "activation outliers in h", type2 = "attention outliers in A (Â ≥ 0.1·T, per head)", dim = "sequence", paper = 0.95 },
  { key = "x_a", label = "x_down ~ A (tau)", type1 = "activation outliers in x_down", type2 = "attention outliers in A (τ·mean rule, per head)", dim = "sequence" },
  { key = "x_a_code", label = "x_down ~ A (0.1T)", type1 = "activation outliers in x_down", type2 = "attention outliers in A (Â ≥ 0.1·T, per head)", dim = "sequence" },
}
local PAPER_ROWS = 4   -- rows 1..4 are Table 1's; row 5 is row 4 with the code's rule, 6-7 extra

local function train(run) return recipes.fit(run, model_spec(run.cfg)) end


local FIG = figure.declare{
  title = "Consistency between outlier types (SO Table 1, reproduced; τ_h = {@tau_h}, τ_x = {@tau_x}, τ_att = {@tau_att}, τ_w = {@tau_w})",
  dims = {
    { "row", long_name = "pair of outlier types (rows 0-3: SO Table 1; 4: row 3 with the code's attention rule; 5, 6: x_down against attention)", labels = true },
    { "tau", long_name = "activation outlier threshold tau of the sweep (|x| > tau mean|x| per sequence)" },
    { "layer", long_name = "transformer layer (0-based)" },
  },
  vars = {
    { "consistency", dims = { "row" }, long_name = "consistency |type1 and type2| / |type1| (undefined: no type-1 outliers)", units = "1", label = "reproduced" },
    { "consistency_reverse", dims = { "row" }, long_name = "reverse fraction |type1 and type2| / |type2| (feature rows; x_down vs h: over h outlier tokens)", units = "1" },
    { "paper_consistency", dims = { "row" }, long_name = "SO Table 1 consistency (LLaMA2-7B; undefined: row not in the paper)", units = "1", label = "SO Table 1" },
    { "chance_level", dims = { "row" }, long_name = "consistency random positions or channels would give (fraction of weight-outlier dims, h-outlier tokens, attention-outlier keys)", units = "1", label = "chance" },
    { "n_terms", dims = { "row" }, long_name = "terms averaged: activation-outlier channels (feature rows), samples x layers (x_down vs h), samples x heads x layers (attention rows)", units = "1", type = "int" },
    { "h_outlier_tokens", dims = { "tau" }, long_name = "activation outlier tokens in h summed over layers and sequences", units = "1", type = "int", label = "h" },
    { "x_down_outlier_tokens", dims = { "tau" }, long_name = "activation outlier tokens in x_down summed over layers and sequences", units = "1", type = "int", label = "x_down" },
    { "overlap_h_attention", dims = { "tau" }, long_name = "overlap of h outlier tokens with attention outlier keys per head (tau_att rule; undefined without h outliers)", units = "1", label = "h ~ A" },
    { "overlap_x_down_attention", dims = { "tau" }, long_name = "overlap of x_down outlier tokens with attention outlier keys per head (tau_att rule; undefined without x_down outliers)", units = "1", label = "x_down ~ A" },
    { "overlap_h_attention_by_layer", dims = { "layer" }, long_name = "overlap of h outlier tokens with attention outlier keys (tau_h, tau_att) per layer; undefined without h outliers", units = "1" },
    { "w_down_outlier_columns", dims = { "layer" }, long_name = "W_down columns holding a weight outlier (|w| > tau_w row mean)", units = "1", type = "int" },
    { "x_down_outlier_channels", dims = { "layer" }, long_name = "x_down channels holding an activation outlier (tau_x)", units = "1", type = "int" },
    { "h_outlier_channels", dims = { "layer" }, long_name = "h channels holding an activation outlier (tau_h)", units = "1", type = "int" },
    { "percentile_x_down", dims = {}, long_name = "mean percentile rank of the x_down outlier channels among their W_down column extremal ratios (undefined without outliers)", units = "1" },
    { "percentile_h", dims = {}, long_name = "mean percentile rank of the h outlier channels among the W_down row ratios, max over layers (undefined without outliers)", units = "1" },
    { "n_sequences", dims = {}, long_name = "held-out sequences analysed", units = "1", type = "int" },
    { "tokens_per_sequence", dims = {}, long_name = "tokens per held-out sequence", units = "1", type = "int" },
  },
  panels = {
    { kind = "bars", x = "row", y = { "consistency", "paper_consistency", "chance_level" }, title = "consistency per pair of outlier types",
      ylabel = "consistency (fraction)", values = "%.2f", note = "n/a: undefined (no type-1 outliers, or no number in SO)" },
    { kind = "line", x = "tau", y = { "overlap_h_attention", "overlap_x_down_attention" }, logx = true,
      title = "overlap with attention outliers (τ_att = {@tau_att}) over τ", xlabel = "activation threshold τ (|x| > τ·mean|x|)",
      ylabel = "overlap (fraction)", why_empty = "no activation outlier at any τ of the sweep (down to 2)" },
    { kind = "line", x = "tau", y = { "h_outlier_tokens", "x_down_outlier_tokens" }, logx = true, logy = true,
      title = "activation-outlier tokens over τ", note = "τ without outlier tokens not drawn", xlabel = "activation threshold τ (|x| > τ·mean|x|)",
      ylabel = "outlier tokens (log scale)", why_empty = "no activation outlier token at any τ of the sweep (down to 2)" },
  },
}

-- the figure's data from the analysis' numbers
local function to_data(o)
  local v = { consistency = {}, consistency_reverse = {}, paper_consistency = {}, chance_level = {}, n_terms = {},
              h_outlier_tokens = {}, x_down_outlier_tokens = {}, overlap_h_attention = {}, overlap_x_down_attention = {},
              overlap_h_attention_by_layer = o.rows.h_a.by_layer, w_down_outlier_columns = {}, x_down_outlier_channels = {},
              h_outlier_channels = {}, percentile_x_down = o.rows.w_x.percentile, percentile_h = o.rows.w_h.percentile,
              n_sequences = o.nseq, tokens_per_sequence = o.T }
  local labels, taus, layers = {}, {}, {}
  for i, r in ipairs(ROWS) do
    local x = o.rows[r.key]
    labels[i] = r.label
    v.consistency[i], v.consistency_reverse[i], v.paper_consistency[i] = x.value, x.reverse, r.paper or 0 / 0
    v.chance_level[i], v.n_terms[i] = x.chance, x.n
  end
  for i, s in ipairs(o.sweep) do
    taus[i] = s.tau
    v.h_outlier_tokens[i], v.x_down_outlier_tokens[i] = s.h_tokens, s.x_tokens
    v.overlap_h_attention[i], v.overlap_x_down_attention[i] = s.h_overlap, s.x_overlap
  end
  for l, y in ipairs(o.layers) do
    layers[l] = y.layer
    v.w_down_outlier_columns[l], v.x_down_outlier_channels[l], v.h_outlier_channels[l] = y.w_cols, y.x_channels, y.h_channels
  end
  return { coords = { row = labels, tau = taus, layer = layers }, vars = v,
           attrs = { tau_h = o.tau_h, tau_x = o.tau_x, tau_att = o.tau_att, tau_w = o.tau_w } }
end

local function analyze(run)
  local cfg, spec = run.cfg, model_spec(run.cfg)
  local corpus = batcher.corpus(spec.data, run)   -- --text with --model: the text in the model's tokens
  local ctx, m = recipes.load(spec, run.out.train)
  local c = consistency.new{ L = m.cfg.n_layer, C = m.cfg.d_model, F = m.cfg.d_ff, NH = m.cfg.n_head, T = cfg.seq_len,
                             tau_h = cfg.tau_h, tau_x = cfg.tau_x, tau_att = cfg.tau_att, tau_w = cfg.tau_w, grid = TAU_GRID }
  c:weights(batches.blocks(m))   -- weights: outlier columns and rows of every W_down
  -- activations and attention over the held-out batches
  local P = probes.new{ points = { "h", "x_down", "attn_probs" } }
  c:attach(P)
  batches.probe_batches(ctx, m, P, corpus, spec, cfg.eval_batches)
  return to_data(c:result(cfg.eval_batches * cfg.batch))
end

local function pct(v) if v ~= v then return "undefined" end return string.format("%.0f %%", 100 * v) end

local function summary(run)
  local a = run.out.analyze
  local v = figure.values(FIG, a)
  local at = a.attrs
  local lines = { "| outlier type 1 | outlier type 2 | dimension | SO Table 1 | reproduced | reverse | chance | terms |", "|---|---|---|---|---|---|---|---|" }
  local undefined, ok = {}, true
  for i, r in ipairs(ROWS) do
    lines[#lines + 1] = string.format("| %s | %s | %s | %s | %s | %s | %s | %d |", r.type1, r.type2, r.dim,
      r.paper and pct(v.paper_consistency[i]) or "—", pct(v.consistency[i]), pct(v.consistency_reverse[i]), pct(v.chance_level[i]), v.n_terms[i])
    if i <= PAPER_ROWS then
      local x = v.consistency[i]
      if x ~= x then undefined[#undefined + 1] = r.label
      elseif not (x >= MIN_CONSISTENCY and x > v.chance_level[i]) then ok = false end
    end
  end
  local sweep = { "| τ | h outlier tokens | x_down outlier tokens | h ~ A overlap | x_down ~ A overlap |", "|---|---|---|---|---|" }
  local th, tx
  for i, tau in ipairs(a.coords.tau) do
    sweep[#sweep + 1] = string.format("| %g | %d | %d | %s | %s |", tau, v.h_outlier_tokens[i], v.x_down_outlier_tokens[i],
      pct(v.overlap_h_attention[i]), pct(v.overlap_x_down_attention[i]))
    if not th and v.h_outlier_tokens[i] > 0 then th = tau end
    if not tx and v.x_down_outlier_tokens[i] > 0 then tx = tau end
  end
  local function from(t) return t and string.format("τ = %g", t) or "no τ of the sweep (down to 2)" end
  local where = string.format("Largest τ of the sweep at which activation outliers exist: %s for h, %s for x_down%s.",
    from(th), from(tx), ((th or 0) >= 1000 and (tx or 0) >= 1000) and "" or "; at SO's τ = 1000 at least one of them has none, so that row is undefined at the paper's threshold")
  local holds
  if #undefined == 0 then holds = ok end
  local c, ch = v.consistency, v.chance_level
  return {
    paper = "LLaMA2-7B: W_down ~ x_down (feature) 100 %, W_down ~ h (feature) 100 %, x_down ~ h (sequence) 100 %, h ~ attention (sequence) 95 %",
    reproduced = string.format("W_down ~ x_down %s, W_down ~ h %s, x_down ~ h %s, h ~ A %s (code rule %s) at τ_h = %g, τ_x = %g, τ_att = %g, τ_w = %g; chance %s / %s / %s / %s",
      pct(c[1]), pct(c[2]), pct(c[3]), pct(c[4]), pct(c[5]), at.tau_h, at.tau_x, at.tau_att, at.tau_w, pct(ch[1]), pct(ch[2]), pct(ch[3]), pct(ch[4])),
    holds = holds,
    notes = table.concat({
      string.format("Criterion: each of Table 1's four rows is defined (its type-1 set is not empty at this τ), at least %.0f %% and above its chance level. An undefined row makes the verdict inconclusive.%s",
        100 * MIN_CONSISTENCY, #undefined > 0 and (" Undefined here: " .. table.concat(undefined, "; ") .. " (no activation outliers at this τ).") or ""),
      "",
      string.format("Over %d held-out sequences of %d tokens; activation rule |x| > τ·mean|x| per sequence with τ_h = %g (h), τ_x = %g (x_down); attention rule Â_j > τ_att·mean Â per head with τ_att = %g (and the code's Â_j ≥ 0.1·T, per head); weight rule |w_ij| > τ_w·row-mean with τ_w = %g. h_ℓ is paired with A_ℓ (shift 0). The feature rows use the activation set as denominator; \"reverse\" is |W ∩ A| / |W|.",
        v.n_sequences, v.tokens_per_sequence, at.tau_h, at.tau_x, at.tau_att, at.tau_w),
      "",
      table.concat(lines, "\n"),
      "",
      string.format("Scale-free check of the feature rows (no τ_w): mean percentile rank of the activation-outlier channels among their W_down's column extremal ratios: %s for x_down; among the W_down row ratios (max over layers): %s for h. 50 %% = no relation, 100 %% = they are the most extreme weight columns/rows.",
        pct(v.percentile_x_down), pct(v.percentile_h)),
      "",
      where,
      "",
      string.format("τ sweep of the activation rule (attention rule fixed at τ_att = %g):", at.tau_att),
      "",
      table.concat(sweep, "\n"),
    }, "\n"),
  }
end

return {
  id = "so-table1",
  title = "Consistency between weight, activation and attention outliers in a LLaMA-style model",
  source = { paper = "SO (An et al. 2025)", figure = "Table 1",
             claim = "The three types of outliers coincide: weight outliers in W_down align with activation outliers of x_down and h in the feature dimension (100 %, 100 %), x_down and h outliers sit at the same tokens (100 %), and 95 % of the activation outliers in h overlap with attention outliers in the sequence dimension." },
  profiles = recipes.profiles_with(recipes.LLAMA_LM_PROFILES, {
    quick = { tau_h = 5, tau_x = 20, tau_att = 5, tau_w = 5 },
    default = { tau_h = 10, tau_x = 100, tau_att = 10, tau_w = 5 },
    paper = { tau_h = 1000, tau_x = 1000, tau_att = 1000, tau_w = 1000 },
  }),
  stages = figure.stages(train, analyze, FIG),
  summary = summary,
}
