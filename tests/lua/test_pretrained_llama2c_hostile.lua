-- test_pretrained_llama2c_hostile — llama2.c checkpoints and tokenizers that lie
-- (tests/hostile/llama2c/, described by tests/hostile/llama2c_cases.lua): each defect is refused
-- with one line naming the file and the field; the valid files of versions 0, 1 and 2 load, and
-- hold the values the cases file wrote (wq and wk rows permuted from interleaved to rotate-half;
-- version 2 within half a quantisation step). Also the directory-level refusals.
local t = require "outlierlab.tap"
local ol = require "outlierlab"
local ffi = require "ffi"
local l2c = require "outlierlab.pretrained.llama2c"
local pretrained = require "outlierlab.pretrained"
local hf = require "outlierlab.pretrained.hf"

local dir = ol.root .. "/tests/hostile"
local spec = dofile(dir .. "/llama2c_cases.lua")
local H, W = spec.H, spec.W

-- the value the project's parameter must hold at (row r, col c) of a (rows, cols) tensor
local function expected_param(name, l, i)
  local dim, hid, KV = H.dim, H.hid, H.dim / H.NH * H.NKV
  local hs = H.dim / H.NH
  local function rope_src(row, cols)   -- rotate-half row -> interleaved row of the file
    local h, j = math.floor(row / hs), row % hs
    return h * hs + (j < hs / 2 and 2 * j or 2 * (j - hs / 2) + 1)
  end
  local n = { wq = dim * dim, wk = KV * dim, wv = KV * dim, wo = dim * dim, w1 = hid * dim, w2 = dim * hid, w3 = hid * dim,
              rms_att = dim, rms_ffn = dim }
  if name == "wq" or name == "wk" then
    local row, col = math.floor(i / dim), i % dim
    return W[name][l * n[name] + rope_src(row) * dim + col + 1]
  end
  if n[name] then return W[name][l * n[name] + i + 1] end
  return W[name][i + 1]
end
local MAP = { ["embed_tokens.weight"] = "tok", ["norm.weight"] = "rms_final", ["lm_head.weight"] = "wcls" }
local LMAP = { ["ln1.weight"] = "rms_att", ["attn.q_proj.weight"] = "wq", ["attn.k_proj.weight"] = "wk", ["attn.v_proj.weight"] = "wv",
               ["attn.o_proj.weight"] = "wo", ["ln2.weight"] = "rms_ffn", ["mlp.gate_proj.weight"] = "w1", ["mlp.up_proj.weight"] = "w3",
               ["mlp.down_proj.weight"] = "w2" }

-- the largest |param - expected| over every parameter, and the largest group scale allowed (v2)
local function compare(ctx)
  local worst, names = 0, 0
  for name, p in pairs(hf.params_by_name(ctx)) do
    local l, rest = name:match("^layers(%d+)%.(.*)$")
    local src = l and LMAP[rest] or MAP[name]
    assert(src, "unmapped parameter " .. name)
    names = names + 1
    for i = 0, tonumber(p.numel) - 1 do
      local want = expected_param(src, tonumber(l) or 0, i)
      worst = math.max(worst, math.abs(p.data[i] - tonumber(ffi.new("float", want))))
    end
  end
  return worst, names
end

local nmodel, ntok, refused = 0, 0, 0
for _, c in ipairs(spec.cases) do
  local path = dir .. "/" .. c.file
  t.ok(t.slurp(path) == c.bytes, c.file .. ": the committed file is what llama2c_cases.lua describes", "run bin/outlierlab run tests/hostile/make_corpus.lua")
  local ok, res
  if c.kind == "model" then
    nmodel = nmodel + 1
    ok, res = pcall(function() local ctx, m = l2c.load(path) return { ctx = ctx, m = m } end)
  else
    ntok = ntok + 1
    ok, res = pcall(l2c.read_tokenizer, path, c.vocab)
  end
  if c.expect then
    refused = refused + 1
    local msg = tostring(res)
    t.ok(not ok and msg:find(path, 1, true) and msg:find(c.expect, 1, true) and not msg:find("\n"),
         c.file .. ": refused, naming the file and '" .. c.expect .. "'", ok and "loaded without an error" or msg)
  elseif c.kind == "model" then
    local worst, n = 0, 0
    if ok then worst, n = compare(res.ctx) end
    -- version 2: |w − q·s| ≤ s/2 with s = max|w| / 127 of the group (the values are below 1.5)
    local tol = c.version == 2 and 1.5 / 127 / 2 + 1e-6 or 0
    t.ok(ok and worst <= tol and n == 2 + H.L * 9 + (c.shared and 0 or 1),
         string.format("%s: version %d %s loads, every value as written (max |Δ| %.3g ≤ %.3g, %d parameters)", c.file, c.version,
           c.shared and "tied" or "untied", worst, tol, n), ok and "" or res)
  else
    t.ok(ok and res.vocab_size == c.count, c.file .. ": valid, " .. tostring(c.count) .. " pieces", ok and res.vocab_size or res)
  end
end
t.ok(nmodel >= 40 and ntok >= 15, string.format("corpus: %d checkpoints and %d tokenizers, %d refused", nmodel, ntok, refused))

-- every file of the folder is a case
local listed = {}
for _, c in ipairs(spec.cases) do listed[c.file] = true end
local stray = {}
local p = io.popen("cd '" .. dir .. "' && ls llama2c/*")
for f in p:lines() do if not listed[f] then stray[#stray + 1] = f end end
p:close()
t.is(table.concat(stray, ", "), "", "no file in tests/hostile/llama2c/ without a case")

-- the small tokenizer encodes by scores
local tk = l2c.read_tokenizer(dir .. "/llama2c/tok_valid.bin", 8)
t.is(table.concat(tk:encode("ab ab"), " "), "7 7", "the small tokenizer: ' ab' and ' ab' (dummy prefix, then merges by score)")

-- directories: none, two checkpoints, no tokenizer
local tmp = os.tmpname()
os.remove(tmp)
os.execute("mkdir -p '" .. tmp .. "/two' '" .. tmp .. "/none' '" .. tmp .. "/notok'")
local good = dir .. "/llama2c/valid_v0_tied.bin"
os.execute(string.format("cp '%s' '%s/two/a.bin' && cp '%s' '%s/two/b.bin' && cp '%s' '%s/notok/m.bin' && cp '%s' '%s/none/tokenizer.bin'",
  good, tmp, good, tmp, good, tmp, good, tmp))
t.throws(function() l2c.open(tmp .. "/two") end, "2 checkpoints in the directory (a.bin, b.bin): name the file", "a directory with two checkpoints: name one")
t.throws(function() l2c.open(tmp .. "/none") end, "no llama2.c checkpoint", "a directory with only a tokenizer")
t.ok(not l2c.detect(tmp .. "/none"), "such a directory is not taken for a llama2.c model (hf.open gives its message)")
local d = pretrained.open(tmp .. "/notok")
t.throws(function() l2c.tokenizer(d) end, "no tokenizer beside the checkpoint (looked for " .. tmp .. "/notok/tok16.bin and " .. tmp .. "/notok/tokenizer.bin)",
  "no tokenizer: the message says where it looked")
d:close()
local tokenized = pretrained.open(tmp .. "/notok/m.bin")
t.is(tokenized.name .. " " .. tokenized.cfg.vocab_size, "m 16", "the .bin file itself")
tokenized:close()
os.execute("rm -rf '" .. tmp .. "'")

return t.done()
