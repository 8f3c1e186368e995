-- test_corpus_file — the paper-scale corpus path (lua/outlierlab/data/corpus_file.lua): the
-- token file holds exactly the tokens of data.corpus (generated slice by slice of documents),
-- is written once (a second open maps it, two processes at once write it once), is a valid
-- llm.c token file, and experiment.corpus switches to it above CORPUS_FILE_TOKENS.
local t = require "tap"
local cf = require "outlierlab.data.corpus_file"
local data = require "outlierlab.data"
local batcher = require "outlierlab.data.batcher"
local sh = t.sh

local tmp = os.tmpname()
os.remove(tmp)
local cache = tmp .. "/cache"
cf.DOCS_PER_SLICE = 37   -- many slices: their seams must not show
local d = { seed = 3, n_tokens = 60000, vocab_size = 300 }
local logs = {}
local function log(fmt, ...) logs[#logs + 1] = string.format(fmt, ...) end
local c = cf.corpus(d, cache, log)
local ref = data.corpus(d)
local bad = 0
for i = 0, ref.n - 1 do if c.tokens[i] ~= ref.tokens[i] then bad = bad + 1 end end
t.ok(c.n == ref.n and bad == 0, string.format("the file holds data.corpus's %d tokens exactly (%d differ)", ref.n, bad))
t.ok(#logs == 1 and logs[1]:find("generating 60000 tokens", 1, true), "generated once", table.concat(logs, "\n"))
t.ok(c.vocab[c.tokens[0]] == "<bos>" and c.category(c.special.bos) == "initial", "vocabulary and categories as data.corpus")
local c2 = cf.corpus(d, cache, log)
t.ok(#logs == 1 and c2.tokens[ref.n - 1] == ref.tokens[ref.n - 1], "a second open maps the file without generating")
local tf = data.open_tokens(c.file)
t.ok(tf.n == ref.n and tf.format == "llmc" and tf:get(12345) == ref.tokens[12345], "an llm.c token file (data.open_tokens reads it)")
tf:close()

-- two processes at once: one writes, the other waits and maps the same file
local d2 = "{ seed = 4, n_tokens = 200000, vocab_size = 512 }"
local script = tmp .. "/two.lua"
local f = io.open(script, "w")
f:write(string.format([[
local cf = require "outlierlab.data.corpus_file"
local c = cf.corpus(%s, %q, function(fmt, ...) print(string.format(fmt, ...)) end)
local s = 0
for i = 0, c.n - 1 do s = (s * 31 + c.tokens[i]) %% 1000000007 end
print("checksum " .. s)
]], d2, cache))
f:close()
local out = sh(string.format("bin/outlierlab run %s > %s/a.log 2>&1 & bin/outlierlab run %s > %s/b.log 2>&1; wait; cat %s/a.log %s/b.log",
                             script, tmp, script, tmp, tmp, tmp))
local sums = {}
for s in out:gmatch("checksum (%d+)") do sums[#sums + 1] = s end
local gens = select(2, out:gsub("generating 200000 tokens", ""))
t.ok(#sums == 2 and sums[1] == sums[2] and gens == 1, "two processes: written once, the same tokens for both", out)

-- the experiment runner's corpus switches to the file above the threshold
local saved = batcher.CORPUS_FILE_TOKENS
batcher.CORPUS_FILE_TOKENS = 50000
local ec = batcher.corpus(d, { cache_root = cache })
batcher.CORPUS_FILE_TOKENS = saved
t.ok(ec.file and ec.file:find(cache, 1, true) and ec.tokens[777] == ref.tokens[777], "experiment.corpus maps the file from the threshold on")
local b = batcher.batcher(ec, { B = 2, T = 16, kind = "lm", seed = 1 })
local ctx = require("outlierlab").Context{ seed = 1 }
local batch = b:next(ctx)
t.ok(batch.ids:size()[1] == 2, "batches are cut from the mapped tokens")
os.execute("rm -rf '" .. tmp .. "'")
return t.done()
