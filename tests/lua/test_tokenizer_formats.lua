-- test_tokenizer_formats — tokenizer file formats the import path must read as Hugging Face's
-- tokenizers library does (issue 22, defect 7):
--   * LLaMA's tokenizer.json in the newer format (transformers ≥ 4.41, legacy = false): no
--     normalizer, a Metaspace pre-tokenizer (replacement "▁", prepend_scheme "first" or
--     "always", split true/false). Metaspace prepends "▁" only when the text does not already
--     start with one (tokenizers/src/pre_tokenizers/metaspace.rs), so " hello" is "▁hello",
--     never "▁▁hello"; split = true cuts before every "▁" (MergedWithNext).
--   * the older format (Prepend("▁") + Replace(" ", "▁") normalizers) prepends always: " hello"
--     is "▁▁hello" there, as SentencePiece's LLaMA-2 tokenizer gives.
--   * BERT's WordPiece splits on U+2028 LINE SEPARATOR and U+2029 PARAGRAPH SEPARATOR (Rust's
--     char::is_whitespace in Hugging Face's BertPreTokenizer; Python's str.split in Google's
--     tokenization.py).
local t = require "tap"
local json = require "outlierlab.util.json"
local tokenizers = require "outlierlab.pretrained.tokenizers"

local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir)
local function write(path, s) local f = assert(io.open(path, "wb")) f:write(s) f:close() end
local function same(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end
local function show(ids) return "{" .. table.concat(ids, ", ") .. "}" end

local vocab = { ["<unk>"] = 0, ["<s>"] = 1, ["</s>"] = 2, ["▁"] = 3, h = 4, e = 5, l = 6, o = 7, ["▁h"] = 8, ["▁he"] = 9,
                ["▁hel"] = 10, ["▁hell"] = 11, ["▁hello"] = 12, ["▁▁"] = 13, w = 14, ["▁w"] = 15, ["▁▁h"] = 16 }
-- "▁ ▁" and "▁▁ h" rank first: a run "▁▁h" that stays one word merges to ▁▁h
local merges = { "▁ ▁", "▁▁ h", "▁ h", "▁h e", "▁he l", "▁hel l", "▁hell o", "▁ w" }
local added = { { id = 0, content = "<unk>", special = true }, { id = 1, content = "<s>", special = true }, { id = 2, content = "</s>", special = true } }
local function tok(name, normalizer, pre)
  local d = dir .. "/" .. name
  os.execute("mkdir -p " .. d)
  write(d .. "/tokenizer.json", json.encode({ version = "1.0", added_tokens = added, normalizer = normalizer, pre_tokenizer = pre,
    model = { type = "BPE", byte_fallback = false, unk_token = "<unk>", vocab = vocab, merges = merges } }))
  write(d .. "/tokenizer_config.json", json.encode({ bos_token = "<s>", eos_token = "</s>" }))
  return tokenizers.load(d)
end

local legacy = tok("legacy", { type = "Sequence", normalizers = { { type = "Prepend", prepend = "▁" },
                                                                  { type = "Replace", pattern = { String = " " }, content = "▁" } } }, nil)
local first = tok("first", nil, { type = "Metaspace", replacement = "▁", prepend_scheme = "first", split = false })
local always = tok("always", nil, { type = "Metaspace", replacement = "▁", prepend_scheme = "always", split = false })
local split = tok("split", nil, { type = "Metaspace", replacement = "▁", prepend_scheme = "first", split = true })

-- "hello": ▁hello in every format
for name, tk in pairs { legacy = legacy, first = first, always = always, split = split } do
  local ids = tk:encode("hello")
  t.ok(same(ids, { 12 }), name .. ": 'hello' -> ▁hello", show(ids))
end
-- " hello": Metaspace does not prepend a second ▁; the legacy Prepend normalizer does
local ids = first:encode(" hello")
t.ok(same(ids, { 12 }), "Metaspace (first): ' hello' -> ▁hello (no second ▁)", show(ids))
ids = always:encode(" hello")
t.ok(same(ids, { 12 }), "Metaspace (always): ' hello' -> ▁hello (no second ▁)", show(ids))
ids = legacy:encode(" hello")
t.ok(same(ids, { 16, 5, 6, 6, 7 }), "legacy Prepend + Replace: ' hello' -> ▁▁h e l l o (SentencePiece's answer)", show(ids))
-- "w  hello": without split the run "▁▁" merges with h (▁▁h); with split = true every ▁ starts
-- a piece: "▁w", "▁", "▁hello"
ids = first:encode("w  hello")
t.ok(same(ids, { 15, 16, 5, 6, 6, 7 }), "Metaspace split = false: 'w  hello' -> ▁w ▁▁h e l l o", show(ids))
ids = split:encode("w  hello")
t.ok(same(ids, { 15, 3, 12 }), "Metaspace split = true: 'w  hello' -> ▁w ▁ ▁hello", show(ids))
-- prepend_scheme first: nothing prepended after an added token at the start
ids = first:encode("<s>hello")
t.ok(same(ids, { 1, 4, 5, 6, 6, 7 }), "Metaspace (first): '<s>hello' -> <s> h e l l o", show(ids))
t.is(first:decode({ 12, 15 }), "hello w", "Metaspace: decode drops the prepended ▁")
t.is(first:category(1), "initial", "Metaspace tokenizer: <s> is initial")
t.is(first:category(2), "delimiter", "Metaspace tokenizer: </s> is a delimiter")

-- BERT: U+2028 and U+2029 are whitespace
write(dir .. "/vocab.txt", table.concat({ "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c" }, "\n") .. "\n")
local wp = tokenizers.from_vocab_txt(dir .. "/vocab.txt", dir)
ids = wp:encode("a\u{2028}b\u{2029}c")
t.ok(same(ids, { 5, 6, 7 }), "WordPiece: 'a<U+2028>b<U+2029>c' -> a b c", show(ids))
write(dir .. "/tokenizer.json", json.encode({ model = { type = "WordPiece", unk_token = "[UNK]", continuing_subword_prefix = "##",
  max_input_chars_per_word = 100, vocab = { ["[PAD]"] = 0, ["[UNK]"] = 1, ["[CLS]"] = 2, ["[SEP]"] = 3, a = 4, b = 5 } },
  normalizer = { type = "BertNormalizer", lowercase = true, clean_text = true, handle_chinese_chars = true },
  pre_tokenizer = { type = "BertPreTokenizer" } }))
local wj = tokenizers.load(dir)
ids = wj:encode("A\u{2029}B")
t.ok(same(ids, { 4, 5 }), "WordPiece (tokenizer.json): 'A<U+2029>B' -> a b", show(ids))

-- LLaMA-3's tokenizer.json: Split(its regex, Isolated) then ByteLevel(use_regex = false), and
-- a BPE model with ignore_merges = true (a word that is a vocabulary entry is one token even
-- when the merges would not build it). Byte-level symbols: Ġ = space.
do
  local pattern = [[(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+]]
  local v = {}
  local n = 0
  for c in ("abcdefghijklmnopqrstuvwxyzHIT0123456789'.,!"):gmatch(".") do v[c] = n n = n + 1 end
  v["Ġ"], v["Ċ"] = n, n + 1
  v["Ġhello"] = 100 v["Ġw"] = 101 v["123"] = 102 v["45"] = 103 v["'S"] = 104 v["<|begin_of_text|>"] = 105
  local function l3(ignore, use_regex)
    local d = dir .. "/l3-" .. tostring(ignore) .. tostring(use_regex)
    os.execute("mkdir -p " .. d)
    write(d .. "/tokenizer.json", json.encode({ added_tokens = { { id = 105, content = "<|begin_of_text|>", special = true } },
      pre_tokenizer = { type = "Sequence", pretokenizers = { { type = "Split", pattern = { Regex = pattern }, behavior = "Isolated", invert = false },
                                                              { type = "ByteLevel", add_prefix_space = false, trim_offsets = true, use_regex = use_regex } } },
      model = { type = "BPE", ignore_merges = ignore, vocab = v, merges = { { "Ġ", "w" }, { "1", "2" }, { "12", "3" }, { "4", "5" } } } }))
    write(d .. "/tokenizer_config.json", json.encode({ bos_token = "<|begin_of_text|>" }))
    return tokenizers.load(d)
  end
  local tk = l3(true, false)
  local got = tk:encode("IT'S hello w12345")
  -- "IT" "'S" " hello" " w" "123" "45": (?i:'s) takes 'S; \p{N}{1,3} cuts digits in threes
  t.ok(same(got, { v.I, v.T, 104, 100, 101, 102, 103 }), "LLaMA-3 tokenizer.json: 'IT'S hello w12345' -> I T 'S Ġhello Ġw 123 45 (ignore_merges keeps Ġhello whole)", show(got))
  got = l3(false, false):encode(" hello")
  t.ok(same(got, { v["Ġ"], v.h, v.e, v.l, v.l, v.o }), "ignore_merges = false: ' hello' -> Ġ h e l l o (no merge builds it)", show(got))
  t.is(tk.special.bos, 105, "LLaMA-3: BOS <|begin_of_text|> from tokenizer_config.json")
  -- token categories from the decoded text of each token
  local cats = { tk:category(105), tk:category(v["."]), tk:category(v["Ċ"]), tk:category(v["Ġ"]), tk:category(100) }
  t.ok(cats[1] == "initial" and cats[2] == "delimiter" and cats[3] == "delimiter" and cats[4] == "other" and cats[5] == "other",
       "LLaMA-3 categories: <|begin_of_text|> initial, '.' and 'Ċ' (a line break) delimiters, 'Ġ' and 'Ġhello' other", table.concat(cats, " "))
  -- ByteLevel with use_regex = true after a Split applies GPT-2's regex inside each piece too:
  -- "a1" is one piece of the Split regex below, GPT-2's regex cuts it into "a" "1"
  local d = dir .. "/both"
  os.execute("mkdir -p " .. d)
  write(d .. "/tokenizer.json", json.encode({ pre_tokenizer = { type = "Sequence", pretokenizers = {
      { type = "Split", pattern = { Regex = [[\S+|\s+]] }, behavior = "Isolated", invert = false },
      { type = "ByteLevel", add_prefix_space = false, use_regex = true } } },
    model = { type = "BPE", vocab = { a = 0, ["1"] = 1, a1 = 2 }, merges = { { "a", "1" } } } }))
  got = tokenizers.load(d):encode("a1")
  t.ok(same(got, { 0, 1 }), "Split then ByteLevel(use_regex = true): both regexes apply ('a1' -> a 1)", show(got))
end

os.execute("rm -rf " .. dir)
return t.done()
