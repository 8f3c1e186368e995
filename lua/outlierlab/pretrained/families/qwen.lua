-- pretrained/families/qwen — Qwen2, Qwen2.5, Qwen3 (modeling_qwen2.py, modeling_qwen3.py)
--   qwen2, qwen3, gemma, gemma2  (modeling_qwen2.py, modeling_qwen3.py, modeling_gemma.py,
--         modeling_gemma2.py): LLaMA's names, imported into the llama model with the options of
--         models/llama.lua (q/k/v biases; q_norm/k_norm and head_dim; Gemma's (1 + w) norm gains
--         stored as 1 + w, GeGLU, √d embedding scale; Gemma 2's four norms, soft-capping,
--         query_pre_attn_scalar and a window on the even layers), see from_hf.qwen2 … gemma2.
-- (config.json -> the project's config: from_hf; tensor names: layout; see families/shared.lua)
local S = require "outlierlab.pretrained.families.shared"
local json = require "outlierlab.util.json"
local fail, key = S.fail, S.key
local llama = require "outlierlab.pretrained.families.llama"
local llama_like, head_dim = llama.llama_like, llama.head_dim
local llama_family, llama_named, LLAMA_NORMS = llama.llama_family, llama.llama_named, llama.LLAMA_NORMS
local from_hf, to_hf, layout = {}, {}, {}

-- the keys of a LLaMA-like block that these families do not use or refuse (named in messages)
local function no_window(hf, dir, fam)
  if hf.use_sliding_window == true then
    fail(dir, "config.json 'use_sliding_window' = true is not supported for %s (the released models have false: full causal attention)", fam)
  end
end
-- Qwen2 / Qwen2.5 (modeling_qwen2.py Qwen2ForCausalLM, Qwen2Attention): LLaMA's block with
-- biases on q_proj, k_proj and v_proj (bias=True) and none on o_proj; tied (0.5B–3B) or
-- untied head. use_sliding_window (false in every released model) is refused when true.
function from_hf.qwen2(hf, dir)
  no_window(hf, dir, "qwen2")
  local hf2 = setmetatable({ attention_bias = false }, { __index = hf })
  local c = llama_like(hf2, dir, "qwen2")
  c.qkv_bias = true
  return c
end
-- Qwen3 (modeling_qwen3.py Qwen3ForCausalLM, Qwen3Attention): an explicit head_dim (often
-- n_head·head_dim ≠ hidden_size), q_norm and k_norm — Qwen3RMSNorm(head_dim) applied to every
-- head of q and k after the projection and before RoPE — and no biases unless attention_bias
-- (then on q, k, v and o).
function from_hf.qwen3(hf, dir)
  no_window(hf, dir, "qwen3")
  local ab = key(hf, dir, "attention_bias", false)
  local hf2 = setmetatable({ attention_bias = false, head_dim = json.null }, { __index = hf })
  local c = head_dim(hf, dir, llama_like(hf2, dir, "qwen3"), 128)
  c.qk_norm = true
  c.qkv_bias, c.o_bias = ab, ab
  return c
end
layout.qwen2 = llama_family(llama_named(LLAMA_NORMS))
layout.qwen3 = layout.qwen2

return { from_hf = from_hf, to_hf = to_hf, layout = layout, layer_key = { qwen2 = "num_hidden_layers", qwen3 = "num_hidden_layers" },
         auto_class = { qwen2 = "AutoModelForCausalLM", qwen3 = "AutoModelForCausalLM" } }
