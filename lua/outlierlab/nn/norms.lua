-- nn/norms — the normalisation variants that take the rescaling job away from outliers, and
-- residual clipping (Qwen team, arXiv 2601.22966; Zhu et al. 2025 for DyT). Every one is made of
-- engine ops that already have a backward (mul, rmsnorm/layernorm, linear, silu, sigmoid, tanh),
-- so autograd needs nothing new; tests/lua/test_norms.lua checks each against finite differences.
--
--   PreAffine(ctx, C, norm, {name}):   y = norm(λ₁ ⊙ x), λ₁ ∈ R^C learnable, init 1. A residual
--       sink can then be made small before the norm instead of being large in h.
--   GatedNorm(ctx, C, norm, {name, rank = 16, act = "sigmoid", mode = "elementwise", std = 0.02}):
--       y = norm(x); y ⊙ act(W_up · swish(W_down · y)), W_down (r×C), W_up (C×r) — "tensorwise":
--       W_up (1×r), one gate per token repeated over the C channels. act: sigmoid (the paper's),
--       tanh, silu or identity (its unstable ablations).
--   DyT(ctx, C, {name, alpha = 0.5}):  y = γ ⊙ tanh(α·x) + β (replaces the norm): α a learnable
--       scalar (init alpha), γ init 1, β init 0. No statistic over the channels, so no rescaling.
--   clip(x, c): the residual stream clamped to [−c, c] (the paper's "residual clipping").
local ol = require "outlierlab"
local nn = require "outlierlab.nn"

local M = {}

M.GATE_ACTS = { sigmoid = true, tanh = true, silu = true, identity = true }
M.GATE_MODES = { elementwise = true, tensorwise = true }

local PreAffine = nn.class("PreAffine")
M.PreAffine = PreAffine
function M.PreAffine_new(ctx, C, norm, opts)
  local name = opts and opts.name or "norm"
  local self = setmetatable({ ctx = ctx, name = name, training = true, C = C }, PreAffine)
  self.norm = self:add_child(norm)
  -- the inner norm's gain keeps its name (<name>.weight): the λ-minimum detector reads it
  self.pre = self:add_param(ctx:param(name .. ".pre.weight", { C })):fill_(1)
  return self
end
function PreAffine:forward(x) return self.norm:forward(x * self.pre) end

local GatedNorm = nn.class("GatedNorm")
M.GatedNorm = GatedNorm
function M.GatedNorm_new(ctx, C, norm, opts)
  opts = opts or {}
  local name = opts.name or "norm"
  local r, act, mode = opts.rank or 16, opts.act or "sigmoid", opts.mode or "elementwise"
  if not M.GATE_ACTS[act] then error("nn.norms: GatedNorm act must be sigmoid, tanh, silu or identity, got " .. tostring(act), 2) end
  if not M.GATE_MODES[mode] then error("nn.norms: GatedNorm mode must be elementwise or tensorwise, got " .. tostring(mode), 2) end
  local self = setmetatable({ ctx = ctx, name = name, training = true, C = C, act = act, mode = mode }, GatedNorm)
  self.norm = self:add_child(norm)
  local std = opts.std or 0.02
  self.down = self:add_child(nn.Linear(ctx, C, r, { name = name .. ".gate_down", bias = false, std = std }))
  self.up = self:add_child(nn.Linear(ctx, r, mode == "tensorwise" and 1 or C, { name = name .. ".gate_up", bias = false, std = std }))
  if mode == "tensorwise" then
    -- a constant (C,1) column of ones: linear(g, ones) repeats the (B,T,1) gate over C channels
    -- (the elementwise ops broadcast only over leading dims)
    self.ones = ctx:tensor({ C, 1 }, { persistent = true, name = name .. ".gate_ones" }):fill_(1)
  end
  return self
end
local gate_fn = {
  sigmoid = function(z) return z:sigmoid() end,
  tanh = function(z) return z:tanh() end,
  silu = function(z) return z:silu() end,
  identity = function(z) return z end,
}
function GatedNorm:forward(x)
  local y = self.norm:forward(x)
  local g = gate_fn[self.act](self.up:forward(self.down:forward(y):silu()))
  if self.ones then g = g:linear(self.ones) end
  return y * g
end

local DyT = nn.class("DyT")
M.DyT = DyT
function M.DyT_new(ctx, C, opts)
  opts = opts or {}
  local name = opts.name or "norm"
  local self = setmetatable({ ctx = ctx, name = name, training = true, C = C }, DyT)
  self.alpha = self:add_param(ctx:param(name .. ".alpha", { 1 })):fill_(opts.alpha or 0.5)
  self.weight = self:add_param(ctx:param(name .. ".weight", { C })):fill_(1)
  self.bias = self:add_param(ctx:param(name .. ".bias", { C }))
  return self
end
function DyT:forward(x) return (x * self.alpha):tanh() * self.weight + self.bias end

-- x limited to [−c, c]: torch.clamp's values and gradient (1 inside, the bounds included; 0
-- outside). The mask is read from x's values, so the op is x·inside + bound, both exact. c is
-- compared as fp32, as torch casts it to the tensor's dtype (MPT's clip_qkv).
function M.clip(x, c)
  local shape_t = x.shape
  local inside = ol.check_ptr(ol.C.ol_tensor_new(x.ctx, ol.C.OL_F32, x.ndim, shape_t, "clip_inside"))
  local bound = ol.check_ptr(ol.C.ol_tensor_new(x.ctx, ol.C.OL_F32, x.ndim, shape_t, "clip_bound"))
  c = tonumber(ol.ffi.new("float", c))
  local xd, id, bd = x.data, inside.data, bound.data
  for i = 0, tonumber(x.numel) - 1 do
    local v = xd[i]
    if v > c then id[i], bd[i] = 0, c
    elseif v < -c then id[i], bd[i] = 0, -c
    else id[i], bd[i] = 1, 0 end
  end
  return x * inside + bound
end

-- the variant keys every family's config has (models/init.lua merges them into each family's
-- defaults): all off, so a model without them is the model before them, bit for bit
M.CONFIG_DEFAULTS = {
  norm_variant = "plain",          -- "plain" | "preaffine" | "gated" | "dyt"
  norm_gate_rank = 16,             -- GatedNorm: r
  norm_gate_act = "sigmoid",       -- GatedNorm: sigmoid | tanh | silu | identity
  norm_gate_mode = "elementwise",  -- GatedNorm: elementwise | tensorwise
  dyt_alpha = 0.5,                 -- DyT: α's initial value
  residual_clip = 0.0,             -- > 0: the residual stream clamped to [−c, c] after every add
}
M.VARIANTS = { plain = true, preaffine = true, gated = true, dyt = true }

-- the checks of those keys (models.config); what names the config
function M.check(cfg, what)
  local function bad(k, v, valid) error(string.format("%s: %s must be %s, got %s", what, k, valid, tostring(v)), 4) end
  if not M.VARIANTS[cfg.norm_variant] then bad("norm_variant", cfg.norm_variant, "one of dyt, gated, plain, preaffine") end
  local r = cfg.norm_gate_rank
  if r < 1 or r ~= math.floor(r) then bad("norm_gate_rank", r, "a positive integer") end
  if not M.GATE_ACTS[cfg.norm_gate_act] then bad("norm_gate_act", cfg.norm_gate_act, "one of identity, sigmoid, silu, tanh") end
  if not M.GATE_MODES[cfg.norm_gate_mode] then bad("norm_gate_mode", cfg.norm_gate_mode, "elementwise or tensorwise") end
  if not (cfg.dyt_alpha > 0 and cfg.dyt_alpha < math.huge) then bad("dyt_alpha", cfg.dyt_alpha, "a positive finite number") end
  if not (cfg.residual_clip >= 0 and cfg.residual_clip < math.huge) then
    bad("residual_clip", cfg.residual_clip, "a non-negative finite number (0: off)")
  end
end

-- The norm of a model at width C: make() builds the family's plain norm (LayerNorm/RMSNorm with
-- its own options); cfg.norm_variant wraps it (preaffine, gated) or replaces it (dyt).
function M.build(ctx, name, C, cfg, make)
  local v = cfg.norm_variant or "plain"
  if v == "dyt" then return M.DyT_new(ctx, C, { name = name, alpha = cfg.dyt_alpha }) end
  local base = make()
  if v == "plain" then return base end
  if v == "preaffine" then return M.PreAffine_new(ctx, C, base, { name = name }) end
  return M.GatedNorm_new(ctx, C, base, { name = name, rank = cfg.norm_gate_rank, act = cfg.norm_gate_act,
                                           mode = cfg.norm_gate_mode })
end

-- the extra parameters of one norm of width C against the plain one (nplain: the plain norm's
-- parameter count, C or 2C); for the families' count formulas
function M.extra_params(cfg, C, nplain)
  local v = cfg.norm_variant or "plain"
  if v == "preaffine" then return C end
  if v == "gated" then
    local r = cfg.norm_gate_rank
    return C * r + r * (cfg.norm_gate_mode == "tensorwise" and 1 or C)
  end
  if v == "dyt" then return 1 + 2 * C - nplain end
  return 0
end

-- the residual stream after an add: clipped when cfg.residual_clip > 0, x itself otherwise
function M.residual(cfg, x)
  local c = cfg.residual_clip
  if c and c > 0 then return M.clip(x, c) end
  return x
end

return M
