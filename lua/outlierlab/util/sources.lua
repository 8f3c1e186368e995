-- util/sources — which source files a piece of code runs through, and their content hash.
--
-- A cached result (a trained model, a tracked curve) is keyed by the code that computed it.
-- Rather than a list of folders, the Lua part of that code is the static require closure of
-- the entry points: the file that defines the trainer, the files of the attention variants
-- the spec names, and every module they require (require "x", require("x"),
-- pcall(require, "x"), in code and in functions), found on package.path wherever it lives —
-- inside lua/outlierlab or in a user's folder. Each file enters the hash under a name that
-- does not depend on where the checkout is (its module name, or for a file that is not a
-- module its path below the checkout, else its base name), so the same tree gives the same
-- key in any directory. The C engine has no require graph: its files enter by name
-- (engine_files), less the ones the caller leaves out.
--
-- closure{ roots = {...}, stop = {[module] = true} }: roots are module names or { file = path };
-- a module in stop is neither entered nor followed (the boundary between two keys: the
-- trainer's key stops at the tracker's measuring module, which has a key of its own).
local fs = require "outlierlab.util.fs"

local M = {}

local function root_dir()
  local ok, ol = pcall(require, "outlierlab")
  return ok and ol.root or "."
end

-- the require edges of a Lua file: module names, in order of appearance (comment lines and
-- trailing " -- " comments left out, as tests/lua/test_layering.lua reads them)
function M.requires(path)
  local out, seen = {}, {}
  local f = io.open(path, "r")
  if not f then return out end
  for line in f:lines() do
    local code = line:gsub("^%s*%-%-.*$", ""):gsub("%s%-%-%s.*$", "")
    for _, pat in ipairs({ "require%s*%(?%s*[\"']([%w_.%-]+)[\"']", "pcall%(%s*require%s*,%s*[\"']([%w_.%-]+)[\"']" }) do
      for m in code:gmatch(pat) do
        if m:sub(-1) ~= "." and not seen[m] then seen[m] = true out[#out + 1] = m end
      end
    end
  end
  f:close()
  return out
end

-- the name a file enters the hash under: its module name when it is one on package.path,
-- else its path below the checkout, else its base name
function M.name_of(path)
  local root = root_dir()
  local best
  for dir in package.path:gmatch("([^;]+)") do
    local pre, post = dir:match("^(.-)%?(.*)$")
    if pre and pre ~= "" and path:sub(1, #pre) == pre and path:sub(-#post) == post and #path > #pre + #post then
      local mid = path:sub(#pre + 1, #path - #post)
      local name = mid:gsub("/", ".")
      -- (".../x/init.lua" also matches "?.lua" as x.init: the shortest name require finds it under wins)
      if not mid:find("%.") and package.searchpath(name, package.path) == path and (not best or #name < #best) then
        best = name
      end
    end
  end
  if best then return best end
  if path:sub(1, #root + 1) == root .. "/" then return path:sub(#root + 2) end
  return path:match("([^/]+)$")
end

-- the static require closure of roots: a sorted list of { name =, path = }
function M.closure(o)
  local stop = o.stop or {}
  local seen, out = {}, {}
  local function add_file(name, path)
    if seen[name] then return end
    seen[name] = true
    out[#out + 1] = { name = name, path = path }
    for _, m in ipairs(M.requires(path)) do
      if not stop[m] and not seen[m] then
        local p = package.searchpath(m, package.path)
        if p then add_file(m, p) end   -- not found on package.path: a C or built-in module (ffi, bit, jit)
      end
    end
  end
  for _, r in ipairs(o.roots or {}) do
    if type(r) == "table" and r.file then
      local name = M.name_of(r.file)
      if not stop[name] then add_file(name, r.file) end
    elseif type(r) == "string" and not stop[r] then
      local p = package.searchpath(r, package.path)
      if not p then error("util.sources: module '" .. r .. "' not found on package.path", 2) end
      add_file(r, p)
    end
  end
  table.sort(out, function(a, b) return a.name < b.name end)
  return out
end

-- engine/*.c and engine/*.h under root except the base names in `except` (a set), sorted
function M.engine_files(root, except)
  root = root or root_dir()
  local p = io.popen("cd '" .. root:gsub("'", "'\\''") .. "' && find engine -maxdepth 1 \\( -name '*.c' -o -name '*.h' \\) 2>/dev/null")
  local out = {}
  for f in p:lines() do
    if not (except or {})[f:match("([^/]+)$")] then out[#out + 1] = { name = f, path = root .. "/" .. f } end
  end
  p:close()
  table.sort(out, function(a, b) return a.name < b.name end)
  return out
end

-- "name:content-hash" lines of files (the list closure or engine_files returns); a file that
-- cannot be read is hashed as empty
function M.manifest(files)
  local lines = {}
  for _, f in ipairs(files) do lines[#lines + 1] = f.name .. ":" .. fs.hash(fs.read_file(f.path) or "") end
  return lines
end

-- one hash of one or more file lists
function M.hash(...)
  local all = {}
  for _, files in ipairs({ ... }) do
    for _, l in ipairs(M.manifest(files)) do all[#all + 1] = l end
  end
  table.sort(all)
  return fs.hash(table.concat(all, "\n"))
end

return M
