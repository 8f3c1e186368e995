-- outlierlab — the Lua face of the engine: a thin layer over engine/outlierlab.h through
-- LuaJIT's FFI. Tensors are ffi.metatype objects whose memory belongs to C arenas; every
-- engine failure becomes a Lua error carrying the engine's message (op name and shapes).
--
--   local ol  = require "outlierlab"
--   local ctx = ol.Context()
--   local w   = ctx:param("w", {4, 3}):normal_(0, 0.02, 1)
--   local x   = ctx:tensor({2, 3}):uniform_(-1, 1, 7)
--   local loss = x:linear(w):relu():sum():mean()
--   loss:backward()                       -- gradients land in the flat gradient buffer
--
-- Dims are 0-based as in NumPy and the C API; -1 is the last dim.
local ffi = require "ffi"

local ol = {}

-- ---------------------------------------------------------------- loading the engine
local function root_dir()
  if OUTLIERLAB_ROOT then return OUTLIERLAB_ROOT end
  local src = debug.getinfo(1, "S").source:sub(2)
  return (src:match("^(.*)/lua/outlierlab/init%.lua$")) or "."
end
ol.root = root_dir()

local function read_header(path)
  local f = assert(io.open(path, "r"), "outlierlab: cannot open the engine header " .. path)
  local text = f:read("*a")
  f:close()
  local out = {}
  for line in text:gmatch("[^\n]*") do
    if not line:match("^%s*#") then out[#out + 1] = line end
  end
  return table.concat(out, "\n")
end

ffi.cdef(read_header(ol.root .. "/engine/outlierlab.h"))

local C
do
  local ok = pcall(function() return ffi.C.ol_version end)
  if ok then C = ffi.C else C = ffi.load(ol.root .. "/lib/liboutlierlab.so") end
end
ol.C = C
ol.ffi = ffi

-- ---------------------------------------------------------------- errors
-- The error is reported at the first caller outside this file (the user's line that called
-- the op), not at the wrapper here.
local this_file = debug.getinfo(1, "S").source
local function engine_error(level)
  local msg = ffi.string(C.ol_error())
  C.ol_clear_error()
  local l = (level or 2) + 1
  while true do
    local info = debug.getinfo(l, "S")
    if not info or info.source ~= this_file then break end
    l = l + 1
  end
  error(msg ~= "" and msg or "engine call failed (no message)", l)
end
ol.engine_error = engine_error

-- check a returned pointer / status
-- A tensor pointer is handed to Lua as a reference to the struct (t[0]): LuaJIT gives
-- pointers built-in arithmetic (p - q is a pointer difference, p + 1 an offset) that runs
-- before any metamethod, so `a - b` or `x + 1` on raw pointers would silently compute
-- addresses. A struct reference has no built-in arithmetic, passes to C as the pointer,
-- and has the same fields and methods.
local tensor_ptr_t = ffi.typeof("ol_tensor *")
local function P(t)
  if t == nil then engine_error(2) end
  if ffi.istype(tensor_ptr_t, t) then return t[0] end
  return t
end
local function S(rc) if rc ~= 0 then engine_error(2) end end
ol.check_ptr, ol.check_status = P, S

-- ---------------------------------------------------------------- shapes
local shape_buf = ffi.new("int64_t[4]")
local function to_shape(shape, what)
  if type(shape) == "number" then shape = { shape } end
  if type(shape) ~= "table" or #shape < 1 or #shape > 4 then
    error((what or "shape") .. ": expected a table of 1 to 4 dims", 3)
  end
  for i = 1, #shape do
    local d = shape[i]
    if type(d) ~= "number" or d ~= math.floor(d) then
      error((what or "shape") .. ": dim " .. i .. " is not an integer", 3)
    end
    shape_buf[i - 1] = d
  end
  return #shape, shape_buf
end
ol.to_shape = to_shape

local dtypes = { f32 = C.OL_F32, float32 = C.OL_F32, i32 = C.OL_I32, int32 = C.OL_I32 }

-- ---------------------------------------------------------------- tensors
local Tensor = {}
Tensor.__index = Tensor
ol.Tensor = Tensor

-- t:size() -> { dims... }; t:size(d) -> dim d (0-based, negative from the end).
-- (t.shape, t.ndim, t.numel, t.name are the C struct's fields.)
function Tensor.size(t, d)
  if d == nil then
    local s = {}
    for i = 0, t.ndim - 1 do s[i + 1] = tonumber(t.shape[i]) end
    return s
  end
  if d < 0 then d = d + t.ndim end
  if d < 0 or d >= t.ndim then error("size: dim out of range for " .. tostring(t), 2) end
  return tonumber(t.shape[d])
end
function Tensor.dim(t) return t.ndim end
function Tensor.nelement(t) return tonumber(t.numel) end
function Tensor.dtype_name(t) return t.dtype == C.OL_I32 and "i32" or "f32" end
function Tensor.name_str(t) return ffi.string(t.name) end
function Tensor.set_name(t, name) C.ol_tensor_set_name(t, name) return t end
function Tensor.is_param(t) return t.param_index >= 0 end

local function shape_str(t)
  return "(" .. table.concat(Tensor.size(t), ",") .. ")"
end
Tensor.shape_str = shape_str

function Tensor.__tostring(t)
  return string.format("tensor '%s' %s %s", ffi.string(t.name), shape_str(t), Tensor.dtype_name(t))
end

-- element access (0-based flat index, or per-dim 0-based indices)
local function flat_index(t, ...)
  local n = select("#", ...)
  if n == 1 then return (...) end
  if n ~= t.ndim then error("index: " .. n .. " indices for " .. tostring(t), 3) end
  local idx = 0
  for i = 1, n do
    local v = select(i, ...)
    local d = tonumber(t.shape[i - 1])
    if v < 0 or v >= d then error("index " .. v .. " out of range for dim " .. (i - 1) .. " of " .. tostring(t), 3) end
    idx = idx * d + v
  end
  return idx
end
function Tensor.get(t, ...)
  local i = flat_index(t, ...)
  if i < 0 or i >= t.numel then error("index " .. i .. " out of range for " .. tostring(t), 2) end
  if t.dtype == C.OL_I32 then return t.idata[i] end
  return t.data[i]
end
function Tensor.set(t, v, ...)
  local i = flat_index(t, ...)
  if i < 0 or i >= t.numel then error("index " .. i .. " out of range for " .. tostring(t), 2) end
  if t.dtype == C.OL_I32 then t.idata[i] = v else t.data[i] = v end
  return t
end
function Tensor.item(t)
  if t.numel ~= 1 then error("item: " .. tostring(t) .. " has more than one element", 2) end
  return t.dtype == C.OL_I32 and t.idata[0] or t.data[0]
end
function Tensor.tolist(t)
  local out, n = {}, tonumber(t.numel)
  if t.dtype == C.OL_I32 then for i = 0, n - 1 do out[i + 1] = t.idata[i] end
  else for i = 0, n - 1 do out[i + 1] = t.data[i] end end
  return out
end
function Tensor.load(t, list)
  if #list ~= t.numel then
    error(string.format("load: %d values for %s", #list, tostring(t)), 2)
  end
  if t.dtype == C.OL_I32 then for i = 1, #list do t.idata[i - 1] = list[i] end
  else for i = 1, #list do t.data[i - 1] = list[i] end end
  return t
end
function Tensor.gradlist(t)
  local g = C.ol_tensor_grad(t)
  if g == nil then engine_error(1) end
  local out = {}
  for i = 0, tonumber(t.numel) - 1 do out[i + 1] = g[i] end
  return out
end
function Tensor.grad_at(t, i) local g = P(C.ol_tensor_grad(t)) return g[i] end
function Tensor.zero_grad(t) S(C.ol_tensor_zero_grad(t)) return t end
function Tensor.requires_grad_(t, flag) S(C.ol_tensor_set_requires_grad(t, flag == false and 0 or 1)) return t end

function Tensor.fill_(t, v) S(C.ol_fill(t, v)) return t end
function Tensor.normal_(t, mean, std, seed) S(C.ol_fill_normal(t, mean or 0, std or 1, seed or 0)) return t end
function Tensor.uniform_(t, lo, hi, seed) S(C.ol_fill_uniform(t, lo or 0, hi or 1, seed or 0)) return t end
function Tensor.copy_(t, src) S(C.ol_copy_into(t, src)) return t end

-- ops
function Tensor.matmul(a, b, ta, tb) return P(C.ol_matmul(a, b, ta and 1 or 0, tb and 1 or 0)) end
function Tensor.linear(x, w, b) return P(C.ol_linear(x, w, b)) end
function Tensor.affine(a, s, c) return P(C.ol_affine_scalar(a, s, c or 0)) end
function Tensor.scale(a, s) return P(C.ol_affine_scalar(a, s, 0)) end

local function scalar_like(t, v)
  local s = P(C.ol_tensor_new(t.ctx, C.OL_F32, 1, ffi.new("int64_t[1]", 1), "scalar"))
  s.data[0] = v
  return s
end
local function is_tensor(x)
  return type(x) == "cdata" and (ffi.istype("ol_tensor", x) or ffi.istype(tensor_ptr_t, x))
end
ol.is_tensor = is_tensor

function Tensor.__add(a, b)
  if type(b) == "number" then return P(C.ol_affine_scalar(a, 1, b)) end
  if type(a) == "number" then return P(C.ol_affine_scalar(b, 1, a)) end
  return P(C.ol_add(a, b))
end
function Tensor.__sub(a, b)
  if type(b) == "number" then return P(C.ol_affine_scalar(a, 1, -b)) end
  if type(a) == "number" then return P(C.ol_affine_scalar(b, -1, a)) end
  return P(C.ol_sub(a, b))
end
function Tensor.__mul(a, b)
  if type(b) == "number" then return P(C.ol_affine_scalar(a, b, 0)) end
  if type(a) == "number" then return P(C.ol_affine_scalar(b, a, 0)) end
  return P(C.ol_mul(a, b))
end
function Tensor.__div(a, b)
  if type(b) == "number" then return P(C.ol_affine_scalar(a, 1 / b, 0)) end
  if type(a) == "number" then return P(C.ol_div(scalar_like(b, a), b)) end
  return P(C.ol_div(a, b))
end
function Tensor.__unm(a) return P(C.ol_unary(a, C.OL_NEG)) end
Tensor.add, Tensor.sub, Tensor.mul, Tensor.div = Tensor.__add, Tensor.__sub, Tensor.__mul, Tensor.__div

local unary = { exp = C.OL_EXP, log = C.OL_LOG, sqrt = C.OL_SQRT, relu = C.OL_RELU, silu = C.OL_SILU,
                sigmoid = C.OL_SIGMOID, tanh = C.OL_TANH, neg = C.OL_NEG, square = C.OL_SQUARE, abs = C.OL_ABS }
for name, code in pairs(unary) do
  Tensor[name] = function(a) return P(C.ol_unary(a, code)) end
end
-- gelu: "tanh" (GPT-2/BERT approximation, default) or "erf" (exact)
function Tensor.gelu(a, approx)
  if approx == nil or approx == "tanh" then return P(C.ol_unary(a, C.OL_GELU_TANH)) end
  if approx == "erf" or approx == "none" then return P(C.ol_unary(a, C.OL_GELU_ERF)) end
  error("gelu: approximation must be 'tanh' or 'erf', got " .. tostring(approx), 2)
end

function Tensor.sum(a) return P(C.ol_sum(a)) end
function Tensor.mean(a) return P(C.ol_mean(a)) end
-- reduce every element to a (1) tensor
function Tensor.sum_all(a) return P(C.ol_sum(P(C.ol_reshape(a, 1, ffi.new("int64_t[1]", a.numel))))) end
function Tensor.mean_all(a) return P(C.ol_mean(P(C.ol_reshape(a, 1, ffi.new("int64_t[1]", a.numel))))) end
function Tensor.softmax(a, causal) return P(C.ol_softmax(a, causal and 1 or 0)) end
function Tensor.layernorm(x, w, b, eps) return P(C.ol_layernorm(x, w, b, eps or 1e-5)) end
function Tensor.rmsnorm(x, w, eps) return P(C.ol_rmsnorm(x, w, eps or 1e-6)) end
function Tensor.cross_entropy(logits, targets, ignore_index)
  return P(C.ol_cross_entropy(logits, targets, ignore_index or -100))
end
function Tensor.embedding(ids, table) return P(C.ol_embedding(ids, table)) end
function Tensor.view(a, shape) local n, s = to_shape(shape, "view") return P(C.ol_reshape(a, n, s)) end
Tensor.reshape = Tensor.view
function Tensor.transpose(a, d0, d1) return P(C.ol_transpose(a, d0, d1)) end
function Tensor.narrow(a, dim, start, len) return P(C.ol_narrow(a, dim, start, len)) end
function Tensor.rows(a, start, n) return P(C.ol_narrow(a, 0, start, n)) end
-- split along dim into pieces of the given sizes (a number: equal pieces of that size)
function Tensor.split(a, dim, sizes)
  local d = dim < 0 and dim + a.ndim or dim
  local total = tonumber(a.shape[d])
  if type(sizes) == "number" then
    local s = sizes
    if total % s ~= 0 then error("split: dim " .. d .. " of " .. tostring(a) .. " is not a multiple of " .. s, 2) end
    sizes = {}
    for i = 1, total / s do sizes[i] = s end
  end
  local out, off = {}, 0
  for i, s in ipairs(sizes) do
    out[i] = P(C.ol_narrow(a, d, off, s))
    off = off + s
  end
  if off ~= total then error("split: sizes add up to " .. off .. " but dim " .. d .. " of " .. tostring(a) .. " is " .. total, 2) end
  return out
end
function ol.cat(list, dim)
  local n = #list
  local arr = ffi.new("ol_tensor *[?]", n)
  for i = 1, n do arr[i - 1] = list[i] end
  return P(C.ol_concat(n, arr, dim or 0))
end
function Tensor.dropout(a, p, seed) return P(C.ol_dropout(a, p, seed or 0)) end
function Tensor.backward(loss) S(C.ol_backward(loss)) end

-- ---------------------------------------------------------------- activation hooks
-- ol.set_activation_hook(fn) routes the output of every op that makes a new activation value
-- (linear, matmul, add, sub, mul, softmax, layernorm, rmsnorm, gelu, relu, silu) through
-- fn(tensor, kind) -> tensor; nil removes it. Post-training quantisation uses it to quantise
-- "every linear input/output, residual sum, attention score and softmax output" (QT §5).
-- Without a hook the cost is one nil check per op. (The wrappers are installed once, before
-- ffi.metatype: a metatype's table must not change afterwards.) ol.without_hook(fn, ...) runs
-- fn with the hook suspended (gates and the final head stay in full precision).
local active_hook, suspended = nil, 0
for _, k in ipairs({ "linear", "matmul", "__add", "__sub", "__mul", "softmax", "layernorm", "rmsnorm", "gelu", "relu", "silu" }) do
  local f = Tensor[k]
  Tensor[k] = function(...)
    local y = f(...)
    if active_hook and suspended == 0 then return active_hook(y, k) end
    return y
  end
end
Tensor.add, Tensor.sub, Tensor.mul = Tensor.__add, Tensor.__sub, Tensor.__mul
function ol.set_activation_hook(fn) active_hook = fn end
function ol.activation_hook() return active_hook end
function ol.without_hook(fn, ...)
  suspended = suspended + 1
  local res = { pcall(fn, ...) }
  suspended = suspended - 1
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2)
end

ffi.metatype("ol_tensor", Tensor)

-- ---------------------------------------------------------------- contexts
local Context = {}
Context.__index = Context
ol.ContextClass = Context

-- ol.Context{params = floats, step_bytes = bytes, seed = n}
function ol.Context(opts)
  opts = opts or {}
  local raw = C.ol_ctx_new(opts.params or 0, opts.step_bytes or 0)
  if raw == nil then engine_error(1) end
  local self = setmetatable({ raw = ffi.gc(raw, C.ol_ctx_free), seed = opts.seed or 1234,
                              nparams_init = 0 }, Context)
  return self
end

function Context:tensor(shape, opts)
  opts = opts or {}
  local n, s = to_shape(shape, "tensor")
  local dt = dtypes[opts.dtype or "f32"] or error("tensor: unknown dtype " .. tostring(opts.dtype), 2)
  local f = opts.persistent and C.ol_tensor_new_persistent or C.ol_tensor_new
  return P(f(self.raw, dt, n, s, opts.name or ""))
end
function Context:from_table(list, shape, opts)
  return self:tensor(shape or { #list }, opts):load(list)
end
function Context:param(name, shape)
  local n, s = to_shape(shape, "param " .. tostring(name))
  return P(C.ol_param(self.raw, name, n, s))
end
-- the next parameter-init seed: deterministic in the order parameters are created
function Context:next_seed()
  self.nparams_init = self.nparams_init + 1
  return self.seed * 1000003 + self.nparams_init
end
function Context:params()
  local out = {}
  for i = 0, C.ol_param_count(self.raw) - 1 do out[#out + 1] = C.ol_param_get(self.raw, i)[0] end
  return out
end
function Context:num_params()
  local n = 0
  for _, p in ipairs(self:params()) do n = n + tonumber(p.numel) end
  return n
end
function Context:reset() C.ol_step_reset(self.raw) end
function Context:zero_grad() C.ol_zero_grad(self.raw) end
function Context:grad_norm() return C.ol_grad_norm(self.raw) end
function Context:grads_finite() return C.ol_grads_finite(self.raw) == 1 end
function Context:set_grad_enabled(on) return C.ol_set_grad_enabled(self.raw, on and 1 or 0) == 1 end
-- run fn with the tape off; returns fn's results
function Context:no_grad(fn, ...)
  local old = C.ol_set_grad_enabled(self.raw, 0)
  local res = { pcall(fn, ...) }
  C.ol_set_grad_enabled(self.raw, old)
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2)
end
function Context:step_bytes() return tonumber(C.ol_step_bytes_used(self.raw)) end
function Context:step_peak() return tonumber(C.ol_step_bytes_peak(self.raw)) end

function ol.set_num_threads(n) C.ol_set_num_threads(n or 0) end
function ol.num_threads() return C.ol_get_num_threads() end
-- flush-to-zero on every computing thread (true) or IEEE subnormals (false, the default);
-- train cfg.flush_subnormals sets it for a training run (docs/reference/training.md, "Subnormals")
function ol.set_flush_subnormals(on) C.ol_set_flush_subnormals(on and 1 or 0) end
function ol.flushes_subnormals() return C.ol_flushes_subnormals() == 1 end
function ol.version() return ffi.string(C.ol_version()) end

-- ---------------------------------------------------------------- submodules on demand
-- ol.nn, ol.optim, ol.config, … load lua/outlierlab/<name>.lua the first time they are used.
setmetatable(ol, { __index = function(t, k)
  local ok, mod = pcall(require, "outlierlab." .. k)
  if not ok then
    if tostring(mod):find("module 'outlierlab." .. k .. "' not found", 1, true) then return nil end
    error(mod, 2)
  end
  rawset(t, k, mod)
  return mod
end })

return ol
