-- SO Fig. 3 — activation outliers in the layer outputs h_l of a LLaMA-style model.
--
-- Method (SO §3, Fig. 3): train a decoder (RMSNorm, SwiGLU, RoPE: the TinyLLaMA
-- architecture of SO App. D.2) on the generated corpus, each sequence starting with BOS.
-- Over held-out sequences, hook the output h_l of every layer and record, per sequence, the
-- three largest |h| and the median |h| (averaged over sequences). An element is an activation
-- outlier when |h_ij| > τ·mean|h| over the sequence (SO: τ = 1000); a token is an outlier
-- token when one of its elements is. Count outlier tokens by category (initial, delimiter,
-- weak-semantic, other) and outlier elements by channel. The paper finds outliers from the
-- shallow layers on, persisting through the middle and vanishing in the last layers, at the
-- initial token and weak-semantic tokens, in a few fixed channels.
local exp_runner = require "outlierlab.experiment"
local analysis = require "outlierlab.analysis"
local probes = require "outlierlab.probes"

local model_spec = exp_runner.llama_lm_spec   -- shared with so-fig6: one trained model

local function train(run) return exp_runner.train_model(run, model_spec(run.cfg)) end

local CATS = analysis.categories   -- initial, delimiter, weak, other

local function analyze(run)
  local cfg, spec = run.cfg, model_spec(run.cfg)
  local corpus = exp_runner.corpus(spec.data, run)   -- --text with --model: the text in the model's tokens
  local ctx, m = exp_runner.load_model(spec, run.out.train)
  local rule = analysis.rule{ kind = "tau_mean", tau = cfg.tau, scope = "sequence" }
  local stats = analysis.LayerStats{ T = cfg.seq_len, C = m.cfg.d_model, V = cfg.vocab_size, topk = 3,
                                     rule = rule, category = corpus.category }
  local P = probes.new{ points = { "h" } }
  P:attach("h", stats)
  exp_runner.probe_batches(ctx, m, P, corpus, spec, cfg.eval_batches)
  local res = stats:result()
  local out = { layers = {}, top = {}, median = {}, by_category = { 0, 0, 0, 0 }, by_channel = {},
                tokens = 0, ntok = 0, d_model = m.cfg.d_model, tau = cfg.tau, per_layer_tokens = {} }
  for c = 1, m.cfg.d_model do out.by_channel[c] = 0 end
  for i, l in ipairs(res.layers) do
    local r = res[l]
    out.layers[i] = l
    out.top[i] = { r.avg_topk[1], r.avg_topk[2], r.avg_topk[3] }
    out.median[i] = r.avg_median
    out.per_layer_tokens[i] = r.outliers.tokens
    out.tokens = out.tokens + r.outliers.tokens
    out.ntok = r.ntok
    for j, cat in ipairs(CATS) do out.by_category[j] = out.by_category[j] + r.outliers.tokens_by_category[cat] end
    for c = 1, m.cfg.d_model do out.by_channel[c] = out.by_channel[c] + r.outliers.by_channel[c] end
  end
  return out
end

local function plot(run)
  local a = run.out.analyze
  local nc = run:netcdf()
  nc:dim("layer", #a.layers, a.layers, { long_name = "transformer layer (0-based)" })
  nc:dim("rank", 3, { 1, 2, 3 }, { long_name = "rank of the value among the largest |h| of a sequence" })
  nc:dim("category", 4, nil, { long_name = "token category index: 0 initial, 1 delimiter, 2 weak-semantic, 3 other" })
  nc:dim("channel", a.d_model, nil, { long_name = "hidden dimension (0-based)" })
  nc:var("top_abs", { "layer", "rank" }, a.top, { long_name = "k-th largest |h| of the layer output per sequence, averaged", units = "1" })
  nc:var("median_abs", { "layer" }, a.median, { long_name = "median |h| of the layer output per sequence, averaged", units = "1" })
  nc:var("outlier_tokens", { "layer" }, a.per_layer_tokens, { long_name = "tokens with an activation outlier (|h| > tau mean|h|)", units = "1", type = "int" })
  nc:var("outlier_tokens_by_category", { "category" }, a.by_category, { long_name = "outlier tokens over all layers by token category", units = "1", type = "int" })
  nc:var("outlier_count_by_channel", { "channel" }, a.by_channel, { long_name = "activation outlier elements over all layers by hidden dimension", units = "1", type = "int" })
  nc:attr("tau", a.tau)
  nc:close()
  local rows = {}
  for i, l in ipairs(a.layers) do rows[i] = { l, a.top[i][1], a.top[i][2], a.top[i][3], a.median[i] } end
  local crows = {}
  for j, c in ipairs(CATS) do crows[j] = { c, a.by_category[j] } end
  local chrows = {}
  for c = 1, #a.by_channel do chrows[c] = { c - 1, a.by_channel[c] } end
  run:figure(run.id, "so-fig3", {
    { columns = { "layer", "top-1", "top-2", "top-3", "median" }, rows = rows },
    { columns = { "category", string.format("outlier tokens (tau = %g)", a.tau) }, rows = crows },
    { columns = { "channel", "outlier elements" }, rows = chrows },
  })
end

local function summary(run)
  local a = run.out.analyze
  local peak, peak_l, ratio = 0, 0, 0
  for i, t in ipairs(a.top) do
    if t[1] > peak then peak, peak_l = t[1], a.layers[i] end
    ratio = math.max(ratio, t[1] / a.median[i])
  end
  local last = a.top[#a.top][1]
  local share = a.tokens > 0 and (a.by_category[1] + a.by_category[3]) / a.tokens or 0
  local nch, top_ch = 0, 0
  for c, n in ipairs(a.by_channel) do if n > 0 then nch = nch + 1 end if n > a.by_channel[top_ch + 1] then top_ch = c - 1 end end
  local holds = a.tokens > 0 and share > 0.5 and last < peak
  return {
    paper = "GPT-2 / LLaMA: top-1 |h| in the thousands against a median below 1 from the shallow layers on, vanishing in the last layers; outliers at the initial token and weak-semantic tokens, in a few fixed channels",
    reproduced = string.format("max over layers of top-1/median = %.1f; top-1 |h| peaks at layer %d (%.3g), last layer %.3g; %d outlier tokens at τ = %g (%.0f %% initial or weak-semantic) in %d channel(s), most in #%d",
      ratio, peak_l, peak, last, a.tokens, a.tau, 100 * share, nch, top_ch),
    holds = holds,
    notes = "Criterion: at least one outlier token at this τ, more than half of them initial or weak-semantic, and the last layer's top-1 below the peak.",
  }
end

return {
  id = "so-fig3",
  title = "Activation outliers in the layer outputs h of a LLaMA-style model: layers, tokens, channels",
  source = { paper = "SO (An et al. 2025)", figure = "Fig. 3",
             claim = "Activation outliers in h appear in shallow layers, persist through the middle layers and vanish in the last ones; they sit at the initial token and weak-semantic tokens, in a few fixed channels." },
  profiles = exp_runner.profiles_with(exp_runner.LLAMA_LM_PROFILES, { quick = { tau = 10 }, default = { tau = 100 }, paper = { tau = 1000 } }),
  stages = { { "train", train }, { "analyze", analyze, cache = true }, { "plot", plot } },
  summary = summary,
}
