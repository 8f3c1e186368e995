-- test_hf_phi_falcon_mpt — the parallel-block and ALiBi families imported from Hugging Face
-- directories into the llama model's options (models/llama.lua): Phi (modeling_phi.py). For
-- each, the test writes directories in the family's own layout (tensor names and shapes spelled
-- out here from the modeling file, random weights, norm gains and biases too), F32 as one file
-- and BF16 as two shards, and checks that the logits and every layer's output h of the import
-- equal the plain-Lua float64 reference forward of tests/lua/lib/hf_reference.lua (written from
-- the modeling file, not with the engine's ops) to fp32 rounding; controls (the reference
-- without one of the family's features) must differ, so the check can fail. Then bad config
-- values refused naming config.json and the key, the token categories of the family's tokenizer,
-- and so-fig1 end to end on one directory.
local t = require "outlierlab.tap"
local ol = require "outlierlab"
local json = require "outlierlab.util.json"
local hf = require "outlierlab.pretrained.hf"
local models = require "outlierlab.models"
local tokenizers = require "outlierlab.pretrained.tokenizers"
local R = dofile(ol.root .. "/tests/lua/lib/hf_reference.lua")

local root = R.tmpdir()
local write = R.write
local text = R.text(root)

local V, C, F, L = 300, 64, 96, 2
local ids = {}
for i = 1, 14 do ids[i] = (i * 37 + 11) % V end

-- ---------------------------------------------------------------- Phi (modeling_phi.py)
-- PhiForCausalLM's state dict: model.embed_tokens, model.layers.{l}.{input_layernorm,
-- self_attn.{q,k,v}_proj, self_attn.dense, [self_attn.{q,k}_layernorm], mlp.fc1, mlp.fc2}
-- (weights and biases), model.final_layernorm, lm_head (weight and bias)
local function phi_tensors(c)
  local NH = c.num_attention_heads
  local NKV = type(c.num_key_value_heads) == "number" and c.num_key_value_heads or NH
  local HD = C / NH
  local out, add = R.builder()
  local function linear(name, nout, nin) add(name .. ".weight", { nout, nin }, 0.15) add(name .. ".bias", { nout }, 0.3) end
  local function ln(name, n) add(name .. ".weight", { n }, 0.5, true) add(name .. ".bias", { n }, 0.3) end
  add("model.embed_tokens.weight", { V, C }, 0.5)
  for l = 0, L - 1 do
    local p = "model.layers." .. l .. "."
    ln(p .. "input_layernorm", C)
    linear(p .. "self_attn.q_proj", NH * HD, C)
    linear(p .. "self_attn.k_proj", NKV * HD, C)
    linear(p .. "self_attn.v_proj", NKV * HD, C)
    linear(p .. "self_attn.dense", C, NH * HD)
    if c.qk_layernorm then ln(p .. "self_attn.q_layernorm", HD) ln(p .. "self_attn.k_layernorm", HD) end
    linear(p .. "mlp.fc1", F, C)
    linear(p .. "mlp.fc2", C, F)
  end
  ln("model.final_layernorm", C)
  add("lm_head.weight", { V, C }, 0.15)
  add("lm_head.bias", { V }, 0.5)
  return out
end
-- Phi-2's config.json keys (PhiConfig), with 4 heads of 16 dims, 8 of them rotary
local function phi_config(o)
  local c = { model_type = "phi", architectures = { "PhiForCausalLM" }, vocab_size = V, hidden_size = C, intermediate_size = F,
              num_hidden_layers = L, num_attention_heads = 4, num_key_value_heads = json.null, max_position_embeddings = 64,
              partial_rotary_factor = 0.5, rope_theta = 10000.0, rope_scaling = json.null, hidden_act = "gelu_new",
              layer_norm_eps = 1e-5, qk_layernorm = false, tie_word_embeddings = false, resid_pdrop = 0.1, embd_pdrop = 0.0,
              attention_dropout = 0.0, bos_token_id = 256, eos_token_id = 256, torch_dtype = "float32" }
  for k, v in pairs(o or {}) do c[k] = v end
  return c
end
local phi_dirs = R.check_families(t, root, {
  { name = "phi", tensors = phi_tensors, config = phi_config,
    control = function(_, c) c.partial_rotary_factor = 1.0 end, control_what = "with the rotary embedding on the whole head" },
  { name = "phi-qk-gqa", tensors = phi_tensors, config = function() return phi_config { qk_layernorm = true, num_key_value_heads = 2, hidden_act = "gelu" } end,
    control = function(_, c) c.qk_layernorm = false end, control_what = "without q_layernorm and k_layernorm" },
}, ids)
local pd = phi_dirs["phi-f32"]
R.check_control(t, pd, ids, function(_, c) c._sequential = true end, "phi: the reference with the MLP after the attention (not parallel)")
R.check_control(t, pd, ids, function(W) W["lm_head.bias"] = nil end, "phi: the reference without the lm_head bias")
-- gelu_new and exact GELU differ by at most ~5e-4 per value: the logits by 1e-4 here, 5× the
-- check's tolerance (2e-5), so the check tells the two apart
R.check_control(t, pd, ids, function(_, c) c.hidden_act = "gelu" end, "phi: the reference with exact GELU instead of gelu_new", 1e-4)
do
  local _, m = hf.load(pd)
  local c = m.cfg
  t.ok(c.family == "llama" and c.parallel == "shared" and c.norm == "layernorm" and c.norm_bias and c.mlp == "plain" and c.mlp_bias
       and c.qkv_bias and c.o_bias and c.head_bias and c.rotary_dim == 8 and c.act == "gelu_tanh" and not c.tie_embeddings,
    "phi: imported as llama with a shared LayerNorm, parallel block, biases, 8 rotary dims of 16, gelu tanh, head bias")
  t.is(m:num_params(), models.count_params(c), "phi: parameter count formula = the built model's")
  local _, mq = hf.load(phi_dirs["phi-qk-gqa-f32"])
  t.is(mq:num_params(), models.count_params(mq.cfg), "phi with qk_layernorm and GQA: parameter count formula = the built model's")
end
R.check_refused(t, root, phi_dirs, {
  { "phi-f32", function(c) c.partial_rotary_factor = 1.5 end, "'partial_rotary_factor'" },
  { "phi-f32", function(c) c.partial_rotary_factor = 0.3125 end, "'partial_rotary_factor'" },   -- 5 rotary dims: odd
  { "phi-f32", function(c) c.partial_rotary_factor = 0.1 end, "'partial_rotary_factor'" },      -- 1 rotary dim
  { "phi-f32", function(c) c.tie_word_embeddings = true end, "'tie_word_embeddings'" },
  { "phi-f32", function(c) c.hidden_act = "swish" end, "'hidden_act'" },
  { "phi-f32", function(c) c.layer_norm_eps = -1 end, "'layer_norm_eps'" },
  { "phi-f32", function(c) c.rope_scaling = { type = "linear", factor = 2.0 } end, "'rope_scaling'" },
  { "phi-f32", function(c) c.num_key_value_heads = 3 end, "'num_key_value_heads'" },
  { "phi-f32", function(c) c.head_dim = 32 end, "'head_dim'" },
  { "phi-f32", function(c) c.qk_layernorm = true end, "self_attn.q_layernorm.weight" },
})
-- Phi-2's tokenizer: CodeGen's byte-level BPE (vocab.json + merges.txt, GPT-2's), no BOS of
-- its own: <|endoftext|> (config.json bos_token_id) starts the sequences
do
  local vocab = R.byte_vocab({ ["<|endoftext|>"] = 256, ["Ġt"] = 257, ["Ġth"] = 258, ["Ġthe"] = 259 })
  write(pd .. "/vocab.json", json.encode(vocab))
  write(pd .. "/merges.txt", "#version: 0.2\nĠ t\nĠt h\nĠth e\n")
  write(pd .. "/tokenizer_config.json", json.encode({ bos_token = "<|endoftext|>", eos_token = "<|endoftext|>", tokenizer_class = "CodeGenTokenizer" }))
  local tk = tokenizers.load(pd)
  local got = tk:encode("in the.\n")
  t.ok(tk.special.bos == 256 and tk:category(256) == "initial" and tk:category(259) == "weak" and tk:category(vocab["."]) == "delimiter"
       and tk:category(vocab["Ċ"]) == "delimiter" and got[3] == 259,
    "phi: CodeGen tokenizer: <|endoftext|> is the initial token, 'Ġthe' weak, '.' and 'Ċ' delimiters", json.encode(got))
end
R.check_so_fig1(t, pd, text, root, "Phi-2 (parallel block, partial rotary)")
do
  local out, ok = t.sh(string.format("bin/outlierlab run experiments/so-fig5.lua --profile=quick --model=%s --text=%s --out=%s/r5 --cache=%s/c5", pd, text, root, root))
  t.ok(not ok and out:find("model_type 'phi'", 1, true) and out:find("gate", 1, true), "so-fig5 refuses a Phi (its MLP has no gate projection), naming it", out)
end

os.execute("rm -rf " .. root)
return t.done()
