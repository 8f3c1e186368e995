-- test_subnormals — the engine's flush-to-zero mode (engine/core.c, "subnormals";
-- docs/reference/training.md, "Subnormals"): off by default, so results below FLT_MIN (1.18e-38) are
-- IEEE subnormals; with ol.set_flush_subnormals(true) every thread that computes stores them as
-- 0. On 1, 2 and 4 threads, in both modes and after switching back: elementwise products,
-- products of two shapes and the softmax whose exact
-- results lie below FLT_MIN; every element no smaller than FLT_MIN is kept. A thread left in
-- the other mode shows as an element that is subnormal where 0 is expected or the reverse,
-- named with the op and the thread count. Then train.run with cfg.flush_subnormals: the run
-- trains in the mode and gives the caller's mode back, and a run without it trains in IEEE
-- mode whatever the caller's mode is.
local t = require "tap"
local ol = require "outlierlab"
local nn = require "outlierlab.nn"

local FLT_MIN = 2 ^ -126
t.is(ol.flushes_subnormals(), false, "the default is IEEE gradual underflow (no flush-to-zero)")

-- how many elements of x are 0, and the first that is not (nil when all are)
local function zeros(x)
  local z, first = 0, nil
  for i = 0, tonumber(x.numel) - 1 do
    if x.data[i] == 0 then z = z + 1 elseif not first then first = i end
  end
  return z, first
end

-- every element of y is 0 (flush) or every element is a nonzero subnormal (IEEE)
local function check(y, flush, what, nt)
  local n = tonumber(y.numel)
  local z, first = zeros(y)
  local sub = 0
  for i = 0, n - 1 do
    local v = math.abs(y.data[i])
    if v > 0 and v < FLT_MIN then sub = sub + 1 end
  end
  local ok = flush and z == n or (not flush and sub == n)
  t.ok(ok, string.format("%s, %d thread(s), %s: %s", flush and "flush" or "IEEE", nt, what,
                         flush and "exact zeros" or "subnormal, nonzero"),
       string.format("%d of %d zero, %d subnormal; first nonzero element %s", z, n, sub, tostring(first)))
end

local threads0 = ol.num_threads()
for _, flush in ipairs { true, false } do
  ol.set_flush_subnormals(flush)
  t.is(ol.flushes_subnormals(), flush, string.format("set_flush_subnormals(%s) on the calling thread", tostring(flush)))
  for _, nt in ipairs { 1, 2, 4 } do
    ol.set_num_threads(nt)
    local ctx = ol.Context{ params = 2^10, step_bytes = 2^28 }
    -- elementwise: (1..2)e-20 squared is (1..4)e-40 (threaded: 2^18 elements)
    local x = ctx:tensor({ 2 ^ 18 }, { name = "x" }):uniform_(1e-20, 2e-20, 3)
    check(x * x, flush, "mul of 2^18 products ~1e-40", nt)
    -- three product shapes, each dot of K terms ~1e-40 (at most K · 1.44e-40 ≤ 9.2e-39: the exact
    -- sums stay below FLT_MIN, so in IEEE mode every element is subnormal); (2048,64)·(256,64)ᵀ
    -- is the organism's, which the engine's own kernel serves on the pool's workers (pool.c)
    for _, sh in ipairs { { 48, 4, 48 }, { 384, 4, 384 }, { 2048, 64, 256 } } do
      local a = ctx:tensor({ sh[1], sh[2] }, { name = "a" }):uniform_(1e-20, 1.2e-20, 5)
      local b = ctx:tensor({ sh[3], sh[2] }, { name = "b" }):uniform_(1e-20, 1.2e-20, 7)
      check(a:matmul(b, false, true), flush, string.format("matmul (%d,%d)·(%d,%d)ᵀ of terms ~1.2e-40", sh[1], sh[2], sh[3], sh[2]), nt)
    end
    -- softmax of [0, 0, -100] per row: e^-100 / 2 ≈ 1.9e-44 is subnormal; the two others are 1/2
    -- exactly (4,096 rows: threaded)
    local rows = 4096
    local z = ctx:tensor({ rows, 3 }, { name = "z" }):fill_(0)
    for r = 0, rows - 1 do z.data[3 * r + 2] = -100 end
    local p = z:softmax()
    local third = ctx:tensor({ rows }, { name = "third" })
    local halves = true
    for r = 0, rows - 1 do
      third.data[r] = p.data[3 * r + 2]
      if p.data[3 * r] ~= 0.5 or p.data[3 * r + 1] ~= 0.5 then halves = false end
    end
    t.ok(halves, string.format("%s, %d thread(s): softmax [0, 0, -100] starts with 1/2, 1/2", flush and "flush" or "IEEE", nt))
    check(third, flush, "softmax's e^-100 / 2 on 4,096 rows", nt)
    -- what is not subnormal is kept: FLT_MIN · 1 and 2^-100 · 2^-20
    local k = ctx:tensor({ 2 }, { name = "k" }):load { FLT_MIN, 2 ^ -100 }
    local one = ctx:tensor({ 2 }, { name = "one" }):load { 1, 2 ^ -20 }
    local kk = k * one
    t.ok(kk.data[0] == FLT_MIN and kk.data[1] == 2 ^ -120,
         string.format("%s, %d thread(s): FLT_MIN·1 and 2^-100·2^-20 are kept", flush and "flush" or "IEEE", nt),
         string.format("%.9g %.9g", kk.data[0], kk.data[1]))
    ctx = nil
    collectgarbage()
  end
end
ol.set_num_threads(threads0)

-- train.run: the run's mode while it trains, the caller's afterwards
local train = require "outlierlab.train.loop"
local function tiny_run(flag, caller_mode)
  ol.set_flush_subnormals(caller_mode)
  local ctx = ol.Context{ params = 2^12, step_bytes = 2^22, seed = 1 }
  local lin = nn.Linear(ctx, 4, 4, { name = "lin" })
  local model = { loss = function(_, batch) local y = lin:forward(batch.x) return (y * y):sum():sum() end }
  local loader = { next = function(_, c) return { x = c:tensor({ 2, 4 }, { name = "x" }):uniform_(-1, 1, 9) } end,
                   state = function() return {} end, set_state = function() end }
  local seen
  train.run{ ctx = ctx, model = model, loader = loader,
             cfg = { steps = 2, lr = 1e-3, progress = "off", flush_subnormals = flag },
             on_step = function() seen = ol.flushes_subnormals() end }
  return seen, ol.flushes_subnormals()
end
local during, after = tiny_run(true, false)
t.ok(during == true and after == false, "train.run{cfg.flush_subnormals = true} trains flushed and restores IEEE mode",
     string.format("during %s, after %s", tostring(during), tostring(after)))
during, after = tiny_run(false, true)
t.ok(during == false and after == true, "a run without it trains in IEEE mode even when the caller flushes, then restores",
     string.format("during %s, after %s", tostring(during), tostring(after)))
ol.set_flush_subnormals(false)
return t.done()
