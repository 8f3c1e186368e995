-- results — one NetCDF-4 file per run, following CF-1.10 and ACDD-1.3 (engine/io_netcdf.c).
--
--   local results = require "outlierlab.figure.netcdf"
--   local R = results.new("results/qt-fig1/qt-fig1.nc", {
--     title = "...", summary = "...", id = "qt-fig1", profile = "default", seed = 1,
--     config = cfg })                       -- any Lua table; stored as a JSON string
--   R:dim("layer", 2, {2, 3}, { long_name = "transformer layer (0-based)" })
--   R:dim("channel", 128)                 -- coordinate 0..n-1, units "1"
--   R:var("outlier_count_by_channel", {"layer", "channel"}, flat_list,
--         { long_name = "number of 6 sigma outliers per hidden dimension", units = "1", type = "int" })
--   R:close()                             -- writes "<path>.tmp.<pid>", then renames (atomic)
--
-- Every dimension gets a coordinate variable of the same name (CF §4/§5). Every variable
-- must have long_name and units (CF: "1" for counts and ratios). Data are flat row-major
-- Lua lists (or nested lists, flattened) whose length is the product of the dims.
-- Global attributes: title, summary, Conventions, source (version + git commit), history
-- (timestamp + command line), date_created (SOURCE_DATE_EPOCH honoured), id, profile,
-- seed, config (JSON), mpi_ranks, cpu, blas_core and threads (M.machine), the ACDD recommended
-- license, creator_name, institution, project and processing_level (M.provenance), and any extra
-- ones from meta.attrs.
local ffi = require "ffi"
local ol = require "outlierlab"
local C = ol.C

local M = {}

-- ---------------------------------------------------------------- helpers shared with the runner

-- Canonical JSON (util/json: sorted keys, %.17g numbers) for the config attribute
local canonical_json = require("outlierlab.util.json").canonical


-- the output of a shell command, trimmed (nil when it fails or prints nothing)
local function shell(cmd)
  local p = io.popen(cmd .. " 2>/dev/null")
  if not p then return nil end
  local s = p:read("*a") or ""
  p:close()
  s = s:gsub("%s+$", "")
  return s ~= "" and s or nil
end
M.shell = shell

-- git commit of the source tree at run time, or "unknown"
function M.git_commit()
  if M._commit == nil then
    M._commit = shell("git -C '" .. ol.root .. "' rev-parse HEAD") or "unknown"
  end
  return M._commit
end

-- ISO 8601 UTC time: SOURCE_DATE_EPOCH when set (reproducible builds), else now
function M.timestamp()
  local epoch = tonumber(os.getenv("SOURCE_DATE_EPOCH") or "")
  return os.date("!%Y-%m-%dT%H:%M:%SZ", epoch or os.time())
end

-- the command line of this process (bin/outlierlab run FILE --k=v ...)
function M.command_line()
  local argv = require("outlierlab.config").argv   -- set by the CLI (outlierlab.cli)
  if not argv then
    argv = { [0] = "outlierlab" }
    for i = 0, #(arg or {}) do argv[i] = arg[i] end
  end
  local parts = {}
  for i = 0, #argv do if argv[i] then parts[#parts + 1] = tostring(argv[i]) end end
  return table.concat(parts, " ")
end

-- The machine a run computed on: the CPU's model name (/proc/cpuinfo), the OpenBLAS kernels it
-- runs (engine/blas.c: "SkylakeX", "Haswell", "Zen", ...) and the engine's threads. Numbers are bit
-- for bit the same on any thread or rank count of one machine, but another CPU's kernels sum in
-- another order (docs/reference/training.md, "Machines"), so a result says where it was computed.
function M.machine()
  if M._cpu == nil then
    M._cpu = "unknown"
    local f = io.open("/proc/cpuinfo", "r")
    if f then
      for line in f:lines() do
        local name = line:match("^model name%s*:%s*(.-)%s*$")
        if name and name ~= "" then M._cpu = name break end
      end
      f:close()
    end
  end
  local core = C.ol_blas_core()
  return { cpu = M._cpu, blas_core = core ~= nil and ffi.string(core) or "unknown", threads = ol.num_threads() }
end

-- a machine's CPU and kernels (what decides the bits and the speed), "CPU, OpenBLAS X kernels"
function M.machine_kernels(m)
  m = m or M.machine()
  return string.format("%s, OpenBLAS %s kernels", tostring(m.cpu or "?"), tostring(m.blas_core or "?"))
end

-- a machine (this one, or a record read back from run.json) in one line, for summaries and the gallery
function M.machine_line(m)
  m = m or M.machine()
  return string.format("%s, %s thread%s", M.machine_kernels(m), tostring(m.threads or "?"),
                       tonumber(m.threads) == 1 and "" or "s")
end

-- number of MPI ranks of this run (the dist module when present, else Open MPI's env, else 1)
function M.mpi_ranks()
  local ok, dist = pcall(require, "outlierlab.util.dist")
  if ok and type(dist) == "table" then
    for _, f in ipairs({ "size", "world_size" }) do
      if type(dist[f]) == "function" then
        local ok2, n = pcall(dist[f])
        if ok2 and tonumber(n) then return tonumber(n) end
      end
    end
  end
  return tonumber(os.getenv("OMPI_COMM_WORLD_SIZE") or "") or 1
end

-- ---------------------------------------------------------------- the writer

local File = {}
File.__index = File

local types = { float = C.OL_NC_FLOAT, double = C.OL_NC_DOUBLE, int = C.OL_NC_INT }
local name_pat = "^[%a][%w_]*$"

-- Under MPI only world rank 0 writes result files: the other ranks get a writer that accepts
-- every call and writes nothing (they computed the same merged numbers).
local Null = setmetatable({}, { __index = function() return function(self) return self end end })

-- results.new(path, meta): meta.title and meta.summary are required.
function M.new(path, meta)
  local okd, dist = pcall(require, "outlierlab.util.dist")
  if okd and dist.world_rank() ~= 0 then return Null end
  if type(path) ~= "string" or path == "" then error("results.new: path must be a non-empty string", 2) end
  meta = meta or {}
  for _, k in ipairs({ "title", "summary" }) do
    if type(meta[k]) ~= "string" or meta[k] == "" then
      error("results.new(" .. path .. "): meta." .. k .. " is required (ACDD)", 2)
    end
  end
  local self = setmetatable({ path = path, meta = meta, dims = {}, dim_order = {}, vars = {},
                              var_order = {}, closed = false }, File)
  return self
end

local function flatten(data, out)
  for i = 1, #data do
    local v = data[i]
    if type(v) == "table" then flatten(v, out) else out[#out + 1] = v end
  end
  return out
end

local function check_attrs(where, attrs)
  if type(attrs) ~= "table" then error(where .. ": attrs table with long_name and units is required", 3) end
  if type(attrs.long_name) ~= "string" or attrs.long_name == "" then error(where .. ": attribute long_name is required", 3) end
  if type(attrs.units) ~= "string" or attrs.units == "" then error(where .. ": attribute units is required (\"1\" for counts)", 3) end
end

-- R:dim(name, n, coord_values, attrs): a dimension and its coordinate variable.
-- coord_values: list of n numbers (default 0..n-1); attrs: long_name (default name), units
-- (default "1"), type ("int" when every value is an integer, else "double").
function File:dim(name, n, coord_values, attrs)
  local where = "results:dim(" .. tostring(name) .. ") in " .. self.path
  if self.closed then error(where .. ": file already closed", 2) end
  if type(name) ~= "string" or not name:match(name_pat) then error(where .. ": bad dimension name", 2) end
  if self.dims[name] then error(where .. ": dimension defined twice", 2) end
  if type(n) ~= "number" or n < 1 or n ~= math.floor(n) then error(where .. ": length must be a positive integer, got " .. tostring(n), 2) end
  local values = coord_values
  if values == nil then
    values = {}
    for i = 1, n do values[i] = i - 1 end
  end
  if #values ~= n then error(string.format("%s: %d coordinate values for length %d", where, #values, n), 2) end
  attrs = attrs or {}
  local a = {}
  for k, v in pairs(attrs) do a[k] = v end
  a.long_name = a.long_name or name
  a.units = a.units or "1"
  if not a.type then
    a.type = "int"
    for i = 1, n do
      local v = values[i]
      if type(v) ~= "number" or v ~= math.floor(v) or math.abs(v) >= 2 ^ 31 then a.type = "double" break end
    end
  end
  self.dims[name] = n
  self.dim_order[#self.dim_order + 1] = name
  self:var(name, { name }, values, a)
  return self
end

-- R:var(name, dims, data, attrs): attrs.long_name and attrs.units are required;
-- attrs.type = "float" (default) | "double" | "int"; other string/number attributes are copied, and a
-- list of integers becomes an int array attribute (CF flag_values).
function File:var(name, dims, data, attrs)
  local where = "results:var(" .. tostring(name) .. ") in " .. self.path
  if self.closed then error(where .. ": file already closed", 2) end
  if type(name) ~= "string" or not name:match(name_pat) then error(where .. ": bad variable name", 2) end
  if self.vars[name] then error(where .. ": variable defined twice", 2) end
  check_attrs(where, attrs)
  local ty = attrs.type or "float"
  if not types[ty] then error(where .. ": type must be float, double or int, got " .. tostring(ty), 2) end
  dims = dims or {}
  local count = 1
  for _, d in ipairs(dims) do
    if not self.dims[d] then error(where .. ": unknown dimension '" .. tostring(d) .. "' (define it with :dim first)", 2) end
    count = count * self.dims[d]
  end
  if type(data) == "number" then data = { data } end
  if type(data) ~= "table" then error(where .. ": data must be a list of numbers", 2) end
  local flat = flatten(data, {})
  if #flat ~= count then
    error(string.format("%s: %d values for dims (%s) of %d elements", where, #flat, table.concat(dims, ","), count), 2)
  end
  for i = 1, count do
    local v = flat[i]
    if type(v) == "boolean" then flat[i] = v and 1 or 0
    elseif type(v) ~= "number" then error(string.format("%s: value %d is a %s, not a number", where, i, type(v)), 2)
    elseif ty == "int" and (v ~= math.floor(v) or math.abs(v) >= 2 ^ 31) then
      error(string.format("%s: value %d (%s) is not a 32-bit integer", where, i, tostring(v)), 2)
    end
  end
  self.vars[name] = { name = name, dims = dims, data = flat, attrs = attrs, type = ty }
  self.var_order[#self.var_order + 1] = name
  return self
end

-- an extra global attribute (string or number)
function File:attr(name, value)
  self.meta.attrs = self.meta.attrs or {}
  self.meta.attrs[name] = value
  return self
end

-- ACDD-1.3 recommended attributes. meta.<name> wins; then the environment
-- (OUTLIERLAB_LICENSE, OUTLIERLAB_CREATOR, OUTLIERLAB_INSTITUTION), then these defaults:
-- the creator is git's user.name (else $USER), as a commit records its author.
function M.provenance(meta)
  meta = meta or {}
  local function pick(key, env, default)
    local v = meta[key]
    if type(v) == "string" and v ~= "" then return v end
    v = env and os.getenv(env)
    if v and v ~= "" then return v end
    return default()
  end
  return {
    { "license", pick("license", "OUTLIERLAB_LICENSE", function()
        return "unspecified" end) },
    { "creator_name", pick("creator_name", "OUTLIERLAB_CREATOR", function()
        if M._creator == nil then
          M._creator = shell("git -C '" .. ol.root .. "' config user.name") or os.getenv("USER") or "unknown"
        end
        return M._creator
      end) },
    { "institution", pick("institution", "OUTLIERLAB_INSTITUTION", function() return "unspecified" end) },
    { "project", pick("project", nil, function()
        return "outlierlab: outliers in transformers, reproducing QT (Bondarenko et al. 2023) and SO (An et al. 2025)" end) },
    { "processing_level", pick("processing_level", nil, function()
        return "model output: statistics of transformers trained and analysed by outlierlab (not observations)" end) },
  }
end

local function global_attrs(meta)
  local version, machine = ol.version(), M.machine()
  local list = {
    { "title", meta.title },
    { "summary", meta.summary },
    { "Conventions", "CF-1.10, ACDD-1.3" },
    { "source", string.format("outlierlab %s (git commit %s)", version, M.git_commit()) },
    { "history", M.timestamp() .. ": " .. (meta.command or M.command_line()) },
    { "date_created", M.timestamp() },
    { "product_version", version },
    { "id", meta.id or "unknown" },
    { "experiment_id", meta.id or "unknown" },
    { "naming_authority", "outlierlab" },
    { "keywords", meta.keywords or "transformer, activation outliers, attention, quantization" },
    { "profile", meta.profile or "none" },
    { "seed", meta.seed or 0 },
    { "mpi_ranks", meta.ranks or M.mpi_ranks() },
    { "cpu", machine.cpu },
    { "blas_core", machine.blas_core },
    { "threads", machine.threads },
    { "config", canonical_json(meta.config or {}) },
  }
  for _, a in ipairs(M.provenance(meta)) do list[#list + 1] = a end
  if meta.references then list[#list + 1] = { "references", meta.references } end
  local extra = {}
  for k in pairs(meta.attrs or {}) do extra[#extra + 1] = k end
  table.sort(extra)
  for _, k in ipairs(extra) do list[#list + 1] = { k, meta.attrs[k] } end
  return list
end

local function put_att(f, varid, name, value, where)
  local rc
  if type(value) == "table" then   -- a list of 32-bit integers (CF flag_values)
    local n = #value
    local buf = ffi.new("int32_t[?]", math.max(n, 1))
    for i = 1, n do
      local v = value[i]
      if type(v) ~= "number" or v ~= math.floor(v) or math.abs(v) >= 2 ^ 31 then
        error("results: attribute " .. name .. ": value " .. i .. " (" .. tostring(v) .. ") is not a 32-bit integer", 3)
      end
      buf[i - 1] = v
    end
    rc = C.ol_nc_put_att_int_array(f, varid, name, n, buf)
  elseif type(value) == "number" then
    if value == math.floor(value) and math.abs(value) < 2 ^ 31 then rc = C.ol_nc_put_att_int(f, varid, name, value)
    else rc = C.ol_nc_put_att_double(f, varid, name, value) end
  else
    rc = C.ol_nc_put_att_text(f, varid, name, tostring(value))
  end
  if rc ~= 0 then ol.engine_error(3) end
end

-- write everything and rename into place; returns the path
function File:close()
  if self.closed then error("results:close: " .. self.path .. " is already closed", 2) end
  local dir = self.path:match("^(.*)/[^/]*$")
  if dir then os.execute("mkdir -p '" .. dir .. "'") end
  local f = C.ol_nc_create(self.path)
  if f == nil then ol.engine_error(1) end
  local ok, err = pcall(function()
    for _, a in ipairs(global_attrs(self.meta)) do put_att(f, -1, a[1], a[2]) end
    local dimid = {}
    for _, d in ipairs(self.dim_order) do
      local id = C.ol_nc_def_dim(f, d, self.dims[d])
      if id < 0 then ol.engine_error(1) end
      dimid[d] = id
    end
    local ids = {}
    for _, name in ipairs(self.var_order) do
      local v = self.vars[name]
      local nd = #v.dims
      local darr = ffi.new("int32_t[?]", math.max(nd, 1))
      for i, d in ipairs(v.dims) do darr[i - 1] = dimid[d] end
      local id = C.ol_nc_def_var(f, name, types[v.type], nd, darr)
      if id < 0 then ol.engine_error(1) end
      ids[name] = id
      put_att(f, id, "long_name", v.attrs.long_name)
      put_att(f, id, "units", v.attrs.units)
      local keys = {}
      for k, val in pairs(v.attrs) do
        if k ~= "long_name" and k ~= "units" and k ~= "type" and (type(val) == "string" or type(val) == "number"
                                                                 or type(val) == "table") then
          keys[#keys + 1] = k
        end
      end
      table.sort(keys)
      for _, k in ipairs(keys) do put_att(f, id, k, v.attrs[k]) end
    end
    if C.ol_nc_enddef(f) ~= 0 then ol.engine_error(1) end
    for _, name in ipairs(self.var_order) do
      local v = self.vars[name]
      local n = #v.data
      local rc
      if v.type == "int" then
        local buf = ffi.new("int32_t[?]", n)
        for i = 1, n do buf[i - 1] = v.data[i] end
        rc = C.ol_nc_put_int(f, ids[name], buf)
      elseif v.type == "double" then
        local buf = ffi.new("double[?]", n)
        for i = 1, n do buf[i - 1] = v.data[i] end
        rc = C.ol_nc_put_double(f, ids[name], buf)
      else
        local buf = ffi.new("float[?]", n)
        for i = 1, n do buf[i - 1] = v.data[i] end
        rc = C.ol_nc_put_float(f, ids[name], buf)
      end
      if rc ~= 0 then ol.engine_error(1) end
    end
  end)
  if not ok then
    C.ol_nc_abort(f)
    error("results:close(" .. self.path .. "): " .. tostring(err), 2)
  end
  self.closed = true
  if C.ol_nc_close(f) ~= 0 then ol.engine_error(1) end
  return self.path
end

return M
