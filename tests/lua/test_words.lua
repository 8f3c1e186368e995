-- test_words — the real text for training (outlierlab.data.words, --data=kjv): the word split of
-- hand-written verses worked out below, then the King James Bible of Debian's bible-kjv (make
-- deps installs it): ids by frequency, the categories, the unknown share, LM and MLM batches
-- cut from it, the errors of bad settings, and the task mixed with the text (data.mix, --p_text).
local t = require "tap"
local ol = require "outlierlab"
local words = require "outlierlab.data.words"
local batcher = require "outlierlab.data.batcher"

local function same(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end
local function show(a) return "{" .. table.concat(a, "|"):gsub("\n", "\\n") .. "}" end

-- ---------------------------------------------------------------- the split, by hand
do
  local s = "Ge1:1 In the beginning God created the heaven and the earth.\n"
         .. "Ge1:2 And the earth was without form, and void; (and darkness) was upon the deep.\n"
         .. "1Cor13:13 Lord's day: who? Amen!\n"
  local want = { "in", "the", "beginning", "god", "created", "the", "heaven", "and", "the", "earth", ".", "\n",
                 "and", "the", "earth", "was", "without", "form", ",", "and", "void", ";", "(", "and", "darkness", ")",
                 "was", "upon", "the", "deep", ".", "\n",
                 "lord's", "day", ":", "who", "?", "amen", "!", "\n" }
  local got = words.split(s)
  t.ok(same(got, want), "verses: references dropped, lower case, marks apart, a newline per verse", show(got))
end

-- ---------------------------------------------------------------- errors
t.throws(function() words.corpus{ vocab_size = 32 } end, "vocab_size must be an integer in [64", "a vocabulary below 64")
t.throws(function() words.corpus{ vocab = 1024 } end, "unknown option 'vocab'", "a misspelt option")
t.throws(function() words.corpus{ source = "quran" } end, "unknown source 'quran'", "an unknown text")
t.throws(function() words.corpus{ n_weak = 2000, vocab_size = 1024 } end, "n_weak must be", "more weak words than the vocabulary")
t.throws(function() batcher.data_spec{ data = "kjv", vocab_size = 128 } end, "needs --vocab_size of at least 256", "--data=kjv with the organism's 128 tokens")
t.throws(function() batcher.data_spec{ data = "text", vocab_size = 1024 } end, "must be organism, corpus or kjv, got text", "an unknown --data")

-- ---------------------------------------------------------------- the King James Bible
local p = io.popen("command -v bible")
local has = (p:read("*a") or "") ~= ""
p:close()
if not has then
  t.skip("the King James Bible: bible-kjv not installed (make deps)")
  return t.done()
end

do
  local d = batcher.data_spec{ data = "kjv", vocab_size = 1024, data_seed = 1, n_tokens = 5 }
  local keys = {}
  for k, v in pairs(d) do keys[#keys + 1] = k .. "=" .. tostring(v) end
  table.sort(keys)
  local fs = require "outlierlab.util.fs"
  local q = io.popen("bible -f gen1:1-rev22:21 </dev/null 2>/dev/null")
  local text = q:read("*a")
  q:close()
  t.is(table.concat(keys, " "), "kind=words n_weak=16 source=kjv text_hash=" .. fs.hash(text) .. " vocab_size=1024",
       "--data=kjv: the spec names the text and its content hash, not the corpus settings")
  local other = { kind = "words", source = "kjv", vocab_size = 1024, n_weak = 16, text_hash = "0123456789abcdef" }
  t.throws(function() batcher.corpus(other) end, "is not the one of the spec (0123456789abcdef)", "a spec made from another edition of the text is refused")
end
local c = words.corpus{ vocab_size = 1024 }
t.is(c.n, 913424 + 31102, "the whole book: 913,424 words and marks and 31,102 verse ends")
t.is(c.n_distinct, 12832, "12,832 distinct words and marks")
t.ok(c.unknown_share > 0.09 and c.unknown_share < 0.1, "1,017 kept words cover 90 % of the text", c.unknown_share)
local sp = c.special
t.is(c.vocab[7], ",", "the most frequent token is the comma")
t.is(c.vocab[8], "the", "then 'the'")
t.is(c.category(sp.bos), "initial", "<bos> is initial")
t.is(c.category(sp.cls), "initial", "[CLS] is initial")
t.is(c.category(sp.sep), "delimiter", "[SEP] is a delimiter")
t.is(c.category(sp.newline), "delimiter", "the verse end is a delimiter")
t.is(c.category(7), "delimiter", "',' is a delimiter")
t.is(c.category(8), "weak", "'the' is weak")
t.is(c.category(sp.unk), "other", "<unk> is other")
t.is(c.vocab[sp.newline], "¶", "the verse end is labelled ¶ (a newline would break a figure's tick labels)")
local n_cat = { initial = 0, delimiter = 0, weak = 0, other = 0 }
for id = 0, c.vocab_size - 1 do local k = c.category(id); n_cat[k] = n_cat[k] + 1 end
t.is(n_cat.weak, 16, "16 weak words")
t.is(n_cat.delimiter, 2 + 8, "[SEP], the verse end and 8 marks are delimiters", n_cat.delimiter)
local n_delim, n_weak = 0, 0
for i = 0, c.n - 1 do
  local k = c.category(c.tokens[i])
  if k == "delimiter" then n_delim = n_delim + 1 elseif k == "weak" then n_weak = n_weak + 1 end
end
t.diag(string.format("KJV: %.1f %% of the tokens delimiters, %.1f %% weak words", 100 * n_delim / c.n, 100 * n_weak / c.n))
t.ok(n_delim / c.n > 0.15 and n_delim / c.n < 0.25, "delimiters are frequent (15-25 % of the tokens)", n_delim / c.n)
t.is(c.vocab[c.tokens[0]] .. " " .. c.vocab[c.tokens[1]] .. " " .. c.vocab[c.tokens[2]], "in the beginning", "the text starts at Genesis 1:1")
local spec_d = batcher.data_spec{ data = "kjv", vocab_size = 1024 }
local cached = batcher.corpus(spec_d)
t.is(cached.n, c.n, "the batcher builds the same corpus from the spec")
t.ok(batcher.corpus(batcher.data_spec{ data = "kjv", vocab_size = 1024 }) == cached, "memoised: read once per process")

local ctx = ol.Context{ seed = 1 }
do   -- LM rows: <bos> then running text, targets shifted by one
  local b = batcher.batcher(cached, { B = 4, T = 16, kind = "lm" })
  local batch = b:next(ctx)
  local ok = true
  for r = 0, 3 do
    if batch.ids.idata[r * 16] ~= sp.bos then ok = false end
    for i = 1, 15 do if batch.targets.idata[r * 16 + i - 1] ~= batch.ids.idata[r * 16 + i] then ok = false end end
  end
  t.ok(ok, "LM rows: <bos>, then the text; each target is the next id")
end
do   -- MLM rows: [CLS] … [SEP], about 15 % of the inner positions targets
  local b = batcher.batcher(cached, { B = 64, T = 64, kind = "mlm" })
  local batch = b:next(ctx)
  local ntg, nmask = 0, 0
  for r = 0, 63 do
    t.is(batch.ids.idata[r * 64], sp.cls, "MLM row " .. r .. " starts with [CLS]")
    t.is(batch.ids.idata[r * 64 + 63], sp.sep, "MLM row " .. r .. " ends with [SEP]")
    for i = 1, 62 do
      if batch.targets.idata[r * 64 + i] >= 0 then ntg = ntg + 1 end
      if batch.ids.idata[r * 64 + i] == sp.mask then nmask = nmask + 1 end
    end
  end
  t.ok(math.abs(ntg / (64 * 62) - 0.15) < 0.02, "about 15 % of the inner positions are targets", ntg / (64 * 62))
  t.ok(math.abs(nmask / ntg - 0.8) < 0.05, "80 % of the targets read [MASK]", nmask / ntg)
end
ctx:reset()

-- ---------------------------------------------------------------- the task mixed with the text
do
  local base = { data = "organism", vocab_size = 128, n_triggers = 24, groups = 8, alpha = 0.1, p_trigger = 0.08,
                 n_delim = 0, p_delim = 0.1, n_weak = 0, p_weak = 0.1, data_seed = 1 }
  local d = batcher.data_spec(base)
  t.is(d.kind, "organism", "--p_text absent: the organism's spec as before")
  base.p_text = 0
  t.is(batcher.data_spec(base).kind, "organism", "--p_text=0: the organism's spec as before")
  base.p_text = 0.5
  local dm = batcher.data_spec(base)
  t.is(dm.kind .. " " .. dm.vocab_size .. " " .. dm.task.kind .. " " .. dm.text.kind, "mix 1152 organism words",
       "--p_text=0.5: a mix of the task (128 ids) and the text (1,024 ids)")
  t.throws(function() batcher.data_spec{ data = "corpus", p_text = 0.5 } end, "mixes the text into the organism's task",
           "--p_text with the generated corpus")
  local mixed = batcher.corpus(dm)
  local mix = require "outlierlab.data.mix"
  t.throws(function() mix.corpus(mixed.task, mixed.text, 1) end, "p_text must be in (0, 1)", "p_text = 1 is the text alone")
  t.is(mixed.vocab_size, 1152, "the model's vocabulary: task + text")
  t.is(mixed.category(128 + 7) .. " " .. mixed.vocab[128 + 7], "delimiter ,", "text id k is 128 + k, with its category")
  t.is(mixed.category(128 + 8) .. " " .. mixed.vocab[128 + 8], "weak the", "'the' is weak")
  t.is(mixed.category(sp.bos), "initial", "<bos> is shared")
  t.is(mixed.category(40), mixed.task.category(40), "task ids keep the task's categories")
  t.throws(function() batcher.batcher(mixed, { B = 2, T = 8, kind = "mlm" }) end, "MLM rows take --data=kjv", "no MLM rows from the mix")
  local L = batcher.batcher(mixed, { B = 256, T = 32, kind = "lm" })
  local batch = L:next(ctx)
  local ntext, ok, bos_in = 0, true, 0
  for r = 0, 255 do
    local text_row = false
    if batch.ids.idata[r * 32] ~= sp.bos then ok = false end
    for i = 1, 31 do
      local id = batch.ids.idata[r * 32 + i]
      if id >= 128 then text_row = true end
      if id == sp.bos then bos_in = bos_in + 1 end
      if batch.targets.idata[r * 32 + i - 1] ~= id then ok = false end
    end
    if text_row then ntext = ntext + 1 end
  end
  t.ok(ok, "mixed LM rows: <bos> first, each target the next id")
  t.is(bos_in, 0, "no <bos> inside a row")
  t.ok(math.abs(ntext / 256 - 0.5) < 0.1, "about half of the rows are text", ntext / 256)
  local st = L:state()
  local b2 = L:next(ctx)
  local L2 = batcher.batcher(mixed, { B = 256, T = 32, kind = "lm" })
  L2:set_state(st)
  local b3 = L2:next(ctx)
  local same = true
  for i = 0, 256 * 32 - 1 do if b2.ids.idata[i] ~= b3.ids.idata[i] then same = false end end
  t.ok(same, "a loader set to a saved state gives the same batch (resume)")
  local V = batcher.batcher(mixed, { B = 256, T = 32, kind = "lm", split = "val" }):next(ctx)
  local differ = false
  for i = 0, 256 * 32 - 1 do if V.ids.idata[i] ~= batch.ids.idata[i] then differ = true end end
  t.ok(differ, "the held-out split draws other rows")
  -- rank 1 of 2 builds rows 4..7 of every global batch of 8 (what shard = true gives it): the
  -- rows of the one-rank batch, so any number of ranks trains on the same batches
  local full = mix.LMLoader{ mix = mixed, B = 8, T = 16 }
  local half = mix.LMLoader{ mix = mixed, B = 8, T = 16 }
  half.first, half.rows = 4, 4
  local same_rows = true
  for _ = 1, 3 do
    local bf, bh = full:next(ctx), half:next(ctx)
    for i = 0, 4 * 16 - 1 do
      if bh.ids.idata[i] ~= bf.ids.idata[4 * 16 + i] or bh.targets.idata[i] ~= bf.targets.idata[4 * 16 + i] then same_rows = false end
    end
  end
  t.ok(same_rows, "a rank's rows are the one-rank batch's rows of their global index (three steps)")
  ctx:reset()
end
return t.done()
