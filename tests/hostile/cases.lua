-- tests/hostile/cases.lua — the hostile-input corpus: safetensors and token files, each a
-- defect of its format (or a valid file), with the message part the reader must give.
--   return { { file = "safetensors/<name>.safetensors" | "tokens/<name>.bin",
--              bytes = "...", expect = "message part" | nil (a valid file),
--              tensors = n (valid safetensors) | count = n (valid token file), format = }, ... }
-- tests/hostile/make_corpus.lua writes the files (also the fuzzers' seed corpus);
-- tests/lua/test_hostile.lua checks that the files match this list and that every reader
-- refuses each defect with a message naming the file and the defect, and loads the valid ones.
local M = {}
local cases = {}

local function u64le(n)
  local t = {}
  for i = 1, 8 do t[i] = string.char(n % 256) n = math.floor(n / 256) end
  return table.concat(t)
end
local function i32le(n)
  if n < 0 then n = n + 2 ^ 32 end
  local t = {}
  for i = 1, 4 do t[i] = string.char(n % 256) n = math.floor(n / 256) end
  return table.concat(t)
end
local function i32be(n) return i32le(n):reverse() end
local function u16le(n) return string.char(n % 256, math.floor(n / 256)) end
local function zeros(n) return string.rep("\0", n) end

-- a safetensors file: length + header (padded with spaces to a multiple of 8 unless
-- opts.raw) + data
local function st(header, data, opts)
  opts = opts or {}
  if not opts.raw then header = header .. string.rep(" ", (8 - #header % 8) % 8) end
  return u64le(opts.len or #header) .. header .. (data or "")
end
local function st_case(name, header, data, expect, opts)
  cases[#cases + 1] = { file = "safetensors/" .. name .. ".safetensors", bytes = st(header, data, opts),
                        expect = expect, tensors = opts and opts.tensors }
end
local function one(entry, data, name, expect)   -- a file with one tensor 'a'
  st_case(name, '{"a":' .. entry .. '}', data, expect)
end
local F8 = zeros(8)   -- two F32 zeros

-- ---------------------------------------------------------------- valid files
st_case("valid_one", '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F8, nil, { tensors = 1 })
st_case("valid_meta_mixed",
  '{"__metadata__":{"format":"pt","note":"caf\\u00e9 \xe2\x82\xac"},"w":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]},' ..
  '"ids":{"dtype":"I32","shape":[3],"data_offsets":[8,20]},"e":{"dtype":"BF16","shape":[0],"data_offsets":[20,20]}}',
  zeros(20), nil, { tensors = 3 })
st_case("valid_empty", "{}", "", nil, { tensors = 0 })
st_case("valid_utf8_names", '{"\xc3\xa9t\xc3\xa9":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},' ..
  '"\\ud83d\\ude00":{"dtype":"I8","shape":[],"data_offsets":[1,2]}}', zeros(2), nil, { tensors = 2 })
st_case("valid_scalar_f64", '{"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]}}', F8, nil, { tensors = 1 })

-- ---------------------------------------------------------------- header length
cases[#cases + 1] = { file = "safetensors/short_file.safetensors", bytes = "\5\0\0\0\0", expect = "less than the 8-byte header length" }
st_case("len_huge", '{}', "", "corrupted header length", { len = 2 ^ 50 })
st_case("len_past_eof", '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F8, "corrupted header length", { len = 4096 })
st_case("len_zero", '{}', "", "does not start with '{'", { len = 0, raw = true })
st_case("len_short", '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F8, "bad JSON header", { len = 20 })

-- ---------------------------------------------------------------- JSON
st_case("json_broken", '{"a":{"dtype":"F32",', "", "bad JSON header")
st_case("json_array", '[{"dtype":"F32"}]', "", "does not start with '{'")
st_case("json_not_object_tensor", '{"a":[1,2]}', "", "entry is not an object")
st_case("json_deep", "{" .. string.rep('"a":{', 1200) .. string.rep("}", 1201), "", "bad JSON header")
st_case("after_object_garbage", '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}xyz', F8, "after the JSON object")
st_case("after_object_nul", '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}\0\0\0\0', F8, "after the JSON object", { raw = true })
st_case("after_object_newline", '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}\n', F8, "padded with spaces only", { raw = true })
st_case("after_object_second", '{}{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F8, "after the JSON object")

-- ---------------------------------------------------------------- offsets
one('{"dtype":"F32","shape":[1],"data_offsets":[0,4.0]}', zeros(4), "offsets_float", "not a non-negative integer")
one('{"dtype":"F32","shape":[1],"data_offsets":[0,4e0]}', zeros(4), "offsets_exponent", "not a non-negative integer")
one('{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}', zeros(4), "offsets_negative", "not a non-negative integer")
one('{"dtype":"F32","shape":[1],"data_offsets":[00,4]}', zeros(4), "offsets_leading_zero", "not a non-negative integer")
one('{"dtype":"F32","shape":[1],"data_offsets":[0,99999999999999999999]}', zeros(4), "offsets_huge", "data_offsets must be [begin, end] integers")
one('{"dtype":"F32","shape":[1],"data_offsets":["0","4"]}', zeros(4), "offsets_strings", "data_offsets must be [begin, end] integers")
one('{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}', zeros(8), "offsets_three", "data_offsets must be [begin, end] integers")
one('{"dtype":"F32","shape":[1]}', zeros(4), "offsets_missing", "data_offsets must be [begin, end] integers")
one('{"dtype":"F32","shape":[0],"data_offsets":[4,0]}', zeros(4), "offsets_reversed", "end 0 < begin 4")
one('{"dtype":"F32","shape":[2],"data_offsets":[0,8]}', zeros(4), "offsets_past_end", "offset past end")
st_case("offsets_overlap", '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}',
  zeros(12), "overlaps the previous tensor")
st_case("offsets_gap", '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}',
  zeros(12), "gap in the data area")
one('{"dtype":"F32","shape":[1],"data_offsets":[0,4]}', zeros(12), "data_trailing", "trailing garbage")

-- ---------------------------------------------------------------- dtypes
one('{"dtype":"F128","shape":[1],"data_offsets":[0,4]}', zeros(4), "dtype_unknown", "unknown dtype 'F128'")
one('{"dtype":"f32","shape":[1],"data_offsets":[0,4]}', zeros(4), "dtype_lower_case", "unknown dtype 'f32'")
one('{"dtype":4,"shape":[1],"data_offsets":[0,4]}', zeros(4), "dtype_number", "missing or non-string dtype")
one('{"shape":[1],"data_offsets":[0,4]}', zeros(4), "dtype_missing", "missing or non-string dtype")
one('{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}', zeros(4), "entry_unknown_key", "unknown key 'extra'")

-- ---------------------------------------------------------------- shapes
one('{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}', zeros(4), "shape_float", "not a non-negative integer")
one('{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}', zeros(4), "shape_negative", "not a non-negative integer")
one('{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}', zeros(4), "shape_9_dims", "9 dims")
one('{"dtype":"F32","shape":[3],"data_offsets":[0,8]}', zeros(8), "shape_mismatch", "shape/offset mismatch")
one('{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,4]}', zeros(4), "shape_overflow", "shape overflows")
one('{"dtype":"F32","data_offsets":[0,4]}', zeros(4), "shape_missing", "missing shape")
one('{"dtype":"F32","shape":"1","data_offsets":[0,4]}', zeros(4), "shape_string", "missing shape")

-- ---------------------------------------------------------------- names
local entry = '{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'
local function named(name, fname, expect) st_case(fname, '{"' .. name .. '":' .. entry .. '}', zeros(4), expect) end
named("a\x80b", "name_utf8_continuation", "invalid UTF-8 (byte 0x80)")
named("a\xc0\x80", "name_utf8_overlong", "invalid UTF-8 (byte 0xC0)")
named("a\xed\xa0\x80", "name_utf8_surrogate", "invalid UTF-8 (byte 0xED)")
named("a\xe2\x82", "name_utf8_truncated", "invalid UTF-8 (byte 0xE2)")
named("a\xff", "name_utf8_ff", "invalid UTF-8 (byte 0xFF)")
named("a\0b", "name_raw_nul", "control character 0x00")
named("a\1b", "name_raw_control", "control character 0x01")
named("a\\u0000b", "name_escaped_nul", "(NUL)")
named("a\\ud800", "name_lone_high_surrogate", "bad JSON header")
named("a\\udc00", "name_lone_low_surrogate", "bad JSON header")
named("", "name_empty", "empty name")
st_case("name_twice", '{"a":' .. entry .. ',"a":' .. entry .. '}', zeros(4), "key 'a' appears twice")

-- ---------------------------------------------------------------- metadata
local A = '"a":' .. entry
st_case("meta_not_object", '{"__metadata__":"x",' .. A .. '}', zeros(4), "__metadata__ is not an object")
st_case("meta_number_value", '{"__metadata__":{"step":12},' .. A .. '}', zeros(4), "value of 'step' is not a string")
st_case("meta_key_twice", '{"__metadata__":{"step":"1","step":"2"},' .. A .. '}', zeros(4),
  "key 'step' appears twice in the object '__metadata__'")
st_case("meta_object_twice", '{"__metadata__":{"a":"1"},"__metadata__":{"b":"2"},' .. A .. '}', zeros(4),
  "key '__metadata__' appears twice")
st_case("meta_value_not_utf8", '{"__metadata__":{"k":"\xfe"},' .. A .. '}', zeros(4), "invalid UTF-8 (byte 0xFE)")
st_case("meta_value_float_in_array", '{"__metadata__":{"k":[1.5]},' .. A .. '}', zeros(4), "not a non-negative integer")

-- ---------------------------------------------------------------- token files
local function tok(name, bytes, expect, opts)
  opts = opts or {}
  cases[#cases + 1] = { file = "tokens/" .. name .. ".bin", bytes = bytes, expect = expect, count = opts.count,
                        format = opts.format }
end
local MAGIC = 20240520
local function llmc(words, payload)
  local h = {}
  for i = 1, 256 do h[i] = i32le(words[i] or 0) end
  return table.concat(h) .. (payload or "")
end
local function toks16(list) local t = {} for i, v in ipairs(list) do t[i] = u16le(v) end return table.concat(t) end
local five = toks16 { 1, 2, 65535, 0, 300 }

tok("valid_raw16", five, nil, { count = 5 })
tok("valid_llmc_v1", llmc({ MAGIC, 1, 5 }, five), nil, { count = 5 })
tok("valid_llmc_v2", llmc({ MAGIC, 2, 3 }, i32le(7) .. i32le(70000) .. i32le(0)), nil, { count = 3 })
tok("valid_raw16_forced", llmc({ MAGIC + 1, 1, 5 }, five), nil, { count = 517, format = "raw16" })
tok("empty", "", "is empty")
tok("raw_odd_size", five .. "\1", "odd size 11 bytes")
tok("llmc_wrong_magic", llmc({ MAGIC + 1, 1, 5 }, five), "starts like an llm.c header (version 1, reserved words zero) but its magic is 20240521")
tok("llmc_zero_magic", llmc({ 0, 2, 2 }, i32le(1) .. i32le(2)), "but its magic is 0")
tok("llmc_swapped_magic", i32be(MAGIC) .. llmc({ nil, 1, 5 }, five):sub(5), "byte-swapped llm.c magic")
tok("llmc_big_endian", (function()
  local h = {}
  for i = 1, 256 do h[i] = i32be(({ MAGIC, 1, 5 })[i] or 0) end
  return table.concat(h) .. five
end)(), "byte-swapped llm.c magic")
tok("llmc_model_file", llmc({ 20240326, 3, 1024, 50257, 12, 12, 768, 50304 }, zeros(64)), "llm.c model checkpoint")
tok("llmc_tokenizer_file", llmc({ 20240328, 2, 50257, 50256 }, zeros(64)), "llm.c tokenizer file")
tok("llmc_bad_version", llmc({ MAGIC, 3, 5 }, five), "unsupported llm.c version 3")
tok("llmc_negative_count", llmc({ MAGIC, 1, -5 }, five), "negative token count -5")
tok("llmc_truncated_tokens", llmc({ MAGIC, 1, 6 }, five), "size mismatch")
tok("llmc_trailing_bytes", llmc({ MAGIC, 1, 4 }, five), "size mismatch")
tok("llmc_truncated_header", llmc({ MAGIC, 1, 5 }):sub(1, 100), "truncated llm.c header")
tok("llmc_no_tokens", llmc({ MAGIC, 1, 0 }), "holds no tokens")
tok("llmc_v2_token_too_big", llmc({ MAGIC, 2, 1 }, "\255\255\255\255"), "does not fit int32")

M.cases = cases
return M
