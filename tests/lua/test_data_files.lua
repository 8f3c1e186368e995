-- test_data_files — token files (nanoGPT raw uint16, llm.c v1/v2), their validation (errors
-- name the file and the problem), the LM loader on a mapped file, the byte-level tokenizer
-- and vocabulary files.
local t = require "tap"
local ol = require "outlierlab"
local data = require "outlierlab.data"
local ffi = ol.ffi

local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir)
local function P(name) return dir .. "/" .. name end
local function write(path, s) local f = assert(io.open(path, "wb")) f:write(s) f:close() end
local function read(path) local f = assert(io.open(path, "rb")) local s = f:read("*a") f:close() return s end
local function i32le(v)
  if v < 0 then v = v + 2 ^ 32 end
  local b = {}
  for i = 1, 4 do b[i] = string.char(v % 256) v = math.floor(v / 256) end
  return table.concat(b)
end
local function llmc_header(magic, version, count)
  return i32le(magic) .. i32le(version) .. i32le(count) .. string.rep("\0", 1024 - 12)
end

-- ---------------------------------------------------------------- round trips
local ids = { 0, 1, 2, 500, 65535, 7, 42 }
data.write_tokens(P("raw.bin"), ids)
data.write_tokens(P("llmc.bin"), ids, { format = "llmc" })
t.is(#read(P("raw.bin")), 14, "raw16 file: 2 bytes per token, no header")
t.is(#read(P("llmc.bin")), 1024 + 14, "llm.c file: 1024-byte header + 2 bytes per token")
t.ok(read(P("llmc.bin")):sub(1, 12) == i32le(20240520) .. i32le(1) .. i32le(7), "llm.c header: magic 20240520, version 1, count")
for _, name in ipairs { "raw.bin", "llmc.bin" } do
  local tf = data.open_tokens(P(name))
  local vals = {}
  for i = 0, tf.n - 1 do vals[#vals + 1] = tf:get(i) end
  t.is(table.concat(vals, ","), table.concat(ids, ","), name .. ": tokens read back")
  t.is(tf.format, name == "raw.bin" and "raw16" or "llmc", name .. ": format detected")
  t.is(tf:max(), 65535, name .. ": max token")
  tf:close()
end
do  -- llm.c version 2 (uint32 tokens, as for LLaMA-3 vocabularies)
  local p = P("v2.bin")
  write(p, llmc_header(20240520, 2, 3) .. i32le(100000) .. i32le(5) .. i32le(128255))
  local tf = data.open_tokens(p)
  t.is(tf.width, 4, "llm.c v2: 4-byte tokens")
  t.is(tf:get(0) .. "," .. tf:get(2), "100000,128255", "llm.c v2 tokens above 65535")
end
t.throws(function() data.write_tokens(P("big.bin"), { 1, 70000 }) end, "token 1 = 70000 is outside [0, 65535]", "a token too large for uint16 is refused")
t.throws(function() data.write_tokens(P("x.bin"), { 1 }, { format = "bin" }) end, "format must be raw16 or llmc", "unknown write format")

-- ---------------------------------------------------------------- malformed files
local function bad(name, bytes, opts, pattern, what)
  local p = P(name)
  write(p, bytes)
  local ok, err = pcall(data.open_tokens, p, opts)
  err = tostring(err)
  t.ok(not ok and err:find(p, 1, true) and err:find(pattern, 1, true), what, "error was: " .. err)
end
local good = read(P("llmc.bin"))
bad("trunc.bin", good:sub(1, #good - 2), nil, "size mismatch: the header says 7 tokens (1038 bytes with the header) but the file has 1036 bytes (truncated?)", "truncated llm.c file")
bad("long.bin", good .. "\0\0", nil, "size mismatch", "llm.c file longer than its header says")
bad("magic.bin", llmc_header(20240519, 1, 7) .. string.rep("\0", 14), { format = "llmc" }, "bad magic number 20240519", "bad magic (format forced)")
bad("version.bin", llmc_header(20240520, 3, 7) .. string.rep("\0", 14), nil, "unsupported llm.c version 3", "unknown version")
bad("neg.bin", llmc_header(20240520, 1, -5), nil, "negative token count", "negative count")
bad("short.bin", string.rep("\0", 100), { format = "llmc" }, "truncated llm.c header", "file shorter than the header")
bad("odd.bin", "\1\0\2", nil, "odd size 3 bytes", "raw16 with an odd size")
bad("empty.bin", "", nil, "is empty", "empty file")
bad("zero.bin", llmc_header(20240520, 1, 0), nil, "holds no tokens", "header with zero tokens")
do
  local ok, err = pcall(data.open_tokens, P("missing.bin"))
  t.ok(not ok and tostring(err):find(P("missing.bin") .. ": No such file", 1, true), "missing file is named", tostring(err))
  ok, err = pcall(data.open_tokens, P("raw.bin"), { format = "zip" })
  t.ok(not ok and tostring(err):find("unknown format 'zip'", 1, true), "unknown format option", tostring(err))
end
do  -- a window outside the file
  local tf = data.open_tokens(P("raw.bin"))
  local dst = ffi.new("int32_t[8]")
  local ok, err = pcall(tf.copy, tf, 3, 5, dst)
  t.ok(not ok and tostring(err):find("window [3, 8) outside the 7 tokens", 1, true), "reading past the end names the window", tostring(err))
end

-- ---------------------------------------------------------------- LM loader on a mapped file
do
  local c = data.corpus { seed = 2, n_tokens = 20000, vocab_size = 256 }
  local p = P("corpus.bin")
  data.write_tokens(p, c, { format = "llmc" })
  local tf = data.open_tokens(p)
  t.is(tf.n, c.n, "the corpus written as an llm.c file has all its tokens")
  local ctx = ol.Context { params = 64, step_bytes = 2 ^ 22 }
  for _, split in ipairs { "train", "val" } do
    local A = data.LMLoader { tokens = c, B = 4, T = 32, seed = 3, split = split }
    local F = data.LMLoader { tokens = tf, B = 4, T = 32, seed = 3, split = split }
    local same = true
    for _ = 1, 3 do
      ctx:reset()
      local a, f = A:next(ctx), F:next(ctx)
      local la, lf, ta, tf_ = a.ids:tolist(), f.ids:tolist(), a.targets:tolist(), f.targets:tolist()
      for i = 1, #la do if la[i] ~= lf[i] or ta[i] ~= tf_[i] then same = false end end
    end
    t.ok(same, "LMLoader on the mapped file == LMLoader on the corpus (" .. split .. ")")
  end
  local raw = data.open_tokens((data.write_tokens(P("corpus16.bin"), c)))
  t.is(raw.format, "raw16", "nanoGPT-style file of the corpus")
  ctx:reset()
  local b = data.LMLoader { tokens = raw, B = 2, T = 8, seed = 1, val_fraction = 0.5 }:next(ctx)
  t.is(b.ids:shape_str(), "(2,8)", "LMLoader on a raw16 file")
end

-- ---------------------------------------------------------------- byte-level tokenizer
do
  local p = P("text.txt")
  write(p, "Héllo, world.\n\nSecond doc.")
  local bc = data.byte_corpus { p, doc_sep = "\n\n" }
  t.is(bc.n_docs, 2, "doc_sep splits the file into documents")
  t.is(bc.n, 2 + #"Héllo, world." + #"Second doc.", "one BOS per document plus the bytes")
  t.is(bc.tokens[0], bc.special.bos, "documents start with BOS")
  t.is(bc.tokens[1], ("H"):byte(), "bytes are ids 0..255")
  t.is(bc.tokens[2], 0xC3, "UTF-8 é is two byte tokens")
  t.is(bc.tokens[bc.doc_start[1]], bc.special.bos, "second document starts with BOS")
  t.is(bc.vocab_size, 262, "256 bytes + 6 specials")
  t.is(bc.vocab[0xC3], "<0xC3>", "non-ASCII bytes are labelled <0xNN>")
  t.is(bc.category(("."):byte()), "delimiter", "'.' is a delimiter")
  t.is(bc.category(10), "delimiter", "newline is a delimiter")
  t.is(bc.category(32), "weak", "space is weak")
  t.is(bc.category(bc.special.bos), "initial", "BOS is initial")
  t.is(bc.category(("e"):byte()), "other", "letters are other")
  local one = data.byte_corpus { p }
  t.is(one.n_docs, 1, "without doc_sep a file is one document")
  write(P("bad.txt"), "ok\n\xff\xfe")
  t.throws(function() data.byte_corpus { P("bad.txt") } end, P("bad.txt") .. ": invalid UTF-8 at byte 3", "invalid UTF-8 names the file and offset")
  write(P("overlong.txt"), "a\xC0\xAF")
  t.throws(function() data.byte_corpus { P("overlong.txt") } end, "invalid UTF-8 at byte 1", "overlong encoding is refused")
  write(P("cut.txt"), "ab\xE2\x82")
  t.throws(function() data.byte_corpus { P("cut.txt") } end, "invalid UTF-8 at byte 2", "a sequence cut by the end of file is refused")
  t.lives(function() data.byte_corpus { P("bad.txt"), check_utf8 = false } end, "check_utf8 = false accepts any bytes")
  -- it feeds the loaders
  local ctx = ol.Context { params = 64, step_bytes = 2 ^ 20 }
  local long = P("long.txt")
  local parts = {}
  for i = 1, 200 do parts[i] = "Sentence number " .. i .. ", with a comma." end
  write(long, table.concat(parts, " "))
  local lc = data.byte_corpus { long }
  ctx:reset()
  local b = data.LMLoader { tokens = lc, B = 2, T = 16, seed = 1 }:next(ctx)
  t.is(b.ids:shape_str(), "(2,16)", "LMLoader on a byte corpus")
  local m = data.MLMLoader { corpus = lc, B = 2, T = 48, seed = 1 }:next(ctx)
  t.is(m.ids:get(0, 0), lc.special.cls, "MLMLoader on a byte corpus (sentences split at '.')")
end

-- ---------------------------------------------------------------- vocabulary file
do
  local c = data.corpus { seed = 1, n_docs = 2, vocab_size = 200 }
  local p = P("vocab.json")
  data.save_vocab(p, c)
  local v = data.load_vocab(p)
  local same = true
  for id = 0, 199 do if v[id] ~= c.vocab[id] then same = false end end
  t.ok(same, "vocabulary file round trip (JSON array, index = id; newline label kept)")
  t.is(v[c.special.newline], "\n", "the newline token's label")
end

os.execute("rm -rf " .. dir)
return t.done()
