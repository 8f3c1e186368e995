-- models/opt — the OPT decoder QT trains (Zhang et al. 2022, "OPT"; Hugging Face
-- OPTForCausalLM with do_layer_norm_before = true, the 125m shape): token embedding +
-- learned positions, L pre-LN blocks (LayerNorm, causal attention, ReLU MLP F = 4C, biases
-- everywhere), a final LayerNorm, lm head tied to the token embedding. Dropout 0.1 after
-- the embeddings, the attention output and the MLP output (attention-probability dropout
-- is 0 in OPT-125m's config).
-- Positions: OPT's learned position table has max_positions + 2 rows and position t reads
-- row t + 2 (the offset of fairseq's padding convention), so the 125m table is 2050 × 768.
-- Init (HF OPT): weights N(0, 0.02²), biases 0, LayerNorm gains 1.
--
--   ids (B,T) -> x = E[ids] + Pos[2:T+2] ["emb"] -> blocks -> ln_f ["ln_f"] -> x·Eᵀ (B,T,V)
local common = require "outlierlab.models.common"
local nn = require "outlierlab.nn"

local M = {}
local OPT = nn.class("OPT", common.Model)
local POS_OFFSET = 2

function M.build(ctx, cfg)
  local self = setmetatable({ ctx = ctx, cfg = cfg, name = "opt", training = true }, OPT)
  local C = cfg.d_model
  self.embed_tokens = self:add_child(nn.Embedding(ctx, cfg.vocab_size, C, { name = "embed_tokens", std = 0.02 }))
  self.embed_positions = self:add_child(nn.Embedding(ctx, cfg.block_size + POS_OFFSET, C,
    { name = "embed_positions", std = 0.02 }))
  self.blocks = {}
  for l = 0, cfg.n_layer - 1 do
    self.blocks[l + 1] = self:add_child(common.PreLNBlock_new(ctx, "layers" .. l, cfg, {
      norm = "layernorm", mlp = "mlp", act = cfg.act or "relu", causal = true, bias = cfg.bias ~= false,
      std = 0.02 }))
  end
  self.ln_f = self:add_child(common.norm_new(ctx, "final_layer_norm", C, cfg, "layernorm"))
  return self
end

-- batch.ids (B,T) int32 -> logits (B,T,V)
function OPT:forward(batch, opts)
  opts = opts or {}
  local cfg, P = self.cfg, opts.probe
  common.check_ids(batch.ids, "ids", "opt", 2)
  local T = batch.ids:size(1)
  common.check_block("opt", T, cfg.block_size)
  self:begin_forward(opts)
  local x = batch.ids:embedding(self.embed_tokens.weight) + self.embed_positions.weight:narrow(0, POS_OFFSET, T)
  x = self:dropout(x, cfg.dropout, 0)
  if P then P("emb", 0, x) end
  for l, blk in ipairs(self.blocks) do x = blk:forward(x, self, l - 1, P) end
  x = self.ln_f:forward(x)
  if P then P("ln_f", cfg.n_layer, x) end
  return x:linear(self.embed_tokens.weight)
end

function OPT:loss(batch, opts) return self:decoder_loss(batch, opts) end

function M.count(cfg)
  local C, F, V, L = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.n_layer
  local b = cfg.bias ~= false and 1 or 0
  local ln = C + b * C
  return V * C + (cfg.block_size + POS_OFFSET) * C
       + L * (2 * ln + 4 * C * C + b * 4 * C + 2 * C * F + b * (F + C)) + ln
end

return M
