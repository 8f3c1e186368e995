-- data/files — token files (nanoGPT raw uint16, llm.c with header; engine/io_tokens.c), a
-- byte-level tokenizer for any UTF-8 text file, and the vocabulary file for plots.
--
--   local tf = data.open_tokens("train.bin")            -- memory-mapped, header/size checked
--   tf.n, tf.format ("raw16"|"llmc"), tf:max(), tf:get(i), tf:close()
--   data.write_tokens("x.bin", corpus_or_table, {format = "llmc"|"raw16"})
--   local c = data.byte_corpus{ "book.txt", doc_sep = "\n\n\n" }  -- corpus table, ids 0..255 + specials
--   data.save_vocab("vocab.json", corpus)                -- JSON array, index = token id
local ffi = require "ffi"
local ol = require "outlierlab"
local json = require "outlierlab.util.json"
local C = ol.C

local M = {}

local formats = { auto = C.OL_TOK_AUTO, raw16 = C.OL_TOK_RAW16, llmc = C.OL_TOK_LLMC }
local format_names = { [tonumber(C.OL_TOK_RAW16)] = "raw16", [tonumber(C.OL_TOK_LLMC)] = "llmc" }

local TokenFile = {}
TokenFile.__index = TokenFile
M.TokenFile = TokenFile

function M.open_tokens(path, opts)
  opts = opts or {}
  if type(path) ~= "string" then error("data.open_tokens: path must be a string", 2) end
  local fmt = formats[opts.format or "auto"]
  if not fmt then error("data.open_tokens: " .. path .. ": unknown format '" .. tostring(opts.format) .. "' (auto, raw16, llmc)", 2) end
  local f = C.ol_tokens_open(path, fmt)
  if f == nil then ol.engine_error(1) end
  f = ffi.gc(f, C.ol_tokens_close)
  return setmetatable({ f = f, path = path, n = tonumber(C.ol_tokens_count(f)),
                        format = format_names[tonumber(C.ol_tokens_format(f))],
                        width = tonumber(C.ol_tokens_width(f)), kind = "token_file" }, TokenFile)
end

function TokenFile:max() return tonumber(C.ol_tokens_max(self.f)) end
function TokenFile:get(i)
  local v = ffi.new("int32_t[1]")
  if C.ol_tokens_copy_i32(self.f, i, 1, v) ~= 0 then ol.engine_error(1) end
  return v[0]
end
-- dst (int32 pointer) <- tokens [start, start+n)
function TokenFile:copy(start, n, dst)
  if C.ol_tokens_copy_i32(self.f, start, n, dst) ~= 0 then ol.engine_error(2) end
end
function TokenFile:close()
  if self.f ~= nil then ffi.gc(self.f, nil) C.ol_tokens_close(self.f) self.f = nil end
end

-- write_tokens(path, src, opts): src is a corpus table ({tokens, n}), a Lua array of ids,
-- or an int32 pointer with opts.n. opts.format = "raw16" (default) or "llmc".
function M.write_tokens(path, src, opts)
  opts = opts or {}
  local fmt = formats[opts.format or "raw16"]
  if not fmt or fmt == C.OL_TOK_AUTO then error("data.write_tokens: " .. path .. ": format must be raw16 or llmc", 2) end
  local ptr, n
  if type(src) == "table" and src.tokens ~= nil then ptr, n = src.tokens, src.n
  elseif type(src) == "table" then
    n = #src
    ptr = ffi.new("int32_t[?]", math.max(n, 1))
    for i = 1, n do ptr[i - 1] = src[i] end
  elseif type(src) == "cdata" then ptr, n = src, opts.n
  else error("data.write_tokens: src must be a corpus, a table of ids or an int32 pointer", 2) end
  if C.ol_tokens_write(path, fmt, ptr, n or 0) ~= 0 then ol.engine_error(1) end
  return path
end

-- ---------------------------------------------------------------- byte-level tokenizer
-- ids 0..255 are bytes; specials follow.
M.BYTE_SPECIALS = { "<bos>", "<eos>", "[PAD]", "[CLS]", "[SEP]", "[MASK]" }

local function byte_vocab()
  local words, cat = {}, {}
  for b = 0, 255 do
    local s
    if b == 10 then s = "\n" elseif b >= 32 and b < 127 then s = string.char(b) else s = string.format("<0x%02X>", b) end
    words[b], cat[b] = s, "other"
  end
  for i, s in ipairs(M.BYTE_SPECIALS) do words[255 + i], cat[255 + i] = s, "other" end
  local special = { bos = 256, eos = 257, pad = 258, cls = 259, sep = 260, mask = 261,
                    period = 46, comma = 44, newline = 10 }
  cat[special.bos], cat[special.cls] = "initial", "initial"
  for _, d in ipairs { special.sep, special.eos, 46, 44, 10 } do cat[d] = "delimiter" end
  cat[32] = "weak"    -- the space: the byte-level analogue of a weak-semantic token
  return words, cat, special
end

-- offset of the first invalid UTF-8 sequence in p[0..n) (RFC 3629: no overlongs, no
-- surrogates, nothing above U+10FFFF), or -1
local function utf8_error(p, n)
  local i = 0
  while i < n do
    local c = p[i]
    if c < 0x80 then i = i + 1
    else
      local k, lo, hi = 0, 0x80, 0xBF
      if c >= 0xC2 and c <= 0xDF then k = 1
      elseif c >= 0xE0 and c <= 0xEF then k = 2
        if c == 0xE0 then lo = 0xA0 elseif c == 0xED then hi = 0x9F end
      elseif c >= 0xF0 and c <= 0xF4 then k = 3
        if c == 0xF0 then lo = 0x90 elseif c == 0xF4 then hi = 0x8F end
      else return i end
      if i + k >= n then return i end
      for j = 1, k do
        local cc = p[i + j]
        if cc < (j == 1 and lo or 0x80) or cc > (j == 1 and hi or 0xBF) then return i end
      end
      i = i + k + 1
    end
  end
  return -1
end
M.utf8_error = utf8_error

-- byte_corpus{path1, path2, ..., doc_sep = nil|string, check_utf8 = true} -> corpus table.
-- Each file is a document (BOS first); with doc_sep each file is also split at doc_sep.
function M.byte_corpus(opts)
  if type(opts) == "string" then opts = { opts } end
  if type(opts) ~= "table" or #opts == 0 then error("data.byte_corpus: give one or more file paths", 2) end
  local pieces, total = {}, 0
  for _, path in ipairs(opts) do
    local fh, err = io.open(path, "rb")
    if not fh then error("data.byte_corpus: cannot open " .. tostring(err), 2) end
    local text = fh:read("*a")
    fh:close()
    if opts.check_utf8 ~= false then
      local at = utf8_error(ffi.cast("const uint8_t *", text), #text)
      if at >= 0 then error(string.format("data.byte_corpus: %s: invalid UTF-8 at byte %d", path, at), 2) end
    end
    local docs = {}
    if opts.doc_sep then
      local pos = 1
      while true do
        local a, b = text:find(opts.doc_sep, pos, true)
        local d = text:sub(pos, (a or #text + 1) - 1)
        if #d > 0 then docs[#docs + 1] = d end
        if not a then break end
        pos = b + 1
      end
    elseif #text > 0 then docs[1] = text end
    for _, d in ipairs(docs) do pieces[#pieces + 1] = d total = total + #d + 1 end
  end
  if total == 0 then error("data.byte_corpus: the files hold no text", 2) end
  local words, cat, special = byte_vocab()
  local buf = ffi.new("int32_t[?]", total)
  local d_start = ffi.new("int32_t[?]", #pieces)
  local n = 0
  for i, d in ipairs(pieces) do
    d_start[i - 1] = n
    buf[n] = special.bos
    n = n + 1
    local p = ffi.cast("const uint8_t *", d)
    for j = 0, #d - 1 do buf[n + j] = p[j] end
    n = n + #d
  end
  return { tokens = buf, n = n, vocab = words, vocab_size = 262, special = special,
           category = function(id) return cat[id] end, categories = cat,
           n_docs = #pieces, doc_start = d_start, kind = "bytes" }
end

-- save_vocab(path, corpus): JSON array of strings, element i = token id i; atomic.
function M.save_vocab(path, corpus)
  local list = {}
  for i = 0, corpus.vocab_size - 1 do list[i + 1] = corpus.vocab[i] or "" end
  local tmp = path .. ".tmp." .. tostring(os.time()) .. tostring(math.random(1e9))
  local fh, err = io.open(tmp, "wb")
  if not fh then error("data.save_vocab: cannot create " .. tostring(err), 2) end
  fh:write(json.encode(list), "\n")
  fh:close()
  local ok, e = os.rename(tmp, path)
  if not ok then os.remove(tmp) error("data.save_vocab: cannot rename to " .. path .. ": " .. tostring(e), 2) end
  return path
end

function M.load_vocab(path)
  local fh, err = io.open(path, "rb")
  if not fh then error("data.load_vocab: cannot open " .. tostring(err), 2) end
  local list = json.decode(fh:read("*a"), path)
  fh:close()
  local v = {}
  for i, s in ipairs(list) do v[i - 1] = s end
  return v
end

return M
