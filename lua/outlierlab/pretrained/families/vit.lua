-- pretrained/families/vit — ViT (modeling_vit.py ViTForImageClassification)
-- Before anything is built, open() checks the config values (sizes 1 .. 2^31-1, heads dividing
-- the width, positive finite epsilons and rope_theta, each named by its config.json key), counts
-- (config.json -> the project's config: from_hf; tensor names: layout; see families/shared.lua)
local S = require "outlierlab.pretrained.families.shared"
local fail, int, size, positive, heads, must, act, E = S.fail, S.int, S.size, S.positive, S.heads, S.must, S.act, S.E
local one = S.one
local ACT_HF, block_entries = S.ACT_HF, S.block_entries
local from_hf, to_hf, layout = {}, {}, {}

local function n_classes(hf, dir)
  if type(hf.id2label) == "table" then local n = 0 for _ in pairs(hf.id2label) do n = n + 1 end if n > 0 then return n end end
  return int(hf, dir, "num_labels", 2)
end
function from_hf.vit(hf, dir)
  must(hf, dir, "qkv_bias", { true }, "vit")
  local Cd, NH = size(hf, dir, "hidden_size"), size(hf, dir, "num_attention_heads")
  heads(dir, "num_attention_heads", NH, "hidden_size", Cd)
  local IS, PS = size(hf, dir, "image_size", 224), size(hf, dir, "patch_size", 16)
  if IS % PS ~= 0 then fail(dir, "config.json 'patch_size' = %d does not divide 'image_size' = %d", PS, IS) end
  return { family = "vit", image_size = IS, patch_size = PS,
           channels = size(hf, dir, "num_channels", 3), n_classes = n_classes(hf, dir),
           n_layer = size(hf, dir, "num_hidden_layers"), n_head = NH,
           d_model = Cd, d_ff = size(hf, dir, "intermediate_size"),
           norm_eps = positive(hf, dir, "layer_norm_eps", 1e-12), act = act(hf, dir, "hidden_act", "gelu", "vit"),
           patch_ln = false, dropout = 0.0 }
end
function to_hf.vit(c)
  local id2label = {}
  for i = 0, c.n_classes - 1 do id2label[tostring(i)] = "LABEL_" .. i end
  return { architectures = { "ViTForImageClassification" }, model_type = "vit", image_size = c.image_size, patch_size = c.patch_size,
           num_channels = c.channels or 3, hidden_size = c.d_model, intermediate_size = c.d_ff, num_hidden_layers = c.n_layer,
           num_attention_heads = c.n_head, hidden_act = ACT_HF[c.act], layer_norm_eps = c.norm_eps, qkv_bias = true,
           hidden_dropout_prob = 0, attention_probs_dropout_prob = 0, id2label = id2label }
end
layout.vit = {
  prefixes = { "vit.", "" }, export_prefix = "vit.",
  ignore = { "^pooler%.dense%." },
  global = function(c)
    local Cd, P, CH = c.d_model, c.patch_size, c.channels or 3
    local N = (c.image_size / P) ^ 2
    local head = { top = true, optional = true }
    return {
      E("embeddings.cls_token", { 1, 1, Cd }, "hidden_size", one("cls_token")),
      E("embeddings.position_embeddings", { 1, N + 1, Cd }, "(image_size / patch_size)² + 1, hidden_size", one("pos_embed")),
      E("embeddings.patch_embeddings.projection.weight", { Cd, CH, P, P }, "hidden_size, num_channels, patch_size", one("patch_embed.weight")),
      E("embeddings.patch_embeddings.projection.bias", { Cd }, "hidden_size", one("patch_embed.bias")),
      E("layernorm.weight", { Cd }, "hidden_size", one("norm.weight")),
      E("layernorm.bias", { Cd }, "hidden_size", one("norm.bias")),
      E("classifier.weight", { c.n_classes, Cd }, "id2label, hidden_size", one("head.weight"), head),
      E("classifier.bias", { c.n_classes }, "id2label", one("head.bias"), head),
    }
  end,
  layer = function(c, l, lo)
    return block_entries(c, "encoder.layer." .. l .. ".", "blocks" .. lo .. ".", { q = "attention.attention.query",
      k = "attention.attention.key", v = "attention.attention.value", o = "attention.output.dense", ln1 = "layernorm_before",
      up = "intermediate.dense", down = "output.dense", ln2 = "layernorm_after" }, "intermediate_size")
  end,
}

return { from_hf = from_hf, to_hf = to_hf, layout = layout, layer_key = { vit = "num_hidden_layers" },
         auto_class = { vit = "AutoModelForImageClassification" } }
