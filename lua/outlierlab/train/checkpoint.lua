-- checkpoint — training state in one safetensors file (engine/io_safetensors.c), readable by
-- other tools (Python safetensors, numpy: see docs/reference/interfaces.md "Checkpoints").
--
--   local checkpoint = require "outlierlab.train.checkpoint"
--   checkpoint.save("run/ckpt.safetensors", ctx, { config = cfg, step = 100, optim = opt:state(),
--                                                  data = loader:state(), extra = {...} })
--   local meta = checkpoint.load("run/ckpt.safetensors", ctx)   -- fills params, m and v in place
--   meta.step, meta.config, meta.optim, meta.data, meta.extra
--
-- Contents: every parameter under its own name (F32, its shape), the AdamW moments under
-- "optim.m.<name>" and "optim.v.<name>", and "__metadata__" (string -> string): "format" =
-- "outlierlab-checkpoint/1", "step" (decimal), "config", "optim", "data", "extra" (canonical
-- JSON, see outlierlab.util.json). The file is written as "<path>.tmp.<pid>", fsynced and renamed:
-- a writer killed midway leaves the previous checkpoint intact, and its temporary is removed
-- by the next save or load next to it once that process is gone.
local ol = require "outlierlab"
local json = require "outlierlab.util.json"
local ffi = ol.ffi
local C = ol.C

local M = {}
M.FORMAT = "outlierlab-checkpoint/1"

local function raw_ctx(ctx)
  if type(ctx) == "table" and ctx.raw ~= nil then return ctx.raw end
  if type(ctx) == "cdata" then return ctx end
  error("checkpoint: expected an outlierlab Context, got " .. tostring(ctx), 3)
end

local function params_of(raw)
  local out, seen = {}, {}
  for i = 0, C.ol_param_count(raw) - 1 do
    local p = C.ol_param_get(raw, i)
    local name = ffi.string(p.name)
    if name == "" then error("checkpoint: parameter " .. i .. " has no name", 3) end
    if seen[name] then error("checkpoint: two parameters are named '" .. name .. "'", 3) end
    seen[name] = true
    out[#out + 1] = { t = p, name = name, off = C.ol_param_offset(p) }
  end
  return out
end

local meta_keys = { config = true, optim = true, data = true, extra = true }

-- the temporaries "<file>.tmp.<pid>" that killed writers left next to path (outlierlab.util.fs);
-- rank 0 alone looks (the pids are this machine's, and rank 0 is the one that writes)
local function remove_stale_temporaries(path)
  local okd, dist = pcall(require, "outlierlab.util.dist")
  if okd and dist.world_rank() ~= 0 then return end
  require("outlierlab.util.fs").remove_stale_temporaries(path:match("^(.*)/[^/]*$") or ".")
end

-- save(path, ctx, meta, opts): meta = {config=, step=, optim=, data=, extra=} (all optional;
-- step an integer). opts.optim = false leaves the AdamW moments out (weights only).
function M.save(path, ctx, meta, opts)
  if type(path) ~= "string" or path == "" then error("checkpoint.save: path must be a non-empty string", 2) end
  local raw = raw_ctx(ctx)
  meta, opts = meta or {}, opts or {}
  for k in pairs(meta) do
    if k ~= "step" and not meta_keys[k] then error("checkpoint.save: unknown metadata key '" .. tostring(k) .. "'", 2) end
  end
  if meta.step ~= nil and (type(meta.step) ~= "number" or meta.step ~= math.floor(meta.step)) then
    error("checkpoint.save: step must be an integer, got " .. tostring(meta.step), 2)
  end
  local w = C.ol_st_writer_new()
  if w == nil then ol.engine_error(1) end
  w = ffi.gc(w, C.ol_st_writer_free)
  local function add(name, ndim, shape, ptr)
    if C.ol_st_writer_add(w, name, C.OL_ST_F32, ndim, shape, ptr) ~= 0 then ol.engine_error(3) end
  end
  local ps = params_of(raw)
  for _, p in ipairs(ps) do add(p.name, p.t.ndim, p.t.shape, p.t.data) end
  if opts.optim ~= false then
    local m, v = C.ol_adam_m_data(raw), C.ol_adam_v_data(raw)
    for _, p in ipairs(ps) do add("optim.m." .. p.name, p.t.ndim, p.t.shape, m + p.off) end
    for _, p in ipairs(ps) do add("optim.v." .. p.name, p.t.ndim, p.t.shape, v + p.off) end
  end
  local function set(k, val)
    if C.ol_st_writer_set_metadata(w, k, val) ~= 0 then ol.engine_error(3) end
  end
  set("format", M.FORMAT)
  if meta.step ~= nil then set("step", string.format("%d", meta.step)) end
  for _, k in ipairs { "config", "optim", "data", "extra" } do
    if meta[k] ~= nil then
      local ok, text = pcall(json.encode, meta[k])
      if not ok then error("checkpoint.save " .. path .. ": metadata '" .. k .. "': " .. text, 2) end
      set(k, text)
    end
  end
  remove_stale_temporaries(path)
  if C.ol_st_writer_save(w, path) ~= 0 then ol.engine_error(1) end
  return path
end

local function open(path)
  local f = C.ol_st_open(path)
  if f == nil then ol.engine_error(2) end
  return ffi.gc(f, C.ol_st_close)
end

local function close(f)
  ffi.gc(f, nil)
  C.ol_st_close(f)
end

local shape_buf = ffi.new("int64_t[8]")
local info_dt, info_nd = ffi.new("int32_t[1]"), ffi.new("int32_t[1]")

local function entry_shape(f, i)
  if C.ol_st_info(f, i, info_dt, info_nd, shape_buf) ~= 0 then ol.engine_error(3) end
  local s = {}
  for d = 0, info_nd[0] - 1 do s[d + 1] = tonumber(shape_buf[d]) end
  return s, ffi.string(C.ol_st_dtype_name(info_dt[0]))
end

local function shape_str(s) return "(" .. table.concat(s, ",") .. ")" end

local function read_meta(f, path)
  local meta = {}
  for i = 0, C.ol_st_metadata_count(f) - 1 do
    local k = ffi.string(C.ol_st_metadata_key(f, i))
    local v = ffi.string(C.ol_st_metadata(f, k))
    if k == "step" then
      meta.step = tonumber(v)
      if not meta.step then error("checkpoint: " .. path .. ": metadata 'step' is not a number: " .. v, 0) end
    elseif meta_keys[k] then
      local ok, x = pcall(json.decode, v, path .. " metadata '" .. k .. "'")
      if not ok then error("checkpoint: " .. x, 0) end
      meta[k] = x
    else
      meta[k] = v
    end
  end
  return meta
end

local function do_load(f, path, raw, opts)
  local ps = params_of(raw)
  local want_optim = opts.optim
  if want_optim == nil then want_optim = true end
  -- plan: (file name, destination pointer, param) for every tensor to read; all checked
  -- before anything is written, so a bad file leaves the model untouched
  local plan, used = {}, {}
  for _, p in ipairs(ps) do plan[#plan + 1] = { p.name, p.t.data, p } end
  if want_optim then   -- AdamW moments: all or nothing (weights only: {optim = false})
    local bufs = { m = C.ol_adam_m_data(raw), v = C.ol_adam_v_data(raw) }
    for _, which in ipairs { "m", "v" } do
      for _, p in ipairs(ps) do plan[#plan + 1] = { "optim." .. which .. "." .. p.name, bufs[which] + p.off, p } end
    end
  end
  for _, e in ipairs(plan) do
    local name, p = e[1], e[3]
    local i = C.ol_st_find(f, name)
    if i < 0 then
      local hint = name:match("^optim%.") and " (AdamW state; load with {optim = false} for weights only)" or ""
      error(string.format("checkpoint: %s: missing tensor '%s'%s", path, name, hint), 0)
    end
    local s, dt = entry_shape(f, i)
    local want = p.t:size()
    if shape_str(s) ~= shape_str(want) then
      error(string.format("checkpoint: %s: shape mismatch for '%s': file has %s, model has %s", path, name, shape_str(s), shape_str(want)), 0)
    end
    if dt ~= "F32" and dt ~= "F16" and dt ~= "BF16" and dt ~= "F64" then
      error(string.format("checkpoint: %s: tensor '%s' is %s, expected a float dtype", path, name, dt), 0)
    end
    used[name] = true
  end
  if opts.strict ~= false then
    for i = 0, C.ol_st_count(f) - 1 do
      local name = ffi.string(C.ol_st_name(f, i))
      local skip = not want_optim and name:match("^optim%.[mv]%.")
      if not used[name] and not skip then
        error(string.format("checkpoint: %s: unexpected tensor '%s' (not a parameter of this model; load with {strict = false} to ignore)", path, name), 0)
      end
    end
  end
  local meta = read_meta(f, path)
  for _, e in ipairs(plan) do
    if C.ol_st_read_f32(f, e[1], e[2], e[3].t.numel) ~= 0 then ol.engine_error(3) end
  end
  return meta
end

-- load(path, ctx, opts) -> meta. Every parameter of ctx must be in the file with its shape;
-- opts.optim = false skips the AdamW moments; opts.strict = false ignores extra tensors.
function M.load(path, ctx, opts)
  if type(path) ~= "string" then error("checkpoint.load: path must be a string", 2) end
  local raw = raw_ctx(ctx)
  remove_stale_temporaries(path)   -- a run that resumes starts here
  local f = open(path)
  local ok, res = pcall(do_load, f, path, raw, opts or {})
  close(f)
  if not ok then error(res, 2) end
  return res
end

-- inspect(path) -> { tensors = { {name=, dtype=, shape={...}}, ... }, meta = {...} }
function M.inspect(path)
  local f = open(path)
  local ok, res = pcall(function()
    local out = { tensors = {} }
    for i = 0, C.ol_st_count(f) - 1 do
      local s, dt = entry_shape(f, i)
      out.tensors[#out.tensors + 1] = { name = ffi.string(C.ol_st_name(f, i)), dtype = dt, shape = s }
    end
    out.meta = read_meta(f, path)
    return out
  end)
  close(f)
  if not ok then error(res, 2) end
  return res
end

return M
