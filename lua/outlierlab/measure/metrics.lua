-- analysis — every outlier metric of docs/reference/metrics.md, on top of the C kernels of
-- engine/analysis.c. Definitions, choices and the figures that use each metric:
-- docs/reference/metrics.md. All indices in results are 0-based (positions, channels, heads, token
-- ids, layers), as in the engine and the NetCDF files.
--
-- API (for the experiment files)
-- ------------------------------
-- Rules (which elements are outliers):
--   analysis.rule{ kind = "sigma"|"tau_mean"|"none", k = 6 (sigma) | tau = 1000 (tau_mean),
--                  scope = "batch"|"sequence"|"fixed", mu =, sigma =, mean_abs = }
--     sigma:    |x − μ| > k·σ (QT, 6σ; σ unbiased);  tau_mean: |x| > τ·mean|x| (SO §3).
--     scope:    batch = μ, σ (or mean|x|) over the whole tensor of one update (B·T·C);
--               sequence = over each sequence's T·C values (SO: one sample at a time);
--               fixed = given numbers (dataset level, from a first pass: analysis.dataset_rule).
--   analysis.QT_6SIGMA (batch scope) and analysis.SO_TAU (sequence scope, τ = 1000) are presets.
--
-- Streaming accumulator over activations x (B, T, C) (state: one flat double array):
--   local s = analysis.Stats{ T =, C =, V = 0, topk = 3, bins = 0, lo =, hi =, log = false,
--                             rule = {...}, category = fn(id) or nil,
--                             kurtosis = "pearson"|"qt_code", median = "mean"|"lower" }
--     kurtosis, median: which convention avg_kurtosis / avg_median report (both are always
--     computed): "pearson" μ₄/s⁴ (default) or "qt_code" μ₄/(s⁴ + 1e-6) (QT's code); "mean" of
--     the two middle values (default, numpy) or the "lower" one (torch.median, SO's code)
--   s:update(x, ids, mask)        -- ids, mask: int32 (B, T) tensors or nil (mask 0 = padding)
--   s:update_batch(x, batch)      -- ids = batch.ids, mask = batch.pad_mask (batch.seq_offset:
--                                 -- global index of its first sequence, for MPI-spread batches)
--   s:merge(other)                -- exact: sums added, maxima maxed, top-k merged
--   s:reset(); s:set_seq_offset(n); s:clone_empty()
--   s:data(), s:size(), s:sections() -- raw state for MPI: {sum = {off, len}, max = {...}, topk = {...}}
--   s:result() -> { n, nseq, ntok, mean, var, std, mean_abs, max_abs,
--                   avg_kurtosis, avg_max_inf_norm, avg_median, avg_topk = {k values},
--                   avg_kurtosis_pearson, avg_kurtosis_qt_code, kurtosis_form,
--                   avg_median_mean, avg_median_lower, median_form,
--                   outliers = { elements, tokens, sequences, by_position = {T}, tokens_by_position,
--                                by_channel = {C}, by_token = {[id] = n}, tokens_by_token,
--                                by_category = {initial=, delimiter=, weak=, other=},
--                                tokens_by_category },
--                   tokens_by_position = {T}, tokens_by_token = {[id] = n},
--                   mean_abs_by_channel = {C}, max_abs_by_channel = {C}, max_abs_by_position = {T},
--                   hist = { edges = {nbins+1}, counts = {nbins}, under =, over =, log = },
--                   top = { {abs=, value=, seq=, pos=, channel=, token=}, ... } }
--   analysis.dataset_rule(first_pass_stats, {kind = "sigma", k = 6}) -> fixed-scope rule
--   analysis.LayerStats(spec) -- one Stats per layer, created on first use:
--     L:probe(tensor, layer, batch); L:result() -> { layers = {0, 1, ...}, [layer] = result }
--     L:merge(other); L.stats[layer]
--   analysis.summarize({ result1, result2, ... }, { kurtosis = nil|"pearson"|"qt_code" })
--     -> { max_inf_norm = max of avg_max_inf_norm, avg_kurtosis = mean of avg_kurtosis (or of
--          the named form), avg_kurtosis_pearson, avg_kurtosis_qt_code }         (QT tables)
--
-- Single tensors:
--   analysis.token_outliers(x, rule, mask) -> flags (Lua list of 0/1, index b*T + t + 1), count,
--                                             tok_maxabs (list)
--   analysis.weight_stats(W, {tau = 1000}) -> { col_ratio, row_ratio, extremal_ratio (max over
--      columns), extremal_col, row_extremal_ratio, extremal_row, col_outliers, row_outliers,
--      outlier_cols = {j...}, outlier_rows = {i...}, n_outliers }          (SO §3, Fig. 5)
--   analysis.cumulative_attention(A, qmask) -> { B, NH, Tq, Tk, data (double[B·NH·Tk]), at(b,h,j) }
--   analysis.attention_outlier_keys(values(list, 1-based by key), opts) -> { j... } (0-based keys)
--      opts.rule = "tau_mean" (paper: Â_j > τ·mean Â, opts.tau) | "code" (Â_j ≥ frac·T, opts.frac
--      = 0.1, opts.T = number of queries); opts.valid = {bool per key} or nil
--   analysis.AttnStats{ T =, NH =, V = 0, rule = "tau_mean"|"code", tau =, frac = 0.1, topk = 2,
--                       category = fn or nil, median = "mean"|"lower" }
--     A:update(A, ids, mask); A:update_batch(A, batch); A:probe(A, layer, batch) (per layer: LayerAttn)
--     A:result() -> { nseq, avg_topk = {2}, avg_median (avg_median_mean, avg_median_lower), per_head = { {count, score_mean,
--        score_min, score_max}, ... }, by_position = {Tk}, by_token = {[id]=n}, by_category,
--        code = { count, by_position, by_token, by_category } (head-averaged A, Â ≥ frac·T) }
--   analysis.LayerAttn(spec) -- one AttnStats per layer (probe(A, layer, batch), result())
--   analysis.overlap(act_keys, att_keys_by_head) -> mean over heads of |O_act ∩ O_att,h| / |O_act|
--      (nil when O_act is empty)                                              (SO Table 1)
--   analysis.Overlap{ act_rule = SO_TAU, att = {rule =, tau =, frac =}, shift = 0 }
--     O:probe_act(h, layer, batch); O:probe_attn(A, layer, batch); O:end_batch(); O:result()
--     -> { overall (mean over samples·heads), by_layer = {[l] = {mean, n}}, n }
--   analysis.feature_consistency(weight_dims, act_dims) -> |W ∩ A| / |A|, |W ∩ A| / |W|
--   analysis.value_magnitudes(v, flags, mask) -> { per_head = { {outlier, other, n_outlier,
--      n_other}, ... }, outlier, other }  (mean ‖v_j‖₂, QT Fig. 3e)
--   analysis.by_category(counts_by_id, category) -> { initial =, delimiter =, weak =, other = }
--   analysis.ref  -- slow pure-Lua reference implementations (tests)
local ffi = require "ffi"
local ol = require "outlierlab"
local C = ol.C

local analysis = {}

local CATS = { "initial", "delimiter", "weak", "other" }
analysis.categories = CATS

-- ------------------------------------------------------------------ rules
local kinds = { none = C.OL_OUTLIER_NONE, sigma = C.OL_OUTLIER_SIGMA, tau_mean = C.OL_OUTLIER_TAU_MEAN }
local scopes = { batch = C.OL_SCOPE_BATCH, sequence = C.OL_SCOPE_SEQUENCE, fixed = C.OL_SCOPE_FIXED }
local known_rule_keys = { kind = 1, k = 1, tau = 1, scope = 1, mu = 1, sigma = 1, mean_abs = 1 }

-- a normalised Lua rule table (kind, k, scope, ...) from user options
function analysis.rule(r)
  r = r or {}
  for key in pairs(r) do
    if not known_rule_keys[key] then error("analysis.rule: unknown key '" .. tostring(key) .. "'", 2) end
  end
  local kind = r.kind or "none"
  if not kinds[kind] then error("analysis.rule: kind must be sigma, tau_mean or none, got " .. tostring(kind), 2) end
  local scope = r.scope or "batch"
  if not scopes[scope] then error("analysis.rule: scope must be batch, sequence or fixed, got " .. tostring(scope), 2) end
  local k = r.k or r.tau or (kind == "sigma" and 6 or kind == "tau_mean" and 1000 or 0)
  if kind ~= "none" and not (type(k) == "number" and k > 0) then
    error("analysis.rule: threshold k/tau must be a number > 0, got " .. tostring(k), 2)
  end
  if scope == "fixed" then
    if kind == "sigma" and (type(r.mu) ~= "number" or type(r.sigma) ~= "number") then
      error("analysis.rule: fixed scope with kind sigma needs mu and sigma", 2)
    end
    if kind == "tau_mean" and type(r.mean_abs) ~= "number" then
      error("analysis.rule: fixed scope with kind tau_mean needs mean_abs", 2)
    end
  end
  return { kind = kind, k = k, scope = scope, mu = r.mu or 0, sigma = r.sigma or 0, mean_abs = r.mean_abs or 0 }
end
analysis.QT_6SIGMA = analysis.rule{ kind = "sigma", k = 6, scope = "batch" }

-- The batch-scope sigma rule's numbers for a caller that flags elements itself (qt-fig3 counts
-- per token and per patch position): the mean of the elements of x (a tensor; or a data
-- pointer and n, its first n elements) and k times their unbiased standard deviation, in Lua
-- doubles. Returns mu, k·σ.
function analysis.sigma_limit(x, k, n)
  local d = n and x or x.data
  n = n or x:nelement()
  if n < 2 then error("analysis.sigma_limit: needs at least 2 elements, got " .. tostring(n), 2) end
  local s = 0
  for i = 0, n - 1 do s = s + d[i] end
  local mu = s / n
  local v = 0
  for i = 0, n - 1 do v = v + (d[i] - mu) ^ 2 end
  return mu, (k or 6) * math.sqrt(v / (n - 1))
end
analysis.SO_TAU = analysis.rule{ kind = "tau_mean", tau = 1000, scope = "sequence" }

local function fill_rule(cr, r)
  cr.kind = kinds[r.kind]; cr.scope = scopes[r.scope]; cr.k = r.k
  cr.mu = r.mu; cr.sigma = r.sigma; cr.mean_abs = r.mean_abs
end
local function c_rule(r)
  local cr = ffi.new("ol_outlier_rule")
  fill_rule(cr, analysis.rule(r))
  return cr
end

-- ------------------------------------------------------------------ helpers
local function check(rc) if rc ~= 0 then ol.engine_error(2) end end
local function ten(x, what)
  if x ~= nil and not ol.is_tensor(x) then error("analysis: " .. what .. " must be a tensor", 3) end
  return x
end
local function by_category(counts, category)
  local out = { initial = 0, delimiter = 0, weak = 0, other = 0 }
  for id, n in pairs(counts) do
    local c = category(id)
    if out[c] == nil then error("analysis.by_category: category(" .. id .. ") returned " .. tostring(c), 2) end
    out[c] = out[c] + n
  end
  return out
end
analysis.by_category = by_category

-- ------------------------------------------------------------------ Stats
local Stats = {}
Stats.__index = Stats
analysis.StatsClass = Stats

local spec_keys = { T = 1, C = 1, V = 1, topk = 1, bins = 1, lo = 1, hi = 1, log = 1, rule = 1, category = 1,
                    kurtosis = 1, median = 1 }

-- the conventions of the per-sequence kurtosis and median (docs/reference/metrics.md)
local KURTOSIS_FORMS = { pearson = true, qt_code = true }
local MEDIAN_FORMS = { mean = true, lower = true }
local function check_form(what, forms, v, default, level)
  v = v or default
  if not forms[v] then
    local names = {}
    for n in pairs(forms) do names[#names + 1] = n end
    table.sort(names)
    error(string.format("analysis: %s must be one of %s, got %s", what, table.concat(names, ", "), tostring(v)), level + 1)
  end
  return v
end

function analysis.Stats(o)
  o = o or {}
  for key in pairs(o) do
    if not spec_keys[key] then error("analysis.Stats: unknown key '" .. tostring(key) .. "'", 2) end
  end
  local kform = check_form("kurtosis", KURTOSIS_FORMS, o.kurtosis, "pearson", 2)
  local mform = check_form("median", MEDIAN_FORMS, o.median, "mean", 2)
  local sp = ffi.new("ol_stats_spec")
  sp.T = o.T or error("analysis.Stats: T (max positions) is required", 2)
  sp.C = o.C or error("analysis.Stats: C (channels) is required", 2)
  sp.V = o.V or 0
  sp.topk = o.topk or 3
  sp.nbins = o.bins or 0
  sp.hist_log = o.log and 1 or 0
  sp.hist_lo = o.lo or 0
  sp.hist_hi = o.hi or 0
  local rule = analysis.rule(o.rule)
  fill_rule(sp.rule, rule)
  local raw = C.ol_stats_new(sp)
  if raw == nil then ol.engine_error(1) end
  local self = setmetatable({ raw = ffi.gc(raw, C.ol_stats_free), opts = o, rule_t = rule,
                              category = o.category, kurtosis_form = kform, median_form = mform }, Stats)
  self.L = C.ol_stats_get_layout(raw)
  self.d = C.ol_stats_data(raw)
  self.T, self.C, self.V, self.k = tonumber(sp.T), tonumber(sp.C), tonumber(sp.V), tonumber(sp.topk)
  self.nbins = tonumber(sp.nbins)
  return self
end

function Stats:clone_empty() return analysis.Stats(self.opts) end
function Stats:update(x, ids, mask)
  check(C.ol_stats_update(self.raw, ten(x, "x"), ten(ids, "ids"), ten(mask, "mask")))
  return self
end
-- batch.seq_offset (optional) is the global index of the batch's first sequence: set by a
-- caller that spreads batches over MPI ranks, so merged top-k records name global sequences
function Stats:update_batch(x, batch)
  batch = batch or {}
  if batch.seq_offset then self:set_seq_offset(batch.seq_offset) end
  return self:update(x, batch.ids, batch.pad_mask)
end
function Stats:merge(other) check(C.ol_stats_merge(self.raw, other.raw)) return self end
function Stats:reset() check(C.ol_stats_reset(self.raw)) return self end
function Stats:set_seq_offset(n) check(C.ol_stats_set_seq_offset(self.raw, n)) return self end
function Stats:data() return self.d end
function Stats:size() return tonumber(self.L.size) end
function Stats:sections()
  local L = self.L
  return { sum = { 0, tonumber(L.nsum) }, max = { tonumber(L.nsum), tonumber(L.nmax) },
           topk = { tonumber(L.topk), tonumber(L.ntopk) } }
end

local function slice(d, off, n)
  local out = {}
  for i = 0, n - 1 do out[i + 1] = d[off + i] end
  return out
end
local function sparse(d, off, n)
  local out = {}
  for i = 0, n - 1 do local v = d[off + i] if v ~= 0 then out[i] = v end end
  return out
end

function Stats:result()
  local d, L = self.d, self.L
  local g = function(f) return d[L[f]] end
  local n, nseq = g("n"), g("nseq")
  local r = { n = n, nseq = nseq, ntok = g("ntok"), nonfinite = g("nnonfinite") }
  r.mean = n > 0 and g("s1") / n or 0 / 0
  r.var = n > 1 and (g("s2") - g("s1") * g("s1") / n) / (n - 1) or 0 / 0
  if r.var < 0 then r.var = 0 end
  r.std = math.sqrt(r.var)
  r.mean_abs = n > 0 and g("sabs") / n or 0 / 0
  r.max_abs = n > 0 and g("maxabs") or 0 / 0
  r.max = n > 0 and g("maxv") or 0 / 0
  r.min = n > 0 and -g("negminv") or 0 / 0
  local nk, nkq = g("nseq_kurt"), g("nseq_kurt_qt")
  r.avg_kurtosis_pearson = nk > 0 and g("seq_kurt") / nk or 0 / 0
  r.avg_kurtosis_qt_code = nkq > 0 and g("seq_kurt_qt") / nkq or 0 / 0
  r.kurtosis_form = self.kurtosis_form
  r.avg_kurtosis = r["avg_kurtosis_" .. r.kurtosis_form]
  r.nseq_kurtosis = r.kurtosis_form == "pearson" and nk or nkq
  r.avg_max_inf_norm = nseq > 0 and g("seq_maxabs") / nseq or 0 / 0
  r.avg_median_mean = nseq > 0 and g("seq_median") / nseq or 0 / 0
  r.avg_median_lower = nseq > 0 and g("seq_median_lower") / nseq or 0 / 0
  r.median_form = self.median_form
  r.avg_median = r["avg_median_" .. r.median_form]
  r.avg_topk = {}
  for i = 0, self.k - 1 do r.avg_topk[i + 1] = nseq > 0 and d[L.seq_topk + i] / nseq or 0 / 0 end
  local T, Cc, V = self.T, self.C, self.V
  r.tokens_by_position = slice(d, L.tok_pos, T)
  r.mean_abs_by_channel = {}
  local ntok = g("ntok")
  for c = 0, Cc - 1 do r.mean_abs_by_channel[c + 1] = ntok > 0 and d[L.sabs_ch + c] / ntok or 0 / 0 end
  r.max_abs_by_channel = slice(d, L.maxabs_ch, Cc)
  r.max_abs_by_position = slice(d, L.maxabs_pos, T)
  local o = { elements = g("nout"), tokens = g("nout_tok"), sequences = g("nseq_out"),
              by_position = slice(d, L.out_pos, T), tokens_by_position = slice(d, L.out_tok_pos, T),
              by_channel = slice(d, L.out_ch, Cc), rule = self.rule_t }
  if V > 0 then
    o.by_token = sparse(d, L.out_id, V)
    o.tokens_by_token = sparse(d, L.out_tok_id, V)
    r.tokens_by_token = sparse(d, L.tok_id, V)
    if self.category then
      o.by_category = by_category(o.by_token, self.category)
      o.tokens_by_category = by_category(o.tokens_by_token, self.category)
      r.tokens_by_category = by_category(r.tokens_by_token, self.category)
    end
  end
  r.outliers = o
  if self.nbins > 0 then
    local h = { log = self.opts.log and true or false, edges = {}, counts = slice(d, L.hist + 1, self.nbins),
                under = d[L.hist], over = d[L.hist + self.nbins + 1] }
    local lo, hi = self.opts.lo, self.opts.hi
    if h.log then lo, hi = math.log10(lo), math.log10(hi) end
    for i = 0, self.nbins do
      local e = lo + (hi - lo) * i / self.nbins
      h.edges[i + 1] = h.log and 10 ^ e or e
    end
    r.hist = h
  end
  r.top = {}
  for i = 0, self.k - 1 do
    local e = L.topk + i * 6
    if d[e] >= 0 then
      r.top[#r.top + 1] = { abs = d[e], value = d[e + 1], seq = d[e + 2], pos = d[e + 3], channel = d[e + 4],
                            token = d[e + 5] }
    end
  end
  return r
end

-- a fixed-scope rule from a first pass over the dataset (two-pass dataset-level μ, σ, mean|x|)
function analysis.dataset_rule(first, r)
  r = r or {}
  local res = first:result()
  if not (res.n > 1) then error("analysis.dataset_rule: the first pass saw fewer than 2 values", 2) end
  local kind = r.kind or "sigma"
  return analysis.rule{ kind = kind, k = r.k or r.tau, scope = "fixed", mu = res.mean, sigma = res.std,
                        mean_abs = res.mean_abs }
end

-- ------------------------------------------------------------------ per layer
local LayerStats = {}
LayerStats.__index = LayerStats
function analysis.LayerStats(spec)
  return setmetatable({ spec = spec, stats = {} }, LayerStats)
end
function LayerStats:get(layer)
  local s = self.stats[layer]
  if not s then s = analysis.Stats(self.spec) self.stats[layer] = s end
  return s
end
function LayerStats:probe(x, layer, batch) self:get(layer):update_batch(x, batch) end
function LayerStats:layers()
  local ls = {}
  for l in pairs(self.stats) do ls[#ls + 1] = l end
  table.sort(ls)
  return ls
end
function LayerStats:result()
  local out = { layers = self:layers() }
  for _, l in ipairs(out.layers) do out[l] = self.stats[l]:result() end
  return out
end
function LayerStats:merge(other)
  for l, s in pairs(other.stats) do self:get(l):merge(s) end
  return self
end

-- QT table aggregates: "max inf norm" = max over hooked tensors of the per-sequence max |x|
-- averaged over sequences; "avg kurtosis" = mean over hooked tensors of the averaged kurtosis,
-- in the form each result reports (its Stats' kurtosis option) or in opts.kurtosis; both
-- forms are also returned (avg_kurtosis_pearson, avg_kurtosis_qt_code).
function analysis.summarize(results, opts)
  local form = opts and opts.kurtosis and check_form("kurtosis", KURTOSIS_FORMS, opts.kurtosis, nil, 2)
  local function mean_of(key)
    local s, n = 0, 0
    for _, r in ipairs(results) do
      local v = r[key]
      if v ~= nil and v == v then s, n = s + v, n + 1 end
    end
    return n > 0 and s / n or 0 / 0
  end
  local mx = -math.huge
  for _, r in ipairs(results) do
    if r.avg_max_inf_norm == r.avg_max_inf_norm and r.avg_max_inf_norm > mx then mx = r.avg_max_inf_norm end
  end
  return { max_inf_norm = mx, avg_kurtosis = mean_of(form and "avg_kurtosis_" .. form or "avg_kurtosis"),
           avg_kurtosis_pearson = mean_of("avg_kurtosis_pearson"), avg_kurtosis_qt_code = mean_of("avg_kurtosis_qt_code"),
           kurtosis_form = form, n = #results }
end

-- ------------------------------------------------------------------ token outliers
function analysis.token_outliers(x, rule, mask)
  ten(x, "x")
  local BT = x.ndim == 3 and tonumber(x.shape[0] * x.shape[1]) or tonumber(x.shape[0])
  local flags = ffi.new("int32_t[?]", BT)
  local mx = ffi.new("double[?]", BT)
  local n = C.ol_outlier_token_flags(x, c_rule(rule), ten(mask, "mask"), flags, mx)
  if n < 0 then ol.engine_error(1) end
  local fl, ml = {}, {}
  for i = 0, BT - 1 do fl[i + 1] = flags[i] ml[i + 1] = mx[i] end
  return fl, tonumber(n), ml
end

-- ------------------------------------------------------------------ weights
function analysis.weight_stats(w, o)
  o = o or {}
  ten(w, "W")
  if w.ndim ~= 2 then error("analysis.weight_stats: W " .. tostring(w) .. " must be 2-D (O, I)", 2) end
  local O, I = tonumber(w.shape[0]), tonumber(w.shape[1])
  local cr, rr = ffi.new("double[?]", I), ffi.new("double[?]", O)
  local co, ro = ffi.new("double[?]", I), ffi.new("double[?]", O)
  check(C.ol_weight_stats(w, o.tau or 1000, cr, rr, co, ro))
  local r = { col_ratio = slice(cr, 0, I), row_ratio = slice(rr, 0, O), col_outliers = slice(co, 0, I),
              row_outliers = slice(ro, 0, O), outlier_cols = {}, outlier_rows = {}, n_outliers = 0,
              extremal_ratio = -math.huge, row_extremal_ratio = -math.huge, tau = o.tau or 1000 }
  for j = 1, I do
    if r.col_ratio[j] > r.extremal_ratio then r.extremal_ratio, r.extremal_col = r.col_ratio[j], j - 1 end
    if r.col_outliers[j] > 0 then r.outlier_cols[#r.outlier_cols + 1] = j - 1 end
    r.n_outliers = r.n_outliers + r.col_outliers[j]
  end
  for i = 1, O do
    if r.row_ratio[i] > r.row_extremal_ratio then r.row_extremal_ratio, r.extremal_row = r.row_ratio[i], i - 1 end
    if r.row_outliers[i] > 0 then r.outlier_rows[#r.outlier_rows + 1] = i - 1 end
  end
  return r
end

-- ------------------------------------------------------------------ attention
function analysis.cumulative_attention(A, qmask)
  ten(A, "A")
  if A.ndim ~= 4 then error("analysis.cumulative_attention: A " .. tostring(A) .. " must be (B, NH, Tq, Tk)", 2) end
  local B, NH, Tq, Tk = tonumber(A.shape[0]), tonumber(A.shape[1]), tonumber(A.shape[2]), tonumber(A.shape[3])
  local data = ffi.new("double[?]", B * NH * Tk)
  check(C.ol_attn_cumulative(A, ten(qmask, "mask"), data))
  return { B = B, NH = NH, Tq = Tq, Tk = Tk, data = data,
           at = function(b, h, j) return data[(b * NH + h) * Tk + j] end }
end

-- keys j (0-based) that are attention outliers in one row of cumulative scores `vals`
-- (a 1-based Lua list over keys). valid[j+1] == false excludes key j (padding).
function analysis.attention_outlier_keys(vals, o)
  o = o or {}
  local rule = o.rule or "tau_mean"
  local valid = o.valid
  local out = {}
  if rule == "tau_mean" then
    local s, n = 0, 0
    for j = 1, #vals do if not valid or valid[j] then s = s + vals[j] n = n + 1 end end
    if n == 0 then return out end
    local lim = (o.tau or 1000) * s / n
    for j = 1, #vals do if (not valid or valid[j]) and vals[j] > lim then out[#out + 1] = j - 1 end end
  elseif rule == "code" then
    local T = o.T or error("analysis.attention_outlier_keys: rule 'code' needs T (number of queries)", 2)
    local lim = (o.frac or 0.1) * T
    for j = 1, #vals do if (not valid or valid[j]) and vals[j] >= lim then out[#out + 1] = j - 1 end end
  else
    error("analysis.attention_outlier_keys: rule must be 'tau_mean' or 'code', got " .. tostring(rule), 2)
  end
  return out
end

-- median of a list: the mean of the two middle values for an even count (numpy), or with
-- lower = true the lower of them (torch.median)
local function median_of(list, lower)
  local n = #list
  if n == 0 then return 0 / 0 end
  local s = {}
  for i = 1, n do s[i] = list[i] end
  table.sort(s)
  if n % 2 == 1 then return s[(n + 1) / 2] end
  if lower then return s[n / 2] end
  return 0.5 * (s[n / 2] + s[n / 2 + 1])
end
local function inc(t, k, v) t[k] = (t[k] or 0) + (v or 1) end

-- per-sequence, per-head keys of one attention tensor: returns a list over b of
-- { nvalid, heads = { [h+1] = { vals = {Â over keys}, keys = {outlier keys} } }, code_keys, code_vals }
local function attn_sequences(A, mask, o)
  local cum = analysis.cumulative_attention(A, mask)
  local B, NH, Tq, Tk = cum.B, cum.NH, cum.Tq, cum.Tk
  local out = {}
  for b = 0, B - 1 do
    local valid, nq = nil, Tq
    if mask then
      valid, nq = {}, 0
      for i = 0, Tq - 1 do if mask.idata[b * Tq + i] ~= 0 then nq = nq + 1 end end
      if Tk == Tq then for j = 0, Tk - 1 do valid[j + 1] = mask.idata[b * Tq + j] ~= 0 end
      else valid = nil end
    end
    local seq = { heads = {}, nq = nq, valid = valid }
    local avg = {}
    for j = 1, Tk do avg[j] = 0 end
    for h = 0, NH - 1 do
      local vals = {}
      for j = 0, Tk - 1 do vals[j + 1] = cum.data[(b * NH + h) * Tk + j] avg[j + 1] = avg[j + 1] + vals[j + 1] end
      seq.heads[h + 1] = { vals = vals, keys = analysis.attention_outlier_keys(vals, {
        rule = o.rule, tau = o.tau, frac = o.frac, T = nq, valid = valid }) }
    end
    for j = 1, Tk do avg[j] = avg[j] / NH end
    seq.code_vals = avg
    seq.code_keys = analysis.attention_outlier_keys(avg, { rule = "code", frac = o.frac, T = nq, valid = valid })
    out[b + 1] = seq
  end
  return out, cum
end
analysis.attn_sequences = attn_sequences

local AttnStats = {}
AttnStats.__index = AttnStats
function analysis.AttnStats(o)
  o = o or {}
  local self = setmetatable({ o = o, rule = o.rule or "tau_mean", tau = o.tau or 1000, frac = o.frac or 0.1,
                              k = o.topk or 2, category = o.category, nseq = 0, sum_topk = {}, sum_median = 0,
                              sum_median_lower = 0, median_form = check_form("median", MEDIAN_FORMS, o.median, "mean", 2),
                              per_head = {}, by_position = {}, by_token = {},
                              code = { count = 0, by_position = {}, by_token = {} } }, AttnStats)
  if self.rule ~= "tau_mean" and self.rule ~= "code" then
    error("analysis.AttnStats: rule must be 'tau_mean' or 'code', got " .. tostring(self.rule), 2)
  end
  for i = 1, self.k do self.sum_topk[i] = 0 end
  return self
end

-- A (B, NH, T, Tk) probabilities; ids, mask int32 (B, T) or nil
function AttnStats:update(A, ids, mask)
  local seqs = attn_sequences(A, mask, { rule = self.rule, tau = self.tau, frac = self.frac })
  local T = tonumber(A.shape[2])
  for b, seq in ipairs(seqs) do
    self.nseq = self.nseq + 1
    local tok = function(j) return ids and ids.idata[(b - 1) * T + j] or nil end
    -- SO Fig. 6a: the k largest Â over keys and heads, and the median Â, of this sequence
    local all = {}
    for h, hd in ipairs(seq.heads) do
      local ph = self.per_head[h] or { count = 0, score_sum = 0, score_min = math.huge, score_max = -math.huge }
      self.per_head[h] = ph
      for j, v in ipairs(hd.vals) do if not seq.valid or seq.valid[j] then all[#all + 1] = v end end
      for _, j in ipairs(hd.keys) do
        local v = hd.vals[j + 1]
        ph.count = ph.count + 1
        ph.score_sum = ph.score_sum + v
        if v < ph.score_min then ph.score_min = v end
        if v > ph.score_max then ph.score_max = v end
        inc(self.by_position, j)
        local id = tok(j)
        if id then inc(self.by_token, id) end
      end
    end
    table.sort(all, function(a, b2) return a > b2 end)
    for i = 1, self.k do self.sum_topk[i] = self.sum_topk[i] + (all[i] or 0) end
    self.sum_median = self.sum_median + median_of(all)
    self.sum_median_lower = self.sum_median_lower + median_of(all, true)
    for _, j in ipairs(seq.code_keys) do
      self.code.count = self.code.count + 1
      inc(self.code.by_position, j)
      local id = tok(j)
      if id then inc(self.code.by_token, id) end
    end
  end
  return self
end
function AttnStats:update_batch(A, batch) batch = batch or {} return self:update(A, batch.ids, batch.pad_mask) end

function AttnStats:merge(o)
  self.nseq = self.nseq + o.nseq
  for i = 1, self.k do self.sum_topk[i] = self.sum_topk[i] + o.sum_topk[i] end
  self.sum_median = self.sum_median + o.sum_median
  self.sum_median_lower = self.sum_median_lower + o.sum_median_lower
  for h, p in pairs(o.per_head) do
    local q = self.per_head[h]
    if not q then
      self.per_head[h] = { count = p.count, score_sum = p.score_sum, score_min = p.score_min, score_max = p.score_max }
    else
      q.count = q.count + p.count
      q.score_sum = q.score_sum + p.score_sum
      q.score_min = math.min(q.score_min, p.score_min)
      q.score_max = math.max(q.score_max, p.score_max)
    end
  end
  for k, v in pairs(o.by_position) do inc(self.by_position, k, v) end
  for k, v in pairs(o.by_token) do inc(self.by_token, k, v) end
  self.code.count = self.code.count + o.code.count
  for k, v in pairs(o.code.by_position) do inc(self.code.by_position, k, v) end
  for k, v in pairs(o.code.by_token) do inc(self.code.by_token, k, v) end
  return self
end

function AttnStats:result()
  local n = self.nseq
  local r = { nseq = n, rule = self.rule, tau = self.tau, frac = self.frac, avg_topk = {},
              avg_median_mean = n > 0 and self.sum_median / n or 0 / 0,
              avg_median_lower = n > 0 and self.sum_median_lower / n or 0 / 0, median_form = self.median_form, per_head = {},
              by_position = self.by_position, by_token = self.by_token,
              code = { count = self.code.count, by_position = self.code.by_position, by_token = self.code.by_token } }
  r.avg_median = r["avg_median_" .. self.median_form]
  for i = 1, self.k do r.avg_topk[i] = n > 0 and self.sum_topk[i] / n or 0 / 0 end
  local count = 0
  for h, p in pairs(self.per_head) do
    r.per_head[h] = { count = p.count, score_mean = p.count > 0 and p.score_sum / p.count or 0 / 0,
                      score_min = p.count > 0 and p.score_min or 0 / 0, score_max = p.count > 0 and p.score_max or 0 / 0 }
    count = count + p.count
  end
  r.count = count
  if self.category then
    r.by_category = by_category(self.by_token, self.category)
    r.code.by_category = by_category(self.code.by_token, self.category)
  end
  return r
end

local LayerAttn = {}
LayerAttn.__index = LayerAttn
function analysis.LayerAttn(spec) return setmetatable({ spec = spec, stats = {} }, LayerAttn) end
function LayerAttn:get(l)
  local s = self.stats[l]
  if not s then s = analysis.AttnStats(self.spec) self.stats[l] = s end
  return s
end
function LayerAttn:probe(A, layer, batch) self:get(layer):update_batch(A, batch) end
LayerAttn.layers = LayerStats.layers
function LayerAttn:result()
  local out = { layers = self:layers() }
  for _, l in ipairs(out.layers) do out[l] = self.stats[l]:result() end
  return out
end
function LayerAttn:merge(other)
  for l, s in pairs(other.stats) do self:get(l):merge(s) end
  return self
end

-- ------------------------------------------------------------------ consistency (SO Table 1)
local function set_of(list) local s = {} for _, v in ipairs(list) do s[v] = true end return s end

-- mean over heads of |O_act ∩ O_att,h| / |O_act|; nil when O_act is empty (undefined)
function analysis.overlap(act_keys, att_by_head)
  if #act_keys == 0 then return nil end
  local sum, nh = 0, 0
  for _, keys in ipairs(att_by_head) do
    local s, hit = set_of(keys), 0
    for _, j in ipairs(act_keys) do if s[j] then hit = hit + 1 end end
    sum = sum + hit / #act_keys
    nh = nh + 1
  end
  if nh == 0 then return nil end
  return sum / nh, nh
end

-- fraction of activation-outlier dims that are weight-outlier dims (and the reverse)
function analysis.feature_consistency(weight_dims, act_dims)
  local w, a = set_of(weight_dims), set_of(act_dims)
  local hit = 0
  for d in pairs(a) do if w[d] then hit = hit + 1 end end
  local na, nw = 0, 0
  for _ in pairs(a) do na = na + 1 end
  for _ in pairs(w) do nw = nw + 1 end
  return na > 0 and hit / na or nil, nw > 0 and hit / nw or nil, hit
end

-- Streaming SO Table 1 (activation vs attention, sequence dim): pairs the per-token activation
-- outliers of h at layer l + shift with the per-head attention outliers of A at layer l, per
-- sample; Overall = mean over (sample, head) of Overlap (samples without activation outliers skipped).
local Overlap = {}
Overlap.__index = Overlap
function analysis.Overlap(o)
  o = o or {}
  return setmetatable({ act_rule = o.act_rule or analysis.SO_TAU, att = o.att or { rule = "tau_mean", tau = 1000 },
                        shift = o.shift or 0, act = {}, attn = {}, sum = 0, n = 0, skipped = 0, by_layer = {} }, Overlap)
end
function Overlap:probe_act(h, layer, batch)
  local mask = batch and batch.pad_mask
  local flags = analysis.token_outliers(h, self.act_rule, mask)
  local T = h.ndim == 3 and tonumber(h.shape[1]) or tonumber(h.shape[0])
  local B = #flags / T
  local per = {}
  for b = 0, B - 1 do
    local keys = {}
    for t = 0, T - 1 do if flags[b * T + t + 1] == 1 then keys[#keys + 1] = t end end
    per[b + 1] = keys
  end
  self.act[layer] = per
end
function Overlap:probe_attn(A, layer, batch)
  local seqs = attn_sequences(A, batch and batch.pad_mask, self.att)
  local per = {}
  for b, seq in ipairs(seqs) do
    local heads = {}
    for h, hd in ipairs(seq.heads) do heads[h] = hd.keys end   -- per head, with self.att's rule
    per[b] = heads
  end
  self.attn[layer] = per
end
-- pair what the batch produced, accumulate, and forget the batch
function Overlap:end_batch()
  for l, per in pairs(self.attn) do
    local act = self.act[l + self.shift]
    if act then
      local bl = self.by_layer[l] or { sum = 0, n = 0 }
      self.by_layer[l] = bl
      for b, heads in ipairs(per) do
        local keys = act[b]
        if #keys == 0 then self.skipped = self.skipped + 1
        else
          for _, hk in ipairs(heads) do
            local v = analysis.overlap(keys, { hk })
            self.sum = self.sum + v self.n = self.n + 1
            bl.sum = bl.sum + v bl.n = bl.n + 1
          end
        end
      end
    end
  end
  self.act, self.attn = {}, {}
end
function Overlap:result()
  local r = { overall = self.n > 0 and self.sum / self.n or 0 / 0, n = self.n, skipped = self.skipped, by_layer = {} }
  for l, bl in pairs(self.by_layer) do r.by_layer[l] = { mean = bl.n > 0 and bl.sum / bl.n or 0 / 0, n = bl.n } end
  return r
end

-- ------------------------------------------------------------------ value magnitudes (QT Fig. 3e)
-- v (B, NH, T, HD); flags: Lua list over b*T + t + 1 (1 = outlier token); mask int32 (B, T) or nil
function analysis.value_magnitudes(v, flags, mask)
  ten(v, "v")
  if v.ndim ~= 4 then error("analysis.value_magnitudes: v " .. tostring(v) .. " must be (B, NH, T, HD)", 2) end
  local B, NH, T = tonumber(v.shape[0]), tonumber(v.shape[1]), tonumber(v.shape[2])
  if #flags ~= B * T then error("analysis.value_magnitudes: " .. #flags .. " flags for B·T = " .. B * T .. " tokens", 2) end
  local norms = ffi.new("double[?]", B * NH * T)
  check(C.ol_row_norms(v, norms))
  local r = { per_head = {} }
  local so, no, sx, nx = 0, 0, 0, 0
  for h = 0, NH - 1 do
    local ho, hn, hx, hnx = 0, 0, 0, 0
    for b = 0, B - 1 do
      for t = 0, T - 1 do
        if not mask or mask.idata[b * T + t] ~= 0 then
          local nv = norms[(b * NH + h) * T + t]
          if flags[b * T + t + 1] == 1 then ho, hn = ho + nv, hn + 1 else hx, hnx = hx + nv, hnx + 1 end
        end
      end
    end
    r.per_head[h + 1] = { outlier = hn > 0 and ho / hn or 0 / 0, other = hnx > 0 and hx / hnx or 0 / 0,
                          n_outlier = hn, n_other = hnx }
    so, no, sx, nx = so + ho, no + hn, sx + hx, nx + hnx
  end
  r.outlier = no > 0 and so / no or 0 / 0
  r.other = nx > 0 and sx / nx or 0 / 0
  r.n_outlier, r.n_other = no, nx
  return r
end

-- ------------------------------------------------------------------ slow references (tests)
-- Straightforward Lua versions of the per-sequence metrics over a flat 1-based list.
analysis.ref = {}
-- eps: QT's code divides by s⁴ + 1e-6 (analysis.ref.kurtosis(xs, 1e-6))
function analysis.ref.kurtosis(xs, eps)
  local n, s = #xs, 0
  for i = 1, n do s = s + xs[i] end
  local m, m2, m4 = s / n, 0, 0
  for i = 1, n do local d = xs[i] - m m2 = m2 + d * d m4 = m4 + d ^ 4 end
  local var = m2 / (n - 1)
  return (m4 / n) / (var * var + (eps or 0))
end
function analysis.ref.median_abs(xs, lower)
  local a = {}
  for i = 1, #xs do a[i] = math.abs(xs[i]) end
  return median_of(a, lower)
end
function analysis.ref.topk_abs(xs, k)
  local a = {}
  for i = 1, #xs do a[i] = math.abs(xs[i]) end
  table.sort(a, function(p, q) return p > q end)
  local out = {}
  for i = 1, k do out[i] = a[i] or 0 end
  return out
end
analysis.ref.median = median_of

-- P(X >= k) for X ~ Binomial(n, p): the chance of k or more hits in n draws of probability p
-- (the ViT verdicts' margin: are the outlier patches at the background beyond chance?). Summed
-- in the direction in which the terms fall (the upper tail when k > n·p, else 1 − the lower
-- tail), from the log of the first term, so that n in the hundreds of thousands neither
-- overflows nor loses the small tails (they underflow to 0 below about 1e-308).
function analysis.binomial_tail(n, k, p)
  if type(n) ~= "number" or n < 0 or n ~= math.floor(n) or type(k) ~= "number" or k ~= math.floor(k) then
    error(string.format("analysis.binomial_tail: n and k must be integers with n >= 0, got n = %s, k = %s", tostring(n), tostring(k)), 2)
  end
  if type(p) ~= "number" or not (p >= 0 and p <= 1) then
    error(string.format("analysis.binomial_tail: p must be in [0, 1], got %s", tostring(p)), 2)
  end
  if k <= 0 then return 1 end
  if k > n then return 0 end
  if p == 0 then return 0 end
  if p == 1 then return 1 end
  local function log_pmf(i)
    local lc, m = 0, math.min(i, n - i)
    for j = 1, m do lc = lc + math.log((n - m + j) / j) end
    return lc + i * math.log(p) + (n - i) * math.log(1 - p)
  end
  local r = p / (1 - p)
  if k > n * p then   -- terms fall from k upward
    local t, sum = 1, 1
    for i = k, n - 1 do
      t = t * (n - i) / (i + 1) * r
      sum = sum + t
      if t < 1e-17 * sum then break end
    end
    return math.min(1, math.exp(log_pmf(k)) * sum)
  end
  local t, sum = 1, 1   -- 1 − P(X <= k − 1): terms fall from k − 1 downward
  for i = k - 1, 1, -1 do
    t = t * i / (n - i + 1) / r
    sum = sum + t
    if t < 1e-17 * sum then break end
  end
  return math.max(0, 1 - math.exp(log_pmf(k - 1)) * sum)
end

return analysis
