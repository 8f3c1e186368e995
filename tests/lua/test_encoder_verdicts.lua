-- The encoder figures decide with margins (docs/reference/experiments.md, "The verdict is computed from the
-- data"), checked on made-up analysis results:
--   * qt-fig1: in each of the last two layers ≥ 90 % of the 6σ outliers at delimiters and ≥ 90 %
--     of them in at most 4 hidden dimensions (QT Fig. 1: > 97 %, dims #180 and #720);
--   * qt-fig2: the head owning the outlier dimension puts ≥ 80 % of its attention on delimiters,
--     whose values are smaller than the others (QT Fig. 2);
--   * qt-fig10: the outlier heads put ≥ 80 % of their attention on delimiters, more than the
--     ordinary head and than the early layers (QT Fig. 10).
local t = require "tap"
local root = OUTLIERLAB_ROOT

-- ---------------------------------------------------------------- qt-fig1
do
  local e = dofile(root .. "/experiments/qt-fig1.lua")
  local C = 8
  local function chans(tab) local r = {} for c = 1, C do r[c] = tab[c] or 0 end return r end
  local function run(delim2, by_channel2)
    local a = { coords = { layer = { 2, 3 }, channel = C, category = { "initial", "delimiter", "weak", "other" }, token = { "." }, rank = { 1, 2 } },
      vars = { outlier_count = { 10, 20 }, outlier_count_by_channel = { chans{ [3] = 9, [5] = 1 }, chans(by_channel2) },
        outlier_count_by_category = { { 0, 10, 0, 0 }, { 0, 20 * delim2, 0, 20 * (1 - delim2) } }, delimiter_share = { 1.0, delim2 },
        top2_channel_share = { 1.0, 0.5 }, top_channel = { { 2, 4 }, { 0, 1 } }, max_abs = { 10, 20 }, std = { 1, 1 },
        max_abs_sigma = { 10, 20 }, avg_kurtosis = { 3, 3 }, avg_max_inf_norm = { 1, 1 }, n_tokens = 100,
        tokens_by_category = { 1, 10, 0, 89 }, outlier_count_by_token = { { 10 }, { 20 } } },
      attrs = { top_tokens = 10 } }
    return e.summary{ out = { analyze = a }, cfg = {} }
  end
  local s = run(0.9, { 5, 5, 5, 5 })
  t.is(s.holds, true, "qt-fig1: 90 % at delimiters and all outliers in 4 dims: holds")
  t.ok(s.reproduced:find("100.0 % in its top 4 dims", 1, true), "qt-fig1 reports the share in the top 4 dims", s.reproduced)
  t.is(run(0.9, { 4, 4, 4, 4, 4 }).holds, false, "qt-fig1: 80 % in the top 4 dims: does not hold")
  t.is(run(0.85, { 5, 5, 5, 5 }).holds, false, "qt-fig1: 85 % at delimiters: does not hold")
end

-- ---------------------------------------------------------------- qt-fig2
do
  local e = dofile(root .. "/experiments/qt-fig2.lua")
  local function run(share, vd)
    local a = { coords = {}, vars = { dim_outliers = 12, n_delimiter_keys = 5, delimiter_attention = share,
      value_norm_delimiter = vd, value_norm_other = 1.0, outlier_dim = 7, outlier_head = 1, outlier_layer = 3 } }
    local ok, s = pcall(e.summary, { out = { analyze = a }, cfg = {} })
    return ok and s or { err = s }
  end
  local s = run(0.85, 0.2)
  t.is(s.holds, true, "qt-fig2: 85 % on delimiters with small values: holds", s.err)
  t.is(run(0.7, 0.2).holds, false, "qt-fig2: 70 % on delimiters (most, but under the 80 % margin): does not hold")
  t.is(run(0.9, 1.5).holds, false, "qt-fig2: delimiter values larger than the others: does not hold")
  t.ok((s.notes or ""):find("≥ 80 %", 1, true), "qt-fig2 states its margin", s.notes)
end

-- ---------------------------------------------------------------- qt-fig10
do
  local e = dofile(root .. "/experiments/qt-fig10.lua")
  local function run(share)
    local a = { coords = {}, vars = { total_outliers = 30, outlier_head_share = share, ordinary_head_share = 0.2,
      early_share = 0.1, outlier_head_product = 0.3 } }
    local ok, s = pcall(e.summary, { out = { analyze = a }, cfg = {} })
    return ok and s or { err = s }
  end
  t.is(run(0.82).holds, true, "qt-fig10: outlier heads 82 % on delimiters: holds", run(0.82).err)
  t.is(run(0.6).holds, false, "qt-fig10: 60 % (more than half, under the 80 % margin): does not hold")
end
return t.done()
