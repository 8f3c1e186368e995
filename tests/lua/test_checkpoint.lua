-- test_checkpoint — safetensors checkpoints: bit-identical round trip, metadata, validation of
-- malformed files (each error names the file and the problem), atomic replacement, and an
-- independent reader (python3 + numpy, skipped when not installed).
local t = require "tap"
local ol = require "outlierlab"
local ck = require "outlierlab.train.checkpoint"
local ffi = ol.ffi
local C = ol.C

local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir)
local function P(name) return dir .. "/" .. name end

local function read(path) local f = assert(io.open(path, "rb")) local s = f:read("*a") f:close() return s end
local function write(path, s) local f = assert(io.open(path, "wb")) f:write(s) f:close() end
local function u64le(n)
  local b = {}
  for i = 1, 8 do b[i] = string.char(n % 256) n = math.floor(n / 256) end
  return table.concat(b)
end
-- a safetensors file from a header string and a data string
local function craft(path, header, data) write(path, u64le(#header) .. header .. (data or "")) end

-- a model-like context: params, and AdamW moments filled with known values
local function make_ctx(seed, shapes)
  local ctx = ol.Context{ params = 65536, step_bytes = 1048576 }
  shapes = shapes or { { "wte.weight", { 8, 4 } }, { "h.0.ln.bias", { 4 } }, { "h.0.attn.w", { 2, 3, 4 } } }
  for i, s in ipairs(shapes) do ctx:param(s[1], s[2]):normal_(0, 1, seed * 10 + i) end
  local n = tonumber(C.ol_params_numel(ctx.raw))
  local m, v = C.ol_adam_m_data(ctx.raw), C.ol_adam_v_data(ctx.raw)
  for i = 0, n - 1 do m[i] = (i * 0.37 + seed) % 1.7 - 0.8; v[i] = (i * 0.11 + seed) % 0.9 end
  return ctx, n
end
-- every word of every parameter, m and v (padding between parameters in the flat buffers excluded)
local function snapshot(ctx)
  local out = {}
  for _, buf in ipairs { C.ol_params_data(ctx.raw), C.ol_adam_m_data(ctx.raw), C.ol_adam_v_data(ctx.raw) } do
    local u = ffi.cast("uint32_t *", buf)
    for _, p in ipairs(ctx:params()) do
      local off = tonumber(C.ol_param_offset(p))
      for i = 0, tonumber(p.numel) - 1 do out[#out + 1] = u[off + i] end
    end
  end
  return out
end
local function same(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false, i end end
  return true
end

-- ---------------------------------------------------------------- round trip
local ctx, n = make_ctx(1)
local before = snapshot(ctx, n)
local meta_in = { step = 42, config = { model = { n_layer = 2, d = 4 }, lr = 0.1, third = 1 / 3, name = "gpt2-\"q\"" },
                  optim = { step = 42, betas = { 0.9, 0.95 } }, data = { step = 42, seed = 7 },
                  extra = { losses = { 10.25, 9.1, 1e-30 } } }
local path = P("a.safetensors")
ck.save(path, ctx, meta_in)
-- scramble everything, then load
local ctx2 = make_ctx(2)
t.ok(not same(snapshot(ctx2, n), before), "a context with another seed differs before loading")
local meta = ck.load(path, ctx2)
local ok, at = same(snapshot(ctx2, n), before)
t.ok(ok, "params, AdamW m and v round-trip bit-identically", at and ("first difference at word " .. at))
t.is(meta.step, 42, "metadata: step")
t.is(meta.config.lr, 0.1, "metadata: config float exact")
t.is(meta.config.third, 1 / 3, "metadata: 1/3 exact through JSON")
t.is(meta.config.model.n_layer, 2, "metadata: nested table")
t.is(meta.config.name, "gpt2-\"q\"", "metadata: string with quotes")
t.is(meta.optim.betas[2], 0.95, "metadata: optim state")
t.is(meta.data.seed, 7, "metadata: data-loader state")
t.is(meta.extra.losses[3], 1e-30, "metadata: extra, tiny float exact")
t.is(meta.format, ck.FORMAT, "metadata: format tag")

local path2 = P("b.safetensors")
ck.save(path2, ctx2, meta_in)
t.ok(read(path) == read(path2), "same state and metadata give the same bytes")
local tmpleft = io.popen("ls " .. dir .. " | grep -c tmp"):read("*l")
t.is(tmpleft, "0", "no temporary file is left after a save")

-- header layout as the format requires
do
  local s = read(path)
  local hl = 0
  for i = 8, 1, -1 do hl = hl * 256 + s:byte(i) end
  t.is(hl % 8, 0, "header length is a multiple of 8 (aligned data)")
  t.ok(s:sub(9, 9) == "{", "header starts with '{'")
  local info = ck.inspect(path)
  t.is(#info.tensors, 9, "3 params + 3 m + 3 v tensors")
  t.is(info.tensors[4].name, "optim.m.wte.weight", "moments are named optim.m.<name>")
  t.is(table.concat(info.tensors[3].shape, "x"), "2x3x4", "3-D shape recorded")
end

-- weights-only save and load
do
  local p = P("w.safetensors")
  ck.save(p, ctx, { step = 1 }, { optim = false })
  t.is(#ck.inspect(p).tensors, 3, "weights-only checkpoint has only the parameters")
  t.throws(function() ck.load(p, (make_ctx(3))) end, "missing tensor 'optim.m.wte.weight'", "loading it with optimizer state names the missing tensor")
  local c3 = make_ctx(3)
  ck.load(p, c3, { optim = false })
  local pa, pb = C.ol_params_data(ctx.raw), C.ol_params_data(c3.raw)
  local eq = true
  for i = 0, n - 1 do if pa[i] ~= pb[i] then eq = false end end
  t.ok(eq, "weights-only load restores the parameters")
end

-- ---------------------------------------------------------------- model mismatch
t.throws(function()
  ck.load(path, (make_ctx(1, { { "wte.weight", { 8, 4 } }, { "h.0.ln.bias", { 4 } }, { "h.0.attn.w", { 2, 3, 4 } }, { "lm_head", { 2 } } })))
end, "missing tensor 'lm_head'", "missing tensor is named")
t.throws(function()
  ck.load(path, (make_ctx(1, { { "wte.weight", { 4, 8 } }, { "h.0.ln.bias", { 4 } }, { "h.0.attn.w", { 2, 3, 4 } } })))
end, "shape mismatch for 'wte.weight': file has (8,4), model has (4,8)", "shape mismatch against the model")
t.throws(function()
  ck.load(path, (make_ctx(1, { { "wte.weight", { 8, 4 } }, { "h.0.ln.bias", { 4 } } })))
end, "unexpected tensor 'h.0.attn.w'", "extra tensor in the file is reported")
do  -- a failed load leaves the model untouched
  local c4, n4 = make_ctx(5, { { "wte.weight", { 8, 4 } }, { "h.0.ln.bias", { 4 } }, { "h.0.attn.w", { 2, 3, 4 } }, { "lm_head", { 2 } } })
  local s0 = snapshot(c4, n4)
  pcall(ck.load, path, c4)
  t.ok(same(snapshot(c4, n4), s0), "a rejected checkpoint leaves the parameters untouched")
end

-- ---------------------------------------------------------------- malformed files
local good = read(path)
local function bad(name, bytes, pattern, what)
  local p = P(name)
  write(p, bytes)
  t.throws(function() ck.load(p, (make_ctx(1))) end, p, what .. ": error names the file")
  t.throws(function() ck.load(p, (make_ctx(1))) end, pattern, what .. ": error says '" .. pattern .. "'")
end
bad("trunc.safetensors", good:sub(1, #good - 10), "offset past end", "truncated data")
bad("trunc2.safetensors", good:sub(1, 5), "truncated", "file shorter than the length field")
bad("trunc3.safetensors", good:sub(1, 100), "truncated", "file cut inside the header")
bad("hlen.safetensors", u64le(2 ^ 40) .. good:sub(9), "corrupted header length", "huge header length")
bad("hlen2.safetensors", u64le(5) .. good:sub(9), "bad JSON", "header length too short")
bad("json.safetensors", good:sub(1, 8) .. "[" .. good:sub(10), "bad JSON", "bad JSON")
bad("json2.safetensors", good:gsub('"shape"', '"shape" '), "bad JSON", "header shifted by one byte")
t.throws(function() ck.load(P("nonexistent.safetensors"), (make_ctx(1))) end, P("nonexistent.safetensors") .. ": No such file", "missing file")

-- crafted headers (data area 16 bytes)
local data16 = string.rep("\0", 16)
local function crafted(name, header, data, pattern, what)
  local p = P(name)
  craft(p, header, data)
  local f = C.ol_st_open(p)
  local msg = ffi.string(C.ol_error())
  C.ol_clear_error()
  if f ~= nil then C.ol_st_close(f) end
  t.ok(f == nil and msg:find(p, 1, true) and msg:find(pattern, 1, true), what, "error was: " .. msg)
end
crafted("past.st", '{"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}}', data16, "offset past end", "offset past end")
crafted("mism.st", '{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}}', data16, "shape/offset mismatch", "shape·itemsize differs from the offsets span")
crafted("dtype.st", '{"a":{"dtype":"F31","shape":[4],"data_offsets":[0,16]}}', data16, "unknown dtype 'F31'", "unknown dtype")
crafted("gap.st", '{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}', data16, "gap in the data area", "gap before a tensor")
crafted("overlap.st", '{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}',
        data16, "overlaps", "overlapping tensors")
crafted("trail.st", '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', data16, "cover 8 bytes but the data area has 16", "trailing bytes")
crafted("neg.st", '{"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}}', data16, "not a non-negative integer", "negative dim")
crafted("meta.st", '{"__metadata__":{"a":1},"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}', data16, "not a string", "non-string metadata")
crafted("noofs.st", '{"a":{"dtype":"F32","shape":[4]}}', data16, "data_offsets must be", "missing data_offsets")

-- ---------------------------------------------------------------- other dtypes
do  -- F16 / BF16 / I32 read from another tool's file
  local p = P("dtypes.st")
  local f16 = string.char(0x00, 0x3C, 0x00, 0xC0, 0x00, 0x38, 0x01, 0x00)   -- 1, -2, 0.5, 2^-24
  local bf16 = string.char(0x80, 0x3F, 0x40, 0xC0)                          -- 1, -3
  local i32 = string.char(7, 0, 0, 0, 0xff, 0xff, 0xff, 0xff)               -- 7, -1
  craft(p, '{"h":{"dtype":"F16","shape":[4],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]},' ..
           '"i":{"dtype":"I32","shape":[2],"data_offsets":[12,20]}}', f16 .. bf16 .. i32)
  local f = C.ol_st_open(p)
  t.ok(f ~= nil, "file with F16/BF16/I32 opens", ffi.string(C.ol_error()))
  local out = ffi.new("float[4]")
  t.is(C.ol_st_read_f32(f, "h", out, 4), 0, "F16 -> f32")
  t.ok(out[0] == 1 and out[1] == -2 and out[2] == 0.5 and out[3] == 2 ^ -24, "F16 values exact (incl. subnormal)",
       string.format("%g %g %g %g", out[0], out[1], out[2], out[3]))
  t.is(C.ol_st_read_f32(f, "b", out, 2), 0, "BF16 -> f32")
  t.ok(out[0] == 1 and out[1] == -3, "BF16 values exact")
  local iv = ffi.new("int32_t[2]")
  t.is(C.ol_st_read_i32(f, "i", iv, 2), 0, "I32 read")
  t.ok(iv[0] == 7 and iv[1] == -1, "I32 values")
  t.is(C.ol_st_read_f32(f, "i", out, 2), -1, "I32 is not read as f32")
  t.ok(ffi.string(C.ol_error()):find("cannot read it as f32", 1, true), "…with a message naming the dtype")
  C.ol_st_close(f)
  -- bf16 checkpoints of other tools load into a model
  local c = ol.Context{ params = 64, step_bytes = 65536 }
  c:param("b", { 2 })
  ck.load(p, c, { optim = false, strict = false })
  t.ok(c:params()[1].data[1] == -3, "checkpoint.load reads a BF16 tensor into an f32 parameter")
end
do  -- I32 through the writer
  local w = ffi.gc(C.ol_st_writer_new(), C.ol_st_writer_free)
  local ids = ffi.new("int32_t[3]", 5, -6, 2 ^ 31 - 1)
  C.ol_st_writer_add(w, "ids", C.OL_ST_I32, 1, ffi.new("int64_t[1]", 3), ids)
  local p = P("i32.st")
  t.is(C.ol_st_writer_save(w, p), 0, "writer saves an I32 tensor")
  local f = C.ol_st_open(p)
  local back = ffi.new("int32_t[3]")
  C.ol_st_read_i32(f, "ids", back, 3)
  t.ok(back[0] == 5 and back[1] == -6 and back[2] == 2 ^ 31 - 1, "I32 round trip")
  C.ol_st_close(f)
  t.is(C.ol_st_writer_add(w, "ids", C.OL_ST_I32, 1, ffi.new("int64_t[1]", 3), ids), -1, "a duplicate name is refused")
end

-- ---------------------------------------------------------------- atomic replacement
do
  local p = P("atomic.safetensors")
  local c1, n1 = make_ctx(11)
  ck.save(p, c1, { step = 1 })
  local s1 = snapshot(c1, n1)
  -- a writer killed midway leaves only its temp file: half a checkpoint of step 2
  local half = read(P("a.safetensors"))
  write(p .. ".tmp.99999", half:sub(1, math.floor(#half / 2)))
  local c2 = make_ctx(12)
  local m2 = ck.load(p, c2)
  t.is(m2.step, 1, "with a dead writer's temp file around, load reads the old checkpoint")
  t.ok(same(snapshot(c2, n1), s1), "…with its values intact")
  -- a real writer killed with SIGKILL while writing a large checkpoint
  local big = P("big.safetensors")
  local script = P("writer.lua")
  write(script, string.format([[
local ol = require "outlierlab"
local ck = require "outlierlab.train.checkpoint"
local ctx = ol.Context{ params = 2 ^ 23 }
ctx:param("w", { 2 ^ 22 }):fill_(tonumber(arg[1]))
for i = 1, 1000 do ck.save(%q, ctx, { step = tonumber(arg[1]) }) end
]], big))
  os.execute(string.format("bin/outlierlab run %s 1 >/dev/null 2>&1 & pid=$!; sleep 1; kill -9 $pid; wait $pid 2>/dev/null", script))
  -- the file is complete or absent, never partial
  local fh = io.open(big, "rb")
  if fh then
    fh:close()
    local info = ck.inspect(big)
    t.is(info.meta.step, 1, "after SIGKILL during repeated saves the checkpoint is a complete one")
  else
    t.skip("writer never finished a save", "after SIGKILL during the first save there is no checkpoint (not a partial one)")
  end
  os.execute("rm -f " .. big .. "*")
end

-- ---------------------------------------------------------------- independent reader
do
  local py
  for _, cand in ipairs { "/usr/bin/python3", "python3" } do
    if os.execute(cand .. " -c 'import numpy' >/dev/null 2>&1") == 0 then py = cand break end
  end
  if not py then
    t.skip("python3-numpy not installed", "python3 + numpy reads the checkpoint")
  else
    local script = P("read.py")
    write(script, [[
import json, struct, sys
import numpy as np
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
meta = h.pop("__metadata__")
print("meta", meta["step"], json.loads(meta["config"])["lr"])
for name, e in h.items():
    assert e["dtype"] == "F32"
    s, t = e["data_offsets"]
    a = np.frombuffer(b[8 + n + s:8 + n + t], dtype="<f4").reshape(e["shape"])
    print(name, "x".join(map(str, a.shape)), " ".join(repr(float(x)) for x in a.ravel()))
]])
    local out = io.popen(py .. " " .. script .. " " .. path .. " 2>&1")
    local lines = {}
    for l in out:lines() do lines[#lines + 1] = l end
    out:close()
    t.is(lines[1], "meta 42 0.1", "numpy reader: metadata")
    -- compare every value numpy read with the engine's
    local byname = {}
    for _, p in ipairs(ctx:params()) do byname[ffi.string(p.name)] = p end
    local checked, mism = 0, 0
    for i = 2, #lines do
      local name, shape, vals = lines[i]:match("^(%S+) (%S+) (.*)$")
      local base = name and (name:match("^optim%.[mv]%.(.*)$") or name)
      local p = base and byname[base]
      if p then
        local buf = name:match("^optim%.m%.") and C.ol_adam_m_data(ctx.raw) or name:match("^optim%.v%.") and C.ol_adam_v_data(ctx.raw) or C.ol_params_data(ctx.raw)
        local off = tonumber(C.ol_param_offset(p))
        if shape ~= table.concat(p:size(), "x") then mism = mism + 1 end
        local k = 0
        for v in vals:gmatch("%S+") do
          if tonumber(v) ~= buf[off + k] then mism = mism + 1 end
          k = k + 1
        end
        if k ~= tonumber(p.numel) then mism = mism + 1 end
        checked = checked + 1
      end
    end
    t.is(checked, 9, "numpy reader sees all 9 tensors")
    t.is(mism, 0, "numpy reads the same shapes and values")
  end
end

os.execute("rm -rf " .. dir)
return t.done()
