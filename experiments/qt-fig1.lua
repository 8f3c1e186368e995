-- QT Fig. 1 — where the 6σ outliers of a BERT-style encoder sit.
--
-- Method (QT §3, Fig. 1): train a BERT-style encoder with masked-language modelling on the
-- profile's data (default: the model organism's task as MLM rows; --data=corpus: the generated corpus). Hook the output of the feed-forward network (before the residual sum)
-- of the last two layers. Over held-out sequences, an element x of that tensor is an
-- outlier when |x − μ| > 6σ, with μ and σ over the whole activation tensor of a batch
-- (Bondarenko et al. 2021). Count outliers by the token they belong to and by hidden
-- dimension. The paper finds them in a few hidden dimensions (#180, #720 in BERT-base) and
-- almost only at delimiter tokens ([SEP], ".", ",": > 97 %).
local analysis = require "outlierlab.measure.metrics"
local probes = require "outlierlab.measure.probes"
local figure = require "outlierlab.figure"
local verdict = require "outlierlab.judge.verdict"
local batcher = require "outlierlab.data.batcher"
local batches = require "outlierlab.measure.batches"
local recipes = require "outlierlab.recipes"
local papers = require "outlierlab.recipes.papers"

local model_spec = recipes.bert_mlm_spec   -- shared with qt-fig2: one trained model
local CATS = analysis.categories

local FIG = figure.declare{
  title = "6σ outliers at the FFN output of the last two layers (QT Fig. 1, reproduced)",
  dims = {
    { "layer", long_name = "transformer layer (0-based)" },
    { "channel", long_name = "hidden dimension (0-based)" },
    { "category", long_name = "token category", labels = true },
    { "token", long_name = "token among the most frequent outlier tokens of either layer", labels = true },
    { "rank", long_name = "rank of the hidden dimension by outlier count (1 = most)" },
  },
  vars = {
    { "outlier_count", dims = { "layer" }, long_name = "6 sigma outliers at the FFN output", units = "1", type = "int" },
    { "outlier_count_by_channel", dims = { "layer", "channel" }, long_name = "6 sigma outliers at the FFN output per hidden dimension", units = "1", type = "int", label = "6σ outliers" },
    { "outlier_count_by_category", dims = { "layer", "category" }, long_name = "6 sigma outliers at the FFN output per token category", units = "1", type = "int" },
    { "outlier_count_by_token", dims = { "layer", "token" }, long_name = "6 sigma outliers at the FFN output per token", units = "1", type = "int", label = "6σ outliers" },
    { "delimiter_share", dims = { "layer" }, long_name = "fraction of 6 sigma outliers at delimiter tokens (undefined without outliers)", units = "1" },
    { "top2_channel_share", dims = { "layer" }, long_name = "fraction of 6 sigma outliers in the two most frequent hidden dimensions (undefined without outliers)", units = "1" },
    { "top_channel", dims = { "layer", "rank" }, long_name = "hidden dimensions with the most 6 sigma outliers (undefined where it holds none)", units = "1", type = "int" },
    { "max_abs", dims = { "layer" }, long_name = "max |x| of the FFN output over the held-out tokens", units = "1" },
    { "std", dims = { "layer" }, long_name = "standard deviation of the FFN output over the held-out tokens", units = "1" },
    { "max_abs_sigma", dims = { "layer" }, long_name = "max |x| of the FFN output in units of its standard deviation", units = "1" },
    { "avg_kurtosis", dims = { "layer" }, long_name = "Pearson kurtosis of the FFN output per sequence, averaged", units = "1" },
    { "avg_max_inf_norm", dims = { "layer" }, long_name = "max |x| of the FFN output per sequence, averaged", units = "1" },
    { "tokens_by_category", dims = { "category" }, long_name = "held-out tokens analysed per token category", units = "1", type = "int" },
    { "n_tokens", dims = {}, long_name = "held-out tokens analysed", units = "1", type = "int" },
  },
  panels = {
    { kind = "bars", x = "token", y = "outlier_count_by_token", each = "layer", title = "layer {layer}: 6σ outliers by token",
      xlabel = "token", ylabel = "6σ outliers", zero_is_empty = true, why_empty = "no 6σ outlier in layer {layer} (max |x| = {=max_abs_sigma} σ)" },
    { kind = "bars", x = "channel", y = "outlier_count_by_channel", each = "layer", title = "layer {layer}: 6σ outliers by hidden dimension",
      xlabel = "hidden dimension", ylabel = "6σ outliers", zero_is_empty = true, why_empty = "no 6σ outlier in layer {layer} (max |x| = {=max_abs_sigma} σ)" },
  },
}

-- 1. train the encoder (cached by its settings; an interrupted run resumes from its checkpoint)
local function train(run)
  return recipes.fit(run, model_spec(run.cfg))
end

-- 2. 6σ outliers at the FFN output of the last two layers, streamed over held-out batches
local function analyze(run)
  local cfg, spec = run.cfg, model_spec(run.cfg)
  local corpus = batcher.corpus(spec.data, run)   -- --text with --model: the text in the model's tokens
  local ctx, m = recipes.load(spec, run.out.train)
  local L, C = m.cfg.n_layer, m.cfg.d_model
  local layers = { L - 2, L - 1 }
  local stats = analysis.LayerStats{ T = cfg.seq_len, C = C, V = m.cfg.vocab_size,
                                     rule = analysis.QT_6SIGMA, category = corpus.category }
  local P = probes.new{ points = { "ffn_out" }, layers = layers }
  P:attach("ffn_out", stats)
  batches.probe_batches(ctx, m, P, corpus, spec, cfg.eval_batches)
  local res = stats:result()
  local v = { outlier_count = {}, outlier_count_by_channel = {}, outlier_count_by_category = {}, delimiter_share = {},
              top2_channel_share = {}, top_channel = {}, max_abs = {}, std = {}, max_abs_sigma = {}, avg_kurtosis = {},
              avg_max_inf_norm = {} }
  -- the tokens shown: the cfg.top_tokens most frequent outlier tokens of each layer (union, by total count)
  local total, shown = {}, {}
  for _, l in ipairs(layers) do
    local toks = {}
    for id, n in pairs(res[l].outliers.by_token or {}) do toks[#toks + 1] = { id = id, n = n } end
    table.sort(toks, function(a, b) if a.n ~= b.n then return a.n > b.n end return a.id < b.id end)
    for j = 1, math.min(cfg.top_tokens, #toks) do shown[toks[j].id] = true end
    for id, n in pairs(res[l].outliers.by_token or {}) do total[id] = (total[id] or 0) + n end
  end
  local ids = {}
  for id in pairs(shown) do ids[#ids + 1] = id end
  table.sort(ids, function(a, b) if total[a] ~= total[b] then return total[a] > total[b] end return a < b end)
  local labels, by_token = {}, {}
  for j, id in ipairs(ids) do labels[j] = batches.token_label(corpus, id) end
  for i, l in ipairs(layers) do
    local r = res[l]
    local o = r.outliers
    v.outlier_count[i] = o.elements
    v.outlier_count_by_channel[i] = o.by_channel
    local cats = {}
    for j, c in ipairs(CATS) do cats[j] = o.by_category[c] end
    v.outlier_count_by_category[i] = cats
    by_token[i] = {}
    for j, id in ipairs(ids) do by_token[i][j] = (o.by_token or {})[id] or 0 end
    local chans = {}
    for c = 1, #o.by_channel do chans[c] = { c = c - 1, n = o.by_channel[c] } end
    table.sort(chans, function(a, b) if a.n ~= b.n then return a.n > b.n end return a.c < b.c end)
    v.top_channel[i] = { chans[1].n > 0 and chans[1].c or 0 / 0, (chans[2] and chans[2].n > 0) and chans[2].c or 0 / 0 }
    local none = o.elements == 0
    v.top2_channel_share[i] = none and 0 / 0 or (chans[1].n + (chans[2] and chans[2].n or 0)) / o.elements
    v.delimiter_share[i] = none and 0 / 0 or o.by_category.delimiter / o.elements
    v.max_abs[i], v.std[i], v.max_abs_sigma[i] = r.max_abs, r.std, r.max_abs / r.std
    v.avg_kurtosis[i], v.avg_max_inf_norm[i] = r.avg_kurtosis, r.avg_max_inf_norm
    v.n_tokens = r.ntok
    v.tokens_by_category = {}
    for j, c in ipairs(CATS) do v.tokens_by_category[j] = (r.tokens_by_category or {})[c] or 0 end
  end
  v.outlier_count_by_token = by_token
  return { coords = { layer = layers, channel = C, category = CATS, token = labels, rank = { 1, 2 } }, vars = v,
           attrs = { top_tokens = cfg.top_tokens } }
end

-- the claim, checked on the data: > 97 % of outliers at delimiters, in a few dimensions; the
-- verdict's margins: at least DELIM_MIN of a layer's outliers at delimiters and at least
-- DELIM_MIN of them in at most DIMS_MAX hidden dimensions (QT: two dims hold them in BERT-base)
local DELIM_MIN, DIMS_MAX = 0.9, 4
local function summary(run)
  local a = run.out.analyze
  local v = figure.values(FIG, a)
  local parts, checks, n_with = {}, {}, 0
  for i, l in ipairs(a.coords.layer) do
    local n = v.outlier_count[i]
    if n > 0 then
      local dims = {}   -- the (at most two) top dims that hold outliers at all
      for k = 1, 2 do
        local c = v.top_channel(i, k)
        if c == c then dims[#dims + 1] = string.format("#%d", c) end
      end
      parts[#parts + 1] = string.format("layer %d: %d outliers, %.1f %% at delimiter tokens, %.1f %% in dim%s %s (max |x| %.3g = %.1f σ)",
        l, n, 100 * v.delimiter_share[i], 100 * v.top2_channel_share[i], #dims > 1 and "s" or "",
        table.concat(dims, " and "), v.max_abs[i], v.max_abs_sigma[i])
      -- the share of the outliers in the layer's DIMS_MAX most frequent dimensions
      local counts = {}
      local nC = type(a.coords.channel) == "number" and a.coords.channel or #a.coords.channel
      for c = 1, nC do counts[c] = v.outlier_count_by_channel(i, c) end
      table.sort(counts, function(x, y) return x > y end)
      local top = 0
      for k = 1, math.min(DIMS_MAX, #counts) do top = top + counts[k] end
      parts[#parts] = parts[#parts] .. string.format(", %.1f %% in its top %d dims", 100 * top / n, DIMS_MAX)
      n_with = n_with + 1
      checks[#checks + 1] = { string.format("layer %d: outliers at delimiters", l), v.delimiter_share[i], ">=", DELIM_MIN, scale = 100, fmt = "%.1f", unit = " %" }
      checks[#checks + 1] = { string.format("layer %d: outliers in its top %d dims", l, DIMS_MAX), top / n, ">=", DELIM_MIN, scale = 100, fmt = "%.1f", unit = " %" }
    else
      parts[#parts + 1] = string.format("layer %d: no 6σ outlier (max |x| %.3g = %.1f σ)", l, v.max_abs[i], v.max_abs_sigma[i])
    end
  end
  -- without an outlier (or without a delimiter token) there is nothing to locate: inconclusive
  local delimiters = v.tokens_by_category[2]
  table.insert(checks, 1, { "delimiter tokens in the held-out data", delimiters, ">=", 1, fmt = "%d", precondition = true })
  table.insert(checks, 2, { "last layers with 6σ outliers", n_with, ">=", 1, fmt = "%d", precondition = true })
  local judged = verdict.judge(checks)
  return {
    paper = "BERT-base, layers 10 and 11: > 97 % of 6σ outliers at delimiter tokens, concentrated in dims #180 and #720",
    reproduced = table.concat(parts, "; ") .. string.format(" (%d tokens analysed)", v.n_tokens),
    holds = judged.holds,
    notes = string.format("Criterion used here (with margins): in each of the last two layers that has 6σ outliers, ≥ %.0f %% of them at delimiters and ≥ %.0f %% of them in at most %d hidden dimensions. ", 100 * DELIM_MIN, 100 * DELIM_MIN, DIMS_MAX) ..
      judged.text .. "." ..
      (n_with == 0 and " Neither layer has a 6σ outlier here, so there is nothing to locate (verdict inconclusive); the panels say so instead of showing empty bars." or "") ..
      (n_with == 1 and " Only one of the two layers has 6σ outliers; the verdict rests on it." or "") ..
      (delimiters == 0 and " The held-out data hold no delimiter token, so the claim cannot be tested (verdict inconclusive)."
        or string.format(" %d of the %d held-out tokens are delimiters.", delimiters, v.n_tokens)),
  }
end

return {
  id = "qt-fig1",
  title = "6σ outliers by token and hidden dimension at the FFN output of a BERT-style encoder",
  source = { paper = "QT (Bondarenko et al. 2023)", figure = "Fig. 1",
             claim = "Outliers at the FFN output of the last layers sit in a few hidden dimensions and almost only at delimiter tokens ([SEP], '.', ',')." },
  profiles = papers.qt_bert_profiles({ quick = { top_tokens = 8 }, default = { top_tokens = 12 }, paper = { top_tokens = 12 } }),
  stages = figure.stages(train, analyze, FIG),
  summary = summary,
}
