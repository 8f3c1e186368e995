-- test_pretrained_cache — the analysis cache of an imported model is keyed by the contents of
-- every file the analysis reads (issue 22, defect 1): a weight, config.json, the tokenizer or
-- the text changed with size and modification time kept (as `cp -p` and `rsync -a` keep them)
-- is analysed again, and a changed copy of the model in another directory is not answered
-- from the original's cache. An unchanged rerun is answered from the cache.
local t = require "tap"
local ol = require "outlierlab"
local hf = require "outlierlab.pretrained.hf"
local json = require "outlierlab.util.json"
local models = require "outlierlab.models"

local root = os.tmpname()
os.remove(root)
os.execute("mkdir -p " .. root)
local function write(path, s) local f = assert(io.open(path, "wb")) f:write(s) f:close() end
local function read(path) local f = assert(io.open(path, "rb")) local s = f:read("*a") f:close() return s end
-- overwrite bytes at offset (0-based) keeping the size and the modification time
local function poke(path, off, bytes)
  os.execute("touch -r " .. path .. " " .. root .. "/stamp")
  local f = assert(io.open(path, "r+b"))
  f:seek("set", off)
  f:write(bytes)
  f:close()
  os.execute("touch -r " .. root .. "/stamp " .. path)
end
local function size(path) local f = assert(io.open(path, "rb")) local n = f:seek("end") f:close() return n end

local ctx = ol.Context{ params = 2 * 1024 * 1024, seed = 3 }
local m = models.build(ctx, models.preset("llama-quick", { n_kv_head = 1 }))
local dir = root .. "/m"
hf.export(dir, ctx, m, { special = { bos = 1, eos = 2 } })
local vocab = { ["<unk>"] = 0, ["<s>"] = 1, ["</s>"] = 2 }
for b = 0, 252 do vocab[string.format("<0x%02X>", b)] = 3 + b end
local function tokenizer(v)
  return json.encode({ model = { type = "BPE", byte_fallback = true, vocab = v, merges = {} },
    normalizer = { type = "Sequence", normalizers = { { type = "Prepend", prepend = "▁" }, { type = "Replace", pattern = { String = " " }, content = "▁" } } } })
end
write(dir .. "/tokenizer.json", tokenizer(vocab))
write(dir .. "/tokenizer_config.json", json.encode({ bos_token = "<s>" }))
local lines = {}
for i = 1, 300 do lines[i] = "And it came to pass, in the " .. (100 + i) .. "th year, that they went." end
local textf = root .. "/text.txt"
write(textf, table.concat(lines, "\n"))

local function run(d, what)
  local cmd = string.format("bin/outlierlab run experiments/so-fig3.lua --profile=quick --model=%s --text=%s --out=%s/results --cache=%s/cache",
    d, textf, root, root)
  local out, ok = t.sh(cmd)
  local cached = out:find("stage analyze: cached", 1, true) ~= nil
  return ok, cached, out
end

local ok, cached, out = run(dir)
t.ok(ok and not cached, "first run analyses", out)
ok, cached, out = run(dir)
t.ok(ok and cached, "an unchanged rerun is answered from the cache", out)

-- a weight changed in place: same size, same mtime
local w = dir .. "/model.safetensors"
poke(w, size(w) - 8, "\0\0\32\64\0\0\32\64")   -- two fp32 2.5 at the end of the last tensor
ok, cached, out = run(dir)
t.ok(ok and not cached, "a weight changed with size and mtime kept is analysed again", out)

-- config.json: rms_norm_eps changed without changing its length
local cj = read(dir .. "/config.json")
local c = json.decode(cj)
local eps = json.encode(c.rms_norm_eps)
local new = cj:gsub(eps:gsub("%p", "%%%0"), (eps:gsub("%d$", function(d) return tostring((tonumber(d) + 1) % 10) end)), 1)
t.is(#new, #cj, "config.json edit keeps the size")
poke(dir .. "/config.json", 0, new)
ok, cached, out = run(dir)
t.ok(ok and not cached, "config.json changed with size and mtime kept is analysed again", out)

-- the tokenizer: two byte tokens swapped (same size), mtime kept
local tj = read(dir .. "/tokenizer.json")
local a, b = tj:find('"<0x41>":68', 1, true), tj:find('"<0x42>":69', 1, true)
t.ok(a and b, "tokenizer.json holds the byte tokens to swap")
local tj2 = tj:gsub('"<0x41>":68', '"<0x41>":6X', 1):gsub('"<0x42>":69', '"<0x42>":68', 1):gsub('"<0x41>":6X', '"<0x41>":69', 1)
t.is(#tj2, #tj, "tokenizer.json edit keeps the size")
poke(dir .. "/tokenizer.json", 0, tj2)
ok, cached, out = run(dir)
t.ok(ok and not cached, "tokenizer.json changed with size and mtime kept is analysed again", out)

-- the text: one letter changed, size and mtime kept
poke(textf, 10, "X")
ok, cached, out = run(dir)
t.ok(ok and not cached, "the text changed with size and mtime kept is analysed again", out)

-- a copy (cp -p) in another directory under the same name, then changed there
os.execute("mkdir -p " .. root .. "/other && cp -rp " .. dir .. " " .. root .. "/other/")
local w2 = root .. "/other/m/model.safetensors"
poke(w2, size(w2) - 8, "\0\0\0\64\0\0\0\64")
ok, cached, out = run(root .. "/other/m")
t.ok(ok and not cached, "a changed copy of the model in another directory is not answered from the original's cache", out)

os.execute("rm -rf " .. root)
return t.done()
