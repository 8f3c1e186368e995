-- test_hf_families — model families imported through the LLaMA mapping, each checked against an
-- independent reference forward in plain Lua from the published architecture (transformers'
-- modeling_mistral.py / modeling_llama.py / modeling_phi3.py: tests/lua/lib/hf_reference.lua,
-- shared with test_hf_qwen_gemma.lua), reading the safetensors files itself (header JSON,
-- F32/BF16 bytes) and computing in double precision, not with the engine's ops:
--   mistral  MistralForCausalLM: LLaMA's block (RMSNorm, RoPE rotate-half, GQA, SwiGLU) with a
--            sliding window; config.json sliding_window bounds the sequence length (the
--            window is the identity for T <= sliding_window, so nothing else is needed).
--   llama3   LLaMA-3-8B's config shape: rope_theta 5e5, GQA, untied head, rope_scaling null.
--   phi3     Phi3ForCausalLM (modeling_phi3.py, Phi-3-mini-4k): LLaMA's block with q, k, v fused
--            in qkv_proj (rows q | k | v) and gate, up in gate_up_proj (rows gate | up, chunked
--            in two: up · silu(gate)); sliding_window as Mistral's. The test writes these files
--            itself (fusing the tensors of an exported LLaMA), and the reference slices the
--            fused projections' outputs, as modeling_phi3.py does.
-- Each: one file and shards, F32 and BF16; logits and every layer's output h equal the
-- reference to fp32 rounding; so-fig1 and so-fig3 run end to end on the Mistral directory.
local t = require "outlierlab.tap"
local ol = require "outlierlab"
local ffi = require "ffi"
local hf = require "outlierlab.pretrained.hf"
local json = require "outlierlab.util.json"
local models = require "outlierlab.models"

local R = dofile(ol.root .. "/tests/lua/lib/hf_reference.lua")   -- files, reference forward (plain Lua)

local root = os.tmpname()
os.remove(root)
os.execute("mkdir -p " .. root)
local write, read = R.write, R.read
local load_dir, reference, engine, flat, max_rel = R.load_dir, R.forward, R.engine, R.flat, R.max_rel

-- a model with random weights (norm gains too), written as a LLaMA directory, then config.json
-- turned into the family's
local function make(name, preset, over, edit, opts)
  local ctx = ol.Context{ params = 4 * 1024 * 1024, seed = 5 }
  local m = models.build(ctx, models.preset(preset, over))
  local k = 0
  for _, p in ipairs(ctx:params()) do
    local nm = ffi.string(p.name)
    for i = 0, tonumber(p.numel) - 1 do
      k = k + 1
      local r = math.sin(k * 12.9898 + #nm) * 43758.5453
      r = (r - math.floor(r)) * 2 - 1
      p.data[i] = (nm:find("norm") or nm:find("ln")) and (1 + 0.5 * r) or 0.08 * r
    end
  end
  local dir = root .. "/" .. name
  hf.export(dir, ctx, m, opts)
  local c = json.decode(read(dir .. "/config.json"))
  edit(c)
  write(dir .. "/config.json", json.encode(c))
  return dir, c
end

-- Phi-3's layout written from a LLaMA directory: qkv_proj = rows q | k | v, gate_up_proj =
-- rows gate | up; dtype "F32" or "BF16"; shards = 2 puts the layers in a second file
local function write_phi3(dir, dtype, shards)
  local W = load_dir(dir)
  local out = {}
  local function put(name, shape, v) out[#out + 1] = { name = name, shape = shape, v = v } end
  for name, w in pairs(W) do
    if not name:find("self_attn%.[qkv]_proj") and not name:find("mlp%.gate_proj") and not name:find("mlp%.up_proj") then put(name, w.shape, w.v) end
  end
  local l = 0
  while W["model.layers." .. l .. ".self_attn.q_proj.weight"] do
    local p = "model.layers." .. l .. "."
    local q, k, v = W[p .. "self_attn.q_proj.weight"], W[p .. "self_attn.k_proj.weight"], W[p .. "self_attn.v_proj.weight"]
    local cat = {}
    for _, x in ipairs { q, k, v } do for _, y in ipairs(x.v) do cat[#cat + 1] = y end end
    put(p .. "self_attn.qkv_proj.weight", { q.shape[1] + k.shape[1] + v.shape[1], q.shape[2] }, cat)
    local g, u = W[p .. "mlp.gate_proj.weight"], W[p .. "mlp.up_proj.weight"]
    cat = {}
    for _, x in ipairs { g, u } do for _, y in ipairs(x.v) do cat[#cat + 1] = y end end
    put(p .. "mlp.gate_up_proj.weight", { 2 * g.shape[1], g.shape[2] }, cat)
    l = l + 1
  end
  R.write_dir(dir, out, nil, { dtype = dtype, shards = shards })
end

local ids = {}
for i = 1, 14 do ids[i] = (i * 37 + 11) % 256 end
local variants = {
  { "mistral", "llama-quick", { n_head = 4, n_kv_head = 2, tie_embeddings = false, rope_base = 10000 },
    function(c) c.model_type = "mistral" c.architectures = { "MistralForCausalLM" } c.sliding_window = 16 end },
  { "llama3", "llama-quick", { n_head = 4, n_kv_head = 1, tie_embeddings = false, rope_base = 500000 },
    function(c) c.rope_scaling = json.null c.architectures = { "LlamaForCausalLM" } end },
  { "phi3", "llama-quick", { n_head = 4, n_kv_head = 2, tie_embeddings = false, rope_base = 10000 },
    function(c) c.model_type = "phi3" c.architectures = { "Phi3ForCausalLM" } c.sliding_window = 2047 c.rope_scaling = json.null end,
    write_phi3 },
}
for _, vt in ipairs(variants) do
  for _, o in ipairs { { tag = "f32", opts = {} }, { tag = "bf16-shards", opts = { dtype = "BF16", shard_bytes = 60000 } } } do
    local name = vt[1] .. "-" .. o.tag
    local dir, c = make(name, vt[2], vt[3], vt[4], vt[5] and {} or o.opts)
    if vt[5] then vt[5](dir, o.opts.dtype or "F32", o.opts.shard_bytes and 2 or 1) end
    local W = load_dir(dir)
    local ref, rhs = reference(W, c, ids)
    local got, hs = engine(dir, ids)
    local e = max_rel(got, flat(ref))
    local eh = 0
    for l = 0, c.num_hidden_layers - 1 do eh = math.max(eh, max_rel(hs[l] or {}, flat(rhs[l]))) end
    t.ok(e < 2e-5 and eh < 2e-5, string.format("%s: logits and every layer's h equal the plain-Lua reference (max rel. error %.1e, %.1e)", name, e, eh))
  end
end

-- the sliding window bounds the sequence length; rope_scaling "llama3" is refused by name
local d = root .. "/mistral-f32"
local ctx, m = hf.load(d)
t.is(m.cfg.block_size, 16, "mistral: sliding_window 16 bounds the model's positions")
t.throws(function()
  ctx:no_grad(function()
    local b = ctx:tensor({ 1, 20 }, { dtype = "i32", name = "ids" }):fill_(1)
    m:forward({ ids = b })
  end)
end, "20", "mistral: a sequence longer than sliding_window is refused, not computed without the window")
local d3 = root .. "/llama3-f32"
local c3 = json.decode(read(d3 .. "/config.json"))
c3.rope_scaling = { rope_type = "llama3", factor = 8, low_freq_factor = 1, high_freq_factor = 4, original_max_position_embeddings = 8192 }
write(d3 .. "/config.json", json.encode(c3))
t.throws(function() hf.open(d3) end, "config.json 'rope_scaling'", "llama3 rope_scaling (LLaMA-3.1) is refused naming the key")

-- so-fig1 and so-fig3 end to end on the Mistral directory
local vocab = { ["<unk>"] = 0, ["<s>"] = 1, ["</s>"] = 2 }
for b = 0, 252 do vocab[string.format("<0x%02X>", b)] = 3 + b end
write(d .. "/tokenizer.json", json.encode({ model = { type = "BPE", byte_fallback = true, vocab = vocab, merges = {} },
  pre_tokenizer = { type = "Metaspace", replacement = "▁", prepend_scheme = "first", split = false } }))
write(d .. "/tokenizer_config.json", json.encode({ bos_token = "<s>", eos_token = "</s>" }))
local lines = {}
for i = 1, 300 do lines[i] = "And it came to pass, in the " .. i .. "th year, that they went." end
write(root .. "/text.txt", table.concat(lines, "\n"))
for _, id in ipairs { "so-fig1", "so-fig3" } do
  local out, ok = t.sh(string.format("bin/outlierlab run experiments/%s.lua --profile=quick --model=%s --text=%s --seq_len=16 --out=%s/results --cache=%s/cache",
    id, d, root .. "/text.txt", root, root))
  t.ok(ok and out:find("mistral-f32", 1, true), id .. " runs end to end on the Mistral directory", out)
end
-- Phi-3 streamed layer by layer (fused tensors converted per layer) = in memory
local dp = root .. "/phi3-bf16-shards"
os.execute("cp " .. d .. "/tokenizer*.json " .. dp .. "/")
local rep = {}
for _, st in ipairs { "no", "yes" } do
  local out, ok = t.sh(string.format("bin/outlierlab run experiments/so-fig3.lua --profile=quick --model=%s --text=%s --seq_len=16 --stream=%s --out=%s/results-%s --cache=%s/cache-%s",
    dp, root .. "/text.txt", st, root, st, root, st))
  rep[st] = ok and out:match("reproduced: ([^\n]*)") or out
end
t.ok(rep.no == rep.yes and rep.no:find("phi3", 1, true), "phi3: so-fig3 streamed from the sharded BF16 files = in memory", rep.no .. "\n" .. rep.yes)
local out, ok = t.sh(string.format("bin/outlierlab run experiments/so-fig3.lua --profile=quick --model=%s --text=%s --seq_len=32 --out=%s/results --cache=%s/cache",
  d, root .. "/text.txt", root, root))
t.ok(not ok and out:find("sliding_window", 1, true), "so-fig3 with seq_len beyond Mistral's sliding_window: refused naming it", out)

os.execute("rm -rf " .. root)
return t.done()
