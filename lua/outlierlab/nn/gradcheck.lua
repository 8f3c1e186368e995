-- gradcheck — backprop against central finite differences.
--
-- check(ctx, fn, inputs, opts): fn(inputs...) returns a tensor y; the checked scalar is
-- L = Σ y ⊙ R with R a fixed random tensor (so every output element matters), computed in
-- double in Lua. For every element x of every input: numeric dL/dx = (L(x+h) − L(x−h)) / 2h.
-- The error of one element is |analytic − numeric| / max(1, |analytic|, |numeric|); the
-- returned value is the largest over all elements (tests require <= 1e-2 unless stated).
-- inputs must be persistent f32 tensors or parameters (their gradients outlive the step).
local ol = require "outlierlab"
local M = {}

local function weighted_sum(y, R)
  local s = 0
  for i = 0, tonumber(y.numel) - 1 do s = s + y.data[i] * R[i + 1] end
  return s
end

function M.check(ctx, fn, inputs, opts)
  opts = opts or {}
  local h = opts.eps or 1e-2
  for _, x in ipairs(inputs) do
    x:requires_grad_(true)
    if x:is_param() then ctx:zero_grad() else x:zero_grad() end
  end
  ctx:reset()
  local y = fn(unpack(inputs))
  local R = {}
  local seed = opts.seed or 99
  for i = 1, tonumber(y.numel) do R[i] = 2 * ol.C.ol_rand_uniform(seed, i) - 1 end
  local Rt = ctx:from_table(R, y:size())
  local loss = (y * Rt):sum_all()
  loss:backward()
  local analytic = {}
  for k, x in ipairs(inputs) do analytic[k] = x:gradlist() end
  ctx:reset()
  local worst, where = 0, ""
  for k, x in ipairs(inputs) do
    for i = 0, tonumber(x.numel) - 1 do
      local v = x.data[i]
      x.data[i] = v + h
      local xp = x.data[i]
      local lp = ctx:no_grad(function() local o = fn(unpack(inputs)); local s = weighted_sum(o, R); ctx:reset(); return s end)
      x.data[i] = v - h
      local xm = x.data[i]
      local lm = ctx:no_grad(function() local o = fn(unpack(inputs)); local s = weighted_sum(o, R); ctx:reset(); return s end)
      x.data[i] = v
      -- the perturbation actually applied in fp32
      local num = (lp - lm) / (xp - xm)
      local a = analytic[k][i + 1]
      local err = math.abs(a - num) / math.max(1, math.abs(a), math.abs(num))
      if err > worst or err ~= err then
        worst = err ~= err and math.huge or err
        where = string.format("input %d (%s) element %d: analytic %.6g numeric %.6g", k, tostring(x), i, a, num)
      end
    end
  end
  return worst, where
end

return M
