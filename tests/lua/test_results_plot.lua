-- test_results_plot — the gnuplot side of the results: .dat export (blocks, quoting,
-- number format), every plots/*.gp renders a PNG and a PDF from a small hand-made input,
-- and the same input gives a byte-identical PNG.
local t = require "outlierlab.tap"
local plot = require "outlierlab.plot"

local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir)

local function slurp(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

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

-- hand-made inputs for every figure script
local function seq(n, f) local r = {} for i = 1, n do r[i] = f(i) end return r end
local inputs = {
  ["qt-fig1"] = {
    { columns = { "token", "layer 2" }, rows = { { "[SEP]", 40 }, { ".", 22 }, { ",", 5 } } },
    { columns = { "channel", "layer 2" }, rows = seq(16, function(i) return { i - 1, i == 7 and 60 or 1 } end) },
    { columns = { "token", "layer 3" }, rows = { { "[SEP]", 30 }, { "the", 2 } } },
    { columns = { "channel", "layer 3" }, rows = seq(16, function(i) return { i - 1, i == 7 and 30 or 0 } end) },
  },
  ["qt-fig2"] = {
    { matrix = seq(6, function(i) return seq(6, function(j) return j == 1 and 0.8 or 0.04 end) end) },
    { matrix = seq(6, function(i) return seq(4, function(j) return (i == 1 and 0.01 or 1) * (j % 2 == 0 and 1 or -1) end) end) },
    { matrix = seq(6, function(i) return seq(4, function(j) return 0.2 * j end) end) },
    { columns = { "key", "token", "attention received", "value norm", "delimiter" },
      rows = seq(6, function(i) return { i - 1, i == 1 and "[SEP]" or "w", i == 1 and 0.8 or 0.04, i == 1 and 0.02 or 2, i == 1 and 1 or 0 } end) },
  },
  ["so-fig3"] = {
    { columns = { "layer", "top1", "top2", "top3", "median" },
      rows = seq(4, function(i) return { i - 1, 100 * i, 50 * i, 20, 0.5 } end) },
    { columns = { "category", "outlier tokens" }, rows = { { "initial", 8 }, { "delimiter", 3 }, { "weak", 2 }, { "other", 0 } } },
    { columns = { "channel", "outlier count" }, rows = seq(8, function(i) return { i - 1, i == 3 and 9 or 0 } end) },
  },
  ["so-fig6"] = {
    { columns = { "layer", "attention outliers" }, rows = seq(4, function(i) return { i - 1, i } end) },
    { columns = { "category", "attention outliers" }, rows = { { "initial", 8 }, { "delimiter", 2 }, { "weak", 0 }, { "other", 0 } } },
    { matrix = seq(4, function(i) return seq(2, function(j) return i + j end) end) },
  },
  ["emergence"] = {
    { columns = { "step", "softmax", "softmax" }, rows = seq(5, function(i) return { i * 10, 2 ^ i, 3 + i } end) },
    { columns = { "step", "clipped_softmax", "clipped_softmax" }, rows = seq(5, function(i) return { i * 10, 2 + i, 3 } end) },
  },
}
local names = {}
for name in pairs(inputs) do names[#names + 1] = name end
table.sort(names)
for _, name in ipairs(names) do
  local ok, files = pcall(plot.figure, dir, name, name, inputs[name])
  t.ok(ok, name .. ": renders", files)
  local png = slurp(dir .. "/" .. name .. ".png") or ""
  local pdf = slurp(dir .. "/" .. name .. ".pdf") or ""
  t.ok(png:sub(1, 8) == "\137PNG\r\n\26\n" and #png > 10000, name .. ": PNG magic and non-trivial size (" .. #png .. " bytes)")
  t.ok(pdf:sub(1, 5) == "%PDF-" and #pdf > 2000, name .. ": PDF magic and size (" .. #pdf .. " bytes)")
  plot.render(name, dir .. "/" .. name .. ".dat", dir .. "/" .. name .. "-again", { "png" })
  t.ok(slurp(dir .. "/" .. name .. "-again.png") == png, name .. ": same input gives a byte-identical PNG")
end
t.ok(not (io.popen("ls -a " .. dir):read("*a")):find(".tmp-", 1, true), "no temporary figure files left")
t.throws(function() plot.render("no-such-figure", dir .. "/x.dat", dir .. "/z") end, "no gnuplot script",
         "unknown script is an error")
t.throws(function() plot.render("qt-fig1", dir .. "/missing.dat", dir .. "/z", { "png" }) end, "no data file",
         "missing data file is an error")
local bad = plot.write_dat(dir .. "/bad.dat", { { columns = { "a" }, rows = { { "x" } } } })
t.throws(function() plot.render("emergence", bad, dir .. "/z", { "png" }) end, "gnuplot failed",
         "gnuplot failure is reported with its message")
t.ok(slurp(dir .. "/z.png") == nil, "a failed render leaves no figure")

if os.getenv("KEEP") then print("# kept " .. dir) else os.execute("rm -rf " .. dir) end
return t.done()
