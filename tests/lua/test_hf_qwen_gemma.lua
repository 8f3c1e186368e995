-- test_hf_qwen_gemma — Qwen2/2.5, Qwen3, Gemma and Gemma 2 imported from Hugging Face
-- directories. For each family the test writes a directory in the family's own layout (the
-- tensor names and shapes spelled out here from modeling_<family>.py, random weights, norm
-- gains too), in F32 as one file and in BF16 as two shards, and checks that the logits and
-- every layer's output h of the import equal the plain-Lua float64 reference forward of
-- tests/lua/lib/hf_reference.lua (written from the published architecture, not with the
-- engine's ops) to fp32 rounding. Each family also has a control: the reference with the
-- family's own feature turned off (no q/k/v bias, no q/k norm, w instead of 1 + w, no
-- soft-capping, no window) must NOT match, so the check can fail. Then so-fig1 end to end on
-- the Gemma 2 directory, so-fig3 streamed = in memory on the Qwen3 BF16 shards, the token
-- categories of a Qwen2-style byte-level tokenizer (no BOS: <|endoftext|> starts the
-- sequences) and of Gemma's, and bad config values refused naming file and key.
local t = require "tap"
local ol = require "outlierlab"
local json = require "outlierlab.util.json"
local hf = require "outlierlab.pretrained.hf"
local tokenizers = require "outlierlab.pretrained.tokenizers"
local R = dofile(ol.root .. "/tests/lua/lib/hf_reference.lua")

local root = R.tmpdir()
local write, read = R.write, R.read

local V, C, F, L, NH, NKV = 300, 64, 96, 2, 4, 2

-- the tensors of a LLaMA-named decoder (modeling_qwen2.py / qwen3 / gemma / gemma2 state dicts)
-- hd: head_dim; NKV: key-value heads; o: { qkv_bias, qk_norm, gemma (norm weights stored as w of (1 + w)), gemma2
-- (four norms per layer), untied }
local function tensors(hd, o, NKV)
  local out, seed = {}, 0
  local function add(name, shape, scale, gain)
    seed = seed + 1
    out[#out + 1] = R.tensor(name, shape, seed, scale, gain)
  end
  local gain = not o.gemma   -- Gemma's files hold w with the gain 1 + w: w near 0
  local function norm(name, n) add(name, { n }, 0.5, gain) end
  add("model.embed_tokens.weight", { V, C }, 0.5)
  for l = 0, L - 1 do
    local p = "model.layers." .. l .. "."
    add(p .. "self_attn.q_proj.weight", { NH * hd, C }, 0.15)
    add(p .. "self_attn.k_proj.weight", { NKV * hd, C }, 0.15)
    add(p .. "self_attn.v_proj.weight", { NKV * hd, C }, 0.15)
    add(p .. "self_attn.o_proj.weight", { C, NH * hd }, 0.15)
    if o.qkv_bias then
      add(p .. "self_attn.q_proj.bias", { NH * hd }, 0.5)
      add(p .. "self_attn.k_proj.bias", { NKV * hd }, 0.5)
      add(p .. "self_attn.v_proj.bias", { NKV * hd }, 0.5)
    end
    if o.qk_norm then norm(p .. "self_attn.q_norm.weight", hd) norm(p .. "self_attn.k_norm.weight", hd) end
    add(p .. "mlp.gate_proj.weight", { F, C }, 0.15)
    add(p .. "mlp.up_proj.weight", { F, C }, 0.15)
    add(p .. "mlp.down_proj.weight", { C, F }, 0.15)
    norm(p .. "input_layernorm.weight", C)
    norm(p .. "post_attention_layernorm.weight", C)
    if o.gemma2 then norm(p .. "pre_feedforward_layernorm.weight", C) norm(p .. "post_feedforward_layernorm.weight", C) end
  end
  norm("model.norm.weight", C)
  if o.untied then add("lm_head.weight", { V, C }, 0.15) end
  return out
end

local function base_config(mt, arch)
  return { model_type = mt, architectures = { arch }, vocab_size = V, hidden_size = C, intermediate_size = F,
           num_hidden_layers = L, num_attention_heads = NH, num_key_value_heads = NKV, max_position_embeddings = 64,
           rope_theta = 10000.0, torch_dtype = "float32", bos_token_id = 2, eos_token_id = 1 }
end

local families = {
  { name = "qwen2", hd = C / NH, o = { qkv_bias = true },
    config = function() local c = base_config("qwen2", "Qwen2ForCausalLM") c.hidden_act = "silu" c.rms_norm_eps = 1e-6
      c.tie_word_embeddings = true c.use_sliding_window = false c.sliding_window = 32768 c.max_window_layers = 21 c.rope_scaling = json.null return c end,
    control = function(W) for n in pairs(W) do if n:find("_proj%.bias$") then W[n] = nil end end end,
    control_what = "without the q/k/v biases" },
  { name = "qwen2-untied", hd = C / NH, o = { qkv_bias = true, untied = true },
    config = function() local c = base_config("qwen2", "Qwen2ForCausalLM") c.hidden_act = "silu" c.rms_norm_eps = 1e-6
      c.tie_word_embeddings = false return c end },
  { name = "qwen3", hd = 24, o = { qk_norm = true, untied = true },
    -- Qwen's config.json: bos_token_id = eos_token_id = <|endoftext|> (151643; 256 here)
    config = function() local c = base_config("qwen3", "Qwen3ForCausalLM") c.hidden_act = "silu" c.rms_norm_eps = 1e-6
      c.bos_token_id, c.eos_token_id = 256, 256
      c.head_dim = 24 c.attention_bias = false c.tie_word_embeddings = false c.rope_theta = 1000000.0 return c end,
    control = function(W) for n in pairs(W) do if n:find("_norm%.weight$") and n:find("self_attn") then W[n] = nil end end end,
    control_what = "without q_norm and k_norm" },
  { name = "gemma", hd = 32, o = { gemma = true },
    config = function() local c = base_config("gemma", "GemmaForCausalLM") c.hidden_act = "gelu" c.hidden_activation = "gelu_pytorch_tanh"
      c.rms_norm_eps = 1e-6 c.head_dim = 32 c.num_key_value_heads = 1 return c end,
    control = function(W) for n, w in pairs(W) do if n:find("norm%.weight$") then for i = 1, #w.v do w.v[i] = w.v[i] - 1 end end end end,
    control_what = "with w instead of 1 + w as the norm gain" },
  { name = "gemma2", hd = 32, o = { gemma = true, gemma2 = true },
    config = function() local c = base_config("gemma2", "Gemma2ForCausalLM") c.hidden_act = "gelu_pytorch_tanh" c.hidden_activation = "gelu_pytorch_tanh"
      c.rms_norm_eps = 1e-6 c.head_dim = 32 c.query_pre_attn_scalar = 48 c.attn_logit_softcapping = 0.4 c.final_logit_softcapping = 2.0
      c.sliding_window = 5 c.cache_implementation = "hybrid" return c end,
    control = function(W, c) c.attn_logit_softcapping = nil end, control_what = "without attention soft-capping" },
}
-- three more controls of Gemma 2: the window, the final soft-capping and the scale each matter
local gemma2_controls = {
  { function(c) c.sliding_window = nil end, "without the sliding window on the even layers" },
  { function(c) c.final_logit_softcapping = nil end, "without final soft-capping" },
  { function(c) c.query_pre_attn_scalar = 32 end, "with the score scale 1/√head_dim" },
}

local ids = {}
for i = 1, 14 do ids[i] = (i * 37 + 11) % V end
for _, fam in ipairs(families) do fam.tensors = function(c) return tensors(fam.hd, fam.o, c.num_key_value_heads) end end
local dirs = R.check_families(t, root, families, ids)
for _, ctl in ipairs(gemma2_controls) do
  R.check_control(t, dirs["gemma2-f32"], ids, function(_, c) ctl[1](c) end, "gemma2: the reference " .. ctl[2])
end

-- the imported configs
do
  local _, m = hf.load(dirs["gemma2-f32"])
  local c = m.cfg
  t.ok(c.family == "llama" and c.head_dim == 32 and c.post_norms and c.window == 5 and c.window_every == 2 and c.attn_softcap == 0.4
       and c.logit_softcap == 2 and c.act == "gelu_tanh" and math.abs(c.embed_scale - 8) == 0 and math.abs(c.attn_scale - 48 ^ -0.5) < 1e-15,
       "gemma2: imported as llama with head_dim, post norms, window on every 2nd layer, soft-caps, GeGLU, embed scale √64")
  t.is(m:num_params(), require("outlierlab.models").count_params(c), "gemma2: parameter count formula = the built model's")
  local _, m3 = hf.load(dirs["qwen3-f32"])
  t.is(m3:num_params(), require("outlierlab.models").count_params(m3.cfg), "qwen3: parameter count formula = the built model's")
  t.throws(function() hf.export(root .. "/x", select(1, hf.load(dirs["qwen2-f32"])), select(2, hf.load(dirs["qwen2-f32"]))) end,
    "not exported", "a Qwen2 (llama with q/k/v biases) is refused by hf.export, never written as a LLaMA")
end

-- bad config values: refused naming config.json and the key
R.check_refused(t, root, dirs, {
  { "qwen2-f32", function(c) c.use_sliding_window = true end, "'use_sliding_window'" },
  { "qwen2-f32", function(c) c.rope_scaling = { type = "yarn", factor = 4 } end, "'rope_scaling'" },
  { "qwen3-f32", function(c) c.head_dim = 23 end, "'head_dim' = 23" },
  { "qwen3-f32", function(c) c.head_dim = 32 end, "self_attn.q_proj.weight" },
  { "gemma-f32", function(c) c.hidden_activation = "swish" end, "'hidden_activation'" },
  { "gemma-f32", function(c) c.tie_word_embeddings = false end, "'tie_word_embeddings'" },
  { "gemma2-f32", function(c) c.attn_logit_softcapping = -1 end, "'attn_logit_softcapping'" },
  { "gemma2-f32", function(c) c.query_pre_attn_scalar = 0 end, "'query_pre_attn_scalar'" },
  { "gemma2-f32", function(c) c.sliding_window = 0 end, "'sliding_window'" },
})

-- tokenizers: Qwen2's byte-level BPE (NFC, no BOS: <|endoftext|> starts a sequence) and Gemma's
-- Replace(' ', '▁') + byte fallback with <bos>
do
  local qd = dirs["qwen3-bf16-shards"]
  local vocab = R.byte_vocab({ ["Ġt"] = 257, ["Ġth"] = 258, ["Ġthe"] = 259 })
  write(qd .. "/tokenizer.json", json.encode({ added_tokens = { { id = 256, content = "<|endoftext|>", special = true } },
    normalizer = { type = "NFC" },
    pre_tokenizer = { type = "Sequence", pretokenizers = { { type = "Split", pattern = { Regex = [[(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+]] }, behavior = "Isolated", invert = false },
      { type = "ByteLevel", add_prefix_space = false, trim_offsets = false, use_regex = false } } },
    model = { type = "BPE", vocab = vocab, merges = { "Ġ t", "Ġt h", "Ġth e" } } }))
  write(qd .. "/tokenizer_config.json", json.encode({ bos_token = json.null, eos_token = "<|endoftext|>", pad_token = "<|endoftext|>" }))
  local tk = tokenizers.load(qd)
  local got = tk:encode("in the.")
  t.ok(tk.special.bos == 256 and tk:category(256) == "initial" and tk:category(259) == "weak" and tk:category(vocab["."]) == "delimiter",
    "qwen: byte-level tokenizer without BOS: <|endoftext|> is the initial token, 'Ġthe' weak, '.' a delimiter",
    json.encode(got) .. " bos " .. tostring(tk.special.bos) .. " " .. tk:category(256) .. " " .. tk:category(259) .. " " .. tk:category(vocab["."]))
  local gd = dirs["gemma2-f32"]
  local gv = { ["<pad>"] = 0, ["<eos>"] = 1, ["<bos>"] = 2, ["▁the"] = 259, ["▁"] = 260, ["t"] = 261, ["h"] = 262, ["e"] = 263, ["▁t"] = 264, ["▁th"] = 265 }
  for b = 0, 255 do gv[string.format("<0x%02X>", b)] = 3 + b end
  write(gd .. "/tokenizer.json", json.encode({ normalizer = { type = "Replace", pattern = { String = " " }, content = "▁" },
    model = { type = "BPE", byte_fallback = true, vocab = gv, merges = { "▁ t", "▁t h", "▁th e" } } }))
  write(gd .. "/tokenizer_config.json", json.encode({ bos_token = "<bos>", eos_token = "<eos>" }))
  local gk = tokenizers.load(gd)
  t.ok(gk.special.bos == 2 and gk:category(2) == "initial" and gk:category(259) == "weak" and gk:category(1) == "delimiter",
    "gemma: <bos> initial, '▁the' weak, <eos> a delimiter")
end

-- so-fig1 end to end on Gemma 2; so-fig3 streamed from Qwen3's BF16 shards = in memory
R.text(root)
do
  R.check_so_fig1(t, dirs["gemma2-f32"], root .. "/text.txt", root, "Gemma 2 (windowed layers, soft-capping)")
  R.check_stream(t, dirs["qwen3-bf16-shards"], root .. "/text.txt", root, "qwen3")
end

os.execute("rm -rf " .. root)
return t.done()
