-- test_gnuplot — the gnuplot side of the results: .dat export (blocks, quoting,
-- number format), plots/figure.gp renders every panel kind of a declared figure to a PNG and
-- a PDF from a small hand-made input, and the same input gives a byte-identical PNG.
local t = require "tap"
local plot = require "outlierlab.figure.gnuplot"

local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir)

local slurp = t.slurp

-- .dat format
local dat = plot.write_dat(dir .. "/x.dat", {
  { columns = { "token", "layer 2" }, rows = { { "[SEP]", 12 }, { 'a"b', 0.5 }, { "\n", 1 / 3 } } },
  { matrix = { { 1, 2 }, { 3, 0 / 0 } } },
})
t.is(slurp(dat), '"token" "layer 2"\n"[SEP]" 12\n"a\'b" 0.5\n"\\\\n" 0.333333333\n\n\n1 2\n3 NaN\n',
     ".dat: header row, quoted labels, %.9g numbers, blocks split by two blank lines")
t.throws(function() plot.write_dat(dir .. "/y.dat", { { columns = { "a", "b" }, rows = { { 1 } } } }) end,
         "row 1 has 1 cells for 2 columns", "ragged row is an error")
t.ok(slurp(dir .. "/x.dat.tmp") == nil, "no temporary .dat left")

-- the figures: plots/figure.gp draws a declaration's panels (every panel template once, an
-- empty panel among them) from a small hand-made input; the same input gives the same PNG
local figure = require "outlierlab.figure"
local function seq(n, f) local r = {} for i = 1, n do r[i] = f(i) end return r end
local FIG = figure.declare{
  title = "hand-made panels",
  dims = { { "layer" }, { "category", labels = true }, { "q" }, { "k" }, { "y" }, { "x" }, { "channel" }, { "bin" }, { "pt" } },
  vars = {
    { "top", dims = { "layer" }, long_name = "top", units = "1", label = "top-1" },
    { "median", dims = { "layer" }, long_name = "median", units = "1", label = "median" },
    { "count", dims = { "category" }, long_name = "count", units = "1", label = "count" },
    { "count_sd", dims = { "category" }, long_name = "sd", units = "1" },
    { "A", dims = { "q", "k" }, long_name = "attention", units = "1" },
    { "img", dims = { "y", "x", "channel" }, long_name = "image", units = "1", type = "int" },
    { "hist", dims = { "bin" }, long_name = "histogram", units = "1" },
    { "px", dims = { "pt" }, long_name = "x", units = "1" },
    { "py", dims = { "pt" }, long_name = "y", units = "1" },
    { "none", dims = { "layer" }, long_name = "zeros", units = "1" },
    { "marked", dims = { "q", "k" }, long_name = "cells to circle", units = "1", type = "int" },
  },
  panels = {
    { kind = "line", x = "layer", y = { "top", "median" }, logy = true, title = "line" },
    { kind = "bars", x = "category", y = "count", err = "count_sd", values = "%.3g", title = "bars" },
    { kind = "heatmap", z = "A", marks = "hist", title = "heatmap", cblabel = "p", values = "%.1f" },
    { kind = "rgb", z = "img", circles = "marked", circles_title = "marked cell", title = "rgb" },
    { kind = "histogram", x = "bin", y = "hist", title = "histogram" },
    { kind = "scatter", x = "px", y = "py", title = "scatter" },
    { kind = "bars", x = "layer", y = "none", zero_is_empty = true, why_empty = "nothing here", title = "empty" },
  },
}
local DATA = {
  coords = { layer = { 0, 1, 2, 3 }, category = { "initial", "delimiter", "weak", "other" }, q = 4, k = 4, y = 4, x = 4,
             channel = { "r", "g", "b" }, bin = { 0.1, 0.3, 0.5, 0.7 }, pt = 5 },
  vars = { top = { 100, 200, 150, 20 }, median = { 0.5, 0.4, 0.6, 0.5 }, count = { 8, 3, 2, 0 / 0 }, count_sd = { 1, 0.5, 0, 0 / 0 },
           A = seq(4, function(i) return seq(4, function(j) return j == 1 and 0.7 or 0.1 end) end),
           img = seq(4, function(i) return seq(4, function(j) return { 60 * i, 60 * j, 128 } end) end),
           hist = { 5, 0, 1, 0 }, px = { 1, 2, 3, 4, 5 }, py = { 2, 4, 5, 4, 5 }, none = { 0, 0, 0, 0 },
           marked = { { 1, 0, 0, 0 }, { 0, 0, 0, 0 }, { 0, 0, 2, 0 }, { 0, 0, 0, 0 } } },
}
local ok, files = pcall(figure.draw, dir, "figure", FIG, DATA)
t.ok(ok, "plots/figure.gp renders every panel kind", files)
local png = slurp(dir .. "/figure.png") or ""
local pdf = slurp(dir .. "/figure.pdf") or ""
t.ok(png:sub(1, 8) == "\137PNG\r\n\26\n" and #png > 10000, "figure: PNG magic and non-trivial size (" .. #png .. " bytes)")
t.ok(pdf:sub(1, 5) == "%PDF-" and #pdf > 2000, "figure: PDF magic and size (" .. #pdf .. " bytes)")
plot.render("figure", dir .. "/figure.dat", dir .. "/figure-again", { "png" })
t.ok(slurp(dir .. "/figure-again.png") == png, "figure: same input gives a byte-identical PNG")
-- (plots/history.gp and plots/organism.gp are drawn by the experiment runs of test_experiments.lua)
t.ok(not (io.popen("ls -a " .. dir):read("*a")):find(".tmp-", 1, true), "no temporary figure files left")
t.throws(function() plot.render("no-such-figure", dir .. "/x.dat", dir .. "/z") end, "no gnuplot script",
         "unknown script is an error")
t.throws(function() plot.render("figure", dir .. "/missing.dat", dir .. "/z", { "png" }) end, "no data file",
         "missing data file is an error")
local bad = plot.write_dat(dir .. "/bad.dat", { { columns = { "a" }, rows = { { "x" } } } })
t.throws(function() plot.render("history", bad, dir .. "/z", { "png" }) end, "gnuplot failed",
         "gnuplot failure is reported with its message")
t.ok(slurp(dir .. "/z.png") == nil, "a failed render leaves no figure")

if os.getenv("KEEP") then print("# kept " .. dir) else os.execute("rm -rf " .. dir) end
return t.done()
