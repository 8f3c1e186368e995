-- QT Fig. 2 — the attention head behind the top outlier dimension does "nothing".
--
-- Method (QT §3, Fig. 2): the BERT-style encoder of qt-fig1 (same settings, one training).
-- Find the hidden dimension with the most 6σ outliers at the FFN output of the last layer;
-- the head that owns it is the head of that layer whose slice of the attention output
-- projection W_o has the largest norm in that row (W_o[c, h·HD:(h+1)·HD]). For one held-out
-- sequence show that head's attention probabilities A (T×T), its values V (T×HD) and their
-- product A·V. QT finds the head puts most of its probability on delimiter tokens whose
-- values are small, so the product is near zero: a learned "no-op".
local analysis = require "outlierlab.measure.metrics"
local probes = require "outlierlab.measure.probes"
local figure = require "outlierlab.figure"
local verdict = require "outlierlab.judge.verdict"
local ffi = require "ffi"
local batcher = require "outlierlab.data.batcher"
local batches = require "outlierlab.measure.batches"
local recipes = require "outlierlab.recipes"
local papers = require "outlierlab.recipes.papers"

local model_spec = recipes.bert_mlm_spec   -- shared with qt-fig1: one trained model

local FIG = figure.declare{
  title = "Head {=outlier_head} of layer {=outlier_layer}, owner of dim #{=outlier_dim} ({=dim_outliers} 6σ outliers): attention, values, product (QT Fig. 2, reproduced)",
  dims = {
    { "query", long_name = "query token of the held-out sequence", labels = true },
    { "key", long_name = "key token of the held-out sequence", labels = true },
    { "head_dim", long_name = "dimension within the head" },
    { "head", long_name = "attention head of the last layer (0-based)" },
  },
  vars = {
    { "attention_probs", dims = { "query", "key" }, long_name = "attention probabilities of the outlier head", units = "1" },
    { "values", dims = { "key", "head_dim" }, long_name = "value vectors of the outlier head", units = "1" },
    { "output", dims = { "query", "head_dim" }, long_name = "attention output (probabilities times values) of the outlier head", units = "1" },
    { "attention_received", dims = { "key" }, long_name = "attention received by each key, mean over queries", units = "1", label = "attention received" },
    { "value_norm", dims = { "key" }, long_name = "L2 norm of the value vector of each key", units = "1", label = "value norm" },
    { "is_delimiter", dims = { "key" }, long_name = "1 when the key token is a delimiter", units = "1", type = "int" },
    { "w_o_slice_norm", dims = { "head" }, long_name = "norm of the head's slice of W_o in the row of the outlier dimension", units = "1" },
    { "outlier_layer", dims = {}, long_name = "layer analysed (the last)", units = "1", type = "int" },
    { "outlier_dim", dims = {}, long_name = "hidden dimension with the most 6 sigma outliers at the FFN output (without outliers: the largest max |x|)", units = "1", type = "int" },
    { "dim_outliers", dims = {}, long_name = "6 sigma outliers in that dimension", units = "1", type = "int" },
    { "outlier_head", dims = {}, long_name = "head owning the dimension (largest W_o slice norm in its row)", units = "1", type = "int" },
    { "delimiter_attention", dims = {}, long_name = "share of the head's attention on delimiter keys (mean over queries)", units = "1" },
    { "n_delimiter_keys", dims = {}, long_name = "delimiter keys in the sequence", units = "1", type = "int" },
    { "value_norm_delimiter", dims = {}, long_name = "mean value norm of the delimiter keys (undefined without delimiters)", units = "1" },
    { "value_norm_other", dims = {}, long_name = "mean value norm of the other keys", units = "1" },
  },
  panels = {
    { kind = "heatmap", z = "attention_probs", marks = "is_delimiter", title = "attention probabilities A (dashed: delimiter keys)",
      xlabel = "key", ylabel = "query", cblabel = "probability" },
    { kind = "heatmap", z = "values", title = "values V", xlabel = "head dimension", ylabel = "key", symmetric = true },
    { kind = "heatmap", z = "output", title = "output A·V", xlabel = "head dimension", ylabel = "query", symmetric = true },
    { kind = "bars", x = "key", y = "attention_received", title = "attention received per key (mean over queries)", xlabel = "key",
      ylabel = "probability" },
    { kind = "bars", x = "key", y = "value_norm", title = "value norm ‖v‖ per key", xlabel = "key", ylabel = "‖v‖" },
  },
}

local function train(run) return recipes.fit(run, model_spec(run.cfg)) end

local function analyze(run)
  local cfg, spec = run.cfg, model_spec(run.cfg)
  local corpus = batcher.corpus(spec.data, run)   -- --text with --model: the text in the model's tokens
  local ctx, m = recipes.load(spec, run.out.train)
  local L, C, NH = m.cfg.n_layer, m.cfg.d_model, m.cfg.n_head
  local HD = C / NH
  local last = L - 1
  -- 1. the top outlier dimension of the last layer's FFN output
  local stats = analysis.LayerStats{ T = cfg.seq_len, C = C, rule = analysis.QT_6SIGMA }
  local P = probes.new{ points = { "ffn_out" }, layers = { last } }
  P:attach("ffn_out", stats)
  batches.probe_batches(ctx, m, P, corpus, spec, cfg.eval_batches)
  local r = stats:result()[last]
  local dim, best = 0, -1
  for c = 1, C do
    local score = r.outliers.by_channel[c] * 1e6 + r.max_abs_by_channel[c]   -- most outliers, then largest |x|
    if score > best then best, dim = score, c - 1 end
  end
  -- 2. the head that owns it: largest ‖W_o[dim, head slice]‖ in the last layer
  local wo
  local seen = -1
  for _, p in ipairs(ctx:params()) do
    if ffi.string(p.name):find("o_proj.weight", 1, true) then
      seen = seen + 1
      if seen == last then wo = p end
    end
  end
  if not wo then error("qt-fig2: no o_proj.weight parameter for layer " .. last, 0) end
  local head, hn, norms = 0, -1, {}
  for h = 0, NH - 1 do
    local s = 0
    for j = 0, HD - 1 do local w = wo.data[dim * (NH * HD) + h * HD + j]; s = s + w * w end
    norms[h + 1] = math.sqrt(s)
    if norms[h + 1] > hn then hn, head = norms[h + 1], h end
  end
  -- 3. one held-out sequence: that head's probabilities and values
  local T = cfg.seq_len
  local A, V, ids = {}, {}, {}
  local P2 = probes.new{ points = { "attn_probs", "v" }, layers = { last } }
  P2:attach("attn_probs", function(t)
    for i = 0, T - 1 do
      A[i + 1] = {}
      for j = 0, T - 1 do A[i + 1][j + 1] = t.data[(head * T + i) * T + j] end
    end
  end)
  P2:attach("v", function(t, _, batch)
    local nkv = t:size(1)
    local hv = head % nkv
    for i = 0, T - 1 do
      V[i + 1] = {}
      for j = 0, HD - 1 do V[i + 1][j + 1] = t.data[(hv * T + i) * HD + j] end
      ids[i + 1] = batch.ids.idata[i]
    end
  end)
  batches.probe_batches(ctx, m, P2, corpus, spec, 1)
  local O = {}
  for i = 1, T do
    O[i] = {}
    for j = 1, HD do
      local s = 0
      for k = 1, T do s = s + A[i][k] * V[k][j] end
      O[i][j] = s
    end
  end
  local recv, vnorm, isd, labels = {}, {}, {}, {}
  local delim_mass, vn_delim, vn_other, nd, no = 0, 0, 0, 0, 0
  for k = 1, T do
    local r = 0
    for i = 1, T do r = r + A[i][k] end
    r = r / T
    local vn = 0
    for j = 1, HD do vn = vn + V[k][j] ^ 2 end
    vn = math.sqrt(vn)
    local d = corpus.category(ids[k]) == "delimiter"
    recv[k], vnorm[k], isd[k], labels[k] = r, vn, d and 1 or 0, batches.token_label(corpus, ids[k])
    if d then delim_mass, vn_delim, nd = delim_mass + r, vn_delim + vn, nd + 1
    else vn_other, no = vn_other + vn, no + 1 end
  end
  return {
    coords = { query = labels, key = labels, head_dim = HD, head = NH },
    vars = { attention_probs = A, values = V, output = O, attention_received = recv, value_norm = vnorm, is_delimiter = isd,
             w_o_slice_norm = norms, outlier_layer = last, outlier_dim = dim, dim_outliers = r.outliers.by_channel[dim + 1],
             outlier_head = head, delimiter_attention = delim_mass, n_delimiter_keys = nd,
             value_norm_delimiter = nd > 0 and vn_delim / nd or 0 / 0, value_norm_other = no > 0 and vn_other / no or 0 / 0 },
  }
end

-- the verdict's margin: "most of its probability" on delimiters, as in QT Fig. 2 (≥ 0.8)
local ATTN_MIN = 0.8

local function summary(run)
  local v = figure.values(FIG, run.out.analyze)
  local found = v.dim_outliers > 0
  -- without a 6σ outlier no head owns an outlier dimension, without a delimiter key nothing to
  -- attend: nothing to test (preconditions)
  local judged = verdict.judge{
    { "6σ outliers in the dimension", v.dim_outliers, ">=", 1, fmt = "%d", precondition = true },
    { "delimiter keys in the sequence", v.n_delimiter_keys, ">=", 1, fmt = "%d", precondition = true },
    { "the head's attention on delimiters", v.delimiter_attention, ">=", ATTN_MIN, scale = 100, fmt = "%.0f", unit = " %" },
    { "mean value norm at delimiters / elsewhere", v.value_norm_delimiter / v.value_norm_other, "<", 1, fmt = "%.3g" },
  }
  return {
    paper = "BERT-base layer 10/11: the head owning outlier dim #180/#720 puts most of its probability on [SEP] and '.', whose values are small",
    reproduced = string.format("dim #%d (%d 6σ outliers) owned by head %d of layer %d; that head puts %.0f %% of its attention on %d delimiter keys; mean value norm %s at delimiters vs %.3g elsewhere",
      v.outlier_dim, v.dim_outliers, v.outlier_head, v.outlier_layer, 100 * v.delimiter_attention, v.n_delimiter_keys,
      v.n_delimiter_keys > 0 and string.format("%.3g", v.value_norm_delimiter) or "undefined (no delimiter key)", v.value_norm_other),
    holds = judged.holds,
    notes = string.format("Criterion (with its margin): the dimension has 6σ outliers, the head puts ≥ %.0f %% of its attention on delimiters, and delimiter values are smaller than the others. ", 100 * ATTN_MIN) ..
      judged.text .. "." ..
      (found and "" or " The last layer has no 6σ outlier at the FFN output, so the dimension shown is the one with the largest |x| and no head owns an outlier (verdict inconclusive).") ..
      (v.n_delimiter_keys > 0 and "" or " The sequence shown holds no delimiter token (verdict inconclusive)."),
  }
end

return {
  id = "qt-fig2",
  title = "Attention probabilities, values and their product for the head behind the top outlier dimension",
  source = { paper = "QT (Bondarenko et al. 2023)", figure = "Fig. 2",
             claim = "The head that owns the outlier dimension attends mostly to delimiter tokens whose values are small: it learns to do nothing." },
  profiles = papers.qt_bert_profiles({}),
  stages = figure.stages(train, analyze, FIG),
  summary = summary,
}
