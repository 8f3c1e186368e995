-- SO Table 3 — does context-aware scaling make a GPT-2 model robust to weight quantisation
-- and pruning?
--
-- Method (SO §5, Table 3, App. C): train a GPT-2-style decoder with the default softmax
-- attention and with the context-aware scaling factor (variant (e): S_c(x)·softmax(s)·V,
-- S_c = 2·sigmoid(W_s x + b_s) per token and head) on the same data and recipe. Report the
-- held-out perplexity in full precision, after AbsMax 8-bit weight-only quantisation
-- (weights scaled by max|w|; per tensor — and per output channel as an extra column, the
-- paper does not state the granularity), and after 50 % unstructured magnitude pruning of the
-- weights of all transformer layers (per layer; global pruning as an extra column). The
-- compressed weights are the linear layers of the blocks (q, k, v, o, MLP up and down); the
-- tied embedding / head and the scaling weights stay in full precision (outlierlab.ptq).
-- The models are shared with so-fig11 and so-fig12 (same specs).
local ptq = require "outlierlab.ptq"
local compress = require "outlierlab.compress"

local VARIANTS = { "softmax", "ca_scale" }
local PAPER = { softmax = { 27.24, 93.44, 7235.68 }, ca_scale = { 26.95, 29.22, 39.47 } }
local COLS = { "fp", "absmax", "absmax_ch", "prune", "prune_global" }

local function train(run)
  local out = {}
  for _, var in ipairs(VARIANTS) do
    for seed = 1, run.cfg.n_seeds do
      local spec = ptq.so_spec(run.cfg, var, seed)
      out[#out + 1] = { variant = var, seed = seed, spec = spec, handle = ptq.train(run, spec) }
    end
  end
  return out
end

local function analyze(run)
  local cfg = run.cfg
  local rows = {}
  for _, t in ipairs(run.out.train) do
    local ctx, m, L = ptq.load(t.spec, t.handle)
    local base = { metric = "ppl", loader = L.val, n = cfg.n_eval, only = ptq.LINEAR_ONLY }
    local function with(fn)
      local o = ptq.copy(base)
      o.loader, o.fn = L.val, fn
      return ptq.weight_only(ctx, m, o).value
    end
    local r = { variant = t.variant, seed = t.seed }
    r.fp = ptq.evaluate(ctx, m, base).value
    r.absmax = with(function(ps) compress.absmax(ps, { bits = 8 }) end)
    r.absmax_ch = with(function(ps) compress.absmax(ps, { bits = 8, per_channel = true }) end)
    r.prune = with(function(ps) compress.prune(ps, { sparsity = 0.5 }) end)
    r.prune_global = with(function(ps) compress.prune(ps, { sparsity = 0.5, global = true }) end)
    run:log("%-9s seed %d: FP %.4g, AbsMax W8 %.4g (per channel %.4g), 50%% sparse %.4g (global %.4g)", t.variant, t.seed,
            r.fp, r.absmax, r.absmax_ch, r.prune, r.prune_global)
    rows[#rows + 1] = r
  end
  return { rows = rows }
end

local function collect(a, var, key) return ptq.values(a.rows, { variant = var }, key) end
local mean = ptq.mean

local function plot(run)
  local a, ns = run.out.analyze, run.cfg.n_seeds
  local nc = run:netcdf()
  nc:dim("variant", 2, nil, { long_name = "attention index: 0 default softmax, 1 context-aware scaling factor (SO (e))" })
  nc:dim("seed", ns, nil, { long_name = "training seed minus one" })
  local names = {
    fp = "held-out perplexity in full precision",
    absmax = "perplexity after AbsMax 8-bit weight quantisation, per tensor",
    absmax_ch = "perplexity after AbsMax 8-bit weight quantisation, per output channel",
    prune = "perplexity after 50 percent unstructured magnitude pruning, per layer",
    prune_global = "perplexity after 50 percent unstructured magnitude pruning, global threshold",
  }
  for _, k in ipairs(COLS) do
    local v = {}
    for vi, var in ipairs(VARIANTS) do
      local xs = collect(a, var, k)
      for s = 1, ns do v[(vi - 1) * ns + s] = xs[s] end
    end
    nc:var("ppl_" .. k, { "variant", "seed" }, v, { long_name = names[k], units = "1", type = "double" })
  end
  nc:dim("quantity", 3, nil, { long_name = "quantity index: 0 FP16 perplexity, 1 AbsMax W8, 2 50 percent sparse" })
  local pv = {}
  for vi, var in ipairs(VARIANTS) do for k = 1, 3 do pv[(vi - 1) * 3 + k] = PAPER[var][k] end end
  nc:var("paper_ppl", { "variant", "quantity" }, pv, { long_name = "SO Table 3 perplexity (GPT-2 124M, WikiText-2)", units = "1", type = "double" })
  nc:close()
  local rows = {}
  for _, var in ipairs(VARIANTS) do
    rows[#rows + 1] = { ptq.SO_LABELS[var], mean(collect(a, var, "fp")), mean(collect(a, var, "absmax")), mean(collect(a, var, "prune")) }
  end
  run:figure(run.id, "so-table3", { { columns = { "model", "FP", "AbsMax W8", "50% sparse" }, rows = rows } })
end

local function summary(run)
  local a = run.out.analyze
  local lines = { "| model | FP16 (paper) | FP | AbsMax W8 (paper) | AbsMax W8 per tensor | AbsMax W8 per channel | 50 % sparse (paper) | 50 % sparse per layer | 50 % sparse global |",
                  "|---|---|---|---|---|---|---|---|---|" }
  for _, var in ipairs(VARIANTS) do
    local p = PAPER[var]
    lines[#lines + 1] = string.format("| GPT-2 %s | %.2f | %s | %.2f | %s | %s | %.2f | %s | %s |", ptq.SO_LABELS[var], p[1],
      ptq.pm(collect(a, var, "fp"), "%.4g"), p[2], ptq.pm(collect(a, var, "absmax"), "%.4g"), ptq.pm(collect(a, var, "absmax_ch"), "%.4g"),
      p[3], ptq.pm(collect(a, var, "prune"), "%.4g"), ptq.pm(collect(a, var, "prune_global"), "%.4g"))
  end
  local m = {}
  for _, var in ipairs(VARIANTS) do
    m[var] = {}
    for _, k in ipairs(COLS) do m[var][k] = mean(collect(a, var, k)) end
  end
  -- relative degradation: compressed / FP perplexity
  local function rel(var, k) return m[var][k] / m[var].fp end
  local q_ok = rel("ca_scale", "absmax") <= rel("softmax", "absmax")
  local p_ok = rel("ca_scale", "prune") <= rel("softmax", "prune")
  local fp_ok = m.ca_scale.fp <= m.softmax.fp * 1.02
  -- the paper's effect is large (AbsMax ×3.4 and pruning ×266 for the default model): at
  -- this scale the default model itself may barely degrade, and then nothing can be shown
  local default_degrades = rel("softmax", "absmax") > 1.1 or rel("softmax", "prune") > 2
  local checks = {
    string.format("- FP perplexity: context-aware scaling %.4g vs default %.4g (%s; paper 26.95 vs 27.24).", m.ca_scale.fp, m.softmax.fp,
      fp_ok and "no worse than +2 %" or "worse by more than 2 %"),
    string.format("- AbsMax W8 (per tensor): perplexity ×%.3f of FP with scaling vs ×%.3f default (%s; paper ×%.2f vs ×%.2f).",
      rel("ca_scale", "absmax"), rel("softmax", "absmax"), q_ok and "more robust" or "NOT more robust", 29.22 / 26.95, 93.44 / 27.24),
    string.format("- 50 %% magnitude pruning (per layer): ×%.3f with scaling vs ×%.3f default (%s; paper ×%.2f vs ×%.0f).",
      rel("ca_scale", "prune"), rel("softmax", "prune"), p_ok and "more robust" or "NOT more robust", 39.47 / 26.95, 7235.68 / 27.24),
  }
  local holds
  if default_degrades then holds = q_ok and p_ok end
  local notes = table.concat({
    "Mean ± std over " .. run.cfg.n_seeds .. " seed(s); held-out perplexity on the generated corpus (the paper: WikiText-2).",
    "", table.concat(lines, "\n"), "", "Checks (computed from the table):", "", table.concat(checks, "\n"), "",
    default_degrades and "The default model does degrade under compression here, so the comparison tests the claim."
      or "The default model barely degrades under AbsMax W8 (< 10 %) and 50 % pruning (< ×2) at this scale: it has no outliers that break compression yet, so the claim cannot be tested here (verdict inconclusive).",
    "",
    "Compressed: the linear weights of every block (q, k, v, o projections, MLP up and down); the tied embedding/head and the scaling weights W_s stay in full precision; see docs/COMPRESSION.md.",
  }, "\n")
  return {
    paper = "GPT-2: FP16 27.24 / AbsMax W8 93.44 / 50 % sparse 7235.68 (default) vs 26.95 / 29.22 / 39.47 (context-aware scaling)",
    reproduced = string.format("default %.4g / %.4g / %.4g vs context-aware scaling %.4g / %.4g / %.4g", m.softmax.fp, m.softmax.absmax,
      m.softmax.prune, m.ca_scale.fp, m.ca_scale.absmax, m.ca_scale.prune),
    holds = holds,
    notes = notes,
  }
end

return {
  id = "so-table3",
  title = "AbsMax W8 and 50 % magnitude pruning of GPT-2 with default attention vs context-aware scaling",
  source = { paper = "SO (An et al. 2025)", figure = "Table 3",
             claim = "With the context-aware scaling factor, GPT-2 keeps its perplexity under AbsMax 8-bit weight quantisation and 50 % magnitude pruning, while the default model degrades badly." },
  profiles = ptq.so_profiles(),
  stages = { { "train", train }, { "analyze", analyze, cache = true }, { "plot", plot } },
  summary = summary,
}
