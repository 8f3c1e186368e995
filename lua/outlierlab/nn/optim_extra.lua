-- optim_extra — the optimizers of the outlier remedies (docs/reference/training.md), with AdamW's
-- interface (step(lr), state(), load_state(s), groups()) so that train.lua takes them by name:
--
--   local ox = require "outlierlab.nn.optim_extra"
--   local opt = ox.Muon(ctx, { lr = 6e-4, weight_decay = 0.1, momentum = 0.95, ns_steps = 5 })
--   local opt = ox.OrthoAdam(ctx, { lr = 6e-4, betas = {0.9, 0.95}, seed = 1 })
--
-- Muon (Jordan et al. 2024; Outlier-Safe Pre-Training, Park et al. 2025): Newton–Schulz
-- orthogonalised Nesterov momentum for the hidden 2-D weights (default: every 2-D parameter whose
-- name ends in "_proj.weight": the attention and MLP projections), AdamW for the rest (embeddings,
-- the head, gains, biases, the attention variants' own parameters). Both in engine/optim_extra.c.
-- opts: lr, betas, eps, weight_decay, decay, decay_norm_gains (as AdamW, for the AdamW part and
-- the decay of the Muon part), momentum = 0.95, nesterov = true, ns_steps = 5,
-- scale = "rms" (0.2·√max(rows, cols): AdamW's lr carries over, Moonlight) | "jordan"
-- (√max(1, rows/cols), with its own lr: muon_lr), muon_lr (default lr), muon = function(p) -> bool.
--
-- OrthoAdam (Kaul et al., ICLR 2025): AdamW whose moments live in a fixed rotated basis per
-- parameter: a parameter seen as G (rows, cols) = (numel/last, last) is rotated G̃ = Qa·G·Qbᵀ
-- with fixed random orthogonal Qa (rows×rows) and Qb (cols×cols) drawn once from seed (a side
-- larger than max_rot keeps the identity: no product), Adam runs on G̃, and the update is rotated
-- back. opts: as AdamW plus seed, max_rot = 4096, rotation = "random" | "identity" (identity
-- matrices, which reproduce AdamW bit for bit: the known-answer test).
local ol = require "outlierlab"
local ffi = require "ffi"
local optim = require "outlierlab.optim"
local C = ol.C

local M = {}

local function subclass()
  local cls = setmetatable({}, { __index = optim.AdamWClass })
  cls.__index = cls
  return cls
end

-- AdamW-like base: groups, lr, betas, … from optim.AdamW (which checks the AdamW options)
local function base(ctx, opts, own, cls, who)
  opts = opts or {}
  local aopts = {}
  for k, v in pairs(opts) do
    if own[k] == nil then aopts[k] = v end
  end
  local ok, self = pcall(optim.AdamW, ctx, aopts)
  if not ok then error((tostring(self):gsub("optim%.AdamW", who)), 3) end
  return setmetatable(self, cls)
end

local function idx_array(list)
  local a = ffi.new("int32_t[?]", math.max(#list, 1))
  for i, v in ipairs(list) do a[i - 1] = v end
  return a
end

-- ---------------------------------------------------------------- Muon
local Muon = subclass()
M.MuonClass = Muon
local muon_own = { momentum = 0.95, nesterov = true, ns_steps = 5, scale = "rms", muon_lr = false, muon = false }

function M.default_muon(p)
  return p.ndim == 2 and ffi.string(p.name):match("_proj%.weight$") ~= nil
end

function M.Muon(ctx, opts)
  opts = opts or {}
  local self = base(ctx, opts, muon_own, Muon, "optim.Muon")
  for k, v in pairs(muon_own) do self[k] = v end
  for k in pairs(muon_own) do if opts[k] ~= nil then self[k] = opts[k] end end
  if type(self.momentum) ~= "number" or self.momentum < 0 or self.momentum >= 1 then
    error("optim.Muon: momentum must be in [0, 1)", 2)
  end
  if type(self.ns_steps) ~= "number" or self.ns_steps < 0 or self.ns_steps ~= math.floor(self.ns_steps) then
    error("optim.Muon: ns_steps must be an integer >= 0", 2)
  end
  if self.scale ~= "rms" and self.scale ~= "jordan" then error("optim.Muon: scale must be rms or jordan", 2) end
  self.muon_rule = self.muon or M.default_muon
  self.kind = "muon"
  return self
end

-- the parameter indices of each part: muon = {...}, adamw = {...}
function Muon:split()
  local n = C.ol_param_count(self.raw)
  if self.parts and self.parts.n == n then return self.parts end
  local mu, ad = {}, {}
  for i = 0, n - 1 do
    local p = C.ol_param_get(self.raw, i)
    if self.muon_rule(p) then mu[#mu + 1] = i else ad[#ad + 1] = i end
  end
  self.parts = { n = n, muon = mu, adamw = ad, muon_idx = idx_array(mu), adamw_idx = idx_array(ad) }
  return self.parts
end

-- names of the parameters Muon updates and of those AdamW updates
function Muon:partition()
  local s, out = self:split(), { muon = {}, adamw = {} }
  for _, part in ipairs({ "muon", "adamw" }) do
    for _, i in ipairs(s[part]) do out[part][#out[part] + 1] = ffi.string(C.ol_param_get(self.raw, i).name) end
  end
  return out
end

-- step(lr, gscale): gscale (the clipping factor of optim.clip_factor) scales the gradients first
function Muon:step(lr, gscale)
  lr = lr or self.lr
  if type(lr) ~= "number" or lr ~= lr then error("optim.Muon:step: lr must be a number, got " .. tostring(lr), 2) end
  if gscale and gscale ~= 1 then C.ol_grad_scale(self.raw, gscale) end
  if C.ol_param_count(self.raw) ~= self.nassigned then self:assign_groups() end
  local s = self:split()
  local ngroups = self:group_decays()
  self.t = self.t + 1
  local rc = C.ol_adamw_step_some(self.raw, #s.adamw, s.adamw_idx, lr, self.beta1, self.beta2, self.eps, ngroups,
                                  self.lr_scale, self.wd, self.t)
  if rc == 0 then
    -- Muon's decay follows the AdamW groups (weight matrices are in the decayed group by default)
    local dec, nodec = {}, {}
    for _, i in ipairs(s.muon) do
      local p = C.ol_param_get(self.raw, i)
      if C.ol_param_group(p) == 0 then dec[#dec + 1] = i else nodec[#nodec + 1] = i end
    end
    local mlr = self.muon_lr and lr * self.muon_lr / self.lr or lr
    local mode = self.scale == "rms" and 1 or 0
    rc = C.ol_muon_step(self.raw, #dec, idx_array(dec), mlr, self.momentum, self.nesterov and 1 or 0, self.ns_steps,
                        self.weight_decay, mode)
    if rc == 0 and #nodec > 0 then
      rc = C.ol_muon_step(self.raw, #nodec, idx_array(nodec), mlr, self.momentum, self.nesterov and 1 or 0,
                          self.ns_steps, 0, mode)
    end
  end
  if rc ~= 0 then
    self.t = self.t - 1
    ol.engine_error(1)
  end
  self.last_lr = lr
end

function Muon:state()
  local s = optim.AdamWClass.state(self)
  s.kind, s.momentum, s.ns_steps, s.scale = "muon", self.momentum, self.ns_steps, self.scale
  return s
end

-- ---------------------------------------------------------------- OrthoAdam
local Ortho = subclass()
M.OrthoAdamClass = Ortho
local ortho_own = { seed = 1, max_rot = 4096, rotation = "random" }

function M.OrthoAdam(ctx, opts)
  opts = opts or {}
  local self = base(ctx, opts, ortho_own, Ortho, "optim.OrthoAdam")
  for k, v in pairs(ortho_own) do self[k] = opts[k] == nil and v or opts[k] end
  if self.rotation ~= "random" and self.rotation ~= "identity" then
    error("optim.OrthoAdam: rotation must be random or identity", 2)
  end
  self.rot = {}        -- n -> persistent (n, n) orthogonal matrix (one per size: fixed basis per shape)
  self.kind = "orthoadam"
  return self
end

-- the fixed (n, n) rotation (drawn from seed and n, so a resumed run draws the same one)
function Ortho:rotation_of(n)
  if n > self.max_rot then return nil end
  local q = self.rot[n]
  if q then return q end
  q = ol.check_ptr(C.ol_tensor_new_persistent(self.raw, C.OL_F32, 2, ffi.new("int64_t[2]", n, n), "orthoadam.rot"))
  if self.rotation == "identity" then
    ffi.fill(q.data, n * n * 4, 0)
    for i = 0, n - 1 do q.data[i * n + i] = 1 end
  else
    ol.check_status(C.ol_random_orthogonal(q, self.seed * 1000003 + n))
  end
  self.rot[n] = q
  return q
end

function Ortho:prepare()
  local n = C.ol_param_count(self.raw)
  if self.prep and self.prep.n == n then return self.prep end
  local qa, qb = ffi.new("ol_tensor *[?]", math.max(n, 1)), ffi.new("ol_tensor *[?]", math.max(n, 1))
  local idx = ffi.new("int32_t[?]", math.max(n, 1))
  for i = 0, n - 1 do
    local p = C.ol_param_get(self.raw, i)
    local cols = tonumber(p.shape[p.ndim - 1])
    local rows = tonumber(p.numel) / cols
    qa[i] = rows > 1 and self:rotation_of(rows) or nil
    qb[i] = self:rotation_of(cols)
    idx[i] = i
  end
  self.prep = { n = n, qa = qa, qb = qb, idx = idx }
  return self.prep
end

-- step(lr, gscale): gscale (the clipping factor of optim.clip_factor) scales the gradients first
function Ortho:step(lr, gscale)
  lr = lr or self.lr
  if type(lr) ~= "number" or lr ~= lr then error("optim.OrthoAdam:step: lr must be a number, got " .. tostring(lr), 2) end
  if gscale and gscale ~= 1 then C.ol_grad_scale(self.raw, gscale) end
  if C.ol_param_count(self.raw) ~= self.nassigned then self:assign_groups() end
  local pr = self:prepare()
  local ngroups = self:group_decays()
  self.t = self.t + 1
  local rc = C.ol_orthoadam_step(self.raw, pr.n, pr.idx, pr.qa, pr.qb, lr, self.beta1, self.beta2, self.eps, ngroups,
                                 self.lr_scale, self.wd, self.t)
  if rc ~= 0 then
    self.t = self.t - 1
    ol.engine_error(1)
  end
  self.last_lr = lr
end

function Ortho:state()
  local s = optim.AdamWClass.state(self)
  s.kind, s.seed, s.max_rot, s.rotation = "orthoadam", self.seed, self.max_rot, self.rotation
  return s
end

-- by name: "adamw" | "muon" | "orthoadam"
function M.new(kind, ctx, opts)
  if kind == nil or kind == "adamw" then return optim.AdamW(ctx, opts) end
  if kind == "muon" then return M.Muon(ctx, opts) end
  if kind == "orthoadam" then return M.OrthoAdam(ctx, opts) end
  error("optim: unknown optimizer '" .. tostring(kind) .. "'; valid: adamw, muon, orthoadam", 2)
end

return M
