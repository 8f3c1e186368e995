-- SO Fig. 11 — top-3 activation magnitudes per layer for the attention variants (a)–(e) and
-- sigmoid attention.
--
-- Method (SO §5, Table 2, Fig. 11; App. D.1): train the GPT-2-style decoder six times with
-- the same data and recipe, changing only the attention: (a) default softmax, (b) a fixed
-- learnable bias value v′, (c) an explicit context-aware bias p′·v′, (d) an attention bias
-- (a learnable key/value position every query sees), (e) the context-aware scaling factor,
-- and sigmoid attention (bias −log T). For each model, over held-out sequences, take the
-- three largest |h| of every layer output h_l and its median, averaged over sequences
-- (docs/METRICS.md, "Top-k and median per layer"). SO finds (d), (e) and sigmoid attention free of the
-- massive activations, while (b) and (c) keep them. The models are shared with so-fig12 and
-- (softmax, ca_scale) so-table3.
local ptq = require "outlierlab.ptq"

-- one model per variant; under MPI the variants spread over groups of ranks (run:sweep)
local function train(run)
  return run:sweep(ptq.SO_VARIANTS, function(var)
    local spec = ptq.so_spec(run.cfg, var, 1)
    return { variant = var, spec = spec, handle = ptq.train(run, spec) }
  end)
end

local function analyze(run)
  local res = {}
  for _, t in ipairs(run.out.train) do
    local ctx, m, L = ptq.load(t.spec, t.handle)
    local s = ptq.outlier_stats(ctx, m, { loader = L.val, n = run.cfg.n_eval, points = { "h" }, topk = 3 })
    local layers = {}
    local ratio = 0
    for _, p in ipairs(s.per) do
      layers[#layers + 1] = { layer = p.layer, top = p.topk, median = p.median }
      ratio = math.max(ratio, p.topk[1] / p.median)
    end
    res[#res + 1] = { variant = t.variant, layers = layers, ratio = ratio, max_top1 = s.max_inf_norm }
    run:log("%-10s: max over layers of top-1/median %.4g, max top-1 %.4g", t.variant, ratio, s.max_inf_norm)
  end
  return { variants = res }
end

local function plot(run)
  local a = run.out.analyze
  local nv, nl = #a.variants, #a.variants[1].layers
  local nc = run:netcdf()
  local labels = {}
  for i, v in ipairs(a.variants) do labels[i] = i - 1 .. " " .. ptq.SO_LABELS[v.variant] end
  nc:dim("variant", nv, nil, { long_name = "attention variant index: " .. table.concat(labels, ", ") })
  local lv = {}
  for i, l in ipairs(a.variants[1].layers) do lv[i] = l.layer end
  nc:dim("layer", nl, lv, { long_name = "transformer layer (0-based), output h_l" })
  nc:dim("rank", 3, { 1, 2, 3 }, { long_name = "rank of the magnitude (1 = largest)" })
  local top, med, ratio = {}, {}, {}
  for vi, v in ipairs(a.variants) do
    for li, l in ipairs(v.layers) do
      for k = 1, 3 do top[((vi - 1) * nl + li - 1) * 3 + k] = l.top[k] end
      med[(vi - 1) * nl + li] = l.median
    end
    ratio[vi] = v.ratio
  end
  nc:var("topk_abs", { "variant", "layer", "rank" }, top, { long_name = "k-th largest |h| of the layer output per sequence, averaged over sequences", units = "1", type = "double" })
  nc:var("median_abs", { "variant", "layer" }, med, { long_name = "median |h| of the layer output per sequence, averaged over sequences", units = "1", type = "double" })
  nc:var("top1_over_median", { "variant" }, ratio, { long_name = "max over layers of top-1 |h| divided by the median |h|", units = "1", type = "double" })
  nc:close()
  local blocks = {}
  for _, v in ipairs(a.variants) do
    local rows = {}
    for _, l in ipairs(v.layers) do rows[#rows + 1] = { l.layer, l.top[1], l.top[2], l.top[3], l.median } end
    blocks[#blocks + 1] = { columns = { "layer", ptq.SO_LABELS[v.variant], "top2", "top3", "median" }, rows = rows }
  end
  run:figure(run.id, "so-fig11", blocks)
end

local function summary(run)
  local a = run.out.analyze
  local r = {}
  for _, v in ipairs(a.variants) do r[v.variant] = v end
  local base = r.softmax.ratio
  local lines = { "| variant | max top-1 |h| | max over layers of top-1 / median | SO finds |", "|---|---|---|---|" }
  local expect = { softmax = "massive activations", fixed_bias = "massive activations", ca_bias = "massive activations",
                   attn_bias = "none", ca_scale = "none", sigmoid = "none" }
  for _, var in ipairs(ptq.SO_VARIANTS) do
    lines[#lines + 1] = string.format("| %s | %.4g | %.4g | %s |", ptq.SO_LABELS[var], r[var].max_top1, r[var].ratio, expect[var])
  end
  -- "prevents" = top-1/median below half the default model's; "keeps" = at least half of it
  local ok = true
  local checks = {}
  for _, var in ipairs({ "attn_bias", "ca_scale", "sigmoid" }) do
    local prev = r[var].ratio < 0.5 * base
    ok = ok and prev
    checks[#checks + 1] = string.format("- %s: ratio %.4g vs default %.4g — %s", ptq.SO_LABELS[var], r[var].ratio, base, prev and "prevents (as SO)" or "does NOT prevent")
  end
  for _, var in ipairs({ "fixed_bias", "ca_bias" }) do
    local keeps = r[var].ratio >= 0.5 * base
    ok = ok and keeps
    checks[#checks + 1] = string.format("- %s: ratio %.4g vs default %.4g — %s", ptq.SO_LABELS[var], r[var].ratio, base, keeps and "keeps them (as SO)" or "does NOT keep them")
  end
  -- SO's massive activations are ~10³ × the median; below 20 × nothing is there to prevent
  local strong = base >= 20
  local holds
  if strong then holds = ok end
  return {
    paper = "GPT-2: (a) default, (b) fixed bias and (c) context-aware bias show massive activations (top-1 |h| in the thousands in the middle layers); (d) attention bias, (e) context-aware scaling and sigmoid attention do not",
    reproduced = string.format("top-1/median (max over layers): %s", (function()
      local p = {}
      for _, var in ipairs(ptq.SO_VARIANTS) do p[#p + 1] = string.format("%s %.3g", var, r[var].ratio) end
      return table.concat(p, ", ") end)()),
    holds = holds,
    notes = table.concat({ table.concat(lines, "\n"), "", "Checks (criterion: \"prevents\" = ratio below half the default model's; \"keeps\" = at least half):", "",
      table.concat(checks, "\n"), "",
      strong and "The default model has massive activations here (top-1 ≥ 20 × median), so the comparison tests the claim."
        or string.format("The default model has no massive activations at this scale (top-1 only %.3g × the median; SO's are ~10³ ×), so the claim cannot be tested here (verdict inconclusive).", base),
      "", "One seed per variant (the models are shared with so-fig12; so-table3 adds seeds for softmax and ca_scale)." }, "\n"),
  }
end

return {
  id = "so-fig11",
  title = "Top-3 activation magnitudes per layer for the attention variants (a)–(e) and sigmoid attention",
  source = { paper = "SO (An et al. 2025)", figure = "Fig. 11 (and Fig. 23)",
             claim = "Attention bias (d), context-aware scaling (e) and sigmoid attention prevent massive activations; fixed bias (b) and context-aware bias (c) do not." },
  profiles = ptq.so_profiles(),
  stages = { { "train", train }, { "analyze", analyze, cache = true }, { "plot", plot } },
  summary = summary,
}
