-- test_hf_phi_falcon_mpt — the parallel-block and ALiBi families imported from Hugging Face
-- directories into the llama model's options (models/llama.lua): Phi (modeling_phi.py), Falcon
-- (modeling_falcon.py: the three layouts of query_key_value) and MPT (modeling_mpt.py: ALiBi,
-- clip_qkv; the exact clamp's gradient against finite differences). For
-- each, the test writes directories in the family's own layout (tensor names and shapes spelled
-- out here from the modeling file, random weights, norm gains and biases too), F32 as one file
-- and BF16 as two shards, and checks that the logits and every layer's output h of the import
-- equal the plain-Lua float64 reference forward of tests/lua/lib/hf_reference.lua (written from
-- the modeling file, not with the engine's ops) to fp32 rounding; controls (the reference
-- without one of the family's features) must differ, so the check can fail. Then bad config
-- values refused naming config.json and the key, the token categories of the family's tokenizer,
-- and so-fig1 end to end on one directory.
local t = require "tap"
local ol = require "outlierlab"
local json = require "outlierlab.util.json"
local hf = require "outlierlab.pretrained.hf"
local models = require "outlierlab.models"
local norms = require "outlierlab.nn.norms"
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

-- ---------------------------------------------------------------- Falcon (modeling_falcon.py)
-- FalconForCausalLM's state dict: transformer.word_embeddings, transformer.h.{l}.{norms,
-- self_attention.query_key_value, self_attention.dense, mlp.dense_h_to_4h, mlp.dense_4h_to_h}
-- (biases when bias), transformer.ln_f, lm_head when untied. The norms of a layer:
-- new_decoder_architecture with num_ln_in_parallel_attn 2 (default): ln_attn, ln_mlp; with 1,
-- or parallel_attn without new_decoder_architecture: input_layernorm; sequential:
-- input_layernorm and post_attention_layernorm.
local function falcon_tensors(c)
  local NH = c.num_attention_heads
  local HD = C / NH
  local NKV = c.new_decoder_architecture and c.num_kv_heads or (c.multi_query and 1 or NH)
  local out, add = R.builder()
  local function linear(name, nout, nin)
    add(name .. ".weight", { nout, nin }, 0.15)
    if c.bias then add(name .. ".bias", { nout }, 0.3) end
  end
  local function ln(name) add(name .. ".weight", { C }, 0.5, true) add(name .. ".bias", { C }, 0.3) end
  add("transformer.word_embeddings.weight", { V, C }, 0.5)
  for l = 0, L - 1 do
    local p = "transformer.h." .. l .. "."
    if c.new_decoder_architecture and (c.num_ln_in_parallel_attn or 2) == 2 then ln(p .. "ln_attn") ln(p .. "ln_mlp")
    else
      ln(p .. "input_layernorm")
      if not c.parallel_attn then ln(p .. "post_attention_layernorm") end
    end
    linear(p .. "self_attention.query_key_value", (NH + 2 * NKV) * HD, C)
    linear(p .. "self_attention.dense", C, C)
    linear(p .. "mlp.dense_h_to_4h", F, C)
    linear(p .. "mlp.dense_4h_to_h", C, F)
  end
  ln("transformer.ln_f")
  if c.tie_word_embeddings == false then add("lm_head.weight", { V, C }, 0.15) end
  return out
end
-- FalconConfig's keys: Falcon-7B's (multi-query, one LayerNorm, no biases, tied), with 4 heads of 16
local function falcon_config(o)
  local c = { model_type = "falcon", architectures = { "FalconForCausalLM" }, vocab_size = V, hidden_size = C, num_hidden_layers = L,
              num_attention_heads = 4, num_kv_heads = json.null, new_decoder_architecture = false, multi_query = true,
              parallel_attn = true, bias = false, alibi = false, apply_residual_connection_post_layernorm = false,
              layer_norm_epsilon = 1e-5, ffn_hidden_size = F, max_position_embeddings = 64, rope_theta = 10000.0, rope_scaling = json.null,
              activation = "gelu", hidden_dropout = 0.0, attention_dropout = 0.0, bos_token_id = 11, eos_token_id = 11, torch_dtype = "float32" }
  for k, v in pairs(o or {}) do c[k] = v end
  return c
end
local blocks = function(_, c) c._qkv_blocks = true end
local falcon_dirs = R.check_families(t, root, {
  { name = "falcon-7b", tensors = falcon_tensors, config = falcon_config,
    control = function(_, c) c._sequential = true end, control_what = "with the MLP after the attention (not parallel)" },
  -- Falcon-40B's layout: 2 key-value groups of (2 query heads, k, v), ln_attn and ln_mlp, untied head
  { name = "falcon-40b", tensors = falcon_tensors,
    config = function() return falcon_config { new_decoder_architecture = true, num_kv_heads = 2, tie_word_embeddings = false } end,
    control = blocks, control_what = "reading query_key_value as [q | k | v] blocks, not in groups (q, q, k, v)" },
  -- Falcon2-11B's: the new architecture with one LayerNorm (num_ln_in_parallel_attn 1), biases
  { name = "falcon-1ln", tensors = falcon_tensors,
    config = function() return falcon_config { new_decoder_architecture = true, num_kv_heads = 2, num_ln_in_parallel_attn = 1, bias = true } end,
    control = blocks, control_what = "reading query_key_value as [q | k | v] blocks" },
  -- no multi-query (every head its k, v: rows (q, k, v) per head), sequential block, biases
  { name = "falcon-seq", tensors = falcon_tensors,
    config = function() return falcon_config { multi_query = false, parallel_attn = false, bias = true } end,
    control = blocks, control_what = "reading query_key_value as [q | k | v] blocks, not (q, k, v) per head" },
}, ids)
R.check_control(t, falcon_dirs["falcon-7b-f32"], ids, function(_, c) c.activation = "gelu_new" end,
  "falcon-7b: the reference with gelu_new instead of exact GELU (5× the check's tolerance)", 1e-4)
R.check_control(t, falcon_dirs["falcon-40b-f32"], ids, function(W) for n, w in pairs(W) do if n:find("ln_mlp") then W[n] = W[n:gsub("ln_mlp", "ln_attn")] end end end,
  "falcon-40b: the reference with ln_attn in place of ln_mlp")
do
  local want = { ["falcon-7b"] = { 1, "shared", false }, ["falcon-40b"] = { 2, "separate", false }, ["falcon-1ln"] = { 2, "shared", true },
                 ["falcon-seq"] = { 4, "none", true } }
  for name, w in pairs(want) do
    local _, m = hf.load(falcon_dirs[name .. "-f32"])
    local c = m.cfg
    t.ok(c.n_kv_head == w[1] and c.parallel == w[2] and c.qkv_bias == w[3] and c.mlp_bias == w[3] and c.act == "gelu_erf" and c.norm == "layernorm"
         and m:num_params() == models.count_params(c),
      string.format("%s: imported as llama with %d key-value heads, parallel = %s, biases %s, exact GELU; parameter count formula = the model's", name, w[1], w[2], tostring(w[3])))
  end
end
R.check_refused(t, root, falcon_dirs, {
  { "falcon-7b-f32", function(c) c.alibi = true end, "'alibi'" },
  { "falcon-7b-f32", function(c) c.apply_residual_connection_post_layernorm = true end, "'apply_residual_connection_post_layernorm'" },
  { "falcon-7b-f32", function(c) c.rope_scaling = { type = "dynamic", factor = 2.0 } end, "'rope_scaling'" },
  { "falcon-7b-f32", function(c) c.activation = "swish" end, "'activation'" },
  { "falcon-7b-f32", function(c) c.num_ln_in_parallel_attn = 2 end, "'num_ln_in_parallel_attn' = 2" },
  { "falcon-7b-f32", function(c) c.multi_query = false end, "self_attention.query_key_value.weight" },
  { "falcon-seq-f32", function(c) c.num_kv_heads = 2 end, "'num_kv_heads'" },
  { "falcon-40b-f32", function(c) c.num_kv_heads = 3 end, "'num_kv_heads'" },
  { "falcon-40b-f32", function(c) c.parallel_attn = false end, "'parallel_attn'" },
  { "falcon-40b-f32", function(c) c.num_ln_in_parallel_attn = 3 end, "'num_ln_in_parallel_attn'" },
  { "falcon-7b-f32", function(c) c.tie_word_embeddings = false end, "missing tensor 'lm_head.weight'" },
  { "falcon-7b-f32", function(c) c.layer_norm_epsilon = 0 end, "'layer_norm_epsilon'" },
})
-- Falcon's tokenizer: byte-level BPE whose <|endoftext|> (id 11: config.json bos_token_id and
-- eos_token_id) starts the sequences; tokenizer_config.json names only the EOS. Its
-- pre-tokenizer (tiiuae/falcon-7b's tokenizer.json): Punctuation (Contiguous), ByteLevel (GPT-2's
-- regex), Digits (runs), Split "[0-9][0-9][0-9]" (Isolated), in that order
local FALCON_PRE = { type = "Sequence", pretokenizers = {
  { type = "Punctuation", behavior = "Contiguous" },
  { type = "ByteLevel", add_prefix_space = false, trim_offsets = true, use_regex = true },
  { type = "Digits", individual_digits = false },
  { type = "Split", pattern = { Regex = "[0-9][0-9][0-9]" }, behavior = "Isolated", invert = false } } }
local fd = falcon_dirs["falcon-7b-f32"]
do
  local vocab = R.byte_vocab({ ["Ġt"] = 257, ["Ġth"] = 258, ["Ġthe"] = 259 })
  local added = { { id = 11, content = "<|endoftext|>", special = true }, { id = 0, content = ">>TITLE<<", special = true } }
  for _, a in ipairs(added) do
    for sym, id in pairs(vocab) do if id == a.id then vocab[sym] = nil end end   -- the byte symbol whose id the added token takes
    vocab[a.content] = a.id
  end
  vocab["12"], vocab["123"], vocab["1234"], vocab["12345"], vocab["!!"], vocab[",Ġ"] = 260, 261, 262, 263, 264, 265
  write(fd .. "/tokenizer.json", json.encode({ added_tokens = added, normalizer = json.null, pre_tokenizer = FALCON_PRE,
    model = { type = "BPE", vocab = vocab, merges = { "Ġ t", "Ġt h", "Ġth e", "1 2", "12 3", "123 4", "1234 5", "! !", ", Ġ" } } }))
  write(fd .. "/tokenizer_config.json", json.encode({ eos_token = "<|endoftext|>", add_prefix_space = false }))
  local tk = tokenizers.load(fd)
  t.ok(tk.special.bos == 11 and tk:category(11) == "initial" and tk:category(259) == "weak" and tk:category(vocab[","]) == "delimiter",
    "falcon: <|endoftext|> (config.json bos_token_id 11) is the initial token, 'Ġthe' weak, ',' a delimiter")
  -- the pieces, by hand: Punctuation cuts "," and "!!" out; GPT-2's regex " 12345", " ²", "x";
  -- Digits (on the byte symbols) "Ġ" | "12345" and, inside "²" (C2 B2: "Â²", and "²" is numeric),
  -- " Â" | "²"; the Split "123" | "45"
  local pieces = {}
  local words = tokenizers.load(fd)
  words.word_ids = function(_, w) pieces[#pieces + 1] = w end
  words:encode("Hello, world!! 12345 \xC2\xB2x")
  t.is(table.concat(pieces, "|"), "Hello|,| world|!!| |123|45| \xC2|\xB2|x",
    "falcon: Punctuation, ByteLevel, Digits (after ByteLevel: on the byte symbols) and Split, in that order")
  local ids = tk:encode("in 12345, the!!")
  t.is(json.encode(ids), json.encode({ vocab["i"], vocab["n"], vocab["Ġ"], 261, vocab["4"], vocab["5"], vocab[","], 259, 264 }),
    "falcon: 'in 12345, the!!' → i n Ġ 123 4 5 , Ġthe !! (no merge across the pieces: not ',Ġ', not '12345')")
end
R.check_so_fig1(t, fd, text, root, "Falcon-7B (multi-query, parallel block)")
-- the interleaved query_key_value converted layer by layer: streamed = in memory
do
  local d40 = falcon_dirs["falcon-40b-bf16-shards"]
  os.execute("cp " .. fd .. "/tokenizer*.json " .. d40 .. "/")
  R.check_stream(t, d40, text, root, "falcon-40b")
end

-- ---------------------------------------------------------------- MPT (modeling_mpt.py)
-- MptForCausalLM's state dict: transformer.wte, transformer.blocks.{l}.{norm_1, attn.Wqkv,
-- attn.out_proj, norm_2, ffn.up_proj, ffn.down_proj}, transformer.norm_f: no biases at all
local function mpt_tensors(c)
  local Cm = c.d_model
  local out, add = R.builder()
  add("transformer.wte.weight", { V, Cm }, 0.5)
  for l = 0, L - 1 do
    local p = "transformer.blocks." .. l .. "."
    add(p .. "norm_1.weight", { Cm }, 0.5, true)
    add(p .. "attn.Wqkv.weight", { 3 * Cm, Cm }, 0.2)
    add(p .. "attn.out_proj.weight", { Cm, Cm }, 0.15)
    add(p .. "norm_2.weight", { Cm }, 0.5, true)
    add(p .. "ffn.up_proj.weight", { 4 * Cm, Cm }, 0.15)
    add(p .. "ffn.down_proj.weight", { Cm, 4 * Cm }, 0.1)
  end
  add("transformer.norm_f.weight", { Cm }, 0.5, true)
  return out
end
-- MptConfig's keys (mpt-7b's config.json), with a small shape
local function mpt_config(o, ac)
  local c = { model_type = "mpt", architectures = { "MPTForCausalLM" }, vocab_size = V, d_model = C, n_heads = 4, n_layers = L,
              expansion_ratio = 4, max_seq_len = 64, layer_norm_epsilon = 1e-5, no_bias = true, norm_type = "low_precision_layernorm",
              logit_scale = json.null, learned_pos_emb = true, emb_pdrop = 0, resid_pdrop = 0, embedding_fraction = 1.0,
              attn_config = { alibi = true, alibi_bias_max = 8, attn_impl = "torch", attn_pdrop = 0, attn_type = "multihead_attention",
                              attn_uses_sequence_id = false, clip_qkv = json.null, prefix_lm = false, qk_ln = false, softmax_scale = json.null },
              torch_dtype = "float32" }
  for k, v in pairs(o or {}) do c[k] = v end
  for k, v in pairs(ac or {}) do c.attn_config[k] = v end
  return c
end
local mpt_dirs = R.check_families(t, root, {
  { name = "mpt-7b", tensors = mpt_tensors, config = mpt_config,
    control = function(_, c) c._alibi_bias_max = 4 end, control_what = "with alibi_bias_max 4 instead of 8" },
  -- attn_config.alibi_bias_max 16: transformers' MptModel ignores it (slopes of 8), so must the import
  { name = "mpt-bias16", tensors = mpt_tensors, config = function() return mpt_config(nil, { alibi_bias_max = 16 }) end,
    control = function(_, c) c._alibi_bias_max = 16 end, control_what = "with the config's alibi_bias_max 16 (transformers uses 8)" },
  -- 6 heads (not a power of two: the interleaved slopes), clip_qkv that clamps a share of q, k,
  -- v (their values reach ±2 here), an explicit softmax_scale
  { name = "mpt-clip", tensors = mpt_tensors,
    config = function() return mpt_config({ d_model = 48, n_heads = 6 }, { clip_qkv = 0.6, softmax_scale = 0.3 }) end,
    control = function(_, c) c.attn_config.clip_qkv = json.null end, control_what = "without clip_qkv" },
}, ids)
R.check_control(t, mpt_dirs["mpt-clip-f32"], ids, function(_, c) c._plain_slopes = true end,
  "mpt-clip: the reference with the 6 heads' slopes in the plain order 2^(−8i/6)")
R.check_control(t, mpt_dirs["mpt-clip-f32"], ids, function(_, c) c.attn_config.softmax_scale = json.null end,
  "mpt-clip: the reference with the default scale (d_model/n_heads)^−½ instead of softmax_scale")
do
  -- ALiBi slopes by hand: 8 heads 2^−1 … 2^−8; 6 heads from n = 8: 2^−2, 2^−4, 2^−6, 2^−8, 2^−1, 2^−3
  local common = require "outlierlab.models.common"
  local s8, s6 = common.alibi_slopes(8, 8), common.alibi_slopes(6, 8)
  t.ok(s8[1] == 0.5 and s8[8] == 2 ^ -8 and #s6 == 6 and s6[1] == 2 ^ -2 and s6[4] == 2 ^ -8 and s6[5] == 2 ^ -1 and s6[6] == 2 ^ -3,
    "mpt: ALiBi slopes of 8 heads 2^−1 … 2^−8, of 6 heads 2^−2, 2^−4, 2^−6, 2^−8, 2^−1, 2^−3 (modeling_mpt.py's order)")
  local _, m = hf.load(mpt_dirs["mpt-clip-f32"])
  local c = m.cfg
  t.ok(c.family == "llama" and c.norm == "layernorm" and not c.norm_bias and c.rope_base == 0 and c.alibi == 8 and c.clip_qkv == 0.6
       and c.attn_scale == 0.3 and c.act == "gelu_erf" and c.d_ff == 192 and c.tie_embeddings and m:num_params() == models.count_params(c),
    "mpt: imported as llama with bias-free LayerNorms, no RoPE, ALiBi 8, clip_qkv, softmax_scale, exact GELU, 4 × d_model, tied; parameter count formula")
  -- the clamp (clip_qkv): exact forward, and its gradient (1 inside [−c, c], 0 outside) against
  -- central finite differences, with no value within the step of a bound
  local ctx = ol.Context{ params = 1024, seed = 3 }
  local x = ctx:tensor({ 3, 8 }, { persistent = true, name = "x" })
  local vals = { -2.1, -0.9, -0.31, 0, 0.25, 0.6, 0.61, 1.7 }
  for i = 0, 23 do x.data[i] = vals[i % 8 + 1] * (1 + 0.1 * math.floor(i / 8)) end
  local y = ctx:no_grad(function() return norms.clip(x, 0.6) end)
  local exact = true
  for i = 0, 23 do
    local v = x.data[i]
    exact = exact and y.data[i] == math.min(math.max(v, tonumber(ol.ffi.new("float", -0.6))), tonumber(ol.ffi.new("float", 0.6)))
  end
  t.ok(exact, "mpt: the clamp equals min(max(x, −c), c) bit for bit (inside unchanged, outside ±c)")
  ctx:reset()
  local gx = ctx:tensor({ 3, 8 }, { persistent = true, name = "gx" })
  for i = 0, 23 do gx.data[i] = x.data[i] end
  gx.data[5] = 0.55   -- the value at the bound moved off it: a finite difference across the kink is no derivative
  local err = require("outlierlab.nn.gradcheck").check(ctx, function(a) return norms.clip(a, 0.6) end, { gx }, { eps = 1e-3 })
  t.ok(err < 1e-2, string.format("mpt: the clamp's gradient equals central finite differences (max error %.1e)", err))
end
R.check_refused(t, root, mpt_dirs, {
  { "mpt-7b-f32", function(c) c.attn_config.alibi = false end, "'attn_config.alibi'" },
  { "mpt-7b-f32", function(c) c.attn_config.attn_type = "grouped_query_attention" end, "'attn_config.attn_type'" },
  { "mpt-7b-f32", function(c) c.attn_config.qk_ln = true end, "'attn_config.qk_ln'" },
  { "mpt-7b-f32", function(c) c.attn_config.prefix_lm = true end, "'attn_config.prefix_lm'" },
  { "mpt-7b-f32", function(c) c.attn_config.clip_qkv = -1 end, "'attn_config.clip_qkv'" },
  { "mpt-7b-f32", function(c) c.attn_config.softmax_scale = 0 end, "'attn_config.softmax_scale'" },
  { "mpt-7b-f32", function(c) c.attn_config.alibi_bias_max = 0 end, "'attn_config.alibi_bias_max'" },
  { "mpt-7b-f32", function(c) c.attn_config = "flash" end, "'attn_config' must be an object" },
  { "mpt-7b-f32", function(c) c.expansion_ratio = 2 end, "'expansion_ratio'" },
  { "mpt-7b-f32", function(c) c.no_bias = false end, "'no_bias'" },
  { "mpt-7b-f32", function(c) c.logit_scale = 0.5 end, "'logit_scale'" },
  { "mpt-7b-f32", function(c) c.tie_word_embeddings = false end, "'tie_word_embeddings'" },
  { "mpt-7b-f32", function(c) c.n_heads = 3 end, "'n_heads'" },
  { "mpt-7b-f32", function(c) c.n_layers = 5 end, "'n_layers' = 5" },
})
do
  local pre = require "outlierlab.pretrained"
  local m7 = hf.from_hf.mpt({ d_model = 4096, n_heads = 32, n_layers = 32, vocab_size = 50432, max_seq_len = 2048 }, "mpt-7b")
  t.is(pre.paper_model(models.config(m7)), nil, "MPT-7B (32 layers of d 4096 with 32 key-value heads) is not taken for the paper's LLaMA-2-7B")
end
-- MPT's tokenizer (GPT-NeoX-20B's): byte-level BPE with an NFC normaliser; <|endoftext|> (id 0)
-- is BOS, EOS and UNK
local md = mpt_dirs["mpt-7b-f32"]
do
  local vocab = R.byte_vocab({ ["Ġt"] = 257, ["Ġth"] = 258, ["Ġthe"] = 259 })
  for sym, id in pairs(vocab) do if id == 0 then vocab[sym] = nil end end
  vocab["<|endoftext|>"] = 0
  write(md .. "/tokenizer.json", json.encode({ added_tokens = { { id = 0, content = "<|endoftext|>", special = true } },
    normalizer = { type = "NFC" }, pre_tokenizer = { type = "ByteLevel", add_prefix_space = false, trim_offsets = true, use_regex = true },
    model = { type = "BPE", vocab = vocab, merges = { "Ġ t", "Ġt h", "Ġth e" } } }))
  write(md .. "/tokenizer_config.json", json.encode({ bos_token = "<|endoftext|>", eos_token = "<|endoftext|>", unk_token = "<|endoftext|>" }))
  local tk = tokenizers.load(md)
  t.ok(tk.special.bos == 0 and tk:category(0) == "initial" and tk:category(259) == "weak" and tk:category(vocab[";"]) == "delimiter",
    "mpt: <|endoftext|> (id 0) is the initial token, 'Ġthe' weak, ';' a delimiter")
end
R.check_so_fig1(t, md, text, root, "MPT-7B (ALiBi)")

os.execute("rm -rf " .. root)
return t.done()
