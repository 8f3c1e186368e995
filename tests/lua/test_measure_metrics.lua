-- test_measure_metrics — every metric of docs/reference/metrics.md on hand-made tensors whose answers are
-- worked out by hand in the comments; merge and streaming equivalences of the accumulator.
local ol = require "outlierlab"
local analysis = require "outlierlab.measure.metrics"
local t = require "tap"

local ctx = ol.Context{ params = 65536, step_bytes = 67108864 }
local function T3(list, B, T, C) return ctx:tensor({ B, T, C }):load(list) end
local function I2(list, B, T) return ctx:tensor({ B, T }, { dtype = "i32" }):load(list) end
local function rel(a, b) return math.abs(a - b) / math.max(math.abs(b), 1e-300) end

-- ------------------------------------------------------------------ 1. planted 6σ outlier
-- x (1, 10, 10): 99 zeros and one 100 at position 3, channel 7.
-- μ = 100/100 = 1; Σ(x−μ)² = 99·1 + 99² = 9900; σ² = 9900/99 = 100, σ = 10; 6σ = 60.
-- |100 − 1| = 99 > 60: one outlier; |0 − 1| = 1: none else.
-- kurtosis: Σ(x−μ)⁴ = 99 + 99⁴ = 96059700, /n = 960597, /σ⁴ = /10000 -> 96.0597.
do
  local list = {}
  for i = 1, 100 do list[i] = 0 end
  list[3 * 10 + 7 + 1] = 100
  local x = T3(list, 1, 10, 10)
  local s = analysis.Stats{ T = 10, C = 10, topk = 3, rule = analysis.QT_6SIGMA }
  s:update(x)
  local r = s:result()
  t.is(r.outliers.elements, 1, "6σ: exactly one outlier element")
  t.is(r.outliers.tokens, 1, "6σ: one outlier token")
  t.is(r.outliers.by_position[4], 1, "6σ: at position 3")
  t.is(r.outliers.by_channel[8], 1, "6σ: at channel 7")
  t.is(r.outliers.sequences, 1, "6σ: one sequence with an outlier")
  t.near(r.mean, 1, 1e-12, "mean = 1")
  t.near(r.std, 10, 1e-12, "σ (unbiased) = 10")
  t.near(r.avg_kurtosis, 96.0597, 1e-9, "Pearson kurtosis = 96.0597")
  t.near(r.avg_max_inf_norm, 100, 0, "max inf norm = 100")
  t.near(r.avg_median, 0, 0, "median |x| = 0")
  t.ok(r.avg_topk[1] == 100 and r.avg_topk[2] == 0 and r.avg_topk[3] == 0, "top-3 = 100, 0, 0")
  local top = r.top[1]
  t.ok(top.abs == 100 and top.pos == 3 and top.channel == 7 and top.seq == 0 and top.token == -1,
       "global top-1 record names (seq 0, pos 3, channel 7)")
  -- τ·mean: mean|x| = 1; τ = 50 flags 100 > 50; τ = 100 does not (100 > 100 is false)
  local s50 = analysis.Stats{ T = 10, C = 10, rule = { kind = "tau_mean", tau = 50, scope = "sequence" } }
  s50:update(x)
  t.is(s50:result().outliers.elements, 1, "τ·mean, τ = 50: one outlier")
  local s100 = analysis.Stats{ T = 10, C = 10, rule = { kind = "tau_mean", tau = 100, scope = "sequence" } }
  s100:update(x)
  t.is(s100:result().outliers.elements, 0, "τ·mean, τ = 100: strict >, none")
  -- 7σ = 70 < 99 still flags; 10σ = 100 > 99 does not
  local s10 = analysis.Stats{ T = 10, C = 10, rule = { kind = "sigma", k = 10 } }
  s10:update(x)
  t.is(s10:result().outliers.elements, 0, "10σ: none")
  -- per-token flags: token 3 only
  local flags, n, mx = analysis.token_outliers(x, analysis.QT_6SIGMA)
  t.is(n, 1, "token_outliers: one token")
  t.ok(flags[4] == 1 and flags[1] == 0 and mx[4] == 100, "token_outliers: token 3, max |x| 100")
end

-- ------------------------------------------------------------------ 2. kurtosis, inf norm, median, top-k
-- x (2, 2, 2): seq 0 = {1, 2, 3, 4}, seq 1 = {0, 0, 0, 4}.
-- seq 0: mean 2.5, Σd² = 5, s² = 5/3, Σd⁴ = 10.25, kurt = (10.25/4)/(25/9) = 0.9225
-- seq 1: mean 1,   Σd² = 12, s² = 4,  Σd⁴ = 84,    kurt = 21/16 = 1.3125; average 1.1175
-- max inf norm: 4, 4 -> 4. median |x|: 2.5, 0 -> 1.25. top-2: {4,3}, {4,0} -> {4, 1.5}
do
  local x = T3({ 1, 2, 3, 4, 0, 0, 0, 4 }, 2, 2, 2)
  local s = analysis.Stats{ T = 2, C = 2, topk = 2 }
  s:update(x)
  local r = s:result()
  t.near(r.avg_kurtosis, 1.1175, 1e-12, "avg kurtosis = (0.9225 + 1.3125)/2")
  t.near(r.avg_max_inf_norm, 4, 0, "avg max inf norm = 4")
  t.near(r.avg_median, 1.25, 0, "avg median |x| = (2.5 + 0)/2")
  t.ok(r.avg_topk[1] == 4 and r.avg_topk[2] == 1.5, "avg top-2 = {4, 1.5}")
  t.near(r.mean, 14 / 8, 1e-15, "dataset mean = 14/8")
  t.is(r.nseq, 2, "two sequences")
  -- a padding mask dropping seq 1's token 0 ({0,0}) leaves {0, 4}: median 2, kurtosis
  -- mean 2, Σd² = 8, s² = 8, Σd⁴ = 32, (32/2)/64 = 0.25
  local mask = I2({ 1, 1, 0, 1 }, 2, 2)
  local sm = analysis.Stats{ T = 2, C = 2, topk = 2 }
  sm:update(x, nil, mask)
  local rm = sm:result()
  t.near(rm.avg_kurtosis, (0.9225 + 0.25) / 2, 1e-12, "mask: padding excluded from kurtosis")
  t.near(rm.avg_median, (2.5 + 2) / 2, 0, "mask: padding excluded from the median")
  t.is(rm.ntok, 3, "mask: three real tokens")
  t.is(rm.tokens_by_position[1], 1, "mask: one real token at position 0")
end

-- ------------------------------------------------------------------ 2b. the official codes' conventions
-- QT's code: κ = μ₄/(s⁴ + 1e-6); torch.median (SO's code): the lower middle value.
-- x (2, 2, 2) as in 2: seq 0 {1,2,3,4}: μ₄ = 10.25/4 = 2.5625, s⁴ = 25/9 -> 2.5625/(25/9 + 1e-6)
-- = 0.92249967; seq 1 {0,0,0,4}: 21/(16 + 1e-6) = 1.31249992; average 1.11749979.
-- Lower median |x|: seq 0 {1,2,3,4} -> 2 (numpy 2.5), seq 1 -> 0: average 1 (numpy 1.25).
-- Scaled by 1/128 (exact in fp32; σ ≈ 0.01) the eps dominates: seq 0 gives
-- 2.5625/(25/9 + 1e-6·2^28) = 0.00944829 (Pearson still 0.9225). A constant sequence
-- {2,2,2,2}: no Pearson kurtosis (s = 0, skipped); QT's code gives 0/(0 + 1e-6) = 0 and counts it.
do
  local x = T3({ 1, 2, 3, 4, 0, 0, 0, 4 }, 2, 2, 2)
  local s = analysis.Stats{ T = 2, C = 2, kurtosis = "qt_code", median = "lower" }
  s:update(x)
  local r = s:result()
  t.near(r.avg_kurtosis_qt_code, (2.5625 / (25 / 9 + 1e-6) + 21 / (16 + 1e-6)) / 2, 1e-12, "QT code kurtosis = 1.11749979")
  t.near(r.avg_kurtosis_pearson, 1.1175, 1e-12, "the Pearson form is reported beside it")
  t.ok(r.avg_kurtosis == r.avg_kurtosis_qt_code and r.kurtosis_form == "qt_code", "kurtosis = qt_code: avg_kurtosis is QT's form")
  t.is(r.avg_median_lower, 1, "lower median |x| = (2 + 0)/2")
  t.is(r.avg_median_mean, 1.25, "numpy median |x| = (2.5 + 0)/2 beside it")
  t.ok(r.avg_median == 1 and r.median_form == "lower", "median = lower: avg_median is the lower middle")
  local d = analysis.Stats{ T = 2, C = 2 }:update(x):result()
  t.ok(d.avg_kurtosis == d.avg_kurtosis_pearson and d.avg_median == 1.25 and d.kurtosis_form == "pearson" and
       d.median_form == "mean", "defaults: Pearson kurtosis and numpy median")
  -- odd count: both medians are the middle value; mask {1,1,0,1} leaves seq 1 = {0, 4}: lower 0
  local m = analysis.Stats{ T = 2, C = 2, median = "lower" }:update(x, nil, I2({ 1, 1, 0, 1 }, 2, 2)):result()
  t.ok(m.avg_median_lower == 1 and m.avg_median_mean == 2.25, "mask: lower median (2 + 0)/2, numpy (2.5 + 2)/2")
  local o = analysis.Stats{ T = 3, C = 1, median = "lower" }:update(T3({ 5, -1, 3 }, 1, 3, 1)):result()
  t.ok(o.avg_median_lower == 3 and o.avg_median_mean == 3, "odd count: both medians are the middle value 3")
  -- small σ: the eps dominates
  local small = analysis.Stats{ T = 2, C = 2 }:update(T3({ 1 / 128, 2 / 128, 3 / 128, 4 / 128 }, 1, 2, 2)):result()
  t.near(small.avg_kurtosis_qt_code, 2.5625 / (25 / 9 + 1e-6 * 2 ^ 28), 1e-12, "σ ≈ 0.01: QT's form = 0.00944829")
  t.near(small.avg_kurtosis_pearson, 0.9225, 1e-12, "σ ≈ 0.01: the Pearson form is scale-free (0.9225)")
  -- constant sequence
  local c = analysis.Stats{ T = 2, C = 2 }:update(T3({ 1, 2, 3, 4, 2, 2, 2, 2 }, 2, 2, 2)):result()
  t.near(c.avg_kurtosis_pearson, 0.9225, 1e-12, "constant sequence: skipped by the Pearson form")
  t.near(c.avg_kurtosis_qt_code, 2.5625 / (25 / 9 + 1e-6) / 2, 1e-12, "constant sequence: QT's form counts it as 0")
  t.is(c.nseq_kurtosis, 1, "nseq_kurtosis counts the sequences of the reported form")
  -- the Lua references
  t.near(analysis.ref.kurtosis({ 1, 2, 3, 4 }, 1e-6), 2.5625 / (25 / 9 + 1e-6), 1e-15, "ref.kurtosis(xs, 1e-6) = QT's form")
  t.is(analysis.ref.median_abs({ 1, -2, 3, 4 }, true), 2, "ref.median_abs(xs, true) = lower middle")
  t.throws(function() analysis.Stats{ T = 2, C = 2, kurtosis = "excess" } end, "kurtosis must be one of pearson, qt_code",
    "an unknown kurtosis form lists the valid ones")
  t.throws(function() analysis.Stats{ T = 2, C = 2, median = "upper" } end, "median must be one of lower, mean",
    "an unknown median form lists the valid ones")
end

-- ------------------------------------------------------------------ 3. by token and category
-- x (1, 4, 2) with ids {5, 1, 2, 5}: token 0 (id 5) and token 3 (id 5) carry one 1000 each,
-- token 1 (id 1) two 1000s; everything else 1. mean|x| = (4·1000 + 4)/8 = 500.5;
-- τ = 1.5 -> lim 750.75: 4 outlier elements, 3 outlier tokens.
do
  local x = T3({ 1000, 1, 1000, 1000, 1, 1, 1, 1000 }, 1, 4, 2)
  local ids = I2({ 5, 1, 2, 5 }, 1, 4)
  local cat = function(id) return id == 5 and "initial" or id == 1 and "delimiter" or id == 2 and "weak" or "other" end
  local s = analysis.Stats{ T = 4, C = 2, V = 8, rule = { kind = "tau_mean", tau = 1.5, scope = "batch" }, category = cat }
  s:update(x, ids)
  local r = s:result()
  local o = r.outliers
  t.is(o.elements, 4, "by token: 4 outlier elements")
  t.is(o.tokens, 3, "by token: 3 outlier tokens")
  t.ok(o.by_token[5] == 2 and o.by_token[1] == 2 and o.by_token[2] == nil, "by token id: 5 -> 2, 1 -> 2")
  t.ok(o.tokens_by_token[5] == 2 and o.tokens_by_token[1] == 1, "outlier tokens by id: 5 -> 2, 1 -> 1")
  t.ok(o.by_category.initial == 2 and o.by_category.delimiter == 2 and o.by_category.weak == 0,
       "by category: initial 2, delimiter 2, weak 0")
  t.ok(r.tokens_by_category.initial == 2 and r.tokens_by_category.weak == 1, "token occurrences by category")
  t.ok(o.by_channel[1] == 2 and o.by_channel[2] == 2, "by channel: 2 and 2")
  t.throws(function() s:update(x, I2({ 5, 1, 9, 5 }, 1, 4)) end, "token id 9", "id outside [0, V) is an error")
end

-- ------------------------------------------------------------------ 4. histogram
-- values {-2, -0.5, 0, 0.5, 1, 3} with 4 bins over [-2, 2): edges -2,-1,0,1,2
-- bins: [-2,-1): -2; [-1,0): -0.5; [0,1): 0, 0.5; [1,2): 1; overflow: 3
-- log bins of |x| over [0.1, 10) with 2 bins (edges 0.1, 1, 10): under: 0; [0.1,1): 0.5, 0.5;
-- [1,10): 2, 1, 3
do
  local x = T3({ -2, -0.5, 0, 0.5, 1, 3 }, 1, 3, 2)
  local s = analysis.Stats{ T = 3, C = 2, bins = 4, lo = -2, hi = 2 }
  s:update(x)
  local h = s:result().hist
  t.ok(h.under == 0 and h.over == 1 and h.counts[1] == 1 and h.counts[2] == 1 and h.counts[3] == 2 and h.counts[4] == 1,
       "linear histogram counts")
  t.ok(h.edges[1] == -2 and h.edges[5] == 2, "linear histogram edges")
  local sl = analysis.Stats{ T = 3, C = 2, bins = 2, lo = 0.1, hi = 10, log = true }
  sl:update(x)
  local hl = sl:result().hist
  t.ok(hl.under == 1 and hl.counts[1] == 2 and hl.counts[2] == 3 and hl.over == 0, "log histogram counts")
  t.near(hl.edges[2], 1, 1e-12, "log histogram middle edge = 1")
end

-- ------------------------------------------------------------------ 5. merge and streaming
-- Random data with planted large values; rule with sequence scope so thresholds do not depend
-- on how sequences are grouped into batches.
do
  local B, T, C = 6, 5, 8
  local big = ctx:tensor({ B, T, C }):normal_(0, 1, 77)
  for i = 0, B - 1 do big:set(40 + 3 * i, i, (i + 2) % T, (3 * i) % C) end
  big:set(-55, 2, 0, 1)
  local ids = ctx:tensor({ B, T }, { dtype = "i32" })
  for i = 0, B * T - 1 do ids.idata[i] = (i * 7) % 11 end
  local spec = { T = T, C = C, V = 11, topk = 4, bins = 10, lo = 0.01, hi = 100, log = true,
                 rule = { kind = "sigma", k = 3, scope = "sequence" } }
  local one = analysis.Stats(spec):update(big, ids)
  -- streaming: batches of 2 sequences
  local stream = analysis.Stats(spec)
  for b0 = 0, B - 1, 2 do stream:update(big:narrow(0, b0, 2), ids:narrow(0, b0, 2)) end
  local same = true
  for i = 0, one:size() - 1 do if one.d[i] ~= stream.d[i] then same = false end end
  t.ok(same, "streaming over 3 batches == one batch (every state entry bit-identical)")
  -- merge: A over sequences 0..3, B over 4..5 (its sequence index offset at 4)
  local a = analysis.Stats(spec):update(big:narrow(0, 0, 4), ids:narrow(0, 0, 4))
  local b = analysis.Stats(spec):set_seq_offset(4):update(big:narrow(0, 4, 2), ids:narrow(0, 4, 2))
  a:merge(b)
  local sec = one:sections()
  local worst, exact_ok = 0, true
  for i = 0, sec.sum[2] - 1 do
    local u, m = one.d[i], a.d[i]
    if u ~= m then worst = math.max(worst, rel(m, u)) end
  end
  for i = sec.max[1], one:size() - 1 do if one.d[i] ~= a.d[i] then exact_ok = false end end
  t.ok(worst <= 1e-12, "merge: sums equal the union to 1e-12 relative", "worst " .. worst)
  local counts_ok = true
  local L = one.L
  for _, f in ipairs({ "n", "nseq", "ntok", "nout", "nout_tok" }) do if one.d[L[f]] ~= a.d[L[f]] then counts_ok = false end end
  for i = 0, T - 1 do if one.d[L.out_pos + i] ~= a.d[L.out_pos + i] then counts_ok = false end end
  for i = 0, C - 1 do if one.d[L.out_ch + i] ~= a.d[L.out_ch + i] then counts_ok = false end end
  for i = 0, 11 do if one.d[L.hist + i] ~= a.d[L.hist + i] then counts_ok = false end end
  t.ok(counts_ok, "merge: counts and histogram exact")
  t.ok(exact_ok, "merge: maxima and top-k (with indices) exact")
  local r = one:result()
  t.ok(r.top[1].abs == 55 and r.top[1].seq == 2 and r.top[1].pos == 0 and r.top[1].channel == 1 and r.top[1].value == -55,
       "global top-1 is the planted -55 at (seq 2, pos 0, channel 1)")
  t.is(r.top[2].abs, 55, "global top-2 is the planted 55 (seq 5)")
  t.is(r.top[2].seq, 5, "global top-2 at seq 5")
  -- slow reference for the per-sequence metrics
  local ks, kq, ms, ml, tops = 0, 0, 0, 0, { 0, 0, 0, 0 }
  for bb = 0, B - 1 do
    local xs = {}
    for j = 0, T * C - 1 do xs[#xs + 1] = big.data[bb * T * C + j] end
    ks = ks + analysis.ref.kurtosis(xs)
    kq = kq + analysis.ref.kurtosis(xs, 1e-6)
    ms = ms + analysis.ref.median_abs(xs)
    ml = ml + analysis.ref.median_abs(xs, true)
    local tk = analysis.ref.topk_abs(xs, 4)
    for i = 1, 4 do tops[i] = tops[i] + tk[i] end
  end
  t.ok(rel(r.avg_kurtosis, ks / B) < 1e-12, "kurtosis matches the Lua reference", r.avg_kurtosis .. " vs " .. ks / B)
  t.ok(rel(r.avg_median, ms / B) < 1e-7, "median matches the Lua reference")
  t.ok(rel(r.avg_kurtosis_qt_code, kq / B) < 1e-12, "QT-code kurtosis matches the Lua reference")
  t.ok(rel(r.avg_median_lower, ml / B) < 1e-7, "lower median matches the Lua reference")
  t.ok(rel(r.avg_topk[3], tops[3] / B) < 1e-7, "top-3rd matches the Lua reference")
  -- two-pass dataset-level rule: μ, σ from a first pass, then fixed in the second
  local first = analysis.Stats{ T = T, C = C }:update(big)
  local rule = analysis.dataset_rule(first, { kind = "sigma", k = 6 })
  local fr = first:result()
  t.ok(rule.scope == "fixed" and rule.mu == fr.mean and rule.sigma == fr.std, "dataset_rule carries μ, σ of the first pass")
  local second = analysis.Stats{ T = T, C = C, rule = rule }
  for b0 = 0, B - 1, 3 do second:update(big:narrow(0, b0, 3)) end
  local want = 0
  for i = 0, B * T * C - 1 do if math.abs(big.data[i] - fr.mean) > 6 * fr.std then want = want + 1 end end
  t.is(second:result().outliers.elements, want, "two-pass 6σ count equals a direct count with dataset μ, σ")
  -- thread count does not change anything
  ol.set_num_threads(1)
  local one1 = analysis.Stats(spec):update(big, ids)
  ol.set_num_threads(0)
  local same1 = true
  for i = 0, one:size() - 1 do if one.d[i] ~= one1.d[i] then same1 = false end end
  t.ok(same1, "1 thread and all threads give bit-identical state")
end

-- a tensor large enough for the threaded path (B·T·C > OL_PAR_MIN): 1 thread == all threads
do
  local B, T, C = 8, 64, 128
  local x = ctx:tensor({ B, T, C }):normal_(0, 1, 5)
  x:set(90, 3, 10, 17)
  local spec = { T = T, C = C, topk = 3, rule = analysis.QT_6SIGMA }
  ol.set_num_threads(1)
  local s1 = analysis.Stats(spec):update(x)
  ol.set_num_threads(0)
  local s2 = analysis.Stats(spec):update(x)
  local same = true
  for i = 0, s1:size() - 1 do if s1.d[i] ~= s2.d[i] then same = false end end
  t.ok(same, "threaded path (B·T·C = 65536): 1 thread and " .. ol.num_threads() .. " threads bit-identical")
  local r = s2:result()
  t.ok(r.top[1].abs == 90 and r.outliers.by_channel[18] >= 1, "threaded path: planted 90 found at channel 17")
end

-- ------------------------------------------------------------------ 6. weights (SO Fig. 5)
-- W (2, 3) = [[1, 2, 3], [4, 0, -8]]
-- columns: max/mean = 4/2.5 = 1.6, 2/1 = 2, 8/5.5; rows: 3/2 = 1.5, 8/4 = 2
-- weight outliers with τ = 1.5 (row means 2 and 4): row 0 lim 3 (|3| > 3 false), row 1 lim 6: -8
do
  local W = ctx:tensor({ 2, 3 }):load({ 1, 2, 3, 4, 0, -8 })
  local w = analysis.weight_stats(W, { tau = 1.5 })
  t.ok(rel(w.col_ratio[1], 1.6) < 1e-15 and w.col_ratio[2] == 2 and rel(w.col_ratio[3], 8 / 5.5) < 1e-15,
       "column extremal ratios 1.6, 2, 8/5.5")
  t.ok(w.row_ratio[1] == 1.5 and w.row_ratio[2] == 2, "row extremal ratios 1.5, 2")
  t.ok(w.extremal_ratio == 2 and w.extremal_col == 1, "module extremal ratio = 2 at column 1")
  t.ok(w.n_outliers == 1 and w.outlier_cols[1] == 2 and w.outlier_rows[1] == 1 and #w.outlier_cols == 1,
       "one weight outlier at (row 1, column 2)")
end

-- ------------------------------------------------------------------ 7. attention (SO Fig. 6)
-- A (1, 2, 3, 3): head 0 rows {1,0,0}, {.5,.5,0}, {.8,.1,.1} -> Â = {2.3, 0.6, 0.1}
--                 head 1 rows {1,0,0}, {0,1,0},   {.2,.7,.1} -> Â = {1.2, 1.7, 0.1}
-- mean Â = 1 in both heads. τ = 1.5: head 0 -> key 0, head 1 -> key 1.
-- code rule (head-averaged Â = {1.75, 1.15, 0.1} ≥ 0.1·3): keys 0, 1.
-- top-2 over keys and heads {2.3, 1.7}; median of {.1,.1,.6,1.2,1.7,2.3} = 0.9
local A = ctx:tensor({ 1, 2, 3, 3 }):load({ 1, 0, 0, .5, .5, 0, .8, .1, .1, 1, 0, 0, 0, 1, 0, .2, .7, .1 })
do
  local cum = analysis.cumulative_attention(A)
  t.ok(math.abs(cum.at(0, 0, 0) - 2.3) < 1e-7 and math.abs(cum.at(0, 1, 1) - 1.7) < 1e-7, "cumulative attention Â")
  local keys = analysis.attention_outlier_keys({ 2.3, 0.6, 0.1 }, { rule = "tau_mean", tau = 1.5 })
  t.ok(#keys == 1 and keys[1] == 0, "τ·mean rule: key 0")
  local ck = analysis.attention_outlier_keys({ 2.3, 0.6, 0.1 }, { rule = "code", T = 3 })
  t.ok(#ck == 2 and ck[1] == 0 and ck[2] == 1, "code rule Â ≥ 0.1·T: keys 0, 1")
  local ids = I2({ 7, 3, 4 }, 1, 3)
  local cat = function(id) return id == 7 and "initial" or id == 3 and "weak" or "other" end
  local st = analysis.AttnStats{ rule = "tau_mean", tau = 1.5, topk = 2, category = cat }
  st:update(A, ids)
  local r = st:result()
  t.ok(math.abs(r.avg_topk[1] - 2.3) < 1e-7 and math.abs(r.avg_topk[2] - 1.7) < 1e-7, "attention top-2 = 2.3, 1.7")
  t.ok(math.abs(r.avg_median - 0.9) < 1e-7, "attention median = 0.9")
  t.ok(math.abs(r.avg_median_lower - 0.6) < 1e-7, "attention lower median = 0.6 (of .1,.1,.6,1.2,1.7,2.3)")
  t.ok(math.abs(analysis.AttnStats{ tau = 1.5, median = "lower" }:update(A, ids):result().avg_median - 0.6) < 1e-7,
       "AttnStats median = lower: avg_median = 0.6")
  t.ok(r.per_head[1].count == 1 and math.abs(r.per_head[1].score_mean - 2.3) < 1e-7 and r.per_head[2].count == 1,
       "per head: one outlier each, head 0 score 2.3")
  t.ok(r.by_position[0] == 1 and r.by_position[1] == 1 and r.by_category.initial == 1 and r.by_category.weak == 1,
       "outlier keys by position and category")
  t.ok(r.code.count == 2 and r.code.by_category.initial == 1 and r.code.by_category.weak == 1, "code rule counts")
  -- merge of two accumulators (the same tensor twice) equals one accumulator fed twice
  local m1 = analysis.AttnStats{ rule = "tau_mean", tau = 1.5, topk = 2, category = cat }:update(A, ids)
  local m2 = analysis.AttnStats{ rule = "tau_mean", tau = 1.5, topk = 2, category = cat }:update(A, ids)
  local both = analysis.AttnStats{ rule = "tau_mean", tau = 1.5, topk = 2, category = cat }:update(A, ids):update(A, ids)
  local rm, rb = m1:merge(m2):result(), both:result()
  t.ok(rm.nseq == 2 and rm.count == rb.count and rm.count == 4 and rm.avg_median == rb.avg_median and
       rm.per_head[1].score_max == rb.per_head[1].score_max and rm.code.count == rb.code.count and
       rm.by_position[0] == 2, "AttnStats merge equals one accumulator over both")
  -- query mask: drop query 2 -> head 0 Â = {1.5, 0.5, 0}
  local cm = analysis.cumulative_attention(A, I2({ 1, 1, 0 }, 1, 3))
  t.ok(math.abs(cm.at(0, 0, 0) - 1.5) < 1e-7 and cm.at(0, 0, 2) == 0, "query mask excluded from Â")
end

-- ------------------------------------------------------------------ 8. overlap (SO Table 1)
-- h (1, 3, 4): token 0 channel 0 = 100, the rest 1: mean|h| = 111/12 = 9.25; τ = 10 -> 92.5:
-- O_act = {0}. With A above (τ = 1.5): head 0 {0} -> 1, head 1 {1} -> 0: overlap 0.5.
do
  t.is(analysis.overlap({ 0 }, { { 0 }, { 1 } }), 0.5, "overlap({0}; {0}, {1}) = 0.5")
  t.is(analysis.overlap({ 0, 1 }, { { 0 }, { 1 } }), 0.5, "overlap({0,1}; {0}, {1}) = 0.5")
  t.is(analysis.overlap({}, { { 0 } }), nil, "overlap with no activation outliers is undefined")
  local h = T3({ 100, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 }, 1, 3, 4)
  local ov = analysis.Overlap{ act_rule = { kind = "tau_mean", tau = 10, scope = "sequence" },
                               att = { rule = "tau_mean", tau = 1.5 } }
  ov:probe_attn(A, 2, {})
  ov:probe_act(h, 2, {})
  ov:end_batch()
  local r = ov:result()
  t.ok(r.overall == 0.5 and r.n == 2 and r.by_layer[2].mean == 0.5, "streaming overlap = 0.5 over 2 heads")
  local c1, c2 = analysis.feature_consistency({ 3, 7, 9 }, { 7, 3 })
  t.ok(c1 == 1 and math.abs(c2 - 2 / 3) < 1e-15, "feature consistency: all activation dims are weight dims")
end

-- ------------------------------------------------------------------ 9. value magnitudes (QT Fig. 3e)
-- v (1, 1, 3, 2): ‖(3,4)‖ = 5, ‖(0,1)‖ = 1, ‖(6,8)‖ = 10; token 0 is the outlier:
-- outlier mean 5, other mean (1 + 10)/2 = 5.5
do
  local v = ctx:tensor({ 1, 1, 3, 2 }):load({ 3, 4, 0, 1, 6, 8 })
  local r = analysis.value_magnitudes(v, { 1, 0, 0 })
  t.ok(r.outlier == 5 and r.other == 5.5 and r.n_outlier == 1 and r.n_other == 2, "value norms: 5 vs 5.5")
end

-- ------------------------------------------------------------------ 10. errors
do
  local s = analysis.Stats{ T = 4, C = 3 }
  t.throws(function() s:update(ctx:tensor({ 1, 2, 5 })) end, "C = 5 channels", "channel mismatch names C")
  t.throws(function() s:update(ctx:tensor({ 1, 6, 3 })) end, "T = 6 positions", "too many positions named")
  t.throws(function() analysis.Stats{ T = 4, C = 3, rule = { kind = "zigma" } } end, "kind must be", "unknown rule kind")
  t.throws(function() analysis.Stats{ T = 4, C = 3, Cx = 1 } end, "unknown key 'Cx'", "unknown spec key")
  t.throws(function() analysis.Stats{ T = 4, C = 3, bins = 4, lo = 0, hi = 1, log = true } end, "lo > 0",
           "log histogram with lo = 0")
  t.throws(function() s:merge(analysis.Stats{ T = 4, C = 2 }) end, "different specs", "merging different specs")
  t.throws(function() s:update(ctx:tensor({ 1, 2, 3 }), I2({ 1, 2, 3 }, 1, 3)) end, "B·T = 2", "ids of the wrong size")
end

-- ------------------------------------------------------------------ 11. summaries (QT tables)
do
  local sm = analysis.summarize{ { avg_max_inf_norm = 3, avg_kurtosis = 2 }, { avg_max_inf_norm = 7, avg_kurtosis = 4 } }
  t.ok(sm.max_inf_norm == 7 and sm.avg_kurtosis == 3, "max inf norm = max over tensors; avg kurtosis = mean")
  local two = { { avg_max_inf_norm = 3, avg_kurtosis = 2, avg_kurtosis_pearson = 2, avg_kurtosis_qt_code = 1 },
                { avg_max_inf_norm = 7, avg_kurtosis = 4, avg_kurtosis_pearson = 4, avg_kurtosis_qt_code = 2 } }
  local sq = analysis.summarize(two, { kurtosis = "qt_code" })
  t.ok(sq.avg_kurtosis == 1.5 and sq.avg_kurtosis_pearson == 3 and sq.avg_kurtosis_qt_code == 1.5,
       "summarize(list, {kurtosis = qt_code}): mean of QT's form, both forms returned")
  t.throws(function() analysis.summarize(two, { kurtosis = "nope" }) end, "kurtosis must be one of", "summarize: unknown form")
end

-- ---------------------------------------------------------------- binomial tail (hand cases)
do
  local bt = analysis.binomial_tail
  local function near(a, b) return math.abs(a - b) <= 1e-12 * math.max(1, math.abs(b)) end
  t.ok(near(bt(2, 2, 0.958), 0.958 ^ 2), "binomial_tail(2, 2, 0.958) = 0.958² = 0.917764")
  t.ok(near(bt(10, 3, 0.5), 968 / 1024), "binomial_tail(10, 3, 0.5) = 1 − (1 + 10 + 45)/1024")
  t.ok(near(bt(5, 5, 0.2), 0.00032), "binomial_tail(5, 5, 0.2) = 0.2⁵")
  t.ok(near(bt(20, 7, 0.3), 0.39199018779908), "binomial_tail(20, 7, 0.3) (upper sum)")
  t.ok(near(bt(20, 3, 0.3), 1 - (0.7 ^ 20 + 20 * 0.3 * 0.7 ^ 19 + 190 * 0.09 * 0.7 ^ 18)), "binomial_tail(20, 3, 0.3) = 1 − P(X ≤ 2) (lower sum)")
  t.is(bt(4, 0, 0.3), 1, "k = 0: 1")
  t.is(bt(4, 5, 0.3), 0, "k > n: 0")
  t.ok(math.abs(bt(3907, 3907, 0.972) / 0.972 ^ 3907 - 1) < 1e-9, "binomial_tail(3907, 3907, 0.972) = 0.972^3907 ≈ 6.5e-49 (no underflow in the sum)")
  t.is(bt(100000, 10, 0.5), 1, "n = 100,000, k far below the mean: 1 (no overflow)")
  t.throws(function() bt(10, 2.5, 0.5) end, "n and k must be integers", "binomial_tail: a fractional k is an error")
  t.throws(function() bt(10, 2, 1.5) end, "p must be in [0, 1]", "binomial_tail: p outside [0, 1] is an error")
end

-- ---------------------------------------------------------------- the ViT verdicts' margins
do
  local th = require "outlierlab.judge.thresholds"
  local base = { n = 100, background = { share = 1, p = 0.9 }, border = { share = 0.9, p = 0.75 }, head = "layer 3 head 1",
                 enrichment = 3, value_ratio = 0.4, inf = { peak_layer = 3, n_layers = 4, peak = 150, first_half_max = 60 } }
  local function with(k, v) local o = {} for a, b in pairs(base) do o[a] = b end o[k] = v return o end
  local cs, holds = th.vit_checks(base)
  t.is(holds, true, "vit_checks: 100 outlier patches all at background (P = 0.9¹⁰⁰), enrichment 3, values 0.4, inf ×2.5: holds")
  t.is(#cs, 6, "vit_checks: six checks with the border ring and the inf norm")
  local _, h2 = th.vit_checks(with("n", 2))
  t.is(h2, nil, "vit_checks: 2 outlier patches: inconclusive")
  local _, h3 = th.vit_checks(with("enrichment", 1.5))
  t.is(h3, false, "vit_checks: enrichment 1.5 < 2: does not hold")
  local _, h4 = th.vit_checks(with("value_ratio", 0.67))
  t.is(h4, false, "vit_checks: values 0.67 of the others > 0.5: does not hold")
  local _, h5 = th.vit_checks(with("background", { share = 0.92, p = 0.9 }))
  t.is(h5, false, "vit_checks: 92 of 100 at background against 0.9 (P ≈ 0.32): not beyond chance")
  local _, h6 = th.vit_checks(with("inf", { peak_layer = 3, n_layers = 4, peak = 80, first_half_max = 60 }))
  t.is(h6, false, "vit_checks: inf norm ×1.33 over the first half: no rise")
  local _, h7 = th.vit_checks(with("border", nil))
  t.is(h7, true, "vit_checks: without a border set (qt-fig16) the other checks decide")
  local l1 = th.vit_lines(cs)
  t.is(#l1, 6, "vit_lines: one line per check")
  t.ok(l1[4]:find("^%- layer 3 head 1 attention enrichment on outlier patches 3%.000 ≥ 2: yes$"), "vit_lines: '- <check>: yes'", l1[4])
  local l2 = th.vit_lines((th.vit_checks(with("n", 2))))
  t.ok(l2[1]:find(": %*%*no%*%*$") and l2[2]:find(": not testable %(too few outlier patches%)$"),
    "vit_lines: too few outlier patches: '**no**', then 'not testable'", l2[1] .. " / " .. l2[2])
end

-- sigma_limit: the batch-scope 6σ numbers by hand. x = 1, 2, 3, 4, 10: μ = 4, Σ(x − μ)² = 9 + 4 +
-- 1 + 0 + 36 = 50, unbiased σ² = 50 / 4 = 12.5, so 6σ = 6 · √12.5 = 21.2132034...
do
  local analysis = require "outlierlab.measure.metrics"
  local ctx = ol.Context{ seed = 1 }
  local x = ctx:tensor({ 5 }, { persistent = true })
  for i, v in ipairs { 1, 2, 3, 4, 10 } do x.data[i - 1] = v end
  local mu, lim = analysis.sigma_limit(x, 6)
  t.near(mu, 4, 1e-12, "sigma_limit: the mean")
  t.near(lim, 6 * math.sqrt(12.5), 1e-12, "sigma_limit: 6 × the unbiased sd")
  local mu3, lim3 = analysis.sigma_limit(x.data, 2, 4)   -- the first 4: μ 2.5, σ² = 5/3
  t.ok(mu3 == 2.5 and math.abs(lim3 - 2 * math.sqrt(5 / 3)) < 1e-12, "sigma_limit: a data pointer, n and k", mu3 .. " " .. lim3)
  t.throws(function() analysis.sigma_limit(x.data, 6, 1) end, "at least 2 elements", "sigma_limit: one element is an error")
end

-- images.rgb: the loader's normalisation (x − 0.5) / 0.25 undone and clamped, by hand: a 1×1
-- image with channels 0 (grey 0.5 -> 128), 2 (1.0 -> 255) and -3 (-0.25, clamped -> 0)
do
  local images = require "outlierlab.data.images"
  local ctx = ol.Context{ seed = 1 }
  local img = ctx:tensor({ 2, 3, 1, 1 }, { persistent = true })
  for i, v in ipairs { 9, 9, 9, 0, 2, -3 } do img.data[i - 1] = v end
  local px = images.rgb(img, 1, 1)
  t.is(#px, 1, "rgb: one pixel")
  t.is(table.concat(px[1], " "), "0 0 128 255 0", "rgb: x, y, then r g b of image 1 (grey, clamped above and below)")
end

return t.done()
