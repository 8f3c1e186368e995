-- test_hf_errors — hostile or inconsistent Hugging Face model directories get clear errors
-- that name the directory and the first tensor, shard, file or config key at fault; PyTorch
-- pickles are refused with the conversion command; and an analysis experiment runs end to end
-- on a generated model directory (--model=DIR --text=FILE) and rejects what it cannot analyse.
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

local ctx = ol.Context{ params = 2 * 1024 * 1024, seed = 3 }
local m = models.build(ctx, models.preset("llama-quick", { n_kv_head = 1 }))
local base = root .. "/good"
hf.export(base, ctx, m, { shard_bytes = 400000, special = { bos = 1, eos = 2 } })
-- the shards and a tensor that shares its shard with others (from the written index)
local index = json.decode(read(base .. "/model.safetensors.index.json")).weight_map
local shards, count = {}, {}
for _, f in pairs(index) do if not count[f] then shards[#shards + 1] = f end count[f] = (count[f] or 0) + 1 end
table.sort(shards)
local shared, other
for name, f in pairs(index) do if count[f] > 1 and (not shared or name < shared) then shared = name end end
for _, f in ipairs(shards) do if f ~= index[shared] then other = f break end end
local function variant(name, fn)
  local d = root .. "/" .. name
  os.execute("rm -rf " .. d .. " && cp -r " .. base .. " " .. d)
  fn(d)
  return d
end
local function config_edit(d, fn)
  local c = json.decode(read(d .. "/config.json"))
  fn(c)
  write(d .. "/config.json", json.encode(c))
end
local function index_edit(d, fn)
  local c = json.decode(read(d .. "/model.safetensors.index.json"))
  fn(c)
  write(d .. "/model.safetensors.index.json", json.encode(c))
end

t.lives(function() hf.load(base) end, "the exported directory loads")

local cases = {
  { "layers", function(d) config_edit(d, function(c) c.num_hidden_layers = 3 end) end, "missing tensor 'model.layers.2.self_attn.q_proj.weight'" },
  { "fewer", function(d) config_edit(d, function(c) c.num_hidden_layers = 1 end) end, "unexpected tensor 'model.layers.1." },
  { "width", function(d) config_edit(d, function(c) c.intermediate_size = 100 end) end, "has shape (176,64), but config.json (intermediate_size, hidden_size) implies (100,64)" },
  { "kv", function(d) config_edit(d, function(c) c.num_key_value_heads = 2 end) end, "num_key_value_heads × head_dim, hidden_size" },
  { "scaling", function(d) config_edit(d, function(c) c.rope_scaling = { type = "linear", factor = 2 } end) end, "'rope_scaling'" },
  { "act", function(d) config_edit(d, function(c) c.hidden_act = "gelu" end) end, "'hidden_act' = \"gelu\" is not supported for llama" },
  -- a LLaMA directory declared a Phi: read as Phi's config.json (SiLU is not a Phi MLP activation)
  { "phi", function(d) config_edit(d, function(c) c.model_type = "phi" end) end, "'hidden_act' = \"silu\" is not supported for phi" },
  { "phi-names", function(d) config_edit(d, function(c) c.model_type = "phi" c.hidden_act = "gelu_new" end) end, "missing tensor 'model.final_layernorm.weight'" },
  -- a LLaMA directory declared a Falcon: Falcon's names are looked for (modeling_falcon.py)
  { "falcon", function(d) config_edit(d, function(c) c.model_type = "falcon" end) end, "missing tensor 'transformer.word_embeddings.weight'" },
  -- a LLaMA directory declared an MPT: read as MptConfig (d_model, n_heads, n_layers)
  { "mpt", function(d) config_edit(d, function(c) c.model_type = "mpt" end) end, "config.json has no 'd_model'" },
  { "family", function(d) config_edit(d, function(c) c.model_type = "mamba" end) end, "model_type 'mamba' is not supported (supported: bert, falcon, gemma, gemma2, gpt2, llama, mistral, mpt, opt, phi, phi3, qwen2, qwen3, vit)" },
  { "noconfig", function(d) os.remove(d .. "/config.json") end, "no config.json" },
  { "shard", function(d) os.remove(d .. "/" .. shards[2]) end, "shard " .. shards[2] .. " named by model.safetensors.index.json is missing" },
  { "outside", function(d) index_edit(d, function(c) c.weight_map["model.norm.weight"] = "../good/model-00001-of-00003.safetensors" end) end, "outside the model directory" },
  { "absolute", function(d) index_edit(d, function(c) c.weight_map["model.norm.weight"] = "/etc/passwd" end) end, "outside the model directory" },
  { "wrongshard", function(d) index_edit(d, function(c) c.weight_map[shared] = other end) end, "but model.safetensors.index.json says " .. other },
  { "unlisted", function(d) index_edit(d, function(c) c.weight_map[shared] = nil end) end, "'" .. shared .. "' of shard " .. index[shared] .. " is not in model.safetensors.index.json" },
  { "pickle", function(d) os.execute("rm -f " .. d .. "/*.safetensors*") write(d .. "/pytorch_model.bin", "PK\3\4 not read") end, "pytorch_model.bin is a PyTorch pickle" },
  { "empty", function(d) os.execute("rm -f " .. d .. "/*.safetensors*") end, "no model.safetensors or model.safetensors.index.json" },
  { "truncated", function(d) local p = d .. "/" .. shards[#shards] local s = read(p) write(p, s:sub(1, #s - 10)) end, shards[#shards] .. ": tensor" },
}
for _, c in ipairs(cases) do
  local d = variant(c[1], c[2])
  t.throws(function() hf.load(d) end, c[3], c[1] .. ": " .. c[3])
end
do
  local ok, err = pcall(hf.load, root .. "/pickle")
  t.ok(not ok and tostring(err):find("save_pretrained('" .. root .. "/pickle', safe_serialization=True)", 1, true),
       "pickle: the message gives the conversion command")
end
t.throws(function() hf.load(root .. "/nope") end, "no such directory", "a missing directory")
t.throws(function() hf.export(root .. "/x", ctx, { cfg = models.preset("gpt2-quick", { attention = "softmax1" }) }) end,
         "attention 'softmax1' has no Hugging Face equivalent", "export refuses a model without a Hugging Face equivalent")

-- an analysis experiment on a generated model directory and a text file (quick profile)
local dir = root .. "/llama-run"
hf.export(dir, ctx, m, { dtype = "BF16", special = { bos = 1, eos = 2 } })
local vocab = { ["<unk>"] = 0, ["<s>"] = 1, ["</s>"] = 2 }
for b = 0, 252 do vocab[string.format("<0x%02X>", b)] = 3 + b end
write(dir .. "/tokenizer.json", json.encode({ model = { type = "BPE", byte_fallback = true, vocab = vocab, merges = {} },
  normalizer = { type = "Sequence", normalizers = { { type = "Prepend", prepend = "▁" }, { type = "Replace", pattern = { String = " " }, content = "▁" } } } }))
write(dir .. "/tokenizer_config.json", json.encode({ bos_token = "<s>" }))
local lines = {}
for i = 1, 300 do lines[i] = "And it came to pass, in the " .. i .. "th year, that they went." end
write(root .. "/text.txt", table.concat(lines, "\n"))
local out_dir = root .. "/results"
local cmd = string.format("bin/outlierlab run experiments/so-fig3.lua --profile=quick --model=%s --text=%s --out=%s --cache=%s/cache",
  dir, root .. "/text.txt", out_dir, root)
local out, ok = t.sh(cmd)
local summary = t.slurp(out_dir .. "/so-fig3/llama-run-quick/summary.md") or ""
t.ok(ok and summary:find("model llama-run (llama", 1, true) and summary:find("text " .. root .. "/text.txt", 1, true),
     "so-fig3 --model --text: no training, results in so-fig3/llama-run-quick/, the summary names the model and the text", out)
t.ok(not out:find("stage train\n[so-fig3] model", 1, true) and out:find("stage analyze", 1, true), "so-fig3 --model: the analysis ran")
out, ok = t.sh(cmd:gsub("so%-fig3", "qt-table1"))
t.ok(not ok and out:find("does not analyse a pretrained one", 1, true), "an experiment that trains its own models refuses --model")
out, ok = t.sh(cmd .. " --seq_len=4096")
t.ok(not ok and out:find("seq_len 4096 exceeds the model's 32 positions", 1, true), "a sequence longer than the model's positions is refused")
out, ok = t.sh((cmd:gsub("%-%-model=%S+ ", "")))
t.ok(not ok and out:find("--text=FILE needs --model=DIR", 1, true), "--text without --model is refused")

-- the papers' models are recognised by family and shape (the summary's paper statement)
local pre = require "outlierlab.pretrained"
t.is(pre.paper_model(models.preset("gpt2-124m", { vocab_size = 50257, bias = true })), "GPT-2 (124M)", "GPT-2 124M is the paper's GPT-2")
t.is(pre.paper_model(models.preset("tinyllama-120m", { n_layer = 32, d_model = 4096, n_head = 32, n_kv_head = 32, d_ff = 11008 })),
     "LLaMA-2-7B", "a 32-layer d4096 MHA LLaMA is the paper's LLaMA-2-7B")
t.is(pre.paper_model(models.preset("llama-quick")), nil, "a small LLaMA is none of the paper's models")
t.is(pre.paper_model(models.preset("tinyllama-120m", { n_layer = 32, d_model = 4096, n_head = 32, n_kv_head = 32, d_ff = 11008, qkv_bias = true })),
     nil, "LLaMA-2-7B's shape with q/k/v biases (Qwen1.5-7B, model_type qwen2) is not the paper's LLaMA-2-7B")

os.execute("rm -rf " .. root)
return t.done()
