-- models/gpt2 — the GPT-2 decoder as SO trains it (nanoGPT: Radford et al. 2019; SO §3 and
-- App. B): token + learned position embeddings, L pre-LN blocks (LayerNorm, causal
-- attention, GELU(tanh) MLP with F = 4C), a final LayerNorm, and an lm head tied to the
-- token embedding (logits = h·Eᵀ). SO's GPT-2 has no biases (cfg.bias = false: no linear
-- biases and no LayerNorm biases, as nanoGPT's bias=False); dropout 0.
-- Init (nanoGPT): every weight N(0, 0.02²), biases 0, the two residual projections of each
-- block (attention out-proj and MLP down-proj) N(0, (0.02/√(2L))²) (GPT-2 paper §2.3).
--
--   ids (B,T) int32 -> x = wte[ids] + wpe[0:T] (B,T,C) ["emb"] -> blocks ["h" per layer]
--   -> ln_f ["ln_f", layer = L] -> logits = ln_f(x)·wteᵀ (B,T,V)
local common = require "outlierlab.models.common"
local nn = require "outlierlab.nn"
local norms = require "outlierlab.nn.norms"

local M = {}
local GPT2 = nn.class("GPT2", common.Model)

function M.build(ctx, cfg)
  local self = setmetatable({ ctx = ctx, cfg = cfg, name = "gpt2", training = true }, GPT2)
  local C, L = cfg.d_model, cfg.n_layer
  self.wte = self:add_child(nn.Embedding(ctx, cfg.vocab_size, C, { name = "wte", std = 0.02 }))
  self.wpe = self:add_child(nn.Embedding(ctx, cfg.block_size, C, { name = "wpe", std = 0.02 }))
  self.blocks = {}
  for l = 0, L - 1 do
    self.blocks[l + 1] = self:add_child(common.PreLNBlock_new(ctx, "h" .. l, cfg, {
      norm = "layernorm", mlp = "mlp", act = cfg.act or "gelu_tanh", causal = true, bias = cfg.bias,
      std = 0.02, proj_std = 0.02 / math.sqrt(2 * L) }))
  end
  self.ln_f = self:add_child(common.norm_new(ctx, "ln_f", C, cfg, "layernorm"))
  if cfg.tie_embeddings == false then
    self.lm_head = self:add_child(common.linear(ctx, "lm_head", C, cfg.vocab_size, false, 0.02))
  end
  return self
end

-- batch.ids (B,T) int32 -> the blocks' input x (B,T,C) ["emb"]
function GPT2:embed(batch, opts)
  opts = opts or {}
  local cfg, P = self.cfg, opts.probe
  common.check_ids(batch.ids, "ids", "gpt2", 2)
  local T = batch.ids:size(1)
  common.check_block("gpt2", T, cfg.block_size)
  self:begin_forward(opts)
  local x = batch.ids:embedding(self.wte.weight) + self.wpe.weight:narrow(0, 0, T)
  x = self:dropout(x, cfg.dropout, 0)
  if P then P("emb", 0, x) end
  return x
end

-- the last block's output (B,T,C) -> logits (B,T,V) ["ln_f"]
function GPT2:head(x, opts)
  local P = opts and opts.probe
  x = self.ln_f:forward(x)
  if P then P("ln_f", self.cfg.n_layer, x) end
  return x:linear(self.lm_head and self.lm_head.weight or self.wte.weight)
end

-- batch.ids (B,T) int32 -> logits (B,T,V)
function GPT2:forward(batch, opts)
  opts = opts or {}
  local x = self:embed(batch, opts)
  for l, blk in ipairs(self.blocks) do x = blk:forward(x, self, l - 1, opts.probe) end
  return self:head(x, opts)
end

function GPT2:loss(batch, opts) return self:decoder_loss(batch, opts) end

-- parameter count from the config alone (no allocation)
function M.count(cfg)
  local C, F, V, L = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.n_layer
  local b = cfg.bias ~= false and 1 or 0
  local ln = C + b * C
  ln = ln + norms.extra_params(cfg, C, ln)
  local attn = 4 * C * C + b * 4 * C
  local mlp = 2 * C * F + b * (F + C)
  local n = V * C + cfg.block_size * C + L * (2 * ln + attn + mlp) + ln
  if cfg.tie_embeddings == false then n = n + V * C end
  return n
end

return M
