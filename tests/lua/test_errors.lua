-- test_errors — bad input gives a Lua error with the op and the shapes in the message,
-- never a crash: shape mismatches in every op family, impossible allocations, tensors used
-- after ctx:reset(), out-of-range ids and targets, misuse of backward.
local t = require "tap"
local ol = require "outlierlab"

local ctx = ol.Context{ params = 2^16, step_bytes = 2^22 }
local function T(shape, name) return ctx:tensor(shape, { name = name or "x" }):fill_(0.5) end
local function I(shape, vals, name) return ctx:tensor(shape, { dtype = "i32", name = name or "ids" }):load(vals) end

-- every check: the message must contain each listed fragment
local function raises(fn, fragments, name)
  local ok, err = pcall(fn)
  if ok then return t.ok(false, name, "no error raised") end
  local msg, missing = tostring(err), {}
  for _, f in ipairs(fragments) do if not msg:find(f, 1, true) then missing[#missing + 1] = f end end
  return t.ok(#missing == 0, name, "missing '" .. table.concat(missing, "', '") .. "' in: " .. msg)
end

-- ---------------------------------------------------------------- shape mismatches
local a23, a34, a43 = T({ 2, 3 }, "a"), T({ 3, 4 }, "b"), T({ 4, 3 }, "c")
raises(function() return a23:matmul(a43) end, { "matmul", "(2,3)", "(4,3)" }, "matmul inner dims differ: shapes in the message")
raises(function() return a23:matmul(a34, false, true) end, { "matmul", "(2,3)", "(3,4)" }, "matmul with tb inner dims differ")
raises(function() return T({ 2, 2, 3 }):matmul(T({ 3, 3, 4 })) end, { "matmul", "(2,2,3)", "(3,3,4)" }, "matmul batch dims differ")
raises(function() return T({ 2, 2, 3 }):matmul(T({ 2, 3, 4, 1 })) end, { "matmul", "(2,2,3)", "(2,3,4,1)" }, "matmul batched ndim differ")
raises(function() return a23:linear(a34) end, { "linear", "(2,3)", "(3,4)" }, "linear in-features mismatch")
raises(function() return a23:linear(a43, T({ 3 }, "bias")) end, { "linear", "bias", "(3)", "(4,3)" }, "linear bias of the wrong size")
raises(function() return a23:linear(T({ 3 })) end, { "linear", "(3)", "2-D" }, "linear weight not 2-D")
for _, op in ipairs({ "add", "sub", "mul", "div" }) do
  raises(function() return a23[op](a23, a34) end, { op, "broadcast", "(2,3)", "(3,4)" }, op .. " shapes that do not broadcast")
end
raises(function() return a23 + T({ 2 }) end, { "add", "(2,3)", "(2)" }, "add: (2) does not broadcast against (2,3) (leading, not trailing)")
raises(function() return a23:layernorm(T({ 4 }, "g")) end, { "layernorm", "(4)", "(2,3)" }, "layernorm gain of the wrong size")
raises(function() return a23:layernorm(nil, T({ 2 }, "beta")) end, { "layernorm", "(2)", "(2,3)" }, "layernorm bias of the wrong size")
raises(function() return a23:rmsnorm(T({ 2, 3 }, "g")) end, { "rmsnorm", "(2,3)" }, "rmsnorm weight not 1-D")
raises(function() return T({ 5 }):softmax(true) end, { "softmax", "(5)", "causal" }, "causal softmax of a 1-D tensor")
raises(function() return I({ 2 }, { 0, 1 }):embedding(T({ 4 }, "tab")) end, { "embedding", "(4)", "2-D" }, "embedding table not 2-D")
raises(function() return T({ 2 }):embedding(T({ 4, 3 })) end, { "embedding", "(2)", "int32" }, "embedding ids not int32")
raises(function() return a23:cross_entropy(I({ 3 }, { 0, 1, 2 }, "tg")) end, { "cross_entropy", "(2,3)", "(3)" }, "cross_entropy rows vs targets mismatch")
raises(function() return a23:cross_entropy(T({ 2 }, "tgf")) end, { "cross_entropy", "(2)", "int32" }, "cross_entropy targets not int32")
raises(function() return a23:view({ 4, 2 }) end, { "reshape", "(2,3)", "(4,2)" }, "reshape to a different element count")
raises(function() return a23:view({ -1, -1 }) end, { "reshape", "(2,3)", "-1" }, "reshape with two -1")
raises(function() return a23:transpose(0, 2) end, { "transpose", "dim 2", "(2,3)" }, "transpose dim out of range")
raises(function() return a23:narrow(1, 2, 2) end, { "narrow", "(2,3)", "[2, 4)" }, "narrow past the end")
raises(function() return a23:split(1, { 1, 1 }) end, { "split", "(2,3)" }, "split sizes that do not add up")
raises(function() return ol.cat({ a23, a34 }, 0) end, { "concat", "(3,4)", "(2,3)" }, "concat shapes differ outside the dim")
raises(function() return ol.cat({ a23, T({ 2, 3, 1 }) }, -1) end, { "concat", "(2,3,1)", "(2,3)" }, "concat ndim differ")
raises(function() return a23:dropout(1.0, 1) end, { "dropout", "(2,3)", "p = 1" }, "dropout p = 1 rejected")
raises(function() return a23:dropout(-0.1, 1) end, { "dropout", "(2,3)" }, "dropout p < 0 rejected")
raises(function() return a23:gelu("fast") end, { "gelu", "fast" }, "gelu with an unknown approximation")
raises(function() return I({ 2 }, { 0, 1 }):exp() end, { "exp", "(2)", "float32" }, "unary op on an int32 tensor")

-- ---------------------------------------------------------------- out-of-range values
local tab = T({ 4, 3 }, "tab")
raises(function() return I({ 3 }, { 0, 4, 1 }):embedding(tab) end, { "embedding", "id 4", "[0, 4)", "(4,3)" }, "embedding id = V is out of range")
raises(function() return I({ 2 }, { -1, 0 }):embedding(tab) end, { "embedding", "id -1" }, "embedding negative id is out of range")
raises(function() return a23:cross_entropy(I({ 2 }, { 1, 3 })) end, { "cross_entropy", "target 3", "[0, 3)", "(2,3)" }, "cross_entropy target = V is out of range")
raises(function() return a23:cross_entropy(I({ 2 }, { -5, 0 })) end, { "cross_entropy", "target -5" }, "cross_entropy negative target (not the ignore index)")
t.lives(function() return a23:cross_entropy(I({ 2 }, { -100, 0 }), -100) end, "cross_entropy: the ignore index itself is accepted")

-- ---------------------------------------------------------------- impossible allocations
do
  local small = ol.Context{ params = 1024, step_bytes = 1024 }
  raises(function() return small:tensor({ 1000 }) end, { "out of memory", "1024" }, "tensor bigger than a 1 KiB step arena: error, not a crash")
  local x = small:tensor({ 16 }):fill_(1)
  raises(function() for _ = 1, 100 do x = x:exp() end end, { "out of memory" }, "filling the step arena op by op: error")
  small:reset()
  t.lives(function() small:tensor({ 16 }):fill_(1):exp() end, "after reset the small arena is usable again")
  raises(function() return small:param("big", { 2000 }) end, { "param 'big'", "flat parameter buffer full" }, "parameter larger than the flat buffer")
  raises(function() return ctx:tensor({ 2^31, 2^31, 2^31 }) end, { "overflows" }, "shape whose size overflows int64 bytes")
  raises(function() return ctx:tensor({ 2, -3 }) end, { "negative" }, "negative dim")
  raises(function() return ctx:tensor({ 1, 2, 3, 4, 5 }) end, { "1 to 4 dims" }, "5-D tensor")
  raises(function() return ctx:tensor({ 2^40, 2^10 }) end, { "out of memory" }, "4 TiB tensor in the default 32 GiB step arena")
  raises(function() return ol.Context{ params = 2^50 } end, { "param_capacity", "too large" }, "Context with an absurd parameter capacity")
  raises(function() return ol.Context{ step_bytes = 2^62 } end, { "cannot reserve", "step" }, "Context with an absurd step arena (2^62 bytes)")
end

-- ---------------------------------------------------------------- stale tensors
do
  local x = ctx:tensor({ 2, 3 }, { name = "activations" }):fill_(1)
  ctx:reset()
  raises(function() return x:exp() end, { "exp", "'activations'", "(2,3)", "reset" }, "using a tensor after ctx:reset() names it")
  local y = ctx:tensor({ 3 }, { name = "y_old" }):fill_(1)
  ctx:reset()
  local z = ctx:tensor({ 3 }, { name = "z_new" }):fill_(1)
  raises(function() return z + y end, { "add", "'y_old'", "reset" }, "mixing a live and a stale tensor names the stale one")
  raises(function() return y:view({ 3, 1 }) end, { "reshape", "'y_old'" }, "reshape of a stale tensor")
  local p = ctx:tensor({ 3 }, { name = "kept", persistent = true }):fill_(2)
  ctx:reset()
  t.lives(function() return p:exp() end, "persistent tensors survive ctx:reset()")
end

-- ---------------------------------------------------------------- backward misuse
do
  local w = ctx:param("bw.w", { 3 }):load({ 1, 2, 3 })
  ctx:reset()
  local y = w * w
  raises(function() y:backward() end, { "backward", "(3)", "one element" }, "backward of a non-scalar names its shape")
  local loss = y:sum()
  loss:backward()
  raises(function() loss:backward() end, { "backward", "not on the tape" },
         "second backward over a consumed tape is an error (was a silent no-op)")
  local nog = ctx:no_grad(function() return (w * w):sum() end)
  raises(function() nog:backward() end, { "backward", "does not depend" }, "backward of a no-grad loss is an error")
  -- backward needs step memory (gradients, temporaries): when it runs out, an error, not
  -- silently missing gradients (this test found the bug)
  -- For every amount of free step memory left before backward (0..1024 bytes), backward
  -- either succeeds with the right gradient (d/dw Σ w² = 2w = 2) or raises an error naming
  -- the op; never a silent partial gradient.
  local bad, errors, oks = {}, 0, 0
  for left = 0, 1024, 64 do
    local small = ol.Context{ params = 1024, step_bytes = 4096 }
    local w2 = small:param("w2", { 64 }):fill_(1)
    local l2 = (w2 * w2):sum()
    small:tensor({ (4096 - small:step_bytes() - left) / 4 })
    local ok, err = pcall(function() l2:backward() end)
    if ok then
      oks = oks + 1
      for i = 0, 63 do if w2.grad[i] ~= 2 then bad[#bad + 1] = left .. " bytes: wrong gradient"; break end end
    elseif tostring(err):find("backward", 1, true) and tostring(err):find("out of memory", 1, true) then
      errors = errors + 1
    else
      bad[#bad + 1] = left .. " bytes: " .. tostring(err)
    end
  end
  t.ok(#bad == 0 and errors > 0 and oks > 0,
       string.format("backward short of step memory: error naming backward, or exact gradients (%d errors, %d ok)", errors, oks),
       table.concat(bad, "; "))
end

return t.done()
