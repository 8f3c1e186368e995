-- analysis_remedies — the metrics the field reports since the two papers (docs/reference/metrics.md,
-- "2024–2026 metrics"), each with its paper's defaults:
--
--   local AR = require "outlierlab.measure.recent"
-- Gu et al. 2025 (sink rate; sail-sg/Attention-Sink):
--   AR.key_importance(A, {causal =, pad_mask =}) -> { B, NH, Tk, at(b, h, k) }
--       α(k) = mean over the queries that can see key k of A[t, k]  (A (B,NH,Tq,Tk) attention weights)
--   local s = AR.SinkRate{ eps = 0.3, key = 0 }
--   s:update(A, layer, {causal =, pad_mask =})   -- every layer's attn_probs of the same batch
--   s:result() -> { rate (percent of (layer, head) pairs with α(key) > eps, averaged over samples),
--                   eps, samples, heads, by_layer = { [l] = { frac per head } }, alpha = { [l] = { mean α(key) per head } } }
--   AR.sink_rate(ctx, model, batches, opts) -> the same over a model's forward passes
-- Sun et al. 2024 (massive activations; locuslab/massive-activations):
--   AR.top_median(x, mask) -> { top = {top-1, top-2, top-3}, median, ratio = top-1/median }: per
--       sequence the 3 largest |x| and the median |x| over its T·C values, averaged over sequences
--   AR.massive_flags(x, b, ratio, min_abs) -> list of 0-based flat indices in sequence b with
--       |x| ≥ ratio·median|x| (and ≥ min_abs)
--   AR.intervention(ctx, model, batches, { layer =, point = "h", ratio = 100, min_abs = 0 })
--       -> { loss, loss_zero, loss_mean, delta_zero, delta_mean, n, channels = {[c] = count},
--            mean = {[c] = mean value} }: the massive activations of one layer's output set to 0,
--            or to their mean (per channel, over the batches), and the loss change
--   AR.scale_state(ctx, model, batches, { layer =, point = "h", position = 0, scales = AR.STATE_SCALES })
--       -> { loss, scales = {...}, loss_at = {...}, delta = {...} }: the whole state of the token at
--            `position` (the initial token by default) in one layer's output multiplied by each
--            scale before the next layer reads it, and the loss change: how much the loss cares
--            about the size of the massive activation (docs/findings/organism.md, "Why the ratio stops")
-- Queipo-de-Llano et al. 2025 (attention sinks and compression valleys):
--   AR.bos_norm(x, mask) -> { bos = mean ‖x[b,0,:]‖, others = mean ‖x[b,t,:]‖ (t > 0), ratio }
--   AR.matrix_entropy(x, mask) -> { entropy (nats), normalized (÷ log min(T, C)) } averaged over
--       sequences: H = −Σ p_i log p_i, p_i = σ_i²/Σσ_j² of the sequence's (T, C) representations
--   AR.layer_profile(ctx, model, batches, opts) -> { layers = {...}, [l] = { top, median, ratio,
--       bos, others, bos_ratio, entropy, normalized } } at the embedding ("emb", layer −1) and
--       every block output ("h")
local ol = require "outlierlab"
local ffi = ol.ffi
local C = ol.C

local M = {}

local function mask_at(mask, b, T, t)
  return mask == nil or mask.idata[b * T + t] ~= 0
end

-- ---------------------------------------------------------------- Gu et al.: sink rate
function M.key_importance(A, opts)
  opts = opts or {}
  local B, NH, Tq, Tk = A:size(0), A:size(1), A:size(2), A:size(3)
  local pad = opts.pad_mask
  local alpha = ffi.new("double[?]", B * NH * Tk)
  for b = 0, B - 1 do
    for h = 0, NH - 1 do
      local base = (b * NH + h) * Tq
      for k = 0, Tk - 1 do
        local s, n = 0, 0
        if mask_at(pad, b, Tk, k) then
          for t = 0, Tq - 1 do
            local sees = not opts.causal or k <= t + Tk - Tq
            -- the query is a real token: its own key position (t + Tk − Tq) is not padding
            if sees and mask_at(pad, b, Tk, t + Tk - Tq) then
              s = s + A.data[(base + t) * Tk + k]
              n = n + 1
            end
          end
        end
        alpha[(b * NH + h) * Tk + k] = n > 0 and s / n or 0
      end
    end
  end
  return { B = B, NH = NH, Tk = Tk, data = alpha, at = function(b, h, k) return alpha[(b * NH + h) * Tk + k] end }
end

local SinkRate = {}
SinkRate.__index = SinkRate
function M.SinkRate(opts)
  opts = opts or {}
  local self = setmetatable({ eps = opts.eps or 0.3, key = opts.key or 0, layers = {}, nsamples = {} }, SinkRate)
  if type(self.eps) ~= "number" or self.eps < 0 or self.eps > 1 then error("SinkRate: eps must be in [0, 1]", 2) end
  return self
end

function SinkRate:update(A, layer, opts)
  local a = M.key_importance(A, opts)
  local L = self.layers[layer]
  if not L then
    L = { count = {}, sum = {}, n = 0, NH = a.NH }
    for h = 1, a.NH do L.count[h], L.sum[h] = 0, 0 end
    self.layers[layer] = L
  end
  for b = 0, a.B - 1 do
    for h = 0, a.NH - 1 do
      local v = a.at(b, h, self.key)
      L.sum[h + 1] = L.sum[h + 1] + v
      if v > self.eps then L.count[h + 1] = L.count[h + 1] + 1 end
    end
  end
  L.n = L.n + a.B
end

function SinkRate:result()
  local ls = {}
  for l in pairs(self.layers) do ls[#ls + 1] = l end
  table.sort(ls)
  local flagged, total, samples = 0, 0, 0
  local res = { eps = self.eps, key = self.key, layers = ls, by_layer = {}, alpha = {} }
  for _, l in ipairs(ls) do
    local L = self.layers[l]
    res.by_layer[l], res.alpha[l] = {}, {}
    for h = 1, L.NH do
      res.by_layer[l][h] = L.n > 0 and L.count[h] / L.n or 0
      res.alpha[l][h] = L.n > 0 and L.sum[h] / L.n or 0
      flagged = flagged + L.count[h]
      total = total + L.n
    end
    samples = math.max(samples, L.n)
  end
  res.rate = total > 0 and 100 * flagged / total or 0
  res.samples = samples
  res.heads = 0
  for _, l in ipairs(ls) do res.heads = res.heads + self.layers[l].NH end
  return res
end

-- run the model over batches (list of batch tables) in evaluation mode, calling probe(name, l, t)
local function run_model(ctx, model, batches, probe, per_batch)
  local loss_sum, ntok = 0, 0
  for bi, batch in ipairs(batches) do
    ctx:reset()
    if per_batch then per_batch(bi, batch) end
    local loss, info = ctx:no_grad(function() return model:loss(batch, { probe = probe, train = false }) end)
    local n = info and info.ntokens or 1
    loss_sum = loss_sum + loss:item() * n
    ntok = ntok + n
  end
  ctx:reset()
  return ntok > 0 and loss_sum / ntok or 0
end
M.run_model = run_model

-- the sink rate of a model over batches (Gu et al.'s probe: first token, ε = 0.3)
function M.sink_rate(ctx, model, batches, opts)
  opts = opts or {}
  local s = M.SinkRate(opts)
  local cur
  local causal = model.cfg and model.cfg.family ~= "bert" and model.cfg.family ~= "vit"
  if opts.causal ~= nil then causal = opts.causal end
  run_model(ctx, model, batches, function(name, l, t)
    if name == "attn_probs" then s:update(t, l, { causal = causal, pad_mask = cur and cur.pad_mask }) end
  end, function(_, batch) cur = batch end)
  return s:result()
end

-- ---------------------------------------------------------------- Sun et al.: massive activations
local function seq_abs(x, b, mask)
  local T, Cd = x:size(1), x:size(2)
  local vals = {}
  for t = 0, T - 1 do
    if mask_at(mask, b, T, t) then
      local base = (b * T + t) * Cd
      for c = 0, Cd - 1 do vals[#vals + 1] = math.abs(x.data[base + c]) end
    end
  end
  return vals
end
local function median(sorted)
  local n = #sorted
  if n == 0 then return 0 end
  if n % 2 == 1 then return sorted[(n + 1) / 2] end
  return (sorted[n / 2] + sorted[n / 2 + 1]) / 2
end

function M.top_median(x, mask)
  local B = x:size(0)
  local top, med, nseq = { 0, 0, 0 }, 0, 0
  for b = 0, B - 1 do
    local v = seq_abs(x, b, mask)
    if #v > 0 then
      table.sort(v)
      for k = 1, 3 do top[k] = top[k] + (v[#v - k + 1] or 0) end
      med = med + median(v)
      nseq = nseq + 1
    end
  end
  if nseq == 0 then return { top = { 0, 0, 0 }, median = 0, ratio = 0, nseq = 0 } end
  for k = 1, 3 do top[k] = top[k] / nseq end
  med = med / nseq
  return { top = top, median = med, ratio = med > 0 and top[1] / med or math.huge, nseq = nseq }
end

function M.massive_flags(x, b, ratio, min_abs, mask)
  local T, Cd = x:size(1), x:size(2)
  local v = seq_abs(x, b, mask)
  table.sort(v)
  local thr = math.max((ratio or 100) * median(v), min_abs or 0)
  local out = {}
  for t = 0, T - 1 do
    if mask_at(mask, b, T, t) then
      local base = (b * T + t) * Cd
      for c = 0, Cd - 1 do
        if math.abs(x.data[base + c]) >= thr and thr > 0 then out[#out + 1] = base + c end
      end
    end
  end
  return out
end

function M.intervention(ctx, model, batches, opts)
  opts = opts or {}
  local layer, point = opts.layer or 1, opts.point or "h"
  local ratio, min_abs = opts.ratio or 100, opts.min_abs or 0
  local cur
  local function flags_of(t)
    local Cd, all = t:size(2), {}
    for b = 0, t:size(0) - 1 do
      for _, i in ipairs(M.massive_flags(t, b, ratio, min_abs, cur and cur.pad_mask)) do all[#all + 1] = i end
    end
    return all, Cd
  end
  local setb = function(_, batch) cur = batch end
  -- pass 1: the loss as is, and the mean of the massive activations per channel
  local sum, cnt = {}, {}
  local n = 0
  local loss = run_model(ctx, model, batches, function(name, l, t)
    if name == point and l == layer then
      local fl, Cd = flags_of(t)
      for _, i in ipairs(fl) do
        local c = i % Cd
        sum[c] = (sum[c] or 0) + t.data[i]
        cnt[c] = (cnt[c] or 0) + 1
        n = n + 1
      end
    end
  end, setb)
  local mean = {}
  for c, s in pairs(sum) do mean[c] = s / cnt[c] end
  -- passes 2 and 3: set them to zero / to their channel's mean, in place, before the next layer reads them
  local function with(value)
    return run_model(ctx, model, batches, function(name, l, t)
      if name == point and l == layer then
        local fl, Cd = flags_of(t)
        for _, i in ipairs(fl) do t.data[i] = value(i % Cd) end
      end
    end, setb)
  end
  local lz = with(function() return 0 end)
  local lm = with(function(c) return mean[c] or 0 end)
  return { loss = loss, loss_zero = lz, loss_mean = lm, delta_zero = lz - loss, delta_mean = lm - loss,
           n = n, channels = cnt, mean = mean, layer = layer, point = point, ratio = ratio }
end

-- the scales of scale_state: removed, shrunk, grown
M.STATE_SCALES = { 0, 0.25, 0.5, 2, 4, 8 }
function M.scale_state(ctx, model, batches, opts)
  opts = opts or {}
  local layer, point, pos = opts.layer or 0, opts.point or "h", opts.position or 0
  local scales = opts.scales or M.STATE_SCALES
  local out = { loss = run_model(ctx, model, batches), scales = {}, loss_at = {}, delta = {}, layer = layer,
                point = point, position = pos }
  for i, s in ipairs(scales) do
    local l = run_model(ctx, model, batches, function(name, ll, t)
      if name == point and ll == layer then
        local T, Cd = t:size(1), t:size(2)
        if pos >= T then error(string.format("measure.recent.scale_state: position %d is outside the sequence (T = %d)", pos, T), 0) end
        for b = 0, t:size(0) - 1 do
          local at = (b * T + pos) * Cd
          for c = 0, Cd - 1 do t.data[at + c] = t.data[at + c] * s end
        end
      end
    end)
    out.scales[i], out.loss_at[i], out.delta[i] = s, l, l - out.loss
  end
  return out
end

-- ---------------------------------------------------------------- BOS norm, matrix entropy
function M.bos_norm(x, mask)
  local B, T, Cd = x:size(0), x:size(1), x:size(2)
  local bos, nb, oth, no = 0, 0, 0, 0
  for b = 0, B - 1 do
    for t = 0, T - 1 do
      if mask_at(mask, b, T, t) then
        local s, base = 0, (b * T + t) * Cd
        for c = 0, Cd - 1 do s = s + x.data[base + c] ^ 2 end
        if t == 0 then bos, nb = bos + math.sqrt(s), nb + 1 else oth, no = oth + math.sqrt(s), no + 1 end
      end
    end
  end
  bos = nb > 0 and bos / nb or 0
  oth = no > 0 and oth / no or 0
  return { bos = bos, others = oth, ratio = oth > 0 and bos / oth or math.huge }
end

-- entropy of the normalised squared singular values of one (n, C) matrix (rows = tokens)
function M.entropy_of_rows(rows, Cd)
  local n = #rows
  local small = math.min(n, Cd)
  local G = ffi.new("double[?]", small * small)
  if n <= Cd then         -- X·Xᵀ (n×n)
    for i = 1, n do
      for j = i, n do
        local s, ri, rj = 0, rows[i], rows[j]
        for c = 0, Cd - 1 do s = s + ri[c] * rj[c] end
        G[(i - 1) * n + j - 1], G[(j - 1) * n + i - 1] = s, s
      end
    end
  else                    -- Xᵀ·X (C×C)
    for a = 0, Cd - 1 do
      for b2 = a, Cd - 1 do
        local s = 0
        for i = 1, n do s = s + rows[i][a] * rows[i][b2] end
        G[a * Cd + b2], G[b2 * Cd + a] = s, s
      end
    end
  end
  local ev = ffi.new("double[?]", small)
  ol.check_status(C.ol_sym_eigvals(G, small, ev))
  local tot = 0
  for i = 0, small - 1 do if ev[i] > 0 then tot = tot + ev[i] end end
  local H = 0
  if tot > 0 then
    for i = 0, small - 1 do
      if ev[i] > 0 then
        local p = ev[i] / tot
        H = H - p * math.log(p)
      end
    end
  end
  return H, small
end

function M.matrix_entropy(x, mask)
  local B, T, Cd = x:size(0), x:size(1), x:size(2)
  local H, Hn, ns = 0, 0, 0
  for b = 0, B - 1 do
    local rows = {}
    for t = 0, T - 1 do
      if mask_at(mask, b, T, t) then
        local r = ffi.new("double[?]", Cd)
        for c = 0, Cd - 1 do r[c] = x.data[(b * T + t) * Cd + c] end
        rows[#rows + 1] = r
      end
    end
    if #rows > 0 then
      local h, small = M.entropy_of_rows(rows, Cd)
      H = H + h
      Hn = Hn + (small > 1 and h / math.log(small) or 0)
      ns = ns + 1
    end
  end
  return { entropy = ns > 0 and H / ns or 0, normalized = ns > 0 and Hn / ns or 0, nseq = ns }
end

-- per layer: top-3/median (Sun et al.), BOS norm and matrix entropy (Queipo-de-Llano et al.),
-- at the embedding (layer −1) and every block output, averaged over batches (equal weights)
function M.layer_profile(ctx, model, batches, opts)
  opts = opts or {}
  local acc, cur = {}, nil
  local function add(l, t)
    local mask = cur and cur.pad_mask
    local a = acc[l] or { n = 0, top = { 0, 0, 0 }, median = 0, bos = 0, others = 0, entropy = 0, normalized = 0 }
    acc[l] = a
    local tm, bn = M.top_median(t, mask), M.bos_norm(t, mask)
    for k = 1, 3 do a.top[k] = a.top[k] + tm.top[k] end
    a.median, a.bos, a.others = a.median + tm.median, a.bos + bn.bos, a.others + bn.others
    if opts.entropy ~= false then
      local me = M.matrix_entropy(t, mask)
      a.entropy, a.normalized = a.entropy + me.entropy, a.normalized + me.normalized
    end
    a.n = a.n + 1
  end
  local loss = run_model(ctx, model, batches, function(name, l, t)
    if name == "emb" then add(-1, t) elseif name == "h" then add(l, t) end
  end, function(_, batch) cur = batch end)
  local res = { layers = {}, loss = loss }
  for l in pairs(acc) do res.layers[#res.layers + 1] = l end
  table.sort(res.layers)
  for _, l in ipairs(res.layers) do
    local a, r = acc[l], {}
    r.top = { a.top[1] / a.n, a.top[2] / a.n, a.top[3] / a.n }
    r.median = a.median / a.n
    r.ratio = r.median > 0 and r.top[1] / r.median or math.huge
    r.bos, r.others = a.bos / a.n, a.others / a.n
    r.bos_ratio = r.others > 0 and r.bos / r.others or math.huge
    r.entropy, r.normalized = a.entropy / a.n, a.normalized / a.n
    res[l] = r
  end
  return res
end

return M
