-- pretrained/families/falcon — Falcon (modeling_falcon.py FalconForCausalLM)
--   falcon  Falcon (modeling_falcon.py FalconForCausalLM): parallel blocks from one or two
--         LayerNorms (or sequential), the fused query_key_value in _split_heads' three layouts
--         (new_decoder_architecture, multi_query, per head), rotary (from_hf.falcon, layout.falcon).
-- (config.json -> the project's config: from_hf; tensor names: layout; see families/shared.lua)
local S = require "outlierlab.pretrained.families.shared"
local json = require "outlierlab.util.json"
local fail, key, size, positive, heads, must, act, rope_scaling = S.fail, S.key, S.size, S.positive, S.heads, S.must, S.act, S.rope_scaling
local E, one, head_e, linear_e, norm_e = S.E, S.one, S.head_e, S.linear_e, S.norm_e
local from_hf, to_hf, layout = {}, {}, {}

-- Falcon (modeling_falcon.py FalconForCausalLM, FalconDecoderLayer, FalconAttention, FalconMLP):
-- LayerNorms with bias; the attention and the MLP in parallel, x + (MLP + attention)
-- (FalconDecoderLayer: mlp_output += attention_output, then + residual): with
-- new_decoder_architecture (Falcon-40B, 180B) from two LayerNorms ln_attn and ln_mlp
-- (num_ln_in_parallel_attn 2, the default; parallel = "separate") or one input_layernorm
-- (num_ln_in_parallel_attn 1, Falcon2-11B; "shared"); without it (Falcon-7B) from one
-- input_layernorm when parallel_attn ("shared"), else sequentially with post_attention_layernorm
-- before the MLP ("none"). Key/value heads: num_kv_heads with new_decoder_architecture, one with
-- multi_query (Falcon-7B), every head otherwise; their rows interleave in query_key_value
-- (layout.falcon). Rotary embedding over the whole head (rope_theta); scores × head_dim^−½;
-- FalconMLP dense_h_to_4h → activation (gelu: exact) → dense_4h_to_h; biases on every linear
-- layer when bias; ln_f; lm_head tied to word_embeddings unless tie_word_embeddings is false.
-- Refused naming the key: alibi (Falcon-RW: its ALiBi, build_alibi_tensor, is not
-- implemented), rope_scaling, apply_residual_connection_post_layernorm, and the combinations
-- FalconDecoderLayer cannot run (new_decoder_architecture without parallel_attn,
-- num_ln_in_parallel_attn 2 without new_decoder_architecture).
function from_hf.falcon(hf, dir)
  must(hf, dir, "alibi", { false }, "falcon (ALiBi, build_alibi_tensor: the Falcon-RW models, is not implemented; the rotary models are)")
  must(hf, dir, "apply_residual_connection_post_layernorm", { false }, "falcon")
  local Cd, NH = size(hf, dir, "hidden_size"), size(hf, dir, "num_attention_heads")
  heads(dir, "num_attention_heads", NH, "hidden_size", Cd)
  if (Cd / NH) % 2 ~= 0 then fail(dir, "config.json 'hidden_size' / 'num_attention_heads' = %d must be even (the rotary embedding rotates pairs of dims)", Cd / NH) end
  local new = key(hf, dir, "new_decoder_architecture", false)
  local mq = key(hf, dir, "multi_query", true)
  local par = key(hf, dir, "parallel_attn", true)
  local nln = hf.num_ln_in_parallel_attn
  if nln == json.null then nln = nil end
  if nln ~= nil then
    nln = size(hf, dir, "num_ln_in_parallel_attn")
    if nln > 2 then fail(dir, "config.json 'num_ln_in_parallel_attn' = %d must be 1 or 2", nln) end
  end
  local KV, parallel
  local kv = hf.num_kv_heads
  if kv == json.null then kv = nil end
  if new then
    if not par then fail(dir, "config.json 'parallel_attn' = false with 'new_decoder_architecture' = true is not supported for falcon (FalconDecoderLayer has no sequential form of it)") end
    KV = kv and size(hf, dir, "num_kv_heads") or NH
    heads(dir, "num_attention_heads", NH, "hidden_size", Cd, "num_kv_heads", KV)
    parallel = (nln or 2) == 2 and "separate" or "shared"
  else
    if nln == 2 then fail(dir, "config.json 'num_ln_in_parallel_attn' = 2 needs 'new_decoder_architecture' = true (FalconDecoderLayer)") end
    KV = mq and 1 or NH
    if not mq and kv and size(hf, dir, "num_kv_heads") ~= NH then
      fail(dir, "config.json 'num_kv_heads' = %d with 'multi_query' = false and 'new_decoder_architecture' = false: every head has its key and value (num_kv_heads must be num_attention_heads = %d)", kv, NH)
    end
    parallel = par and "shared" or "none"
  end
  local bias = key(hf, dir, "bias", false)
  local F = hf.ffn_hidden_size
  F = (F ~= nil and F ~= json.null) and size(hf, dir, "ffn_hidden_size") or 4 * Cd
  return rope_scaling(hf, dir, "falcon", {
    family = "llama", vocab_size = size(hf, dir, "vocab_size"), block_size = size(hf, dir, "max_position_embeddings", 2048),
    n_layer = size(hf, dir, "num_hidden_layers"), n_head = NH, n_kv_head = KV, d_model = Cd, d_ff = F,
    norm = "layernorm", norm_bias = true, norm_eps = positive(hf, dir, "layer_norm_epsilon", 1e-5), mlp = "plain",
    act = act(hf, dir, "activation", "gelu", "falcon"), mlp_bias = bias, qkv_bias = bias, o_bias = bias, parallel = parallel,
    rope_base = positive(hf, dir, "rope_theta", 10000.0), tie_embeddings = key(hf, dir, "tie_word_embeddings", true),
    init = "hf", dropout = 0.0 })
end
-- Falcon (modeling_falcon.py): transformer.word_embeddings, transformer.h.{l}.{input_layernorm |
-- ln_attn, ln_mlp | input_layernorm, post_attention_layernorm}, self_attention.query_key_value,
-- self_attention.dense, mlp.dense_h_to_4h, mlp.dense_4h_to_h (biases when bias),
-- transformer.ln_f, lm_head (tied unless tie_word_embeddings is false).
-- query_key_value's rows, as FalconAttention._split_heads reads them: groups g = 0 … NKV−1 of
-- NH/NKV query heads, then one key head, then one value head (head_dim rows each). With
-- new_decoder_architecture that is its view (…, NKV, NH/NKV + 2, head_dim) (key and value
-- broadcast to the group's query heads: the model's grouped-query attention); with multi_query
-- (NKV = 1) the view (…, NH + 2, head_dim): every query head, then k, then v; otherwise
-- (NKV = NH) the view (…, NH, 3, head_dim): q, k, v of each head in turn. Each head's rows are
-- copied into the project's q, k or v (parts with dst; runs that stay contiguous merged).
local function falcon_qkv_parts(o, what, NH, NKV, HD, width)
  local parts, rep, n = {}, NH / NKV, HD * width
  local function put(ours, row, dst_row)
    local last = parts[#parts]
    if last and last.ours == ours and last.off + last.n == row * n and last.dst + last.n == dst_row * n then
      last.n = last.n + n
    else
      parts[#parts + 1] = { ours = ours, off = row * n, n = n, dst = dst_row * n }
    end
  end
  for g = 0, NKV - 1 do
    local first = g * (rep + 2)
    for j = 0, rep - 1 do put(o .. "attn.q_proj." .. what, first + j, g * rep + j) end
    put(o .. "attn.k_proj." .. what, first + rep, g)
    put(o .. "attn.v_proj." .. what, first + rep + 1, g)
  end
  return parts
end
local FALCON_NORMS = { separate = { { "ln_attn", "ln1" }, { "ln_mlp", "ln2" } }, shared = { { "input_layernorm", "ln1" } },
                       none = { { "input_layernorm", "ln1" }, { "post_attention_layernorm", "ln2" } } }
layout.falcon = {
  prefixes = { "transformer.", "" }, export_prefix = "transformer.",
  ignore = {},
  global = function(c)
    local Cd, V = c.d_model, c.vocab_size
    local g = { E("word_embeddings.weight", { V, Cd }, "vocab_size, hidden_size", one("embed_tokens.weight")) }
    norm_e(g, "ln_f", "norm", Cd, "hidden_size", true)
    return head_e(g, c, "word_embeddings.weight")
  end,
  layer = function(c, l, lo)
    local Cd, F, NH, NKV = c.d_model, c.d_ff, c.n_head, c.n_kv_head or c.n_head
    local HD = Cd / NH
    local h, o = "h." .. l .. ".", "layers" .. lo .. "."
    local rows, why = (NH + 2 * NKV) * HD, "(num_attention_heads + 2 × key-value heads (num_kv_heads, 1 with multi_query)) × head_dim"
    local out = { E(h .. "self_attention.query_key_value.weight", { rows, Cd }, why .. ", hidden_size", falcon_qkv_parts(o, "weight", NH, NKV, HD, Cd)) }
    if c.qkv_bias then out[2] = E(h .. "self_attention.query_key_value.bias", { rows }, why, falcon_qkv_parts(o, "bias", NH, NKV, HD, 1)) end
    linear_e(out, h .. "self_attention.dense", o .. "attn.o_proj", Cd, Cd, "hidden_size, hidden_size", c.o_bias)
    linear_e(out, h .. "mlp.dense_h_to_4h", o .. "mlp.up_proj", F, Cd, "ffn_hidden_size, hidden_size", c.mlp_bias)
    linear_e(out, h .. "mlp.dense_4h_to_h", o .. "mlp.down_proj", Cd, F, "hidden_size, ffn_hidden_size", c.mlp_bias)
    for _, n in ipairs(FALCON_NORMS[c.parallel]) do norm_e(out, h .. n[1], o .. n[2], Cd, "hidden_size", true) end
    return out
  end,
}


return { from_hf = from_hf, to_hf = to_hf, layout = layout, layer_key = { falcon = "num_hidden_layers" },
         auto_class = { falcon = "AutoModelForCausalLM" } }
