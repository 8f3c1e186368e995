-- compress — post-training quantisation and pruning (QT §5 and App. C; SO Table 3).
--
--   local compress = require "outlierlab.compress.fakequant"
--   local saved = compress.snapshot(ctx)                 -- keep the FP weights
--   compress.quantize_weights(params, {bits = 8, range = "minmax"|"mse"})
--   local q = compress.ActivationQuantizer{bits = 8, estimator = "running_minmax", momentum = 0.9}
--   q:calibrate(function() model:forward(batch) end)      -- once per calibration batch
--   q:enable(); ...evaluate...; q:disable()
--   compress.restore(ctx, saved)
--   compress.absmax(params, {bits = 8, per_channel = true})      -- SO Table 3, weights only
--   compress.prune(params, {sparsity = 0.5, global = false})       -- unstructured magnitude
--
-- Activation quantisation follows QT: asymmetric uniform per-tensor quantisers, static
-- ranges from calibration batches (running min-max with momentum 0.9, or a percentile),
-- applied to the output of every op that makes a new activation value (linear outputs and
-- so the next linear's input, residual and embedding sums, attention scores, softmax
-- outputs, norm and activation outputs) through ol.set_activation_hook. Each call site is
-- identified by its order in the forward pass, which is the same for every batch.
local ol = require "outlierlab"
local ffi = ol.ffi
local C = ol.C
local M = {}

-- ---------------------------------------------------------------- weights
-- A copy of the flat parameter buffer, to undo any in-place compression.
function M.snapshot(ctx)
  local n = tonumber(C.ol_params_numel(ctx.raw))
  local buf = ffi.new("float[?]", math.max(n, 1))
  ffi.copy(buf, C.ol_params_data(ctx.raw), n * 4)
  return { n = n, buf = buf }
end
function M.restore(ctx, snap)
  ffi.copy(C.ol_params_data(ctx.raw), snap.buf, snap.n * 4)
end

-- Weights to compress: parameters with >= 2 dims whose names match none of opts.skip
-- (Lua patterns; QT keeps the final head and the gates in full precision).
function M.select_weights(ctx, skip)
  local out = {}
  for _, p in ipairs(ctx:params()) do
    local name = ffi.string(p.name)
    local keep = p.ndim >= 2
    for _, pat in ipairs(skip or {}) do if name:match(pat) then keep = false end end
    if keep then out[#out + 1] = p end
  end
  return out
end

-- Symmetric uniform per-tensor quantisation in place; range "minmax" (s = max|w|/qmax) or
-- "mse" (grid search for the clipping threshold minimising the squared error).
function M.quantize_weights(params, opts)
  opts = opts or {}
  local bits = opts.bits or 8
  local qmax = 2 ^ (bits - 1) - 1
  for _, p in ipairs(params) do
    local s
    if (opts.range or "minmax") == "mse" then
      s = C.ol_mse_scale_symmetric(p, bits, opts.grid or 100)
      if s < 0 then ol.engine_error(1) end
    elseif opts.range == "minmax" or opts.range == nil then
      local mm = ffi.new("float[2]")
      ol.check_status(C.ol_minmax(p, mm))
      s = math.max(math.abs(mm[0]), math.abs(mm[1])) / qmax
    else
      error("quantize_weights: range must be 'minmax' or 'mse', got " .. tostring(opts.range), 2)
    end
    if s > 0 then ol.check_status(C.ol_fake_quant_(p, s, 0, -qmax, qmax)) end
  end
end

-- AbsMax weight-only quantisation (SO Table 3): per tensor or per output channel.
function M.absmax(params, opts)
  opts = opts or {}
  for _, p in ipairs(params) do
    ol.check_status(C.ol_absmax_quant_(p, opts.bits or 8, opts.per_channel and 1 or 0))
  end
end

-- Unstructured magnitude pruning in place; returns the number of weights set to zero.
function M.prune(params, opts)
  opts = opts or {}
  local n = #params
  if n == 0 then return 0 end
  local arr = ffi.new("ol_tensor *[?]", n)
  for i = 1, n do arr[i - 1] = params[i] end
  local z = C.ol_magnitude_prune_(n, arr, opts.sparsity or 0.5, opts.global and 1 or 0)
  if z < 0 then ol.engine_error(1) end
  return tonumber(z)
end

-- Fraction of exact zeros over a list of tensors.
function M.sparsity(params)
  local z, n = 0, 0
  for _, p in ipairs(params) do
    for i = 0, tonumber(p.numel) - 1 do if p.data[i] == 0 then z = z + 1 end end
    n = n + tonumber(p.numel)
  end
  return n > 0 and z / n or 0
end

-- ---------------------------------------------------------------- activations
-- Asymmetric b-bit parameters for a range [lo, hi] (the range is widened to include 0 so
-- that zero is exact, as in Jacob et al. 2018): scale, zero point, qmin, qmax.
function M.asymmetric_params(lo, hi, bits)
  lo, hi = math.min(lo, 0), math.max(hi, 0)
  local qmax = 2 ^ bits - 1
  local s = (hi - lo) / qmax
  if s <= 0 then s = 1e-8 end
  local z = math.floor(-lo / s + 0.5)
  return s, z, 0, qmax
end

local AQ = {}
AQ.__index = AQ

-- opts: bits (8), estimator "running_minmax" (momentum, QT default 0.9) | "minmax" (global
-- min/max over all calibration batches) | "percentile" (p, e.g. 99.999, averaged over
-- batches), kinds (set of op kinds to quantise; default all hooked kinds).
function M.ActivationQuantizer(opts)
  opts = opts or {}
  local est = opts.estimator or "running_minmax"
  if est ~= "running_minmax" and est ~= "minmax" and est ~= "percentile" then
    error("ActivationQuantizer: estimator must be running_minmax, minmax or percentile, got " .. tostring(est), 2)
  end
  return setmetatable({ bits = opts.bits or 8, estimator = est, momentum = opts.momentum or 0.9,
    p = opts.percentile or 99.999, kinds = opts.kinds, sites = {}, nbatches = 0, mode = "off",
    skip_last_linear = opts.skip_last_linear ~= false }, AQ)
end

function AQ:_observe(t, kind)
  self.site = self.site + 1
  local s = self.sites[self.site]
  if not s then s = { kind = kind, n = 0 }; self.sites[self.site] = s end
  if s.kind ~= kind then
    error(string.format("ActivationQuantizer: site %d was a %s in calibration but is a %s now (the forward pass changed)", self.site, s.kind, kind), 0)
  end
  local r = ffi.new("float[2]")
  if self.estimator == "percentile" then ol.check_status(C.ol_percentile_range(t, self.p, r))
  else ol.check_status(C.ol_minmax(t, r)) end
  local lo, hi = r[0], r[1]
  if s.n == 0 then s.lo, s.hi = lo, hi
  elseif self.estimator == "running_minmax" then
    local m = self.momentum
    s.lo, s.hi = m * s.lo + (1 - m) * lo, m * s.hi + (1 - m) * hi
  elseif self.estimator == "minmax" then
    s.lo, s.hi = math.min(s.lo, lo), math.max(s.hi, hi)
  else   -- percentile: mean over batches
    s.lo, s.hi = (s.lo * s.n + lo) / (s.n + 1), (s.hi * s.n + hi) / (s.n + 1)
  end
  s.n = s.n + 1
  return t
end

function AQ:_quantize(t, kind)
  self.site = self.site + 1
  local s = self.sites[self.site]
  if not s then error("ActivationQuantizer: site " .. self.site .. " (" .. kind .. ") was never calibrated", 0) end
  if s.skip then return t end
  local sc, z, qmin, qmax = M.asymmetric_params(s.lo, s.hi, self.bits)
  return ol.check_ptr(C.ol_fake_quant(t, sc, z, qmin, qmax))
end

function AQ:_hook()
  return function(t, kind)
    if self.kinds and not self.kinds[kind] then return t end
    if self.mode == "calibrate" then return self:_observe(t, kind) end
    if self.mode == "quantize" then return self:_quantize(t, kind) end
    return t
  end
end

-- Run fn (one forward pass over one calibration batch) while observing ranges.
function AQ:calibrate(fn)
  self.mode, self.site = "calibrate", 0
  ol.set_activation_hook(self:_hook())
  local ok, err = pcall(fn)
  ol.set_activation_hook(nil)
  self.mode = "off"
  if not ok then error(err, 0) end
  self.nbatches = self.nbatches + 1
  if self.skip_last_linear then   -- the final head's output (logits) stays in full precision
    for i = #self.sites, 1, -1 do
      if self.sites[i].kind == "linear" then self.sites[i].skip = true break end
    end
  end
end

-- Run fn with every calibrated site quantised.
function AQ:run(fn)
  if self.nbatches == 0 then error("ActivationQuantizer: run before any calibrate", 2) end
  self.mode = "quantize"
  ol.set_activation_hook(function(t, kind)
    if self.kinds and not self.kinds[kind] then return t end
    return self:_quantize(t, kind)
  end)
  self.site = 0
  local res = { pcall(fn, function() self.site = 0 end) }
  ol.set_activation_hook(nil)
  self.mode = "off"
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2)
end

function AQ:num_sites() return #self.sites end

return M
