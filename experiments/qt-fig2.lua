-- QT Fig. 2 — the attention head behind the top outlier dimension does "nothing".
--
-- Method (QT §3, Fig. 2): the BERT-style encoder of qt-fig1 (same settings, one training).
-- Find the hidden dimension with the most 6σ outliers at the FFN output of the last layer;
-- the head that owns it is the head of that layer whose slice of the attention output
-- projection W_o has the largest norm in that row (W_o[c, h·HD:(h+1)·HD]). For one held-out
-- sequence show that head's attention probabilities A (T×T), its values V (T×HD) and their
-- product A·V. QT finds the head puts most of its probability on delimiter tokens whose
-- values are small, so the product is near zero: a learned "no-op".
local exp_runner = require "outlierlab.experiment"
local analysis = require "outlierlab.analysis"
local probes = require "outlierlab.probes"
local ffi = require "ffi"

local model_spec = exp_runner.bert_mlm_spec   -- shared with qt-fig1: one trained model

local function train(run) return exp_runner.train_model(run, model_spec(run.cfg)) end

local function analyze(run)
  local cfg, spec = run.cfg, model_spec(run.cfg)
  local corpus = exp_runner.corpus(spec.data, run)   -- --text with --model: the text in the model's tokens
  local ctx, m = exp_runner.load_model(spec, run.out.train)
  local L, C, NH = m.cfg.n_layer, m.cfg.d_model, m.cfg.n_head
  local HD = C / NH
  local last = L - 1
  -- 1. the top outlier dimension of the last layer's FFN output
  local stats = analysis.LayerStats{ T = cfg.seq_len, C = C, rule = analysis.QT_6SIGMA }
  local P = probes.new{ points = { "ffn_out" }, layers = { last } }
  P:attach("ffn_out", stats)
  exp_runner.probe_batches(ctx, m, P, corpus, spec, cfg.eval_batches)
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
  exp_runner.probe_batches(ctx, m, P2, corpus, spec, 1)
  local O = {}
  for i = 1, T do
    O[i] = {}
    for j = 1, HD do
      local s = 0
      for k = 1, T do s = s + A[i][k] * V[k][j] end
      O[i][j] = s
    end
  end
  local keys = {}
  local delim_mass, vn_delim, vn_other, nd, no = 0, 0, 0, 0, 0
  for k = 1, T do
    local recv = 0
    for i = 1, T do recv = recv + A[i][k] end
    recv = recv / T
    local vn = 0
    for j = 1, HD do vn = vn + V[k][j] ^ 2 end
    vn = math.sqrt(vn)
    local isd = corpus.category(ids[k]) == "delimiter"
    keys[k] = { k - 1, exp_runner.token_label(corpus, ids[k]), recv, vn, isd and 1 or 0 }
    if isd then delim_mass, vn_delim, nd = delim_mass + recv, vn_delim + vn, nd + 1
    else vn_other, no = vn_other + vn, no + 1 end
  end
  return { layer = last, dim = dim, dim_outliers = r.outliers.by_channel[dim + 1], head = head, head_norms = norms,
           A = A, V = V, O = O, keys = keys, T = T, HD = HD, delim_mass = delim_mass,
           vn_delim = nd > 0 and vn_delim / nd or 0 / 0, vn_other = no > 0 and vn_other / no or 0 / 0, n_delim = nd }
end

local function plot(run)
  local a = run.out.analyze
  local nc = run:netcdf()
  nc:dim("query", a.T, nil, { long_name = "query position" })
  nc:dim("key", a.T, nil, { long_name = "key position" })
  nc:dim("head_dim", a.HD, nil, { long_name = "dimension within the head" })
  nc:var("attention_probs", { "query", "key" }, a.A, { long_name = "attention probabilities of the outlier head", units = "1" })
  nc:var("values", { "key", "head_dim" }, a.V, { long_name = "value vectors of the outlier head", units = "1" })
  nc:var("output", { "query", "head_dim" }, a.O, { long_name = "attention output (probabilities times values) of the outlier head", units = "1" })
  local recv, vn, isd = {}, {}, {}
  for k, row in ipairs(a.keys) do recv[k], vn[k], isd[k] = row[3], row[4], row[5] end
  nc:var("attention_received", { "key" }, recv, { long_name = "attention received by each key, mean over queries", units = "1" })
  nc:var("value_norm", { "key" }, vn, { long_name = "L2 norm of the value vector of each key", units = "1" })
  nc:var("is_delimiter", { "key" }, isd, { long_name = "1 when the key token is a delimiter", units = "1", type = "int" })
  nc:attr("outlier_layer", a.layer); nc:attr("outlier_dim", a.dim); nc:attr("outlier_head", a.head)
  nc:close()
  run:figure(run.id, "qt-fig2", {
    { matrix = a.A }, { matrix = a.V }, { matrix = a.O },
    { columns = { "key", "token", string.format("layer %d head %d (dim #%d)", a.layer, a.head, a.dim), "value norm", "delimiter" },
      rows = a.keys },
  })
end

local function summary(run)
  local a = run.out.analyze
  local holds = a.dim_outliers > 0 and a.delim_mass > 0.5 and a.vn_delim < a.vn_other
  return {
    paper = "BERT-base layer 10/11: the head owning outlier dim #180/#720 puts most of its probability on [SEP] and '.', whose values are small",
    reproduced = string.format("dim #%d (%d 6σ outliers) owned by head %d of layer %d; that head puts %.0f %% of its attention on %d delimiter keys; mean value norm %.3g at delimiters vs %.3g elsewhere",
      a.dim, a.dim_outliers, a.head, a.layer, 100 * a.delim_mass, a.n_delim, a.vn_delim, a.vn_other),
    holds = holds,
    notes = "Criterion: the dimension has 6σ outliers, the head puts > 50 % of its attention on delimiters, and delimiter values are smaller than the others.",
  }
end

return {
  id = "qt-fig2",
  title = "Attention probabilities, values and their product for the head behind the top outlier dimension",
  source = { paper = "QT (Bondarenko et al. 2023)", figure = "Fig. 2",
             claim = "The head that owns the outlier dimension attends mostly to delimiter tokens whose values are small: it learns to do nothing." },
  profiles = exp_runner.profiles_with(exp_runner.BERT_MLM_PROFILES, {}),
  stages = { { "train", train }, { "analyze", analyze, cache = true }, { "plot", plot } },
  summary = summary,
}
