-- pretrained/families/phi3 — Phi-3 (modeling_phi3.py Phi3ForCausalLM)
--   phi3  Phi-3 (modeling_phi3.py Phi3ForCausalLM): LLaMA's block with fused qkv_proj and
--         gate_up_proj split into q, k, v, gate, up by rows (layout.phi3); sliding_window as
--         Mistral's.
-- (config.json -> the project's config: from_hf; tensor names: layout; see families/shared.lua)
local S = require "outlierlab.pretrained.families.shared"
local must, E, one = S.must, S.E, S.one
local llama = require "outlierlab.pretrained.families.llama"
local llama_like, sliding_window = llama.llama_like, llama.sliding_window
local from_hf, to_hf, layout = {}, {}, {}
local LLAMA_LAYOUT = llama.layout.llama

-- Phi-3 (modeling_phi3.py Phi3ForCausalLM; Phi-3-mini/medium 4k): LLaMA's block (RMSNorm,
-- rotate-half RoPE over the whole head, SwiGLU) with fused projections: qkv_proj (q | k | v
-- rows: num_attention_heads·head_dim, then num_key_value_heads·head_dim twice) and
-- gate_up_proj (gate | up rows: modeling_phi3's chunk(2, dim=-1) then up · silu(gate)); the
-- import copies each row block into the project's q, k, v, gate and up (layout.phi3).
-- sliding_window as Mistral's. Refused: rope_scaling (the 128k models' "longrope"/"su") and a
-- partial_rotary_factor below 1 (Phi-4-mini).
function from_hf.phi3(hf, dir)
  must(hf, dir, "partial_rotary_factor", { 1, 1.0 }, "phi3")
  return sliding_window(hf, dir, llama_like(hf, dir, "phi3"))
end
layout.phi3 = {
  prefixes = { "model.", "" }, export_prefix = "model.",
  ignore = { "^layers%.%d+%.self_attn%.rotary_emb%.inv_freq$" },
  global = LLAMA_LAYOUT.global,
  layer = function(c, l, lo)
    local Cd, F = c.d_model, c.d_ff
    local KV = (c.n_kv_head or c.n_head) * (Cd / c.n_head)
    local h, o = "layers." .. l .. ".", "layers" .. lo .. "."
    return {
      E(h .. "self_attn.qkv_proj.weight", { Cd + 2 * KV, Cd }, "hidden_size + 2 × num_key_value_heads × head_dim, hidden_size",
        { { ours = o .. "attn.q_proj.weight", off = 0 }, { ours = o .. "attn.k_proj.weight", off = Cd * Cd },
          { ours = o .. "attn.v_proj.weight", off = Cd * Cd + KV * Cd } }),
      E(h .. "self_attn.o_proj.weight", { Cd, Cd }, "hidden_size", one(o .. "attn.o_proj.weight")),
      E(h .. "mlp.gate_up_proj.weight", { 2 * F, Cd }, "2 × intermediate_size, hidden_size",
        { { ours = o .. "mlp.gate_proj.weight", off = 0 }, { ours = o .. "mlp.up_proj.weight", off = F * Cd } }),
      E(h .. "mlp.down_proj.weight", { Cd, F }, "hidden_size, intermediate_size", one(o .. "mlp.down_proj.weight")),
      E(h .. "input_layernorm.weight", { Cd }, "hidden_size", one(o .. "ln1.weight")),
      E(h .. "post_attention_layernorm.weight", { Cd }, "hidden_size", one(o .. "ln2.weight")),
    }
  end,
}


return { from_hf = from_hf, to_hf = to_hf, layout = layout, layer_key = { phi3 = "num_hidden_layers" },
         auto_class = { phi3 = "AutoModelForCausalLM" } }
