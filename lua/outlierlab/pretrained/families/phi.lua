-- pretrained/families/phi — Phi-1, 1.5, 2 (modeling_phi.py PhiForCausalLM)
--   phi   Phi-1/1.5/2 (modeling_phi.py PhiForCausalLM): one LayerNorm feeding attention and MLP in
--         parallel, partial rotary, biases everywhere, lm_head bias, optional qk_layernorm
--         (from_hf.phi, layout.phi).
-- (config.json -> the project's config: from_hf; tensor names: layout; see families/shared.lua)
local S = require "outlierlab.pretrained.families.shared"
local json = require "outlierlab.util.json"
local fail, show, key, int, size, positive, heads, must = S.fail, S.show, S.key, S.int, S.size, S.positive, S.heads, S.must
local act, rope_scaling, E, one, linear_e, norm_e = S.act, S.rope_scaling, S.E, S.one, S.linear_e, S.norm_e
local from_hf, to_hf, layout = {}, {}, {}

-- Phi-1, 1.5, 2 (modeling_phi.py PhiForCausalLM, PhiDecoderLayer, PhiAttention, PhiMLP): one
-- LayerNorm with bias (input_layernorm) feeds the attention and the MLP, whose outputs are
-- added to the residual together (PhiDecoderLayer: attn_outputs + feed_forward_hidden_states +
-- residual: the model's parallel = "shared"); q_proj, k_proj, v_proj and dense (the output
-- projection) with biases; the rotary embedding on the first rotary_ndims = int(head_dim ·
-- partial_rotary_factor) dims of each head (rotate_half on that slice, θ_i =
-- rope_theta^(−2i/rotary_ndims)), the other dims passed through (rotary_dim); optional
-- qk_layernorm: LayerNorm(head_dim) with bias on every q and k head after the projection and
-- before the rotary embedding (qk_norm with norm = "layernorm"); PhiMLP fc1 → hidden_act
-- (gelu_new: the tanh approximation) → fc2, with biases (mlp = "plain"); final_layernorm;
-- lm_head with a bias (head_bias), untied (tie_word_embeddings true is refused).
function from_hf.phi(hf, dir)
  must(hf, dir, "tie_word_embeddings", { false }, "phi")
  local Cd, NH = size(hf, dir, "hidden_size"), size(hf, dir, "num_attention_heads")
  local KV = NH
  if hf.num_key_value_heads ~= json.null then KV = size(hf, dir, "num_key_value_heads", NH) end
  heads(dir, "num_attention_heads", NH, "hidden_size", Cd, "num_key_value_heads", KV)
  local HD = Cd / NH
  if hf.head_dim ~= nil and hf.head_dim ~= json.null and int(hf, dir, "head_dim") ~= HD then
    fail(dir, "config.json 'head_dim' = %s differs from hidden_size / num_attention_heads = %d: not supported for phi (PhiAttention's q_layernorm has hidden_size / num_attention_heads)", show(hf.head_dim), HD)
  end
  local f = key(hf, dir, "partial_rotary_factor", 0.5, "number")
  if not (f > 0 and f <= 1) then fail(dir, "config.json 'partial_rotary_factor' = %s must be in (0, 1]", show(f)) end
  local rd = math.floor(HD * f)   -- int(head_dim * partial_rotary_factor)
  if rd < 2 or rd % 2 ~= 0 then
    fail(dir, "config.json 'partial_rotary_factor' = %s gives %d rotary dims of the head's %d: they must be even and at least 2 (rotate_half pairs dim i with i + rotary_ndims/2)", show(f), rd, HD)
  end
  return rope_scaling(hf, dir, "phi", {
    family = "llama", vocab_size = size(hf, dir, "vocab_size"), block_size = size(hf, dir, "max_position_embeddings", 2048),
    n_layer = size(hf, dir, "num_hidden_layers"), n_head = NH, n_kv_head = KV, d_model = Cd, d_ff = size(hf, dir, "intermediate_size"),
    norm = "layernorm", norm_bias = true, norm_eps = positive(hf, dir, "layer_norm_eps", 1e-5), mlp = "plain",
    act = act(hf, dir, "hidden_act", "gelu_new", "phi"), mlp_bias = true, qkv_bias = true, o_bias = true,
    qk_norm = key(hf, dir, "qk_layernorm", false), parallel = "shared", rotary_dim = rd < HD and rd or 0,
    rope_base = positive(hf, dir, "rope_theta", 10000.0), tie_embeddings = false, head_bias = true, init = "hf", dropout = 0.0 })
end
-- Phi (modeling_phi.py): model.embed_tokens, model.layers.{l}.input_layernorm, self_attn.{q,k,v}_proj,
-- self_attn.dense, self_attn.{q,k}_layernorm (qk_layernorm), mlp.fc1, mlp.fc2 (all with biases),
-- model.final_layernorm, lm_head (weight and bias)
layout.phi = {
  prefixes = { "model.", "" }, export_prefix = "model.",
  ignore = { "^layers%.%d+%.self_attn%.rotary_emb%.inv_freq$", "^rotary_emb%.inv_freq$" },
  global = function(c)
    local Cd, V = c.d_model, c.vocab_size
    local g = { E("embed_tokens.weight", { V, Cd }, "vocab_size, hidden_size", one("embed_tokens.weight")) }
    norm_e(g, "final_layernorm", "norm", Cd, "hidden_size", true)
    g[#g + 1] = E("lm_head.weight", { V, Cd }, "vocab_size, hidden_size", one("lm_head.weight"), { top = true })
    g[#g + 1] = E("lm_head.bias", { V }, "vocab_size", one("lm_head.bias"), { top = true })
    return g
  end,
  layer = function(c, l, lo)
    local Cd, F, NH = c.d_model, c.d_ff, c.n_head
    local HD = Cd / NH
    local KV = (c.n_kv_head or NH) * HD
    local h, o = "layers." .. l .. ".", "layers" .. lo .. "."
    local out = {}
    linear_e(out, h .. "self_attn.q_proj", o .. "attn.q_proj", Cd, Cd, "hidden_size, hidden_size", true)
    linear_e(out, h .. "self_attn.k_proj", o .. "attn.k_proj", KV, Cd, "num_key_value_heads × head_dim, hidden_size", true)
    linear_e(out, h .. "self_attn.v_proj", o .. "attn.v_proj", KV, Cd, "num_key_value_heads × head_dim, hidden_size", true)
    linear_e(out, h .. "self_attn.dense", o .. "attn.o_proj", Cd, Cd, "hidden_size, hidden_size", true)
    if c.qk_norm then
      norm_e(out, h .. "self_attn.q_layernorm", o .. "attn.q_norm", HD, "hidden_size / num_attention_heads (qk_layernorm)", true)
      norm_e(out, h .. "self_attn.k_layernorm", o .. "attn.k_norm", HD, "hidden_size / num_attention_heads (qk_layernorm)", true)
    end
    linear_e(out, h .. "mlp.fc1", o .. "mlp.up_proj", F, Cd, "intermediate_size, hidden_size", true)
    linear_e(out, h .. "mlp.fc2", o .. "mlp.down_proj", Cd, F, "hidden_size, intermediate_size", true)
    norm_e(out, h .. "input_layernorm", o .. "ln1", Cd, "hidden_size", true)
    return out
  end,
}


return { from_hf = from_hf, to_hf = to_hf, layout = layout, layer_key = { phi = "num_hidden_layers" },
         auto_class = { phi = "AutoModelForCausalLM" } }
