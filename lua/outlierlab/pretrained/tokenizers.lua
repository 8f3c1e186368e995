-- tokenizers — the tokenizers that ship with pretrained models, read from their files
-- (docs/reference/pretrained.md "Tokenizers"):
--   byte-level BPE (GPT-2, OPT, RoBERTa: vocab.json + merges.txt, or tokenizer.json with a
--     ByteLevel pre-tokenizer): the text is split by GPT-2's regex (or the tokenizer.json's
--     pre-tokenizers in order: Split, ByteLevel, Punctuation, Digits), each piece's bytes are
--     mapped to printable characters (bytes_to_unicode) and merged by rank;
--   BPE with byte fallback (LLaMA's tokenizer.json, SentencePiece-style): spaces become "▁",
--     "▁" is prepended, merges by rank, a symbol missing from the vocabulary becomes its UTF-8
--     bytes <0xXX>;
--   WordPiece (BERT's vocab.txt, or tokenizer.json): clean-up, CJK spacing, lower case and
--     accents stripped (uncased models), split on whitespace and punctuation, then greedy
--     longest match with "##" continuations, [UNK] for words it cannot cover.
--
--   local tokenizers = require "outlierlab.pretrained.tokenizers"
--   local tk = tokenizers.load("models/gpt2")    -- tokenizer.json, vocab.json+merges.txt or vocab.txt
--   tk:encode("Hello world")                     --> {15496, 995} (no special tokens added)
--   tk:decode({15496, 995})                      --> "Hello world"
--   tk:piece(id)                                 --> the text of one token ("Ġworld" -> " world")
--   tk.special = {bos =, eos =, cls =, sep =, pad =, unk =, mask =} (ids or nil), tk.vocab_size
--   tk:category(id)                              --> "initial" | "delimiter" | "weak" | "other"
--
-- The regular expressions of the pre-tokenizers run in PCRE2 (Unicode properties, the same
-- syntax as Hugging Face's), Unicode categories, NFD and case mapping come from utf8proc; both
-- are Debian libraries loaded through the FFI (libpcre2-8-0, libutf8proc2).
local ffi = require "ffi"
local json = require "outlierlab.util.json"

local M = {}

-- ---------------------------------------------------------------- PCRE2 and utf8proc
ffi.cdef [[
typedef struct pcre2_real_code_8 pcre2_code_8;
typedef struct pcre2_real_match_data_8 pcre2_match_data_8;
pcre2_code_8 *pcre2_compile_8(const unsigned char *pattern, size_t length, uint32_t options, int *errorcode,
                              size_t *erroroffset, void *ccontext);
int pcre2_jit_compile_8(pcre2_code_8 *code, uint32_t options);
pcre2_match_data_8 *pcre2_match_data_create_from_pattern_8(const pcre2_code_8 *code, void *gcontext);
int pcre2_match_8(const pcre2_code_8 *code, const unsigned char *subject, size_t length, size_t startoffset,
                  uint32_t options, pcre2_match_data_8 *match_data, void *mcontext);
size_t *pcre2_get_ovector_pointer_8(pcre2_match_data_8 *match_data);
int pcre2_get_error_message_8(int errorcode, unsigned char *buffer, size_t bufflen);
void pcre2_code_free_8(pcre2_code_8 *code);
void pcre2_match_data_free_8(pcre2_match_data_8 *match_data);
ptrdiff_t utf8proc_map(const uint8_t *str, ptrdiff_t strlen, uint8_t **dstptr, int options);
int utf8proc_category(int32_t codepoint);
int32_t utf8proc_tolower(int32_t c);
ptrdiff_t utf8proc_iterate(const uint8_t *str, ptrdiff_t strlen, int32_t *codepoint_ref);
]]
pcall(ffi.cdef, "void free(void *p);")

local pcre, u8p
local function libs()
  if not pcre then
    local ok, lib = pcall(ffi.load, "libpcre2-8.so.0")
    if not ok then error("tokenizers: cannot load libpcre2-8.so.0 (Debian package libpcre2-8-0; make deps installs it): " .. tostring(lib), 3) end
    pcre = lib
    ok, lib = pcall(ffi.load, "libutf8proc.so.2")
    if not ok then error("tokenizers: cannot load libutf8proc.so.2 (Debian package libutf8proc2; make deps installs it): " .. tostring(lib), 3) end
    u8p = lib
  end
  return pcre, u8p
end

local PCRE2_UTF, PCRE2_UCP, PCRE2_JIT_COMPLETE, PCRE2_NO_UTF_CHECK = 0x00080000, 0x00020000, 1, 0x40000000

-- a compiled regex: re:each(s, fn(a, b)) calls fn for every match [a, b) (0-based byte offsets)
local Regex = {}
Regex.__index = Regex
function M.regex(pattern)
  local P = libs()
  local err, off = ffi.new("int[1]"), ffi.new("size_t[1]")
  local code = P.pcre2_compile_8(pattern, #pattern, PCRE2_UTF + PCRE2_UCP, err, off, nil)
  if code == nil then
    local buf = ffi.new("unsigned char[256]")
    P.pcre2_get_error_message_8(err[0], buf, 256)
    error(string.format("tokenizers: bad regex %q at offset %d: %s", pattern, tonumber(off[0]), ffi.string(buf)), 2)
  end
  code = ffi.gc(code, P.pcre2_code_free_8)
  P.pcre2_jit_compile_8(code, PCRE2_JIT_COMPLETE)   -- optional speed-up; matching works without it
  local md = ffi.gc(P.pcre2_match_data_create_from_pattern_8(code, nil), P.pcre2_match_data_free_8)
  return setmetatable({ code = code, md = md, ov = P.pcre2_get_ovector_pointer_8(md), pattern = pattern }, Regex)
end
-- The first match validates the UTF-8 of the whole subject; later matches pass
-- PCRE2_NO_UTF_CHECK, since PCRE2 would otherwise check the rest of the subject again at every
-- match (quadratic: 256 KB took seconds, a 4.4 MB text half an hour). Every later start offset
-- is the end of a match or a character boundary, as NO_UTF_CHECK requires.
function Regex:each(s, fn)
  local P = pcre
  local n, pos = #s, 0
  local opts = 0
  while pos < n do
    local rc = P.pcre2_match_8(self.code, s, n, pos, opts, self.md, nil)
    opts = PCRE2_NO_UTF_CHECK
    if rc < 0 then
      if rc == -1 then break end   -- PCRE2_ERROR_NOMATCH
      error(string.format("tokenizers: regex %q failed on the input (PCRE2 error %d; invalid UTF-8?)", self.pattern, rc), 2)
    end
    local a, b = tonumber(self.ov[0]), tonumber(self.ov[1])
    if b == a then   -- an empty match: step over one character
      fn(a, b)
      pos = a + 1
      while pos < n and bit.band(s:byte(pos + 1), 0xC0) == 0x80 do pos = pos + 1 end
    else
      fn(a, b)
      pos = b
    end
  end
end

-- UTF-8 helpers
local function codepoints(s)   -- list of code points (invalid bytes as themselves)
  local _, U = libs()
  local out, cp = {}, ffi.new("int32_t[1]")
  local p, n, i = ffi.cast("const uint8_t *", s), #s, 0
  while i < n do
    local k = tonumber(U.utf8proc_iterate(p + i, n - i, cp))
    if k <= 0 then out[#out + 1] = p[i] i = i + 1 else out[#out + 1] = cp[0] i = i + k end
  end
  return out
end
local function utf8(cp)
  if cp < 0x80 then return string.char(cp) end
  if cp < 0x800 then return string.char(0xC0 + bit.rshift(cp, 6), 0x80 + bit.band(cp, 0x3F)) end
  if cp < 0x10000 then
    return string.char(0xE0 + bit.rshift(cp, 12), 0x80 + bit.band(bit.rshift(cp, 6), 0x3F), 0x80 + bit.band(cp, 0x3F))
  end
  return string.char(0xF0 + bit.rshift(cp, 18), 0x80 + bit.band(bit.rshift(cp, 12), 0x3F),
                     0x80 + bit.band(bit.rshift(cp, 6), 0x3F), 0x80 + bit.band(cp, 0x3F))
end
M.utf8 = utf8
-- UTF-8 characters of s as a list of strings
local function chars(s)
  local out = {}
  for c in s:gmatch("[%z\1-\127\192-\255][\128-\191]*") do out[#out + 1] = c end
  return out
end
M.chars = chars

-- utf8proc categories (utf8proc.h): Mn 6; P* 12..18; Z* 23..25; C* 26..29
local CAT_MN, CAT_ZS, CAT_CC = 6, 23, 26
local function category(cp) local _, U = libs() return U.utf8proc_category(cp) end
local function is_punct_cp(cp)
  if (cp >= 33 and cp <= 47) or (cp >= 58 and cp <= 64) or (cp >= 91 and cp <= 96) or (cp >= 123 and cp <= 126) then return true end
  local c = category(cp)
  return c >= 12 and c <= 18
end
M.is_punct_cp = is_punct_cp

-- ---------------------------------------------------------------- BPE merges
-- word: list of symbols; ranks["a b"] = rank. GPT-2's encoder.py algorithm: merge every
-- occurrence (left to right) of the lowest-ranked adjacent pair until no pair has a rank.
local function bpe(word, ranks)
  while #word > 1 do
    local best, br = nil, math.huge
    for i = 1, #word - 1 do
      local r = ranks[word[i] .. " " .. word[i + 1]]
      if r and r < br then br, best = r, i end
    end
    if not best then break end
    local a, b = word[best], word[best + 1]
    local out, i = {}, 1
    while i <= #word do
      if i < #word and word[i] == a and word[i + 1] == b then out[#out + 1] = a .. b i = i + 2
      else out[#out + 1] = word[i] i = i + 1 end
    end
    word = out
  end
  return word
end
M.bpe = bpe

local function merge_ranks(list, where)
  local ranks = {}
  for i, m in ipairs(list) do
    local key
    if type(m) == "table" then key = m[1] .. " " .. m[2]
    elseif type(m) == "string" then
      local a, b = m:match("^(%S+) (%S+)$")
      if not a then error(string.format("tokenizers: %s: merge %d '%s' is not two symbols separated by a space", where, i, m), 3) end
      key = m
    else error(string.format("tokenizers: %s: merge %d is not a string or a pair", where, i), 3) end
    if not ranks[key] then ranks[key] = i - 1 end
  end
  return ranks
end

-- ---------------------------------------------------------------- the tokenizer object
local Tokenizer = {}
Tokenizer.__index = Tokenizer

local GPT2_PATTERN = [['s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+]]
M.GPT2_PATTERN = GPT2_PATTERN

-- GPT-2's bytes_to_unicode: printable bytes stand for themselves, the rest for 256 + n
local byte_enc, byte_dec = {}, {}
do
  local n = 0
  for b = 0, 255 do
    local keep = (b >= 33 and b <= 126) or (b >= 161 and b <= 172) or (b >= 174 and b <= 255)
    local cp = keep and b or 256 + n
    if not keep then n = n + 1 end
    byte_enc[b] = utf8(cp)
    byte_dec[utf8(cp)] = b
  end
end

local function new(kind, vocab, o)
  local self = setmetatable({ kind = kind, vocab = vocab, id_to = {}, cache = {}, special = {}, added = {} }, Tokenizer)
  local n = 0
  for s, id in pairs(vocab) do
    if type(id) ~= "number" or id < 0 or id ~= math.floor(id) then
      error(string.format("tokenizers: %s: token %q has id %s (not a non-negative integer)", o.where, s, tostring(id)), 3)
    end
    self.id_to[id] = s
    if id + 1 > n then n = id + 1 end
  end
  self.vocab_size = n
  for k, v in pairs(o) do self[k] = v end
  return self
end

-- added tokens (special strings matched in the raw text before anything else)
function Tokenizer:add_tokens(list)
  for _, a in ipairs(list) do
    if not self.vocab[a.content] then self.vocab[a.content] = a.id end
    self.id_to[a.id] = a.content
    if a.id + 1 > self.vocab_size then self.vocab_size = a.id + 1 end
    self.added[#self.added + 1] = a
  end
  table.sort(self.added, function(x, y) return #x.content > #y.content end)
end

-- pieces of text split at added tokens: calls fn(piece, nil) for text, fn(nil, id) for an added token
-- (each added token's next occurrence is remembered, so the text is searched once per token:
-- linear in the text length however many added tokens occur)
local function split_added(self, text, fn)
  if #self.added == 0 then fn(text) return end
  local pos = 1
  local nexts, nexte = {}, {}
  while pos <= #text do
    local best_a, best_b, best_id
    for k, a in ipairs(self.added) do
      if nexts[k] ~= false and (nexts[k] == nil or nexts[k] < pos) then
        local s, e = text:find(a.content, pos, true)
        nexts[k], nexte[k] = s or false, e
      end
      local s = nexts[k]
      if s and (not best_a or s < best_a) then best_a, best_b, best_id = s, nexte[k], a.id end
    end
    if not best_a then fn(text:sub(pos)) return end
    if best_a > pos then fn(text:sub(pos, best_a - 1)) end
    fn(nil, best_id)
    pos = best_b + 1
  end
end

local function push_symbols(self, out, syms)
  for _, s in ipairs(syms) do
    local id = self.vocab[s]
    if id then out[#out + 1] = id
    elseif self.byte_fallback then
      for i = 1, #s do
        local bid = self.vocab[string.format("<0x%02X>", s:byte(i))]
        if not bid then error(string.format("tokenizers: %s: byte fallback: no token <0x%02X> in the vocabulary", self.where, s:byte(i)), 0) end
        out[#out + 1] = bid
      end
    elseif self.unk_id then out[#out + 1] = self.unk_id
    else error(string.format("tokenizers: %s: symbol %q is not in the vocabulary and there is no unknown token", self.where, s), 0) end
  end
end

-- one pre-tokenized word -> ids (cached)
function Tokenizer:word_ids(w, out)
  local ids = self.cache[w]
  if not ids then
    ids = {}
    if self.kind == "wordpiece" then self:wordpiece(w, ids)
    elseif self.kind == "llama2c" then self:merge_scores(w, ids)
    else
      local sym
      if self.kind == "bpe-bytes" then
        sym = {}
        for i = 1, #w do sym[i] = byte_enc[w:byte(i)] end
      else sym = chars(w) end
      local whole = self.ignore_merges and self.vocab[table.concat(sym)]
      if whole then ids[1] = whole else push_symbols(self, ids, bpe(sym, self.ranks)) end
    end
    self.cache[w] = ids
  end
  for _, id in ipairs(ids) do out[#out + 1] = id end
end

-- WordPiece: greedy longest match, "##" continuations, the whole word [UNK] when it fails
function Tokenizer:wordpiece(w, out)
  local cs = chars(w)
  if #cs > (self.max_chars or 100) then out[#out + 1] = self.unk_id return end
  local start, pieces = 1, {}
  while start <= #cs do
    local stop, found = #cs, nil
    while stop >= start do
      local sub = table.concat(cs, "", start, stop)
      if start > 1 then sub = self.cont .. sub end
      if self.vocab[sub] then found = self.vocab[sub] break end
      stop = stop - 1
    end
    if not found then out[#out + 1] = self.unk_id return end
    pieces[#pieces + 1] = found
    start = stop + 1
  end
  for _, id in ipairs(pieces) do out[#out + 1] = id end
end

-- BERT's basic tokenizer: the words of a text (clean-up, CJK spacing, lower case and accents
-- stripped when asked, split on whitespace and punctuation)
local function is_cjk(cp)
  return (cp >= 0x4E00 and cp <= 0x9FFF) or (cp >= 0x3400 and cp <= 0x4DBF) or (cp >= 0x20000 and cp <= 0x2A6DF)
      or (cp >= 0x2A700 and cp <= 0x2B73F) or (cp >= 0x2B740 and cp <= 0x2B81F) or (cp >= 0x2B820 and cp <= 0x2CEAF)
      or (cp >= 0xF900 and cp <= 0xFAFF) or (cp >= 0x2F800 and cp <= 0x2FA1F)
end
function Tokenizer:bert_words(text, fn)
  local _, U = libs()
  if self.lowercase or self.strip_accents then
    if self.lowercase then
      local cps = codepoints(text)
      local b = {}
      for i, cp in ipairs(cps) do b[i] = utf8(U.utf8proc_tolower(cp)) end
      text = table.concat(b)
    end
    if self.strip_accents ~= false and (self.strip_accents or self.lowercase) then
      local dst = ffi.new("uint8_t *[1]")
      local n = U.utf8proc_map(text, #text, dst, 16 + 2)   -- DECOMPOSE | STABLE: NFD
      if n < 0 then error("tokenizers: text is not valid UTF-8 (NFD failed)", 3) end
      local nfd = ffi.string(dst[0], n)
      ffi.C.free(dst[0])
      local b = {}
      for _, cp in ipairs(codepoints(nfd)) do if U.utf8proc_category(cp) ~= CAT_MN then b[#b + 1] = utf8(cp) end end
      text = table.concat(b)
    end
  end
  local word = {}
  local function flush() if #word > 0 then fn(table.concat(word)) word = {} end end
  for _, cp in ipairs(codepoints(text)) do
    local cat = U.utf8proc_category(cp)
    if cp == 32 or cp == 9 or cp == 10 or cp == 13 or (cat >= CAT_ZS and cat <= CAT_ZS + 2) then flush()   -- Zs, Zl (U+2028), Zp (U+2029)
    elseif cp == 0 or cp == 0xFFFD or (cat >= CAT_CC and cat <= 29) then   -- control: dropped
    elseif is_punct_cp(cp) or is_cjk(cp) then flush() fn(utf8(cp))
    else word[#word + 1] = utf8(cp) end
  end
  flush()
end

-- Unicode NFC (utf8proc: STABLE | COMPOSE), the NFC normalizer of Qwen2's tokenizer.json
local function nfc(text)
  local _, U = libs()
  local dst = ffi.new("uint8_t *[1]")
  local n = U.utf8proc_map(text, #text, dst, 2 + 8)
  if n < 0 then error("tokenizers: text is not valid UTF-8 (NFC failed)", 3) end
  local out = ffi.string(dst[0], n)
  ffi.C.free(dst[0])
  return out
end

-- text -> list of token ids (no special tokens added). opts.continuation = true: the text
-- continues an earlier call's (no space or "▁" is prepended to its start)
function Tokenizer:encode(text, opts)
  if type(text) ~= "string" then error("tokenizer:encode: text must be a string", 2) end
  local out = {}
  local cont = opts and opts.continuation
  local first = true
  local words = self.stages and self:stage_ids(out)
  split_added(self, text, function(piece, id)
    if id then out[#out + 1] = id first = false return end
    local at_start = first and cont   -- the segment continues the previous call's text
    if self.kind == "wordpiece" then
      self:bert_words(piece, function(w) self:word_ids(w, out) end)
    elseif self.kind == "llama2c" then   -- run.c: one dummy-prefix space at the start of the text
      if piece ~= "" and first and not cont then piece = " " .. piece end
      for _, w in ipairs(self:sp_words(piece, " ")) do self:word_ids(w, out) end
    elseif self.kind == "bpe-bytes" then
      if self.nfc then piece = nfc(piece) end
      if self.add_prefix_space and first and not cont and piece:sub(1, 1) ~= " " then piece = " " .. piece end
      words(piece)
    else   -- SentencePiece-style: spaces are "▁", one "▁" in front, words split before each "▁"
      local s = piece:gsub(" ", "▁")
      -- the legacy Prepend normalizer prepends always; the Metaspace pre-tokenizer only when the
      -- text does not start with "▁" already (metaspace.rs: no second ▁ for " hello")
      if s ~= "" and not at_start and (self.prepend == "always" or (self.prepend == "first" and first))
         and not (self.metaspace and s:sub(1, 3) == "▁") then s = "▁" .. s end
      for _, w in ipairs(self:sp_words(s)) do self:word_ids(w, out) end
    end
    first = false
  end)
  return out
end

-- SentencePiece-style words: split where no vocabulary entry can cross (checked at load:
-- before a "▁" that follows a non-"▁" character, and at "\n" unless a token holds one)
-- Metaspace with split = true cuts before every "▁" (MergedWithNext), whatever the vocabulary.
-- space: the character pieces begin with ("▁"; llama2.c's pieces hold " ")
function Tokenizer:sp_words(s, space)
  if not self.split_sp and not self.meta_split then return { s } end
  space = space or "▁"
  local out, cur = {}, {}
  local prev
  for _, c in ipairs(chars(s)) do
    if (c == space and prev and (prev ~= space or self.meta_split)) or (self.split_nl and (c == "\n" or prev == "\n")) then
      out[#out + 1] = table.concat(cur) cur = {}
    end
    cur[#cur + 1] = c
    prev = c
  end
  if #cur > 0 then out[#out + 1] = table.concat(cur) end
  return out
end

-- the text one token stands for (without context): byte-level tokens as their bytes, "▁" as a
-- space, <0xXX> as the byte, "##x" as x; special tokens as their own string
function Tokenizer:piece(id)
  local s = self.id_to[id]
  if s == nil then return nil end
  for _, a in ipairs(self.added) do if a.id == id then return s end end
  if self.kind == "bpe-bytes" then
    local b = {}
    for _, c in ipairs(chars(s)) do b[#b + 1] = byte_dec[c] and string.char(byte_dec[c]) or c end
    return table.concat(b)
  elseif self.kind == "bpe-sp" or self.kind == "llama2c" then
    local hex = s:match("^<0x(%x%x)>$")
    if hex then return string.char(tonumber(hex, 16)) end
    if self.kind == "llama2c" then return id <= 2 and s:match("^\n(.*)\n$") or s end   -- "\n<s>\n" as "<s>"
    return (s:gsub("▁", " "))
  else
    if s:sub(1, #self.cont) == self.cont and #s > #self.cont then return s:sub(#self.cont + 1) end
    return " " .. s
  end
end

function Tokenizer:decode(ids)
  local b = {}
  for i, id in ipairs(ids) do
    local p = self:piece(id) or error(string.format("tokenizer:decode: id %s not in the vocabulary", tostring(id)), 2)
    b[i] = p
  end
  local s = table.concat(b)
  if (self.kind == "bpe-sp" and self.prepend or self.kind == "llama2c") and s:sub(1, 1) == " " then s = s:sub(2) end   -- the prepended "▁"
  if self.kind == "wordpiece" and s:sub(1, 1) == " " then s = s:sub(2) end
  return s
end

-- ---------------------------------------------------------------- token categories
-- Derived from the decoded text of each token (docs/reference/pretrained.md "Token categories"):
--   initial    the BOS / [CLS] token (the sequence's first token)
--   delimiter  [SEP] / EOS, and tokens whose text, without spaces, is empty but holds a line
--              break, or is made of punctuation only (".", ",", ";", "\n", "?!" …)
--   weak       tokens whose text, without spaces and in lower case, is one of the most
--              frequent English function words (data.WEAK_WORDS: the, of, and, a, to, …)
--   other      everything else
local WEAK
function Tokenizer:category(id)
  self.cats = self.cats or {}
  local c = self.cats[id]
  if c then return c end
  local sp = self.special
  if id == sp.bos or id == sp.cls then c = "initial"
  elseif id == sp.sep or id == sp.eos then c = "delimiter"
  else
    if not WEAK then
      WEAK = {}
      for _, w in ipairs(require("outlierlab.data").WEAK_WORDS) do WEAK[w] = true end
    end
    local s = self:piece(id) or ""
    local core = s:gsub("%s", "")
    if core == "" then c = s:find("\n", 1, true) and "delimiter" or "other"
    else
      local punct = true
      for _, cp in ipairs(codepoints(core)) do if not is_punct_cp(cp) then punct = false break end end
      if punct then c = "delimiter" elseif WEAK[core:lower()] then c = "weak" else c = "other" end
    end
  end
  self.cats[id] = c
  return c
end

-- ---------------------------------------------------------------- pre-tokenizer stages
-- A byte-level BPE splits its text by the stages of its pre-tokenizer, in the order of
-- tokenizer.json's Sequence (tokenizers' pre_tokenizers/*.rs); each stage splits every piece the
-- one before gave into sub-pieces:
--   { re = Regex }             Split (behavior Isolated: the matches and the text between them)
--                              and ByteLevel's GPT-2 regex (use_regex true)
--   { punct = true }           Punctuation: punctuation characters (ASCII punctuation and
--                              Unicode P*, punctuation.rs is_punc) apart from the rest
--   { digits = true }          Digits: numeric characters (char::is_numeric: Nd, Nl, No)
--   isolated = true: each delimiter on its own (Isolated, individual_digits); otherwise runs of
--   them together (Contiguous).
-- mapped = true: the stage comes after ByteLevel, which has rewritten the text as byte symbols
-- (bytes_to_unicode), so it sees those: a regex runs on the symbols, Punctuation and Digits judge
-- each byte's symbol (bytes B2, B3, B9, BC–BE stand for ², ³, ¹, ¼–¾, which are numeric, so Digits
-- after ByteLevel cuts them out even inside a UTF-8 character, as Hugging Face's does).
local function byte_class(pred)   -- byte -> pred(the code point of its symbol)
  local out, cp = {}, ffi.new("int32_t[1]")
  local _, U = libs()
  for b = 0, 255 do
    local sym = byte_enc[b]
    U.utf8proc_iterate(ffi.cast("const uint8_t *", sym), #sym, cp)
    out[b] = pred(cp[0])
  end
  return out
end
local function is_numeric_cp(cp) local c = category(cp) return c >= 9 and c <= 11 end   -- Nd, Nl, No
local BYTE_CLASS = {}

-- split piece where is_delim changes (or at every delimiter when isolated), calling emit(sub)
local cp_buf = ffi.new("int32_t[1]")
local function split_by(piece, mapped, is_delim, isolated, emit)
  local n = #piece
  local p = ffi.cast("const uint8_t *", piece)
  local _, U = libs()
  local start, prev, i = 0, nil, 0   -- 0-based
  while i < n do
    local len, d = 1, nil
    if mapped then d = is_delim[p[i]]
    else
      len = tonumber(U.utf8proc_iterate(p + i, n - i, cp_buf))
      if len <= 0 then len, d = 1, false else d = is_delim(cp_buf[0]) end
    end
    if i > start and (d ~= prev or (d and isolated)) then emit(piece:sub(start + 1, i)) start = i end
    prev = d
    i = i + len
  end
  if n > start then emit(piece:sub(start + 1, n)) end
end

-- the regex matches of piece and the text between them; mapped: the regex runs on the byte
-- symbols, and the cuts are taken back to the bytes
local function split_re(re, piece, mapped, emit)
  local s, at = piece, nil
  if mapped then
    local m, off = {}, 0
    at = {}
    for i = 1, #piece do
      local sym = byte_enc[piece:byte(i)]
      m[i] = sym
      at[off] = i - 1
      off = off + #sym
    end
    at[off] = #piece
    s = table.concat(m)
  end
  local last = 0
  re:each(s, function(a, b)
    if at then a, b = at[a], at[b] end
    if a > last then emit(piece:sub(last + 1, a)) end
    if b > a then emit(piece:sub(a + 1, b)) end
    last = b
  end)
  if last < #piece then emit(piece:sub(last + 1)) end
end

local function run_stage(st, piece, emit)
  if st.re then return split_re(st.re, piece, st.mapped, emit) end
  local what = st.punct and "punct" or "digits"
  local pred = st.punct and is_punct_cp or is_numeric_cp
  if st.mapped then
    BYTE_CLASS[what] = BYTE_CLASS[what] or byte_class(pred)
    pred = BYTE_CLASS[what]
  end
  return split_by(piece, st.mapped, pred, st.isolated, emit)
end

-- fn(piece): the piece through the stages, then each word's ids appended to out (the chain of
-- emitters is built once per call, not per piece)
function Tokenizer:stage_ids(out)
  local emit = function(w) self:word_ids(w, out) end
  for i = #self.stages, 1, -1 do
    local st, nxt = self.stages[i], emit
    emit = function(piece) run_stage(st, piece, nxt) end
  end
  return emit
end

-- ---------------------------------------------------------------- constructors
-- byte-level BPE: vocab {token = id}, merges (list of "a b" or {a, b}); the pre-tokenizer:
-- o.stages (tokenizer.json's pre-tokenizers in order: {type = "Split", pattern = regex},
-- {type = "ByteLevel", use_regex =}, {type = "Punctuation", behavior =}, {type = "Digits",
-- individual_digits =}), or o.pattern (a Split's regex) followed by ByteLevel with
-- use_regex = o.byte_regex ~= false (GPT-2: no pattern, GPT-2's regex; LLaMA-3, Qwen2: the
-- Split, then ByteLevel without regex)
function M.bpe_bytes(vocab, merges, o)
  o = o or {}
  local t = new("bpe-bytes", vocab, { where = o.where or "bpe", ranks = merge_ranks(merges, o.where or "bpe"),
                                       add_prefix_space = o.add_prefix_space, ignore_merges = o.ignore_merges, nfc = o.nfc })
  local specs = o.stages
  if not specs then
    specs = {}
    if o.pattern then specs[1] = { type = "Split", pattern = o.pattern } end
    specs[#specs + 1] = { type = "ByteLevel", use_regex = o.byte_regex }
  end
  local stages, mapped = {}, false
  t.chunk_safe = false   -- unless a regex cuts the text into words before ByteLevel (data.text may cut there)
  for _, sp in ipairs(specs) do
    if sp.type == "ByteLevel" then
      if sp.use_regex ~= false then stages[#stages + 1] = { re = M.regex(GPT2_PATTERN), mapped = mapped } end
      if not mapped and sp.use_regex ~= false then t.chunk_safe = nil end
      mapped = true
    elseif sp.type == "Split" then
      stages[#stages + 1] = { re = M.regex(sp.pattern), mapped = mapped }
      if not mapped then t.chunk_safe = nil end
    else
      stages[#stages + 1] = { punct = sp.type == "Punctuation", digits = sp.type == "Digits", mapped = mapped,
                              isolated = sp.behavior == "Isolated" or sp.individual_digits == true }
    end
  end
  t.stages = stages
  return t
end

-- SentencePiece-style BPE with byte fallback (LLaMA)
function M.bpe_sp(vocab, merges, o)
  o = o or {}
  local prepend = o.prepend
  if prepend == nil or prepend == true then prepend = "always" end
  local t = new("bpe-sp", vocab, { where = o.where or "bpe", ranks = merge_ranks(merges, o.where or "bpe"),
                                    byte_fallback = o.byte_fallback ~= false, prepend = prepend,
                                    ignore_merges = o.ignore_merges })
  if o.unk and vocab[o.unk] then t.unk_id = vocab[o.unk] end
  -- where may a word be split without changing the result? Not inside a token: a token that
  -- holds "▁" after another character, or a "\n" with other characters, forbids that split
  local cross_space, cross_nl = false, false
  for s in pairs(vocab) do
    local i = s:find("▁", 2, true)
    while i and not cross_space do
      if s:sub(i - 3, i - 1) ~= "▁" then cross_space = true end
      i = s:find("▁", i + 3, true)
    end
    if #s > 1 and s:find("\n", 1, true) then cross_nl = true end
  end
  t.split_sp = not cross_space
  t.split_nl = not cross_nl
  t.chunk_safe = t.split_sp and t.split_nl   -- data.text may cut the text after a "\n" only where the words split
  return t
end

-- llama2.c's tokenizer (tokenizer.bin, run.c's encode): the text's UTF-8 characters — each a
-- piece, or its bytes as the byte pieces (id = byte + 3, as run.c) — then, over and over, the
-- adjacent pair whose concatenation is the piece of highest score is merged (the leftmost on a
-- tie; none below run.c's floor of -1e10). The pieces hold spaces as " ", not "▁". pieces[i],
-- scores[i] for ids i = 0 .. n-1 (0-based tables); ids 0, 1, 2 are <unk>, <s>, </s>.
function M.llama2c(pieces, scores, o)
  o = o or {}
  local vocab = {}
  for i = #pieces, 0, -1 do if pieces[i] then vocab[pieces[i]] = i end end   -- a repeated piece: its first id
  local t = new("llama2c", vocab, { where = o.where or "tokenizer.bin", scores = scores })
  for i = 0, #pieces do t.id_to[i] = pieces[i] end
  t.vocab_size = #pieces + 1
  t.special = { unk = 0, bos = 1, eos = 2 }
  t.unk_id = 0
  -- words split as bpe_sp's (before a " " after another character, around "\n") where no piece
  -- but <s> and </s> ("\n<s>\n") crosses such a place: no merge can then join two words
  local cross_space, cross_nl = false, false
  for i = 3, #pieces do
    local s = pieces[i]
    if s:find("[^ ] ") then cross_space = true end
    if #s > 1 and s:find("\n", 1, true) then cross_nl = true end
  end
  t.split_sp, t.split_nl = not cross_space, not cross_nl
  t.chunk_safe = t.split_sp and t.split_nl
  return t
end

function Tokenizer:merge_scores(w, ids)
  local vocab, id_to, scores = self.vocab, self.id_to, self.scores
  local i, n = 1, #w
  while i <= n do   -- run.c: a byte and the continuation bytes after it, 4 bytes at most
    local j = i
    while j < n and j - i < 3 and bit.band(w:byte(j + 1), 0xC0) == 0x80 do j = j + 1 end
    local c = w:sub(i, j)
    i = j + 1
    local id = vocab[c]
    if id then ids[#ids + 1] = id
    else
      for k = 1, #c do
        local b = c:byte(k) + 3
        if b >= self.vocab_size then error(string.format("tokenizers: %s: byte fallback: no piece for byte %d (id %d)", self.where, c:byte(k), b), 0) end
        ids[#ids + 1] = b
      end
    end
  end
  while true do
    local best, best_id, best_i = -1e10, nil, nil
    for i = 1, #ids - 1 do
      local id = vocab[id_to[ids[i]] .. id_to[ids[i + 1]]]
      if id and scores[id] > best then best, best_id, best_i = scores[id], id, i end
    end
    if not best_i then break end
    ids[best_i] = best_id
    table.remove(ids, best_i + 1)
  end
end

-- WordPiece (BERT)
function M.wordpiece(vocab, o)
  o = o or {}
  local t = new("wordpiece", vocab, { where = o.where or "wordpiece", lowercase = o.lowercase ~= false,
                                       strip_accents = o.strip_accents, cont = o.prefix or "##", max_chars = o.max_chars or 100 })
  t.unk_id = vocab[o.unk or "[UNK]"]
  if not t.unk_id then error("tokenizers: " .. t.where .. ": no unknown token '" .. (o.unk or "[UNK]") .. "' in the vocabulary", 2) end
  libs()
  return t
end

-- ---------------------------------------------------------------- reading a model's files
local read = function(path) return require("outlierlab.pretrained.hf").read_file(path) end
local function read_json(path)
  local s = read(path)
  if not s then return nil end
  local ok, v = pcall(json.decode, s, path)
  if not ok then error("tokenizers: " .. path .. " is not valid JSON: " .. tostring(v), 0) end
  return v
end

-- special token ids from the files around the tokenizer and the model's config.json
local function find_specials(t, dir)
  local function file(name) return dir and read_json(dir .. "/" .. name) or {} end
  local cfg, tc, sm = file("config.json"), file("tokenizer_config.json"), file("special_tokens_map.json")
  local function tok(v) if type(v) == "table" then return v.content end return v end
  local function id_of(name) return name and t.vocab[name] end
  local sp = t.special
  for _, role in ipairs { "bos", "eos", "unk", "pad", "cls", "sep", "mask" } do
    local name = tok(sm[role .. "_token"]) or tok(tc[role .. "_token"])
    sp[role] = id_of(name)
    if sp[role] == nil and type(cfg[role .. "_token_id"]) == "number" then sp[role] = cfg[role .. "_token_id"] end
  end
  for role, names in pairs { cls = { "[CLS]" }, sep = { "[SEP]" }, pad = { "[PAD]", "<pad>" }, unk = { "[UNK]", "<unk>" },
                             mask = { "[MASK]", "<mask>" }, bos = { "<s>", "<|endoftext|>" }, eos = { "</s>", "<|endoftext|>" } } do
    if sp[role] == nil then for _, n in ipairs(names) do if t.vocab[n] then sp[role] = t.vocab[n] break end end end
  end
  if t.kind == "wordpiece" then sp.bos, sp.eos = nil, nil end
  if t.unk_id == nil and sp.unk then t.unk_id = sp.unk end
  local lc = tc.do_lower_case
  if t.kind == "wordpiece" and lc ~= nil and t.from_vocab_txt then t.lowercase = lc end
end

local function normalizer_steps(n, where)
  local steps = {}
  local function add(x)
    if x == nil then return end
    if x.type == "Sequence" then for _, y in ipairs(x.normalizers or {}) do add(y) end
    else steps[#steps + 1] = x end
  end
  add(n)
  for _, s in ipairs(steps) do
    -- what the BPE and WordPiece paths do themselves: prepend and replace " " by "▁", BERT's clean-up
    local ok = (s.type == "Prepend" and s.prepend == "▁") or s.type == "BertNormalizer"
      or (s.type == "Replace" and type(s.pattern) == "table" and s.pattern.String == " " and s.content == "▁")
    if not ok then error(string.format("tokenizers: %s: normalizer %s is not supported", where, json.encode(s)), 0) end
  end
  return steps
end

-- tokenizer.json (Hugging Face tokenizers' one-file format)
function M.from_json(path, dir)
  local j = read_json(path)
  if type(j) ~= "table" or type(j.model) ~= "table" then error("tokenizers: " .. path .. ": no 'model' object", 0) end
  local model = j.model
  -- the shapes of the parts read below (a hostile file gets a message, not a traceback)
  if type(model.vocab) ~= "table" or model.vocab[1] ~= nil then
    error(string.format("tokenizers: %s: 'model.vocab' must be an object {token: id}", path), 0)
  end
  if model.merges ~= nil and (type(model.merges) ~= "table" or (next(model.merges) ~= nil and model.merges[1] == nil)) then
    error(string.format("tokenizers: %s: 'model.merges' must be a list", path), 0)
  end
  if j.added_tokens ~= nil and type(j.added_tokens) ~= "table" then error(string.format("tokenizers: %s: 'added_tokens' must be a list", path), 0) end
  for i, a in ipairs(j.added_tokens or {}) do
    if type(a) ~= "table" or type(a.content) ~= "string" or type(a.id) ~= "number" or a.id < 0 or a.id ~= math.floor(a.id) then
      error(string.format("tokenizers: %s: added_tokens[%d] must have a string 'content' and a non-negative integer 'id'", path, i), 0)
    end
  end
  local pre = j.pre_tokenizer
  local pres = {}
  local function addp(x) if x == nil then return end if x.type == "Sequence" then for _, y in ipairs(x.pretokenizers or {}) do addp(y) end else pres[#pres + 1] = x end end
  addp(pre)
  local t
  if model.type == "WordPiece" then
    local bn
    for _, s in ipairs(normalizer_steps(j.normalizer, path)) do if s.type == "BertNormalizer" then bn = s end end
    t = M.wordpiece(model.vocab, { where = path, lowercase = bn and bn.lowercase ~= false, strip_accents = bn and bn.strip_accents,
                                   unk = model.unk_token, prefix = model.continuing_subword_prefix, max_chars = model.max_input_chars_per_word })
  elseif model.type == "BPE" then
    local bytelevel, meta
    local stages = {}   -- the byte-level pre-tokenizers in order (M.bpe_bytes)
    for _, p in ipairs(pres) do
      if p.type == "ByteLevel" then
        if bytelevel then error(string.format("tokenizers: %s: two ByteLevel pre-tokenizers are not supported", path), 0) end
        bytelevel = p
        stages[#stages + 1] = { type = "ByteLevel", use_regex = p.use_regex }
      elseif p.type == "Split" and type(p.pattern) == "table" and p.pattern.Regex and (p.behavior == "Isolated" or p.behavior == nil) and not p.invert then
        stages[#stages + 1] = { type = "Split", pattern = p.pattern.Regex }
      elseif p.type == "Punctuation" and (p.behavior == nil or p.behavior == "Isolated" or p.behavior == "Contiguous") then
        stages[#stages + 1] = { type = "Punctuation", behavior = p.behavior or "Isolated" }
      elseif p.type == "Digits" then
        stages[#stages + 1] = { type = "Digits", individual_digits = p.individual_digits == true }
      elseif p.type == "Metaspace" then meta = p
      else error(string.format("tokenizers: %s: pre-tokenizer %s is not supported", path, json.encode(p)), 0) end
    end
    if #stages > 0 and not bytelevel then
      error(string.format("tokenizers: %s: pre-tokenizers %s are supported with a ByteLevel one only", path, json.encode(pres)), 0)
    end
    if bytelevel and bytelevel.add_prefix_space and stages[1].type ~= "ByteLevel" then
      error(string.format("tokenizers: %s: ByteLevel's add_prefix_space after other pre-tokenizers is not supported", path), 0)
    end
    if bytelevel then
      -- a byte-level model reads the text as it is, or in NFC (Qwen2); other normalizers are refused
      local nfc_on = false
      local function norm(n)
        if n == nil then return end
        if n.type == "Sequence" then for _, x in ipairs(n.normalizers or {}) do norm(x) end
        elseif n.type == "NFC" then nfc_on = true
        else error(string.format("tokenizers: %s: normalizer %s is not supported with a ByteLevel pre-tokenizer", path, json.encode(n)), 0) end
      end
      norm(j.normalizer)
      t = M.bpe_bytes(model.vocab, model.merges or {}, { where = path, stages = stages, add_prefix_space = bytelevel.add_prefix_space,
                                                          ignore_merges = model.ignore_merges == true, nfc = nfc_on })
    else
      local steps = normalizer_steps(j.normalizer, path)
      local prepend = false
      if meta then
        if meta.replacement and meta.replacement ~= "▁" then error(string.format("tokenizers: %s: Metaspace replacement %q is not supported", path, meta.replacement), 0) end
        prepend = meta.prepend_scheme or (meta.add_prefix_space == false and "never" or "always")
        if prepend == "never" then prepend = false end
      end
      local spaces = meta ~= nil
      for _, st in ipairs(steps) do
        if st.type == "Prepend" then prepend = "always" end
        if st.type == "Replace" then spaces = true end
      end
      if not spaces then
        error(string.format("tokenizers: %s: a BPE model needs a ByteLevel or Metaspace pre-tokenizer or a Replace(' ', '▁') normalizer; this one has neither", path), 0)
      end
      t = M.bpe_sp(model.vocab, model.merges or {}, { where = path, byte_fallback = model.byte_fallback == true,
                                                      prepend = prepend, unk = model.unk_token, ignore_merges = model.ignore_merges })
      if meta then
        t.metaspace = true
        t.meta_split = meta.split == true
      end
    end
  else
    error(string.format("tokenizers: %s: model type '%s' is not supported (BPE, WordPiece)", path, tostring(model.type)), 0)
  end
  local added = {}
  for _, a in ipairs(j.added_tokens or {}) do added[#added + 1] = { id = a.id, content = a.content, special = a.special } end
  t:add_tokens(added)
  t.file = path
  find_specials(t, dir)
  return t
end

-- vocab.json + merges.txt (GPT-2 style)
function M.from_vocab_merges(vocab_path, merges_path, dir)
  local vocab = read_json(vocab_path)
  if type(vocab) ~= "table" then error("tokenizers: cannot read " .. vocab_path, 0) end
  local text = read(merges_path) or error("tokenizers: cannot read " .. merges_path, 0)
  local merges = {}
  for line in text:gmatch("[^\n]+") do
    line = line:gsub("\r$", "")
    if not line:match("^#version") and line ~= "" then merges[#merges + 1] = line end
  end
  local t = M.bpe_bytes(vocab, merges, { where = merges_path })
  t.file = vocab_path
  local added = {}
  if vocab["<|endoftext|>"] then added[1] = { id = vocab["<|endoftext|>"], content = "<|endoftext|>", special = true } end
  t:add_tokens(added)
  find_specials(t, dir)
  return t
end

-- vocab.txt (BERT): one token per line, id = line number
function M.from_vocab_txt(path, dir)
  local text = read(path) or error("tokenizers: cannot read " .. path, 0)
  local vocab, i = {}, 0
  for line in (text .. (text:sub(-1) == "\n" and "" or "\n")):gmatch("([^\n]*)\n") do
    line = line:gsub("\r$", "")
    if vocab[line] == nil then vocab[line] = i end
    i = i + 1
  end
  local t = M.wordpiece(vocab, { where = path })
  t.from_vocab_txt = true
  local added = {}
  for _, s in ipairs { "[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]" } do
    if vocab[s] then added[#added + 1] = { id = vocab[s], content = s, special = true } end
  end
  t:add_tokens(added)
  find_specials(t, dir)
  return t
end

-- load(dir): the tokenizer of a model directory — tokenizer.json, else vocab.json +
-- merges.txt, else vocab.txt
function M.load(dir)
  dir = dir:gsub("/+$", "")
  local function has(f) local h = io.open(dir .. "/" .. f, "rb") if h then h:close() return true end return false end
  if has("tokenizer.json") then return M.from_json(dir .. "/tokenizer.json", dir) end
  if has("vocab.json") and has("merges.txt") then return M.from_vocab_merges(dir .. "/vocab.json", dir .. "/merges.txt", dir) end
  if has("vocab.txt") then return M.from_vocab_txt(dir .. "/vocab.txt", dir) end
  error("tokenizers: " .. dir .. ": no tokenizer files (tokenizer.json, vocab.json + merges.txt, or vocab.txt)", 0)
end

return M
