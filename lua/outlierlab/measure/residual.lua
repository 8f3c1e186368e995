-- measure/residual — residual sinks and their data-free signature (Qwen team, arXiv 2601.22966):
-- a few fixed hidden dimensions that are large on almost every token and, through RMSNorm, scale
-- every other dimension down; the norm gain λ at such a dimension becomes tiny (0.004 against ≈ 1).
--
--   local R = require "outlierlab.measure.residual"
--   local s = R.ResidualSinks{ k = 3, share = 0.9 }
--   s:update(h, layer, pad_mask)     -- h (B,T,C): a block's output (the residual stream)
--   s:result() -> {
--     C, k, threshold, tokens (token·layer rows counted), layers,
--     h_avg = {C}   H_avg(j) = mean over tokens and layers of |h_j| (the paper's sort key),
--     order = {C}   the dimensions (0-based) by H_avg, largest first,
--     top_share = {C}  share of token·layer rows in which dimension j is among the k largest |h|,
--     sinks = {...} the dimensions with top_share ≥ threshold, most frequent first (residual sinks),
--     max_share, sink_dim   the largest top_share and its dimension (the leaderboard's column),
--     stability     top_share of the dimension with the largest H_avg: 1 when the dimension on
--                   top on average is among the k largest at every token (a vertical stripe at the
--                   left of the sorted map), about k/C when the average hides a different top at
--                   each token (one large value now and then),
--     by_layer = { [l] = { h_avg, top_share, max_share, sink_dim, sinks } } }
--   R.residual_sinks(ctx, model, batches, opts) -> the result over the block outputs ("h") of a
--       model's forward passes (opts: k, share, layers = {l = true} to restrict)
--   R.norm_layers(model) -> { {name, kind, weight = tensor, C, pre = tensor or nil}, ... }: every
--       norm of the residual width with a gain per channel (RMSNorm, LayerNorm, the variants of
--       nn/norms.lua; the per-head q/k norms and single-gain norms are left out)
--   R.lambda_minimum(model, {ratio = 0.1, sinks = {dims}}) -> { layers = { {name, argmin, min,
--       median, ratio, flagged, at_sink = {[dim] = λ}} }, flagged = n, coincide = n }: per norm,
--       the smallest |λ|, the median |λ|, their ratio and whether it is below opts.ratio; with
--       sinks, λ at those dimensions and how many flagged minima sit on a sink dimension
--   R.series_point(ctx, model, batches) -> { sink_rate, massive_ratio, resid_share }: one point of a
--       checkpoint series (judge/onsets times when each crosses its threshold)
--   R.sorted_map(x, b, order, opts) -> { rows = T, cols = n, z = {{...}} }: |x| of sequence b
--       (B,T,C) with the dimensions in `order` (the dimension-sorted token × dimension heat map)
local nn = require "outlierlab.nn"
local norms = require "outlierlab.nn.norms"
local recent = require "outlierlab.measure.recent"

local M = {}

local function mask_at(mask, b, T, t) return mask == nil or mask.idata[b * T + t] ~= 0 end

-- the k largest |v| of a row (0-based dims; ties to the lower dim) into out[1..k]
local function topk(xd, base, Cd, k, out)
  local n = 0
  for j = 0, Cd - 1 do
    local a = math.abs(xd[base + j])
    if n < k or a > math.abs(xd[base + out[n]]) then
      local i = n < k and n + 1 or n
      while i > 1 and math.abs(xd[base + out[i - 1]]) < a do out[i] = out[i - 1]; i = i - 1 end
      out[i] = j
      if n < k then n = n + 1 end
    end
  end
  return n
end

local Sinks = {}
Sinks.__index = Sinks
function M.ResidualSinks(opts)
  opts = opts or {}
  local self = setmetatable({ k = opts.k or 3, threshold = opts.share or 0.9, layers = {} }, Sinks)
  if self.k < 1 or self.k ~= math.floor(self.k) then error("ResidualSinks: k must be a positive integer, got " .. tostring(self.k), 2) end
  if not (self.threshold > 0 and self.threshold <= 1) then error("ResidualSinks: share must be in (0, 1], got " .. tostring(self.threshold), 2) end
  return self
end

function Sinks:update(x, layer, mask)
  if x.ndim ~= 3 then error("ResidualSinks: h must be (B,T,C), got " .. tostring(x), 2) end
  local B, T, Cd = x:size(0), x:size(1), x:size(2)
  if self.C and self.C ~= Cd then error(string.format("ResidualSinks: layer %s has %d dims, earlier layers %d", tostring(layer), Cd, self.C), 2) end
  self.C = Cd
  local k = math.min(self.k, Cd)
  local L = self.layers[layer]
  if not L then
    L = { n = 0, abs = {}, top = {} }
    for j = 1, Cd do L.abs[j], L.top[j] = 0, 0 end
    self.layers[layer] = L
  end
  local xd, out = x.data, {}
  for b = 0, B - 1 do
    for t = 0, T - 1 do
      if mask_at(mask, b, T, t) then
        local base = (b * T + t) * Cd
        for j = 0, Cd - 1 do L.abs[j + 1] = L.abs[j + 1] + math.abs(xd[base + j]) end
        local n = topk(xd, base, Cd, k, out)
        for i = 1, n do L.top[out[i] + 1] = L.top[out[i] + 1] + 1 end
        L.n = L.n + 1
      end
    end
  end
end

-- h_avg, top_share, max_share, sink_dim, sinks of accumulated sums over n rows
local function summarise(abs, top, n, Cd, threshold)
  local r = { h_avg = {}, top_share = {}, max_share = 0, sink_dim = nil, sinks = {} }
  for j = 1, Cd do
    r.h_avg[j] = n > 0 and abs[j] / n or 0
    r.top_share[j] = n > 0 and top[j] / n or 0
    if r.top_share[j] > r.max_share then r.max_share, r.sink_dim = r.top_share[j], j - 1 end
    if n > 0 and r.top_share[j] >= threshold then r.sinks[#r.sinks + 1] = j - 1 end
  end
  table.sort(r.sinks, function(a, b)
    if r.top_share[a + 1] ~= r.top_share[b + 1] then return r.top_share[a + 1] > r.top_share[b + 1] end
    return a < b
  end)
  return r
end

function Sinks:result()
  local ls = {}
  for l in pairs(self.layers) do ls[#ls + 1] = l end
  table.sort(ls)
  local Cd = self.C or 0
  local abs, top, n = {}, {}, 0
  for j = 1, Cd do abs[j], top[j] = 0, 0 end
  local res = { C = Cd, k = self.k, threshold = self.threshold, layers = ls, by_layer = {} }
  for _, l in ipairs(ls) do
    local L = self.layers[l]
    for j = 1, Cd do abs[j], top[j] = abs[j] + L.abs[j], top[j] + L.top[j] end
    n = n + L.n
    res.by_layer[l] = summarise(L.abs, L.top, L.n, Cd, self.threshold)
  end
  local all = summarise(abs, top, n, Cd, self.threshold)
  for key, v in pairs(all) do res[key] = v end
  res.tokens = n
  res.order = {}
  for j = 1, Cd do res.order[j] = j - 1 end
  table.sort(res.order, function(a, b)
    if res.h_avg[a + 1] ~= res.h_avg[b + 1] then return res.h_avg[a + 1] > res.h_avg[b + 1] end
    return a < b
  end)
  res.stability = Cd > 0 and res.top_share[res.order[1] + 1] or 0
  return res
end

-- the residual sinks of a model over batches: the block outputs "h" of every layer (or of
-- opts.layers), padding left out
function M.residual_sinks(ctx, model, batches, opts)
  opts = opts or {}
  local s = M.ResidualSinks(opts)
  local cur
  recent.run_model(ctx, model, batches, function(name, l, t)
    if name == "h" and (not opts.layers or opts.layers[l]) then s:update(t, l, cur and cur.pad_mask) end
  end, function(_, batch) cur = batch end)
  return s:result()
end

-- ---------------------------------------------------------------- the λ-minimum detector
local kinds = { [nn.RMSNorm] = "rmsnorm", [nn.LayerNorm] = "layernorm", [norms.DyT] = "dyt" }

function M.norm_layers(model)
  local C = model.cfg and model.cfg.d_model
  local out = {}
  local function walk(m, pre)
    local mt = getmetatable(m)
    if mt == norms.PreAffine then walk(m.norm, m.pre) return end
    if mt == norms.GatedNorm then walk(m.norm, pre) return end
    local kind = kinds[mt]
    if kind then
      local w = m.weight
      if w and tonumber(w.numel) > 1 and (not C or tonumber(w.numel) == C) then
        out[#out + 1] = { name = m.name, kind = kind, weight = w, C = tonumber(w.numel), pre = pre }
      end
      return
    end
    for _, c in ipairs(m._children or {}) do walk(c) end
  end
  walk(model)
  return out
end

function M.lambda_minimum(model, opts)
  opts = opts or {}
  local thr = opts.ratio or 0.1
  local sinks = opts.sinks or {}
  local res = { layers = {}, flagged = 0, coincide = 0, ratio = thr }
  for _, nl in ipairs(M.norm_layers(model)) do
    local w, Cd = nl.weight, nl.C
    local a, vals = math.huge, {}
    local argmin
    for j = 0, Cd - 1 do
      local v = math.abs(w.data[j])
      vals[j + 1] = v
      if v < a then a, argmin = v, j end
    end
    table.sort(vals)
    local med = Cd % 2 == 1 and vals[(Cd + 1) / 2] or (vals[Cd / 2] + vals[Cd / 2 + 1]) / 2
    local r = { name = nl.name, kind = nl.kind, argmin = argmin, min = a, median = med,
                ratio = med > 0 and a / med or math.huge, at_sink = {} }
    r.flagged = r.ratio < thr
    for _, d in ipairs(sinks) do
      r.at_sink[d] = w.data[d]
      if r.flagged and d == argmin then res.coincide = res.coincide + 1 end
    end
    if r.flagged then res.flagged = res.flagged + 1 end
    res.layers[#res.layers + 1] = r
  end
  return res
end

-- ---------------------------------------------------------------- the sorted map
-- |x| of sequence b of x (B,T,C) with the columns in `order` (0-based dims), the first
-- opts.cols of them (default all) and the first opts.rows tokens (default T)
function M.sorted_map(x, b, order, opts)
  opts = opts or {}
  local T, Cd = x:size(1), x:size(2)
  local rows, cols = math.min(opts.rows or T, T), math.min(opts.cols or #order, #order)
  local z = {}
  for t = 0, rows - 1 do
    local row = {}
    for i = 1, cols do row[i] = math.abs(x.data[(b * T + t) * Cd + order[i]]) end
    z[t + 1] = row
  end
  return { rows = rows, cols = cols, z = z }
end

-- ---------------------------------------------------------------- one point of a checkpoint series
-- The three quantities judge/onsets times, on a model's forward passes over batches: sink_rate
-- (Gu et al.'s share of heads whose mean attention on the first token exceeds 0.3, as a fraction),
-- massive_ratio (the first token's top-1 |h| over the median |h|, largest over the layers, as the
-- remedies leaderboard's) and resid_share (max_share of M.residual_sinks).
function M.series_point(ctx, model, batches)
  local sr = recent.sink_rate(ctx, model, batches)
  local s = M.ResidualSinks{}
  local first, med, cur = {}, {}, nil
  recent.run_model(ctx, model, batches, function(name, l, x)
    if name ~= "h" then return end
    s:update(x, l, cur and cur.pad_mask)
    first[l] = (first[l] or 0) + recent.top_median(x:narrow(1, 0, 1)).top[1]
    med[l] = (med[l] or 0) + recent.top_median(x, cur and cur.pad_mask).median
  end, function(_, b) cur = b end)
  local massive = 0
  for l, f in pairs(first) do if med[l] > 0 then massive = math.max(massive, f / med[l]) end end
  return { sink_rate = sr.rate / 100, massive_ratio = massive, resid_share = s:result().max_share }
end

return M
