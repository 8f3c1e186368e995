-- QT Fig. 10–13 — attention patterns of the outlier heads, of ordinary heads and of the early
-- layers of a BERT-style encoder.
--
-- Method (QT App. A.1, Fig. 10–13): the encoder of qt-fig1 (same settings, one training).
-- Over held-out sequences, count 6σ outliers (|x − μ| > 6σ over each batch's tensor) at the FFN
-- output of every layer; the head that owns a layer's top outlier dimension is the head whose
-- slice of the attention output projection W_o has the largest norm in that row (as qt-fig2).
-- On one held-out sequence, show attention probabilities A, values V and their product A·V
-- (QT's three columns) for: the outlier heads of the last two layers (Fig. 10, 11), the head of
-- the last layer that puts the least attention on delimiters (an ordinary head, Fig. 12), and
-- the last layer's outlier head index in every earlier layer (Fig. 13). Delimiter columns
-- ([SEP], ".", ",") are marked. The share of attention that non-delimiter queries put on
-- delimiter keys is given for every layer and head.
local analysis = require "outlierlab.measure.metrics"
local probes = require "outlierlab.measure.probes"
local figure = require "outlierlab.figure"
local views = require "outlierlab.figure.views"
local inspect = require "outlierlab.measure.inspect"
local batcher = require "outlierlab.data.batcher"
local batches = require "outlierlab.measure.batches"
local recipes = require "outlierlab.recipes"
local papers = require "outlierlab.recipes.papers"

local model_spec = recipes.bert_mlm_spec   -- shared with qt-fig1/qt-fig2: one trained model

local FIG = figure.declare{
  title = "Attention patterns of outlier heads, ordinary heads and early layers (QT Fig. 10–13, reproduced)",
  dims = {
    { "layer", long_name = "encoder layer (0-based)" },
    { "head", long_name = "attention head (0-based)" },
    { "shown", long_name = "layer and head shown", labels = true },
    { "query", long_name = "query token of the held-out sequence", labels = true },
    { "key", long_name = "key token of the held-out sequence", labels = true },
    { "head_dim", long_name = "dimension within the head" },
  },
  vars = {
    { "delimiter_share", dims = { "layer", "head" }, long_name = "attention of non-delimiter queries on delimiter keys, mean over queries", units = "1" },
    { "outliers", dims = { "layer" }, long_name = "6 sigma outliers at the FFN output over the held-out batches", units = "1", type = "int", label = "6σ outliers" },
    { "outlier_dim", dims = { "layer" }, long_name = "hidden dimension with the most 6 sigma outliers (undefined without outliers)", units = "1", type = "int" },
    { "outlier_head", dims = { "layer" }, long_name = "head owning the top outlier dimension (largest W_o slice norm; undefined without outliers)", units = "1", type = "int" },
    { "attention", dims = { "shown", "query", "key" }, long_name = "attention probabilities A", units = "1" },
    { "values", dims = { "shown", "key", "head_dim" }, long_name = "values V", units = "1" },
    { "product", dims = { "shown", "query", "head_dim" }, long_name = "A V, the head's output before W_o", units = "1" },
    { "is_delimiter", dims = { "key" }, long_name = "1 where the key is a delimiter", units = "1", type = "int" },
    { "outlier_head_share", dims = {}, long_name = "delimiter share of the outlier heads of the last two layers, mean", units = "1" },
    { "ordinary_head_share", dims = {}, long_name = "delimiter share of the last layer's least delimiter-bound head", units = "1" },
    { "early_share", dims = {}, long_name = "delimiter share of the outlier head's index in the layers before the last two, mean", units = "1" },
    { "outlier_head_product", dims = {}, long_name = "mean |A V| of the outlier heads over mean |A V| of the other heads, last two layers", units = "1" },
    { "total_outliers", dims = {}, long_name = "6 sigma outliers at the FFN output of the last two layers", units = "1", type = "int" },
  },
  panels = {
    { kind = "heatmap", z = "delimiter_share", title = "attention on delimiters per layer and head", xlabel = "head", ylabel = "layer" },
    { kind = "bars", x = "layer", y = "outliers", title = "6σ outliers at the FFN output", zero_is_empty = true,
      why_empty = "no 6σ outlier at the FFN output of any layer" },
    { kind = "heatmap", z = "attention", each = "shown", marks = "is_delimiter", title = "{shown}: A", xlabel = "key", ylabel = "query" },
    { kind = "heatmap", z = "values", each = "shown", title = "{shown}: V", xlabel = "head dimension", ylabel = "token", symmetric = true },
    { kind = "heatmap", z = "product", each = "shown", title = "{shown}: A·V", xlabel = "head dimension", ylabel = "query", symmetric = true },
  },
}

local function train(run) return recipes.fit(run, model_spec(run.cfg)) end

local function analyze(run)
  local cfg, spec = run.cfg, model_spec(run.cfg)
  local corpus = batcher.corpus(spec.data, run)
  local ctx, m = recipes.load(spec, run.out.train)
  local L, C, NH = m.cfg.n_layer, m.cfg.d_model, m.cfg.n_head
  local HD = C / NH
  local stats = analysis.LayerStats{ T = cfg.seq_len, C = C, rule = analysis.QT_6SIGMA }
  local P = probes.new{ points = { "ffn_out" } }
  P:attach("ffn_out", stats)
  batches.probe_batches(ctx, m, P, corpus, spec, cfg.eval_batches)
  local res = stats:result()
  local wo = {}
  for l, blk in batches.blocks(m) do wo[l - 1] = blk.attn.o.weight end
  local outl, odim, ohead = {}, {}, {}
  for l = 0, L - 1 do
    local r = res[l]
    outl[l + 1] = r.outliers.elements
    local dim, best = nil, 0
    for c = 1, C do if r.outliers.by_channel[c] > best then best, dim = r.outliers.by_channel[c], c - 1 end end
    odim[l + 1] = dim or 0 / 0
    ohead[l + 1] = dim and inspect.owner_head(wo[l], dim, NH, HD) or 0 / 0
  end
  local cap = inspect.capture(ctx, m, corpus, spec, { points = { "attn_probs", "v" } })
  local T = cap.T
  local share = {}
  for l = 0, L - 1 do
    share[l + 1] = {}
    local A = inspect.get(cap, "attn_probs", l)
    for h = 0, NH - 1 do share[l + 1][h + 1] = inspect.category_share(inspect.plane(A, h), T, cap.cats, "delimiter") end
  end
  -- the outlier head of a layer: the owner of its top dimension, else (no outlier) the head
  -- with the largest delimiter share
  local function outlier_head(l)
    if ohead[l + 1] == ohead[l + 1] then return ohead[l + 1] end
    local best, bh = -1, 0
    for h = 1, NH do local s = share[l + 1][h] if s == s and s > best then best, bh = s, h - 1 end end
    return bh
  end
  local shown, sel = {}, {}
  local function add(kind, l, h) shown[#shown + 1] = string.format("%s L%d H%d", kind, l, h) sel[#sel + 1] = { l, h } end
  local last_two = {}
  for l = math.max(0, L - 2), L - 1 do last_two[#last_two + 1] = l add("outlier head", l, outlier_head(l)) end
  local lo, lh = 1e9, 0
  for h = 0, NH - 1 do
    local s = share[L][h + 1]
    if h ~= outlier_head(L - 1) and s == s and s < lo then lo, lh = s, h end
  end
  if NH > 1 then add("ordinary head", L - 1, lh) end
  local hL = outlier_head(L - 1)
  local early = {}
  for l = 0, L - 3 do add("early layer", l, hL) early[#early + 1] = share[l + 1][hL + 1] end
  local att, val, prod = {}, {}, {}
  for k, s in ipairs(sel) do
    local A = inspect.plane(inspect.get(cap, "attn_probs", s[1]), s[2])
    local V = inspect.plane(inspect.get(cap, "v", s[1]), s[2])
    att[k], val[k], prod[k] = A, V, inspect.matmul(A, V, T, T, HD)
  end
  local osh, tot, pin, pout = {}, 0, {}, {}
  for _, l in ipairs(last_two) do
    local h = outlier_head(l)
    osh[#osh + 1] = share[l + 1][h + 1]
    tot = tot + outl[l + 1]
    local A = inspect.get(cap, "attn_probs", l)
    local V = inspect.get(cap, "v", l)
    for hh = 0, NH - 1 do
      local pr = inspect.mean(inspect.abs(inspect.matmul(inspect.plane(A, hh), inspect.plane(V, hh), T, T, HD)))
      if hh == h then pin[#pin + 1] = pr else pout[#pout + 1] = pr end
    end
  end
  local isd = {}
  for i, c in ipairs(cap.cats) do isd[i] = c == "delimiter" and 1 or 0 end
  local layers = {}
  for l = 0, L - 1 do layers[l + 1] = l end
  return {
    coords = { layer = layers, head = NH, shown = shown, query = cap.labels, key = cap.labels, head_dim = HD },
    vars = { delimiter_share = share, outliers = outl, outlier_dim = odim, outlier_head = ohead, attention = att, values = val,
             product = prod, is_delimiter = isd, outlier_head_share = inspect.mean(osh),
             ordinary_head_share = NH > 1 and lo or 0 / 0, early_share = inspect.mean(early),
             outlier_head_product = inspect.mean(pin) / inspect.mean(pout), total_outliers = tot },
  }
end

-- the verdict's margin: "almost all of their attention" on delimiters (≥ 0.8)
local SHARE_MIN = 0.8

local function summary(run)
  local v = figure.values(FIG, run.out.analyze)
  local found = v.total_outliers > 0
  local holds   -- without outliers no head owns one: nothing to test
  if found then
    holds = v.outlier_head_share >= SHARE_MIN and v.outlier_head_share > v.ordinary_head_share
            and not (v.early_share >= v.outlier_head_share)
  end
  return {
    paper = "BERT-base: the heads owning outlier dims #180 and #720 (heads #3 and #12) put almost all of their attention on [SEP], '.' and ',' in layers #10 and #11 (vertical stripes, small product); heads without outliers (#1, #7, #8, #10) spread their attention; in the first eight layers head #3 goes from a diagonal to stripes",
    reproduced = string.format("%d 6σ outliers at the FFN output of the last two layers; delimiter share %.2f for their outlier heads, %.2f for the last layer's ordinary head, %s for the same head index in the earlier layers; outlier heads' |A·V| = %.2f × the other heads'",
      v.total_outliers, v.outlier_head_share, v.ordinary_head_share,
      v.early_share == v.early_share and string.format("%.2f", v.early_share) or "undefined (no earlier layer shown)", v.outlier_head_product),
    holds = holds,
    notes = string.format("Criterion (with its margin): 6σ outliers in the last two layers, their outlier heads put ≥ %.0f %% of their attention on delimiters, more than the ordinary head and than the early layers.", 100 * SHARE_MIN) ..
      (found and "" or " No 6σ outlier at the FFN output of the last two layers: no head owns an outlier dimension, so the heads shown as 'outlier heads' are the most delimiter-bound ones."),
  }
end

return {
  id = "qt-fig10",
  title = "Attention patterns (A, V, A·V) of outlier heads, ordinary heads and early layers of a BERT-style encoder",
  source = { paper = "QT (Bondarenko et al. 2023)", figure = "Fig. 10–13",
             claim = "The heads that own the outlier dimensions attend almost only to delimiter tokens in the last layers (a no-op), unlike heads without outliers and unlike the early layers." },
  profiles = papers.qt_bert_profiles({}),
  stages = figure.stages(train, analyze, FIG, { { "views", views.stage{ spec = model_spec } } }),
  summary = summary,
}
