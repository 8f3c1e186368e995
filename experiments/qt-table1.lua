-- QT Table 1 — the γ/ζ ablation of clipped softmax on the BERT-style encoder.
--
-- Method (QT §5.1, Table 1): train the BERT-style encoder with clipped softmax
-- clip((ζ−γ)·softmax(s) + γ, 0, 1) for several stretch factors (γ, ζ), ζ = 1, γ = 0 being the
-- vanilla softmax, and report the FP perplexity, max inf norm, avg kurtosis and the W8A8
-- perplexity (as in qt-table2). The paper's γ are for T = 128; here each γ is scaled to the
-- sequence length used (γ·T fixed, outlierlab.ptq.qt_gamma); ζ is used as is. QT finds that
-- only γ < 0 matters: γ = −0.03, ζ = 1 removes the outliers, ζ > 1 with γ = 0 stays near
-- vanilla. The vanilla and the γ = −0.025 models are shared with qt-table2 (same specs).
local ptq = require "outlierlab.ptq"

-- rows (γ at T = 128, ζ) and the paper's numbers where QT Table 1 gives them (docs/EXPERIMENTS.md)
-- (FP ppl / max inf norm / avg kurtosis / W8A8 ppl)
local ROWS = {
  { gamma = 0, zeta = 1, paper = { 4.49, 735, 3076, 1294 } },           -- vanilla (Table 2)
  { gamma = -0.03, zeta = 1, paper = { 4.41, 20, 80, 4.55 } },
  { gamma = 0, zeta = 1.003, paper = { 4.48, 715, 2159, 451 } },
  { gamma = -0.025, zeta = 1, paper = { 4.39, 21.5, 80, 4.52 } },      -- QT Table 2 setting
  { gamma = -0.003, zeta = 1 },
  { gamma = 0, zeta = 1.03 },
}

local function attn(cfg, row)
  if row.gamma == 0 and row.zeta == 1 then return nil end
  -- the Table 2 setting is built by the same function as in qt-table2 (shared model)
  if row.gamma == -0.025 and row.zeta == 1 then return ptq.qt_attention(cfg, "bert", "clipped") end
  local a = { kind = "clipped_softmax", gamma = ptq.qt_gamma(row.gamma, 128, cfg.bert_T) }
  if row.zeta ~= 1 then a.zeta = row.zeta end
  return a
end

local function rows_of(cfg)
  local out = {}
  for i, r in ipairs(ROWS) do if i <= cfg.n_rows then out[#out + 1] = r end end
  return out
end

local function train(run)
  local out = {}
  for i, row in ipairs(rows_of(run.cfg)) do
    for seed = 1, run.cfg.n_seeds do
      local spec = ptq.qt_spec(run.cfg, "bert", attn(run.cfg, row), seed)
      out[#out + 1] = { row = i, seed = seed, spec = spec, handle = ptq.train(run, spec) }
    end
  end
  return out
end

local function analyze(run)
  local cfg = run.cfg
  local res = {}
  for _, t in ipairs(run.out.train) do
    local r = ptq.qt_row(t.spec, t.handle, "bert", { n_eval = cfg.n_eval, n_calib = cfg.n_calib, n_stats = cfg.n_stats,
                                                     weight_range = "minmax", estimator = "running_minmax" })
    r.row, r.seed = t.row, t.seed
    run:log("γ %g ζ %g seed %d: FP %.4g, max inf norm %.4g, kurtosis %.4g, W8A8 %.4g", ROWS[t.row].gamma, ROWS[t.row].zeta,
            t.seed, r.fp, r.max_inf_norm, r.avg_kurtosis, r.q)
    res[#res + 1] = r
  end
  return { rows = res }
end

local function collect(a, i, key) return ptq.values(a.rows, { row = i }, key) end
local mean = ptq.mean

local function plot(run)
  local a, cfg = run.out.analyze, run.cfg
  local rows = rows_of(cfg)
  local nr, ns = #rows, cfg.n_seeds
  local nc = run:netcdf()
  nc:dim("row", nr, nil, { long_name = "ablation row (see gamma_paper, gamma_used, zeta)" })
  nc:dim("seed", ns, nil, { long_name = "training seed minus one" })
  local g, gu, z = {}, {}, {}
  for i, r in ipairs(rows) do
    g[i], z[i] = r.gamma, r.zeta
    gu[i] = ptq.qt_gamma(r.gamma, 128, cfg.bert_T)
  end
  nc:var("gamma_paper", { "row" }, g, { long_name = "clipped softmax gamma as given by QT for T = 128", units = "1", type = "double" })
  nc:var("gamma_used", { "row" }, gu, { long_name = "clipped softmax gamma used, scaled to the sequence length (gamma times T fixed)", units = "1", type = "double" })
  nc:var("zeta", { "row" }, z, { long_name = "clipped softmax zeta", units = "1", type = "double" })
  for _, k in ipairs({ { "fp", "fp_ppl", "MLM perplexity in full precision" }, { "max_inf_norm", "max_inf_norm", "max over hooked tensors of the per-sequence max |x|, averaged over sequences" },
                       { "avg_kurtosis", "avg_kurtosis", "mean over hooked tensors of the per-sequence Pearson kurtosis" }, { "q", "w8a8_ppl", "MLM perplexity after W8A8 post-training quantisation" } }) do
    local v = {}
    for i = 1, nr do
      local xs = collect(a, i, k[1])
      for s = 1, ns do v[(i - 1) * ns + s] = xs[s] end
    end
    nc:var(k[2], { "row", "seed" }, v, { long_name = k[3], units = "1", type = "double" })
  end
  nc:close()
  local frows = {}
  for i, r in ipairs(rows) do
    frows[i] = { string.format("g=%g z=%g", r.gamma, r.zeta), mean(collect(a, i, "max_inf_norm")), mean(collect(a, i, "avg_kurtosis")),
                 math.abs(mean(collect(a, i, "q")) - mean(collect(a, i, "fp"))) }
  end
  run:figure(run.id, "qt-table1", { { columns = { "gamma, zeta", "BERT max inf norm", "avg kurtosis", "|W8A8 - FP|" }, rows = frows } })
end

local function summary(run)
  local a, cfg = run.out.analyze, run.cfg
  local rows = rows_of(cfg)
  local lines = { "| γ (T = 128) | γ used | ζ | FP ppl (paper) | FP ppl | max inf norm (paper) | max inf norm | avg kurtosis (paper) | avg kurtosis | W8A8 ppl (paper) | W8A8 ppl |",
                  "|---|---|---|---|---|---|---|---|---|---|---|" }
  local m = {}
  for i, r in ipairs(rows) do
    local p = r.paper or {}
    local function pp(k, f) return p[k] and string.format(f, p[k]) or "—" end
    lines[#lines + 1] = string.format("| %g | %.4g | %g | %s | %s | %s | %s | %s | %s | %s | %s |", r.gamma, ptq.qt_gamma(r.gamma, 128, cfg.bert_T), r.zeta,
      pp(1, "%.2f"), ptq.pm(collect(a, i, "fp"), "%.4g"), pp(2, "%.4g"), ptq.pm(collect(a, i, "max_inf_norm"), "%.3g"),
      pp(3, "%.4g"), ptq.pm(collect(a, i, "avg_kurtosis"), "%.3g"), pp(4, "%.4g"), ptq.pm(collect(a, i, "q"), "%.4g"))
    m[i] = { inf = mean(collect(a, i, "max_inf_norm")), kurt = mean(collect(a, i, "avg_kurtosis")) }
  end
  local van = m[1]
  -- claim: every γ < 0 row has fewer outliers than every γ = 0 row
  local worst_neg, best_zero = -math.huge, math.huge
  for i, r in ipairs(rows) do
    if r.gamma < 0 then worst_neg = math.max(worst_neg, m[i].kurt) else best_zero = math.min(best_zero, m[i].kurt) end
  end
  local ok = worst_neg < best_zero
  local strong = van.kurt >= 30
  local holds
  if strong and worst_neg > -math.huge then holds = ok end
  return {
    paper = "only γ < 0 removes the outliers: γ = −0.03, ζ = 1 gives 4.41 / 20 / 80 / 4.55, ζ = 1.003 with γ = 0 stays near vanilla (4.48 / 715 / 2159 / 451)",
    reproduced = string.format("vanilla kurtosis %.3g, max inf norm %.3g; highest kurtosis with γ < 0: %.3g, lowest with γ = 0: %.3g",
      van.kurt, van.inf, worst_neg, best_zero),
    holds = holds,
    notes = table.concat({ "Mean ± std over " .. cfg.n_seeds .. " seed(s). Paper numbers are given where QT Table 1 reports them (— elsewhere).", "",
      table.concat(lines, "\n"), "",
      "Criterion: every γ < 0 row has a lower average kurtosis than every γ = 0 row.",
      strong and "" or string.format("The vanilla model has no outliers at this scale (avg kurtosis %.3g, paper 3076; Gaussian = 3), so the ablation cannot show which stretch factor removes them (verdict inconclusive).", van.kurt) }, "\n"),
  }
end

local extra = { quick = { n_rows = 3 }, default = { n_rows = 6 }, paper = { n_rows = 6 } }
return {
  id = "qt-table1",
  title = "Clipped softmax γ/ζ ablation on the BERT-style encoder",
  source = { paper = "QT (Bondarenko et al. 2023)", figure = "Table 1",
             claim = "Only a negative γ (clipping to exact zeros) removes the outliers and makes W8A8 work; stretching with ζ > 1 and γ = 0 stays near vanilla." },
  profiles = ptq.qt_profiles(extra),
  stages = { { "train", train }, { "analyze", analyze, cache = true }, { "plot", plot } },
  summary = summary,
}
