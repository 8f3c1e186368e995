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
--
-- The decoders imported from Hugging Face (pretrained/hf.lua: Mistral, Phi-3, Qwen2/3, Gemma 1/2,
-- Phi, Falcon, MPT, LLaMA-3.1) are this model with keys that are off by default (M.PLAIN; with
-- all of them off the model is the block above, bit for bit): head_dim; qkv_bias, o_bias;
-- qk_norm (per-head RMSNorm, or LayerNorm when norm = "layernorm"); norm ("rmsnorm" |
-- "layernorm", norm_bias); mlp ("glu" | "plain"), act, mlp_bias; parallel ("none" | "shared" |
-- "separate"); post_norms; rotary_dim (partial rotary); rope_factor, rope_low_freq_factor,
-- rope_high_freq_factor, rope_original_max_pos (LLaMA-3.1's "llama3" frequencies); rope_base 0
-- (no RoPE); attn_scale, attn_softcap, window, window_every, alibi (ALiBi with that
-- alibi_bias_max: materialised scores, common.Attention:scored); clip_qkv (q, k, v clamped);
-- embed_scale; logit_softcap; head_bias.
local common = require "outlierlab.models.common"
local nn = require "outlierlab.nn"
local norms = require "outlierlab.nn.norms"

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

-- ---------------------------------------------------------------- the imported families' block
-- Block(ctx, name, cfg, opts): the LLaMA block with the keys of the header (used when one of them is
-- set; otherwise common.PreLNBlock). Norms: ln1 (input_layernorm), ln2 (the MLP's input norm,
-- absent for parallel = "shared"), ln1_post / ln2_post (post_norms). Probe names as PreLNBlock's.
--   sequential: a = ln1(x); o = attn(a) [ln1_post]; x = x + o; m = ln2(x); f = mlp(m) [ln2_post]; x = x + f
--   parallel:   a = ln1(x); m = a ("shared") or ln2(x) ("separate"); x = (attn(a) + mlp(m)) + x
--               (modeling_phi.py PhiDecoderLayer, modeling_falcon.py FalconDecoderLayer)
local Block = nn.class("LLaMABlock")
M.Block = Block

local function norm(ctx, name, n, cfg)
  if cfg.norm == "layernorm" then
    return norms.build(ctx, name, n, cfg, function() return nn.LayerNorm(ctx, n, { name = name, eps = cfg.norm_eps, bias = cfg.norm_bias }) end)
  end
  return common.norm_new(ctx, name, n, cfg, "rmsnorm")
end

-- RoPE inverse frequencies with LLaMA-3.1's rope_scaling "llama3" (transformers'
-- modeling_rope_utils.py _compute_llama3_parameters, step by step; HF computes them in fp32,
-- here in double): over the rotary dims dim,
--   inv_i = 1 / base^(2i/dim), wavelen_i = 2π / inv_i, low_wl = orig / low, high_wl = orig / high
--   wavelen_i > low_wl: inv_i / factor (low frequencies interpolated)
--   wavelen_i < high_wl: inv_i (high frequencies kept)
--   otherwise: (1 − s)·inv_i / factor + s·inv_i, s = (orig / wavelen_i − low) / (high − low)
function M.llama3_inv_freq(base, dim, factor, low, high, orig)
  local out = {}
  local low_wl, high_wl = orig / low, orig / high
  for i = 0, dim / 2 - 1 do
    local inv = 1 / base ^ (2 * i / dim)
    local wl = 2 * math.pi / inv
    local v = wl > low_wl and inv / factor or inv                    -- torch.where(wavelen > low_freq_wavelen, ...)
    if not (wl < high_wl) and not (wl > low_wl) then                 -- is_medium_freq
      local s = (orig / wl - low) / (high - low)
      v = (1 - s) * v / factor + s * v
    end
    out[i + 1] = v
  end
  return out
end

-- the attention options of a config (common.Attention_new)
local function attn_opts(cfg, std, proj_std)
  local o = { causal = true, bias = false, rope = cfg.rope_base > 0 and cfg.rope_base or nil, std = std, proj_std = proj_std,
              head_dim = cfg.head_dim > 0 and cfg.head_dim or nil, qkv_bias = cfg.qkv_bias, o_bias = cfg.o_bias,
              qk_norm = cfg.qk_norm and cfg.norm_eps or nil, rotary_dim = cfg.rotary_dim > 0 and cfg.rotary_dim or nil,
              qk_layernorm = cfg.qk_norm and cfg.norm == "layernorm" and { bias = cfg.norm_bias } or nil,
              clip_qkv = cfg.clip_qkv > 0 and cfg.clip_qkv or nil }
  if cfg.rope_factor > 0 then
    local rd = cfg.rotary_dim > 0 and cfg.rotary_dim or (cfg.head_dim > 0 and cfg.head_dim or cfg.d_model / cfg.n_head)
    o.rope_freqs = M.llama3_inv_freq(cfg.rope_base, rd, cfg.rope_factor, cfg.rope_low_freq_factor, cfg.rope_high_freq_factor,
                                     cfg.rope_original_max_pos)
  end
  if cfg.attn_scale > 0 or cfg.attn_softcap > 0 or cfg.window > 0 or cfg.alibi > 0 then
    o.scores = { scale = cfg.attn_scale > 0 and cfg.attn_scale or nil, softcap = cfg.attn_softcap > 0 and cfg.attn_softcap or nil,
                 window = cfg.window > 0 and cfg.window or nil, window_every = cfg.window_every,
                 alibi = cfg.alibi > 0 and cfg.alibi or nil }
  end
  return o
end

function M.Block_new(ctx, name, cfg, std, proj_std)
  local self = setmetatable({ ctx = ctx, name = name, training = true, p = cfg.dropout or 0, parallel = cfg.parallel }, Block)
  local C, F = cfg.d_model, cfg.d_ff
  self.ln1 = self:add_child(norm(ctx, name .. ".ln1", C, cfg))
  self.attn = self:add_child(common.Attention_new(ctx, name .. ".attn", cfg, attn_opts(cfg, std, proj_std)))
  if cfg.post_norms then self.ln1_post = self:add_child(norm(ctx, name .. ".ln1_post", C, cfg)) end
  if cfg.parallel ~= "shared" then self.ln2 = self:add_child(norm(ctx, name .. ".ln2", C, cfg)) end
  if cfg.mlp == "plain" then
    self.mlp = self:add_child(common.MLP_new(ctx, name .. ".mlp", C, F, { act = cfg.act, bias = cfg.mlp_bias, std = std, proj_std = proj_std }))
  else
    self.mlp = self:add_child(common.SwiGLU_new(ctx, name .. ".mlp", C, F, { act = cfg.act, std = std, proj_std = proj_std }))
  end
  if cfg.post_norms then self.ln2_post = self:add_child(norm(ctx, name .. ".ln2_post", C, cfg)) end
  return self
end

function Block:forward(x, model, l, P, pad_mask)
  local a = self.ln1:forward(x)
  if P then P("ln1", l, a) end
  if self.parallel ~= "none" then
    local o = self.attn:forward(a, P, l, pad_mask)
    local m = a
    if self.ln2 then m = self.ln2:forward(x) end
    if P then P("ln2", l, m) end
    local f = self.mlp:forward(m, P, l)
    if P then P("ffn_out", l, f) end
    x = norms.residual(model.cfg, (model:dropout(o, self.p, 2 * l + 1) + model:dropout(f, self.p, 2 * l + 2)) + x)
    if P then P("h", l, x) end
    return x
  end
  local o = self.attn:forward(a, P, l, pad_mask)
  if self.ln1_post then o = self.ln1_post:forward(o) end
  x = norms.residual(model.cfg, x + model:dropout(o, self.p, 2 * l + 1))
  local m = self.ln2:forward(x)
  if P then P("ln2", l, m) end
  local f = self.mlp:forward(m, P, l)
  if self.ln2_post then f = self.ln2_post:forward(f) end
  if P then P("ffn_out", l, f) end
  x = norms.residual(model.cfg, x + model:dropout(f, self.p, 2 * l + 2))
  if P then P("h", l, x) end
  return x
end

-- true when a config sets one of the imported families' keys (the block above is built)
local PLAIN = { head_dim = 0, qkv_bias = false, o_bias = false, qk_norm = false, norm = "rmsnorm", norm_bias = true,
                mlp = "glu", act = "silu", mlp_bias = false, parallel = "none", post_norms = false, rotary_dim = 0,
                attn_scale = 0, attn_softcap = 0, window = 0, window_every = 1, alibi = 0, embed_scale = 0,
                logit_softcap = 0, head_bias = false, rope_factor = 0, rope_low_freq_factor = 0, rope_high_freq_factor = 0,
                rope_original_max_pos = 0, clip_qkv = 0 }
M.PLAIN = PLAIN
function M.extended(cfg)
  for k, v in pairs(PLAIN) do if cfg[k] ~= v then return true end end
  return cfg.rope_base == 0
end

-- the checks of the keys above (models.config calls it)
function M.check(cfg, what)
  local function bad(k, v, valid) error(string.format("%s: %s must be %s, got %s", what, k, valid, tostring(v)), 4) end
  for _, k in ipairs { "head_dim", "rotary_dim", "window", "window_every", "rope_original_max_pos" } do
    local v = cfg[k]
    if v < 0 or v ~= math.floor(v) then bad(k, v, "a non-negative integer") end
  end
  if cfg.window_every < 1 then bad("window_every", cfg.window_every, "at least 1") end
  for _, k in ipairs { "attn_scale", "attn_softcap", "alibi", "embed_scale", "logit_softcap", "rope_base", "rope_factor",
                       "rope_low_freq_factor", "rope_high_freq_factor", "clip_qkv" } do
    local v = cfg[k]
    if not (v >= 0 and v < math.huge) then bad(k, v, "a non-negative finite number") end
  end
  if cfg.rope_factor > 0 then   -- LLaMA-3.1's "llama3" scaling: every parameter, with high > low
    if cfg.rope_base == 0 then bad("rope_factor", cfg.rope_factor, "0 without RoPE (rope_base 0)") end
    if cfg.rope_low_freq_factor == 0 then bad("rope_low_freq_factor", 0, "positive with rope_factor") end
    if not (cfg.rope_high_freq_factor > cfg.rope_low_freq_factor) then
      bad("rope_high_freq_factor", cfg.rope_high_freq_factor, "greater than rope_low_freq_factor " .. cfg.rope_low_freq_factor)
    end
    if cfg.rope_original_max_pos < 1 then bad("rope_original_max_pos", cfg.rope_original_max_pos, "at least 1 with rope_factor") end
  elseif cfg.rope_low_freq_factor ~= 0 or cfg.rope_high_freq_factor ~= 0 or cfg.rope_original_max_pos ~= 0 then
    bad("rope_factor", 0, "positive when rope_low_freq_factor, rope_high_freq_factor or rope_original_max_pos is set")
  end
  local HD = cfg.head_dim > 0 and cfg.head_dim or cfg.d_model / cfg.n_head
  if cfg.rotary_dim > HD or cfg.rotary_dim % 2 ~= 0 then bad("rotary_dim", cfg.rotary_dim, "even and at most the head size " .. HD) end
  if cfg.rope_base > 0 and HD % 2 ~= 0 then bad("head size", HD, "even for RoPE") end
  local one_of = { norm = { rmsnorm = true, layernorm = true }, mlp = { glu = true, plain = true },
                   act = { silu = true, gelu_tanh = true, gelu_erf = true, relu = true },
                   parallel = { none = true, shared = true, separate = true } }
  for k, ok in pairs(one_of) do
    if not ok[cfg[k]] then
      local v = {}
      for n in pairs(ok) do v[#v + 1] = n end
      table.sort(v)
      bad(k, cfg[k], "one of " .. table.concat(v, ", "))
    end
  end
  if cfg.mlp == "glu" and cfg.mlp_bias then bad("mlp_bias", true, "false with mlp = \"glu\"") end
  if cfg.parallel ~= "none" and cfg.post_norms then bad("post_norms", true, "false with a parallel block") end
  local att = type(cfg.attention) == "table" and (cfg.attention.kind or "softmax") or cfg.attention
  if att ~= "softmax" and (cfg.attn_scale > 0 or cfg.attn_softcap > 0 or cfg.window > 0 or cfg.alibi > 0) then
    error(string.format("%s: attn_scale, attn_softcap, window and alibi need attention \"softmax\", got %s", what, tostring(att)), 4)
  end
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
  local ext = M.extended(cfg)
  self.blocks = {}
  for l = 0, cfg.n_layer - 1 do
    if ext then
      self.blocks[l + 1] = self:add_child(M.Block_new(ctx, "layers" .. l, cfg, std, proj_std))
    else
      self.blocks[l + 1] = self:add_child(common.PreLNBlock_new(ctx, "layers" .. l, cfg, {
        norm = "rmsnorm", mlp = "swiglu", causal = true, bias = false, rope = cfg.rope_base or 10000,
        std = std, proj_std = proj_std }))
    end
  end
  self.norm = self:add_child(ext and norm(ctx, "norm", C, cfg) or common.norm_new(ctx, "norm", C, cfg, "rmsnorm"))
  if cfg.embed_proj then
    self.head_proj = self:add_child(common.linear(ctx, "head_proj", C, C, false, std))
    orthogonal_init(self.head_proj.weight, ctx)
  end
  if not cfg.tie_embeddings then
    self.lm_head = self:add_child(common.linear(ctx, "lm_head", C, cfg.vocab_size, cfg.head_bias, std))
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
  -- Gemma: hidden_states * normalizer, normalizer = √hidden_size cast to the hidden dtype (fp32 here)
  if cfg.embed_scale > 0 then x = x:scale(cfg.embed_scale) end
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
  local logits = x:linear(self.lm_head and self.lm_head.weight or self.embed_tokens.weight, self.lm_head and self.lm_head.bias or nil)
  local c = self.cfg.logit_softcap
  if c > 0 then logits = logits:scale(1 / c):tanh():scale(c) end   -- Gemma 2: final_logit_softcapping
  return logits
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
  if M.extended(cfg) then
    local NH, NKV = cfg.n_head, cfg.n_kv_head or cfg.n_head
    local HD = cfg.head_dim > 0 and cfg.head_dim or C / NH
    local nrm = (cfg.norm == "layernorm" and cfg.norm_bias) and 2 * C or C
    local nnorm = (cfg.parallel == "shared" and 1 or 2) + (cfg.post_norms and 2 or 0)
    local attn = 2 * C * NH * HD + 2 * C * NKV * HD
    if cfg.qkv_bias then attn = attn + (NH + 2 * NKV) * HD end
    if cfg.o_bias then attn = attn + C end
    if cfg.qk_norm then attn = attn + 2 * HD * (nrm / C) end   -- per-head norms of the model's kind (LayerNorm: gain and bias)
    local mlp = (cfg.mlp == "plain" and 2 or 3) * C * F
    if cfg.mlp_bias then mlp = mlp + F + C end
    nrm = nrm + norms.extra_params(cfg, C, nrm)
    local n = V * C + L * (nnorm * nrm + attn + mlp) + nrm
    if not cfg.tie_embeddings then n = n + V * C + (cfg.head_bias and V or 0) end
    if cfg.embed_proj then n = n + 2 * C * C end
    return n
  end
  local HD = C / cfg.n_head
  local NKV = cfg.n_kv_head or cfg.n_head
  local attn = 2 * C * C + 2 * C * NKV * HD
  local nrm = (cfg.norm_gain == "single" and 1 or C)
  nrm = nrm + norms.extra_params(cfg, C, nrm)
  local n = V * C + L * (2 * nrm + attn + 3 * C * F) + nrm
  if not cfg.tie_embeddings then n = n + V * C end
  if cfg.embed_proj then n = n + 2 * C * C end
  return n
end

return M
