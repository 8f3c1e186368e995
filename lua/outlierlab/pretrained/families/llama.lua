-- pretrained/families/llama — LLaMA (modeling_llama.py LlamaForCausalLM), and the helpers of the families that are its block
--   llama LLaMA: grouped-query attention, rope_theta, rms_norm_eps, tied or untied head. HF
--         stores q/k in the rotate-half layout that engine/ops_model.c's RoPE uses: no permutation.
--         LLaMA-3.1's rope_scaling "llama3" (modeling_rope_utils.py _compute_llama3_parameters)
--         becomes the model's rope_factor keys (rope_scaling below).
-- (config.json -> the project's config: from_hf; tensor names: layout; see families/shared.lua)
local S = require "outlierlab.pretrained.families.shared"
local json = require "outlierlab.util.json"
local fail, key, int, size, positive, heads, must, rope_scaling = S.fail, S.key, S.int, S.size, S.positive, S.heads, S.must, S.rope_scaling
local E, one, head_e = S.E, S.one, S.head_e
local from_hf, to_hf, layout = {}, {}, {}

-- LLaMA (modeling_llama.py LlamaForCausalLM) and the families that are LLaMA's block with
-- other config keys: fam names the family in messages
local function llama_like(hf, dir, fam)
  must(hf, dir, "hidden_act", { "silu" }, fam)
  must(hf, dir, "attention_bias", { false }, fam)
  must(hf, dir, "mlp_bias", { false }, fam)
  local Cd, NH = size(hf, dir, "hidden_size"), size(hf, dir, "num_attention_heads")
  local KV = size(hf, dir, "num_key_value_heads", NH)
  heads(dir, "num_attention_heads", NH, "hidden_size", Cd, "num_key_value_heads", KV)
  if hf.head_dim ~= nil and hf.head_dim ~= json.null and int(hf, dir, "head_dim") * NH ~= Cd then
    fail(dir, "config.json 'head_dim' = %d with %d heads differs from hidden_size %d: not supported for %s", hf.head_dim, NH, Cd, fam)
  end
  return rope_scaling(hf, dir, fam, {
           family = "llama", vocab_size = size(hf, dir, "vocab_size"), block_size = size(hf, dir, "max_position_embeddings", 2048),
           n_layer = size(hf, dir, "num_hidden_layers"), n_head = NH, n_kv_head = KV,
           d_model = Cd, d_ff = size(hf, dir, "intermediate_size"), norm_eps = positive(hf, dir, "rms_norm_eps", 1e-6),
           rope_base = positive(hf, dir, "rope_theta", 10000.0), tie_embeddings = key(hf, dir, "tie_word_embeddings", false),
           init = "hf", dropout = 0.0 })
end
function from_hf.llama(hf, dir) return llama_like(hf, dir, "llama") end
-- Mistral (modeling_mistral.py MistralForCausalLM): LLaMA's block and tensor names, with a
-- sliding window (each query sees the last sliding_window keys: key j for query i when
-- i − j < sliding_window). For T <= sliding_window the window masks nothing, so the model is
-- LLaMA's exactly; the engine's attention has no window, so sliding_window bounds the sequence
-- length (block_size): a longer sequence is refused by the model, never computed unwindowed.
-- sliding_window null (Mistral-7B v0.2 and later) means full causal attention.
local function sliding_window(hf, dir, c)
  if hf.sliding_window ~= nil then
    local w = size(hf, dir, "sliding_window")
    if w < c.block_size then c.block_size = w end
  end
  return c
end
-- an explicit head_dim (Qwen3, Gemma): null or absent means hidden_size / num_attention_heads
local function head_dim(hf, dir, c, default)
  local v = hf.head_dim
  if v == nil or v == json.null then
    if default then v = default else return c end
  else
    v = size(hf, dir, "head_dim")
  end
  if v % 2 ~= 0 then fail(dir, "config.json 'head_dim' = %d must be even (RoPE rotates pairs of dims)", v) end
  if v * c.n_head ~= c.d_model then c.head_dim = v end
  return c
end
function to_hf.llama(c, sp)
  return { architectures = { "LlamaForCausalLM" }, model_type = "llama", vocab_size = c.vocab_size,
           max_position_embeddings = c.block_size, hidden_size = c.d_model, intermediate_size = c.d_ff,
           num_hidden_layers = c.n_layer, num_attention_heads = c.n_head, num_key_value_heads = c.n_kv_head or c.n_head,
           hidden_act = "silu", rms_norm_eps = c.norm_eps, rope_theta = c.rope_base, tie_word_embeddings = c.tie_embeddings == true,
           attention_bias = false, mlp_bias = false, bos_token_id = sp.bos, eos_token_id = sp.eos }
end
layout.llama = {
  prefixes = { "model.", "" }, export_prefix = "model.",
  ignore = { "^layers%.%d+%.self_attn%.rotary_emb%.inv_freq$" },
  global = function(c)
    local Cd, V = c.d_model, c.vocab_size
    local g = {
      E("embed_tokens.weight", { V, Cd }, "vocab_size, hidden_size", one("embed_tokens.weight")),
      E("norm.weight", { Cd }, "hidden_size", one("norm.weight")),
    }
    return head_e(g, c, "embed_tokens.weight")
  end,
  layer = function(c, l, lo)
    local Cd, F = c.d_model, c.d_ff
    local HD = Cd / c.n_head
    local KV = (c.n_kv_head or c.n_head) * HD
    local h, o = "layers." .. l .. ".", "layers" .. lo .. "."
    return {
      E(h .. "self_attn.q_proj.weight", { Cd, Cd }, "hidden_size", one(o .. "attn.q_proj.weight")),
      E(h .. "self_attn.k_proj.weight", { KV, Cd }, "num_key_value_heads × head_dim, hidden_size", one(o .. "attn.k_proj.weight")),
      E(h .. "self_attn.v_proj.weight", { KV, Cd }, "num_key_value_heads × head_dim, hidden_size", one(o .. "attn.v_proj.weight")),
      E(h .. "self_attn.o_proj.weight", { Cd, Cd }, "hidden_size", one(o .. "attn.o_proj.weight")),
      E(h .. "mlp.gate_proj.weight", { F, Cd }, "intermediate_size, hidden_size", one(o .. "mlp.gate_proj.weight")),
      E(h .. "mlp.up_proj.weight", { F, Cd }, "intermediate_size, hidden_size", one(o .. "mlp.up_proj.weight")),
      E(h .. "mlp.down_proj.weight", { Cd, F }, "hidden_size, intermediate_size", one(o .. "mlp.down_proj.weight")),
      E(h .. "input_layernorm.weight", { Cd }, "hidden_size", one(o .. "ln1.weight")),
      E(h .. "post_attention_layernorm.weight", { Cd }, "hidden_size", one(o .. "ln2.weight")),
    }
  end,
}

-- the LLaMA-named decoders with the imported families' options (Qwen2, Qwen3, Gemma, Gemma 2):
-- LLaMA's tensors with head_dim (q (NH·HD, C), k/v (NKV·HD, C), o (C, NH·HD)), q/k/v biases
-- (qkv_bias), o bias (o_bias), q_norm/k_norm (HD) (qk_norm); norms names the norms of a layer
-- as { file name, the project's } in order; plus_one: the file holds w of a (1 + w) RMSNorm
local function llama_named(norms, plus_one)
  return function(c, l, lo)
    local Cd, F = c.d_model, c.d_ff
    local HD = (c.head_dim or 0) > 0 and c.head_dim or Cd / c.n_head
    local Q, KV = c.n_head * HD, (c.n_kv_head or c.n_head) * HD
    local h, o = "layers." .. l .. ".", "layers" .. lo .. "."
    local hd = (c.head_dim or 0) > 0 and "head_dim" or "hidden_size / num_attention_heads"
    local qw, kw = "num_attention_heads × " .. hd .. ", hidden_size", "num_key_value_heads × " .. hd .. ", hidden_size"
    local out = {
      E(h .. "self_attn.q_proj.weight", { Q, Cd }, qw, one(o .. "attn.q_proj.weight")),
      E(h .. "self_attn.k_proj.weight", { KV, Cd }, kw, one(o .. "attn.k_proj.weight")),
      E(h .. "self_attn.v_proj.weight", { KV, Cd }, kw, one(o .. "attn.v_proj.weight")),
      E(h .. "self_attn.o_proj.weight", { Cd, Q }, "hidden_size, num_attention_heads × " .. hd, one(o .. "attn.o_proj.weight")),
    }
    if c.qkv_bias then
      out[#out + 1] = E(h .. "self_attn.q_proj.bias", { Q }, "num_attention_heads × " .. hd, one(o .. "attn.q_proj.bias"))
      out[#out + 1] = E(h .. "self_attn.k_proj.bias", { KV }, "num_key_value_heads × " .. hd, one(o .. "attn.k_proj.bias"))
      out[#out + 1] = E(h .. "self_attn.v_proj.bias", { KV }, "num_key_value_heads × " .. hd, one(o .. "attn.v_proj.bias"))
    end
    if c.o_bias then out[#out + 1] = E(h .. "self_attn.o_proj.bias", { Cd }, "hidden_size", one(o .. "attn.o_proj.bias")) end
    if c.qk_norm then
      out[#out + 1] = E(h .. "self_attn.q_norm.weight", { HD }, hd, one(o .. "attn.q_norm.weight"))
      out[#out + 1] = E(h .. "self_attn.k_norm.weight", { HD }, hd, one(o .. "attn.k_norm.weight"))
    end
    out[#out + 1] = E(h .. "mlp.gate_proj.weight", { F, Cd }, "intermediate_size, hidden_size", one(o .. "mlp.gate_proj.weight"))
    out[#out + 1] = E(h .. "mlp.up_proj.weight", { F, Cd }, "intermediate_size, hidden_size", one(o .. "mlp.up_proj.weight"))
    out[#out + 1] = E(h .. "mlp.down_proj.weight", { Cd, F }, "hidden_size, intermediate_size", one(o .. "mlp.down_proj.weight"))
    for _, n in ipairs(norms) do
      out[#out + 1] = E(h .. n[1] .. ".weight", { Cd }, "hidden_size", one(o .. n[2] .. ".weight"), { plus_one = plus_one })
    end
    return out
  end
end
local LLAMA_NORMS = { { "input_layernorm", "ln1" }, { "post_attention_layernorm", "ln2" } }
local function llama_family(layer, plus_one)
  return {
    prefixes = { "model.", "" }, export_prefix = "model.",
    ignore = { "^layers%.%d+%.self_attn%.rotary_emb%.inv_freq$" },
    global = function(c)
      local g = layout.llama.global(c)
      if plus_one then g[2].plus_one = true end   -- norm.weight
      return g
    end,
    layer = layer,
  }
end

return { from_hf = from_hf, to_hf = to_hf, layout = layout,
         llama_like = llama_like, sliding_window = sliding_window, head_dim = head_dim, llama_named = llama_named,
         llama_family = llama_family, LLAMA_NORMS = LLAMA_NORMS, layer_key = { llama = "num_hidden_layers" },
         auto_class = { llama = "AutoModelForCausalLM" } }
