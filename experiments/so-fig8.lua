-- SO Fig. 8 — activation outliers spread into attention: the outlier token's key and the
-- queries align in a few dimensions, and its value is small.
--
-- Method (SO §4.2, Fig. 8): the LLaMA-style model of so-fig3 (same settings, one training). On
-- one held-out sequence, take the head that puts the largest share of its attention on the
-- initial token (the outlier token of so-fig3; the sink). Split its score q_i·k_0/√d by head
-- dimension d, q_i[d]·k_0[d]/√d averaged over the other queries, and report the share of the
-- score that the two largest dimensions carry (SO: dimensions 58 and 122 of LLaMA2-7B's
-- layer 3), against the same split for the other keys; and the value norms ‖v_j‖, the sink's
-- against the median of the others. q and k are taken after the rotary embedding (what the
-- score multiplies).
local figure = require "outlierlab.figure"
local inspect = require "outlierlab.measure.inspect"
local batcher = require "outlierlab.data.batcher"
local recipes = require "outlierlab.recipes"

local model_spec = recipes.llama_lm_spec   -- shared with so-fig3: one trained model

local FIG = figure.declare{
  title = "Q/K alignment and small values at the outlier token (SO Fig. 8, reproduced)",
  dims = {
    { "position", long_name = "query/key token of the held-out sequence", labels = true },
    { "head_dim", long_name = "dimension within the head (0-based)" },
  },
  vars = {
    { "q", dims = { "position", "head_dim" }, long_name = "queries of the sink head (after RoPE)", units = "1" },
    { "k", dims = { "position", "head_dim" }, long_name = "keys of the sink head's key/value group (after RoPE)", units = "1" },
    { "score_sink", dims = { "head_dim" }, long_name = "mean over queries of q_i[d] k_0[d] / sqrt(d_head): the sink's score by dimension", units = "1", label = "sink key" },
    { "score_other", dims = { "head_dim" }, long_name = "the same for the other keys, averaged over keys", units = "1", label = "other keys" },
    { "value_norm", dims = { "position" }, long_name = "L2 norm of each token's value in the sink head", units = "1", label = "||v||" },
    { "attention", dims = { "position", "position" }, long_name = "attention probabilities of the sink head", units = "1" },
    { "is_initial", dims = { "position" }, long_name = "1 where the token is the initial token", units = "1", type = "int" },
    { "layer", dims = {}, long_name = "layer of the sink head", units = "1", type = "int" },
    { "head", dims = {}, long_name = "the sink head", units = "1", type = "int" },
    { "sink_share", dims = {}, long_name = "attention share of the sink head on the initial token", units = "1" },
    { "top2_share", dims = {}, long_name = "share of the sink's mean score carried by its two largest dimensions", units = "1" },
    { "top_dim_1", dims = {}, long_name = "head dimension carrying the largest part of the sink's score", units = "1", type = "int" },
    { "top_dim_2", dims = {}, long_name = "head dimension carrying the second largest part", units = "1", type = "int" },
    { "value_ratio", dims = {}, long_name = "||v|| of the initial token over the median ||v|| of the others", units = "1" },
  },
  panels = {
    { kind = "heatmap", z = "attention", marks = "is_initial", title = "attention of the sink head", xlabel = "key", ylabel = "query" },
    { kind = "heatmap", z = "q", title = "queries q (sink head)", xlabel = "head dimension", ylabel = "token", symmetric = true },
    { kind = "heatmap", z = "k", title = "keys k (the sink is row 0)", xlabel = "head dimension", ylabel = "token", symmetric = true },
    { kind = "bars", x = "head_dim", y = { "score_sink", "score_other" }, title = "score q·k/√d split by dimension", xlabel = "head dimension" },
    { kind = "bars", x = "position", y = "value_norm", title = "value norms: small at the sink", max_labels = 64 },
  },
}

local function train(run) return recipes.fit(run, model_spec(run.cfg)) end

local function analyze(run)
  local cfg, spec = run.cfg, model_spec(run.cfg)
  local corpus = batcher.corpus(spec.data, run)
  local ctx, m = recipes.load(spec, run.out.train)
  local cap = inspect.capture(ctx, m, corpus, spec, { points = { "attn_probs", "q", "k", "v" } })
  local T = cap.T
  local best = { s = -1 }
  for l, A in pairs(cap.t.attn_probs) do
    for h = 0, A.shape[1] - 1 do
      local s = inspect.category_share(inspect.plane(A, h), T, cap.cats, "initial")
      if s == s and s > best.s then best = { s = s, l = l, h = h } end
    end
  end
  local l, h = best.l, best.h
  local Q, K, V = inspect.get(cap, "q", l), inspect.get(cap, "k", l), inspect.get(cap, "v", l)
  local NH, NKV, HD = Q.shape[1], K.shape[1], Q.shape[3]
  local g = inspect.kv_head(h, NH, NKV)
  local q, k, v = inspect.plane(Q, h), inspect.plane(K, g), inspect.plane(V, g)
  local queries = {}
  for i = 2, T do queries[#queries + 1] = i end
  local k0 = {}
  for d = 1, HD do k0[d] = k[d] end
  local sink = inspect.score_by_dim(q, k0, HD, queries)
  local other = {}
  for d = 1, HD do other[d] = 0 end
  for j = 2, T do
    local kj = {}
    for d = 1, HD do kj[d] = k[(j - 1) * HD + d] end
    local s = inspect.score_by_dim(q, kj, HD, queries)
    for d = 1, HD do other[d] = other[d] + s[d] / (T - 1) end
  end
  local share, dims = inspect.top_share(sink, 2)
  local vn = inspect.row_norms(v, T, HD)
  local others = {}
  for j = 2, T do others[#others + 1] = vn[j] end
  local init = {}
  for i, c in ipairs(cap.cats) do init[i] = c == "initial" and 1 or 0 end
  return {
    coords = { position = cap.labels, head_dim = HD },
    vars = { q = q, k = k, score_sink = sink, score_other = other, value_norm = vn, attention = inspect.plane(inspect.get(cap, "attn_probs", l), h),
             is_initial = init, layer = l, head = h, sink_share = best.s, top2_share = share, top_dim_1 = dims[1],
             top_dim_2 = dims[2] or 0 / 0, value_ratio = vn[1] / inspect.median(others) },
  }
end

local function summary(run)
  local v = figure.values(FIG, run.out.analyze)
  local holds   -- without a sink head there is no outlier token to align with
  if v.sink_share > 0.5 then holds = v.top2_share > 0.5 and v.value_ratio < 1 end
  return {
    paper = "LLaMA2-7B layer 3: queries and the outlier tokens' keys align in dimensions 58 and 122, which dominate the dot product; the outlier tokens' values are much smaller than the others'",
    reproduced = string.format("sink head: layer %d head %d (%.0f %% of its attention on the initial token); dimensions %d and %d carry %.0f %% of the sink's mean score; ‖v‖ at the sink = %.2f × the median of the others",
      v.layer, v.head, 100 * v.sink_share, v.top_dim_1, v.top_dim_2, 100 * v.top2_share, v.value_ratio),
    holds = holds,
    notes = "Criterion: a head puts more than half of its attention on the initial token, two head dimensions carry more than half of that score, and the sink's value norm is below the median of the others." ..
      (v.sink_share <= 0.5 and " No head of this model parks its attention on the initial token: the panels show the most sink-like head." or ""),
  }
end

return {
  id = "so-fig8",
  title = "Q/K alignment in a few dimensions at the outlier token, and its small value",
  source = { paper = "SO (An et al. 2025)", figure = "Fig. 8",
             claim = "Outlier tokens' keys align with the queries in a few dimensions, which makes the attention concentrate on them, while their values are small." },
  profiles = recipes.profiles_with(recipes.LLAMA_LM_PROFILES, {}),
  stages = figure.stages(train, analyze, FIG),
  summary = summary,
}
