-- test_layering — the Lua package is layered (docs/reference/architecture.md): each module requires only
-- modules of its own layer or of a lower one, and no chain of requires comes back to where it
-- started. The test reads every lua/outlierlab/**/*.lua, takes its require edges
-- (require "outlierlab.x", require("outlierlab.x"), pcall(require, "outlierlab.x"), in code and in
-- functions, not in comments) and fails on
--   * a module of no layer (a new top-level file or folder must be placed below),
--   * an edge to a module that does not exist,
--   * an upward edge (to a higher layer),
--   * a cycle (also within a layer), and
--   * a re-export outside a folder's init.lua: a module whose table takes another package
--     module's functions under its own names (M.x = other.y, M.x = require("outlierlab.y").z,
--     or for k, v in pairs(other) do M[k] = v end), so that every function has one name.
local t = require "tap"
local ol = require "outlierlab"

-- The layers, lowest first. A name stands for the module and everything under it
-- ("outlierlab.util" = outlierlab.util.*); "outlierlab" is the engine binding alone.
local LAYERS = {
  { "base",       { "outlierlab", "outlierlab.config", "outlierlab.util" } },
  { "nn",         { "outlierlab.nn", "outlierlab.optim" } },
  { "models",     { "outlierlab.models" } },
  { "data",       { "outlierlab.data" } },
  { "train",      { "outlierlab.train" } },
  { "pretrained", { "outlierlab.pretrained" } },
  { "measure",    { "outlierlab.measure" } },     -- what a model does: activations, attention, weights
  { "judge",      { "outlierlab.judge" } },       -- when a number counts: seeds, thresholds, verdicts
  { "compress",   { "outlierlab.compress" } },    -- what compression costs: quantisation, pruning
  { "recipes",    { "outlierlab.recipes" } },
  { "figure",     { "outlierlab.figure" } },
  { "report",     { "outlierlab.report" } },      -- one model's outlier report (make report)
  { "runner",     { "outlierlab.runner" } },
  -- the command line
  { "top",        { "outlierlab.cli" } },
}

local function layer_of(mod)
  for i, l in ipairs(LAYERS) do
    for _, name in ipairs(l[2]) do
      if mod == name or (name ~= "outlierlab" and mod:sub(1, #name + 1) == name .. ".") then return i, l[1] end
    end
  end
end

-- every module of the package: name -> file
local root = ol.root .. "/lua/"
local mods, order = {}, {}
local p = io.popen("cd '" .. root .. "' && find outlierlab -name '*.lua' | sort")
for f in p:lines() do
  local name = f:gsub("%.lua$", ""):gsub("/init$", ""):gsub("/", ".")
  mods[name] = f
  order[#order + 1] = name
end
p:close()
t.ok(#order > 40, "the package's modules found", #order)

-- the require edges of one file (comment lines and trailing comments left out)
local function edges(file)
  local out, seen = {}, {}
  for line in io.lines(root .. file) do
    local code = line:gsub("^%s*%-%-.*$", ""):gsub("%s%-%-%s.*$", "")
    for _, pat in ipairs({ "require%s*%(?%s*[\"'](outlierlab[%w_.]*)[\"']", "pcall%(%s*require%s*,%s*[\"'](outlierlab[%w_.]*)[\"']" }) do
      for m in code:gmatch(pat) do
        if not seen[m] then seen[m] = true out[#out + 1] = m end
      end
    end
  end
  return out
end

local graph, unplaced, missing, upward, n_edges = {}, {}, {}, {}, 0
for _, m in ipairs(order) do
  local lm, lname = layer_of(m)
  if not lm then unplaced[#unplaced + 1] = m end
  graph[m] = edges(mods[m])
  for _, d in ipairs(graph[m]) do
    n_edges = n_edges + 1
    if d:sub(-1) == "." then
      -- require("outlierlab." .. k): the binding's submodules on demand (ol.nn, ...), no edge
    elseif not mods[d] then
      missing[#missing + 1] = m .. " -> " .. d
    else
      local ld, dname = layer_of(d)
      if lm and ld and ld > lm then upward[#upward + 1] = string.format("%s (%s) -> %s (%s)", m, lname, d, dname) end
    end
  end
end
t.diag(string.format("%d modules, %d require edges, %d layers", #order, n_edges, #LAYERS))
t.ok(#unplaced == 0, "every module belongs to a layer", table.concat(unplaced, ", "))
t.ok(#missing == 0, "every required module exists", table.concat(missing, "\n"))
t.ok(#upward == 0, "no upward edge (a module requires only its own layer and the ones below)", table.concat(upward, "\n"))

-- re-exports: in a module that is not a folder's init.lua, an assignment into the module table
-- whose value is a field of another package module (a local bound to its require, or the
-- require itself), or a loop copying another module's table into it
local function reexports(file)
  local out, bound = {}, {}
  local n = 0
  for line in io.lines(root .. file) do
    n = n + 1
    local code = line:gsub("^%s*%-%-.*$", ""):gsub("%s%-%-%s.*$", "")
    local v, m = code:match("^local%s+([%w_]+)%s*=%s*require%s*%(?%s*[\"'](outlierlab[%w_.]*)[\"']%s*%)?%s*$")
    if v then bound[v] = m end
    local lhs, rhs = code:match("^(M%.[%w_]+[%w_%s,.M]*)=%s*(.-)%s*$")
    if lhs and not rhs:match("^=") then
      for item in (rhs .. ","):gmatch("%s*([^,]+),") do
        local var = item:match("^([%w_]+)%.[%w_]+$")
        if (var and bound[var]) or item:match("^require%s*%(?%s*[\"']outlierlab") then
          out[#out + 1] = string.format("%s:%d: %s", file, n, code)
          break
        end
      end
    end
    local copied = code:match("for%s+([%w_]+)%s*,%s*[%w_]+%s+in%s+pairs%(%s*([%w_]+)%s*%)%s*do%s+M%[")
    if copied then
      local src = code:match("pairs%(%s*([%w_]+)%s*%)")
      if bound[src] then out[#out + 1] = string.format("%s:%d: %s", file, n, code) end
    end
  end
  return out
end
local reexp = {}
for _, m in ipairs(order) do
  if not mods[m]:match("/init%.lua$") and mods[m] ~= "outlierlab/init.lua" then
    for _, r in ipairs(reexports(mods[m])) do reexp[#reexp + 1] = r end
  end
end
t.ok(#reexp == 0, "no re-export outside a folder's init.lua (one name per function)", table.concat(reexp, "\n"))
do   -- the check finds what it is meant to find
  local tmpf = os.tmpname()
  local f = assert(io.open(tmpf, "w"))
  f:write('local a = require "outlierlab.util.fs"\nlocal M = {}\nM.h = a.hash\nfor k, v in pairs(a) do M[k] = v end\nM.ok = 1\nreturn M\n')
  f:close()
  local saved = root
  root = ""
  local found = reexports(tmpf)
  root = saved
  os.remove(tmpf)
  t.is(#found, 2, "the re-export check finds an assignment and a copying loop, and nothing else", table.concat(found, "\n"))
end

-- cycles: depth-first search, a back edge closes a cycle (reported with its path)
local state, stack, cycles = {}, {}, {}
local function visit(m)
  state[m] = "open"
  stack[#stack + 1] = m
  for _, d in ipairs(graph[m] or {}) do
    if mods[d] then
      if state[d] == "open" then
        local path, on = {}, false
        for _, s in ipairs(stack) do
          if s == d then on = true end
          if on then path[#path + 1] = s end
        end
        path[#path + 1] = d
        cycles[#cycles + 1] = table.concat(path, " -> ")
      elseif not state[d] then
        visit(d)
      end
    end
  end
  stack[#stack] = nil
  state[m] = "done"
end
for _, m in ipairs(order) do if not state[m] then visit(m) end end
t.ok(#cycles == 0, "no require cycle", table.concat(cycles, "\n"))

-- the test itself finds what it is meant to find: an upward edge and a cycle in a made-up graph
local function finds(g)
  local st, found = {}, false
  local function v(m)
    st[m] = "open"
    for _, d in ipairs(g[m] or {}) do
      if st[d] == "open" then found = true elseif not st[d] then v(d) end
    end
    st[m] = "done"
  end
  for m in pairs(g) do if not st[m] then v(m) end end
  return found
end
t.ok(finds({ a = { "b" }, b = { "c" }, c = { "a" } }) and not finds({ a = { "b" }, b = { "c" }, c = {} }),
     "the cycle search finds a cycle and only a cycle")
t.ok(select(1, layer_of("outlierlab.data.corpus")) < select(1, layer_of("outlierlab.runner.run")) and
     select(1, layer_of("outlierlab.util.fs")) == 1 and layer_of("outlierlab.nonexistent") == nil,
     "layers: data below runner, util at the bottom, an unknown top-level name in none")

return t.done()
