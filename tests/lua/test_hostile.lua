-- test_hostile — the hostile-input corpus (tests/hostile/): every malformed safetensors and
-- token file is refused with one message that names the file and the defect; the valid files
-- load. The committed files must be exactly what tests/hostile/cases.lua describes (they are
-- also the fuzzers' seed corpus: tests/fuzz/).
local t = require "tap"
local ol = require "outlierlab"
local ffi = require "ffi"
local checkpoint = require "outlierlab.train.checkpoint"
local data = require "outlierlab.data"
local C = ol.C

local dir = ol.root .. "/tests/hostile"
local cases = dofile(dir .. "/cases.lua").cases

-- every tensor of an open file read as f32 or i32 (by dtype), through the engine
local float_types = { F32 = true, F16 = true, BF16 = true, F64 = true }
local function read_all(path)
  local info = checkpoint.inspect(path)
  local f = C.ol_st_open(path)
  if f == nil then ol.engine_error(1) end
  local ok, err = pcall(function()
    for _, e in ipairs(info.tensors) do
      local n = 1
      for _, d in ipairs(e.shape) do n = n * d end
      local rc
      if float_types[e.dtype] then rc = C.ol_st_read_f32(f, e.name, ffi.new("float[?]", n + 1), n)
      else rc = C.ol_st_read_i32(f, e.name, ffi.new("int32_t[?]", n + 1), n) end
      if rc ~= 0 then ol.engine_error(1) end
    end
  end)
  C.ol_st_close(f)
  if not ok then error(err, 0) end
  return info
end

local function read_tokens(path, format)
  local tf = data.open_tokens(path, { format = format })
  local buf = ffi.new("int32_t[?]", tf.n)
  tf:copy(0, tf.n, buf)
  local n = tf.n
  tf:close()
  return n
end

local nst, ntok, refused = 0, 0, 0
for _, c in ipairs(cases) do
  local path = dir .. "/" .. c.file
  local on_disk = t.slurp(path)
  t.ok(on_disk == c.bytes, c.file .. ": the committed file is what cases.lua describes",
       "run bin/outlierlab run tests/hostile/make_corpus.lua")
  local is_st = c.file:match("%.safetensors$") ~= nil
  if is_st then nst = nst + 1 else ntok = ntok + 1 end
  local ok, res = pcall(is_st and read_all or read_tokens, path, c.format)
  if c.expect then
    refused = refused + 1
    local msg = tostring(res)
    t.ok(not ok and msg:find(path, 1, true) and msg:find(c.expect, 1, true) and not msg:find("\n"),
         c.file .. ": refused, naming the file and '" .. c.expect .. "'", ok and "loaded without an error" or msg)
  elseif is_st then
    t.ok(ok and #res.tensors == c.tensors, c.file .. ": valid, loads " .. c.tensors .. " tensors", ok and #res.tensors or res)
  else
    t.ok(ok and res == c.count, c.file .. ": valid, " .. c.count .. " tokens", res)
  end
end
t.ok(nst >= 60 and ntok >= 18, string.format("corpus: %d safetensors and %d token files, %d refused", nst, ntok, refused))

-- every file in the corpus directories is a case (nothing stale left behind)
local listed = {}
for _, c in ipairs(cases) do listed[c.file] = true end
local p = io.popen("cd '" .. dir .. "' && ls safetensors/* tokens/*")
local stray = {}
for f in p:lines() do if not listed[f] then stray[#stray + 1] = f end end
p:close()
t.is(table.concat(stray, ", "), "", "no file in tests/hostile/ without a case")

-- a duplicate metadata key: C and checkpoint.load/inspect agree because the reader refuses it
t.throws(function() checkpoint.inspect(dir .. "/safetensors/meta_key_twice.safetensors") end,
  "appears twice", "checkpoint.inspect refuses a duplicate metadata key")

return t.done()
