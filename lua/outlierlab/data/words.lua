-- data/words — a real English text, word by word, for training the organisms on text the
-- project did not generate: the King James Bible of Debian's bible-kjv (`--data=kjv`; make deps
-- installs it). docs/reference/data.md, "Real text for training".
--
--   local words = require "outlierlab.data.words"
--   local c = words.corpus{ source = "kjv", vocab_size = 1024, n_weak = 16 }
--   c.tokens (int32 ffi array), c.n, c.vocab[id], c.vocab_size, c.special, c.category(id)
--   words.digest("kjv")   -- the content hash of the text (the spec's text_hash)
--
-- The text is lower-cased and cut into words ([a-z']+) and the punctuation . , ; : ? ! ( ) as
-- tokens of their own; every verse ends in a "\n" token (its reference, "Ge1:1", is dropped).
-- The vocab_size − 7 most frequent words and marks get ids in order of frequency (ties by
-- spelling); the rest share <unk>. Ids: 0 [PAD], 1 <bos>, 2 [CLS], 3 [SEP], 4 [MASK], 5 <unk>,
-- 6 "\n" (labelled "¶"), then the kept tokens. Categories (docs/reference/metrics.md): <bos> and [CLS] initial; [SEP],
-- "\n" and the punctuation delimiter (QT's [SEP], "." and ","); the n_weak most frequent words
-- weak (SO's weak-semantic tokens: "the", "and", "of" ...); the rest other. The corpus is the
-- whole book in its order (913,424 words and 31,102 verse ends); the batcher's train split is
-- its first 90 % (Genesis to the Gospels), the held-out split the rest.
local ffi = require "ffi"

local M = {}

M.SPECIALS = { "[PAD]", "<bos>", "[CLS]", "[SEP]", "[MASK]", "<unk>", "\n" }
M.special = { pad = 0, bos = 1, cls = 2, sep = 3, mask = 4, unk = 5, newline = 6 }
M.SOURCES = { kjv = "bible -f gen1:1-rev22:21 </dev/null 2>/dev/null" }
M.defaults = { source = "kjv", vocab_size = 1024, n_weak = 16 }
local MARK = "^[%.,;:%?!%(%)]$"

-- the source's text: a string (bible-kjv's output), or an error naming the missing package
local texts = {}   -- read once per process
local function read_source(source)
  if texts[source] then return texts[source] end
  local cmd = M.SOURCES[source]
  if not cmd then error("data.words: unknown source '" .. tostring(source) .. "' (known: kjv)", 3) end
  local p = io.popen(cmd, "r")
  local s = p and p:read("*a") or ""
  if p then p:close() end
  if #s < 1000000 then
    error("data.words: the King James text (--data=kjv) needs Debian's bible-kjv: `make deps`, or apt-get install bible-kjv"
      .. " (the command `bible` printed " .. #s .. " bytes)", 3)
  end
  texts[source] = s
  return s
end

-- The content hash of the source's text (util.fs.hash): --data=kjv's spec carries it, so that
-- another edition of the package names other models in the cache instead of reusing these.
function M.digest(source) return require("outlierlab.util.fs").hash(read_source(source or M.defaults.source)) end
-- the source's whole text as the package prints it (the model report's default text)
function M.text(source) return read_source(source or M.defaults.source) end

-- Tokens of one text: an array of strings (words, marks and "\n" per verse)
function M.split(s)
  local toks = {}
  for line in s:gmatch("[^\n]+") do
    line = line:gsub("^%S+:%d+%s", ""):lower()   -- the verse reference ("Ge1:1 ")
    for w, p in line:gmatch("([%a']*)[^%a'%.,;:%?!%(%)]*([%.,;:%?!%(%)]?)") do
      if w ~= "" then toks[#toks + 1] = w end
      if p ~= "" then toks[#toks + 1] = p end
    end
    toks[#toks + 1] = "\n"
  end
  return toks
end

-- corpus{source = "kjv", vocab_size = 1024, n_weak = 16} -> the corpus table (above)
function M.corpus(o)
  o = o or {}
  for k in pairs(o) do
    if M.defaults[k] == nil then error("data.words: unknown option '" .. tostring(k) .. "' (source, vocab_size, n_weak)", 2) end
  end
  local source = o.source or M.defaults.source
  local V = o.vocab_size or M.defaults.vocab_size
  local n_weak = o.n_weak or M.defaults.n_weak
  if type(V) ~= "number" or V ~= math.floor(V) or V < 64 or V > 65536 then
    error("data.words: vocab_size must be an integer in [64, 65536], got " .. tostring(V), 2)
  end
  if type(n_weak) ~= "number" or n_weak ~= math.floor(n_weak) or n_weak < 0 or n_weak > V - #M.SPECIALS then
    error("data.words: n_weak must be an integer in [0, vocab_size - 7], got " .. tostring(n_weak), 2)
  end
  local toks = M.split(read_source(source))
  local count = {}
  for _, w in ipairs(toks) do if w ~= "\n" then count[w] = (count[w] or 0) + 1 end end
  local order = {}
  for w in pairs(count) do order[#order + 1] = w end
  table.sort(order, function(a, b) if count[a] ~= count[b] then return count[a] > count[b] end return a < b end)
  local id, vocab, cat = { ["\n"] = M.special.newline }, {}, {}
  for i, s in ipairs(M.SPECIALS) do vocab[i - 1], cat[i - 1] = s, "other" end
  vocab[M.special.newline] = "¶"   -- the verse end's label in tables and figures
  cat[M.special.bos], cat[M.special.cls] = "initial", "initial"
  cat[M.special.sep], cat[M.special.newline] = "delimiter", "delimiter"
  local nw = 0
  for i = 1, math.min(#order, V - #M.SPECIALS) do
    local w, k = order[i], #M.SPECIALS + i - 1
    id[w], vocab[k] = k, w
    if w:match(MARK) then cat[k] = "delimiter"
    elseif nw < n_weak then cat[k], nw = "weak", nw + 1
    else cat[k] = "other" end
  end
  local n = #toks
  local buf = ffi.new("int32_t[?]", n)
  local unk = 0
  for i = 1, n do
    local k = id[toks[i]]
    if not k then k, unk = M.special.unk, unk + 1 end
    buf[i - 1] = k
  end
  local corpus = { tokens = buf, n = n, vocab_size = V, vocab = vocab, special = M.special, kind = "words",
                   source = source, n_distinct = #order, unknown_share = unk / n }
  corpus.category = function(k) return cat[k] or "other" end
  corpus.categories = cat
  return corpus
end

return M
