-- models/vit — the Vision Transformer QT trains (Dosovitskiy et al. 2021; timm
-- vit_small_patch16_224 for ViT-S/16): the image is cut into P×P patches, each flattened
-- (channel-major, as a conv kernel (C_out, 3, P, P) is) and projected by one linear layer
-- (= the stride-P convolution), optionally followed by a LayerNorm (QT's best ViT rows,
-- cfg.patch_ln); a learned [CLS] token is prepended and learned positions added; L pre-LN
-- blocks (bidirectional attention, GELU(erf) MLP F = 4C, biases); a final LayerNorm; the
-- classification head reads the [CLS] token. LayerNorm eps 1e-6 (timm).
-- cfg.dense (the organism's per-patch labels, docs/findings/organism.md "The ViT's recipe map"; off in
-- QT's ViT): a second head labels every patch token with its object's class when the patch is
-- an object patch (batch.patch_object) and with class n_classes ("background") otherwise; the
-- loss adds the mean cross entropy over the patches to the [CLS] one, so that every token's
-- output matters, as every position's does in a language model.
-- Init: weights N(0, 0.02²), biases 0, [CLS] N(0, 1e-6²) (timm), positions N(0, 0.02²).
--
--   images (B,3,H,W) -> patches (B,N,3·P·P) -> x_p = patches·W_peᵀ + b (B,N,C) [LN]
--   -> x = [cls; x_p] + pos (B,N+1,C) ["emb"] -> blocks -> norm ["ln_f"] -> head(x[:,0]) (B,K)
-- Token 0 of every probe tensor is [CLS]; token 1 + i·(W/P) + j is patch (i, j).
local common = require "outlierlab.models.common"
local nn = require "outlierlab.nn"
local norms = require "outlierlab.nn.norms"
local ol = require "outlierlab"

local M = {}
local ViT = nn.class("ViT", common.Model)

local function n_patches(cfg)
  local P = cfg.patch_size
  if cfg.image_size % P ~= 0 then
    error(string.format("models.vit: image_size %d is not a multiple of patch_size %d", cfg.image_size, P), 3)
  end
  return (cfg.image_size / P) ^ 2
end

function M.build(ctx, cfg)
  local self = setmetatable({ ctx = ctx, cfg = cfg, name = "vit", training = true }, ViT)
  local C, P, CH = cfg.d_model, cfg.patch_size, cfg.channels or 3
  local N = n_patches(cfg)
  self.patch = self:add_child(common.linear(ctx, "patch_embed", CH * P * P, C, true, 0.02))
  if cfg.patch_ln then
    self.patch_ln = self:add_child(norms.build(ctx, "patch_embed.ln", C, cfg,
      function() return nn.LayerNorm(ctx, C, { name = "patch_embed.ln", eps = cfg.norm_eps }) end))
  end
  self.cls = self:add_param(ctx:param("cls_token", { C }))
  self.cls:normal_(0, 1e-6, ctx:next_seed())
  self.pos = self:add_param(ctx:param("pos_embed", { N + 1, C }))
  self.pos:normal_(0, 0.02, ctx:next_seed())
  self.blocks = {}
  for l = 0, cfg.n_layer - 1 do
    self.blocks[l + 1] = self:add_child(common.PreLNBlock_new(ctx, "blocks" .. l, cfg, {
      norm = "layernorm", mlp = "mlp", act = cfg.act or "gelu_erf", causal = false, bias = true, std = 0.02 }))
  end
  self.norm = self:add_child(norms.build(ctx, "norm", C, cfg, function() return nn.LayerNorm(ctx, C, { name = "norm", eps = cfg.norm_eps }) end))
  self.head = self:add_child(common.linear(ctx, "head", C, cfg.n_classes, true, 0.02))
  if cfg.dense then self.dense_head = self:add_child(common.linear(ctx, "dense_head", C, cfg.n_classes + 1, true, 0.02)) end
  return self
end

-- images (B,CH,H,W) -> (B, N, CH·P·P) with N = (H/P)(W/P), patch-major rows, features in
-- (channel, row, column) order. Four-dim views and two transposes:
--   (B·CH·Hp, P, Wp, P) -T(1,2)-> (B·CH·Hp, Wp, P, P) = (B, CH, N, P·P) -T(1,2)-> (B, N, CH, P·P)
function M.patchify(images, P)
  local B, CH, H, W = images:size(0), images:size(1), images:size(2), images:size(3)
  if H % P ~= 0 or W % P ~= 0 then
    error(string.format("models.vit: image %dx%d is not a multiple of patch_size %d", H, W, P), 2)
  end
  local Hp, Wp = H / P, W / P
  local x = images:view({ B * CH * Hp, P, Wp, P }):transpose(1, 2)
  x = x:view({ B, CH, Hp * Wp, P * P }):transpose(1, 2)
  return x:view({ B, Hp * Wp, CH * P * P })
end

-- batch.images (B,CH,H,W) f32 -> class logits (B,K), and the final LayerNorm's output (B,N+1,C)
function ViT:forward_tokens(batch, opts)
  opts = opts or {}
  local cfg, P = self.cfg, opts.probe
  local img = batch.images
  if not ol.is_tensor(img) or img.dtype ~= ol.C.OL_F32 or img.ndim ~= 4 then
    error("models.vit: batch.images must be a float32 (B,3,H,W) tensor, got " .. tostring(img), 2)
  end
  local CH = cfg.channels or 3
  if img:size(1) ~= CH or img:size(2) ~= cfg.image_size or img:size(3) ~= cfg.image_size then
    error(string.format("models.vit: batch.images %s does not match the config (B,%d,%d,%d)", tostring(img),
      CH, cfg.image_size, cfg.image_size), 2)
  end
  self:begin_forward(opts)
  local B, C = img:size(0), cfg.d_model
  local xp = self.patch:forward(M.patchify(img, cfg.patch_size))
  if self.patch_ln then xp = self.patch_ln:forward(xp) end
  local cls = self.cls:view({ 1, C })
  local rows = {}
  for b = 1, B do rows[b] = cls end
  local x = ol.cat({ ol.cat(rows, 0):view({ B, 1, C }), xp }, 1) + self.pos
  x = self:dropout(x, cfg.dropout, 0)
  if P then P("emb", 0, x) end
  for l, blk in ipairs(self.blocks) do x = blk:forward(x, self, l - 1, P) end
  x = self.norm:forward(x)
  if P then P("ln_f", cfg.n_layer, x) end
  return self.head:forward(x:narrow(1, 0, 1):view({ B, C })), x
end
-- batch.images (B,CH,H,W) f32 -> class logits (B,K)
function ViT:forward(batch, opts) return (self:forward_tokens(batch, opts)) end

-- the per-patch targets of cfg.dense: (B·N) int32, the image's label at an object patch, K at a
-- background patch, -100 (ignored) where the image's label is; N: the model's patches per image
function M.dense_targets(ctx, labels, patch_object, K, N)
  if not ol.is_tensor(patch_object) or patch_object.dtype ~= ol.C.OL_I32 or patch_object.ndim ~= 2
     or patch_object:size(0) ~= labels:size(0) then
    error("models.vit: dense = true needs batch.patch_object, int32 (B, patches) (data.ImageLoader with patch =), got "
      .. tostring(patch_object), 3)
  end
  if patch_object:size(1) ~= N then
    error(string.format("models.vit: batch.patch_object %s has %d patches per image, the model %d",
      tostring(patch_object), patch_object:size(1), N), 3)
  end
  local B = patch_object:size(0)
  local t = ctx:tensor({ B * N }, { dtype = "i32", name = "dense_targets" })
  for b = 0, B - 1 do
    local y = labels.idata[b]
    for p = 0, N - 1 do
      local i = b * N + p
      t.idata[i] = y < 0 and -100 or (patch_object.idata[i] ~= 0 and y or K)
    end
  end
  return t
end

-- cross entropy on the labels (B) int32; with cfg.dense plus the mean over the patches of the
-- cross entropy of the per-patch labels (M.dense_targets)
function ViT:loss(batch, opts)
  common.check_ids(batch.labels, "labels", "vit", 1)
  local logits, x = self:forward_tokens(batch, opts)
  local loss = logits:cross_entropy(batch.labels, -100)
  if self.dense_head then
    local B, N, K = x:size(0), x:size(1) - 1, self.cfg.n_classes
    local tgt = M.dense_targets(self.ctx, batch.labels, batch.patch_object, K, N)
    local dl = self.dense_head:forward(x:narrow(1, 1, N)):view({ B * N, K + 1 })
    loss = loss + dl:cross_entropy(tgt, -100)
  end
  return loss, { ntokens = common.count_targets(batch.labels, -100), logits = logits }
end

function M.count(cfg)
  local C, F, L, P, CH = cfg.d_model, cfg.d_ff, cfg.n_layer, cfg.patch_size, cfg.channels or 3
  local N = n_patches(cfg)
  local ln = 2 * C + norms.extra_params(cfg, C, 2 * C)
  return CH * P * P * C + C + (cfg.patch_ln and ln or 0) + C + (N + 1) * C
       + L * (2 * ln + 4 * (C * C + C) + 2 * C * F + F + C) + ln + C * cfg.n_classes + cfg.n_classes
       + (cfg.dense and (C + 1) * (cfg.n_classes + 1) or 0)
end

return M
