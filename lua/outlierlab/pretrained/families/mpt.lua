-- pretrained/families/mpt — MPT (modeling_mpt.py MptForCausalLM)
--   mpt   MPT (modeling_mpt.py MptForCausalLM): ALiBi, LayerNorms without bias, fused Wqkv,
--         clip_qkv, softmax_scale, tied head (from_hf.mpt, layout.mpt).
-- (config.json -> the project's config: from_hf; tensor names: layout; see families/shared.lua)
local S = require "outlierlab.pretrained.families.shared"
local json = require "outlierlab.util.json"
local fail, show, key, size, positive, heads, must, act = S.fail, S.show, S.key, S.size, S.positive, S.heads, S.must, S.act
local sub, E, one, head_e, linear_e, norm_e = S.sub, S.E, S.one, S.head_e, S.linear_e, S.norm_e
local from_hf, to_hf, layout = {}, {}, {}

-- MPT (modeling_mpt.py MptForCausalLM, MptBlock, MptAttention, MptMLP, build_mpt_alibi_tensor;
-- MptConfig with its attn_config): pre-LN blocks with LayerNorms without bias (norm_1, norm_2,
-- norm_f: "self.norm_1.bias = None"); Wqkv (3·d_model, d_model) chunked into q, k, v, clamped
-- to [−clip_qkv, clip_qkv] first when attn_config.clip_qkv is set (the model's clip_qkv:
-- norms.clip); scores × softmax_scale (null: (d_model / n_heads)^−½) plus ALiBi:
-- slope_h·(j − (T − 1)) for key j, slopes 2^(−i·alibi_bias_max/n), i = 1 … n, n the power of two
-- ≥ n_heads, and for n_heads < n the odd-indexed slopes first, then the even ones (the model's
-- alibi: common.alibi_slopes), with alibi_bias_max 8 whatever attn_config says (MptModel.forward
-- calls build_mpt_alibi_tensor without it, so transformers always uses 8; the key is checked, not
-- used); no positions otherwise; out_proj; MptMLP up_proj (4·d_model: HF
-- ignores expansion_ratio) → exact GELU → down_proj, no biases; head tied to wte.
-- Refused naming the key: what HF's MptAttention does not compute (attn_config.alibi false,
-- attn_type other than multihead_attention, qk_ln, prefix_lm), no_bias false, logit_scale,
-- an expansion_ratio other than 4, an untied head.
function from_hf.mpt(hf, dir)
  local Cd, NH = size(hf, dir, "d_model"), size(hf, dir, "n_heads")
  heads(dir, "n_heads", NH, "d_model", Cd)
  if key(hf, dir, "expansion_ratio", 4, "number") ~= 4 then
    fail(dir, "config.json 'expansion_ratio' = %s is not supported for mpt (modeling_mpt.py's MptMLP has 4 × d_model)", show(hf.expansion_ratio))
  end
  must(hf, dir, "no_bias", { true }, "mpt (modeling_mpt.py's layers have no biases)")
  must(hf, dir, "norm_type", { "low_precision_layernorm", "layernorm" }, "mpt")
  must(hf, dir, "logit_scale", { json.null }, "mpt")
  must(hf, dir, "tie_word_embeddings", { true }, "mpt")
  local ac = sub(hf, dir, "attn_config") or {}
  must(ac, dir, "attn_config.alibi", { true }, "mpt (HF's MptModel always adds ALiBi)")
  must(ac, dir, "attn_config.attn_type", { "multihead_attention" }, "mpt")
  must(ac, dir, "attn_config.qk_ln", { false }, "mpt")
  must(ac, dir, "attn_config.prefix_lm", { false }, "mpt")
  local function opt_number(k, what)   -- null or absent: 0
    local v = ac[k]
    if v == nil or v == json.null then return 0 end
    v = key(ac, dir, k, 0, "number")
    if not (v >= 0 and v < math.huge) then fail(dir, "config.json '%s' = %s must be %s", k, show(v), what) end
    return v
  end
  local scale = opt_number("attn_config.softmax_scale", "a positive number or null")
  if ac["attn_config.softmax_scale"] ~= nil and ac["attn_config.softmax_scale"] ~= json.null and scale == 0 then
    fail(dir, "config.json 'attn_config.softmax_scale' = 0 must be a positive number or null")
  end
  return {
    family = "llama", vocab_size = size(hf, dir, "vocab_size"), block_size = size(hf, dir, "max_seq_len", 2048),
    n_layer = size(hf, dir, "n_layers"), n_head = NH, n_kv_head = NH, d_model = Cd, d_ff = 4 * Cd,
    norm = "layernorm", norm_bias = false, norm_eps = positive(hf, dir, "layer_norm_epsilon", 1e-5), mlp = "plain",
    act = "gelu_erf", rope_base = 0.0, alibi = positive(ac, dir, "attn_config.alibi_bias_max", 8) and 8,
    attn_scale = scale, clip_qkv = opt_number("attn_config.clip_qkv", "a non-negative number or null (0: no clamp, as MptAttention's `if self.clip_qkv`)"),
    tie_embeddings = true, init = "hf", dropout = 0.0 }
end
-- MPT (modeling_mpt.py): transformer.wte, transformer.blocks.{l}.{norm_1, attn.Wqkv, attn.out_proj,
-- norm_2, ffn.up_proj, ffn.down_proj}, transformer.norm_f (no biases); lm_head tied to wte.
-- Wqkv's rows are q | k | v (mixed_qkv.chunk(3, dim=2)).
layout.mpt = {
  prefixes = { "transformer.", "" }, export_prefix = "transformer.",
  ignore = {},
  global = function(c)
    local g = { E("wte.weight", { c.vocab_size, c.d_model }, "vocab_size, d_model", one("embed_tokens.weight")),
                E("norm_f.weight", { c.d_model }, "d_model", one("norm.weight")) }
    return head_e(g, c, "wte.weight")
  end,
  layer = function(c, l, lo)
    local Cd, F = c.d_model, c.d_ff
    local h, o = "blocks." .. l .. ".", "layers" .. lo .. "."
    local out = { E(h .. "attn.Wqkv.weight", { 3 * Cd, Cd }, "3 × d_model, d_model", { { ours = o .. "attn.q_proj.weight", off = 0 },
      { ours = o .. "attn.k_proj.weight", off = Cd * Cd }, { ours = o .. "attn.v_proj.weight", off = 2 * Cd * Cd } }) }
    linear_e(out, h .. "attn.out_proj", o .. "attn.o_proj", Cd, Cd, "d_model, d_model")
    linear_e(out, h .. "ffn.up_proj", o .. "mlp.up_proj", F, Cd, "4 × d_model, d_model")
    linear_e(out, h .. "ffn.down_proj", o .. "mlp.down_proj", Cd, F, "d_model, 4 × d_model")
    norm_e(out, h .. "norm_1", o .. "ln1", Cd, "d_model")
    norm_e(out, h .. "norm_2", o .. "ln2", Cd, "d_model")
    return out
  end,
}

return { from_hf = from_hf, to_hf = to_hf, layout = layout, layer_key = { mpt = "n_layers" },
         auto_class = { mpt = "AutoModelForCausalLM" } }
