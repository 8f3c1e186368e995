-- test_ops — every op of the engine header's ops section:
--   a forward check against numbers computed by hand (or in double in this file), and
--   a gradient check against central finite differences (outlierlab.nn.gradcheck), with the
--   bound in the test name. Gradcheck error = |analytic − numeric| / max(1, |analytic|,
--   |numeric|), worst element over all inputs, step h = 1e-2 on fp32 tensors.
-- Bounds: 1e-4 for ops that are linear in each input (matmul, linear, add/sub/mul, shape
-- ops, embedding, dropout: the central difference is exact up to fp32 rounding), 1e-3 for
-- smooth nonlinear ops (truncation error O(h²)), 2e-3 for the normalisations (their
-- third derivatives are larger at C = 4..5).
-- Also: no-grad records no tape, dropout seeding, gradient accumulation across backward calls.
local t = require "tap"
local ol = require "outlierlab"
local gradcheck = require "outlierlab.nn.gradcheck"

local ctx = ol.Context{ params = 2^16, step_bytes = 2^26 }

-- ---------------------------------------------------------------- helpers
local function T(shape, vals, name)           -- persistent f32 tensor (gradcheck inputs)
  local x = ctx:tensor(shape, { persistent = true, name = name or "x" })
  if vals then x:load(vals) end
  return x
end
local function U(shape, seed, lo, hi, name)   -- persistent, uniform in [lo, hi)
  return T(shape, nil, name):uniform_(lo or -1, hi or 1, seed)
end
local function I(shape, vals)                 -- persistent int32
  return ctx:tensor(shape, { dtype = "i32", persistent = true, name = "ids" }):load(vals)
end
local function shape_s(s) return "(" .. table.concat(s, ",") .. ")" end

local worst_by_name = {}
-- forward check: y has shape `shape` and values `want` within tol (absolute)
local function fwd(name, y, shape, want, tol)
  tol = tol or 1e-6
  local ok, worst, diag = true, 0, ""
  if y:shape_str() ~= shape_s(shape) then ok = false; diag = "shape " .. y:shape_str() .. " want " .. shape_s(shape) end
  if tonumber(y.numel) ~= #want then ok = false; diag = diag .. " numel " .. tonumber(y.numel) .. " want " .. #want end
  if ok then
    for i, w in ipairs(want) do
      local d = math.abs(y.data[i - 1] - w)
      if d ~= d then d = math.huge end
      if d > worst then worst = d; diag = string.format("element %d: got %.9g want %.9g", i - 1, y.data[i - 1], w) end
    end
  end
  t.ok(ok and worst <= tol, string.format("%s: forward %s (max abs err <= %g)", name, shape_s(shape), tol), diag)
  ctx:reset()
end
-- gradient check with the bound in the name
local function grad(name, fn, inputs, bound, opts)
  local e, where = gradcheck.check(ctx, fn, inputs, opts)
  t.ok(e <= bound, string.format("%s: gradcheck rel err <= %g", name, bound),
       string.format("worst err %.3g at %s", e, where))
  local fam = name:match("^(%S+)")
  worst_by_name[fam] = math.max(worst_by_name[fam] or 0, e)
  ctx:reset()
end
local LIN, SMOOTH, NORM = 1e-4, 1e-3, 2e-3

-- a = [[1,2,3],[4,5,6]], b = [[7,8],[9,10],[11,12]]: a·b = [[58,64],[139,154]]
local A  = T({ 2, 3 }, { 1, 2, 3, 4, 5, 6 }, "a")
local At = T({ 3, 2 }, { 1, 4, 2, 5, 3, 6 }, "at")       -- aᵀ stored
local B  = T({ 3, 2 }, { 7, 8, 9, 10, 11, 12 }, "b")
local Bt = T({ 2, 3 }, { 7, 9, 11, 8, 10, 12 }, "bt")    -- bᵀ stored
local AB = { 58, 64, 139, 154 }

-- ---------------------------------------------------------------- matmul
fwd("matmul a·b", A:matmul(B), { 2, 2 }, AB)
fwd("matmul aᵀ·b (ta)", At:matmul(B, true, false), { 2, 2 }, AB)
fwd("matmul a·bᵀ (tb)", A:matmul(Bt, false, true), { 2, 2 }, AB)
fwd("matmul aᵀ·bᵀ (ta,tb)", At:matmul(Bt, true, true), { 2, 2 }, AB)
-- 3-D a with 2-D b: batch 1 of a is [[1,0,0],[0,1,0]] -> rows 0, 1 of b
local A3 = T({ 2, 2, 3 }, { 1, 2, 3, 4, 5, 6, 1, 0, 0, 0, 1, 0 }, "a3")
fwd("matmul 3-D a · 2-D b", A3:matmul(B), { 2, 2, 2 }, { 58, 64, 139, 154, 7, 8, 9, 10 })
fwd("matmul 3-D a · 2-D bᵀ (tb)", A3:matmul(Bt, false, true), { 2, 2, 2 }, { 58, 64, 139, 154, 7, 8, 9, 10 })
-- batched: b batch 1 = [[1,0],[0,1],[0,0]] so a1·b1 = [[1,0],[0,1]]
local B3 = T({ 2, 3, 2 }, { 7, 8, 9, 10, 11, 12, 1, 0, 0, 1, 0, 0 }, "b3")
fwd("matmul batched 3-D", A3:matmul(B3), { 2, 2, 2 }, { 58, 64, 139, 154, 1, 0, 0, 1 })
local A4 = T({ 1, 2, 2, 3 }, A3:tolist(), "a4")
local B4 = T({ 1, 2, 3, 2 }, B3:tolist(), "b4")
fwd("matmul batched 4-D", A4:matmul(B4), { 1, 2, 2, 2 }, { 58, 64, 139, 154, 1, 0, 0, 1 })
-- batched with transposes: aᵀ per batch
local A3t = ctx:no_grad(function() return A3:transpose(1, 2) end)
local A3tp = T({ 2, 3, 2 }, A3t:tolist(), "a3t")
local B3t = T({ 2, 2, 3 }, ctx:no_grad(function() return B3:transpose(1, 2) end):tolist(), "b3t")
ctx:reset()
fwd("matmul batched ta,tb", A3tp:matmul(B3t, true, true), { 2, 2, 2 }, { 58, 64, 139, 154, 1, 0, 0, 1 })
fwd("matmul 1-D a · 2-D b", T({ 3 }, { 1, 2, 3 }):matmul(B), { 2 }, { 58, 64 })

do
  local a = U({ 3, 4 }, 1); local b = U({ 4, 5 }, 2)
  local at = U({ 4, 3 }, 3); local bt = U({ 5, 4 }, 4)
  grad("matmul a·b (3,4)·(4,5)", function(x, y) return x:matmul(y) end, { a, b }, LIN)
  grad("matmul ta (4,3)ᵀ·(4,5)", function(x, y) return x:matmul(y, true, false) end, { at, b }, LIN)
  grad("matmul tb (3,4)·(5,4)ᵀ", function(x, y) return x:matmul(y, false, true) end, { a, bt }, LIN)
  grad("matmul ta,tb (4,3)ᵀ·(5,4)ᵀ", function(x, y) return x:matmul(y, true, true) end, { at, bt }, LIN)
  local a3 = U({ 2, 3, 4 }, 5)
  grad("matmul 3-D·2-D (2,3,4)·(4,5)", function(x, y) return x:matmul(y) end, { a3, b }, LIN)
  grad("matmul 3-D·2-Dᵀ (2,3,4)·(5,4)ᵀ", function(x, y) return x:matmul(y, false, true) end, { a3, bt }, LIN)
  local b3 = U({ 2, 4, 5 }, 6); local a3t = U({ 2, 4, 3 }, 7); local b3t = U({ 2, 5, 4 }, 8)
  for _, c in ipairs({ { false, false, a3, b3 }, { true, false, a3t, b3 }, { false, true, a3, b3t }, { true, true, a3t, b3t } }) do
    grad(string.format("matmul batched 3-D ta=%s tb=%s", tostring(c[1]), tostring(c[2])),
         function(x, y) return x:matmul(y, c[1], c[2]) end, { c[3], c[4] }, LIN)
  end
  local a4 = U({ 2, 2, 2, 3 }, 9); local b4 = U({ 2, 2, 3, 2 }, 10)
  grad("matmul batched 4-D (2,2,2,3)·(2,2,3,2)", function(x, y) return x:matmul(y) end, { a4, b4 }, LIN)
end

-- ---------------------------------------------------------------- linear
fwd("linear x·wᵀ", A:linear(Bt), { 2, 2 }, AB)
fwd("linear x·wᵀ + bias", A:linear(Bt, T({ 2 }, { 1, -1 })), { 2, 2 }, { 59, 63, 140, 153 })
fwd("linear 3-D x", A3:linear(Bt), { 2, 2, 2 }, { 58, 64, 139, 154, 7, 8, 9, 10 })
do
  local x = U({ 2, 3, 4 }, 11); local w = U({ 5, 4 }, 12); local bias = U({ 5 }, 13)
  grad("linear with bias (2,3,4)->(2,3,5)", function(a, b, c) return a:linear(b, c) end, { x, w, bias }, LIN)
  grad("linear without bias (2,3,4)->(2,3,5)", function(a, b) return a:linear(b) end, { x, w }, LIN)
end

-- ---------------------------------------------------------------- binary ops
do
  local a = T({ 2, 3 }, { 1, 2, 3, 4, 5, 6 })
  local b = T({ 2, 3 }, { 6, 5, 4, 3, 2, 1 })
  local r = T({ 3 }, { 1, 2, 4 })             -- broadcast over the leading dim
  local s = T({ 1 }, { 2 })                   -- one element
  fwd("add same shape", a + b, { 2, 3 }, { 7, 7, 7, 7, 7, 7 })
  fwd("sub same shape", a - b, { 2, 3 }, { -5, -3, -1, 1, 3, 5 })
  fwd("mul same shape", a * b, { 2, 3 }, { 6, 10, 12, 12, 10, 6 })
  fwd("div same shape", a / b, { 2, 3 }, { 1 / 6, 2 / 5, 3 / 4, 4 / 3, 5 / 2, 6 }, 1e-6)
  fwd("add broadcast (2,3)+(3)", a + r, { 2, 3 }, { 2, 4, 7, 5, 7, 10 })
  fwd("add broadcast (3)+(2,3)", r + a, { 2, 3 }, { 2, 4, 7, 5, 7, 10 })
  fwd("sub broadcast (2,3)-(3)", a - r, { 2, 3 }, { 0, 0, -1, 3, 3, 2 })
  fwd("sub broadcast (3)-(2,3)", r - a, { 2, 3 }, { 0, 0, 1, -3, -3, -2 })
  fwd("mul broadcast (2,3)*(3)", a * r, { 2, 3 }, { 1, 4, 12, 4, 10, 24 })
  fwd("mul broadcast (3)*(2,3)", r * a, { 2, 3 }, { 1, 4, 12, 4, 10, 24 })
  fwd("div broadcast (2,3)/(3)", a / r, { 2, 3 }, { 1, 1, 0.75, 4, 2.5, 1.5 }, 1e-6)
  fwd("div broadcast (3)/(2,3)", r / a, { 2, 3 }, { 1, 1, 4 / 3, 0.25, 0.4, 2 / 3 }, 1e-6)
  fwd("add one-element (2,3)+(1)", a + s, { 2, 3 }, { 3, 4, 5, 6, 7, 8 })
  fwd("sub one-element (1)-(2,3)", s - a, { 2, 3 }, { 1, 0, -1, -2, -3, -4 })
  fwd("mul one-element (1)*(2,3)", s * a, { 2, 3 }, { 2, 4, 6, 8, 10, 12 })
  fwd("div one-element (2,3)/(1)", a / s, { 2, 3 }, { 0.5, 1, 1.5, 2, 2.5, 3 })
  fwd("div one-element (1)/(2,3)", s / a, { 2, 3 }, { 2, 1, 2 / 3, 0.5, 0.4, 1 / 3 }, 1e-6)
  local a3 = T({ 2, 2, 3 }, { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 })
  fwd("add broadcast (2,2,3)+(2,3)", a3 + b, { 2, 2, 3 }, { 7, 7, 7, 7, 7, 7, 13, 13, 13, 13, 13, 13 })
end
do
  local ops = { add = function(x, y) return x + y end, sub = function(x, y) return x - y end,
                mul = function(x, y) return x * y end, div = function(x, y) return x / y end }
  local names = { "add", "sub", "mul", "div" }
  -- operands in [0.5, 2] so that div is smooth at h = 1e-2
  local x = U({ 2, 3, 4 }, 21, 0.5, 2); local y = U({ 2, 3, 4 }, 22, 0.5, 2)
  local r = U({ 3, 4 }, 23, 0.5, 2); local s = U({ 1 }, 24, 0.5, 2)
  for _, nm in ipairs(names) do
    local f = ops[nm]
    local bound = nm == "div" and SMOOTH or LIN
    grad(nm .. " same shape (2,3,4)", f, { x, y }, bound)
    grad(nm .. " broadcast (2,3,4)∘(3,4)", f, { x, r }, bound)
    grad(nm .. " broadcast (3,4)∘(2,3,4)", f, { r, x }, bound)
    grad(nm .. " one-element (2,3,4)∘(1)", f, { x, s }, bound)
    grad(nm .. " one-element (1)∘(2,3,4)", f, { s, x }, bound)
  end
  grad("mul same tensor x*x", function(p) return p * p end, { x }, LIN)
end

-- Lua operators on tensors: LuaJIT has built-in pointer arithmetic (p - q, p + 1, p - 1)
-- that would run before the metamethods on raw pointers; tensors are struct references so
-- every form below reaches the engine (this found a bug: `a - b` returned a number).
do
  local a = T({ 2, 3 }, { 1, 2, 3, 4, 5, 6 })
  local b = T({ 2, 3 }, { 6, 5, 4, 3, 2, 1 })
  t.ok(ol.is_tensor(a - b), "a - b of two tensors is a tensor (not a pointer difference)")
  fwd("operator a - b", a - b, { 2, 3 }, { -5, -3, -1, 1, 3, 5 })
  fwd("operator a + 1", a + 1, { 2, 3 }, { 2, 3, 4, 5, 6, 7 })
  fwd("operator 1 + a", 1 + a, { 2, 3 }, { 2, 3, 4, 5, 6, 7 })
  fwd("operator a - 1", a - 1, { 2, 3 }, { 0, 1, 2, 3, 4, 5 })
  fwd("operator 1 - a", 1 - a, { 2, 3 }, { 0, -1, -2, -3, -4, -5 })
  fwd("operator a / 2", a / 2, { 2, 3 }, { 0.5, 1, 1.5, 2, 2.5, 3 })
  fwd("operator 6 / a", 6 / a, { 2, 3 }, { 6, 3, 2, 1.5, 1.2, 1 }, 1e-6)
  fwd("operator -a", -a, { 2, 3 }, { -1, -2, -3, -4, -5, -6 })
  ctx:param("ops.p", { 2 }):load({ 3, 4 })
  local p = ctx:params()
  fwd("ctx:params() entries use the tensor operators too (p - 1)", p[#p] - 1, { 2 }, { 2, 3 })
end

-- ---------------------------------------------------------------- affine_scalar
fwd("affine_scalar 2a+1", A:affine(2, 1), { 2, 3 }, { 3, 5, 7, 9, 11, 13 })
fwd("affine_scalar via a*3 - 1", A * 3 - 1, { 2, 3 }, { 2, 5, 8, 11, 14, 17 })
grad("affine_scalar -1.5a+0.25", function(x) return x:affine(-1.5, 0.25) end, { U({ 3, 4 }, 31) }, LIN)

-- ---------------------------------------------------------------- unary ops
do
  local e = math.exp(1)
  local function sig(v) return 1 / (1 + math.exp(-v)) end
  local function gelu_tanh(v) return 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ^ 3))) end
  -- Φ(x), the standard normal CDF, at -1, 0.5, 1, 2 (tabulated): gelu_erf(x) = x·Φ(x)
  local Phi = { [-1] = 0.15865525393145707, [0.5] = 0.6914624612740131, [1] = 0.8413447460685429, [2] = 0.9772498680518208 }
  local xs = { -1, 0.5, 1, 2 }
  local X = T({ 4 }, xs)
  local function map(f) local o = {} for i, v in ipairs(xs) do o[i] = f(v) end return o end
  fwd("exp", X:exp(), { 4 }, { 1 / e, math.sqrt(e), e, e * e }, 1e-5)
  fwd("log", T({ 3 }, { 1, e, 0.5 }):log(), { 3 }, { 0, 1, -math.log(2) }, 1e-6)
  fwd("sqrt", T({ 3 }, { 4, 2, 0.25 }):sqrt(), { 3 }, { 2, math.sqrt(2), 0.5 }, 1e-6)
  fwd("relu", X:relu(), { 4 }, { 0, 0.5, 1, 2 })
  fwd("gelu tanh", X:gelu("tanh"), { 4 }, map(gelu_tanh), 1e-6)
  fwd("gelu erf (x·Φ(x), tabulated Φ)", X:gelu("erf"), { 4 }, map(function(v) return v * Phi[v] end), 1e-6)
  fwd("silu", X:silu(), { 4 }, map(function(v) return v * sig(v) end), 1e-6)
  fwd("sigmoid", X:sigmoid(), { 4 }, map(sig), 1e-6)
  fwd("tanh", X:tanh(), { 4 }, map(math.tanh), 1e-6)
  fwd("neg", -X, { 4 }, { 1, -0.5, -1, -2 })
  fwd("square", X:square(), { 4 }, { 1, 0.25, 1, 4 })
  fwd("abs", X:abs(), { 4 }, { 1, 0.5, 1, 2 })

  local wide = U({ 3, 5 }, 41, -2, 2)
  local pos = U({ 3, 5 }, 42, 0.5, 2)
  -- kinks (relu, abs) at 0: inputs at least 0.1 away from 0, so x ± h stays on one side
  local away = T({ 3, 5 }, nil, "away")
  for i = 0, 14 do local v = ol.C.ol_rand_uniform(43, i) * 1.9 + 0.1; away.data[i] = (i % 2 == 0) and v or -v end
  local cases = {
    { "exp", function(x) return x:exp() end, wide },
    { "log", function(x) return x:log() end, pos },
    { "sqrt", function(x) return x:sqrt() end, pos },
    { "relu", function(x) return x:relu() end, away },
    { "gelu_tanh", function(x) return x:gelu("tanh") end, wide },
    { "gelu_erf", function(x) return x:gelu("erf") end, wide },
    { "silu", function(x) return x:silu() end, wide },
    { "sigmoid", function(x) return x:sigmoid() end, wide },
    { "tanh", function(x) return x:tanh() end, wide },
    { "neg", function(x) return -x end, wide },
    { "square", function(x) return x:square() end, wide },
    { "abs", function(x) return x:abs() end, away },
  }
  for _, c in ipairs(cases) do
    local bound = (c[1] == "neg" or c[1] == "relu" or c[1] == "abs") and LIN or SMOOTH
    grad(c[1] .. " (3,5)", c[2], { c[3] }, bound)
  end
end

-- ---------------------------------------------------------------- sum, mean
fwd("sum over last dim", A:sum(), { 2 }, { 6, 15 })
fwd("mean over last dim", A:mean(), { 2 }, { 2, 5 })
fwd("sum 1-D -> (1)", T({ 3 }, { 1, 2, 3.5 }):sum(), { 1 }, { 6.5 })
fwd("mean 3-D -> 2-D", A3:mean(), { 2, 2 }, { 2, 5, 1 / 3, 1 / 3 }, 1e-6)
fwd("sum_all", A:sum_all(), { 1 }, { 21 })
do
  local x = U({ 2, 3, 4 }, 51)
  grad("sum (2,3,4)->(2,3)", function(a) return a:sum() end, { x }, LIN)
  grad("mean (2,3,4)->(2,3)", function(a) return a:mean() end, { x }, LIN)
end

-- ---------------------------------------------------------------- softmax
do
  local function softmax_row(row, v)   -- in double, over the first v entries, rest 0
    local m = -math.huge
    for j = 1, v do m = math.max(m, row[j]) end
    local s, o = 0, {}
    for j = 1, v do o[j] = math.exp(row[j] - m); s = s + o[j] end
    for j = 1, #row do o[j] = j <= v and o[j] / s or 0 end
    return o
  end
  fwd("softmax [1,2,3]", T({ 3 }, { 1, 2, 3 }):softmax(), { 3 }, { 0.09003057317038046, 0.24472847105479764, 0.6652409557748219 }, 1e-6)
  local vals = { 0.5, -1, 2, 1, 0, 3, -2, 1.5, 0.25 }
  local X = T({ 3, 3 }, vals)
  local want, wantc = {}, {}
  for i = 0, 2 do
    local row = { vals[3 * i + 1], vals[3 * i + 2], vals[3 * i + 3] }
    local p, pc = softmax_row(row, 3), softmax_row(row, i + 1)
    for j = 1, 3 do want[#want + 1] = p[j]; wantc[#wantc + 1] = pc[j] end
  end
  fwd("softmax (3,3)", X:softmax(), { 3, 3 }, want, 1e-6)
  fwd("softmax causal (3,3): row i sees j <= i", X:softmax(true), { 3, 3 }, wantc, 1e-6)
  -- Tq = 2 < Tk = 4: row i sees j <= i + 2
  local v2 = { 1, 2, 3, 4, 4, 3, 2, 1 }
  local X2 = T({ 2, 4 }, v2)
  local w2 = {}
  for i = 0, 1 do
    local row = { v2[4 * i + 1], v2[4 * i + 2], v2[4 * i + 3], v2[4 * i + 4] }
    for _, p in ipairs(softmax_row(row, i + 3)) do w2[#w2 + 1] = p end
  end
  fwd("softmax causal Tq=2 < Tk=4", X2:softmax(true), { 2, 4 }, w2, 1e-6)
  -- batched (2,3,3): the mask restarts for every batch (row r is query r mod Tq)
  local X3 = T({ 2, 3, 3 }, { 0.5, -1, 2, 1, 0, 3, -2, 1.5, 0.25, 0.5, -1, 2, 1, 0, 3, -2, 1.5, 0.25 })
  local w3 = {}
  for _ = 1, 2 do for _, v in ipairs(wantc) do w3[#w3 + 1] = v end end
  fwd("softmax causal batched (2,3,3)", X3:softmax(true), { 2, 3, 3 }, w3, 1e-6)

  local x = U({ 2, 3, 4 }, 61, -2, 2)
  grad("softmax (2,3,4)", function(a) return a:softmax() end, { x }, SMOOTH)
  local xs = U({ 2, 4, 4 }, 62, -2, 2)
  grad("softmax causal (2,4,4)", function(a) return a:softmax(true) end, { xs }, SMOOTH)
  grad("softmax causal Tq<Tk (2,3,4)", function(a) return a:softmax(true) end, { x }, SMOOTH)
end

-- ---------------------------------------------------------------- layernorm, rmsnorm
do
  local eps = 1e-5
  local X = T({ 2, 4 }, { 1, 2, 3, 4, -2, 0, 2, 8 })
  -- row 0: mean 2.5, var 1.25; row 1: mean 2, var (16+4+0+36)/4 = 14
  local r0, r1 = 1 / math.sqrt(1.25 + eps), 1 / math.sqrt(14 + eps)
  local plain = { -1.5 * r0, -0.5 * r0, 0.5 * r0, 1.5 * r0, -4 * r1, -2 * r1, 0, 6 * r1 }
  fwd("layernorm without affine", X:layernorm(nil, nil, eps), { 2, 4 }, plain, 1e-5)
  local w = T({ 4 }, { 1, 2, -1, 0.5 }); local b = T({ 4 }, { 0, 1, 0.5, -1 })
  local aff = {}
  for i = 1, 8 do local c = (i - 1) % 4 + 1; aff[i] = plain[i] * w.data[c - 1] + b.data[c - 1] end
  fwd("layernorm with affine", X:layernorm(w, b, eps), { 2, 4 }, aff, 1e-5)
  fwd("layernorm gain only (bias nil)", X:layernorm(w, nil, eps), { 2, 4 },
      (function() local o = {} for i = 1, 8 do o[i] = plain[i] * w.data[(i - 1) % 4] end return o end)(), 1e-5)
  -- rmsnorm: row 0 mean square 7.5, row 1 (4+0+4+64)/4 = 18
  local q0, q1 = 1 / math.sqrt(7.5 + 1e-6), 1 / math.sqrt(18 + 1e-6)
  local rms = { q0, 2 * q0, 3 * q0, 4 * q0, -2 * q1, 0, 2 * q1, 8 * q1 }
  fwd("rmsnorm without weight", X:rmsnorm(nil, 1e-6), { 2, 4 }, rms, 1e-6)
  local rmsw = {}
  for i = 1, 8 do rmsw[i] = rms[i] * w.data[(i - 1) % 4] end
  fwd("rmsnorm with weight", X:rmsnorm(w, 1e-6), { 2, 4 }, rmsw, 1e-6)

  local x = U({ 2, 3, 5 }, 71, -2, 2)
  local g = U({ 5 }, 72, 0.5, 1.5); local bb = U({ 5 }, 73)
  grad("layernorm with affine (2,3,5)", function(a, ww, b2) return a:layernorm(ww, b2, 1e-5) end, { x, g, bb }, NORM)
  grad("layernorm without affine (2,3,5)", function(a) return a:layernorm(nil, nil, 1e-5) end, { x }, NORM)
  grad("rmsnorm with weight (2,3,5)", function(a, ww) return a:rmsnorm(ww, 1e-6) end, { x, g }, NORM)
  grad("rmsnorm without weight (2,3,5)", function(a) return a:rmsnorm(nil, 1e-6) end, { x }, NORM)
end

-- ---------------------------------------------------------------- embedding
do
  local tab = T({ 4, 3 }, { 0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32 })
  fwd("embedding ids (4)", I({ 4 }, { 2, 0, 3, 2 }):embedding(tab), { 4, 3 }, { 20, 21, 22, 0, 1, 2, 30, 31, 32, 20, 21, 22 })
  fwd("embedding ids (2,2)", I({ 2, 2 }, { 1, 1, 0, 3 }):embedding(tab), { 2, 2, 3 }, { 10, 11, 12, 10, 11, 12, 0, 1, 2, 30, 31, 32 })
  local ids = I({ 2, 3 }, { 2, 0, 2, 3, 2, 1 })    -- id 2 three times: gradients accumulate
  local tb = U({ 4, 3 }, 81)
  grad("embedding (2,3) ids into (4,3), repeated ids", function(w) return ids:embedding(w) end, { tb }, LIN)
end

-- ---------------------------------------------------------------- cross_entropy
do
  local lv = { 1, 2, 3, 4, 0, 0, 0, 0, 2, -1, 0.5, 3 }
  local logits = T({ 3, 4 }, lv)
  local function lse(r) local s = 0 for j = 1, 4 do s = s + math.exp(lv[4 * r + j]) end return math.log(s) end
  -- rows 0 and 2 count (targets 1 and 3), row 1 is ignored (-100)
  local want = ((lse(0) - lv[2]) + (lse(2) - lv[12])) / 2
  fwd("cross_entropy with ignore_index", logits:cross_entropy(I({ 3 }, { 1, -100, 3 }), -100), { 1 }, { want }, 1e-6)
  fwd("cross_entropy all rows", logits:cross_entropy(I({ 3 }, { 0, 0, 0 })), { 1 },
      { ((lse(0) - 1) + (lse(1) - 0) + (lse(2) - 2)) / 3 }, 1e-6)
  fwd("cross_entropy uniform logits = log V", logits:narrow(0, 1, 1):cross_entropy(I({ 1 }, { 2 })), { 1 }, { math.log(4) }, 1e-6)
  fwd("cross_entropy every row ignored = 0", logits:cross_entropy(I({ 3 }, { 7, 7, 7 }), 7), { 1 }, { 0 })
  local x = U({ 2, 3, 5 }, 91, -2, 2)
  local tg = I({ 2, 3 }, { 4, 0, -100, 2, -100, 1 })
  grad("cross_entropy (2,3,5) with ignore_index", function(a) return a:cross_entropy(tg, -100) end, { x }, SMOOTH)
end

-- ---------------------------------------------------------------- reshape
do
  local v = A:view({ 3, 2 })
  fwd("reshape (2,3)->(3,2) keeps row-major order", v, { 3, 2 }, { 1, 2, 3, 4, 5, 6 })
  fwd("reshape with -1 (2,3)->(-1)", A:view({ -1 }), { 6 }, { 1, 2, 3, 4, 5, 6 })
  fwd("reshape (2,2,3)->(4,-1)", A3:view({ 4, -1 }), { 4, 3 }, A3:tolist())
  grad("reshape (2,3,4)->(4,6)", function(a) return a:view({ 4, 6 }) end, { U({ 2, 3, 4 }, 101) }, LIN)
  -- a reshaped tensor feeding a nonlinear op: gradients flow through the view
  grad("reshape then softmax", function(a) return a:view({ 6, 4 }):softmax() end, { U({ 2, 3, 4 }, 102) }, SMOOTH)
end

-- ---------------------------------------------------------------- transpose
do
  -- X (2,3,4) with X[i,j,k] = 100i + 10j + k: transposed element = the swapped index
  local vals = {}
  for i = 0, 1 do for j = 0, 2 do for k = 0, 3 do vals[#vals + 1] = 100 * i + 10 * j + k end end end
  local X = T({ 2, 3, 4 }, vals)
  local function expect(shape, f)
    local o = {}
    for a = 0, shape[1] - 1 do for b = 0, shape[2] - 1 do for c = 0, shape[3] - 1 do o[#o + 1] = f(a, b, c) end end end
    return o
  end
  fwd("transpose (2,3,4) dims 0,1", X:transpose(0, 1), { 3, 2, 4 }, expect({ 3, 2, 4 }, function(a, b, c) return 100 * b + 10 * a + c end))
  fwd("transpose (2,3,4) dims 0,2", X:transpose(0, 2), { 4, 3, 2 }, expect({ 4, 3, 2 }, function(a, b, c) return 100 * c + 10 * b + a end))
  fwd("transpose (2,3,4) dims 1,2", X:transpose(1, 2), { 2, 4, 3 }, expect({ 2, 4, 3 }, function(a, b, c) return 100 * a + 10 * c + b end))
  fwd("transpose dims -1,-2 (negative)", X:transpose(-1, -2), { 2, 4, 3 }, expect({ 2, 4, 3 }, function(a, b, c) return 100 * a + 10 * c + b end))
  fwd("transpose 2-D", A:transpose(0, 1), { 3, 2 }, { 1, 4, 2, 5, 3, 6 })
  -- 4-D: every pair; X4[i,j,k,l] = 1000i + 100j + 10k + l
  local v4 = {}
  for i = 0, 1 do for j = 0, 2 do for k = 0, 1 do for l = 0, 2 do v4[#v4 + 1] = 1000 * i + 100 * j + 10 * k + l end end end end
  local X4 = T({ 2, 3, 2, 3 }, v4)
  local S4 = { 2, 3, 2, 3 }
  local R4 = U({ 2, 3, 2, 3 }, 111)
  for d0 = 0, 3 do
    for d1 = d0 + 1, 3 do
      local os = { S4[1], S4[2], S4[3], S4[4] }
      os[d0 + 1], os[d1 + 1] = S4[d1 + 1], S4[d0 + 1]
      local want = {}
      for a = 0, os[1] - 1 do for b = 0, os[2] - 1 do for c = 0, os[3] - 1 do for d = 0, os[4] - 1 do
        local idx = { a, b, c, d }
        idx[d0 + 1], idx[d1 + 1] = idx[d1 + 1], idx[d0 + 1]
        want[#want + 1] = 1000 * idx[1] + 100 * idx[2] + 10 * idx[3] + idx[4]
      end end end end
      fwd(string.format("transpose 4-D dims %d,%d", d0, d1), X4:transpose(d0, d1), os, want)
      grad(string.format("transpose 4-D (2,3,2,3) dims %d,%d", d0, d1), function(a) return a:transpose(d0, d1) end, { R4 }, LIN)
    end
  end
  local R3 = U({ 2, 3, 4 }, 112)
  for _, p in ipairs({ { 0, 1 }, { 0, 2 }, { 1, 2 } }) do
    grad(string.format("transpose 3-D (2,3,4) dims %d,%d", p[1], p[2]), function(a) return a:transpose(p[1], p[2]) end, { R3 }, LIN)
  end
end

-- ---------------------------------------------------------------- narrow, split, rows, concat
do
  local vals = {}
  for i = 0, 1 do for j = 0, 2 do for k = 0, 3 do vals[#vals + 1] = 100 * i + 10 * j + k end end end
  local X = T({ 2, 3, 4 }, vals)
  fwd("narrow dim 0 [1,2)", X:narrow(0, 1, 1), { 1, 3, 4 }, { 100, 101, 102, 103, 110, 111, 112, 113, 120, 121, 122, 123 })
  fwd("narrow dim 1 [1,3)", X:narrow(1, 1, 2), { 2, 2, 4 }, { 10, 11, 12, 13, 20, 21, 22, 23, 110, 111, 112, 113, 120, 121, 122, 123 })
  fwd("narrow dim -1 [2,4)", X:narrow(-1, 2, 2), { 2, 3, 2 }, { 2, 3, 12, 13, 22, 23, 102, 103, 112, 113, 122, 123 })
  fwd("rows(1, 2) of (3,2)", B:rows(1, 2), { 2, 2 }, { 9, 10, 11, 12 })
  local parts = X:split(-1, { 1, 3 })
  fwd("split last dim {1,3}: part 1", parts[1], { 2, 3, 1 }, { 0, 10, 20, 100, 110, 120 })
  fwd("split last dim {1,3}: part 2", parts[2], { 2, 3, 3 }, { 1, 2, 3, 11, 12, 13, 21, 22, 23, 101, 102, 103, 111, 112, 113, 121, 122, 123 })
  local eq = X:split(1, 1)
  t.is(#eq, 3, "split dim 1 into size-1 pieces gives 3 tensors")
  fwd("split dim 1 size 1: piece 3", eq[3], { 2, 1, 4 }, { 20, 21, 22, 23, 120, 121, 122, 123 })
  local ri = I({ 4 }, { 5, 6, 7, 8 })
  local rn = ri:narrow(0, 1, 2)
  t.ok(rn:dtype_name() == "i32" and rn:get(0) == 6 and rn:get(1) == 7, "narrow of an int32 tensor keeps dtype and values")
  ctx:reset()

  local R = U({ 2, 3, 4 }, 121)
  grad("narrow dim 0 (2,3,4)", function(a) return a:narrow(0, 1, 1) end, { R }, LIN)
  grad("narrow dim 1 (2,3,4)", function(a) return a:narrow(1, 1, 2) end, { R }, LIN)
  grad("narrow dim -1 (2,3,4)", function(a) return a:narrow(-1, 1, 2) end, { R }, LIN)
  -- split: both pieces used (weighted differently) so each piece's gradient lands in place
  grad("split dim -1 {1,3} recombined", function(a)
    local p = a:split(-1, { 1, 3 })
    return ol.cat({ p[2] * 2, p[1] * -3 }, -1)
  end, { R }, LIN)
  grad("rows (row slice) of (4,3)", function(a) return a:rows(1, 2) end, { U({ 4, 3 }, 122) }, LIN)

  local C1 = T({ 1, 3 }, { 1, 2, 3 }); local C2 = T({ 2, 3 }, { 4, 5, 6, 7, 8, 9 })
  fwd("concat dim 0 (1,3)+(2,3)", ol.cat({ C1, C2 }, 0), { 3, 3 }, { 1, 2, 3, 4, 5, 6, 7, 8, 9 })
  local D1 = T({ 2, 1 }, { 1, 2 }); local D2 = T({ 2, 2 }, { 3, 4, 5, 6 })
  fwd("concat dim -1 (2,1)+(2,2)", ol.cat({ D1, D2 }, -1), { 2, 3 }, { 1, 3, 4, 2, 5, 6 })
  fwd("concat dim -1 three tensors", ol.cat({ D1, D2, D1 }, -1), { 2, 4 }, { 1, 3, 4, 1, 2, 5, 6, 2 })
  local a1 = U({ 1, 3, 2 }, 123); local a2 = U({ 2, 3, 2 }, 124)
  grad("concat dim 0 (1,3,2)+(2,3,2)", function(x, y) return ol.cat({ x, y }, 0) end, { a1, a2 }, LIN)
  local b1 = U({ 2, 3, 1 }, 125); local b2 = U({ 2, 3, 3 }, 126)
  grad("concat dim -1 (2,3,1)+(2,3,3)+(2,3,1)", function(x, y) return ol.cat({ x, y, x }, -1) end, { b1, b2 }, LIN)
  grad("concat dim 1 then nonlinear", function(x, y) return ol.cat({ x:transpose(1, 2), y:transpose(1, 2) }, 1):tanh() end, { b1, b2 }, SMOOTH)
end

-- ---------------------------------------------------------------- dropout
do
  local n = 4000
  local X = T({ n }):fill_(1.5)
  local y1 = X:dropout(0.25, 42)
  local zeros, scaled, other = 0, 0, 0
  for i = 0, n - 1 do
    local v = y1.data[i]
    if v == 0 then zeros = zeros + 1 elseif math.abs(v - 2) < 1e-6 then scaled = scaled + 1 else other = other + 1 end
  end
  t.ok(other == 0, "dropout p=0.25: every element is 0 or x/(1-p) = 2")
  t.ok(math.abs(zeros / n - 0.25) < 0.03, string.format("dropout p=0.25: dropped fraction %.3f within 0.03 of p", zeros / n))
  local y2 = X:dropout(0.25, 42)
  local same = true
  for i = 0, n - 1 do if y1.data[i] ~= y2.data[i] then same = false; break end end
  t.ok(same, "dropout: same seed gives the same mask")
  local y3 = X:dropout(0.25, 43)
  local diff = 0
  for i = 0, n - 1 do if y1.data[i] ~= y3.data[i] then diff = diff + 1 end end
  t.ok(diff > n / 10, "dropout: a different seed gives a different mask (" .. diff .. " of " .. n .. " differ)")
  local y0 = A:dropout(0, 5)
  fwd("dropout p=0 is the identity", y0, { 2, 3 }, { 1, 2, 3, 4, 5, 6 })
  local R = U({ 3, 5 }, 131)
  grad("dropout p=0.4 seed 9 (3,5)", function(a) return a:dropout(0.4, 9) end, { R }, LIN)
end

-- ---------------------------------------------------------------- no-grad mode
do
  local w = ctx:param("nograd.w", { 3, 3 }):normal_(0, 1, 5)
  local x = U({ 2, 3 }, 141)
  ctx:reset()
  local used0 = ctx:step_bytes()
  local loss = ctx:no_grad(function() return x:linear(w):tanh():sum_all() end)
  t.ok(loss.requires_grad == 0, "no_grad: the output does not require grad")
  -- forward in no-grad allocates only the outputs: same bytes as the outputs alone
  t.ok(ol.C.ol_grad_enabled(ctx.raw) == 1, "no_grad restores grad mode afterwards")
  t.throws(function() loss:backward() end, "does not depend on any tensor that requires grad",
           "no_grad: backward of a loss computed without tape is an error")
  local with_tape = x:linear(w):tanh():sum_all()
  t.ok(with_tape.requires_grad == 1, "grad mode: the same expression is recorded")
  t.ok(ctx:step_bytes() > used0, "sanity: step arena in use")
  ctx:reset()
end

-- ---------------------------------------------------------------- gradient accumulation
do
  local w = ctx:param("acc.w", { 2, 3 }):load({ 0.1, -0.2, 0.3, 0.4, 0.5, -0.6 })
  local x = T({ 4, 3 }, nil, "accx"):uniform_(-1, 1, 151)
  ctx:zero_grad()
  ctx:reset()
  x:linear(w):tanh():sum_all():backward()
  local g1 = w:gradlist()
  ctx:reset()
  x:linear(w):tanh():sum_all():backward()
  local g2 = w:gradlist()
  local ok = true
  for i = 1, 6 do if math.abs(g2[i] - 2 * g1[i]) > 1e-6 * math.max(1, math.abs(g1[i])) then ok = false end end
  t.ok(ok, "two backward calls accumulate (+=) into parameter gradients: g2 = 2·g1")
  local nz = false
  for i = 1, 6 do if g1[i] ~= 0 then nz = true end end
  t.ok(nz, "sanity: the accumulated gradient is non-zero")
  ctx:zero_grad()
  t.is(w:gradlist()[1], 0, "ctx:zero_grad clears parameter gradients")
  ctx:reset()
end

-- ---------------------------------------------------------------- write-first gradients
-- ol_backward stores the first contribution to a step tensor's gradient instead of zero-filling
-- it and adding (engine/internal.h): the same bits as the zero-filled reference
-- (ol_set_write_first(0)), here for a graph in which tensors have several consumers, one
-- tensor is both operands of an op, views and transposes carry gradients, a step leaf gets a
-- gradient, and a branch never reaches the loss (its leaf's gradient reads 0).
do
  local w1 = ctx:param("wf.w1", { 8, 8 }):normal_(0, 0.5, 171)
  local w2 = ctx:param("wf.w2", { 6, 8 }):normal_(0, 0.5, 172)
  local gn = ctx:param("wf.gn", { 8 }):uniform_(0.5, 1.5, 173)
  local xp = U({ 4, 8 }, 174, -1, 1, "wf.x"):requires_grad_(true)
  local tg = I({ 4 }, { 1, 5, 0, 3 })
  local function run(write_first)
    local old = ol.C.ol_set_write_first(write_first and 1 or 0)
    ctx:zero_grad(); xp:zero_grad(); ctx:reset()
    local x = ctx:tensor({ 4, 8 }, { name = "wf.xs" }):copy_(xp):requires_grad_(true)
    local dead = ctx:tensor({ 4, 8 }, { name = "wf.dead" }):copy_(xp):requires_grad_(true)
    local h = x:linear(w1)
    local a = h:rmsnorm(gn) * h:silu() - x * x
    local v = a:view({ 4, 2, 4 }):transpose(0, 1):gelu("tanh"):transpose(0, 1):view({ 4, 8 })
    local _ = (dead + h):tanh()
    local z = (v + xp):dropout(0.25, 9) + a:layernorm(nil, nil)
    z:linear(w2):cross_entropy(tg):backward()
    local out = {}
    for name, tn in pairs { x = x, xp = xp, dead = dead, w1 = w1, w2 = w2, gn = gn } do
      local bits = {}
      for i, g in ipairs(tn:gradlist()) do bits[i] = string.format("%a", g) end
      out[name] = table.concat(bits, " ")
    end
    ol.C.ol_set_write_first(old)
    ctx:reset()
    return out
  end
  local ref, wf = run(false), run(true)
  for _, name in ipairs { "x", "xp", "w1", "w2", "gn", "dead" } do
    t.is(wf[name], ref[name], "write-first gradients: " .. name .. " bit for bit as the zero-filled reference")
  end
  t.ok(ref.x:find("[1-9]") ~= nil, "sanity: the step leaf has a non-zero gradient")
  t.is(wf.dead, string.rep("0x0p+0", 32, " "), "a step leaf the loss does not reach has gradient 0")
end

for fam, e in pairs(worst_by_name) do t.diag(string.format("worst gradcheck error %-16s %.2e", fam, e)) end
return t.done()
