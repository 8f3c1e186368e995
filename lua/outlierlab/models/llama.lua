-- models/llama — the LLaMA decoder (Touvron et al. 2023) in the TinyLlama shape SO uses in
-- App. D.2 (lit-gpt "tiny_LLaMA_120M"): token embedding, no position table, L pre-norm
-- blocks (RMSNorm, causal attention with rotary positions on q and k, SwiGLU MLP with
-- gate/up/down projections), a final RMSNorm and an untied lm head. No biases anywhere.
-- n_kv_head < n_head gives grouped-query attention; TinyLlama-120M has n_kv_head = 1
-- (multi-query: one key/value head shared by the 12 query heads).
-- Init: weights N(0, init_std²), the residual projections (o_proj, down_proj) N(0,
-- proj_std²); TinyLlama's pretraining script uses init_std = √(2/(5C)) and proj_std =
-- 1/(√C·L) (cfg.init = "tinyllama"), Hugging Face uses 0.02 for both (cfg.init = "hf").
--
--   ids (B,T) -> x = E[ids] ["emb"] -> blocks (RoPE inside attention) -> norm ["ln_f"]
--   -> logits = x·W_headᵀ (B,T,V)
-- cfg.embed_proj = true (Outlier-Safe Pre-Training, Park et al. 2025): a learned C×C projection
-- after the embedding (x = E[ids]·W_eᵀ, before "emb") and one after the final norm (before the
-- head), both initialised to random orthogonal matrices (ol_random_orthogonal).
local common = require "outlierlab.models.common"
local nn = require "outlierlab.nn"

local M = {}
-- an orthogonal initial weight, drawn from the context's seed stream
local function orthogonal_init(w, ctx)
  local ol = require "outlierlab"
  ol.check_status(ol.C.ol_random_orthogonal(w, ctx:next_seed()))
end
local LLaMA = nn.class("LLaMA", common.Model)

local function init_stds(cfg)
  if cfg.init == "tinyllama" then
    return math.sqrt(2 / (5 * cfg.d_model)), 1 / math.sqrt(cfg.d_model) / cfg.n_layer
  elseif cfg.init == nil or cfg.init == "hf" then
    return 0.02, 0.02
  end
  error("models.llama: init must be 'tinyllama' or 'hf', got " .. tostring(cfg.init), 3)
end

function M.build(ctx, cfg)
  local self = setmetatable({ ctx = ctx, cfg = cfg, name = "llama", training = true }, LLaMA)
  local C = cfg.d_model
  local std, proj_std = init_stds(cfg)
  self.embed_tokens = self:add_child(nn.Embedding(ctx, cfg.vocab_size, C, { name = "embed_tokens", std = std }))
  if cfg.embed_proj then
    self.embed_proj = self:add_child(common.linear(ctx, "embed_proj", C, C, false, std))
    orthogonal_init(self.embed_proj.weight, ctx)
  end
  self.blocks = {}
  for l = 0, cfg.n_layer - 1 do
    self.blocks[l + 1] = self:add_child(common.PreLNBlock_new(ctx, "layers" .. l, cfg, {
      norm = "rmsnorm", mlp = "swiglu", causal = true, bias = false, rope = cfg.rope_base or 10000,
      std = std, proj_std = proj_std }))
  end
  self.norm = self:add_child(common.norm_new(ctx, "norm", C, cfg, "rmsnorm"))
  if cfg.embed_proj then
    self.head_proj = self:add_child(common.linear(ctx, "head_proj", C, C, false, std))
    orthogonal_init(self.head_proj.weight, ctx)
  end
  if not cfg.tie_embeddings then
    self.lm_head = self:add_child(common.linear(ctx, "lm_head", C, cfg.vocab_size, false, std))
  end
  return self
end

-- batch.ids (B,T) int32 -> the blocks' input x (B,T,C) ["emb"]
function LLaMA:embed(batch, opts)
  opts = opts or {}
  local cfg, P = self.cfg, opts.probe
  common.check_ids(batch.ids, "ids", "llama", 2)
  common.check_block("llama", batch.ids:size(1), cfg.block_size)
  self:begin_forward(opts)
  local x = batch.ids:embedding(self.embed_tokens.weight)
  if self.embed_proj then x = self.embed_proj:forward(x) end
  x = self:dropout(x, cfg.dropout, 0)
  if P then P("emb", 0, x) end
  return x
end

-- the last block's output (B,T,C) -> logits (B,T,V) ["ln_f"]
function LLaMA:head(x, opts)
  local P = opts and opts.probe
  x = self.norm:forward(x)
  if P then P("ln_f", self.cfg.n_layer, x) end
  if self.head_proj then x = self.head_proj:forward(x) end
  return x:linear(self.lm_head and self.lm_head.weight or self.embed_tokens.weight)
end

function LLaMA:forward(batch, opts)
  opts = opts or {}
  local x = self:embed(batch, opts)
  for l, blk in ipairs(self.blocks) do x = blk:forward(x, self, l - 1, opts.probe) end
  return self:head(x, opts)
end

function LLaMA:loss(batch, opts) return self:decoder_loss(batch, opts) end

function M.count(cfg)
  local C, F, V, L = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.n_layer
  local HD = C / cfg.n_head
  local NKV = cfg.n_kv_head or cfg.n_head
  local attn = 2 * C * C + 2 * C * NKV * HD
  local n = V * C + L * (2 * C + attn + 3 * C * F) + C
  if not cfg.tie_embeddings then n = n + V * C end
  if cfg.embed_proj then n = n + 2 * C * C end
  return n
end

return M
