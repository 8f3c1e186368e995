-- pretrained/families/opt — OPT (modeling_opt.py OPTForCausalLM)
--   opt   OPT: learned positions with the offset 2; project_in/project_out when
--         word_embed_proj_dim ≠ hidden_size; pre- or post-LN (do_layer_norm_before).
-- (config.json -> the project's config: from_hf; tensor names: layout; see families/shared.lua)
local S = require "outlierlab.pretrained.families.shared"
local key, size, heads, must, act, E, one = S.key, S.size, S.heads, S.must, S.act, S.E, S.one
local ACT_HF, block_entries = S.ACT_HF, S.block_entries
local from_hf, to_hf, layout = {}, {}, {}

function from_hf.opt(hf, dir)
  must(hf, dir, "layer_norm_elementwise_affine", { true }, "opt")
  must(hf, dir, "tie_word_embeddings", { true }, "opt")
  must(hf, dir, "_remove_final_layer_norm", { false }, "opt")
  local Cd, NH = size(hf, dir, "hidden_size"), size(hf, dir, "num_attention_heads")
  heads(dir, "num_attention_heads", NH, "hidden_size", Cd)
  local E = size(hf, dir, "word_embed_proj_dim", Cd)
  return { family = "opt", vocab_size = size(hf, dir, "vocab_size"), block_size = size(hf, dir, "max_position_embeddings"),
           n_layer = size(hf, dir, "num_hidden_layers"), n_head = NH, d_model = Cd,
           d_ff = size(hf, dir, "ffn_dim"), bias = key(hf, dir, "enable_bias", true), dropout = 0.0, norm_eps = 1e-5,
           act = act(hf, dir, "activation_function", "relu", "opt"), d_embed = E ~= Cd and E or 0,
           ln_before = key(hf, dir, "do_layer_norm_before", true) }
end
function to_hf.opt(c, sp)
  return { architectures = { "OPTForCausalLM" }, model_type = "opt", vocab_size = c.vocab_size, max_position_embeddings = c.block_size,
           hidden_size = c.d_model, word_embed_proj_dim = (c.d_embed or 0) > 0 and c.d_embed or c.d_model, ffn_dim = c.d_ff,
           num_hidden_layers = c.n_layer, num_attention_heads = c.n_head, activation_function = ACT_HF[c.act],
           do_layer_norm_before = c.ln_before ~= false, enable_bias = c.bias ~= false, dropout = 0, attention_dropout = 0,
           layer_norm_elementwise_affine = true, tie_word_embeddings = true,
           bos_token_id = sp.bos, eos_token_id = sp.eos, pad_token_id = sp.pad }
end
layout.opt = {
  prefixes = { "model.decoder.", "decoder.", "" }, export_prefix = "model.decoder.",
  ignore = {},
  global = function(c)
    local Cd, V = c.d_model, c.vocab_size
    local Ed = (c.d_embed or 0) > 0 and c.d_embed or Cd
    local g = {
      E("embed_tokens.weight", { V, Ed }, "vocab_size, word_embed_proj_dim", one("embed_tokens.weight")),
      E("embed_positions.weight", { c.block_size + 2, Cd }, "max_position_embeddings + 2, hidden_size", one("embed_positions.weight")),
    }
    if Ed ~= Cd then
      g[#g + 1] = E("project_in.weight", { Cd, Ed }, "hidden_size, word_embed_proj_dim", one("project_in.weight"))
      g[#g + 1] = E("project_out.weight", { Ed, Cd }, "word_embed_proj_dim, hidden_size", one("project_out.weight"))
    end
    if c.ln_before ~= false then
      g[#g + 1] = E("final_layer_norm.weight", { Cd }, "hidden_size", one("final_layer_norm.weight"))
      g[#g + 1] = E("final_layer_norm.bias", { Cd }, "hidden_size", one("final_layer_norm.bias"))
    end
    g[#g + 1] = E("lm_head.weight", { V, Ed }, "vocab_size, word_embed_proj_dim", {}, { top = true, tied = "embed_tokens.weight", optional = true })
    return g
  end,
  layer = function(c, l, lo)
    return block_entries(c, "layers." .. l .. ".", "layers" .. lo .. ".", { q = "self_attn.q_proj", k = "self_attn.k_proj",
      v = "self_attn.v_proj", o = "self_attn.out_proj", ln1 = "self_attn_layer_norm", up = "fc1", down = "fc2",
      ln2 = "final_layer_norm" }, "ffn_dim", c.bias)
  end,
}


return { from_hf = from_hf, to_hf = to_hf, layout = layout, layer_key = { opt = "num_hidden_layers" },
         auto_class = { opt = "AutoModelForCausalLM" } }
