-- superweights — Yu et al. 2024's super weights: single entries of an MLP's down projection that
-- write a massive activation (docs/reference/metrics.md, "Super weights").
--
-- Detection (one forward over held-out batches, the probes "x_down" = the down projection's input
-- and "ffn_out" = its output): in every layer, the largest |y| of the output y = x_down·W_downᵀ is
-- the layer's spike, at token (sequence, position) and output channel o. At that token the
-- output y_o = Σ_i x_i·W[o, i]; the entry behind it is the input channel i with the largest
-- |x_i·W[o, i]| (its share of y_o is reported). Yu et al. take i where the input x_down itself
-- spikes; `input_spike` says whether that channel is also the token's largest |x_i|. The layers
-- are ranked by the spike's size over the median |y| of the layer (averaged over sequences); the
-- first `n` layers' entries are the candidates, (layer, row o, column i) of down_proj.weight.
--
-- Test (needs the loss, so a model in memory): zero the candidate and evaluate the held-out loss
-- and the massive activation (the largest top-1 |h| over layers, per sequence, averaged: Sun et
-- al.'s measure: measure.metrics' max inf norm), against a control that zeroes the k next
-- largest |W| entries of the same matrix (Yu et al.: zeroing the largest non-super weights barely
-- matters). A super weight is a candidate whose zeroing raises the loss by at least MIN_DLOSS nats
-- and by at least FACTOR × the control's rise, and removes at least half of the massive activation.
--
--   local sw = require "outlierlab.measure.superweights"
--   local d = sw.Detector{ weight = function(l) return down_proj weight (C, F) of layer l end }
--   d:attach(P)                        -- probes x_down and ffn_out (outlierlab.measure.probes)
--   ... held-out batches through P ...
--   local cands = d:candidates(n)      -- { {layer, row, col, weight, x, share, input_spike, spike =
--                                      --    {abs, value, seq, pos, token, ratio}, x_abs_max, x_channel}, ... }
--   local r = sw.zero(ctx, m, batches, cand, { control_k = 10 })   -- (in memory)
--   -- r = { loss, massive, loss_zero, dloss, massive_zero, control = { entries, loss, dloss, massive }, super }
local ffi = require "ffi"
local analysis = require "outlierlab.measure.metrics"
local recent = require "outlierlab.measure.recent"

local M = {}
M.MIN_DLOSS, M.FACTOR, M.REMOVED = 0.01, 10, 0.5
M.CONTROL_K = 10

local Det = {}
Det.__index = Det

function M.Detector(o)
  if type(o) ~= "table" or type(o.weight) ~= "function" then
    error("superweights.Detector: weight = function(layer) -> the down projection's weight (C, F) is required", 2)
  end
  return setmetatable({ weight = o.weight, xd = {}, layers = {}, med = {} }, Det)
end

-- the down projection's input of this layer and batch (read again by the output's probe)
function Det:probe_x(x, l) self.xd[l] = x end

function Det:probe_y(y, l, batch)
  local B, T, C = y:size(0), y:size(1), y:size(2)
  local S = self.layers[l]
  if not S then
    -- the layer's median |y| per sequence, averaged (measure.metrics' accumulator)
    S = { abs = -1, stats = analysis.Stats{ T = T, C = C, topk = 1 } }
    self.layers[l] = S
  end
  S.stats:update_batch(y, batch)
  local d = y.data
  local best, at = -1, 0
  for i = 0, B * T * C - 1 do
    local a = math.abs(d[i])
    if a > best then best, at = a, i end
  end
  if best <= S.abs then return end
  local b, t, o = math.floor(at / (T * C)), math.floor(at / C) % T, at % C
  local x = self.xd[l]
  if not x then error("superweights: no x_down probe before ffn_out in layer " .. l .. " (attach with d:attach(P))", 0) end
  local F = x:size(2)
  local W = self.weight(l)
  if W:size(0) ~= C or W:size(1) ~= F then
    error(string.format("superweights: layer %d's down projection is %dx%d, the probes give C %d and F %d", l, W:size(0), W:size(1), C, F), 0)
  end
  local xr, wr = x.data + (b * T + t) * F, W.data + o * F
  local ci, cv, xi, xv = 0, 0, 0, -1
  for i = 0, F - 1 do
    local c = xr[i] * wr[i]
    if math.abs(c) > math.abs(cv) then ci, cv = i, c end
    if math.abs(xr[i]) > xv then xi, xv = i, math.abs(xr[i]) end
  end
  S.abs, S.value = best, d[at]
  S.seq, S.pos, S.row, S.col = (batch and batch.seq_offset or 0) + b, t, o, ci
  S.token = batch and batch.ids and batch.ids.idata[b * T + t] or -1
  S.weight, S.x, S.contrib = wr[ci], xr[ci], cv
  S.share = d[at] ~= 0 and cv / d[at] or 0 / 0
  S.x_channel, S.x_abs_max = xi, xv
end

function Det:attach(P)
  P:attach("x_down", function(x, l) self:probe_x(x, l) end)
  P:attach("ffn_out", function(y, l, b) self:probe_y(y, l, b) end)
  return P
end

-- every layer's spike (0-based layers in order), and the n candidates: the layers ranked by the
-- spike's |y| over the layer's median |y|
function Det:result()
  local ls = {}
  for l in pairs(self.layers) do ls[#ls + 1] = l end
  table.sort(ls)
  local out = { layers = ls }
  for _, l in ipairs(ls) do
    local S = self.layers[l]
    local med = S.stats:result().avg_median
    out[l] = { layer = l, row = S.row, col = S.col, weight = S.weight, x = S.x, contrib = S.contrib, share = S.share,
               input_spike = S.col == S.x_channel, x_channel = S.x_channel, x_abs_max = S.x_abs_max,
               spike = { abs = S.abs, value = S.value, seq = S.seq, pos = S.pos, token = S.token,
                         median = med, ratio = med > 0 and S.abs / med or math.huge } }
  end
  return out
end

function Det:candidates(n)
  local r = self:result()
  local list = {}
  for _, l in ipairs(r.layers) do list[#list + 1] = r[l] end
  table.sort(list, function(a, b) return a.spike.ratio > b.spike.ratio end)
  local out = {}
  for i = 1, math.min(n or 1, #list) do out[i] = list[i] end
  return out
end

-- the k largest |W| entries of a (C, F) matrix other than (row, col): { {row, col, value}, ... }
function M.largest(W, k, skip_row, skip_col)
  local C, F = W:size(0), W:size(1)
  local top = {}   -- sorted descending by |value|, at most k
  local floor = -1
  for r = 0, C - 1 do
    local base = r * F
    for c = 0, F - 1 do
      local a = math.abs(W.data[base + c])
      if a > floor and not (r == skip_row and c == skip_col) then
        local e = { row = r, col = c, value = W.data[base + c], abs = a }
        local pos = #top + 1
        while pos > 1 and top[pos - 1].abs < a do pos = pos - 1 end
        table.insert(top, pos, e)
        if #top > k then top[#top] = nil end
        if #top == k then floor = top[k].abs end
      end
    end
  end
  return top
end

-- the held-out loss and the massive activation (max over layers of the per-sequence top-1 |h|,
-- averaged over sequences) of the model as it is
function M.measure(ctx, m, batches)
  local hs, cur = nil, nil
  local loss = recent.run_model(ctx, m, batches, function(name, l, t)
    if name == "h" then
      hs = hs or analysis.LayerStats{ T = t:size(1), C = t:size(2), topk = 1 }
      hs:probe(t, l, cur)
    end
  end, function(_, b) cur = b end)
  local massive, layer = 0, nil
  local r = hs and hs:result() or { layers = {} }
  for _, l in ipairs(r.layers) do
    local v = r[l].avg_max_inf_norm   -- the per-sequence top-1 |h|, averaged
    if v > massive then massive, layer = v, l end
  end
  return loss, massive, layer
end

-- set the listed entries of W to values (returns the old values)
local function set(W, entries, values)
  local F, old = W:size(1), {}
  for i, e in ipairs(entries) do
    local at = e.row * F + e.col
    old[i] = W.data[at]
    W.data[at] = values and values[i] or 0
  end
  return old
end

-- zero one candidate, then its control, each on the same batches; the weights are restored
-- cand: { layer, row, col }; o.weight(layer) -> W (C, F); o.control_k (default CONTROL_K)
function M.zero(ctx, m, batches, cand, o)
  o = o or {}
  local W = o.weight(cand.layer)
  local k = o.control_k or M.CONTROL_K
  local r = { layer = cand.layer, row = cand.row, col = cand.col }
  r.loss, r.massive, r.massive_layer = M.measure(ctx, m, batches)
  local one = { { row = cand.row, col = cand.col } }
  local old = set(W, one)
  local ok, l0, m0 = pcall(M.measure, ctx, m, batches)
  set(W, one, old)
  if not ok then error(l0, 0) end
  r.loss_zero, r.massive_zero, r.dloss = l0, m0, l0 - r.loss
  local ctrl = M.largest(W, k, cand.row, cand.col)
  local cold = set(W, ctrl)
  local ok2, l1, m1 = pcall(M.measure, ctx, m, batches)
  set(W, ctrl, cold)
  if not ok2 then error(l1, 0) end
  r.control = { entries = ctrl, k = #ctrl, loss = l1, dloss = l1 - r.loss, massive = m1,
                largest = ctrl[1] and ctrl[1].abs or 0 / 0 }
  r.removed = r.massive > 0 and 1 - r.massive_zero / r.massive or 0
  r.control.removed = r.massive > 0 and 1 - m1 / r.massive or 0
  r.super = r.dloss >= M.MIN_DLOSS and r.dloss >= M.FACTOR * math.max(r.control.dloss, 0) and r.removed >= M.REMOVED
  return r
end

return M
