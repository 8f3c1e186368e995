-- pretrained/families/mistral — Mistral (modeling_mistral.py MistralForCausalLM)
--   mistral  Mistral (modeling_mistral.py MistralForCausalLM): LLaMA's names and block;
--         sliding_window bounds the sequence length (the window masks nothing for
--         T <= sliding_window; the engine's attention has none), see from_hf.mistral.
-- (config.json -> the project's config: from_hf; tensor names: layout; see families/shared.lua)
local llama = require "outlierlab.pretrained.families.llama"
local llama_like, sliding_window = llama.llama_like, llama.sliding_window
local from_hf, to_hf, layout = {}, {}, {}
local LLAMA_LAYOUT = llama.layout.llama

function from_hf.mistral(hf, dir) return sliding_window(hf, dir, llama_like(hf, dir, "mistral")) end
layout.mistral = LLAMA_LAYOUT   -- MistralForCausalLM's names are LlamaForCausalLM's

return { from_hf = from_hf, to_hf = to_hf, layout = layout, layer_key = { mistral = "num_hidden_layers" },
         auto_class = { mistral = "AutoModelForCausalLM" } }
