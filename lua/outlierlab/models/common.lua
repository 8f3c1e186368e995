-- models/common — the pieces every model family shares: the multi-head self-attention
-- sublayer (projections, heads, the attention variant, output projection), the MLPs
-- (GELU/ReLU two-layer, SwiGLU), dropout with resumable seeds, the probe plumbing and the
-- Model base class (parameters, num_params, train/eval, loss helpers).
--
-- Shapes (llm.c letters): B batch, T time, C = d_model, NH heads, HD = C/NH head dim,
-- NKV key/value heads (NKV < NH: grouped/multi-query attention, LLaMA family), F = d_ff.
--
-- Probes. A forward takes opts.probe = fn(name, layer, tensor) (layer 0-based). Every call
-- site reads `if P then P(...) end`, so with no probe nothing is computed or copied.
local ol = require "outlierlab"
local nn = require "outlierlab.nn"
local attention = require "outlierlab.nn.attention"
local norms = require "outlierlab.nn.norms"

local M = {}

-- ---------------------------------------------------------------- small helpers

-- nn.Linear with an explicit init std and optional bias.
function M.linear(ctx, name, nin, nout, bias, std)
  return nn.Linear(ctx, nin, nout, { name = name, bias = bias, std = std })
end

-- (B, T, NH·HD) -> (B, NH, T, HD): view + transpose(1, 2) as one engine op (ol_heads), with
-- the rotary positions of base `rope` applied in the same pass when given.
function M.split_heads(x, B, T, NH, HD, rope)
  return ol.check_ptr(ol.C.ol_heads(x, NH, rope or 0, 0))
end

-- (B, NH, T, HD) -> (B, T, NH·HD): transpose(1, 2) + view as one engine op (ol_heads_merge)
function M.merge_heads(y, B, T, NH, HD)
  return ol.check_ptr(ol.C.ol_heads_merge(y))
end

-- (B, NKV, T, HD) -> (B, NH, T, HD): head h reads key/value head floor(h / (NH/NKV)),
-- as Hugging Face's repeat_kv (grouped-query attention, Ainslie et al. 2023).
function M.repeat_kv(x, NH)
  local NKV = x:size(1)
  if NKV == NH then return x end
  local rep = NH / NKV
  local list = {}
  for g = 0, NKV - 1 do
    local xg = NKV == 1 and x or x:narrow(1, g, 1)
    for _ = 1, rep do list[#list + 1] = xg end
  end
  return ol.cat(list, 1)
end

-- Dropout whose mask depends only on (model seed, forward counter, site): a resumed run
-- that passes opts.step reproduces the masks of the uninterrupted one.
function M.dropout(self, x, p, site)
  if not self._train_now or not p or p == 0 then return x end
  return x:dropout(p, self._drop_base + site)
end
-- Sites: 0 embeddings, 2l+1 and 2l+2 the residual branches of layer l; the attention
-- probabilities of layer l (the attention spec's dropout = p) use ATTN_DROP_SITE + l.
M.ATTN_DROP_SITE = 1000000

-- ---------------------------------------------------------------- self-attention sublayer
-- Attention(ctx, name, cfg, {causal=, bias=, rope=}) — q, k, v projections, the attention
-- variant from outlierlab.nn.attention (cfg.attention), the output projection.
--   q = x·Wqᵀ (B,T,NH·HD), k, v = x·Wk/vᵀ (B,T,NKV·HD); split into heads (B,NH|NKV,T,HD);
--   [RoPE on q and k]; y = A(q, k, v, x) (B,NH,T,HD); out = merge(y)·Woᵀ (B,T,C).
-- Separate q, k, v projections (not one fused c_attn): the same parameter count for
-- multi-head attention, one copy fewer per step, and room for NKV < NH.
local Attention = nn.class("SelfAttention")
M.Attention = Attention

function M.Attention_new(ctx, name, cfg, opts)
  local C, NH = cfg.d_model, cfg.n_head
  local NKV = cfg.n_kv_head or NH
  local HD = opts.head_dim
  if not HD then
    if C % NH ~= 0 then error(string.format("models: d_model %d is not a multiple of n_head %d", C, NH), 3) end
    HD = C / NH
  end
  if NH % NKV ~= 0 then error(string.format("models: n_head %d is not a multiple of n_kv_head %d", NH, NKV), 3) end
  local self = setmetatable({ ctx = ctx, name = name, C = C, NH = NH, NKV = NKV, HD = HD,
                              causal = opts.causal, rope = opts.rope, training = true }, Attention)
  local std, bias = opts.std or 0.02, opts.bias
  local qkv_bias = bias
  if opts.qkv_bias ~= nil then qkv_bias = opts.qkv_bias end
  self.q = self:add_child(M.linear(ctx, name .. ".q_proj", C, NH * HD, qkv_bias, std))
  self.k = self:add_child(M.linear(ctx, name .. ".k_proj", C, NKV * HD, qkv_bias, std))
  self.v = self:add_child(M.linear(ctx, name .. ".v_proj", C, NKV * HD, qkv_bias, std))
  self.attn = attention.new(ctx, cfg.attention or "softmax", { d_model = NH * HD, n_head = NH, name = name,
                                                               block_size = cfg.block_size })
  for _, p in ipairs(self.attn:parameters() or {}) do self:add_param(p) end
  local o_bias = bias
  if opts.o_bias ~= nil then o_bias = opts.o_bias end
  self.o = self:add_child(M.linear(ctx, name .. ".o_proj", NH * HD, C, o_bias, opts.proj_std or std))
  -- the imported families' options (models/llama.lua; all off by default)
  if opts.qk_layernorm then   -- Phi-2's qk_layernorm: LayerNorm over head_dim on every q and k head, before RoPE
    local o = { eps = opts.qk_norm, bias = opts.qk_layernorm.bias }
    self.q_norm = self:add_child(nn.LayerNorm(ctx, HD, { name = name .. ".q_norm", eps = o.eps, bias = o.bias }))
    self.k_norm = self:add_child(nn.LayerNorm(ctx, HD, { name = name .. ".k_norm", eps = o.eps, bias = o.bias }))
  elseif opts.qk_norm then   -- Qwen3: RMSNorm over head_dim on every q and k head, before RoPE
    self.q_norm = self:add_child(nn.RMSNorm(ctx, HD, { name = name .. ".q_norm", eps = opts.qk_norm }))
    self.k_norm = self:add_child(nn.RMSNorm(ctx, HD, { name = name .. ".k_norm", eps = opts.qk_norm }))
  end
  self.rotary_dim = opts.rotary_dim               -- partial rotary (Phi-2): RoPE on the first dims only
  self.rope_freqs = opts.rope_freqs               -- RoPE with these inverse frequencies (LLaMA-3.1's "llama3" scaling)
  self.clip_qkv = opts.clip_qkv                   -- MPT: q, k, v clamped to [−clip_qkv, clip_qkv]
  self.scores = opts.scores                       -- { scale =, softcap =, window =, alibi = }: materialised scores
  return self
end

-- RoPE with given inverse frequencies inv (D/2 of them) over x (B,H,T,D), as modeling_llama.py's
-- apply_rotary_pos_emb: x·cos + rotate_half(x)·sin, rotate_half(x) = cat(−x[D/2:], x[:D/2]),
-- cos/sin (T, D) of the angle t·inv_i (in double, rounded to fp32) for both halves
local function rope_freqs(x, inv)
  local T, D = x:size(2), x:size(3)
  local H = D / 2
  local shape = ol.ffi.new("int64_t[2]", T, D)
  local cs = ol.check_ptr(ol.C.ol_tensor_new(x.ctx, ol.C.OL_F32, 2, shape, "rope_cos"))
  local sn = ol.check_ptr(ol.C.ol_tensor_new(x.ctx, ol.C.OL_F32, 2, shape, "rope_sin"))
  for t = 0, T - 1 do
    for i = 0, H - 1 do
      local a = t * inv[i + 1]
      local c, s = math.cos(a), math.sin(a)
      cs.data[t * D + i], cs.data[t * D + i + H] = c, c
      sn.data[t * D + i], sn.data[t * D + i + H] = s, s
    end
  end
  local rot = ol.cat({ x:narrow(3, H, H):scale(-1), x:narrow(3, 0, H) }, 3)
  return x * cs + rot * sn
end

-- RoPE of the sublayer on q or k (B,H,T,HD): over the first rotary_dim dims of each head, the
-- rest passed through, as modeling_phi.py's query_rot = q[..., :rotary_ndims] (θ_i =
-- base^(−2i/rotary_dim)); with rope_freqs, those frequencies (rope_freqs above)
local function rope(self, x)
  local HD = x:size(3)
  local rd = self.rotary_dim and self.rotary_dim < HD and self.rotary_dim or HD
  local part = rd < HD and x:narrow(3, 0, rd) or x
  local rot
  if self.rope_freqs then rot = rope_freqs(part, self.rope_freqs)
  else rot = ol.check_ptr(ol.C.ol_rope(part, self.rope, 0)) end
  if rd == HD then return rot end
  return ol.cat({ rot, x:narrow(3, rd, HD - rd) }, 3)
end

-- ALiBi slopes of modeling_mpt.py build_mpt_alibi_tensor: n = the next power of two ≥ NH,
-- slope_i = 2^(−i·max/n), i = 1..n; for NH < n the odd-indexed slopes first, then the even
function M.alibi_slopes(NH, max)
  local n = 2 ^ math.ceil(math.log(NH) / math.log(2) - 1e-9)
  local s = {}
  for i = 1, n do s[i] = 2 ^ -(i * (max / n)) end
  if n == NH then return s end
  local out = {}
  for i = 2, n, 2 do out[#out + 1] = s[i] end
  for i = 1, n, 2 do out[#out + 1] = s[i] end
  for i = #out, NH + 1, -1 do out[i] = nil end
  return out
end

-- the additive (NH|1, T, T) bias of the materialised path: −1e30 outside a sliding window
-- (key j hidden from query i when i − j ≥ window: modeling_gemma2.py / modeling_mistral.py),
-- and MPT's ALiBi slope_h·(j − (T − 1)); nil when there is none. The causal mask is the
-- softmax's own.
local function score_bias(s, NH, T, window, alibi)
  if not (window and window < T) and not alibi then return nil end
  local H = alibi and NH or 1
  local shape = alibi and ol.ffi.new("int64_t[3]", H, T, T) or ol.ffi.new("int64_t[2]", T, T)
  local b = ol.check_ptr(ol.C.ol_tensor_new(s.ctx, ol.C.OL_F32, alibi and 3 or 2, shape, "score_bias"))
  local slopes = alibi and M.alibi_slopes(NH, alibi)
  for h = 0, H - 1 do
    local sl = slopes and slopes[h + 1]
    for i = 0, T - 1 do
      for j = 0, T - 1 do
        local v = sl and sl * (j - (T - 1)) or 0
        if window and i - j >= window then v = -1e30 end
        b.data[(h * T + i) * T + j] = v
      end
    end
  end
  return b
end

-- softmax attention from materialised scores, for what the fused kernels do not have
-- (modeling_gemma2.py eager_attention_forward; modeling_mpt.py MptAttention):
--   s = q·kᵀ·scale; s = c·tanh(s/c) (soft-capping); s += bias (window, ALiBi); causal softmax; p·v
function Attention:scored(q, k, v, P, l, layer_window, pad_mask)
  local sc, T = self.scores, q:size(2)
  local s = q:matmul(k, false, true):scale(sc.scale or 1 / math.sqrt(self.HD))
  if sc.softcap then s = (s:scale(1 / sc.softcap)):tanh():scale(sc.softcap) end
  local bias = score_bias(s, self.NH, T, layer_window, sc.alibi)
  if bias then s = attention.add_mask(s, bias) end
  if pad_mask then s = attention.add_mask(s, attention.pad_bias(s, pad_mask)) end
  local p = s:softmax(true)
  if P then P("attn_probs", l, p) end
  return p:matmul(v)
end

-- x (B,T,C) the attention input; returns (B,T,C). P = probe or nil, l = layer index.
function Attention:forward(x, P, l, pad_mask)
  local B, T = x:size(0), x:size(1)
  local NH, NKV, HD = self.NH, self.NKV, self.HD
  if P then P("attn_in", l, x) end
  local qo, ko, vo = self.q:forward(x), self.k:forward(x), self.v:forward(x)
  local c = self.clip_qkv
  if c then qo, ko, vo = norms.clip(qo, c), norms.clip(ko, c), norms.clip(vo, c) end   -- modeling_mpt.py: Wqkv(x).clamp(−c, c)
  -- plain RoPE on whole heads runs inside the head split (ol_heads, the same bits as ol_rope
  -- after it); QK-norm before RoPE, explicit frequencies and partial rotary take the two steps
  local fused = self.rope and not self.q_norm and not self.rope_freqs and not (self.rotary_dim and self.rotary_dim < HD)
  local q = M.split_heads(qo, B, T, NH, HD, fused and self.rope or nil)
  local k = M.split_heads(ko, B, T, NKV, HD, fused and self.rope or nil)
  local v = M.split_heads(vo, B, T, NKV, HD)
  if self.q_norm then q, k = self.q_norm:forward(q), self.k_norm:forward(k) end
  if self.rope and not fused then q, k = rope(self, q), rope(self, k) end
  if P then P("q", l, q); P("k", l, k); P("v", l, v) end
  k, v = M.repeat_kv(k, NH), M.repeat_kv(v, NH)
  local y
  if self.scores then
    local w = self.scores.window
    if w and self.scores.window_every and l % self.scores.window_every ~= 0 then w = nil end
    y = self:scored(q, k, v, P, l, w, pad_mask)
  else
    local aprobe = P and function(name, t) P(name, l, t) end or nil
    local awants = P and function(name) return nn.probe_wants(P, name, l) end or nil
    -- drop_base is set by Model:begin_forward in training forwards only (nil: no dropout)
    local dseed = self.drop_base and self.drop_base + M.ATTN_DROP_SITE + l or nil
    y = self.attn:forward(q, k, v, x, { causal = self.causal, pad_mask = pad_mask, probe = aprobe,
                                       probe_wants = awants, dropout_seed = dseed })
  end
  if P then P("attn_head_out", l, y) end
  local out = self.o:forward(M.merge_heads(y, B, T, NH, HD))
  if P then P("attn_out", l, out) end
  return out
end

-- ---------------------------------------------------------------- MLPs
-- MLP(ctx, name, C, F, {act = "gelu_tanh"|"gelu_erf"|"relu", bias=, std=, proj_std=}):
--   u = x·W_upᵀ (B,T,F) ["mlp_up"], x_down = act(u) ["x_down"], out = x_down·W_downᵀ (B,T,C).
local MLP = nn.class("MLP")
M.MLP = MLP
function M.MLP_new(ctx, name, C, F, opts)
  local self = setmetatable({ ctx = ctx, name = name, act = opts.act, training = true }, MLP)
  self.up = self:add_child(M.linear(ctx, name .. ".up_proj", C, F, opts.bias, opts.std or 0.02))
  self.down = self:add_child(M.linear(ctx, name .. ".down_proj", F, C, opts.bias, opts.proj_std or opts.std or 0.02))
  return self
end
local acts = {
  gelu_tanh = function(u) return u:gelu("tanh") end,
  gelu_erf = function(u) return u:gelu("erf") end,
  relu = function(u) return u:relu() end,
}
M.activations = acts
function MLP:forward(x, P, l)
  local u = self.up:forward(x)
  if P then P("mlp_up", l, u) end
  local act = acts[self.act] or error("models: unknown MLP activation '" .. tostring(self.act) .. "'")
  local h = act(u)
  if P then P("x_down", l, h) end
  return self.down:forward(h)
end

-- SwiGLU(ctx, name, C, F, {std=, proj_std=, act=}) (Shazeer 2020, as in LLaMA; no biases):
--   g = x·W_gateᵀ ["mlp_gate"], u = x·W_upᵀ ["mlp_up"], x_down = silu(g)∘u ["x_down"],
--   out = x_down·W_downᵀ. act = "gelu_tanh" gives GeGLU (Gemma: gelu_pytorch_tanh(g)∘u).
local SwiGLU = nn.class("SwiGLU")
M.SwiGLU = SwiGLU
function M.SwiGLU_new(ctx, name, C, F, opts)
  local self = setmetatable({ ctx = ctx, name = name, training = true, act = opts.act }, SwiGLU)
  self.gate = self:add_child(M.linear(ctx, name .. ".gate_proj", C, F, false, opts.std or 0.02))
  self.up = self:add_child(M.linear(ctx, name .. ".up_proj", C, F, false, opts.std or 0.02))
  self.down = self:add_child(M.linear(ctx, name .. ".down_proj", F, C, false, opts.proj_std or opts.std or 0.02))
  return self
end
function SwiGLU:forward(x, P, l)
  local g = self.gate:forward(x)
  if P then P("mlp_gate", l, g) end
  local u = self.up:forward(x)
  if P then P("mlp_up", l, u) end
  -- silu(g)·u in one engine op; under an activation hook (post-training quantisation) as the
  -- two hooked ops, silu and the product, each an activation site (the same values otherwise);
  -- another gate activation (GeGLU: Gemma) as the two ops
  local h
  if self.act and self.act ~= "silu" then h = acts[self.act](g) * u
  else h = ol.activation_hook() and g:silu() * u or ol.check_ptr(ol.C.ol_swiglu(g, u)) end
  if P then P("x_down", l, h) end
  return self.down:forward(h)
end

-- ---------------------------------------------------------------- pre-LN block
-- PreLNBlock(ctx, name, cfg, {norm = "layernorm"|"rmsnorm", mlp = "mlp"|"swiglu", act=,
-- causal=, bias=, rope=, proj_std=}) — GPT-2, OPT, LLaMA and ViT blocks (Radford et al.
-- 2019 §2.3; Xiong et al. 2020):
--   a = N1(x) ["ln1" = "attn_in"];  x = x + drop(Attn(a)) ["attn_out" before the add]
--   m = N2(x) ["ln2"];              f = MLP(m) ["ffn_out"];  x = x + drop(f) ["h"]
local PreLNBlock = nn.class("PreLNBlock")
M.PreLNBlock = PreLNBlock
function M.norm_new(ctx, name, C, cfg, kind)
  if cfg.norm_gain and cfg.norm_gain ~= "channel" and cfg.norm_gain ~= "single" then
    error("models: norm_gain must be \"channel\" or \"single\", got " .. tostring(cfg.norm_gain), 3)
  end
  return norms.build(ctx, name, C, cfg, function()
    if kind == "rmsnorm" then
      return nn.RMSNorm(ctx, C, { name = name, eps = cfg.norm_eps, single = cfg.norm_gain == "single" })
    end
    return nn.LayerNorm(ctx, C, { name = name, eps = cfg.norm_eps, bias = cfg.bias ~= false })
  end)
end
function M.PreLNBlock_new(ctx, name, cfg, opts)
  local self = setmetatable({ ctx = ctx, name = name, training = true, p = cfg.dropout or 0 }, PreLNBlock)
  local C, F = cfg.d_model, cfg.d_ff
  self.ln1 = self:add_child(M.norm_new(ctx, name .. ".ln1", C, cfg, opts.norm))
  self.attn = self:add_child(M.Attention_new(ctx, name .. ".attn", cfg,
    { causal = opts.causal, bias = opts.bias, rope = opts.rope, std = opts.std, proj_std = opts.proj_std }))
  self.ln2 = self:add_child(M.norm_new(ctx, name .. ".ln2", C, cfg, opts.norm))
  if opts.mlp == "swiglu" then
    self.mlp = self:add_child(M.SwiGLU_new(ctx, name .. ".mlp", C, F, { std = opts.std, proj_std = opts.proj_std }))
  else
    self.mlp = self:add_child(M.MLP_new(ctx, name .. ".mlp", C, F,
      { act = opts.act, bias = opts.bias, std = opts.std, proj_std = opts.proj_std }))
  end
  return self
end
-- model: the Model (for dropout state); l: layer index; P: probe or nil
function PreLNBlock:forward(x, model, l, P, pad_mask)
  local a = self.ln1:forward(x)
  if P then P("ln1", l, a) end
  x = norms.residual(model.cfg, x + model:dropout(self.attn:forward(a, P, l, pad_mask), self.p, 2 * l + 1))
  local m = self.ln2:forward(x)
  if P then P("ln2", l, m) end
  local f = self.mlp:forward(m, P, l)
  if P then P("ffn_out", l, f) end
  x = norms.residual(model.cfg, x + model:dropout(f, self.p, 2 * l + 2))
  if P then P("h", l, x) end
  return x
end

-- ---------------------------------------------------------------- the model base class
local Model = nn.class("Model")
M.Model = Model

-- Set up the per-forward state: train mode and the dropout seed base.
-- opts.train (default: the module's mode, m:train()/m:eval()); opts.step (default: an
-- internal counter of training forwards) picks the dropout masks.
function Model:begin_forward(opts)
  local train = opts.train
  if train == nil then train = self.training end
  self._train_now = train and true or false
  if self._train_now then
    self.nforward = (self.nforward or 0) + 1
    local step = opts.step or self.nforward
    self._drop_base = (self.cfg.seed or 1234) * 1000003 + step * 7919 * 4096
  end
  -- hand the seed base to the attention sublayers (attention-probability dropout)
  if not self._attn_layers then
    self._attn_layers = {}
    local function walk(m)
      if getmetatable(m) == Attention then self._attn_layers[#self._attn_layers + 1] = m end
      for _, c in ipairs(m._children or {}) do walk(c) end
    end
    walk(self)
  end
  local base = self._train_now and self._drop_base or nil
  for _, a in ipairs(self._attn_layers) do a.drop_base = base end
end

function Model:dropout(x, p, site) return M.dropout(self, x, p, site) end

-- number of entries of an int32 tensor that differ from ignore
function M.count_targets(t, ignore)
  local n = 0
  for i = 0, tonumber(t.numel) - 1 do if t.idata[i] ~= ignore then n = n + 1 end end
  return n
end

-- Next-token cross entropy for the decoders: logits (B,T,V), targets (B,T) (−100 ignored).
function Model:decoder_loss(batch, opts)
  if not batch.targets then error("models." .. self.cfg.family .. ": loss needs batch.targets (B,T) int32", 2) end
  local logits = self:forward(batch, opts)
  local loss = logits:cross_entropy(batch.targets, -100)
  return loss, { ntokens = M.count_targets(batch.targets, -100), logits = logits }
end

-- check a batch field: int32, given number of dims
function M.check_ids(t, what, family, ndim)
  if not ol.is_tensor(t) then error(string.format("models.%s: batch.%s missing (expected an int32 tensor)", family, what), 3) end
  if t.dtype ~= ol.C.OL_I32 then error(string.format("models.%s: batch.%s %s must be int32", family, what, tostring(t)), 3) end
  if ndim and t.ndim ~= ndim then error(string.format("models.%s: batch.%s %s must have %d dims", family, what, tostring(t), ndim), 3) end
end

function M.check_block(family, T, block)
  if T > block then
    error(string.format("models.%s: sequence length %d exceeds block_size %d", family, T, block), 3)
  end
end

return M
