-- test_hf_families — model families imported through the LLaMA mapping, each checked against an
-- independent reference forward in plain Lua from the published architecture (transformers'
-- modeling_mistral.py / modeling_llama.py / modeling_phi3.py: tests/lua/lib/hf_reference.lua,
-- shared with test_hf_qwen_gemma.lua), reading the safetensors files itself (header JSON,
-- F32/BF16 bytes) and computing in double precision, not with the engine's ops:
--   mistral  MistralForCausalLM: LLaMA's block (RMSNorm, RoPE rotate-half, GQA, SwiGLU) with a
--            sliding window; config.json sliding_window bounds the sequence length (the
--            window is the identity for T <= sliding_window, so nothing else is needed).
--   llama3   LLaMA-3-8B's config shape: rope_theta 5e5, GQA, untied head, rope_scaling null.
--   llama31  LLaMA-3.1's rope_scaling {"rope_type": "llama3", factor, low_freq_factor,
--            high_freq_factor, original_max_position_embeddings} (modeling_rope_utils.py
--            _compute_llama3_parameters), with values that put the 8 frequencies of a 16-dim head
--            in all three bands (one kept, two smoothly interpolated, five divided by factor);
--            controls: the reference without the scaling, and with another high_freq_factor
--            (a different band split), must differ; the bands of the real Llama-3.1-8B config
--            against hand-computed wavelengths; bad values refused naming the key; so-fig1.
--   phi3     Phi3ForCausalLM (modeling_phi3.py, Phi-3-mini-4k): LLaMA's block with q, k, v fused
--            in qkv_proj (rows q | k | v) and gate, up in gate_up_proj (rows gate | up, chunked
--            in two: up · silu(gate)); sliding_window as Mistral's. The test writes these files
--            itself (fusing the tensors of an exported LLaMA), and the reference slices the
--            fused projections' outputs, as modeling_phi3.py does.
-- Each: one file and shards, F32 and BF16; logits and every layer's output h equal the
-- reference to fp32 rounding; so-fig1 and so-fig3 run end to end on the Mistral directory.
local t = require "tap"
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
  -- head dim 16, θ 1e4: wavelengths 2π·10^(i/2) = 6.3, 19.9, 62.8, 199, …; high_freq_wavelen
  -- 256/16 = 16 and low_freq_wavelen 256/2 = 128: i = 0 kept, i = 1, 2 smoothed, i ≥ 3 divided by 8
  { "llama31", "llama-quick", { n_head = 4, n_kv_head = 2, tie_embeddings = false, rope_base = 10000 },
    function(c) c.architectures = { "LlamaForCausalLM" }
      c.rope_scaling = { rope_type = "llama3", factor = 8.0, low_freq_factor = 2.0, high_freq_factor = 16.0, original_max_position_embeddings = 256 } end },
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
    local _, abs = max_rel(got, flat(ref))
    t.ok(e < 2e-5 and eh < 2e-5, string.format("%s: logits and every layer's h equal the plain-Lua reference (max rel. error %.1e, %.1e; max abs %.1e)", name, e, eh, abs))
  end
end

-- LLaMA-3.1: the check can fail (the reference without the scaling, or with another band
-- split, differs), the bands of the real Llama-3.1-8B config (θ 5e5, head 128, factor 8,
-- low 1, high 4, original 8192) against wavelengths computed by hand: 2π·500000^(2i/128) is
-- 1956 (< 8192/4 = 2048: kept) at i = 28, 2402 at i = 29 (smoothed: s = (8192/2402 − 1)/3 =
-- 0.8036, factor (1 − s)/8 + s = 0.8282), 6695 at i = 34 (smoothed: 0.1902) and 8219 (> 8192:
-- divided by 8) at i = 35
do
  local d31 = root .. "/llama31-f32"
  local c = json.decode(read(d31 .. "/config.json"))
  local got = engine(d31, ids)
  local W = load_dir(d31)
  for _, ctl in ipairs { { function(cc) cc.rope_scaling = json.null end, "without rope_scaling" },
                         { function(cc) cc.rope_scaling.high_freq_factor = 8.0 end, "with high_freq_factor 8 (frequency 1 kept, not smoothed)" },
                         { function(cc) cc.rope_scaling.factor = 4.0 end, "with factor 4" } } do
    local cc = json.decode(read(d31 .. "/config.json"))
    ctl[1](cc)
    local e = max_rel(got, flat((reference(W, cc, ids))))
    t.ok(e > 1e-3, string.format("llama31: the reference %s differs (rel. error %.1e): the check can fail", ctl[2], e))
  end
  local _, m = hf.load(d31)
  t.ok(m.cfg.rope_factor == 8 and m.cfg.rope_low_freq_factor == 2 and m.cfg.rope_high_freq_factor == 16 and m.cfg.rope_original_max_pos == 256,
    "llama31: rope_scaling imported as the model's rope_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_max_pos")
  local inv = models.families.llama.llama3_inv_freq(500000, 128, 8, 1, 4, 8192)
  local function base(i) return 1 / 500000 ^ (2 * i / 128) end
  local kept, divided = true, true
  for i = 0, 28 do kept = kept and inv[i + 1] == base(i) end
  for i = 35, 63 do divided = divided and math.abs(inv[i + 1] / (base(i) / 8) - 1) < 1e-15 end
  t.ok(kept and divided and math.abs(inv[30] / base(29) - 0.8282) < 1e-4 and math.abs(inv[35] / base(34) - 0.1902) < 1e-4,
    "llama31: Llama-3.1-8B's frequencies: i ≤ 28 kept, i = 29 × 0.8282, i = 34 × 0.1902 (smoothed), i ≥ 35 divided by 8",
    string.format("%.6f %.6f", inv[30] / base(29), inv[35] / base(34)))
  -- bad values: refused naming config.json and the key
  local function bad(edit, want, what)
    local dd = root .. "/llama31-bad"
    os.execute("rm -rf " .. dd .. " && cp -r " .. d31 .. " " .. dd)
    local cc = json.decode(read(dd .. "/config.json"))
    edit(cc)
    write(dd .. "/config.json", json.encode(cc))
    local ok, err = pcall(hf.open, dd)
    t.ok(not ok and tostring(err):find(want, 1, true) and tostring(err):find("config.json", 1, true), "llama31: " .. what .. " refused naming " .. want, tostring(err))
  end
  bad(function(cc) cc.rope_scaling.factor = nil end, "'rope_scaling.factor'", "a missing factor")
  bad(function(cc) cc.rope_scaling.factor = -8 end, "'rope_scaling.factor'", "a negative factor")
  bad(function(cc) cc.rope_scaling.high_freq_factor = 2.0 end, "'rope_scaling.high_freq_factor'", "high_freq_factor = low_freq_factor")
  bad(function(cc) cc.rope_scaling.original_max_position_embeddings = 0 end, "'rope_scaling.original_max_position_embeddings'", "original_max_position_embeddings 0")
  bad(function(cc) cc.rope_scaling = { rope_type = "yarn", factor = 4.0 } end, "'rope_scaling'", "rope_type yarn")
  bad(function(cc) cc.rope_scaling = "llama3" end, "'rope_scaling' must be an object", "a rope_scaling that is not an object")
  bad(function(cc) cc.model_type = "mistral" end, "'rope_scaling'", "llama3 scaling on another family (mistral)")
  local cc = json.decode(read(d31 .. "/config.json"))
  cc.rope_scaling = { type = "llama3", factor = 8.0, low_freq_factor = 2.0, high_freq_factor = 16.0, original_max_position_embeddings = 256 }
  os.execute("rm -rf " .. root .. "/llama31-bc && cp -r " .. d31 .. " " .. root .. "/llama31-bc")
  write(root .. "/llama31-bc/config.json", json.encode(cc))
  local ok, dh = pcall(hf.open, root .. "/llama31-bc")
  t.ok(ok and dh.cfg.rope_factor == 8, "llama31: the old key 'type' for 'rope_type' is read as modeling_rope_utils.py does", not ok and tostring(dh) or nil)
end

-- the sliding window bounds the sequence length
local d = root .. "/mistral-f32"
local ctx, m = hf.load(d)
t.is(m.cfg.block_size, 16, "mistral: sliding_window 16 bounds the model's positions")
t.throws(function()
  ctx:no_grad(function()
    local b = ctx:tensor({ 1, 20 }, { dtype = "i32", name = "ids" }):fill_(1)
    m:forward({ ids = b })
  end)
end, "20", "mistral: a sequence longer than sliding_window is refused, not computed without the window")

-- so-fig1 and so-fig3 end to end on the Mistral directory
local vocab = { ["<unk>"] = 0, ["<s>"] = 1, ["</s>"] = 2 }
for b = 0, 252 do vocab[string.format("<0x%02X>", b)] = 3 + b end
write(d .. "/tokenizer.json", json.encode({ model = { type = "BPE", byte_fallback = true, vocab = vocab, merges = {} },
  pre_tokenizer = { type = "Metaspace", replacement = "▁", prepend_scheme = "first", split = false } }))
write(d .. "/tokenizer_config.json", json.encode({ bos_token = "<s>", eos_token = "</s>" }))
R.text(root)
for _, id in ipairs { "so-fig1", "so-fig3" } do
  local out, ok = t.sh(string.format("bin/outlierlab run experiments/%s.lua --profile=quick --model=%s --text=%s --seq_len=16 --out=%s/results --cache=%s/cache",
    id, d, root .. "/text.txt", root, root))
  t.ok(ok and out:find("mistral-f32", 1, true), id .. " runs end to end on the Mistral directory", out)
end
-- so-fig1 on the LLaMA-3.1 directory (scaled RoPE), BF16 shards
os.execute("cp " .. d .. "/tokenizer*.json " .. root .. "/llama31-bf16-shards/")
R.check_so_fig1(t, root .. "/llama31-bf16-shards", root .. "/text.txt", root, "LLaMA-3.1")
-- Phi-3 streamed layer by layer (fused tensors converted per layer) = in memory
local dp = root .. "/phi3-bf16-shards"
os.execute("cp " .. d .. "/tokenizer*.json " .. dp .. "/")
R.check_stream(t, dp, root .. "/text.txt", root, "phi3")
local out, ok = t.sh(string.format("bin/outlierlab run experiments/so-fig3.lua --profile=quick --model=%s --text=%s --seq_len=32 --out=%s/results --cache=%s/cache",
  d, root .. "/text.txt", root, root))
t.ok(not ok and out:find("sliding_window", 1, true), "so-fig3 with seq_len beyond Mistral's sliding_window: refused naming it", out)

os.execute("rm -rf " .. root)
return t.done()
