-- pretrained/families/bert — BERT (modeling_bert.py BertForMaskedLM)
--   bert  BERT (BertForMaskedLM names, bert.* and cls.*): pooler when present, the MLM head
--         (transform + bias, decoder tied to the word embedding); the NSP head is skipped.
-- (config.json -> the project's config: from_hf; tensor names: layout; see families/shared.lua)
local S = require "outlierlab.pretrained.families.shared"
local size, positive, heads, must, act, E, one = S.size, S.positive, S.heads, S.must, S.act, S.E, S.one
local ACT_HF, block_entries = S.ACT_HF, S.block_entries
local from_hf, to_hf, layout = {}, {}, {}

function from_hf.bert(hf, dir)
  must(hf, dir, "position_embedding_type", { "absolute" }, "bert")
  must(hf, dir, "is_decoder", { false }, "bert")
  must(hf, dir, "add_cross_attention", { false }, "bert")
  local Cd, NH = size(hf, dir, "hidden_size"), size(hf, dir, "num_attention_heads")
  heads(dir, "num_attention_heads", NH, "hidden_size", Cd)
  return { family = "bert", vocab_size = size(hf, dir, "vocab_size"), block_size = size(hf, dir, "max_position_embeddings", 512),
           type_vocab_size = size(hf, dir, "type_vocab_size", 2), n_layer = size(hf, dir, "num_hidden_layers"),
           n_head = NH, d_model = Cd,
           d_ff = size(hf, dir, "intermediate_size"), dropout = 0.0, norm_eps = positive(hf, dir, "layer_norm_eps", 1e-12),
           act = act(hf, dir, "hidden_act", "gelu", "bert"), pooler = false }
end
function to_hf.bert(c, sp)
  if (c.rope_base or 0) > 0 then
    error("hf.export: a BERT with rotary positions (rope_base = " .. tostring(c.rope_base) .. ", the model organism's encoder) " ..
          "has no Hugging Face BertForMaskedLM layout (BERT has a learned position table)", 0)
  end
  return { architectures = { "BertForMaskedLM" }, model_type = "bert", vocab_size = c.vocab_size, max_position_embeddings = c.block_size,
           type_vocab_size = c.type_vocab_size, hidden_size = c.d_model, intermediate_size = c.d_ff,
           num_hidden_layers = c.n_layer, num_attention_heads = c.n_head, hidden_act = ACT_HF[c.act], layer_norm_eps = c.norm_eps,
           hidden_dropout_prob = 0, attention_probs_dropout_prob = 0, position_embedding_type = "absolute", pad_token_id = sp.pad }
end
layout.bert = {
  prefixes = { "bert.", "" }, export_prefix = "bert.",
  ignore = { "^cls%.seq_relationship%.", "^embeddings%.position_ids$" },
  aliases = { ["LayerNorm.weight"] = "LayerNorm.gamma", ["LayerNorm.bias"] = "LayerNorm.beta" },
  global = function(c, d)
    local Cd, V = c.d_model, c.vocab_size
    local g = {
      E("embeddings.word_embeddings.weight", { V, Cd }, "vocab_size, hidden_size", one("embeddings.word.weight")),
      E("embeddings.position_embeddings.weight", { c.block_size, Cd }, "max_position_embeddings, hidden_size", one("embeddings.position.weight")),
      E("embeddings.token_type_embeddings.weight", { c.type_vocab_size, Cd }, "type_vocab_size, hidden_size", one("embeddings.token_type.weight")),
      E("embeddings.LayerNorm.weight", { Cd }, "hidden_size", one("embeddings.ln.weight")),
      E("embeddings.LayerNorm.bias", { Cd }, "hidden_size", one("embeddings.ln.bias")),
    }
    if c.pooler then
      g[#g + 1] = E("pooler.dense.weight", { Cd, Cd }, "hidden_size", one("pooler.weight"))
      g[#g + 1] = E("pooler.dense.bias", { Cd }, "hidden_size", one("pooler.bias"))
    end
    local head = { top = true, optional = true }
    g[#g + 1] = E("cls.predictions.transform.dense.weight", { Cd, Cd }, "hidden_size", one("mlm.dense.weight"), head)
    g[#g + 1] = E("cls.predictions.transform.dense.bias", { Cd }, "hidden_size", one("mlm.dense.bias"), head)
    g[#g + 1] = E("cls.predictions.transform.LayerNorm.weight", { Cd }, "hidden_size", one("mlm.ln.weight"), head)
    g[#g + 1] = E("cls.predictions.transform.LayerNorm.bias", { Cd }, "hidden_size", one("mlm.ln.bias"), head)
    g[#g + 1] = E("cls.predictions.bias", { V }, "vocab_size", one("mlm.bias"), head)
    g[#g + 1] = E("cls.predictions.decoder.weight", { V, Cd }, "vocab_size, hidden_size", {},
                  { top = true, optional = true, tied = "embeddings.word_embeddings.weight" })
    g[#g + 1] = E("cls.predictions.decoder.bias", { V }, "vocab_size", {}, { top = true, optional = true, tied = "cls.predictions.bias" })
    return g
  end,
  layer = function(c, l, lo)
    return block_entries(c, "encoder.layer." .. l .. ".", "layer" .. lo .. ".", { q = "attention.self.query",
      k = "attention.self.key", v = "attention.self.value", o = "attention.output.dense", ln1 = "attention.output.LayerNorm",
      up = "intermediate.dense", down = "output.dense", ln2 = "output.LayerNorm" }, "intermediate_size")
  end,
}


return { from_hf = from_hf, to_hf = to_hf, layout = layout, layer_key = { bert = "num_hidden_layers" },
         auto_class = { bert = "AutoModelForMaskedLM" } }
