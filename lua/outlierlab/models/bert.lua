-- models/bert — the BERT encoder QT trains with masked language modelling (Devlin et al.
-- 2019; Hugging Face BertForMaskedLM): word + learned position + token-type embeddings,
-- LayerNorm, dropout; L post-LN blocks (bidirectional attention with the padding mask,
-- GELU(erf) MLP F = 4C, biases everywhere); the MLM head: dense C→C, GELU, LayerNorm, and a
-- decoder tied to the word embedding plus its own bias (V). LayerNorm eps 1e-12, dropout 0.1
-- on hidden states (attention-probability dropout is not applied: the attention variants
-- have no dropout). [CLS]/[SEP] tokens and the masking are the data's job.
-- cfg.pooler = true adds the pooler (dense C→C + tanh on [CLS]) so the count matches
-- BertModel; it is computed into m.pooled but not used by the MLM loss.
-- Init (HF BERT): weights N(0, 0.02²), biases 0, LayerNorm gains 1.
-- cfg.rope_base > 0 replaces the learned position table by rotary positions on q and k (as
-- RoFormer, Su et al. 2021): the model organism's encoder (docs/findings/organism.md), which must learn
-- heads at fixed offsets, and does so in hundreds of steps instead of the thousands a learned
-- table needs; 0 (the default) is BERT.
--
-- Post-LN block (Vaswani et al. 2017), with the probe points:
--   x ["attn_in"] -> a = Attn(x) ["attn_out"] -> x = LN1(x + drop(a)) ["ln1"]
--   -> f = MLP(x) ["mlp_up", "x_down", "ffn_out"] -> x = LN2(x + drop(f)) ["ln2" = "h"]
local common = require "outlierlab.models.common"
local nn = require "outlierlab.nn"
local norms = require "outlierlab.nn.norms"
local ol = require "outlierlab"

local M = {}
local BERT = nn.class("BERT", common.Model)

local function layernorm(ctx, name, C, cfg)
  return norms.build(ctx, name, C, cfg, function() return nn.LayerNorm(ctx, C, { name = name, eps = cfg.norm_eps }) end)
end

function M.build(ctx, cfg)
  local self = setmetatable({ ctx = ctx, cfg = cfg, name = "bert", training = true }, BERT)
  local C, F = cfg.d_model, cfg.d_ff
  self.word = self:add_child(nn.Embedding(ctx, cfg.vocab_size, C, { name = "embeddings.word", std = 0.02 }))
  if (cfg.rope_base or 0) <= 0 then
    self.pos = self:add_child(nn.Embedding(ctx, cfg.block_size, C, { name = "embeddings.position", std = 0.02 }))
  end
  local rope = (cfg.rope_base or 0) > 0 and cfg.rope_base or nil
  self.type = self:add_child(nn.Embedding(ctx, cfg.type_vocab_size, C, { name = "embeddings.token_type", std = 0.02 }))
  self.emb_ln = self:add_child(layernorm(ctx, "embeddings.ln", C, cfg))
  self.layers = {}
  for l = 0, cfg.n_layer - 1 do
    local name = "layer" .. l
    local L = { ctx = ctx }
    L.attn = self:add_child(common.Attention_new(ctx, name .. ".attn", cfg, { causal = false, bias = true, std = 0.02,
                                                                             rope = rope }))
    L.ln1 = self:add_child(layernorm(ctx, name .. ".ln1", C, cfg))
    L.mlp = self:add_child(common.MLP_new(ctx, name .. ".mlp", C, F, { act = cfg.act or "gelu_erf", bias = true, std = 0.02 }))
    L.ln2 = self:add_child(layernorm(ctx, name .. ".ln2", C, cfg))
    self.layers[l + 1] = L
  end
  if cfg.pooler then self.pooler = self:add_child(common.linear(ctx, "pooler", C, C, true, 0.02)) end
  self.head_dense = self:add_child(common.linear(ctx, "mlm.dense", C, C, true, 0.02))
  self.head_ln = self:add_child(layernorm(ctx, "mlm.ln", C, cfg))
  self.head_bias = self:add_param(ctx:param("mlm.bias", { cfg.vocab_size }))
  return self
end

-- The encoder: batch.ids (B,T) int32, batch.token_type (B,T) int32 or nil (all 0),
-- batch.pad_mask (B,T) int32 or nil (1 = real token) -> hidden states (B,T,C).
function BERT:encode(batch, opts)
  opts = opts or {}
  local cfg, P = self.cfg, opts.probe
  common.check_ids(batch.ids, "ids", "bert", 2)
  local B, T = batch.ids:size(0), batch.ids:size(1)
  common.check_block("bert", T, cfg.block_size)
  local tt = batch.token_type
  if tt then common.check_ids(tt, "token_type", "bert", 2)
  else tt = self.ctx:tensor({ B, T }, { dtype = "i32", name = "token_type" }); ol.C.ol_fill(tt, 0) end
  local pad = batch.pad_mask
  if pad then common.check_ids(pad, "pad_mask", "bert", 2) end
  self:begin_forward(opts)
  local x = batch.ids:embedding(self.word.weight) + tt:embedding(self.type.weight)
  if self.pos then x = x + self.pos.weight:narrow(0, 0, T) end
  x = self:dropout(self.emb_ln:forward(x), cfg.dropout, 0)
  if P then P("emb", 0, x) end
  for i, L in ipairs(self.layers) do
    local l = i - 1
    x = L.ln1:forward(norms.residual(cfg, x + self:dropout(L.attn:forward(x, P, l, pad), cfg.dropout, 2 * l + 1)))
    if P then P("ln1", l, x) end
    local f = L.mlp:forward(x, P, l)
    if P then P("ffn_out", l, f) end
    x = L.ln2:forward(norms.residual(cfg, x + self:dropout(f, cfg.dropout, 2 * l + 2)))
    if P then P("ln2", l, x); P("h", l, x) end
  end
  if self.pooler then
    self.pooled = self.pooler:forward(x:narrow(1, 0, 1):view({ B, cfg.d_model })):tanh()
  end
  return x
end

-- MLM head: (..., C) -> (..., V): decoder(LN(GELU(dense(x)))), decoder tied to the word embedding
function BERT:mlm_head(x)
  local y = self.head_ln:forward(self.head_dense:forward(x):gelu(self.cfg.act == "gelu_tanh" and "tanh" or "erf"))
  return y:linear(self.word.weight, self.head_bias)
end

-- -> MLM logits (B,T,V) at every position
function BERT:forward(batch, opts)
  return self:mlm_head(self:encode(batch, opts))
end

-- MLM cross entropy over the masked positions (targets −100 elsewhere). The head runs on the
-- masked rows only (gathered with the embedding op, whose backward scatters the gradient
-- back): the same loss as cross entropy of forward()'s logits, without the (B,T,V) logits
-- of the unmasked ~85 %. info.logits are those of the masked rows (M,V), in row-major order.
function BERT:loss(batch, opts)
  if not batch.targets then error("models.bert: loss needs batch.targets (B,T) int32, -100 = not masked", 2) end
  common.check_ids(batch.targets, "targets", "bert", 2)
  local h = self:encode(batch, opts)
  local B, T, Cd = h:size(0), h:size(1), h:size(2)
  local tg = batch.targets
  local M = common.count_targets(tg, -100)
  if M == 0 or M == B * T then
    local logits = self:mlm_head(h)
    return logits:cross_entropy(tg, -100), { ntokens = M, logits = logits }
  end
  local rows = self.ctx:tensor({ M }, { dtype = "i32", name = "mlm_rows" })
  local tsel = self.ctx:tensor({ M }, { dtype = "i32", name = "mlm_targets" })
  local j = 0
  for i = 0, B * T - 1 do
    if tg.idata[i] ~= -100 then rows.idata[j] = i; tsel.idata[j] = tg.idata[i]; j = j + 1 end
  end
  local logits = self:mlm_head(rows:embedding(h:view({ B * T, Cd })))
  return logits:cross_entropy(tsel, -100), { ntokens = M, logits = logits }
end

-- parameter count; also returns the parts (embeddings, layers, pooler, mlm_head)
function M.count(cfg)
  local C, F, V, L = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.n_layer
  local ln = 2 * C + norms.extra_params(cfg, C, 2 * C)
  local parts = {
    embeddings = (V + ((cfg.rope_base or 0) > 0 and 0 or cfg.block_size) + cfg.type_vocab_size) * C + ln,
    layers = L * (4 * (C * C + C) + ln + C * F + F + F * C + C + ln),
    pooler = C * C + C,
    mlm_head = C * C + C + ln + V,
  }
  local n = parts.embeddings + parts.layers + parts.mlm_head + (cfg.pooler and parts.pooler or 0)
  return n, parts
end

return M
