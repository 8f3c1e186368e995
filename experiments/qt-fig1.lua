-- QT Fig. 1 — where the 6σ outliers of a BERT-style encoder sit.
--
-- Method (QT §3, Fig. 1): train a BERT-style encoder with masked-language modelling on the
-- generated corpus. Hook the output of the feed-forward network (before the residual sum)
-- of the last two layers. Over held-out sequences, an element x of that tensor is an
-- outlier when |x − μ| > 6σ, with μ and σ over the whole activation tensor of a batch
-- (Bondarenko et al. 2021). Count outliers by the token they belong to and by hidden
-- dimension. The paper finds them in a few hidden dimensions (#180, #720 in BERT-base) and
-- almost only at delimiter tokens ([SEP], ".", ",": > 97 %).
local exp_runner = require "outlierlab.experiment"
local analysis = require "outlierlab.analysis"
local probes = require "outlierlab.probes"

local model_spec = exp_runner.bert_mlm_spec   -- shared with qt-fig2: one trained model

-- 1. train the encoder (cached by its settings; an interrupted run resumes from its checkpoint)
local function train(run)
  return exp_runner.train_model(run, model_spec(run.cfg))
end

-- 2. 6σ outliers at the FFN output of the last two layers, streamed over held-out batches
local function analyze(run)
  local cfg, spec = run.cfg, model_spec(run.cfg)
  local corpus = exp_runner.corpus(spec.data, run)   -- --text with --model: the text in the model's tokens
  local ctx, m = exp_runner.load_model(spec, run.out.train)
  local L = m.cfg.n_layer
  local layers = { L - 2, L - 1 }
  local stats = analysis.LayerStats{ T = cfg.seq_len, C = m.cfg.d_model, V = cfg.vocab_size,
                                     rule = analysis.QT_6SIGMA, category = corpus.category }
  local P = probes.new{ points = { "ffn_out" }, layers = layers }
  P:attach("ffn_out", stats)
  exp_runner.probe_batches(ctx, m, P, corpus, spec, cfg.eval_batches)
  local res = stats:result()
  local out = { layers = layers, d_model = m.cfg.d_model, n_tok = 0, per_layer = {} }
  for i, l in ipairs(layers) do
    local r = res[l]
    local o = r.outliers
    local toks = {}
    for id, n in pairs(o.by_token or {}) do toks[#toks + 1] = { id = id, n = n } end
    table.sort(toks, function(a, b) if a.n ~= b.n then return a.n > b.n end return a.id < b.id end)
    local top = {}
    for j = 1, math.min(cfg.top_tokens, #toks) do
      top[j] = { label = exp_runner.token_label(corpus, toks[j].id), id = toks[j].id, n = toks[j].n,
                 category = corpus.category(toks[j].id) }
    end
    local chans = {}
    for c = 1, #o.by_channel do chans[c] = { c = c - 1, n = o.by_channel[c] } end
    table.sort(chans, function(a, b) if a.n ~= b.n then return a.n > b.n end return a.c < b.c end)
    out.per_layer[i] = {
      layer = l, elements = o.elements, by_channel = o.by_channel, top_tokens = top,
      by_category = o.by_category, top_channels = { chans[1].c, chans[2].c },
      top2_share = o.elements > 0 and (chans[1].n + chans[2].n) / o.elements or 0,
      delimiter_share = o.elements > 0 and o.by_category.delimiter / o.elements or 0,
      tokens_by_category = r.tokens_by_category, max_abs = r.max_abs, std = r.std,
      avg_kurtosis = r.avg_kurtosis, avg_max_inf_norm = r.avg_max_inf_norm,
    }
    out.n_tok = r.ntok
  end
  return out
end

-- 3. NetCDF + figure
local function plot(run)
  local a = run.out.analyze
  local nc = run:netcdf()
  local layer_vals = {}
  for i, p in ipairs(a.per_layer) do layer_vals[i] = p.layer end
  nc:dim("layer", #layer_vals, layer_vals, { long_name = "transformer layer (0-based)" })
  nc:dim("channel", a.d_model, nil, { long_name = "hidden dimension (0-based)" })
  nc:dim("category", 4, nil, { long_name = "token category index: 0 initial, 1 delimiter, 2 weak-semantic, 3 other" })
  local by_ch, by_cat, elems, dshare, t2, kurt, inf = {}, {}, {}, {}, {}, {}, {}
  for i, p in ipairs(a.per_layer) do
    by_ch[i] = p.by_channel
    by_cat[i] = { p.by_category.initial, p.by_category.delimiter, p.by_category.weak, p.by_category.other }
    elems[i], dshare[i], t2[i] = p.elements, p.delimiter_share, p.top2_share
    kurt[i], inf[i] = p.avg_kurtosis, p.avg_max_inf_norm
  end
  local u = { units = "1", type = "int" }
  nc:var("outlier_count_by_channel", { "layer", "channel" }, by_ch,
         { long_name = "number of 6 sigma outliers at the FFN output per hidden dimension", units = "1", type = "int" })
  nc:var("outlier_count_by_category", { "layer", "category" }, by_cat,
         { long_name = "number of 6 sigma outliers at the FFN output per token category", units = u.units, type = "int" })
  nc:var("outlier_count", { "layer" }, elems, { long_name = "number of 6 sigma outliers at the FFN output", units = "1", type = "int" })
  nc:var("delimiter_share", { "layer" }, dshare, { long_name = "fraction of 6 sigma outliers at delimiter tokens", units = "1", type = "double" })
  nc:var("top2_channel_share", { "layer" }, t2, { long_name = "fraction of 6 sigma outliers in the two most frequent hidden dimensions", units = "1", type = "double" })
  nc:var("avg_kurtosis", { "layer" }, kurt, { long_name = "Pearson kurtosis of the FFN output per sequence, averaged", units = "1", type = "double" })
  nc:var("avg_max_inf_norm", { "layer" }, inf, { long_name = "max |x| of the FFN output per sequence, averaged", units = "1", type = "double" })
  nc:close()

  local blocks = {}
  for _, p in ipairs(a.per_layer) do
    local rows = {}
    for j, tk in ipairs(p.top_tokens) do rows[j] = { tk.label, tk.n } end
    local crow = {}
    for c = 1, #p.by_channel do crow[c] = { c - 1, p.by_channel[c] } end
    local label = "layer " .. p.layer
    blocks[#blocks + 1] = { columns = { "token", label }, rows = rows, empty_row = { "(none)", 0 } }
    blocks[#blocks + 1] = { columns = { "channel", label }, rows = crow }
  end
  run:figure(run.id, "qt-fig1", blocks)
end

-- the claim, checked on the data: > 97 % of outliers at delimiters, in a few dimensions
local function summary(run)
  local a = run.out.analyze
  local parts, holds = {}, true
  local any = false
  for _, p in ipairs(a.per_layer) do
    if p.elements > 0 then
      local dims = {}   -- the (at most two) top dims that hold outliers at all
      for i = 1, 2 do
        local c = p.top_channels[i]
        if c and (p.by_channel[c + 1] or 0) > 0 then dims[#dims + 1] = "#" .. c end
      end
      parts[#parts + 1] = string.format("layer %d: %d outliers, %.1f %% at delimiter tokens, %.1f %% in dim%s %s (max |x| %.3g = %.1f σ)",
        p.layer, p.elements, 100 * p.delimiter_share, 100 * p.top2_share, #dims > 1 and "s" or "",
        table.concat(dims, " and "), p.max_abs, p.max_abs / p.std)
    else
      parts[#parts + 1] = string.format("layer %d: no 6σ outlier (max |x| %.3g = %.1f σ)", p.layer, p.max_abs, p.max_abs / p.std)
    end
    if p.elements > 0 then any = true end
    if not (p.delimiter_share > 0.9 and p.top2_share > 0.5) then holds = false end
  end
  if not any then holds = false end
  return {
    paper = "BERT-base, layers 10 and 11: > 97 % of 6σ outliers at delimiter tokens, concentrated in dims #180 and #720",
    reproduced = table.concat(parts, "; ") .. string.format(" (%d tokens analysed)", a.n_tok),
    holds = holds,
    notes = "Criterion used here: in both layers > 90 % of outliers at delimiters and > 50 % in the top two dimensions.",
  }
end

return {
  id = "qt-fig1",
  title = "6σ outliers by token and hidden dimension at the FFN output of a BERT-style encoder",
  source = { paper = "QT (Bondarenko et al. 2023)", figure = "Fig. 1",
             claim = "Outliers at the FFN output of the last layers sit in a few hidden dimensions and almost only at delimiter tokens ([SEP], '.', ',')." },
  profiles = exp_runner.profiles_with(exp_runner.BERT_MLM_PROFILES, { quick = { top_tokens = 8 }, default = { top_tokens = 12 }, paper = { top_tokens = 12 } }),
  stages = { { "train", train }, { "analyze", analyze, cache = true }, { "plot", plot } },
  summary = summary,
}
