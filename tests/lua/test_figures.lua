-- test_figures — outlierlab.figure (declaration -> NetCDF, panels, summary numbers) and the
-- computations of the single-sequence figures (outlierlab.measure.inspect, outlierlab.figure.overview), each on
-- a hand-made case whose answer is known. The quick runs of the experiments themselves are in
-- test_experiments.lua (every experiments/*.lua); here each new figure's quoted number is tied
-- to the function that computes it:
--   qt-fig10/14/15, so-fig1/8/23/24 category_share; blog-noop required_gap, score_gap, normalized,
--   principal_angles; so-fig7 channel_contribution; so-fig8 score_by_dim, top_share, row_norms;
--   so-fig1/10/23/24 ratio_count, pool_abs; qt-fig10 owner_head, matmul; qt-fig16 received.
local t = require "tap"
local figure = require "outlierlab.figure"
local inspect = require "outlierlab.measure.inspect"
local overview = require "outlierlab.figure.overview"
local ol = require "outlierlab"

local function near(a, b, tol, msg) t.ok(math.abs(a - b) <= (tol or 1e-9), string.format("%s: %.12g vs %.12g", msg, a, b)) end

-- ---------------------------------------------------------------- declarations
local ok, err = pcall(figure.declare, { title = "x", dims = { { "a" } }, vars = { { "v", dims = { "b" }, long_name = "v", units = "1" } } })
t.ok(not ok and tostring(err):find("undeclared dim 'b'", 1, true), "a var over an undeclared dim is refused", err)
ok, err = pcall(figure.declare, { title = "x", dims = { { "a" } }, vars = { { "v", dims = { "a" }, long_name = "v" } } })
t.ok(not ok and tostring(err):find("needs units", 1, true), "a var without units is refused", err)
ok, err = pcall(figure.declare, { title = "x", dims = { { "a" } }, vars = { { "v", dims = { "a" }, long_name = "v", units = "1" } },
                                  panels = { { kind = "pie", y = "v" } } })
t.ok(not ok and tostring(err):find("kind must be", 1, true), "an unknown panel kind is refused", err)
ok, err = pcall(figure.declare, { title = "x", dims = { { "a" } }, vars = { { "v", dims = { "a" }, long_name = "v", units = "1" } },
                                  panels = { { kind = "line", x = "a", y = "w" } } })
t.ok(not ok and tostring(err):find("undeclared var 'w'", 1, true), "a panel naming an undeclared var is refused", err)

-- layout follows the panel count
local shapes = {}
for _, n in ipairs({ 1, 2, 3, 4, 5, 7, 9, 10, 40 }) do local r, c = figure.layout(n) shapes[#shapes + 1] = r .. "x" .. c end
t.is(table.concat(shapes, " "), "1x1 1x2 2x2 2x2 2x3 3x3 3x3 3x4 7x6", "layout rows x cols for 1..40 panels")

local FIG = figure.declare{
  title = "hand-made",
  dims = { { "layer", long_name = "layer" }, { "category", labels = true }, { "q" }, { "k", labels = true }, { "pt" } },
  vars = {
    { "top", dims = { "layer" }, long_name = "top", units = "1" },
    { "cnt", dims = { "category" }, long_name = "count", units = "1", type = "int" },
    { "A", dims = { "layer", "q", "k" }, long_name = "attention", units = "1" },
    { "px", dims = { "pt" }, long_name = "x", units = "1" },
    { "py", dims = { "pt" }, long_name = "y", units = "1" },
    { "ratio", dims = {}, long_name = "ratio", units = "1" },
  },
  panels = {
    { kind = "line", x = "layer", y = "top", title = "top" },
    { kind = "bars", x = "category", y = "cnt", zero_is_empty = true, why_empty = "no outlier anywhere" },
    { kind = "heatmap", z = "A", each = "layer", title = "A of layer {layer}", why_empty = "no attention in layer {layer}" },
    { kind = "scatter", x = "px", y = "py", why_empty = "no point" },
  },
}
local DATA = { coords = { layer = { 2, 3 }, category = { "initial", "delimiter" }, q = 2, k = { "<bos>", "," }, pt = 0 },
               vars = { top = { 5, 0 / 0 }, cnt = { 0, 0 }, A = { { { 1, 0 }, { 0.5, 0.5 } }, { { 0 / 0, 0 / 0 }, { 0 / 0, 0 / 0 } } },
                        px = {}, py = {}, ratio = 2.5 }, attrs = { tau = 7 } }

local v = figure.values(FIG, DATA)
t.is(v.ratio, 2.5, "values: a scalar var")
t.is(v.A[3], 0.5, "values: an array var, flat row-major")
t.is(table.concat(v.A.shape, ","), "2,2,2", "values: its shape")
ok, err = pcall(function() return v.not_declared end)
t.ok(not ok and tostring(err):find("undeclared var 'not_declared'", 1, true), "values: an undeclared name is an error", err)
ok, err = pcall(function() return figure.values(FIG, { coords = DATA.coords, vars = { top = { 1, 2, 3 } } }).top end)
t.ok(not ok and tostring(err):find("3 values for dims (layer) of 2", 1, true), "values: a wrong count names var and dims", err)

-- the panel plan: each expands, empty panels carry their reason
local blocks, script, plan = FIG:render_plan(DATA, FIG.panels)
t.is(#plan, 5, "2 single panels + 2 heatmaps (each layer) + 1 scatter")
t.is(plan[2].empty, "no outlier anywhere", "all-zero counts with zero_is_empty: empty, with the reason")
t.is(plan[3].title, "A of layer 2", "each: the title names the coordinate")
t.is(plan[4].empty, "no attention in layer 3", "an all-NaN slice is empty, reason with the coordinate")
t.is(plan[5].empty, "no point", "a zero-length dim is empty")
t.is(#blocks, 2, "only the panels with data get a data block")
t.ok(script:find("rows = 2; cols = 3", 1, true) and script:find("load panels . 'empty.gp'", 1, true), "panel script: layout and empty template", script)
t.ok(script:find("empty_msg = 'no outlier anywhere'", 1, true), "panel script: the empty panel says why")

-- series over a dim, a var with one more dim than x, error bars, value labels, fixed slices,
-- "{=var}" / "{@attr}" in titles, one y axis for all the panels of a declaration
local F2 = figure.declare{
  title = "peak at layer {=peak}, τ = {@tau}",
  dims = { { "variant", labels = true }, { "layer" }, { "rank" } },
  vars = {
    { "top", dims = { "variant", "layer", "rank" }, long_name = "top", units = "1", label = "top-{rank}" },
    { "top_sd", dims = { "variant", "layer", "rank" }, long_name = "sd", units = "1" },
    { "loss", dims = { "variant", "layer" }, long_name = "loss", units = "1" },
    { "ratio", dims = { "variant" }, long_name = "ratio", units = "1" },
    { "peak", dims = {}, long_name = "peak", units = "1", type = "int" },
  },
  panels = {
    { kind = "line", x = "layer", y = "top", err = "top_sd", each = "variant", same_y = true, title = "{variant}: ratio {=ratio}" },
    { kind = "line", x = "layer", series = "variant", y = "loss", title = "loss" },
    { kind = "bars", x = "layer", y = "top", at = { variant = 1, rank = 0 }, values = "%.1f", title = "{variant}, rank {rank}" },
  },
}
local D2 = { coords = { variant = { "softmax", "50 % sparse" }, layer = { 0, 1, 2 }, rank = { 1, 2 } },
             vars = { top = { { { 10, 5 }, { 20, 6 }, { 0 / 0, 0 / 0 } }, { { 1, 0.5 }, { 2, 1 }, { 3, 2 } } },
                      top_sd = { { { 1, 1 }, { 1, 1 }, { 0 / 0, 0 / 0 } }, { { 0, 0 }, { 0, 0 }, { 0, 0 } } },
                      loss = { { 3, 2, 1 }, { 4, 3, 2 } }, ratio = { 2.5, 0 / 0 }, peak = 1 }, attrs = { tau = 7 } }
local b2, s2, p2 = F2:render_plan(D2, F2.panels)
t.is(#p2, 4, "each variant + one series panel + one fixed slice")
t.is(p2[1].title, "softmax: ratio 2.5", "{=var} takes the panel's slice of a var")
t.is(p2[2].title, "50 % sparse: ratio n/a", "an undefined value in a title is n/a")
t.is(p2[4].title, "50 % sparse, rank 1", "at fixes a slice; its labels name it")
t.ok(s2:find("fig_title = 'peak at layer 1, τ = 7'", 1, true), "{=scalar} and {@attr} in the figure title", s2)
t.is(table.concat(b2[1].columns, "|"), "layer|top-1|top-2|sd top-1|sd top-2", "one series per coordinate of the extra dim, then the sds")
t.is(b2[1].rows[3][2] ~= b2[1].rows[3][2] and "NaN" or "defined", "NaN", "an undefined point stays undefined")
t.ok(s2:find("xmin = 0; xmax = 1;", 1, true), "a line's x axis spans only the points drawn (layer 2 undefined in panel 1)", s2)
local ylos = {}
for lo, hi in s2:gmatch("yset = 1\n[^\n]*\nylo = ([^;]+); yhi = ([^;]+);") do ylos[#ylos + 1] = lo .. ":" .. hi end
t.ok(#ylos == 2 and ylos[1] == ylos[2], "same_y: both variant panels get one y range (" .. table.concat(ylos, " ") .. ")")
t.is(table.concat(b2[3].columns, "|"), "layer|softmax|50 % sparse", "series = dim: one line per coordinate, named by its label")
t.is(b2[4].rows[2][4], "2.0", "values: each bar's value as text")
t.ok(s2:find("'50 %% sparse' 1", 1, true) == nil, "no categorical x axis in these panels")
local v2 = figure.values(F2, D2)
t.is(v2.top(2, 3, 1), 3, "values: an array var indexed by its dims, 1-based")
ok, err = pcall(function() return v2.top(3, 1, 1) end)
t.ok(not ok and tostring(err):find("out of 1..2", 1, true), "values: an index out of range is an error", err)
-- a categorical axis: % in a label is escaped (gnuplot formats tick labels), long labels are broken
local F3 = figure.declare{ title = "x", dims = { { "setting", labels = true } },
  vars = { { "ppl", dims = { "setting" }, long_name = "p", units = "1" } },
  panels = { { kind = "bars", x = "setting", y = "ppl" } } }
local _, s3 = F3:render_plan({ coords = { setting = { "FP", "50 % sparse, per layer" } }, vars = { ppl = { 20, 25 } } }, F3.panels)
t.ok(s3:find("''50 %% sparse, per layer'' 1", 1, true), "a tick label: % doubled (a label is a format)", s3)
_, s3 = F3:render_plan({ coords = { setting = { "a", "b", "c", "d", "e", "50 % sparse, per layer" } }, vars = { ppl = { 1, 2, 3, 4, 5, 6 } } }, F3.panels)
t.ok(s3:find([["50 %%\nsparse,\nper layer" 5]], 1, true), "six labels: the long one broken at spaces into lines", s3)
-- an apostrophe in a rotated label: double-quoted, and the command gnuplot evaluates reads back
_, s3 = F3:render_plan({ coords = { setting = { "W8 alone", "A8 alone", "A8 at sums", "A8 at linear outputs", "q·kᵀ",
                                                "softmax", "norms", "SiLU", "SwiGLU's silu(gate)·up" } },
                         vars = { ppl = { 1, 2, 3, 4, 5, 6, 7, 8, 9 } } }, F3.panels)
local xcmd = s3:match("\n(xtics_cmd = 'set xtics[^\n]+)")
t.ok(xcmd and xcmd:find([["SwiGLU''s silu(gate)·up" 8]], 1, true), "a label with an apostrophe goes in double quotes", xcmd)
do
  local gp = os.tmpname()
  local f = io.open(gp, "w")
  f:write((xcmd or "") .. "\neval xtics_cmd\nprint 'tics read'\n")
  f:close()
  local out = t.sh("gnuplot " .. gp .. " 2>&1")
  os.remove(gp)
  t.ok(out:find("tics read", 1, true) and not out:find("unexpected", 1, true), "gnuplot reads the tick command with the apostrophe", out)
end
-- a constant heat map keeps its value (its colour scale does not centre on it)
local F4 = figure.declare{ title = "x", dims = { { "r" }, { "c" } },
  vars = { { "z", dims = { "r", "c" }, long_name = "z", units = "1" } }, panels = { { kind = "heatmap", z = "z" } } }
local _, s4 = F4:render_plan({ coords = { r = 2, c = 2 }, vars = { z = { { 0, 0 }, { 0, 0 } } } }, F4.panels)
t.ok(s4:find("zmin = 0; zmax = 0;", 1, true), "a constant map: zmin = zmax (heatmap.gp then scales from 0)", s4)

-- NetCDF: categorical labels, undefined values, empty dims, scalars
local tmp = os.tmpname()
os.remove(tmp)
figure.write_netcdf(tmp .. ".nc", FIG, DATA)
local dump = t.sh("ncdump " .. tmp .. ".nc")
t.ok(dump:find('category:flag_values = 0, 1 ;', 1, true) and dump:find('category:flag_meanings = "initial delimiter" ;', 1, true),
     "categorical coordinate: CF flag_values and flag_meanings", dump)
t.ok(dump:find('k:labels = "[\\"<bos>\\",\\",\\"]" ;', 1, true), "categorical coordinate: the labels as JSON", dump)
t.ok(dump:find('k:flag_meanings = "x3Cbosx3E x2C" ;', 1, true), "flag_meanings are CF words (other characters as xHH)", dump)
t.ok(dump:find("top = 5, _ ;", 1, true) and dump:find("top:_FillValue = NaN ;", 1, true), "undefined double values are NaN (_FillValue NaN)", dump)
t.ok(dump:find("cnt:_FillValue = -2147483647 ;", 1, true), "int variables carry an int _FillValue", dump)
t.ok(dump:find("pt:empty = 1 ;", 1, true) and dump:find("px = _ ;", 1, true), "a zero-length dim is written with length 1, undefined", dump)
t.ok(dump:find("double ratio ;", 1, true) and dump:find("ratio = 2.5 ;", 1, true), "a scalar var is a 0-d variable", dump)
t.ok(dump:find(":tau = 7 ;", 1, true), "data.attrs become global attributes", dump)
os.remove(tmp .. ".nc")

-- ---------------------------------------------------------------- inspect: hand-made cases
-- category_share: queries of other categories only; T = 3, key 0 initial
local A = { 1, 0, 0,
            0.8, 0.2, 0,
            0.6, 0.3, 0.1 }
near(inspect.category_share(A, 3, { "initial", "other", "other" }, "initial"), 0.7, 1e-12, "category_share on the initial token: (0.8 + 0.6) / 2")
t.ok(inspect.category_share(A, 3, { "other", "other", "other" }, "delimiter") ~= inspect.category_share(A, 3, { "other", "other", "other" }, "delimiter"),
     "category_share without such keys is NaN")
local r = inspect.received(A, 3)
near(r[1], 2.4 / 3, 1e-12, "received: column mean of A")

-- the no-op's gap: p = e^M/(e^M + n − 1) with equal other scores -> gap = M exactly
local M, n = 3.0, 5
local scores = { M, 0, 0, 0, 0 }
local p = inspect.softmax_share(scores, 1)
near(p, math.exp(M) / (math.exp(M) + n - 1), 1e-12, "softmax_share of the sink")
near(inspect.required_gap(p, n), M, 1e-9, "required_gap recovers M for equal other scores")
near(inspect.score_gap(scores, 1), M, 1e-12, "score_gap = M for equal other scores")
local uneq = { 3, 1, -1, 0.5, -0.5 }
t.ok(inspect.score_gap(uneq, 1) >= inspect.required_gap(inspect.softmax_share(uneq, 1), 5) - 1e-12,
     "score_gap >= required_gap for unequal scores (Jensen)")

-- the hypersphere: ‖x̂‖ = √d without eps, layernorm and rmsnorm
local x = { 3, -1, 4, 1, -5, 9 }
near(inspect.norm(inspect.normalized(x, "layernorm", 0)), math.sqrt(6), 1e-12, "layernorm without gain: norm sqrt(d)")
near(inspect.norm(inspect.normalized(x, "rmsnorm", 0)), math.sqrt(6), 1e-12, "rmsnorm without gain: norm sqrt(d)")

-- principal angles: the same plane 0°, orthogonal planes 90°, a 45° rotation
local e = function(i) local v = { 0, 0, 0, 0 } v[i] = 1 return v end
local pa = inspect.principal_angles({ e(1), e(2) }, { e(2), e(1) })
near(pa[1], 0, 1e-6, "principal angle of a plane with itself") near(pa[2], 0, 1e-6, "both angles 0")
pa = inspect.principal_angles({ e(1), e(2) }, { e(3), e(4) })
near(pa[1], 90, 1e-6, "orthogonal planes: 90°")
local s2 = math.sqrt(0.5)
pa = inspect.principal_angles({ e(1) }, { { s2, 0, s2, 0 } })
near(pa[1], 45, 1e-6, "a line rotated by 45°")
-- the chance level: random lines in R^2 are uniform on [0°, 90°] (mean 45°, sd 90/√12 = 26.0°);
-- in R^3 |cos| is uniform on [0, 1], so the mean angle is ∫ acos c dc = 1 rad; two planes of R^3
-- always share a line (0°); the same seed gives the same list, another seed another
local c2m, c2s = require("outlierlab.judge.seeds").stats(inspect.chance_angles(2, 1, 20000, 7))
near(c2m, 45, 0.6, "chance angle of lines in R^2: mean 45° (4.5 standard errors)")
near(c2s, 90 / math.sqrt(12), 0.6, "chance angle of lines in R^2: sd 26.0°")
near(inspect.mean(inspect.chance_angles(3, 1, 20000, 7)), math.deg(1), 0.5, "chance angle of lines in R^3: mean 1 rad = 57.30°")
near(math.max(unpack(inspect.chance_angles(3, 2, 200, 7))), 0, 1e-5, "two planes of R^3 share a line: smallest angle 0")
local ca, cb, cc = inspect.chance_angles(8, 2, 5, 3), inspect.chance_angles(8, 2, 5, 3), inspect.chance_angles(8, 2, 5, 4)
t.ok(ca[5] == cb[5] and ca[5] ~= cc[5], "chance angles: the same seed the same list, another seed another")

-- top right singular vectors of W = diag-like (2 × 3): σ = 3, 2 along e1, e3
local W = { 0, 0, 2,
            3, 0, 0 }
local vecs, sig = inspect.top_right_singular(W, 2, 3, 2)
near(sig[1], 3, 1e-9, "largest singular value") near(sig[2], 2, 1e-9, "second singular value")
near(math.abs(vecs[1][1]), 1, 1e-9, "first right singular vector is ±e1")
near(math.abs(vecs[2][3]), 1, 1e-9, "second right singular vector is ±e3")

-- SO Fig. 7: one channel's part of the FFN output
local xr = { 10, 1, -1 }                  -- x_down of the token (F = 3)
local Wd = { 2, 1, 1,                     -- W_down (C = 2 × F = 3)
             0.1, 1, 0 }
local part, share, out = inspect.channel_contribution(xr, Wd, 3, 1, 1)
near(out, 20, 1e-12, "FFN output 10·2 + 1·1 − 1·1") near(part, 20, 1e-12, "channel 1's part") near(share, 1, 1e-12, "its share")

-- SO Fig. 8: score split by dimension and the top-2 share
local q = { 1, 2, 0,   1, 0, 0 }          -- 2 queries × HD 3
local sd = inspect.score_by_dim(q, { 4, 1, 5 }, 3, { 1, 2 })
near(sd[1], 4 / math.sqrt(3), 1e-12, "dim 0: mean(1·4, 1·4)/√3") near(sd[2], 1 / math.sqrt(3), 1e-12, "dim 1: mean(2·1, 0)/√3")
local sh, dims = inspect.top_share({ 5, 1, 4 }, 2)
near(sh, 0.9, 1e-12, "top-2 share 9/10") t.is(table.concat(dims, ","), "0,2", "top-2 dims (0-based)")
near(inspect.row_norms({ 3, 4, 0, 1 }, 2, 2)[1], 5, 1e-12, "row norm")

-- QT Fig. 10: A·V and the owner head of a dimension
local AV = inspect.matmul({ 1, 0, 0.5, 0.5 }, { 2, 4, 6, 8 }, 2, 2, 2)
t.is(table.concat(AV, ","), "2,4,4,6", "A·V by hand")
local ctx = ol.Context{ seed = 1 }
local wo = ctx:tensor({ 2, 4 }, { persistent = true, name = "wo" })
for i, val in ipairs({ 1, 1, 0, 0,   0, 0.1, 3, 4 }) do wo.data[i - 1] = val end
local head, norm = inspect.owner_head(wo, 1, 2, 2)
t.is(head, 1, "owner head of dim 1: the head with the largest W_o slice") near(norm, 5, 1e-12, "its slice norm")

-- so-fig1/10/23/24: top-1/median and the τ·mean count; max-pooling of |W|
local rc, cnt = overview.ratio_count({ 1, -1, 2, 100, 1 }, 3)
near(rc, 100, 1e-12, "top-1 / median |x|") t.is(cnt, 1, "one element above 3·mean|x| (mean 21)")
local w4 = ctx:tensor({ 2, 4 }, { persistent = true, name = "w4" })
for i, val in ipairs({ 1, -7, 2, 3,   0, 1, -1, 5 }) do w4.data[i - 1] = val end
local pooled, nr, nc = overview.pool_abs(w4, 1, 2)
t.is(nr .. "x" .. nc .. ":" .. table.concat(pooled, ","), "1x2:7,5", "pool_abs: max |w| per block")

-- every experiment with a figure declaration loads and has a plot stage (organism's is its own)
for _, id in ipairs({ "qt-fig10", "qt-fig14", "qt-fig15", "qt-fig16", "so-fig1", "so-fig4", "so-fig7", "so-fig8",
                      "so-fig9", "so-fig10", "so-fig23", "so-fig24", "so-app-d3", "blog-noop",
                      "qt-fig1", "qt-fig2", "qt-fig3", "qt-table1", "qt-table2", "so-fig3", "so-fig5", "so-fig6",
                      "so-fig11", "so-fig12", "so-table1", "so-table3", "emergence" }) do
  local chunk, lerr = loadfile(OUTLIERLAB_ROOT .. "/experiments/" .. id .. ".lua")
  local eok, exp = pcall(chunk or error, lerr)
  t.ok(eok and exp.id == id and exp.profiles.quick and exp.stages[3][1] == "plot", id .. ": loads, has a quick profile and a plot stage", exp)
end

return t.done()
