-- pretrained/families/gemma — Gemma, Gemma 2 (modeling_gemma.py, modeling_gemma2.py)
--   qwen2, qwen3, gemma, gemma2  (modeling_qwen2.py, modeling_qwen3.py, modeling_gemma.py,
--         modeling_gemma2.py): LLaMA's names, imported into the llama model with the options of
--         models/llama.lua (q/k/v biases; q_norm/k_norm and head_dim; Gemma's (1 + w) norm gains
--         stored as 1 + w, GeGLU, √d embedding scale; Gemma 2's four norms, soft-capping,
--         query_pre_attn_scalar and a window on the even layers), see from_hf.qwen2 … gemma2.
-- (config.json -> the project's config: from_hf; tensor names: layout; see families/shared.lua)
local S = require "outlierlab.pretrained.families.shared"
local json = require "outlierlab.util.json"
local fail, key, size, positive, must = S.fail, S.key, S.size, S.positive, S.must
local ffi = require "ffi"
local llama = require "outlierlab.pretrained.families.llama"
local llama_like, head_dim = llama.llama_like, llama.head_dim
local llama_family, llama_named, LLAMA_NORMS = llama.llama_family, llama.llama_named, llama.LLAMA_NORMS
local from_hf, to_hf, layout = {}, {}, {}

-- Gemma's activation (modeling_gemma.py GemmaMLP): hidden_activation when given, otherwise
-- gelu_pytorch_tanh whatever hidden_act says (transformers ≥ 4.39: "Gemma's activation
-- function should be approximate GeLU and not exact GeLU")
local function gemma_act(hf, dir, fam)
  local a = hf.hidden_activation
  if a == nil or a == json.null then return "gelu_tanh" end
  a = key(hf, dir, "hidden_activation", "", "string")
  local ok = { gelu_pytorch_tanh = "gelu_tanh", gelu_new = "gelu_tanh", gelu = "gelu_erf", silu = "silu" }
  if not ok[a] then fail(dir, "config.json 'hidden_activation' = \"%s\" is not supported for %s (supported: gelu_pytorch_tanh, gelu_new, gelu, silu)", a, fam) end
  return ok[a]
end
-- Gemma (modeling_gemma.py GemmaForCausalLM): LLaMA's names and block with GemmaRMSNorm —
-- x/√(mean(x²)+eps)·(1 + w), computed in fp32: the import stores 1 + w (rounded to fp32, as
-- HF's 1.0 + weight.float()) as the gain (layout entries plus_one) —, GeGLU (gelu tanh),
-- explicit head_dim, the embeddings times √hidden_size (HF: a tensor of the hidden dtype;
-- the engine computes in fp32, so fp32(√d)) and the head tied to the embedding.
local function gemma_like(hf, dir, fam)
  must(hf, dir, "tie_word_embeddings", { true }, fam)
  local hf2 = setmetatable({ hidden_act = "silu", head_dim = json.null, tie_word_embeddings = true }, { __index = hf })
  local c = head_dim(hf, dir, llama_like(hf2, dir, fam), 256)
  c.act = gemma_act(hf, dir, fam)
  c.embed_scale = tonumber(ffi.new("float", math.sqrt(c.d_model)))
  return c
end
function from_hf.gemma(hf, dir) return gemma_like(hf, dir, "gemma") end
-- Gemma 2 (modeling_gemma2.py Gemma2ForCausalLM, Gemma2DecoderLayer, eager_attention_forward):
-- Gemma's block with four norms (input_layernorm → attention → post_attention_layernorm → +x;
-- pre_feedforward_layernorm → MLP → post_feedforward_layernorm → +x), the score scale
-- query_pre_attn_scalar^−½, attention soft-capping c·tanh(s/c) (attn_logit_softcapping), a
-- sliding window (sliding_window) on the even layers (layer_idx % 2 == 0; key j hidden from
-- query i when i − j ≥ sliding_window) and global attention on the odd ones, and final logit
-- soft-capping (final_logit_softcapping).
function from_hf.gemma2(hf, dir)
  local c = gemma_like(hf, dir, "gemma2")
  c.post_norms = true
  local q = positive(hf, dir, "query_pre_attn_scalar", 256)
  c.attn_scale = q ^ -0.5
  local function cap(k)
    local v = hf[k]
    if v == nil or v == json.null then return 0 end
    return positive(hf, dir, k)
  end
  c.attn_softcap, c.logit_softcap = cap("attn_logit_softcapping"), cap("final_logit_softcapping")
  if hf.sliding_window ~= nil and hf.sliding_window ~= json.null then
    c.window, c.window_every = size(hf, dir, "sliding_window", 4096), 2
  end
  return c
end
layout.gemma = llama_family(llama_named(LLAMA_NORMS, true), true)
layout.gemma2 = llama_family(llama_named({ { "input_layernorm", "ln1" }, { "post_attention_layernorm", "ln1_post" },
  { "pre_feedforward_layernorm", "ln2" }, { "post_feedforward_layernorm", "ln2_post" } }, true), true)


return { from_hf = from_hf, to_hf = to_hf, layout = layout, layer_key = { gemma = "num_hidden_layers", gemma2 = "num_hidden_layers" },
         auto_class = { gemma = "AutoModelForCausalLM", gemma2 = "AutoModelForCausalLM" } }
