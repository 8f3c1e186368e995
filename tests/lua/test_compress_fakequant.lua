-- test_compress_fakequant — compression kernels (compress/fakequant) on hand-made tensors whose answers are worked out in the comments.
local t = require "tap"
local ol = require "outlierlab"
local compress = require "outlierlab.compress.fakequant"
local C, ffi = ol.C, ol.ffi
local ctx = ol.Context()

local function close_list(got, want, tol, name)
  local ok, diag = #got == #want, ""
  for i = 1, #want do
    if not got[i] or math.abs(got[i] - want[i]) > tol then ok = false end
    diag = diag .. string.format("[%d] got %.9g want %.9g\n", i, got[i] or 0 / 0, want[i])
  end
  return t.ok(ok, name, diag)
end

-- asymmetric 8-bit parameters for [-1, 3]: s = 4/255, z = round(1/s) = round(63.75) = 64
local s, z, qmin, qmax = compress.asymmetric_params(-1, 3, 8)
t.near(s, 4 / 255, 1e-12, "asymmetric scale (max-min)/255")
t.is(z, 64, "asymmetric zero point round(-min/s)")
t.is(qmax, 255, "8-bit unsigned grid")
-- a range that excludes 0 is widened to include it: [2, 6] -> [0, 6]
local s2, z2 = compress.asymmetric_params(2, 6, 8)
t.near(s2, 6 / 255, 1e-12, "range widened to contain zero")
t.is(z2, 0, "zero point 0 when min is 0")

-- 2-bit asymmetric fake quantisation with s = 0.5, z = 1, grid {0,1,2,3} -> values {-0.5, 0, 0.5, 1}
local x = ctx:from_table({ -2, -0.5, -0.2, 0, 0.26, 0.74, 1, 7 }, { 8 })
local y = ol.check_ptr(C.ol_fake_quant(x, 0.5, 1, 0, 3))
close_list(y:tolist(), { -0.5, -0.5, 0, 0, 0.5, 0.5, 1, 1 }, 0, "2-bit fake quant: round to grid, clamp both ends")
local again = ol.check_ptr(C.ol_fake_quant(y, 0.5, 1, 0, 3))
close_list(again:tolist(), y:tolist(), 0, "quantising a quantised tensor changes nothing (round trip)")
t.throws(function() ol.check_ptr(C.ol_fake_quant(x, 0, 0, 0, 3)) end, "scale 0 must be positive", "zero scale refused")

-- min/max and percentiles of 0..100: the 99th percentile is 99, the 1st is 1 (exact order statistics)
local r = {}
for i = 0, 100 do r[#r + 1] = 100 - i end
local xr = ctx:from_table(r, { 101 })
local mm = ffi.new("float[2]")
ol.check_status(C.ol_minmax(xr, mm))
t.ok(mm[0] == 0 and mm[1] == 100, "min-max of 0..100")
ol.check_status(C.ol_percentile_range(xr, 99, mm))
t.ok(mm[0] == 1 and mm[1] == 99, "1st/99th percentile of 0..100", mm[0] .. " " .. mm[1])
ol.check_status(C.ol_percentile_range(xr, 99.5, mm))
t.near(mm[1], 99.5, 1e-5, "percentile interpolates between order statistics")

-- AbsMax 8-bit per tensor on {{1, -0.5}, {0.26, 2}}: s = 2/127; 1 -> round(63.5)=64 -> 128/127,
-- -0.5 -> round(-31.75) = -32 -> -64/127, 0.26 -> round(16.51) = 17 -> 34/127, 2 -> 2
local w = ctx:param("w", { 2, 2 }):load({ 1, -0.5, 0.26, 2 })
compress.absmax({ w }, { bits = 8 })
close_list(w:tolist(), { 128 / 127, -64 / 127, 34 / 127, 2 }, 1e-6, "AbsMax W8 per tensor")
-- per output channel (rows): row 0 s = 1/127 -> {1, -0.5 -> round(-63.5) = -64 -> -64/127};
-- row 1 s = 2/127 -> {0.26 -> 34/127, 2}
w:load({ 1, -0.5, 0.26, 2 })
compress.absmax({ w }, { bits = 8, per_channel = true })
close_list(w:tolist(), { 1, -64 / 127, 34 / 127, 2 }, 1e-6, "AbsMax W8 per output channel")

-- symmetric min-max weight quantisation at 2 bits: qmax = 1, s = max|w| = 2 -> {0 or ±2}
w:load({ 1.2, -0.5, 0.26, 2 })
compress.quantize_weights({ w }, { bits = 2 })
close_list(w:tolist(), { 2, 0, 0, 2 }, 0, "symmetric min-max 2-bit weights")

-- MSE range: 999 values of 0.01·k (k = 1..999 cycling over ±) and one outlier 100 at 4 bits:
-- clipping the outlier lowers the error, so the MSE scale is below max/qmax = 100/7
local big = {}
for i = 1, 999 do big[i] = (i % 2 == 0 and 1 or -1) * 0.001 * i end
big[1000] = 100
local xb = ctx:from_table(big, { 1000 })
local smse = C.ol_mse_scale_symmetric(xb, 4, 100)
t.ok(smse > 0 and smse < 100 / 7, "MSE scale clips the outlier at 4 bits", "scale " .. smse)
local function sq_err(scale)
  local q = ol.check_ptr(C.ol_fake_quant(xb, scale, 0, -7, 7))
  local e = 0
  for i = 0, 999 do e = e + (q.data[i] - xb.data[i]) ^ 2 end
  return e
end
t.ok(sq_err(smse) <= sq_err(100 / 7), "MSE scale has no larger error than the min-max scale",
  string.format("mse %.6g minmax %.6g", sq_err(smse), sq_err(100 / 7)))

-- magnitude pruning, 50 % of {3, -1, 2, -4, 0.5, 5}: the three smallest |w| are 0.5, 1, 2
local p1 = ctx:param("p1", { 6 }):load({ 3, -1, 2, -4, 0.5, 5 })
t.is(compress.prune({ p1 }, { sparsity = 0.5 }), 3, "prune: 3 of 6 zeroed")
close_list(p1:tolist(), { 3, 0, 0, -4, 0, 5 }, 0, "prune: the smallest magnitudes go")
-- per layer vs global: a = {1, 2, 3, 4}, b = {10, 20, 30, 40}; 50 % per layer zeroes {1,2} and {10,20};
-- 50 % global zeroes the four smallest overall = all of a
local a = ctx:param("pa", { 4 }):load({ 1, 2, 3, 4 })
local b = ctx:param("pb", { 4 }):load({ 10, 20, 30, 40 })
compress.prune({ a, b }, { sparsity = 0.5 })
close_list(a:tolist(), { 0, 0, 3, 4 }, 0, "per-layer pruning, layer a")
close_list(b:tolist(), { 0, 0, 30, 40 }, 0, "per-layer pruning, layer b")
a:load({ 1, 2, 3, 4 }); b:load({ 10, 20, 30, 40 })
compress.prune({ a, b }, { sparsity = 0.5, global = true })
close_list(a:tolist(), { 0, 0, 0, 0 }, 0, "global pruning takes all of the small layer")
close_list(b:tolist(), { 10, 20, 30, 40 }, 0, "global pruning spares the large layer")
-- ties: {1, 1, 1, 1} at 50 % zeroes exactly two
local tie = ctx:param("tie", { 4 }):load({ 1, 1, 1, 1 })
compress.prune({ tie }, { sparsity = 0.5 })
t.near(compress.sparsity({ tie }), 0.5, 0, "ties at the threshold: exactly the requested fraction")
t.throws(function() compress.prune({ tie }, { sparsity = 1.5 }) end, "sparsity 1.5", "sparsity out of range refused")

-- snapshot / restore
local snap = compress.snapshot(ctx)
p1:fill_(7)
compress.restore(ctx, snap)
close_list(p1:tolist(), { 3, 0, 0, -4, 0, 5 }, 0, "restore brings back the snapshot")

-- running min-max with momentum 0.9 over two batches: batch 1 range [-1, 2], batch 2 [-3, 4]:
-- lo = 0.9·(-1) + 0.1·(-3) = -1.2, hi = 0.9·2 + 0.1·4 = 2.2
local q = compress.ActivationQuantizer{ bits = 8, estimator = "running_minmax", momentum = 0.9 }
local wi = ctx:param("id", { 2, 2 }):load({ 1, 0, 0, 1 })
local batches = { { -1, 2 }, { -3, 4 } }
for _, bt in ipairs(batches) do
  ctx:reset()
  local xx = ctx:from_table(bt, { 1, 2 })
  q:calibrate(function() return xx:linear(wi) end)
end
t.is(q:num_sites(), 1, "one quantised site (the linear output)")
t.near(q.sites[1].lo, -1.2, 1e-6, "running min with momentum 0.9")
t.near(q.sites[1].hi, 2.2, 1e-6, "running max with momentum 0.9")
q.skip_last_linear = false
q.sites[1].skip = false
ctx:reset()
local xx = ctx:from_table({ 0.3, 5 }, { 1, 2 })
local out = q:run(function(reset) reset() return xx:linear(wi) end)
local sc, zp = compress.asymmetric_params(-1.2, 2.2, 8)
local function fqv(v) local qv = math.min(math.max(math.floor(v / sc + 0.5) + zp, 0), 255) return sc * (qv - zp) end
close_list(out:tolist(), { fqv(0.3), fqv(5) }, 1e-6, "quantised run uses the calibrated range (5 clips to 2.2)")
return t.done()
