-- compress/evaluate — post-training quantisation (W8A8 and friends) and the other compression
-- evaluations of the papers' tables, on top of outlierlab.compress.fakequant (docs/reference/compression.md).
-- (The models these evaluate are outlierlab.recipes.papers'.)
--
--   local ptq = require "outlierlab.compress.evaluate"
--   local fp = evaluate.evaluate(ctx, m, { metric = "ppl"|"acc", loader = fn() -> fresh loader, n = 8 })
--   local q  = evaluate.w8a8(ctx, m, { metric =, loader =, n =, calib_loader = fn() -> loader,
--                                 n_calib = 16, wbits = 8, abits = 8, weight_range = "minmax"|"mse",
--                                 estimator = "running_minmax"|"percentile", percentile = 99.999,
--                                 kinds = nil | { linear = true, __add = true, ... } })
--   -- q = { value = metric, loss =, sites = quantised activation sites, weights = n tensors };
--   -- kinds quantises only the activations of those op kinds (ol.set_activation_hook's), wbits
--   -- >= 32 leaves the weights in full precision: the parts of the W8A8 error one at a time
--   -- (evaluate.W8A8_PARTS)
--   local r  = evaluate.weight_only(ctx, m, { fn = function(params) compress.absmax(params, ...) end, ... })
--   local s  = evaluate.outlier_stats(ctx, m, { loader =, n =, points = {"ffn_out", "ln2"} })
--   -- s = { max_inf_norm, avg_kurtosis, n } over the hooked tensors (QT tables, docs/reference/metrics.md)
--
-- QT's W8A8 setup (QT §5, App. C; docs/reference/compression.md):
--   weights: symmetric uniform per tensor, min-max (BERT, ViT) or MSE (OPT) range, every weight
--     matrix (>= 2 dims) except the final head and the gates: evaluate.weights(ctx);
--   activations: asymmetric uniform per tensor, static ranges from n_calib calibration batches
--     (running min-max with momentum 0.9, or a percentile), at the output of every op that
--     makes a new activation (linear in/outputs, residual and embedding sums, attention
--     scores, softmax outputs, norm and activation outputs; outlierlab.compress.fakequant);
--   the attention runs through its plain-op reference path (attention.reference) while
--     quantised, so its scores and probabilities pass the hook (the fused C kernel never
--     materialises them); masks are added outside the hook (attention.add_mask); gates and
--     context-aware scaling factors are computed with ol.without_hook (full precision);
--   the last linear (the head: logits) stays in full precision (compress skip_last_linear).
-- Every evaluation restores the FP weights and the fused attention before it returns.
local ol = require "outlierlab"
local compress = require "outlierlab.compress.fakequant"
local attention = require "outlierlab.nn.attention"
local analysis = require "outlierlab.measure.metrics"
local probes = require "outlierlab.measure.probes"
local ffi = ol.ffi

local M = {}

-- ---------------------------------------------------------------- what is compressed
-- Parameters that stay in full precision (Lua patterns on the parameter name): the final
-- head and the token embedding tied to it (GPT-2 wte, OPT embed_tokens, BERT's decoder is
-- embeddings.word), QT's gates, SO's context-aware scaling weights and the learned sink /
-- bias vectors of the attention variants (not weights of a linear layer).
M.KEEP_FP = { "^head%.", "^lm_head%.", "^wte%.", "^embed_tokens%.", "^embeddings%.word%.",
              "%.gate%.", "%.scale%.", "%.sink%.", "%.ca_bias%.", "%.v_bias$" }
-- For SO Table 3 ("all layers" of the transformer): the linear layers of the blocks only.
M.LINEAR_ONLY = { "_proj%.weight$" }

-- weights to compress: >= 2-D parameters matching none of skip (default KEEP_FP) and, when
-- only is given, at least one of only
function M.weights(ctx, opts)
  opts = opts or {}
  local out = {}
  for _, p in ipairs(compress.select_weights(ctx, opts.skip or M.KEEP_FP)) do
    local name = ffi.string(p.name)
    local keep = opts.only == nil
    for _, pat in ipairs(opts.only or {}) do if name:match(pat) then keep = true end end
    if keep then out[#out + 1] = p end
  end
  return out
end
function M.names(params)
  local out = {}
  for i, p in ipairs(params) do out[i] = ffi.string(p.name) end
  return out
end

-- ---------------------------------------------------------------- attention switch
-- every attention-variant object inside a model (found by walking its tables)
function M.attention_modules(model)
  local out, seen = {}, {}
  local function walk(t, depth)
    if seen[t] or depth > 8 then return end
    seen[t] = true
    if getmetatable(t) == attention.Attn then out[#out + 1] = t return end
    for k, v in pairs(t) do
      if type(v) == "table" and k ~= "ctx" and k ~= "cfg" then walk(v, depth + 1) end
    end
  end
  walk(model, 0)
  return out
end

-- Route every attention of the model through its plain-op reference (so scores and
-- probabilities are seen by the activation hook) and compute gates / scaling factors with
-- the hook suspended. Returns a function that undoes both.
function M.plain_attention(model)
  local mods = M.attention_modules(model)
  local saved = {}
  for i, A in ipairs(mods) do
    saved[i] = { ref = A.use_reference, factor = rawget(A, "factor") }
    if not attention.reference[A.base] then
      error("ptq: attention kind '" .. tostring(A.kind) .. "' has no plain-op reference path", 2)
    end
    A.use_reference = true
    if saved[i].factor then
      local f = saved[i].factor
      A.factor = function(s, x) return ol.without_hook(f, s, x) end
    end
  end
  return function()
    for i, A in ipairs(mods) do A.use_reference = saved[i].ref; A.factor = saved[i].factor end
  end, #mods
end

-- ---------------------------------------------------------------- evaluation
-- top-1 of a classifier's logits lg (B, K) against labels lab (B, i32; < 0: no label): the
-- number of labelled rows whose first maximum is the label, and the number of labelled rows
function M.count_top1(lg, lab)
  local B, K = lg:size(0), lg:size(1)
  local correct, total = 0, 0
  for b = 0, B - 1 do
    if lab.idata[b] >= 0 then
      local best, bi = -math.huge, 0
      for k = 0, K - 1 do
        local v = lg.data[b * K + k]
        if v > best then best, bi = v, k end
      end
      total = total + 1
      if bi == lab.idata[b] then correct = correct + 1 end
    end
  end
  return correct, total
end

-- Metric over n batches of a fresh loader (the same batches every call):
--   "ppl": exp(Σ loss·ntokens / Σ ntokens) (LM or MLM perplexity);  "acc": top-1 accuracy in %.
-- run(fn) wraps the per-batch forward (the quantiser); returns { value, loss, ntokens }.
function M.evaluate(ctx, m, o, run)
  local metric = o.metric or "ppl"
  local loader = o.loader()
  local n = o.n or 8
  local lsum, ntok, correct, total = 0, 0, 0, 0
  local function body(reset)
    for _ = 1, n do
      ctx:reset()
      local batch = loader:next(ctx)
      if reset then reset() end
      local loss, info = m:loss(batch, { train = false })
      local l = loss:item()
      if l ~= l then error("evaluate: the loss is NaN", 0) end
      lsum = lsum + l * info.ntokens
      ntok = ntok + info.ntokens
      if metric == "acc" then
        local c, k = M.count_top1(info.logits, batch.labels)
        correct, total = correct + c, total + k
      end
    end
  end
  ctx:no_grad(function()
    if run then run(body) else body(nil) end
  end)
  ctx:reset()
  local loss = lsum / math.max(ntok, 1)
  local value = metric == "acc" and 100 * correct / math.max(total, 1) or math.exp(loss)
  return { value = value, loss = loss, ntokens = ntok, metric = metric }
end

-- run fn() with the FP weights restored afterwards (also on error)
local function with_snapshot(ctx, fn)
  local snap = compress.snapshot(ctx)
  local res = { pcall(fn) }
  compress.restore(ctx, snap)
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2)
end

-- The parts of W8A8 measured one at a time (the rest in full precision): weights alone,
-- activations alone, and the activations of one kind of op (the hook's kinds, ol.set_activation_hook);
-- short: a figure's axis label, label: a table's column
M.W8A8_PARTS = {
  { name = "weights", short = "W8", label = "W8 alone", wbits = 8, kinds = {} },
  { name = "activations", short = "A8", label = "A8 alone", wbits = 32 },
  { name = "sums", short = "A8 sums", label = "A8 at sums (residual stream, embeddings)", wbits = 32, kinds = { __add = true, __sub = true } },
  { name = "linear", short = "A8 linear", label = "A8 at linear outputs", wbits = 32, kinds = { linear = true } },
  { name = "attention", short = "A8 q·kᵀ, P·V", label = "A8 at q·kᵀ and P·V", wbits = 32, kinds = { matmul = true } },
  { name = "softmax", short = "A8 softmax", label = "A8 at softmax outputs", wbits = 32, kinds = { softmax = true } },
  { name = "norms", short = "A8 norms", label = "A8 at norm outputs", wbits = 32, kinds = { layernorm = true, rmsnorm = true } },
  { name = "mlp_act", short = "A8 MLP act.", label = "A8 at the MLP activation (GELU, SiLU)", wbits = 32, kinds = { gelu = true, relu = true, silu = true } },
  -- (RoPE is one engine op, not hooked: its products are not activations here)
  { name = "products", short = "A8 products", label = "A8 at elementwise products (the SwiGLU's x_down = silu(gate)·up, the gated attention output)", wbits = 32, kinds = { __mul = true } },
}

-- Static post-training quantisation WxAy (QT §5): quantise the weights, calibrate the
-- activation ranges on n_calib batches (weights already quantised, as in a quantisation
-- simulator), evaluate with every calibrated site quantised, restore.
function M.w8a8(ctx, m, o)
  return with_snapshot(ctx, function()
    local undo = M.plain_attention(m)
    local ok, res = pcall(function()
      local params = M.weights(ctx, { skip = o.skip })
      if (o.wbits or 8) < 32 then
        compress.quantize_weights(params, { bits = o.wbits or 8, range = o.weight_range or "minmax" })
      end
      local q = compress.ActivationQuantizer{ bits = o.abits or 8, estimator = o.estimator or "running_minmax",
                                              momentum = o.momentum or 0.9, percentile = o.percentile, kinds = o.kinds }
      local cl = o.calib_loader()
      ctx:no_grad(function()
        for _ = 1, o.n_calib or 16 do
          ctx:reset()
          local batch = cl:next(ctx)
          q:calibrate(function() m:forward(batch, { train = false }) end)
        end
      end)
      ctx:reset()
      local r = M.evaluate(ctx, m, o, function(body) q:run(body) end)
      r.sites, r.weights = q:num_sites(), #params
      return r
    end)
    undo()
    if not ok then error(res, 0) end
    return res
  end)
end

-- Weight-only compression: fn(params) changes the weights in place (AbsMax, pruning); the
-- metric is evaluated (fused attention, FP activations) and the weights restored.
function M.weight_only(ctx, m, o)
  return with_snapshot(ctx, function()
    local params = M.weights(ctx, { skip = o.skip, only = o.only })
    local extra = o.fn(params)
    local r = M.evaluate(ctx, m, o)
    r.weights, r.sparsity, r.extra = #params, compress.sparsity(params), extra
    return r
  end)
end

-- ---------------------------------------------------------------- outlier statistics
-- Streams the probe points over n batches: per (point, layer) the per-sequence max |x| and
-- kurtosis averaged over sequences; summary as QT's tables (analysis.summarize). o.kurtosis =
-- "pearson" (default) | "qt_code" (QT's μ₄/(σ⁴ + 1e-6)), o.median = "mean" (default) | "lower"
-- (torch.median, SO's code): docs/reference/metrics.md.
-- Returns { max_inf_norm, avg_kurtosis, n, per = { {point, layer, max_inf_norm, kurtosis,
-- topk = {3 values}, median} } }.
function M.outlier_stats(ctx, m, o)
  local loader = o.loader()
  local stats = {}
  local P = probes.new{ points = o.points, layers = "all" }
  for _, pt in ipairs(o.points) do
    local L = { stats = {} }
    function L.probe(_, x, layer, batch)
      local s = L.stats[layer]
      if not s then
        local nd = x.ndim
        s = analysis.Stats{ T = x:size(nd - 2), C = x:size(nd - 1), V = 0, topk = o.topk or 3,
                            rule = analysis.rule{ kind = "none" }, kurtosis = o.kurtosis, median = o.median }
        L.stats[layer] = s
      end
      s:update_batch(x, batch)
    end
    stats[pt] = L
    P:attach(pt, L)
  end
  ctx:no_grad(function()
    for _ = 1, o.n or 8 do
      ctx:reset()
      local batch = loader:next(ctx)
      P:forward(m, batch)
    end
  end)
  ctx:reset()
  local per, list = {}, {}
  for _, pt in ipairs(o.points) do
    local layers = {}
    for l in pairs(stats[pt].stats) do layers[#layers + 1] = l end
    table.sort(layers)
    if #layers == 0 then error("evaluate.outlier_stats: the model never reported probe point '" .. pt .. "'", 2) end
    for _, l in ipairs(layers) do
      local r = stats[pt].stats[l]:result()
      list[#list + 1] = r
      per[#per + 1] = { point = pt, layer = l, max_inf_norm = r.avg_max_inf_norm, kurtosis = r.avg_kurtosis,
                        topk = r.avg_topk, median = r.avg_median }
    end
  end
  local s = analysis.summarize(list)
  s.per = per
  return s
end

-- ---------------------------------------------------------------- small statistics
-- mean and sample standard deviation (n-1; 0 for one value) of a list
-- the values of field key in the rows whose fields match every pair of where
-- (e.g. values(a.rows, {family = "bert", variant = "vanilla"}, "fp")): one list per table cell,
-- one value per seed
function M.values(rows, where, key)
  local xs = {}
  for _, r in ipairs(rows) do
    local ok = true
    for k, v in pairs(where) do if r[k] ~= v then ok = false break end end
    if ok then xs[#xs + 1] = r[key] end
  end
  return xs
end
-- the mean of a list (first result of mean_std)
function M.mean(xs) return (M.mean_std(xs)) end

-- (one implementation: outlierlab.judge.seeds.stats; here one value has sd 0 even when NaN)
function M.mean_std(xs)
  local mu, sd = require("outlierlab.judge.seeds").stats(xs)
  if #xs == 1 then sd = 0 end
  return mu, sd
end
-- "mean ± std" (or the single value) with fmt
function M.pm(xs, fmt)
  fmt = fmt or "%.3g"
  local mu, sd = M.mean_std(xs)
  if #xs <= 1 then return string.format(fmt, mu) end
  return string.format(fmt .. " ± " .. fmt, mu, sd)
end

return M
