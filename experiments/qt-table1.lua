-- QT Table 1 — the γ/ζ ablation of clipped softmax on the BERT-style encoder.
--
-- Method (QT §5.1, Table 1): train the BERT-style encoder with clipped softmax
-- clip((ζ−γ)·softmax(s) + γ, 0, 1) for several stretch factors (γ, ζ), ζ = 1, γ = 0 being the
-- vanilla softmax, and report the FP perplexity, max inf norm, avg kurtosis and the W8A8
-- perplexity (as in qt-table2). The paper's γ are for T = 128; here each γ is scaled to the
-- sequence length used (γ·T fixed, outlierlab.recipes.papers.qt_gamma); ζ is used as is. QT finds that
-- only γ < 0 matters: γ = −0.03, ζ = 1 removes the outliers, ζ > 1 with γ = 0 stays near
-- vanilla. The vanilla and the γ = −0.025 models are shared with qt-table2 (same specs). Every
-- row is trained with cfg.n_seeds seeds; a difference counts only beyond the seed spread
-- (outlierlab.judge.seeds).
local seeds = require "outlierlab.judge.seeds"
local figure = require "outlierlab.figure"
local evaluate = require "outlierlab.compress.evaluate"
local papers = require "outlierlab.recipes.papers"
local recipes = require "outlierlab.recipes"

-- rows (γ at T = 128, ζ) and the paper's numbers where QT Table 1 gives them (docs/reference/experiments.md)
-- (FP ppl / max inf norm / avg kurtosis / W8A8 ppl)
local ROWS = {
  { gamma = 0, zeta = 1, paper = { 4.49, 735, 3076, 1294 } },           -- vanilla (Table 2)
  { gamma = -0.03, zeta = 1, paper = { 4.41, 20, 80, 4.55 } },
  { gamma = 0, zeta = 1.003, paper = { 4.48, 715, 2159, 451 } },
  { gamma = -0.025, zeta = 1, paper = { 4.39, 21.5, 80, 4.52 } },      -- QT Table 2 setting
  { gamma = -0.003, zeta = 1 },
  { gamma = 0, zeta = 1.03 },
}
-- the per-seed quantities: key of papers.qt_row (or derived), NetCDF name, long name, panel title
local QUANTITIES = {
  { key = "fp", name = "fp_ppl", long = "MLM perplexity in full precision", title = "FP perplexity" },
  { key = "max_inf_norm", name = "max_inf_norm", long = "max over hooked tensors of the per-sequence max |x|, averaged over sequences", title = "max inf norm" },
  { key = "avg_kurtosis", name = "avg_kurtosis", long = "mean over hooked tensors of the per-sequence Pearson kurtosis", title = "avg kurtosis (Gaussian = 3)" },
  { key = "q", name = "w8a8_ppl", long = "MLM perplexity after W8A8 post-training quantisation", title = "W8A8 perplexity" },
  { key = "deg", name = "w8a8_degradation", long = "W8A8 perplexity minus FP perplexity", title = "W8A8 − FP perplexity" },
}

local function label(r) return string.format("γ = %g, ζ = %g", r.gamma, r.zeta) end

local vars = {
  { "gamma_paper", dims = { "row" }, long_name = "clipped softmax gamma as given by QT for T = 128", units = "1" },
  { "gamma_used", dims = { "row" }, long_name = "clipped softmax gamma used, scaled to the sequence length (gamma times T fixed)", units = "1" },
  { "zeta", dims = { "row" }, long_name = "clipped softmax zeta", units = "1" },
  { "paper_value", dims = { "row", "quantity" }, long_name = "QT Table 1 value (BERT-base; undefined where the paper gives none)", units = "1" },
  { "n_seeds", dims = {}, long_name = "training seeds per row", units = "1", type = "int" },
}
for _, q in ipairs(QUANTITIES) do
  vars[#vars + 1] = { q.name, dims = { "row", "seed" }, long_name = q.long .. ", per seed", units = "1" }
  vars[#vars + 1] = { q.name .. "_mean", dims = { "row" }, long_name = q.long .. ", mean over seeds", units = "1", label = q.title }
  vars[#vars + 1] = { q.name .. "_sd", dims = { "row" }, long_name = q.long .. ", sample standard deviation over seeds", units = "1" }
end
local panels = {}
for _, q in ipairs(QUANTITIES) do
  if q.key ~= "q" then
    panels[#panels + 1] = { kind = "bars", x = "row", y = q.name .. "_mean", err = q.name .. "_sd", values = "%.4g", title = q.title,
                            ylabel = q.title, note = "mean ± sd over {=n_seeds} seed(s)" }
  end
end
local FIG = figure.declare{
  title = "Clipped softmax stretch factors γ, ζ on the BERT-style encoder (QT Table 1, reduced scale)",
  dims = {
    { "row", long_name = "ablation row: clipped softmax gamma (as given by QT for T = 128) and zeta", labels = true },
    { "seed", long_name = "training seed" },
    { "quantity", long_name = "quantity of QT Table 1", labels = true },
  },
  vars = vars,
  panels = panels,
}

local function attn(cfg, row)
  if row.gamma == 0 and row.zeta == 1 then return nil end
  -- the Table 2 setting is built by the same function as in qt-table2 (shared model)
  if row.gamma == -0.025 and row.zeta == 1 then return papers.qt_attention(cfg, "bert", "clipped") end
  local a = { kind = "clipped_softmax", gamma = papers.qt_gamma(row.gamma, 128, cfg.bert_T) }
  if row.zeta ~= 1 then a.zeta = row.zeta end
  return a
end

local function rows_of(cfg)
  local out = {}
  for i, r in ipairs(ROWS) do if i <= cfg.n_rows then out[#out + 1] = r end end
  return out
end

-- one model per (row, seed); under MPI the models spread over groups of ranks, under Slurm
-- over the members of a job array (run:sweep)
local function train(run)
  local members = {}
  for i in ipairs(rows_of(run.cfg)) do
    for _, seed in ipairs(seeds.list(run.cfg)) do members[#members + 1] = { row = i, seed = seed } end
  end
  return run:sweep(members, function(it)
    local spec = papers.qt_spec(run.cfg, "bert", attn(run.cfg, ROWS[it.row]), it.seed)
    return { row = it.row, seed = it.seed, spec = spec, handle = recipes.fit(run, spec) }
  end)
end

local function analyze(run)
  local cfg = run.cfg
  local res = {}
  for _, t in ipairs(run.out.train) do
    local r = papers.qt_row(t.spec, t.handle, "bert", { n_eval = cfg.n_eval, n_calib = cfg.n_calib, n_stats = cfg.n_stats,
                                                     weight_range = "minmax", estimator = "running_minmax" })
    r.row, r.seed, r.deg = t.row, t.seed, r.q - r.fp
    run:log("γ %g ζ %g seed %d: FP %.4g, max inf norm %.4g, kurtosis %.4g, W8A8 %.4g", ROWS[t.row].gamma, ROWS[t.row].zeta,
            t.seed, r.fp, r.max_inf_norm, r.avg_kurtosis, r.q)
    res[#res + 1] = r
  end
  local rows, sl = rows_of(cfg), seeds.list(cfg)
  local v = { gamma_paper = {}, gamma_used = {}, zeta = {}, paper_value = {}, n_seeds = #sl }
  local labels = {}
  for i, r in ipairs(rows) do
    labels[i] = label(r)
    v.gamma_paper[i], v.zeta[i], v.gamma_used[i] = r.gamma, r.zeta, papers.qt_gamma(r.gamma, 128, cfg.bert_T)
    v.paper_value[i] = { (r.paper or {})[1] or 0 / 0, (r.paper or {})[2] or 0 / 0, (r.paper or {})[3] or 0 / 0, (r.paper or {})[4] or 0 / 0 }
  end
  for _, q in ipairs(QUANTITIES) do
    local per, mu, sd = {}, {}, {}
    for i = 1, #rows do
      per[i] = {}
      for k, s in ipairs(sl) do per[i][k] = (evaluate.values(res, { row = i, seed = s }, q.key))[1] end
      mu[i], sd[i] = seeds.stats(per[i])
    end
    v[q.name], v[q.name .. "_mean"], v[q.name .. "_sd"] = per, mu, sd
  end
  return { coords = { row = labels, seed = sl, quantity = { "FP ppl", "max inf norm", "avg kurtosis", "W8A8 ppl" } }, vars = v }
end

local function summary(run)
  local a, cfg = run.out.analyze, run.cfg
  local v = figure.values(FIG, a)
  local rows = rows_of(cfg)
  local ns = v.n_seeds
  local function pm(name, i, fmt) return seeds.pm_of(v[name .. "_mean"][i], v[name .. "_sd"][i], ns, fmt) end
  local function per_seed(name, i)
    local xs = {}
    for s = 1, ns do xs[s] = v[name](i, s) end
    return xs
  end
  local lines = { "| γ (T = 128) | γ used | ζ | FP ppl (paper) | FP ppl | max inf norm (paper) | max inf norm | avg kurtosis (paper) | avg kurtosis | W8A8 ppl (paper) | W8A8 ppl |",
                  "|---|---|---|---|---|---|---|---|---|---|---|" }
  for i in ipairs(rows) do
    local function pp(k, f) local x = v.paper_value(i, k) return x == x and string.format(f, x) or "—" end
    lines[#lines + 1] = string.format("| %g | %.4g | %g | %s | %s | %s | %s | %s | %s | %s | %s |", v.gamma_paper[i], v.gamma_used[i], v.zeta[i],
      pp(1, "%.2f"), pm("fp_ppl", i, "%.4g"), pp(2, "%.4g"), pm("max_inf_norm", i, "%.3g"),
      pp(3, "%.4g"), pm("avg_kurtosis", i, "%.3g"), pp(4, "%.4g"), pm("w8a8_ppl", i, "%.4g"))
  end
  -- claim: every γ < 0 row has a lower kurtosis than every γ = 0 row, beyond the seed spread
  -- a row whose model did not train (e.g. a clip that zeroes every attention probability from
  -- initialisation) has nothing to remove: its comparisons stay unresolved
  local checks, lines2 = {}, {}
  for i, r in ipairs(rows) do
    if r.gamma < 0 then
      local ok, why = seeds.trained(per_seed("fp_ppl", i), per_seed("fp_ppl", 1), "ppl")
      if not ok then lines2[#lines2 + 1] = string.format("- %s: the model %s; not counted.", label(r), why) end
      for j, z in ipairs(rows) do
        if z.gamma == 0 then
          local c = seeds.compare(per_seed("avg_kurtosis", i), per_seed("avg_kurtosis", j))
          checks[#checks + 1] = ok and seeds.outcome(c, -1) or "unresolved"
          lines2[#lines2 + 1] = string.format("- kurtosis with %s: %s vs %s with %s: %s%s.", label(r), pm("avg_kurtosis", i, "%.3g"),
            pm("avg_kurtosis", j, "%.3g"), label(z), seeds.word(c, "lower (as claimed)", "**higher**"), ok and "" or " (not counted: did not train)")
        end
      end
    end
  end
  local van_kurt = v.avg_kurtosis_mean[1]
  local strong = van_kurt >= 30
  local holds
  if strong then holds = seeds.verdict(checks) end
  return {
    paper = "only γ < 0 removes the outliers: γ = −0.03, ζ = 1 gives 4.41 / 20 / 80 / 4.55, ζ = 1.003 with γ = 0 stays near vanilla (4.48 / 715 / 2159 / 451)",
    reproduced = string.format("vanilla kurtosis %s, max inf norm %s; %s", pm("avg_kurtosis", 1, "%.3g"), pm("max_inf_norm", 1, "%.3g"),
      table.concat((function()
        local p = {}
        for i = 2, #rows do p[#p + 1] = string.format("%s: kurtosis %s", label(rows[i]), pm("avg_kurtosis", i, "%.3g")) end
        return p
      end)(), "; ")),
    holds = holds,
    notes = table.concat({ "Mean ± sd over " .. ns .. " seed(s). Paper numbers are given where QT Table 1 reports them (— elsewhere).", "",
      table.concat(lines, "\n"), "",
      "Criterion: every γ < 0 row has a lower average kurtosis than every γ = 0 row, each difference beyond the seed spread. Seed rule: " .. seeds.RULE .. ".",
      "", table.concat(lines2, "\n"), "",
      strong and "The vanilla model has heavy-tailed activations here (avg kurtosis ≥ 30), so the ablation tests the claim; the verdict holds when every comparison is lower beyond the spread, does not hold when one is higher beyond it, and is inconclusive otherwise."
        or string.format("The vanilla model has no outliers at this scale (avg kurtosis %.3g, paper 3076; Gaussian = 3), so the ablation cannot show which stretch factor removes them (verdict inconclusive).", van_kurt) }, "\n"),
  }
end

-- the default profile trains the four rows QT reports (vanilla, γ = −0.03, ζ = 1.003, γ = −0.025)
-- over 3 seeds; the long and paper profiles add γ = −0.003 and ζ = 1.03
local extra = { quick = { n_rows = 3 }, default = { n_rows = 4 }, long = { n_rows = 6 }, paper = { n_rows = 6 } }
return {
  id = "qt-table1",
  title = "Clipped softmax γ/ζ ablation on the BERT-style encoder",
  source = { paper = "QT (Bondarenko et al. 2023)", figure = "Table 1",
             claim = "Only a negative γ (clipping to exact zeros) removes the outliers and makes W8A8 work; stretching with ζ > 1 and γ = 0 stays near vanilla." },
  profiles = papers.qt_profiles(extra),
  stages = figure.stages(train, analyze, FIG),
  summary = summary,
}
