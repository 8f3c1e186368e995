-- phenomena — the four signatures of heads that learn to do nothing, measured on held-out
-- batches (docs/METRICS.md, "Sinks, drains and massive activations"):
--
--   sink share     of head h on key category c: the attention that queries of other categories
--                  put on keys of category c, averaged over those queries,
--                    share_c(h) = mean_{i: cat(i) ≠ c} Σ_{j: cat(j) = c} A_h[i, j]
--                  (for an LM with <bos> and c = initial: mean_{i ≥ 1} A_h[i, 0]);
--   value drain    ‖v_j‖ of the head's values at keys of category c, averaged, over the median
--                  ‖v_j‖ of the other keys (Guo et al. 2024: a sink's value is small);
--   massive act.   per layer output h_l: the per-sequence top-1 |h| over the median |h|,
--                  averaged over sequences (SO Fig. 3), and the same with the top-1 taken only
--                  over tokens of each category ("at that token");
--   kurtosis       per layer, Pearson kurtosis of each sequence's T·C values of h_l, averaged
--                  over sequences (QT's definition, outlierlab.analysis); the model's "average
--                  kurtosis" is the mean over layers.
--
--   local phenomena = require "outlierlab.phenomena"
--   local ph = phenomena.new{ category = task.category, T = 128, C = 64, n_head = 4 }
--   local P = probes.new{}
--   ph:attach(P)                        -- points attn_probs, v, h
--   P:forward(model, batch) ...         -- as many held-out batches as wanted
--   local r = ph:result()               -- see below; ph:reset() starts over
--
-- result: { layers = {0..}, per_layer = { [l] = { top1, median, ratio, kurtosis,
--             ratio_at = {cat = r}, top1_category = {cat = n} } },
--           heads = { [l] = { [h] = { share = {cat = s}, value_ratio = {cat = r} } } },
--           sink = { layer, head, category, share, value_ratio },   -- the head with the largest share
--           massive = { layer, category, ratio },                 -- largest ratio_at over sink categories
--           max_ratio = { layer, ratio }, avg_kurtosis, max_kurtosis }
local ffi = require "ffi"
local analysis = require "outlierlab.analysis"

local M = {}
local CATS = analysis.categories                  -- initial, delimiter, weak, other
local SINK_CATS = { "initial", "delimiter" }
M.SINK_CATEGORIES = SINK_CATS
local CAT_INDEX = {}
for i, c in ipairs(CATS) do CAT_INDEX[c] = i end

local Ph = {}
Ph.__index = Ph

function M.new(o)
  for k in pairs(o) do
    if not ({ category = 1, T = 1, C = 1, n_head = 1 })[k] then error("phenomena.new: unknown key '" .. tostring(k) .. "'", 2) end
  end
  if type(o.category) ~= "function" then error("phenomena.new: category must be a function(id) -> category name", 2) end
  local self = setmetatable({ category = o.category, T = o.T, C = o.C, n_head = o.n_head }, Ph)
  self:reset()
  return self
end

function Ph:reset()
  self.stats = analysis.LayerStats{ T = self.T, C = self.C, topk = 1 }
  self.att = {}      -- [l][h] = { share_sum = {cat}, share_n = {cat} }
  self.val = {}      -- [l][h] = { sum = {cat}, n = {cat}, others = {norms} }
  self.act = {}      -- [l] = { at_sum = {cat}, at_n = {cat}, top1_cat = {cat} }
  self.cats = nil
end

-- category index (1..4) of every position of the batch: int array (B·T)
local function batch_cats(self, batch)
  if self._cats_batch == batch then return self._cats end
  local ids = batch.ids
  local n = tonumber(ids.numel)
  local cats = ffi.new("uint8_t[?]", n)
  for i = 0, n - 1 do cats[i] = CAT_INDEX[self.category(ids.idata[i])] or 4 end
  self._cats_batch, self._cats = batch, cats
  return cats
end

local function zeros4() return { 0, 0, 0, 0 } end

function Ph:probe_attn(A, l, batch)
  local B, NH, Tq, Tk = A:size(0), A:size(1), A:size(2), A:size(3)
  local cats = batch_cats(self, batch)
  local L = self.att[l] or {}
  self.att[l] = L
  local d = A.data
  local mass = ffi.new("double[5]")
  for h = 0, NH - 1 do
    local H = L[h] or { sum = zeros4(), n = zeros4() }
    L[h] = H
    for b = 0, B - 1 do
      local crow = cats + b * Tk
      for i = 0, Tq - 1 do
        local row = d + ((b * NH + h) * Tq + i) * Tk
        mass[1], mass[2], mass[3], mass[4] = 0, 0, 0, 0
        for j = 0, Tk - 1 do local c = crow[j] mass[c] = mass[c] + row[j] end
        local ci = cats[b * Tq + i]
        for c = 1, 4 do
          if c ~= ci then H.sum[c] = H.sum[c] + mass[c]; H.n[c] = H.n[c] + 1 end
        end
      end
    end
  end
end

function Ph:probe_v(v, l, batch)
  local B, NKV, T, HD = v:size(0), v:size(1), v:size(2), v:size(3)
  local cats = batch_cats(self, batch)
  local L = self.val[l] or {}
  self.val[l] = L
  local d = v.data
  for g = 0, NKV - 1 do
    local H = L[g] or { sum = zeros4(), n = zeros4(), others = {} }
    L[g] = H
    for b = 0, B - 1 do
      for t = 0, T - 1 do
        local base = ((b * NKV + g) * T + t) * HD
        local s = 0
        for k = 0, HD - 1 do local x = d[base + k] s = s + x * x end
        local c = cats[b * T + t]
        local nrm = math.sqrt(s)
        H.sum[c] = H.sum[c] + nrm
        H.n[c] = H.n[c] + 1
        H.others[#H.others + 1] = { c, nrm }
      end
    end
  end
  self.nkv = NKV
end

function Ph:probe_h(x, l, batch)
  self.stats:probe(x, l, batch)
  local B, T, C = x:size(0), x:size(1), x:size(2)
  local cats = batch_cats(self, batch)
  local S = self.act[l] or { at_sum = zeros4(), at_n = zeros4(), top1_cat = zeros4() }
  self.act[l] = S
  local d = x.data
  local mx = ffi.new("double[5]")
  for b = 0, B - 1 do
    mx[1], mx[2], mx[3], mx[4] = -1, -1, -1, -1
    local best, bestc = -1, 4
    for t = 0, T - 1 do
      local c = cats[b * T + t]
      local base = (b * T + t) * C
      local m = 0
      for k = 0, C - 1 do local a = math.abs(d[base + k]) if a > m then m = a end end
      if m > mx[c] then mx[c] = m end
      if m > best then best, bestc = m, c end
    end
    for c = 1, 4 do if mx[c] >= 0 then S.at_sum[c] = S.at_sum[c] + mx[c]; S.at_n[c] = S.at_n[c] + 1 end end
    S.top1_cat[bestc] = S.top1_cat[bestc] + 1
  end
end

function Ph:attach(P)
  P:attach("attn_probs", function(A, l, b) self:probe_attn(A, l, b) end)
  P:attach("v", function(v, l, b) self:probe_v(v, l, b) end)
  P:attach("h", function(x, l, b) self:probe_h(x, l, b) end)
  return P
end

local function median(xs)
  if #xs == 0 then return 0 / 0 end
  table.sort(xs)
  local n = #xs
  return n % 2 == 1 and xs[(n + 1) / 2] or 0.5 * (xs[n / 2] + xs[n / 2 + 1])
end

function Ph:result()
  local res = self.stats:result()
  local out = { layers = res.layers, per_layer = {}, heads = {} }
  local ksum, kmax, nl = 0, -math.huge, 0
  local massive = { ratio = 0 / 0 }
  local maxr = { ratio = 0 / 0 }
  for _, l in ipairs(res.layers) do
    local r, S = res[l], self.act[l]
    local pl = { top1 = r.avg_topk[1], median = r.avg_median, kurtosis = r.avg_kurtosis, ratio_at = {},
                 top1_category = {} }
    pl.ratio = pl.top1 / pl.median
    for i, c in ipairs(CATS) do
      pl.ratio_at[c] = S.at_n[i] > 0 and (S.at_sum[i] / S.at_n[i]) / pl.median or 0 / 0
      pl.top1_category[c] = S.top1_cat[i]
    end
    out.per_layer[l] = pl
    ksum, nl = ksum + pl.kurtosis, nl + 1
    if pl.kurtosis > kmax then kmax = pl.kurtosis end
    if not (pl.ratio <= maxr.ratio) then maxr = { layer = l, ratio = pl.ratio } end
    for _, c in ipairs(SINK_CATS) do
      local v = pl.ratio_at[c]
      if v == v and not (v <= massive.ratio) then massive = { layer = l, category = c, ratio = v } end
    end
  end
  out.avg_kurtosis = nl > 0 and ksum / nl or 0 / 0
  out.max_kurtosis = nl > 0 and kmax or 0 / 0
  out.massive, out.max_ratio = massive, maxr
  -- heads
  local sink = { share = -1 }
  local layers = {}
  for l in pairs(self.att) do layers[#layers + 1] = l end
  table.sort(layers)
  for _, l in ipairs(layers) do
    out.heads[l] = {}
    local NH = 0
    for h in pairs(self.att[l]) do NH = math.max(NH, h + 1) end
    for h = 0, NH - 1 do
      local H = self.att[l][h]
      local e = { share = {}, value_ratio = {} }
      for i, c in ipairs(CATS) do e.share[c] = H.n[i] > 0 and H.sum[i] / H.n[i] or 0 / 0 end
      local g = self.nkv and math.floor(h * self.nkv / NH) or h
      local Vh = self.val[l] and self.val[l][g]
      if Vh then
        for i, c in ipairs(CATS) do
          local others = {}
          for _, p in ipairs(Vh.others) do if p[1] ~= i then others[#others + 1] = p[2] end end
          e.value_ratio[c] = Vh.n[i] > 0 and (Vh.sum[i] / Vh.n[i]) / median(others) or 0 / 0
        end
      end
      out.heads[l][h] = e
      for _, c in ipairs(SINK_CATS) do
        local s = e.share[c]
        if s == s and s > sink.share then
          sink = { layer = l, head = h, category = c, share = s, value_ratio = e.value_ratio[c] }
        end
      end
    end
  end
  out.sink = sink.layer and sink or { share = 0 / 0, value_ratio = 0 / 0 }
  return out
end

-- one line: "sink L0H1 initial 0.88 (value 0.15) | massive L2 initial 140 | kurtosis avg 31 max 80"
function M.describe(r)
  local s = r.sink
  local m = r.massive
  return string.format("sink %s %.2f (value %.2f) | top-1/median %s | kurtosis avg %.1f max %.1f",
    s.layer and string.format("L%dH%d %s", s.layer, s.head, s.category) or "-", s.share, s.value_ratio,
    m.layer and string.format("%.0f at %s (L%d), max %.0f (L%d)", m.ratio, m.category, m.layer,
      r.max_ratio.ratio, r.max_ratio.layer) or "-",
    r.avg_kurtosis, r.max_kurtosis)
end

return M
