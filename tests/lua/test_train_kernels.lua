-- test_train_kernels — the kernels made faster for training throughput, against their slow,
-- obvious references. GELU (tanh form, GPT-2/BERT): the engine computes x·σ(2u) with its own
-- vectorisable exp (engine/ops_elementwise.c); the reference here is the textbook formula
-- 0.5·x·(1 + tanh(u)), u = √(2/π)(x + 0.044715x³), and its derivative, in double precision.
local t = require "tap"
local ol = require "outlierlab"
local gradcheck = require "outlierlab.nn.gradcheck"

local K = math.sqrt(2 / math.pi)
local function tanh(u)
  if u > 20 then return 1 elseif u < -20 then return -1 end
  local e = math.exp(2 * u)
  return (e - 1) / (e + 1)
end
local function gelu(x) return 0.5 * x * (1 + tanh(K * (x + 0.044715 * x ^ 3))) end
local function dgelu(x)
  local th = tanh(K * (x + 0.044715 * x ^ 3))
  return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * K * (1 + 3 * 0.044715 * x * x)
end

local ctx = ol.Context { params = 2 ^ 20, step_bytes = 2 ^ 26 }
-- a dense sweep of [-12, 12], extremes, zero and tiny values; n > the engine's parallel
-- threshold so the threaded path runs too
local xs = { 0, 1e-30, -1e-30, 1e-7, -1e-7, 88, -88, 200, -200, 1e30, -1e30 }
local n0 = #xs
for i = 0, 60000 do xs[#xs + 1] = -12 + 24 * i / 60000 end
local n = #xs
local x = ctx:param("x", { n })
x:load(xs)
ctx:reset()
ctx:zero_grad()
local y = x:gelu("tanh")
local R = ctx:tensor({ n }):uniform_(-1, 1, 3)
local loss = (y * R):sum_all()
loss:backward()
local g = ol.C.ol_grads_data(ctx.raw)

local worst_y, worst_g, at_y, at_g = 0, 0, 0, 0
for i = 1, n do
  local xi = x.data[i - 1]            -- the float the engine saw
  local ry, rg = gelu(xi), dgelu(xi) * R.data[i - 1]
  local ey = math.abs(y.data[i - 1] - ry) / math.max(1e-6, math.abs(ry))
  -- the derivative crosses zero at x ≈ −0.752 (its two terms, each ~0.1–1, cancel there):
  -- relative to max(|ref|, 1e-2), i.e. absolute near the zero
  local eg = math.abs(g[i - 1] - rg) / math.max(1e-2, math.abs(rg))
  if math.abs(ry) < 1e-30 then ey = math.abs(y.data[i - 1] - ry) end   -- far negative tail: absolute
  if math.abs(rg) < 1e-30 then eg = math.abs(g[i - 1] - rg) end
  if ey > worst_y then worst_y, at_y = ey, xi end
  if eg > worst_g then worst_g, at_g = eg, xi end
end
-- Tolerance: the float input to exp, 2u, carries a few ulp of rounding, which exp turns into
-- a relative error of about |2u|·3e-7 (|2u| <= 20 where gelu is above the 1e-6 floor).
t.ok(worst_y < 5e-6, "gelu forward matches 0.5x(1+tanh u) to 5e-6 relative (1e-6 floor)",
     string.format("worst %.3g at x = %.9g", worst_y, at_y))
t.ok(worst_g < 5e-6, "gelu backward matches the derivative to 5e-6 relative (1e-2 floor)",
     string.format("worst %.3g at x = %.9g", worst_g, at_g))
t.diag(string.format("gelu: worst relative error forward %.2e (x = %.4g), backward %.2e (x = %.4g)",
                     worst_y, at_y, worst_g, at_g))
local finite = true
for i = 0, n - 1 do
  local v, d = y.data[i], g[i]
  if v ~= v or d ~= d or math.abs(v) == math.huge or math.abs(d) == math.huge then finite = false end
end
t.ok(finite, "no NaN/Inf for x up to ±1e30")
t.ok(y.data[0] == 0 and y.data[7] == 200 and y.data[8] == 0 and y.data[10] == 0 and g[10] == 0,
     "gelu(0) = 0, gelu(200) = 200, gelu(-200) = 0, gelu(-1e30) = 0 with gradient 0",
     string.format("%g %g %g %g %g", y.data[0], y.data[7], y.data[8], y.data[10], g[10]))
local _ = n0

-- finite differences through the op (outlierlab.nn.gradcheck)
ctx:reset()
local xp = ctx:param("xp", { 3, 7 })
xp:uniform_(-4, 4, 9)
local err = gradcheck.check(ctx, function(a) return a:gelu("tanh") end, { xp })
t.ok(err < 1e-2, "gelu backward vs central finite differences", "max error " .. tostring(err))

-- SiLU x·σ(x) and σ(x) (LLaMA's SwiGLU) with the same vectorisable exp, against the textbook
-- formulas in double precision over the same sweep
local function sig(v) return 1 / (1 + math.exp(-v)) end
for _, case in ipairs {
  { "silu", function(v) return v * sig(v) end, function(v) local s = sig(v) return s * (1 + v * (1 - s)) end, 5e-6 },
  -- σ(1 − σ): 1 − σ cancels for large x (a few ulp of σ against a small 1 − σ), as in the libm form
  { "sigmoid", sig, function(v) local s = sig(v) return s * (1 - s) end, 2e-5 },
} do
  local name, f, df, gtol = case[1], case[2], case[3], case[4]
  ctx:reset()
  ctx:zero_grad()
  local yy = x[name](x)
  local RR = ctx:tensor({ n }):uniform_(-1, 1, 5)
  ;(yy * RR):sum_all():backward()
  local wy, wg, fin = 0, 0, true
  for i = 1, n do
    local xi = x.data[i - 1]
    local ry, rg = f(xi), df(xi) * RR.data[i - 1]
    local ey = math.abs(yy.data[i - 1] - ry) / math.max(1e-6, math.abs(ry))
    local eg = math.abs(g[i - 1] - rg) / math.max(1e-2, math.abs(rg))
    if math.abs(ry) < 1e-30 then ey = math.abs(yy.data[i - 1] - ry) end
    if ey > wy then wy = ey end
    if eg > wg then wg = eg end
    local v, d = yy.data[i - 1], g[i - 1]
    if v ~= v or d ~= d or math.abs(v) == math.huge or math.abs(d) == math.huge then fin = false end
  end
  t.ok(wy < 5e-6, name .. " forward matches the formula to 5e-6 relative", string.format("worst %.3g", wy))
  t.ok(wg < gtol, string.format("%s backward matches the derivative to %g relative (1e-2 floor)", name, gtol),
    string.format("worst %.3g", wg))
  t.ok(fin, name .. ": no NaN/Inf for x up to ±1e30")
  ctx:reset()
  local e2 = gradcheck.check(ctx, function(a) return a[name](a) end, { xp })
  t.ok(e2 < 1e-2, name .. " backward vs central finite differences", "max error " .. tostring(e2))
end

-- GELU, erf form (BERT, ViT): the forward keeps 1 + erf(x/√2) for the backward (one erff per
-- element instead of two, engine/ops_elementwise.c). It must be the libm formula bit for bit:
-- 0.5·x·(1 + erff(x/√2)) and its derivative 0.5·(1 + erff(x/√2)) + x·φ(x), emulated here in float
-- arithmetic (a + − × of two floats done in double and rounded to float is the correctly
-- rounded float result) with libm's erff and expf through the FFI.
local ffi = require "ffi"
ffi.cdef "float erff(float); float expf(float);"
local fbuf = ffi.new("float[1]")
local function F(v) fbuf[0] = v return fbuf[0] end
local C1, C2 = F(0.7071067811865476), F(0.3989422804014327)
for _, grad_mode in ipairs { true, false } do
  ctx:reset()
  ctx:zero_grad()
  local ye, RE
  if grad_mode then
    ye = x:gelu("erf")
    RE = ctx:tensor({ n }):uniform_(-1, 1, 7)
    ;(ye * RE):sum_all():backward()
  else
    ctx:no_grad(function() ye = x:gelu("erf") end)
  end
  local bad
  for i = 1, n do
    local xi = x.data[i - 1]
    local e1 = F(1 + ffi.C.erff(F(xi * C1)))
    local ry = F(F(0.5 * xi) * e1)
    if ye.data[i - 1] ~= ry then bad = string.format("y at x = %.9g: %.9g, formula %.9g", xi, ye.data[i - 1], ry) break end
    if grad_mode then
      local ex = ffi.C.expf(F(F(-0.5 * xi) * xi))
      local d = F(F(0.5 * e1) + F(F(xi * C2) * ex))
      local rg = F(RE.data[i - 1] * d)
      if g[i - 1] ~= rg then bad = string.format("dy/dx at x = %.9g: %.9g, formula %.9g", xi, g[i - 1], rg) break end
    end
  end
  t.ok(bad == nil, string.format("gelu erf %s equals the libm formula in float bit for bit on %d values",
                                 grad_mode and "forward and backward (grad)" or "forward (no grad)", n), bad)
end
ctx:reset()
local e3 = gradcheck.check(ctx, function(a) return a:gelu("erf") end, { xp })
t.ok(e3 < 1e-2, "gelu erf backward vs central finite differences", "max error " .. tostring(e3))

return t.done()
