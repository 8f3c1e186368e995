-- tests/hostile/llama2c_cases.lua — the hostile llama2.c corpus: checkpoints (.bin, versions 0,
-- 1, 2) and tokenizers (tokenizer.bin format), each a defect of its format (or a valid file),
-- with the message part the reader (engine/io_llama2c.c) must give.
--   return { cases = { { file = "llama2c/<name>.bin" | "llama2c/tok_<name>.bin", bytes = "...",
--                        expect = "message part" | nil (valid), kind = "model" | "tokenizer",
--                        vocab = n (tokenizers: the model's vocab_size; 0 = read to the end),
--                        nan = true (the header is valid, a weight is not: refused on reading) }, ... },
--            weights = fn(version, shared) -> the valid model's values }
-- tests/hostile/make_corpus.lua writes the files (also the llama2c fuzzer's seeds);
-- tests/lua/test_pretrained_llama2c_hostile.lua checks them.
local ffi = require "ffi"
local M = {}
local cases = {}

local function i32(n) return ffi.string(ffi.new("int32_t[1]", n), 4) end
local function f32s(list) return ffi.string(ffi.new("float[?]", #list, list), 4 * #list) end

-- a small valid model: dim 8, hidden 12, 2 layers, 2 heads, 1 kv head, vocab 16, seq_len 4
local H = { dim = 8, hid = 12, L = 2, NH = 2, NKV = 1, V = 16, T = 4 }
M.H = H
local KV = H.dim / H.NH * H.NKV
-- the tensors in llama2.c's order of version 0, each a list of values (deterministic)
local SIZES = { { "tok", H.V * H.dim }, { "rms_att", H.L * H.dim }, { "wq", H.L * H.dim * H.dim }, { "wk", H.L * KV * H.dim },
                { "wv", H.L * KV * H.dim }, { "wo", H.L * H.dim * H.dim }, { "rms_ffn", H.L * H.dim }, { "w1", H.L * H.hid * H.dim },
                { "w2", H.L * H.dim * H.hid }, { "w3", H.L * H.hid * H.dim }, { "rms_final", H.dim } }
local W = {}
for k, s in ipairs(SIZES) do
  local v = {}
  for i = 1, s[2] do v[i] = (s[1]:match("^rms") and 1 or 0) + 0.5 * math.sin(i * 0.7 + k) end
  W[s[1]] = v
end
W.wcls = {}
for i = 1, H.V * H.dim do W.wcls[i] = 0.3 * math.cos(i * 0.3) end
M.W = W
local function cat(names)
  local out = {}
  for _, n in ipairs(names) do out[#out + 1] = f32s(W[n]) end
  return table.concat(out)
end
local function header7(o)
  o = o or {}
  local out = {}
  for _, k in ipairs { "dim", "hid", "L", "NH", "NKV", "V", "T" } do out[#out + 1] = i32(o[k] or H[k]) end
  return table.concat(out)
end
local ORDER0 = { "tok", "rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3", "rms_final" }
local FREQ = string.rep("\0", 2 * 4 * H.T * (H.dim / H.NH) / 2)
-- version 0: vocab_size negative when untied
local function v0(shared) return header7 { V = shared and H.V or -H.V } .. cat(ORDER0) .. FREQ .. (shared and "" or cat { "wcls" }) end
local function v12_header(version, shared, group, o)
  local h = i32(0x616b3432) .. i32(version) .. header7(o) .. string.char(shared and 1 or 0)
  if version == 2 then h = h .. i32(group) end
  return h .. string.rep("\0", 256 - #h)
end
local function v1(shared) return v12_header(1, shared) .. cat { "rms_att", "rms_ffn", "rms_final", "tok", "wq", "wk", "wv", "wo", "w1", "w2", "w3" } .. (shared and "" or cat { "wcls" }) end
-- version 2: Q8_0 per group of each layer's matrix (export.py quantize_q80): q = round(w / (max|w| / 127))
local function q80(list, group)
  local q, s = {}, {}
  for g = 0, #list / group - 1 do
    local mx = 0
    for i = 1, group do mx = math.max(mx, math.abs(list[g * group + i])) end
    local sc = tonumber(ffi.new("float", mx / 127))
    s[#s + 1] = sc
    for i = 1, group do
      local x = list[g * group + i] / sc
      q[#q + 1] = x >= 0 and math.floor(x + 0.5) or -math.floor(-x + 0.5)
    end
  end
  return ffi.string(ffi.new("int8_t[?]", #q, q), #q), f32s(s)
end
local function v2(shared, group)
  local qs, ss = {}, {}
  local list = { "tok", "wq", "wk", "wv", "wo", "w1", "w2", "w3" }
  if not shared then list[#list + 1] = "wcls" end
  for _, n in ipairs(list) do
    local q, s = q80(W[n], group)
    qs[#qs + 1], ss[#ss + 1] = q, s
  end
  return v12_header(2, shared, group) .. cat { "rms_att", "rms_ffn", "rms_final" } .. table.concat(qs) .. table.concat(ss)
end
M.q80 = q80

local function model(name, bytes, expect, o)
  local c = { file = "llama2c/" .. name .. ".bin", bytes = bytes, expect = expect, kind = "model" }
  for k, v in pairs(o or {}) do c[k] = v end
  cases[#cases + 1] = c
end

-- ---------------------------------------------------------------- valid checkpoints
model("valid_v0_tied", v0(true), nil, { version = 0, shared = true })
model("valid_v0_untied", v0(false), nil, { version = 0, shared = false })
model("valid_v1_untied", v1(false), nil, { version = 1, shared = false })
model("valid_v1_tied", v1(true), nil, { version = 1, shared = true })
model("valid_v2_tied", v2(true, 8), nil, { version = 2, shared = true, group = 8 })
model("valid_v2_untied", v2(false, 4), nil, { version = 2, shared = false, group = 4 })

-- ---------------------------------------------------------------- sizes: truncated, extra bytes
local good = v0(true)
model("short_header", good:sub(1, 10), "less than the 28-byte header")
model("empty", "", "less than the 28-byte header")
model("truncated_one_float", good:sub(1, -5), "is truncated")
model("truncated_half", good:sub(1, #good / 2), "is truncated")
model("extra_bytes", good .. "\0\0\0\0", "has bytes the header does not account for")
model("header_lies_layers", header7 { L = 3, V = H.V } .. good:sub(29), "is truncated")
model("header_lies_untied", header7 { V = -H.V } .. good:sub(29), "is truncated")   -- says untied, holds no wcls
model("v1_short_header", i32(0x616b3432) .. i32(1) .. header7(), "less than the 256-byte header")
model("v1_truncated", v1(false):sub(1, -9), "is truncated")

-- ---------------------------------------------------------------- header fields
model("dim_zero", header7 { dim = 0 } .. good:sub(29), "header 'dim' = 0 must be at least 1")
model("dim_negative", header7 { dim = -8 } .. good:sub(29), "header 'dim' = -8 must be at least 1")
model("hidden_zero", header7 { hid = 0 } .. good:sub(29), "header 'hidden_dim' = 0 must be at least 1")
model("layers_negative", header7 { L = -2 } .. good:sub(29), "header 'n_layers' = -2 must be at least 1")
model("heads_zero", header7 { NH = 0 } .. good:sub(29), "header 'n_heads' = 0 must be at least 1")
model("kv_heads_zero", header7 { NKV = 0 } .. good:sub(29), "header 'n_kv_heads' = 0 must be at least 1")
model("vocab_zero", header7 { V = 0 } .. good:sub(29), "header 'vocab_size' = 0 must be at least 1")
model("vocab_int_min", header7 { V = -2147483648 } .. good:sub(29), "header 'vocab_size' = -2147483648 is out of range")
model("seq_len_zero", header7 { T = 0 } .. good:sub(29), "header 'seq_len' = 0 must be at least 1")
model("heads_not_dividing", header7 { NH = 3 } .. good:sub(29), "header 'n_heads' = 3 does not divide 'dim' = 8")
model("kv_heads_not_dividing", header7 { NH = 4, NKV = 3 } .. good:sub(29), "header 'n_kv_heads' = 3 does not divide 'n_heads' = 4")
model("kv_heads_more", header7 { NKV = 4 } .. good:sub(29), "header 'n_kv_heads' = 4 does not divide 'n_heads' = 2")
model("head_size_odd", header7 { dim = 6, NH = 2 } .. good:sub(29), "head size dim / n_heads = 3 must be even")
-- sizes whose products overflow 64 bits (or any file): refused before anything is read
model("overflow_dims", header7 { dim = 1073741824, hid = 2147483647, L = 2147483647, NH = 1, NKV = 1, V = 2147483647 } .. good:sub(29), "overflow")
model("overflow_vocab", header7 { dim = 1073741824, NH = 1, NKV = 1, V = -2147483647, L = 1, hid = 1 } .. good:sub(29), "overflow")
model("seq_len_huge", header7 { dim = 2, NH = 1, NKV = 1, hid = 1, L = 1, V = 1, T = 2147483647 } .. good:sub(29), "is truncated")
model("huge_but_fits_64bit", header7 { dim = 65536, hid = 65536, L = 4096, NH = 1, NKV = 1, V = 65536 } .. good:sub(29), "is truncated")
model("v1_version_3", v12_header(3, true) .. good:sub(29), "header 'version' = 3 is not supported")
model("v1_version_negative", v12_header(-1, true) .. good:sub(29), "header 'version' = -1 is not supported")
model("v1_shared_flag", (function() local b = v1(true) return b:sub(1, 36) .. "\7" .. b:sub(38) end)(), "header 'shared_classifier' = 7 must be 0 or 1")
model("v1_dim_zero", v12_header(1, true, nil, { dim = 0 }) .. good:sub(29), "header 'dim' = 0 must be at least 1")
model("v2_group_zero", v12_header(2, true, 0), "header 'group_size' = 0 must be at least 1")
model("v2_group_negative", v12_header(2, true, -64), "header 'group_size' = -64 must be at least 1")
model("v2_group_not_dividing", v12_header(2, true, 7) .. string.rep("\0", 4096), "header 'group_size' = 7 does not divide")
-- a valid header, a NaN weight: refused when the tensor is read, naming tensor, layer and element
local nan = v0(true)
nan = nan:sub(1, 28 + 4 * (H.V * H.dim + H.L * H.dim + H.dim * H.dim + 5)) .. f32s { 0 / 0 } .. nan:sub(28 + 4 * (H.V * H.dim + H.L * H.dim + H.dim * H.dim + 5) + 5)
model("nan_weight", nan, "wq of layer 1 holds NaN at element 5", { nan = true })
local inf = v0(true)
inf = inf:sub(1, 28 + 4 * 3) .. f32s { 1 / 0 } .. inf:sub(28 + 4 * 3 + 5)
model("inf_embedding", inf, "token_embedding holds +Inf at element 3", { nan = true })

-- ---------------------------------------------------------------- tokenizers
local function piece(score, s, len) return f32s { score } .. i32(len or #s) .. s end
local function tokfile(max, list) return i32(max) .. table.concat(list) end
local function tok(name, bytes, vocab, expect, n)
  cases[#cases + 1] = { file = "llama2c/tok_" .. name .. ".bin", bytes = bytes, expect = expect, kind = "tokenizer", vocab = vocab, count = n }
end
local P = { piece(0, "<unk>"), piece(0, "\n<s>\n"), piece(0, "\n</s>\n"), piece(-1, "a"), piece(-2, "b"), piece(-3, "ab"), piece(-5, " "), piece(-4, " ab") }
tok("valid", tokfile(7, P), 8, nil, 8)
tok("valid_to_end", tokfile(7, P), 0, nil, 8)
tok("empty", "", 7, "less than its 4-byte max_token_length")
tok("max_len_zero", tokfile(0, P), 7, "'max_token_length' = 0 must be at least 1")
tok("max_len_negative", tokfile(-7, P), 7, "'max_token_length' = -7 must be at least 1")
tok("truncated_score", tokfile(7, P):sub(1, -8), 8, "is truncated in piece 7: 4 bytes left")
tok("truncated_bytes", tokfile(7, P):sub(1, -2), 8, "is truncated in piece 7: its length 3 passes the end of the file")
tok("length_negative", tokfile(5, { P[1], piece(0, "x", -5) }), 2, "piece 1 has length -5, outside 1 .. max_token_length 5")
tok("length_zero", tokfile(5, { P[1], piece(0, "", 0) }), 2, "piece 1 has length 0")
tok("length_over_max", tokfile(5, { P[1], piece(0, "abcdefgh") }), 2, "piece 1 has length 8, outside 1 .. max_token_length 5")
tok("length_huge", tokfile(2147483647, { P[1], piece(0, "x", 2147483647) }), 2, "piece 1: its length 2147483647 passes the end of the file")
tok("score_nan", tokfile(5, { P[1], piece(0 / 0, "x") }), 2, "piece 1 has score NaN")
tok("score_inf", tokfile(5, { P[1], piece(-1 / 0, "x") }), 2, "piece 1 has score Inf")
tok("fewer_pieces", tokfile(7, P), 9, "holds 8 pieces, but the model's vocab_size is 9")
tok("more_pieces", tokfile(7, P), 5, "bytes after its 5 pieces")
tok("no_pieces", tokfile(5, {}), 0, "holds no pieces")

M.cases = cases
return M
