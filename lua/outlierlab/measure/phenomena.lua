-- phenomena — the four signatures of heads that learn to do nothing, measured on held-out
-- batches (docs/reference/metrics.md, "Sinks, drains and massive activations"):
--
--   sink share     of head h on key category c: the largest weight a query puts on ONE key of
--                  category c other than itself, averaged over the queries that see such a key,
--                    share_c(h) = mean_i max_{j ≠ i, cat(j) = c} A_h[i, j]
--                  (for an LM with <bos> and c = initial: mean_{i ≥ 1} A_h[i, 0]); the summed
--                  weight on all keys of the category is reported as mass_c(h);
--   value drain    the attention-weighted ‖v_j‖ of the keys of category c,
--                    Σ_i Σ_{j∈c} A_ij ‖v_j‖ / Σ_i Σ_{j∈c} A_ij,
--                  over the median ‖v_j‖ of the keys of the other categories (Guo et al. 2024:
--                  a sink's value is small);
--   massive act.   per layer output h_l: the per-sequence top-1 |h| over the median |h|,
--                  averaged over sequences (SO Fig. 3), and the same with the top-1 taken only
--                  over tokens of each category ("at that token");
--   kurtosis       per layer, Pearson kurtosis of each sequence's T·C values of h_l, averaged
--                  over sequences (QT's definition, outlierlab.measure.metrics); the model's "average
--                  kurtosis" is the mean over layers; the same without the initial tokens
--                  (kurtosis_no_initial: how heavy the tail is apart from the sink token);
--   one-hot share  per layer, of each sequence's initial token h_0: the share of its squared norm
--                  in its largest channel, max_k h_0k² / Σ_k h_0k², averaged over sequences
--                  (initial_top_share; 1/C for a flat state, 1 for a one-hot one), and of its
--                  three largest channels (initial_top3_share). After RMSNorm
--                  the state is scale-free, so this is what a sink key can use; the ratio a
--                  massive value M needs over the other channels' rms r for a share s is
--                  M/r = sqrt(s·(C−1)/(1−s)): it grows with √C (docs/findings/organism.md);
--   sink rate      Gu et al. 2025: alpha_h = mean over all queries of A_h[i, 0] (the first key,
--                  which every query sees); a head is a sink when alpha_h > eps = 0.3; the rate
--                  is the share of such heads over all layers.
--                  sink_rate_pct is the same threshold per sample (each sequence's own alpha),
--                  the percentage of (sample, head) pairs, as Gu et al.'s code reports it
--                  (outlierlab.measure.recent).
--
--   local phenomena = require "outlierlab.measure.phenomena"
--   local ph = phenomena.new{ category = task.category, T = 128, C = 64, n_head = 4,
--                             sink_categories = {"initial", "delimiter"},   -- the default
--                             causal = true }   -- decoders: key j > i is masked, not "seen"
--   (a ViT's patches: phenomena.vit_batch gives [CLS] initial, background patches weak, object
--   patches other; its sink categories are initial and weak)
--   local P = probes.new{}
--   ph:attach(P)                        -- points attn_probs, v, h
--   P:forward(model, batch) ...         -- as many held-out batches as wanted
--   local r = ph:result()               -- see below; ph:reset() starts over
--
-- result: { layers = {0..}, per_layer = { [l] = { top1, median, ratio, kurtosis,
--             ratio_at = {cat = r}, top1_category = {cat = n} } },
--           heads = { [l] = { [h] = { share = {cat = s}, mass = {cat = m}, value_ratio = {cat = r} } } },
--           (heads[l][h].alpha_first: Gu et al.'s mean attention on the first key)
--           sink = { layer, head, category, share, value_ratio },   -- the head with the largest share
--           sink_rate, sink_heads, n_heads, sink_rate_value_ratio (mean value ratio of those heads),
--           avg_kurtosis_no_initial, per_layer[l].kurtosis_no_initial, per_layer[l].top1_at[cat],
--           per_layer[l].initial_top_share, initial_top3_share (one-hot shares of the initial token's state),
--           massive = { layer, category, ratio, initial_top_share, initial_top3_share (at that layer) },                 -- largest ratio_at over sink categories
--           max_ratio = { layer, ratio }, avg_kurtosis, max_kurtosis,
--           sink_rate_pct (percent, per sample), sink_rate_by_layer = { [l] = { fraction of samples per head } },
--           resid_share (measure/residual: the largest top-3 share of one dimension of h over layers and tokens) }
local ffi = require "ffi"
local analysis = require "outlierlab.measure.metrics"
local remedies = require "outlierlab.measure.recent"
local residual = require "outlierlab.measure.residual"

local M = {}
local CATS = analysis.categories                  -- initial, delimiter, weak, other
local SINK_CATS = { "initial", "delimiter" }
M.SINK_CATEGORIES = SINK_CATS
local CAT_INDEX = {}
for i, c in ipairs(CATS) do CAT_INDEX[c] = i end

-- Gu et al. 2025's threshold: a head is a sink when its mean attention on the first token,
-- over the queries that see it, exceeds eps
M.SINK_EPS = 0.3

local Ph = {}
Ph.__index = Ph

function M.new(o)
  for k in pairs(o) do
    if not ({ category = 1, T = 1, C = 1, n_head = 1, sink_categories = 1, causal = 1 })[k] then error("phenomena.new: unknown key '" .. tostring(k) .. "'", 2) end
  end
  if type(o.category) ~= "function" then error("phenomena.new: category must be a function(id) -> category name", 2) end
  local self = setmetatable({ category = o.category, T = o.T, C = o.C, n_head = o.n_head,
                              sink_cats = o.sink_categories or SINK_CATS, causal = o.causal and true or false }, Ph)
  for _, c in ipairs(self.sink_cats) do
    if not CAT_INDEX[c] then error("phenomena.new: unknown sink category '" .. tostring(c) .. "'", 2) end
  end
  self:reset()
  return self
end

function Ph:reset()
  self.stats = analysis.LayerStats{ T = self.T, C = self.C, topk = 1 }
  self.att = {}      -- [l][h] = { share_sum = {cat}, share_n = {cat} }
  self.val = {}      -- [l][h] = { sum = {cat}, n = {cat}, others = {norms} }
  self.act = {}      -- [l] = { at_sum = {cat}, at_n = {cat}, top1_cat = {cat} }
  self.vnorm_batch = nil
  self.cats = nil
  self.sinkrate = remedies.SinkRate{}
  self.resid = residual.ResidualSinks{}   -- arXiv 2601.22966: a dimension on top at almost every token
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

-- Attention: for every head and key category c, per query i (that sees a key of category c
-- other than itself) the largest weight on one key of category c (share: "one sink token") and
-- the summed weight on all of them (mass); and the attention-weighted value norm of those keys
-- (the norms of this batch's values, reported just before by probe_v).
function Ph:probe_attn(A, l, batch)
  local B, NH, Tq, Tk = A:size(0), A:size(1), A:size(2), A:size(3)
  self.sinkrate:update(A, l, { causal = self.causal, pad_mask = batch.pad_mask })
  local cats = batch_cats(self, batch)
  local L = self.att[l] or {}
  self.att[l] = L
  local d = A.data
  local vn = self.vnorm_batch and self.vnorm_batch[l]
  local causal = self.causal
  local mx, mass, wv = ffi.new("double[5]"), ffi.new("double[5]"), ffi.new("double[5]")
  local seen = ffi.new("uint8_t[5]")
  for h = 0, NH - 1 do
    local H = L[h] or { sum = zeros4(), n = zeros4(), mass = zeros4(), wv = zeros4(), wsum = zeros4(), first_sum = 0, first_n = 0 }
    L[h] = H
    local g = vn and math.floor(h * vn.NKV / NH) or 0
    for b = 0, B - 1 do
      local crow = cats + b * Tk
      for i = 0, Tq - 1 do
        local row = d + ((b * NH + h) * Tq + i) * Tk
        -- Gu et al.'s alpha(first key): every query sees key 0 (causal or not)
        H.first_sum, H.first_n = H.first_sum + row[0], H.first_n + 1
        for c = 1, 4 do mx[c], mass[c], wv[c], seen[c] = 0, 0, 0, 0 end
        local jmax = causal and math.min(Tk - 1, i + Tk - Tq) or Tk - 1
        for j = 0, jmax do
          local a = row[j]
          if j ~= i and a > 0 then
            local c = crow[j]
            seen[c] = 1
            mass[c] = mass[c] + a
            if a > mx[c] then mx[c] = a end
            if vn then wv[c] = wv[c] + a * vn.norm[((b * vn.NKV + g) * Tk) + j] end
          elseif j ~= i then
            seen[crow[j]] = 1
          end
        end
        for c = 1, 4 do
          if seen[c] == 1 then
            H.sum[c] = H.sum[c] + mx[c]
            H.mass[c] = H.mass[c] + mass[c]
            H.n[c] = H.n[c] + 1
            H.wv[c] = H.wv[c] + wv[c]
            H.wsum[c] = H.wsum[c] + mass[c]
          end
        end
      end
    end
  end
end

-- Values: every key's ‖v_j‖ (kept for probe_attn of the same layer and batch) and, per head
-- and category, the norms for the median of the other categories
function Ph:probe_v(v, l, batch)
  local B, NKV, T, HD = v:size(0), v:size(1), v:size(2), v:size(3)
  local cats = batch_cats(self, batch)
  local L = self.val[l] or {}
  self.val[l] = L
  self.vnorm_batch = self.vnorm_batch or {}
  local norm = ffi.new("double[?]", B * NKV * T)
  self.vnorm_batch[l] = { NKV = NKV, norm = norm }
  local d = v.data
  for g = 0, NKV - 1 do
    local H = L[g] or { others = {} }
    L[g] = H
    for b = 0, B - 1 do
      for t = 0, T - 1 do
        local base = ((b * NKV + g) * T + t) * HD
        local s = 0
        for k = 0, HD - 1 do local x = d[base + k] s = s + x * x end
        local nrm = math.sqrt(s)
        norm[(b * NKV + g) * T + t] = nrm
        H.others[#H.others + 1] = { cats[b * T + t], nrm }
      end
    end
  end
  self.nkv = NKV
end

function Ph:probe_h(x, l, batch)
  self.stats:probe(x, l, batch)
  self.resid:update(x, l, batch.pad_mask)
  local B, T, C = x:size(0), x:size(1), x:size(2)
  local cats = batch_cats(self, batch)
  local S = self.act[l] or { at_sum = zeros4(), at_n = zeros4(), top1_cat = zeros4(), kni_sum = 0, kni_n = 0, sh_sum = 0, sh3_sum = 0, sh_n = 0 }
  self.act[l] = S
  local d = x.data
  local mx = ffi.new("double[5]")
  for b = 0, B - 1 do
    -- Pearson kurtosis of the sequence's values without its initial tokens (the token a massive
    -- activation sits on): how heavy the tail is apart from that one token
    local n, s1 = 0, 0
    for t = 0, T - 1 do
      if cats[b * T + t] ~= 1 then
        local base = (b * T + t) * C
        for k = 0, C - 1 do s1 = s1 + d[base + k] end
        n = n + C
      end
    end
    if n > 1 then
      local mu, m2, m4 = s1 / n, 0, 0
      for t = 0, T - 1 do
        if cats[b * T + t] ~= 1 then
          local base = (b * T + t) * C
          for k = 0, C - 1 do
            local z = d[base + k] - mu
            local z2 = z * z
            m2, m4 = m2 + z2, m4 + z2 * z2
          end
        end
      end
      -- the same convention as analysis.LayerStats: fourth moment over the unbiased variance squared
      m2, m4 = m2 / (n - 1), m4 / n
      if m2 > 0 then S.kni_sum, S.kni_n = S.kni_sum + m4 / (m2 * m2), S.kni_n + 1 end
    end
    -- one-hot share of the initial token's state (its largest channel's share of the squared norm)
    for t = 0, T - 1 do
      if cats[b * T + t] == 1 then
        local base = (b * T + t) * C
        local ss, a1, a2, a3 = 0, 0, 0, 0   -- the sum of squares and the three largest squares
        for k = 0, C - 1 do
          local x2 = d[base + k] * d[base + k]
          ss = ss + x2
          if x2 > a1 then a1, a2, a3 = x2, a1, a2 elseif x2 > a2 then a2, a3 = x2, a2 elseif x2 > a3 then a3 = x2 end
        end
        if ss > 0 then S.sh_sum, S.sh3_sum, S.sh_n = S.sh_sum + a1 / ss, S.sh3_sum + (a1 + a2 + a3) / ss, S.sh_n + 1 end
      end
    end
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
  local ksum, kmax, nl, kni = 0, -math.huge, 0, 0
  local massive = { ratio = 0 / 0 }
  local maxr = { ratio = 0 / 0 }
  for _, l in ipairs(res.layers) do
    local r, S = res[l], self.act[l]
    local pl = { top1 = r.avg_topk[1], median = r.avg_median, kurtosis = r.avg_kurtosis, ratio_at = {},
                 top1_at = {}, top1_category = {},
                 kurtosis_no_initial = S.kni_n > 0 and S.kni_sum / S.kni_n or 0 / 0,
                 initial_top_share = S.sh_n > 0 and S.sh_sum / S.sh_n or 0 / 0,
                 initial_top3_share = S.sh_n > 0 and S.sh3_sum / S.sh_n or 0 / 0 }
    pl.ratio = pl.top1 / pl.median
    for i, c in ipairs(CATS) do
      pl.top1_at[c] = S.at_n[i] > 0 and S.at_sum[i] / S.at_n[i] or 0 / 0
      pl.ratio_at[c] = pl.top1_at[c] / pl.median
      pl.top1_category[c] = S.top1_cat[i]
    end
    out.per_layer[l] = pl
    ksum, nl = ksum + pl.kurtosis, nl + 1
    kni = kni + pl.kurtosis_no_initial
    if pl.kurtosis > kmax then kmax = pl.kurtosis end
    if not (pl.ratio <= maxr.ratio) then maxr = { layer = l, ratio = pl.ratio } end
    for _, c in ipairs(self.sink_cats) do
      local v = pl.ratio_at[c]
      if v == v and not (v <= massive.ratio) then massive = { layer = l, category = c, ratio = v, initial_top_share = pl.initial_top_share,
                                                                        initial_top3_share = pl.initial_top3_share } end
    end
  end
  out.avg_kurtosis = nl > 0 and ksum / nl or 0 / 0
  out.max_kurtosis = nl > 0 and kmax or 0 / 0
  out.avg_kurtosis_no_initial = nl > 0 and kni / nl or 0 / 0
  out.massive, out.max_ratio = massive, maxr
  -- heads
  local sink = { share = -1 }
  local n_heads, n_sinks, vsum, vn = 0, 0, 0, 0
  local layers = {}
  for l in pairs(self.att) do layers[#layers + 1] = l end
  table.sort(layers)
  for _, l in ipairs(layers) do
    out.heads[l] = {}
    local NH = 0
    for h in pairs(self.att[l]) do NH = math.max(NH, h + 1) end
    for h = 0, NH - 1 do
      local H = self.att[l][h]
      local e = { share = {}, mass = {}, value_ratio = {}, alpha_first = H.first_n > 0 and H.first_sum / H.first_n or 0 / 0 }
      for i, c in ipairs(CATS) do
        e.share[c] = H.n[i] > 0 and H.sum[i] / H.n[i] or 0 / 0
        e.mass[c] = H.n[i] > 0 and H.mass[i] / H.n[i] or 0 / 0
      end
      local g = self.nkv and math.floor(h * self.nkv / NH) or h
      local Vh = self.val[l] and self.val[l][g]
      if Vh then
        for i, c in ipairs(CATS) do
          local others = {}
          for _, p in ipairs(Vh.others) do if p[1] ~= i then others[#others + 1] = p[2] end end
          e.value_ratio[c] = H.wsum[i] > 0 and (H.wv[i] / H.wsum[i]) / median(others) or 0 / 0
        end
      end
      out.heads[l][h] = e
      n_heads = n_heads + 1
      if e.alpha_first > M.SINK_EPS then
        n_sinks = n_sinks + 1
        local v = e.value_ratio.initial
        if v and v == v then vsum, vn = vsum + v, vn + 1 end
      end
      for _, c in ipairs(self.sink_cats) do
        local s = e.share[c]
        if s == s and s > sink.share then
          sink = { layer = l, head = h, category = c, share = s, value_ratio = e.value_ratio[c] }
        end
      end
    end
  end
  out.sink = sink.layer and sink or { share = 0 / 0, value_ratio = 0 / 0 }
  -- Gu et al. 2025: the share of heads whose mean attention on the first token exceeds eps
  out.sink_rate = n_heads > 0 and n_sinks / n_heads or 0 / 0
  out.sink_heads, out.n_heads = n_sinks, n_heads
  out.sink_rate_value_ratio = vn > 0 and vsum / vn or 0 / 0   -- mean value ratio of those heads' first token
  local sr = self.sinkrate:result()
  out.sink_rate_pct, out.sink_rate_by_layer = sr.rate, sr.by_layer
  out.resid_share = self.resid:result().max_share
  return out
end

-- the token ids of a ViT batch for the categories above: 0 = [CLS], 1 = background patch,
-- 2 = object patch (batch.patch_object from data.ImageLoader); returns the batch with .ids
M.VIT_CATEGORY = { [0] = "initial", [1] = "weak", [2] = "other" }
M.VIT_SINKS = { "initial", "weak" }
function M.vit_category(id) return M.VIT_CATEGORY[id] or "other" end
function M.vit_batch(ctx, batch)
  local po = batch.patch_object
  if not po then error("phenomena.vit_batch: the batch has no patch_object (data.ImageLoader with patch =)", 2) end
  local B, NP = po:size(0), po:size(1)
  local ids = ctx:tensor({ B, NP + 1 }, { dtype = "i32", name = "patch_kind" })
  for b = 0, B - 1 do
    ids.idata[b * (NP + 1)] = 0
    for p = 0, NP - 1 do ids.idata[b * (NP + 1) + 1 + p] = po.idata[b * NP + p] ~= 0 and 2 or 1 end
  end
  batch.ids = ids
  return batch
end

-- one line: "sink L0H1 initial 0.88 (value 0.15) | massive L2 initial 140 | kurtosis avg 31 max 80"
function M.describe(r)
  local s = r.sink
  local m = r.massive
  return string.format("sink %s %.2f (value %.2f) | top-1/median %s | kurtosis avg %.1f max %.1f | sink rate %.0f%%",
    s.layer and string.format("L%dH%d %s", s.layer, s.head, s.category) or "-", s.share, s.value_ratio,
    m.layer and string.format("%.0f at %s (L%d), max %.0f (L%d)", m.ratio, m.category, m.layer,
      r.max_ratio.ratio, r.max_ratio.layer) or "-",
    r.avg_kurtosis, r.max_kurtosis, 100 * (r.sink_rate or 0 / 0))
end

return M
