-- optim — AdamW over the engine's flat parameter buffer, gradient clipping by global norm,
-- and warmup + cosine/linear/constant learning-rate schedules.
--
--   local optim = require "outlierlab.optim"
--   local opt = optim.AdamW(ctx, { lr = 6e-4, betas = {0.9, 0.95}, eps = 1e-8, weight_decay = 0.1 })
--   local lr_at = optim.schedule{ kind = "cosine", lr = 6e-4, min_lr = 6e-5, warmup = 100, steps = 2000 }
--   for step = 1, 2000 do
--     ctx:reset(); ctx:zero_grad()
--     model:loss(batch):backward()
--     optim.clip_grad_norm(ctx, 1.0)
--     opt:step(lr_at(step))
--   end
--
-- AdamW is decoupled weight decay (Loshchilov & Hutter, "Decoupled Weight Decay
-- Regularization", Alg. 2): the decay term lr·wd·p is applied to the parameter directly,
-- not added to the gradient. The update itself is one C pass over the flat buffers
-- (ol_adamw_step); this file only decides the two parameter groups:
--   group 0 = decayed, group 1 = not decayed.
-- Default rule (GPT-2/nanoGPT): decay every parameter with ndim >= 2 (matmul weights and
-- embeddings), not biases or LayerNorm gains. decay_norm_gains = true also decays the 1-D
-- parameters whose name ends in ".weight" (LayerNorm/RMSNorm gains), as in the OPT
-- training runs the quantizable-transformers paper (QT) follows. A custom
-- decay = function(p) -> bool replaces the default rule (decay_norm_gains still adds gains).
-- embed_weight_decay = w puts the token-embedding tables (parameters named *embed_tokens.weight,
-- *wte.weight, *word_embeddings.weight) in a third group decayed at w instead: their scale is
-- free under a pre-norm (the first norm divides it out), and at a high learning rate Adam drives
-- it, and with it the median |h| of every layer, far above the papers' models (docs/findings/organism.md).
local ol = require "outlierlab"
local ffi = require "ffi"
local C = ol.C

local M = {}

local function raw_ctx(ctx)
  if type(ctx) == "table" and ctx.raw ~= nil then return ctx.raw end
  if type(ctx) == "cdata" then return ctx end
  error("optim: expected an outlierlab Context, got " .. tostring(ctx), 3)
end

local function default_decay(p) return p.ndim >= 2 end

local function is_norm_gain(p)
  return p.ndim == 1 and ffi.string(p.name):sub(-7) == ".weight"
end

-- ---------------------------------------------------------------- AdamW
local AdamW = {}
AdamW.__index = AdamW
M.AdamWClass = AdamW

local known = { lr = true, betas = true, eps = true, weight_decay = true, decay = true,
                decay_norm_gains = true, embed_weight_decay = true }

local EMBED_SUFFIXES = { "embed_tokens.weight", "wte.weight", "word_embeddings.weight" }
local function is_token_embedding(p)
  if p.ndim ~= 2 then return false end
  local name = ffi.string(p.name)
  for _, s in ipairs(EMBED_SUFFIXES) do if name:sub(-#s) == s then return true end end
  return false
end
M.is_token_embedding = is_token_embedding

-- optim.AdamW(ctx, opts): see the file header for opts. Groups are assigned to the
-- parameters that exist now and, lazily, to any parameter created later (checked at step).
function M.AdamW(ctx, opts)
  opts = opts or {}
  for k in pairs(opts) do
    if not known[k] then error("optim.AdamW: unknown option '" .. tostring(k) .. "'", 2) end
  end
  local betas = opts.betas or { 0.9, 0.95 }
  if type(betas) ~= "table" or type(betas[1]) ~= "number" or type(betas[2]) ~= "number"
     or betas[1] < 0 or betas[1] >= 1 or betas[2] < 0 or betas[2] >= 1 then
    error("optim.AdamW: betas must be two numbers in [0, 1)", 2)
  end
  local self = setmetatable({
    ctx = ctx, raw = raw_ctx(ctx),
    lr = opts.lr or 6e-4,
    beta1 = betas[1], beta2 = betas[2],
    eps = opts.eps or 1e-8,
    weight_decay = opts.weight_decay or 0.1,
    decay_rule = opts.decay or default_decay,
    decay_norm_gains = opts.decay_norm_gains and true or false,
    t = 0,                 -- steps taken (bias correction uses t+1 on the next step)
    nassigned = 0,         -- parameters whose group is set
    embed_weight_decay = opts.embed_weight_decay,
    lr_scale = ffi.new("float[3]", 1, 1, 1),
    wd = ffi.new("float[3]"),
  }, AdamW)
  if type(self.lr) ~= "number" or type(self.eps) ~= "number" or type(self.weight_decay) ~= "number" then
    error("optim.AdamW: lr, eps and weight_decay must be numbers", 2)
  end
  if self.embed_weight_decay ~= nil and (type(self.embed_weight_decay) ~= "number" or self.embed_weight_decay < 0) then
    error("optim.AdamW: embed_weight_decay must be a number >= 0, got " .. tostring(self.embed_weight_decay), 2)
  end
  self.n_groups = self.embed_weight_decay ~= nil and 3 or 2
  self:assign_groups()
  return self
end

-- true when parameter p is in the decayed group
function AdamW:decays(p)
  if self.decay_rule(p) then return true end
  return self.decay_norm_gains and is_norm_gain(p)
end

-- give every not-yet-assigned parameter its group (0 decay, 1 no decay, 2 token embeddings
-- when embed_weight_decay is set)
function AdamW:assign_groups()
  local n = C.ol_param_count(self.raw)
  for i = self.nassigned, n - 1 do
    local p = C.ol_param_get(self.raw, i)
    local g = self:decays(p) and 0 or 1
    if self.n_groups == 3 and is_token_embedding(p) then g = 2 end
    ol.check_status(C.ol_param_set_group(p, g))
  end
  self.nassigned = n
end

-- the parameters of each group as name lists: { decay = {...}, no_decay = {...}, embed = {...} }
function AdamW:groups()
  self:assign_groups()
  local out = { decay = {}, no_decay = {}, embed = {} }
  for i = 0, C.ol_param_count(self.raw) - 1 do
    local p = C.ol_param_get(self.raw, i)
    local g = C.ol_param_group(p)
    local list = g == 0 and out.decay or g == 2 and out.embed or out.no_decay
    list[#list + 1] = ffi.string(p.name)
  end
  return out
end

-- the decoupled decay of each group into self.wd (0 decayed, 1 not, 2 the token embeddings when
-- embed_weight_decay is set); returns the group count the engine's steps take (AdamW, and the
-- AdamW part of outlierlab.nn.optim_extra's optimizers)
function AdamW:group_decays()
  self.wd[0], self.wd[1], self.wd[2] = self.weight_decay, 0, self.embed_weight_decay or 0
  return self.n_groups
end

-- one AdamW step over every parameter with learning rate lr (default: opts.lr); gscale
-- (default 1) multiplies every gradient first: the clipping factor of M.clip_factor, so that
-- clipping needs no pass of its own over the gradients
function AdamW:step(lr, gscale)
  lr = lr or self.lr
  gscale = gscale or 1
  if type(lr) ~= "number" or lr ~= lr then error("optim.AdamW:step: lr must be a number, got " .. tostring(lr), 2) end
  if C.ol_param_count(self.raw) ~= self.nassigned then self:assign_groups() end
  local ngroups = self:group_decays()
  self.t = self.t + 1
  local rc = C.ol_adamw_step_scaled(self.raw, gscale, lr, self.beta1, self.beta2, self.eps, ngroups, self.lr_scale, self.wd, self.t)
  if rc ~= 0 then
    self.t = self.t - 1
    ol.engine_error(1)
  end
  self.last_lr = lr
end

-- what a checkpoint needs besides the m/v buffers (those live in the flat buffers)
function AdamW:state()
  return { step = self.t, lr = self.lr, betas = { self.beta1, self.beta2 }, eps = self.eps,
           weight_decay = self.weight_decay, embed_weight_decay = self.embed_weight_decay }
end

function AdamW:load_state(s)
  if type(s) ~= "table" or type(s.step) ~= "number" or s.step < 0 or s.step ~= math.floor(s.step) then
    error("optim.AdamW:load_state: expected a table with an integer step >= 0", 2)
  end
  self.t = s.step
  return self
end

-- ---------------------------------------------------------------- clipping
-- Scales the flat gradient buffer so that its global L2 norm is at most max_norm
-- (as torch.nn.utils.clip_grad_norm_: factor max/(norm + 1e-6), applied only when < 1).
-- Returns the norm before clipping. A non-finite norm leaves the gradients untouched
-- (the caller decides: skip the step or stop).
function M.clip_grad_norm(ctx, max_norm)
  local raw = raw_ctx(ctx)
  if type(max_norm) ~= "number" or max_norm <= 0 then
    error("optim.clip_grad_norm: max_norm must be a positive number, got " .. tostring(max_norm), 2)
  end
  local norm = C.ol_grad_norm(raw)
  if norm == norm and norm < math.huge then
    local f = max_norm / (norm + 1e-6)
    if f < 1 then C.ol_grad_scale(raw, f) end
  end
  return norm
end

-- The global gradient norm and the factor clip_grad_norm would scale the gradients by (1 when
-- no clipping applies, or max_norm is 0, or the norm is not finite), without touching them: pass
-- the factor to AdamW:step(lr, factor).
function M.clip_factor(ctx, max_norm)
  local raw = raw_ctx(ctx)
  local norm = C.ol_grad_norm(raw)
  local f = 1
  if max_norm > 0 and norm == norm and norm < math.huge then
    f = max_norm / (norm + 1e-6)
    if f >= 1 then f = 1 end
  end
  return norm, f
end

-- ---------------------------------------------------------------- schedules
-- optim.schedule{kind=, lr=, min_lr=0, warmup=0, steps=, cooldown=} returns lr_at(step), step >= 1:
--   warmup: lr·step/warmup for step <= warmup (linear from 0, reaching lr at step = warmup);
--   then with progress q = (step − warmup)/(steps − warmup) clamped to [0, 1]:
--   cosine:   min_lr + ½(1 + cos πq)(lr − min_lr)
--   linear:   lr − q(lr − min_lr)
--   constant: lr
--   wsd:      warmup, stable, decay (Hägele et al. 2024, "Scaling laws and compute-optimal training
--             beyond fixed training durations"): lr until step steps − cooldown, then linear to
--             min_lr at step = steps: lr − r(lr − min_lr), r = (step − (steps − cooldown))/cooldown
M.SCHEDULES = { cosine = true, linear = true, constant = true, wsd = true }

-- what is wrong with a wsd schedule's cooldown (nil: nothing): an integer in [1, steps − warmup]
-- (optim.schedule and train.config's pre-flight check word their errors around it)
function M.cooldown_problem(steps, warmup, cooldown)
  if type(cooldown) == "number" and cooldown >= 1 and cooldown == math.floor(cooldown)
     and cooldown <= steps - warmup then return nil end
  return string.format("an integer in [1, steps - warmup = %d], got %s", steps - warmup, tostring(cooldown))
end

function M.schedule(s)
  if type(s) ~= "table" then error("optim.schedule: expected a table", 2) end
  local kind = s.kind or "cosine"
  if not M.SCHEDULES[kind] then
    error("optim.schedule: kind must be cosine, linear, constant or wsd, got " .. tostring(kind), 2)
  end
  local lr, min_lr, warmup, steps = s.lr, s.min_lr or 0, s.warmup or 0, s.steps
  if type(lr) ~= "number" then error("optim.schedule: lr must be a number", 2) end
  if type(min_lr) ~= "number" or type(warmup) ~= "number" or warmup < 0 then
    error("optim.schedule: min_lr must be a number and warmup a number >= 0", 2)
  end
  if kind ~= "constant" and (type(steps) ~= "number" or steps < 1) then
    error("optim.schedule: " .. kind .. " needs steps >= 1", 2)
  end
  local cooldown = s.cooldown
  local bad = kind == "wsd" and M.cooldown_problem(steps, warmup, cooldown)
  if bad then error("optim.schedule: wsd needs cooldown steps, " .. bad, 2) end
  return function(step)
    if warmup > 0 and step <= warmup then return lr * step / warmup end
    if kind == "constant" then return lr end
    if kind == "wsd" then
      local r = (step - (steps - cooldown)) / cooldown
      if r <= 0 then return lr elseif r > 1 then r = 1 end
      return lr - r * (lr - min_lr)
    end
    local span = steps - warmup
    local q = span > 0 and (step - warmup) / span or 1
    if q < 0 then q = 0 elseif q > 1 then q = 1 end
    if kind == "cosine" then return min_lr + 0.5 * (1 + math.cos(math.pi * q)) * (lr - min_lr) end
    return lr - q * (lr - min_lr)
  end
end

return M
