-- models/opt — the OPT decoder QT trains (Zhang et al. 2022, "OPT"; Hugging Face
-- OPTForCausalLM with do_layer_norm_before = true, the 125m shape): token embedding +
-- learned positions, L pre-LN blocks (LayerNorm, causal attention, ReLU MLP F = 4C, biases
-- everywhere), a final LayerNorm, lm head tied to the token embedding. Dropout 0.1 after
-- the embeddings, the attention output and the MLP output (attention-probability dropout
-- is 0 in OPT-125m's config).
-- Positions: OPT's learned position table has max_positions + 2 rows and position t reads
-- row t + 2 (the offset of fairseq's padding convention), so the 125m table is 2050 × 768.
-- Init (HF OPT): weights N(0, 0.02²), biases 0, LayerNorm gains 1.
-- Two switches of Hugging Face's OPTConfig for imported checkpoints (OPT-350m uses both):
-- cfg.d_embed ≠ 0 (word_embed_proj_dim ≠ hidden_size) gives a token table of width d_embed
-- with project_in (d_embed → C) after the lookup and project_out (C → d_embed) before the
-- tied head, both without bias; cfg.ln_before = false (do_layer_norm_before) makes the blocks
-- post-LN (LN after each residual sum, "ln1"/"ln2" probes then see the normalised sums) and
-- drops the final LayerNorm.
--
--   ids (B,T) -> x = E[ids] [·W_inᵀ] + Pos[2:T+2] ["emb"] -> blocks -> ln_f ["ln_f"]
--   -> [·W_outᵀ] -> x·Eᵀ (B,T,V)
local common = require "outlierlab.models.common"
local nn = require "outlierlab.nn"
local norms = require "outlierlab.nn.norms"

local M = {}
local OPT = nn.class("OPT", common.Model)
local POS_OFFSET = 2

function M.build(ctx, cfg)
  local self = setmetatable({ ctx = ctx, cfg = cfg, name = "opt", training = true }, OPT)
  local C = cfg.d_model
  local E = (cfg.d_embed or 0) > 0 and cfg.d_embed or C
  self.embed_tokens = self:add_child(nn.Embedding(ctx, cfg.vocab_size, E, { name = "embed_tokens", std = 0.02 }))
  if E ~= C then
    self.project_in = self:add_child(common.linear(ctx, "project_in", E, C, false, 0.02))
    self.project_out = self:add_child(common.linear(ctx, "project_out", C, E, false, 0.02))
  end
  self.embed_positions = self:add_child(nn.Embedding(ctx, cfg.block_size + POS_OFFSET, C,
    { name = "embed_positions", std = 0.02 }))
  self.blocks = {}
  for l = 0, cfg.n_layer - 1 do
    self.blocks[l + 1] = self:add_child(common.PreLNBlock_new(ctx, "layers" .. l, cfg, {
      norm = "layernorm", mlp = "mlp", act = cfg.act or "relu", causal = true, bias = cfg.bias ~= false,
      std = 0.02 }))
    if cfg.ln_before == false then self.blocks[l + 1].forward = M.post_ln_forward end
  end
  if cfg.ln_before ~= false then self.ln_f = self:add_child(common.norm_new(ctx, "final_layer_norm", C, cfg, "layernorm")) end
  return self
end

-- The post-LN block of OPT with do_layer_norm_before = false (same parameters as the pre-LN
-- block): x = LN1(x + Attn(x)) ["ln1"]; x = LN2(x + MLP(x)) ["ln2" = "h"].
function M.post_ln_forward(blk, x, model, l, P, pad_mask)
  if P then P("attn_in", l, x) end
  x = blk.ln1:forward(norms.residual(model.cfg, x + model:dropout(blk.attn:forward(x, P, l, pad_mask), blk.p, 2 * l + 1)))
  if P then P("ln1", l, x) end
  local f = blk.mlp:forward(x, P, l)
  if P then P("ffn_out", l, f) end
  x = blk.ln2:forward(norms.residual(model.cfg, x + model:dropout(f, blk.p, 2 * l + 2)))
  if P then P("ln2", l, x); P("h", l, x) end
  return x
end

-- batch.ids (B,T) int32 -> the blocks' input x (B,T,C) ["emb"]
function OPT:embed(batch, opts)
  opts = opts or {}
  local cfg, P = self.cfg, opts.probe
  common.check_ids(batch.ids, "ids", "opt", 2)
  local T = batch.ids:size(1)
  common.check_block("opt", T, cfg.block_size)
  self:begin_forward(opts)
  local x = batch.ids:embedding(self.embed_tokens.weight)
  if self.project_in then x = self.project_in:forward(x) end
  x = self:dropout(x + self.embed_positions.weight:narrow(0, POS_OFFSET, T), cfg.dropout, 0)
  if P then P("emb", 0, x) end
  return x
end

-- the last blocks' output (B,T,C) -> logits (B,T,V) ["ln_f"]
function OPT:head(x, opts)
  local P = opts and opts.probe
  if self.ln_f then x = self.ln_f:forward(x) end
  if P then P("ln_f", self.cfg.n_layer, x) end
  if self.project_out then x = self.project_out:forward(x) end
  return x:linear(self.embed_tokens.weight)
end

-- batch.ids (B,T) int32 -> logits (B,T,V)
function OPT:forward(batch, opts)
  opts = opts or {}
  local x = self:embed(batch, opts)
  for l, blk in ipairs(self.blocks) do x = blk:forward(x, self, l - 1, opts.probe) end
  return self:head(x, opts)
end

function OPT:loss(batch, opts) return self:decoder_loss(batch, opts) end

function M.count(cfg)
  local C, F, V, L = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.n_layer
  local b = cfg.bias ~= false and 1 or 0
  local ln = C + b * C
  ln = ln + norms.extra_params(cfg, C, ln)
  local E = (cfg.d_embed or 0) > 0 and cfg.d_embed or C
  return V * E + (E ~= C and 2 * E * C or 0) + (cfg.block_size + POS_OFFSET) * C
       + L * (2 * ln + 4 * C * C + b * 4 * C + 2 * C * F + b * (F + C)) + (cfg.ln_before ~= false and ln or 0)
end

return M
