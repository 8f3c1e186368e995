-- BLOG — three checks of the argument of "Why do transformers have outliers?" on one model.
--
-- Method: the softmax model of so-fig11's attention-variant sweep (the same spec through
-- papers.so_spec, so the same cached model: a pre-norm decoder; with rotary embeddings, as the
-- LLaMA-style organism profiles, q and k are taken after the rotation in (1), and (3) compares
-- the projections before it), one held-out sequence.
--  (1) Dynamic range. A query i that puts share p on the sink (the initial token) and the rest
--      on the other n − 1 visible keys needs a score gap M with e^M/(e^M + n − 1) = p, i.e.
--      M = log((n − 1)·p/(1 − p)) when the other scores are equal. Measured per query of every
--      head: p from the model's attention probabilities, the gap s_i0 − mean_{j≠0} s_ij from its
--      queries and keys (s = q·k/√d). The gap is at least M (Jensen, equality for equal scores):
--      the check is that the model's own numbers obey it, and how large M is for sink heads.
--  (2) The hypersphere. After LayerNorm without γ and β every token has norm √d (up to ε); with γ
--      the norm of γ ⊙ x̂ is about ‖γ‖ for a token whose x̂ is spread over the channels, and
--      departs from it where x̂ concentrates in a few channels (the massive tokens).
--  (3) Shared singular directions. The no-op needs W_q and W_k of a head to amplify the same
--      input directions: the principal angles between the top-2 right singular subspaces of the
--      head's W_q and W_k rows, for sink heads (share on the initial token > 0.5) and the others,
--      beside the chance level (the same angle between random subspace pairs of the same shape).
local figure = require "outlierlab.figure"
local inspect = require "outlierlab.measure.inspect"
local seeds = require "outlierlab.judge.seeds"
local batcher = require "outlierlab.data.batcher"
local batches = require "outlierlab.measure.batches"
local papers = require "outlierlab.recipes.papers"
local recipes = require "outlierlab.recipes"

local RANK = 2          -- dimension of the compared singular subspaces
local SINK = 0.5        -- a head is a sink head when it puts more than this on the initial token
local CHANCE_PAIRS = 4000   -- random subspace pairs of (3)'s chance level

local FIG = figure.declare{
  title = "The no-op's dynamic range, the LayerNorm hypersphere and shared singular directions (BLOG checks)",
  dims = {
    { "point", long_name = "query of a sink head (layer, head, position)" },
    { "layer", long_name = "transformer layer (0-based)" },
    { "head", long_name = "attention head (0-based)" },
    { "head_kind", long_name = "heads", labels = true },
  },
  vars = {
    { "required_gap", dims = { "point" }, long_name = "log((n - 1) p / (1 - p)) for the measured sink share p of the query", units = "1", label = "required gap M" },
    { "measured_gap", dims = { "point" }, long_name = "score of the sink minus the mean score of the other visible keys", units = "1", label = "measured gap" },
    { "sink_share", dims = { "layer", "head" }, long_name = "attention share on the initial token, mean over queries", units = "1" },
    { "normalized_norm", dims = { "layer" }, long_name = "mean over tokens of ||LN(x) without gamma, beta|| / sqrt(d)", units = "1", label = "‖x̂‖/√d" },
    { "gamma_norm_initial", dims = { "layer" }, long_name = "||LN(x)|| / ||gamma|| at the initial token", units = "1", label = "‖LN(x)‖/‖γ‖, initial token" },
    { "gamma_norm_other", dims = { "layer" }, long_name = "||LN(x)|| / ||gamma||, mean over the other tokens", units = "1", label = "‖LN(x)‖/‖γ‖, other tokens" },
    { "input_norm_ratio", dims = { "layer" }, long_name = "||x|| of the initial token over the mean ||x|| of the others, before the norm", units = "1", label = "‖x‖ initial / others" },
    { "angle", dims = { "layer", "head" }, long_name = "smallest principal angle between the top-2 right singular subspaces of W_q and W_k of the head", units = "degree" },
    { "mean_angle", dims = { "head_kind" }, long_name = "mean smallest principal angle over the heads of each kind (undefined without such heads); the last: over random subspace pairs of the same shape (chance)", units = "degree", label = "smallest angle" },
    { "chance_angle_sd", dims = {}, long_name = "standard deviation of the smallest principal angle between random subspace pairs of the same shape", units = "degree" },
    { "gap_holds", dims = {}, long_name = "share of sink-head queries whose measured gap is at least the required gap (minus 1e-3)", units = "1" },
    { "median_required_gap", dims = {}, long_name = "median required gap over sink-head queries", units = "1" },
    { "max_norm_error", dims = {}, long_name = "largest | ||x_hat|| / sqrt(d) - 1 | over tokens and layers", units = "1" },
    { "sink_heads", dims = {}, long_name = "heads with a share above 0.5 on the initial token", units = "1", type = "int" },
  },
  panels = {
    { kind = "scatter", x = "required_gap", y = "measured_gap", title = "(1) score gap of sink-head queries against the required M",
      xlabel = "required M = log((n-1)p/(1-p))", ylabel = "measured gap", why_empty = "no sink head (share > 0.5 on the initial token)" },
    { kind = "heatmap", z = "sink_share", title = "share on the initial token per layer and head", xlabel = "head", ylabel = "layer" },
    { kind = "line", x = "layer", y = { "normalized_norm", "gamma_norm_initial", "gamma_norm_other" }, title = "(2) norms after the LayerNorm before attention" },
    { kind = "line", x = "layer", y = "input_norm_ratio", logy = true, title = "(2) the norm differences the LayerNorm erases" },
    { kind = "heatmap", z = "angle", title = "(3) smallest principal angle W_q / W_k (degrees)", xlabel = "head", ylabel = "layer" },
    { kind = "bars", x = "head_kind", y = "mean_angle", title = "(3) sink heads against the others and chance" },
  },
}

-- seed 1 is so-fig11's softmax model (the same cached model); --seed= trains another
local function spec_of(cfg) return papers.so_spec(cfg, "softmax", cfg.seed) end
local function train(run) return recipes.fit(run, spec_of(run.cfg)) end

local function analyze(run)
  local spec = spec_of(run.cfg)
  local ctx, m = recipes.load(spec, run.out.train)
  local corpus = batcher.corpus(spec.data, run)
  local cap = inspect.capture(ctx, m, corpus, spec, { points = { "attn_probs", "q", "k", "emb", "h", "ln1" } })
  local T, L, NH = cap.T, m.cfg.n_layer, m.cfg.n_head
  local HD = m.cfg.d_model / NH
  local kind = m.cfg.family == "llama" and "rmsnorm" or "layernorm"
  local req, meas, share, holds_n, pts = {}, {}, {}, 0, 0
  local nsink = 0
  local blocks = {}
  for l, blk in batches.blocks(m) do blocks[l - 1] = blk end
  local angle, ang_sink, ang_other = {}, {}, {}
  for l = 0, L - 1 do
    local A, Q, K = inspect.get(cap, "attn_probs", l), inspect.get(cap, "q", l), inspect.get(cap, "k", l)
    share[l + 1], angle[l + 1] = {}, {}
    local wq, wk = blocks[l].attn.q.weight, blocks[l].attn.k.weight
    for h = 0, NH - 1 do
      local a = inspect.plane(A, h)
      local s = inspect.category_share(a, T, cap.cats, "initial")
      share[l + 1][h + 1] = s
      local q, k = inspect.plane(Q, h), inspect.plane(K, inspect.kv_head(h, NH, K.shape[1]))
      if s > SINK then
        nsink = nsink + 1
        for i = 2, T do   -- query i (1-based) sees keys 1..i (causal): n = i
          local scores = {}
          for j = 1, i do
            local d = 0
            for c = 1, HD do d = d + q[(i - 1) * HD + c] * k[(j - 1) * HD + c] end
            scores[j] = d / math.sqrt(HD)
          end
          local p = a[(i - 1) * T + 1]
          local M = inspect.required_gap(p, i)
          if M == M then
            local g = inspect.score_gap(scores, 1)
            req[#req + 1], meas[#meas + 1] = M, g
            pts = pts + 1
            if g >= M - 1e-3 then holds_n = holds_n + 1 end
          end
        end
      end
      local vq = inspect.top_right_singular(inspect.head_rows(wq, h, HD), HD, m.cfg.d_model, RANK)
      local vk = inspect.top_right_singular(inspect.head_rows(wk, inspect.kv_head(h, NH, wk:size(0) / HD), HD), HD, m.cfg.d_model, RANK)
      local ang = inspect.principal_angles(vq, vk)[1]
      angle[l + 1][h + 1] = ang
      if s > SINK then ang_sink[#ang_sink + 1] = ang else ang_other[#ang_other + 1] = ang end
    end
  end
  -- (2) the norm's input is the block's input: the embeddings for layer 0, else h of the layer before
  local nn_, gi, go, ir, maxerr = {}, {}, {}, {}, 0
  for l = 0, L - 1 do
    local X = l == 0 and inspect.get(cap, "emb", 0) or inspect.get(cap, "h", l - 1)
    local Y = inspect.get(cap, "ln1", l)
    local C = X.shape[2]
    local g = blocks[l].ln1.weight
    local gn = 0
    for c = 0, C - 1 do gn = gn + g.data[c] ^ 2 end
    gn = math.sqrt(gn)
    local sn, so, no, xi, xo = 0, 0, 0, 0, 0
    for t = 1, T do
      local x, y = {}, {}
      for c = 1, C do x[c] = X.data[(t - 1) * C + c] y[c] = Y.data[(t - 1) * C + c] end
      local r = inspect.norm(inspect.normalized(x, kind, blocks[l].ln1.eps)) / math.sqrt(C)
      maxerr = math.max(maxerr, math.abs(r - 1))
      sn = sn + r
      local ratio = inspect.norm(y) / gn
      if cap.cats[t] == "initial" then gi[l + 1], xi = ratio, inspect.norm(x)
      else so, no, xo = so + ratio, no + 1, xo + inspect.norm(x) end
    end
    nn_[l + 1] = sn / T
    gi[l + 1] = gi[l + 1] or 0 / 0
    go[l + 1] = no > 0 and so / no or 0 / 0
    ir[l + 1] = (no > 0 and xi > 0) and xi / (xo / no) or 0 / 0
  end
  local layers = {}
  for l = 0, L - 1 do layers[l + 1] = l end
  -- (3)'s chance level: random RANK-dimensional subspace pairs of R^C (C the model width)
  local chance_mean, chance_sd = seeds.stats(inspect.chance_angles(m.cfg.d_model, RANK, CHANCE_PAIRS, 1))
  return {
    coords = { point = #req, layer = layers, head = NH, head_kind = { "sink heads", "other heads", "random subspaces" } },
    vars = { required_gap = req, measured_gap = meas, sink_share = share, normalized_norm = nn_, gamma_norm_initial = gi,
             gamma_norm_other = go, input_norm_ratio = ir, angle = angle,
             mean_angle = { inspect.mean(ang_sink), inspect.mean(ang_other), chance_mean }, chance_angle_sd = chance_sd,
             gap_holds = pts > 0 and holds_n / pts or 0 / 0, median_required_gap = inspect.median(req),
             max_norm_error = maxerr, sink_heads = nsink },
    attrs = { rank = RANK, sink_threshold = SINK, norm = kind },
  }
end

local function summary(run)
  local v = figure.values(FIG, run.out.analyze)
  local ma = v.mean_angle
  local sphere = v.max_norm_error < 0.05   -- ε (1e-5) shrinks the norm of low-variance tokens slightly
  -- (3) the sink heads' subspaces closer than the other heads'; when every head is a sink, closer
  -- than chance: their mean below the random pairs' mean by two standard errors of a mean of
  -- that many heads
  local all_sinks = v.sink_heads > 0 and ma[2] ~= ma[2]
  local closer
  if all_sinks then closer = ma[1] < ma[3] - 2 * v.chance_angle_sd / math.sqrt(v.sink_heads)
  else closer = ma[1] < ma[2] end
  local holds = sphere
  if v.sink_heads > 0 then holds = sphere and v.gap_holds > 0.99 and closer end
  local chance = string.format("random subspace pairs %.1f ± %.1f°", ma[3], v.chance_angle_sd)
  return {
    paper = "BLOG: a no-op needs e^M/(e^M + n − 1) ≈ 1, a large score gap M; after LayerNorm without γ, β every token has norm √d (γ scales the sphere to about ‖γ‖), so the gap must come from directions: W_q and W_k share dominant singular directions",
    reproduced = v.sink_heads > 0 and string.format("(1) %d sink heads; %.1f %% of their queries have a gap at least the required M (median required M %.2f); (2) ‖x̂‖/√d within %.2g of 1 at every token and layer; (3) smallest principal angle between W_q and W_k top-%d subspaces %.1f° for sink heads, %s (%s)",
      v.sink_heads, 100 * (v.gap_holds == v.gap_holds and v.gap_holds or 0), v.median_required_gap, v.max_norm_error, RANK, ma[1],
      all_sinks and "no other head (every head is a sink)" or string.format("%.1f° for the others", ma[2]), chance)
      or string.format("(1) no sink head (no head puts more than half of its attention on the initial token); (2) ‖x̂‖/√d within %.2g of 1 at every token and layer; (3) smallest principal angle between W_q and W_k top-%d subspaces %.1f° for the heads (no sink head to compare; %s)",
      v.max_norm_error, RANK, ma[2], chance),
    holds = holds,
    notes = "Criteria: (2) every normalised token within 5 % of √d; with sink heads also (1) at least 99 % of their queries obey gap >= M and (3) their W_q/W_k subspaces closer than the other heads' (when every head is a sink: closer than random subspace pairs of the same shape, by two standard errors of a mean over that many heads)." ..
      (v.sink_heads == 0 and " No head puts more than half of its attention on the initial token here: checks (1) and (3) have no sink head to test, the verdict rests on (2)." or ""),
  }
end

return {
  id = "blog-noop",
  title = "The no-op's softmax dynamic range, the LayerNorm hypersphere and W_q/W_k singular subspaces",
  source = { paper = "BLOG (Why do transformers have outliers?, 2026)", figure = "three checks",
             claim = "A no-op head needs a score gap M = log((n − 1)p/(1 − p)); LayerNorm puts every token on a sphere of radius √d (scaled by γ), so the gap comes from W_q and W_k sharing dominant singular directions." },
  profiles = recipes.single_seed(papers.so_profiles({ quick = { seed = 1 }, default = { seed = 1 }, paper = { seed = 1 } })),
  stages = figure.stages(train, analyze, FIG),
  summary = summary,
}
