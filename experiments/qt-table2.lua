-- QT Table 2 — do clipped softmax and gated attention remove the outliers and make the
-- models quantisable?
--
-- Method (QT §5, Table 2): train a BERT-style encoder (masked LM), an OPT-style decoder (LM)
-- and a ViT (image classification) each three times — vanilla softmax attention, clipped
-- softmax (γ scaled to the sequence length: BERT γ = −0.025 at T = 128, OPT γ = −12/T, ViT
-- γ = −1e−4 at 197 tokens; ζ = 1) and gated attention (a linear gate per head, π_init = 0.5).
-- For each model report the FP metric (perplexity; top-1 accuracy for ViT), the max inf norm
-- and the average kurtosis over QT's hooked tensors (docs/METRICS.md), and the metric after
-- static W8A8 post-training quantisation (outlierlab.ptq: symmetric per-tensor weights with
-- min-max ranges — MSE for OPT —, asymmetric per-tensor activations from 16 calibration
-- batches with running min-max — the 99.999th percentile for OPT —, attention scores and
-- softmax outputs included, head and gates in full precision). Several seeds: mean ± std.
local ptq = require "outlierlab.ptq"

local FAMILIES = { "bert", "opt", "vit" }
local VARIANTS = { "vanilla", "clipped", "gated" }
local FAMILY_NAME = { bert = "BERT", opt = "OPT", vit = "ViT" }
local VARIANT_NAME = { vanilla = "vanilla", clipped = "clipped softmax", gated = "gated attention" }
-- QT Table 2: FP metric / max inf norm / avg kurtosis / W8A8 metric
local PAPER = {
  bert = { vanilla = { 4.49, 735, 3076, 1294 }, clipped = { 4.39, 21.5, 80, 4.52 }, gated = { 4.45, 39.2, 201, 4.65 } },
  opt = { vanilla = { 15.84, 340, 1778, 21.18 }, clipped = { 16.29, 63.2, 19728, 37.20 }, gated = { 15.55, 8.7, 18.9, 16.02 } },
  vit = { vanilla = { 80.75, 359, 1018, 69.24 }, clipped = { 80.89, 73.7, 22.9, 79.77 }, gated = { 81.01, 79.8, 19.9, 79.82 } },
}

local function seeds(cfg)
  local s = {}
  for i = 1, cfg.n_seeds do s[i] = i end
  return s
end

-- 1. train the nine models per seed (cached; the BERT ones are shared with qt-table1)
local function train(run)
  local out = {}
  for _, fam in ipairs(FAMILIES) do
    for _, var in ipairs(VARIANTS) do
      for _, seed in ipairs(seeds(run.cfg)) do
        local spec = ptq.qt_spec(run.cfg, fam, ptq.qt_attention(run.cfg, fam, var), seed)
        local h = ptq.train(run, spec)
        out[#out + 1] = { family = fam, variant = var, seed = seed, spec = spec, handle = h }
      end
    end
  end
  return out
end

-- 2. FP metric, outlier statistics and W8A8 metric of every model
local function analyze(run)
  local cfg = run.cfg
  local rows = {}
  for _, t in ipairs(run.out.train) do
    local r = ptq.qt_row(t.spec, t.handle, t.family, {
      n_eval = cfg.n_eval, n_calib = cfg.n_calib, n_stats = cfg.n_stats,
      weight_range = t.family == "opt" and "mse" or "minmax",
      estimator = t.family == "opt" and "percentile" or "running_minmax", percentile = 99.999 })
    r.family, r.variant, r.seed = t.family, t.variant, t.seed
    r.attention = ptq.qt_attention(cfg, t.family, t.variant)
    r.tokens = ptq.qt_tokens(cfg, t.family)
    r.train_seconds = t.handle.info.train_seconds
    run:log("%s %-8s seed %d: FP %.4g, max inf norm %.4g, kurtosis %.4g, W8A8 %.4g (%d sites)", t.family, t.variant,
            t.seed, r.fp, r.max_inf_norm, r.avg_kurtosis, r.q, r.sites)
    rows[#rows + 1] = r
  end
  return { rows = rows }
end

-- values of one quantity per (family, variant) over seeds
local function collect(a, fam, var, key) return ptq.values(a.rows, { family = fam, variant = var }, key) end
local mean = ptq.mean
local function degradation(fam, fp, q) return fam == "vit" and fp - q or q - fp end

-- 3. NetCDF (family × variant × seed) and a bar figure of the four quantities
local function plot(run)
  local a, cfg = run.out.analyze, run.cfg
  local ns = cfg.n_seeds
  local nc = run:netcdf()
  nc:dim("family", 3, nil, { long_name = "model family index: 0 BERT (MLM perplexity), 1 OPT (LM perplexity), 2 ViT (top-1 %)" })
  nc:dim("variant", 3, nil, { long_name = "attention index: 0 vanilla softmax, 1 clipped softmax, 2 gated attention" })
  nc:dim("seed", ns, seeds(cfg), { long_name = "training seed" })
  local vals = { fp = {}, max_inf_norm = {}, avg_kurtosis = {}, q = {} }
  for fi, fam in ipairs(FAMILIES) do
    for vi, var in ipairs(VARIANTS) do
      for k in pairs(vals) do
        local xs = collect(a, fam, var, k)
        for si = 1, ns do vals[k][((fi - 1) * 3 + vi - 1) * ns + si] = xs[si] end
      end
    end
  end
  local d = { "family", "variant", "seed" }
  nc:var("fp_metric", d, vals.fp, { long_name = "full-precision metric: perplexity (BERT, OPT) or top-1 accuracy in percent (ViT)", units = "1", type = "double" })
  nc:var("max_inf_norm", d, vals.max_inf_norm, { long_name = "max over QT's hooked tensors of the per-sequence max |x|, averaged over sequences", units = "1", type = "double" })
  nc:var("avg_kurtosis", d, vals.avg_kurtosis, { long_name = "mean over QT's hooked tensors of the per-sequence Pearson kurtosis", units = "1", type = "double" })
  nc:var("w8a8_metric", d, vals.q, { long_name = "metric after W8A8 post-training quantisation (same units as fp_metric)", units = "1", type = "double" })
  local pv = {}
  for fi, fam in ipairs(FAMILIES) do
    for vi, var in ipairs(VARIANTS) do
      for k = 1, 4 do pv[((fi - 1) * 3 + vi - 1) * 4 + k] = PAPER[fam][var][k] end
    end
  end
  nc:dim("quantity", 4, nil, { long_name = "quantity index: 0 FP metric, 1 max inf norm, 2 avg kurtosis, 3 W8A8 metric" })
  nc:var("paper_value", { "family", "variant", "quantity" }, pv, { long_name = "QT Table 2 value for the paper-scale model", units = "1", type = "double" })
  nc:close()

  local blocks = {}
  for _, fam in ipairs(FAMILIES) do
    local rows = {}
    for _, var in ipairs(VARIANTS) do
      local fp, q = mean(collect(a, fam, var, "fp")), mean(collect(a, fam, var, "q"))
      rows[#rows + 1] = { VARIANT_NAME[var], mean(collect(a, fam, var, "max_inf_norm")),
                          mean(collect(a, fam, var, "avg_kurtosis")), math.abs(degradation(fam, fp, q)) }
    end
    blocks[#blocks + 1] = { columns = { "variant", FAMILY_NAME[fam] .. " max inf norm", "avg kurtosis", "|W8A8 - FP|" }, rows = rows }
  end
  run:figure(run.id, "qt-table2", blocks)
end

local function summary(run)
  local a = run.out.analyze
  local lines = { "| model | attention | FP (paper) | FP | max inf norm (paper) | max inf norm | avg kurtosis (paper) | avg kurtosis | W8A8 (paper) | W8A8 |",
                  "|---|---|---|---|---|---|---|---|---|---|" }
  local checks, parts = {}, {}
  local all_hold = true
  for _, fam in ipairs(FAMILIES) do
    local m = {}
    for _, var in ipairs(VARIANTS) do
      local p = PAPER[fam][var]
      lines[#lines + 1] = string.format("| %s | %s | %.4g | %s | %.4g | %s | %.4g | %s | %.4g | %s |", FAMILY_NAME[fam], VARIANT_NAME[var],
        p[1], ptq.pm(collect(a, fam, var, "fp"), "%.4g"), p[2], ptq.pm(collect(a, fam, var, "max_inf_norm"), "%.3g"),
        p[3], ptq.pm(collect(a, fam, var, "avg_kurtosis"), "%.3g"), p[4], ptq.pm(collect(a, fam, var, "q"), "%.4g"))
      m[var] = { fp = mean(collect(a, fam, var, "fp")), inf = mean(collect(a, fam, var, "max_inf_norm")),
                 kurt = mean(collect(a, fam, var, "avg_kurtosis")), q = mean(collect(a, fam, var, "q")) }
      m[var].deg = degradation(fam, m[var].fp, m[var].q)
    end
    for _, var in ipairs({ "clipped", "gated" }) do
      local fewer = m[var].inf < m.vanilla.inf and m[var].kurt < m.vanilla.kurt
      local better = m[var].deg <= m.vanilla.deg
      if not (fewer and better) then all_hold = false end
      checks[#checks + 1] = string.format("- %s, %s vs vanilla: max inf norm %.3g vs %.3g, kurtosis %.3g vs %.3g (%s); W8A8 degradation %+.3g vs %+.3g (%s).",
        FAMILY_NAME[fam], VARIANT_NAME[var], m[var].inf, m.vanilla.inf, m[var].kurt, m.vanilla.kurt,
        fewer and "fewer outliers" or "NOT fewer outliers", m[var].deg, m.vanilla.deg,
        better and "no worse" or "worse")
    end
    parts[#parts + 1] = string.format("%s vanilla kurtosis %.3g (paper %.4g), max inf norm %.3g (paper %.4g)",
      FAMILY_NAME[fam], m.vanilla.kurt, PAPER[fam].vanilla[3], m.vanilla.inf, PAPER[fam].vanilla[2])
  end
  local strong = true
  for _, fam in ipairs(FAMILIES) do
    if mean(collect(a, fam, "vanilla", "avg_kurtosis")) < 30 then strong = false end
  end
  -- verdict: only testable when the vanilla models have outliers to remove
  local holds
  if strong then holds = all_hold end
  local notes = table.concat({
    "Mean ± std over " .. run.cfg.n_seeds .. " seed(s); FP and W8A8 metrics are perplexities for BERT (masked tokens) and OPT, top-1 accuracy (%) for ViT. Degradation = W8A8 − FP for perplexity, FP − W8A8 for accuracy.",
    "",
    table.concat(lines, "\n"),
    "",
    "Checks (computed from the table above):",
    "",
    table.concat(checks, "\n"),
    "",
    strong and "The vanilla models did develop heavy-tailed activations (avg kurtosis ≥ 30 for every family)."
      or ("At this scale the vanilla models did **not** develop outliers like the paper's (" .. table.concat(parts, "; ") ..
          "): the paper's models train for 10⁵–10⁶ steps; the differences between the variants here are therefore small and the verdict says little about the paper's claim."),
    "",
    string.format("Settings: clipped softmax γ: BERT %.4g (T = %d), OPT γ = −12/T = %.4g (T = %d), ViT %.3g (%d tokens); gated attention: linear gate per head, π_init = 0.5. W8A8: weights symmetric per tensor (min-max; MSE for OPT), activations asymmetric per tensor from %d calibration batches (running min-max, momentum 0.9; 99.999th percentile for OPT); see docs/COMPRESSION.md.",
      ptq.qt_attention(run.cfg, "bert", "clipped").gamma, run.cfg.bert_T, -12 / run.cfg.opt_T, run.cfg.opt_T,
      ptq.qt_attention(run.cfg, "vit", "clipped").gamma, ptq.qt_tokens(run.cfg, "vit"), run.cfg.n_calib),
  }, "\n")
  return {
    paper = "clipped softmax and gated attention cut max inf norm and kurtosis (BERT 735 → 21.5 / 39.2) and keep W8A8 close to FP (BERT W8A8 ppl 1294 → 4.52 / 4.65)",
    reproduced = table.concat(parts, "; "),
    holds = holds,
    notes = notes,
  }
end

return {
  id = "qt-table2",
  title = "W8A8 quantisation of vanilla, clipped-softmax and gated-attention BERT, OPT and ViT models",
  source = { paper = "QT (Bondarenko et al. 2023)", figure = "Table 2",
             claim = "Clipped softmax and gated attention remove the outliers (lower max inf norm and kurtosis) at the same FP quality, and the models then keep their quality under W8A8 post-training quantisation, unlike vanilla softmax." },
  profiles = ptq.qt_profiles(),
  stages = { { "train", train }, { "analyze", analyze, cache = true }, { "plot", plot } },
  summary = summary,
}
