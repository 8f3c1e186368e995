-- test_hf_refuse — what an imported model directory must not get past (issue 22, defects 3-6):
--   * non-finite weights (+Inf, NaN; F32 and BF16) and invalid config values (a negative or
--     infinite epsilon, a non-positive rope_theta) are refused before anything runs, naming
--     the file and the tensor or config key, and an analysis run exits non-zero;
--   * --text=<a directory> is one clean line, not a Lua traceback;
--   * sizes are bounded against the file's tensors before anything is built (n_layer = 1e300
--     used to build 21,481 layers for 34 s and end in "buffer full");
--   * hostile directories: every message names the file (config.json, the shard) and the key
--     or tensor, on one line without a Lua source position.
local t = require "tap"
local ol = require "outlierlab"
local hf = require "outlierlab.pretrained.hf"
local json = require "outlierlab.util.json"
local models = require "outlierlab.models"
local progress = require "outlierlab.util.progress"

local root = os.tmpname()
os.remove(root)
os.execute("mkdir -p " .. root)
local function write(path, s) local f = assert(io.open(path, "wb")) f:write(s) f:close() end
local function read(path) local f = assert(io.open(path, "rb")) local s = f:read("*a") f:close() return s end

local ctx = ol.Context{ params = 2 * 1024 * 1024, seed = 3 }
local bases = {
  llama = models.build(ctx, models.preset("llama-quick", { n_kv_head = 1 })),
  gpt2 = models.build(ctx, models.preset("gpt2-quick", { bias = true })),
}
for f, m in pairs(bases) do hf.export(root .. "/" .. f, ctx, m, { special = { bos = 1, eos = 2 } }) end
hf.export(root .. "/llama-bf16", ctx, bases.llama, { dtype = "BF16", special = { bos = 1, eos = 2 } })

local function variant(fam, name, fn)
  local d = root .. "/" .. name
  os.execute("rm -rf " .. d .. " && cp -r " .. root .. "/" .. fam .. " " .. d)
  fn(d)
  return d
end
local function cfg(fn)
  return function(d) local c = json.decode(read(d .. "/config.json")) fn(c) write(d .. "/config.json", json.encode(c)) end
end
-- the byte offset of a tensor's data in a single-file safetensors
local function data_offset(path, name)
  local s = read(path)
  local n = 0
  for i = 8, 1, -1 do n = n * 256 + s:byte(i) end
  local h = json.decode(s:sub(9, 8 + n))
  return 8 + n + h[name].data_offsets[1], h[name].dtype
end
local function poke(path, off, bytes)
  local f = assert(io.open(path, "r+b"))
  f:seek("set", off)
  f:write(bytes)
  f:close()
end
local function set_value(d, name, k, f32, bf16)
  local p = d .. "/model.safetensors"
  local off, dt = data_offset(p, name)
  if dt == "BF16" then poke(p, off + 2 * k, bf16) else poke(p, off + 4 * k, f32) end
end
local PINF, NAN = "\0\0\128\127", "\0\0\192\127"   -- fp32 little-endian
local PINF16, NAN16 = "\128\127", "\192\127"          -- bf16

-- { family, name, edit, what the message must hold (all of them) }
local cases = {
  -- defect 3: non-finite weights, invalid config values
  { "gpt2", "inf-weight", function(d) set_value(d, "transformer.h.1.mlp.c_fc.weight", 5, PINF, PINF16) end,
    { "model.safetensors", "transformer.h.1.mlp.c_fc.weight", "+Inf", "element 5" } },
  { "llama", "nan-weight", function(d) set_value(d, "model.layers.0.self_attn.k_proj.weight", 17, NAN, NAN16) end,
    { "model.safetensors", "model.layers.0.self_attn.k_proj.weight", "NaN", "element 17" } },
  { "llama-bf16", "inf-bf16", function(d) set_value(d, "model.norm.weight", 3, PINF, "\128\255") end,
    { "model.safetensors", "model.norm.weight", "-Inf", "element 3" } },
  { "gpt2", "eps-negative", cfg(function(c) c.layer_norm_epsilon = -1 end), { "config.json", "'layer_norm_epsilon'", "-1" } },
  { "llama", "rms-eps-negative", cfg(function(c) c.rms_norm_eps = -1e-6 end), { "config.json", "'rms_norm_eps'" } },
  { "llama", "rms-eps-inf", function(d) local s = read(d .. "/config.json") write(d .. "/config.json", (s:gsub('"rms_norm_eps":[^,}]+', '"rms_norm_eps":1e999'))) end, { "config.json", "'rms_norm_eps'" } },
  { "llama", "theta-negative", cfg(function(c) c.rope_theta = -5 end), { "config.json", "'rope_theta'", "-5" } },
  { "llama", "theta-zero", cfg(function(c) c.rope_theta = 0 end), { "config.json", "'rope_theta'" } },
  -- defect 5: sizes bounded by the files before anything is built
  { "gpt2", "n-layer-huge", cfg(function(c) c.n_layer = 1e300 end), { "config.json", "'n_layer'" } },
  { "gpt2", "n-layer-1000", cfg(function(c) c.n_layer = 1000 end), { "config.json", "'n_layer' = 1000", "2 layers", "transformer.h.2." } },
  { "gpt2", "n-embd-huge", cfg(function(c) c.n_embd = 1e300 end), { "config.json", "'n_embd'" } },
  { "llama", "ff-huge", cfg(function(c) c.intermediate_size = 1e15 end), { "config.json", "'intermediate_size'" } },
  { "llama", "ff-big", cfg(function(c) c.intermediate_size = 100000 end), { "config.json", "intermediate_size", "model.safetensors", "mlp.gate_proj.weight" } },
  -- defect 6: every message names the file and the key or tensor
  { "gpt2", "n-head-3", cfg(function(c) c.n_head = 3 end), { "config.json", "'n_head' = 3", "'n_embd' = 64" } },
  { "gpt2", "n-head-0", cfg(function(c) c.n_head = 0 end), { "config.json", "'n_head'" } },
  { "gpt2", "n-head-huge", cfg(function(c) c.n_head = 1e300 end), { "config.json", "'n_head'" } },
  { "llama", "kv-3", cfg(function(c) c.num_key_value_heads = 3 end), { "config.json", "'num_key_value_heads' = 3", "'num_attention_heads' = 2" } },
  { "llama", "kv-0", cfg(function(c) c.num_key_value_heads = 0 end), { "config.json", "'num_key_value_heads'" } },
  { "llama", "heads-string", cfg(function(c) c.num_attention_heads = "2" end), { "config.json", "'num_attention_heads'", '"2"' } },
  { "llama", "vocab-0", cfg(function(c) c.vocab_size = 0 end), { "config.json", "'vocab_size'" } },
  { "llama", "config-array", function(d) write(d .. "/config.json", "[1, 2]") end, { "config.json", "JSON object" } },
  { "llama", "st-garbage", function(d) write(d .. "/model.safetensors", "\255\255\255\255\255\255\255\127garbage") end, { "model.safetensors", "header" } },
  { "llama", "st-bad-json", function(d) local s = "{bad json  " write(d .. "/model.safetensors", string.char(#s, 0, 0, 0, 0, 0, 0, 0) .. s) end, { "model.safetensors", "JSON" } },
  { "llama", "st-empty", function(d) write(d .. "/model.safetensors", "") end, { "model.safetensors", "truncated" } },
  { "llama", "st-directory", function(d) os.remove(d .. "/model.safetensors") os.execute("mkdir " .. d .. "/model.safetensors") end, { "model.safetensors", "not a regular file" } },
}

for _, c in ipairs(cases) do
  local d = variant(c[1], c[2], c[3])
  local t0 = progress.now()
  local ok, err = pcall(function() local dd = hf.open(d) hf.load(dd) dd:close() end)
  local msg = tostring(err)
  local good = not ok and not msg:find("\n", 1, true) and not msg:find("%.lua:%d+:")
  local missing
  for _, want in ipairs(c[4]) do if not msg:find(want, 1, true) then good, missing = false, want break end end
  t.ok(good and progress.now() - t0 < 5, string.format("%s: refused in %.2f s naming %s", c[2], progress.now() - t0, table.concat(c[4], ", ")),
       ok and "loaded without an error" or (missing and ("no '" .. missing .. "' in: ") or "") .. msg)
end

-- an analysis run: a +Inf weight or a negative epsilon exits non-zero with the message; a
-- directory as --text is one clean line
local vocab = { ["<unk>"] = 0, ["<s>"] = 1, ["</s>"] = 2 }
for b = 0, 252 do vocab[string.format("<0x%02X>", b)] = 3 + b end
local function with_tokenizer(d)
  write(d .. "/tokenizer.json", json.encode({ model = { type = "BPE", byte_fallback = true, vocab = vocab, merges = {} },
    normalizer = { type = "Sequence", normalizers = { { type = "Prepend", prepend = "▁" }, { type = "Replace", pattern = { String = " " }, content = "▁" } } } }))
  write(d .. "/tokenizer_config.json", json.encode({ bos_token = "<s>" }))
  return d
end
local lines = {}
for i = 1, 300 do lines[i] = "And it came to pass, in the " .. i .. "th year, that they went." end
write(root .. "/text.txt", table.concat(lines, "\n"))
local function run(d, textf)
  return t.sh(string.format("bin/outlierlab run experiments/so-fig3.lua --profile=quick --model=%s --text=%s --out=%s/results --cache=%s/cache",
    d, textf or (root .. "/text.txt"), root, root))
end
local out, ok = run(with_tokenizer(root .. "/nan-weight"))
t.ok(not ok and out:find("model.layers.0.self_attn.k_proj.weight", 1, true) and not out:find("nan;", 1, true),
     "so-fig3 on a model with a NaN weight exits non-zero naming the tensor", out)
out, ok = run(with_tokenizer(root .. "/rms-eps-negative"))
t.ok(not ok and out:find("'rms_norm_eps'", 1, true), "so-fig3 on a model with rms_norm_eps < 0 exits non-zero naming the key", out)
local good = with_tokenizer(root .. "/llama")
out, ok = run(good, root)
t.ok(not ok and out:find("--text=" .. root .. " is a directory", 1, true) and not out:find("traceback", 1, true) and select(2, out:gsub("\n", "")) <= 1,
     "--text=<a directory>: one clean line", out)
out, ok = run(good, root .. "/none.txt")
t.ok(not ok and out:find(root .. "/none.txt", 1, true) and not out:find("traceback", 1, true), "--text=<a missing file>: named", out)
-- hostile tokenizers: the message names tokenizer.json and the token, key or id
local function copy(x) local o = {} for k, v in pairs(x) do o[k] = v end return o end
local function tok_case(name, tj, want, label)
  local d = root .. "/" .. name
  os.execute("rm -rf " .. d .. " && cp -r " .. good .. " " .. d)
  write(d .. "/tokenizer.json", tj)
  local o, k = run(d)
  local clean = not o:find("traceback", 1, true) and not o:find("%.lua:%d+:")
  local fine = not k and clean
  for _, w in ipairs(want) do if not o:find(w, 1, true) then fine = false end end
  t.ok(fine, label, o)
end
local norm = { type = "Sequence", normalizers = { { type = "Prepend", prepend = "▁" }, { type = "Replace", pattern = { String = " " }, content = "▁" } } }
local big = copy(vocab) big["▁A"] = 400 big["▁"] = 401
tok_case("tok-bigid", json.encode({ model = { type = "BPE", byte_fallback = true, vocab = big, merges = { "▁ A" } }, normalizer = norm }),
  { "tokenizer.json", "id 400", "'vocab_size' = 256" }, "a tokenizer id beyond the model's vocab_size: names tokenizer.json, the id and config.json's key")
local nofb = copy(vocab) nofb["<0x41>"] = nil
tok_case("tok-nofallback", json.encode({ model = { type = "BPE", byte_fallback = true, vocab = nofb, merges = {} }, normalizer = norm }),
  { "tokenizer.json", "<0x41>" }, "byte fallback without the byte's token: names tokenizer.json and the token")
tok_case("tok-vocab-array", json.encode({ model = { type = "BPE", byte_fallback = true, vocab = { 1, 2, 3 }, merges = {} }, normalizer = norm }),
  { "tokenizer.json", "'model.vocab'" }, "a vocabulary that is not an object: names tokenizer.json and model.vocab")
tok_case("tok-merges-object", json.encode({ model = { type = "BPE", byte_fallback = true, vocab = vocab, merges = { a = 1 } }, normalizer = norm }),
  { "tokenizer.json", "'model.merges'" }, "merges that are not a list: names tokenizer.json and model.merges")

out, ok = run(good)
t.ok(ok, "the unchanged model runs", out)

os.execute("rm -rf " .. root)
return t.done()
