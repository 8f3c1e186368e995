-- require-graph — the Lua package's require graph in numbers: modules, edges and lines per
-- layer (the layers of tests/lua/test_layering.lua), the largest module, and the experiment
-- files' edges into the package (which modules they read and how many distinct ones).
--   bin/outlierlab run scripts/require-graph.lua [--root=DIR]
local ol = require "outlierlab"
local root = (arg and arg[1] and arg[1]:match("^%-%-root=(.+)")) or ol.root

local LAYERS = { "base", "nn", "models", "data", "train", "pretrained", "measure", "judge", "compress",
                 "recipes", "figure", "runner", "top" }
local PREFIX = {
  base = { "outlierlab", "outlierlab.config", "outlierlab.util" },
  nn = { "outlierlab.nn", "outlierlab.optim" }, models = { "outlierlab.models" }, data = { "outlierlab.data" },
  train = { "outlierlab.train" }, pretrained = { "outlierlab.pretrained" }, measure = { "outlierlab.measure" },
  judge = { "outlierlab.judge" }, compress = { "outlierlab.compress" }, recipes = { "outlierlab.recipes" },
  figure = { "outlierlab.figure" }, runner = { "outlierlab.runner" },
  top = { "outlierlab.experiment", "outlierlab.ptq", "outlierlab.cli" },   -- (the facades: before)
}
local function layer_of(mod)
  local best, len = nil, -1
  for _, l in ipairs(LAYERS) do
    for _, p in ipairs(PREFIX[l]) do
      if (mod == p or (p ~= "outlierlab" and mod:sub(1, #p + 1) == p .. ".")) and #p > len then best, len = l, #p end
    end
  end
  return best or "?"
end
local function edges(path)
  local out, seen = {}, {}
  for line in io.lines(path) do
    local code = line:gsub("^%s*%-%-.*$", ""):gsub("%s%-%-%s.*$", "")
    for m in code:gmatch("require%s*%(?%s*[\"'](outlierlab[%w_.]*)[\"']") do
      if not seen[m] then seen[m] = true out[#out + 1] = m end
    end
  end
  return out
end
local function lines(path) local n = 0 for _ in io.lines(path) do n = n + 1 end return n end

local per = {}
for _, l in ipairs(LAYERS) do per[l] = { mods = 0, edges = 0, lines = 0 } end
local n_mod, n_edge, largest, largest_n = 0, 0, nil, 0
local p = io.popen("cd '" .. root .. "/lua' && find outlierlab -name '*.lua' | sort")
for f in p:lines() do
  local name = f:gsub("%.lua$", ""):gsub("/init$", ""):gsub("/", ".")
  local l = layer_of(name)
  per[l] = per[l] or { mods = 0, edges = 0, lines = 0 }
  local e, n = #edges(root .. "/lua/" .. f), lines(root .. "/lua/" .. f)
  per[l].mods, per[l].edges, per[l].lines = per[l].mods + 1, per[l].edges + e, per[l].lines + n
  n_mod, n_edge = n_mod + 1, n_edge + e
  if n > largest_n then largest, largest_n = f, n end
end
p:close()
print(string.format("package: %d modules, %d require edges, largest %s (%d lines)", n_mod, n_edge, largest, largest_n))
for _, l in ipairs(LAYERS) do
  local v = per[l]
  if v.mods > 0 then print(string.format("  %-10s %3d modules %4d edges %6d lines", l, v.mods, v.edges, v.lines)) end
end
local xe, distinct, files, ex = 0, {}, 0, {}
p = io.popen("cd '" .. root .. "' && ls experiments/*.lua")
for f in p:lines() do
  files = files + 1
  for _, m in ipairs(edges(root .. "/" .. f)) do xe = xe + 1 distinct[m] = true ex[m] = (ex[m] or 0) + 1 end
end
p:close()
local nd, top = 0, {}
for m, c in pairs(distinct) do nd = nd + 1 top[#top + 1] = { m, ex[m] } end
table.sort(top, function(a, b) return a[2] > b[2] or (a[2] == b[2] and a[1] < b[1]) end)
print(string.format("experiments: %d files, %d require edges into %d package modules", files, xe, nd))
for _, e in ipairs(top) do print(string.format("  %3d %s (%s)", e[2], e[1], layer_of(e[1]))) end
