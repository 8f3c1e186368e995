-- pretrained/families/gpt2 — GPT-2 (modeling_gpt2.py GPT2LMHeadModel)
--   gpt2  GPT-2: Conv1D weights are stored (in, out), so they are transposed; the fused c_attn
--         (C, 3C) is split into q, k, v. The causal-mask buffers attn.bias/masked_bias are skipped.
-- (config.json -> the project's config: from_hf; tensor names: layout; see families/shared.lua)
local S = require "outlierlab.pretrained.families.shared"
local json = require "outlierlab.util.json"
local key, size, positive, heads, must, act, E, one = S.key, S.size, S.positive, S.heads, S.must, S.act, S.E, S.one
local ACT_HF = S.ACT_HF
local from_hf, to_hf, layout = {}, {}, {}

function from_hf.gpt2(hf, dir)
  must(hf, dir, "scale_attn_weights", { true }, "gpt2")
  must(hf, dir, "scale_attn_by_inverse_layer_idx", { false }, "gpt2")
  must(hf, dir, "add_cross_attention", { false }, "gpt2")
  local Cd, NH = size(hf, dir, "n_embd"), size(hf, dir, "n_head")
  heads(dir, "n_head", NH, "n_embd", Cd)
  local inner = hf.n_inner ~= nil and hf.n_inner ~= json.null and size(hf, dir, "n_inner") or nil
  return { family = "gpt2", vocab_size = size(hf, dir, "vocab_size"), block_size = size(hf, dir, "n_positions", 1024),
           n_layer = size(hf, dir, "n_layer"), n_head = NH, d_model = Cd,
           d_ff = inner or 4 * Cd, bias = true, dropout = 0.0,
           tie_embeddings = key(hf, dir, "tie_word_embeddings", true), norm_eps = positive(hf, dir, "layer_norm_epsilon", 1e-5),
           act = act(hf, dir, "activation_function", "gelu_new", "gpt2") }
end
function to_hf.gpt2(c, sp)
  return { architectures = { "GPT2LMHeadModel" }, model_type = "gpt2", vocab_size = c.vocab_size, n_positions = c.block_size,
           n_ctx = c.block_size, n_embd = c.d_model, n_layer = c.n_layer, n_head = c.n_head, n_inner = c.d_ff,
           activation_function = ACT_HF[c.act], layer_norm_epsilon = c.norm_eps, tie_word_embeddings = c.tie_embeddings ~= false,
           resid_pdrop = 0, embd_pdrop = 0, attn_pdrop = 0, scale_attn_weights = true, bos_token_id = sp.bos, eos_token_id = sp.eos }
end
layout.gpt2 = {
  prefixes = { "transformer.", "" }, export_prefix = "transformer.",
  ignore = { "^h%.%d+%.attn%.bias$", "^h%.%d+%.attn%.masked_bias$" },
  global = function(c)
    local Cd, V = c.d_model, c.vocab_size
    local g = {
      E("wte.weight", { V, Cd }, "vocab_size, n_embd", one("wte.weight")),
      E("wpe.weight", { c.block_size, Cd }, "n_positions, n_embd", one("wpe.weight")),
      E("ln_f.weight", { Cd }, "n_embd", one("ln_f.weight")),
      E("ln_f.bias", { Cd }, "n_embd", one("ln_f.bias")),
    }
    if c.tie_embeddings == false then g[#g + 1] = E("lm_head.weight", { V, Cd }, "vocab_size, n_embd", one("lm_head.weight"), { top = true }) end
    return g
  end,
  layer = function(c, l, lo)
    local Cd, F = c.d_model, c.d_ff
    local h, o = "h." .. l .. ".", "h" .. lo .. "."
    local w = "n_embd"
    return {
      E(h .. "ln_1.weight", { Cd }, w, one(o .. "ln1.weight")),
      E(h .. "ln_1.bias", { Cd }, w, one(o .. "ln1.bias")),
      E(h .. "attn.c_attn.weight", { Cd, 3 * Cd }, w, { { ours = o .. "attn.q_proj.weight", col0 = 0, n = Cd },
        { ours = o .. "attn.k_proj.weight", col0 = Cd, n = Cd }, { ours = o .. "attn.v_proj.weight", col0 = 2 * Cd, n = Cd } }, { t = true }),
      E(h .. "attn.c_attn.bias", { 3 * Cd }, w, { { ours = o .. "attn.q_proj.bias", off = 0 },
        { ours = o .. "attn.k_proj.bias", off = Cd }, { ours = o .. "attn.v_proj.bias", off = 2 * Cd } }),
      E(h .. "attn.c_proj.weight", { Cd, Cd }, w, { { ours = o .. "attn.o_proj.weight", col0 = 0, n = Cd } }, { t = true }),
      E(h .. "attn.c_proj.bias", { Cd }, w, one(o .. "attn.o_proj.bias")),
      E(h .. "ln_2.weight", { Cd }, w, one(o .. "ln2.weight")),
      E(h .. "ln_2.bias", { Cd }, w, one(o .. "ln2.bias")),
      E(h .. "mlp.c_fc.weight", { Cd, F }, "n_embd, n_inner", { { ours = o .. "mlp.up_proj.weight", col0 = 0, n = F } }, { t = true }),
      E(h .. "mlp.c_fc.bias", { F }, "n_inner", one(o .. "mlp.up_proj.bias")),
      E(h .. "mlp.c_proj.weight", { F, Cd }, "n_inner, n_embd", { { ours = o .. "mlp.down_proj.weight", col0 = 0, n = Cd } }, { t = true }),
      E(h .. "mlp.c_proj.bias", { Cd }, w, one(o .. "mlp.down_proj.bias")),
    }
  end,
}


return { from_hf = from_hf, to_hf = to_hf, layout = layout, layer_key = { gpt2 = "n_layer" },
         auto_class = { gpt2 = "AutoModelForCausalLM" } }
