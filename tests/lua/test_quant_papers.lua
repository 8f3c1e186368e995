-- test_quant_papers — SmoothQuant and the QuaRot rotation against references written from the
-- papers' definitions in plain Lua, independent of outlierlab.compress.rtn's code:
--   * SmoothQuant (Xiao et al. 2023, Eq. 4; their smooth.py smooth_ln_fcs_llama_like): one scale
--     per norm, s_j = max(max|X_j|^α / max(max|W_j|, 1e-5)^(1−α), 1e-5) with max|W_j| over q, k, v
--     together (the attention norm) and over gate, up together (the MLP's norm); o_proj and
--     down_proj not smoothed;
--   * QuaRot (Ashkboos et al. 2024, §4): norm gains folded into the readers, the residual stream
--     rotated by Q = H_C/√C (q, k, v, gate, up: W·diag(g)·Q; o, down: Qᵀ·W), online Hadamards on
--     the inputs of o_proj (H over n_head·d_head) and down_proj (H over d_ff).
-- Each linear of a W4A4 model records its raw input X and its output y; the reference computes
-- y = RTN_token(X·A)·RTN_channel(W′)ᵀ from the FP weights with A and W′ as the paper defines them
-- (RTN: symmetric 4 bits, s = max|row|/7, round half to even, emulating fp32 where the kernel
-- rounds). The explicit Sylvester matrix is built from (−1)^popcount(i & j), not the butterfly.
-- Every family: SmoothQuant's groups found by tensor identity are q/k/v and the MLP's input
-- linears; the KV-cache setting runs.
-- The project's earlier variants (smooth_scope = "per_linear", hadamard = "down_only") must fail
-- the same reference on o_proj, so the test can tell the definitions apart.
local t = require "tap"
local ol = require "outlierlab"
local models = require "outlierlab.models"
local quant = require "outlierlab.compress.rtn"
local ffi, C = ol.ffi, ol.C

local fb = ffi.new("float[1]")
local function f32(v) fb[0] = v return fb[0] end
local function rne(v)   -- round half to even (nearbyintf in the default mode)
  local f = math.floor(v)
  local d = v - f
  if d > 0.5 or (d == 0.5 and f % 2 == 1) then return f + 1 end
  return f
end

-- symmetric RTN of each row (n values) of a flat list, 4 bits: s = max|row|/7
local function rtn_rows(X, n, bits)
  local qmax, out = 2 ^ (bits - 1) - 1, {}
  for r = 0, #X / n - 1 do
    local amax = 0
    for j = 1, n do amax = math.max(amax, math.abs(X[r * n + j])) end
    local s = f32(amax / qmax)
    for j = 1, n do
      local v = X[r * n + j]
      if amax == 0 then out[r * n + j] = 0 else
        local q = math.max(-qmax, math.min(qmax, rne(f32(v / s))))
        out[r * n + j] = f32(s * q)
      end
    end
  end
  return out
end

-- the normalised Sylvester–Hadamard matrix of order n, from its definition
local function hadamard(n)
  local H = {}
  for i = 0, n - 1 do
    for j = 0, n - 1 do
      local b, v = bit.band(i, j), 0
      while b > 0 do v = v + bit.band(b, 1) b = bit.rshift(b, 1) end
      H[i * n + j + 1] = (v % 2 == 0 and 1 or -1) / math.sqrt(n)
    end
  end
  return H
end
-- A (r×k) · B (k×c), flat row-major lists
local function mm(A, B, r, k, c)
  local out = {}
  for i = 0, r - 1 do
    for j = 0, c - 1 do
      local s = 0
      for l = 0, k - 1 do s = s + A[i * k + l + 1] * B[l * c + j + 1] end
      out[i * c + j + 1] = s
    end
  end
  return out
end
local function f32all(a) local o = {} for i, v in ipairs(a) do o[i] = f32(v) end return o end

-- the model: llama-quick with d_ff = 128 (powers of two everywhere: the paper's H, no blocks),
-- random gains away from 1 with one large gain (an outlier channel for SmoothQuant to move)
local mc = ol.Context({ seed = 5 })
local cfg = models.preset("llama-quick", { d_ff = 128 })
local m = models.build(mc, cfg)
for _, p in ipairs(mc:params()) do
  local name = ffi.string(p.name)
  if p.ndim >= 2 then p:normal_(0, 0.2, 600 + p.param_index) end
  if name:match("ln%d%.weight$") or name == "norm.weight" then p:uniform_(0.5, 1.5, 700 + p.param_index) p.data[5] = 12 end
end
local batches = dofile(ol.root .. "/tests/lua/lib/lm_batches.lua")(mc, cfg.vocab_size, { seed = 30 })
local lins = quant.linears(m)
local FP = {}   -- name -> { W = flat list, nin =, nout = }
for _, l in ipairs(lins) do FP[l.name] = { W = l.mod.weight:tolist(), nin = l.mod.nin, nout = l.mod.nout } end
local gains = {}
for i, blk in ipairs(m.blocks) do gains[i] = { blk.ln1.weight:tolist(), blk.ln2.weight:tolist() } end

-- run fn over batches with every linear recording its raw input and its output (last batch kept)
-- and the per-column max|X| of its input over all batches
local function record(fn_batches)
  local rec = {}
  for _, l in ipairs(lins) do
    local r = { xmax = {} }
    rec[l.name] = r
    local inner = rawget(l.mod, "forward")
    r.saved = inner or false
    l.mod.forward = function(self, x)
      local y = (inner or getmetatable(self).forward)(self, x)
      r.x, r.y = x:tolist(), y:tolist()
      for j = 1, self.nin do
        for row = 0, #r.x / self.nin - 1 do r.xmax[j] = math.max(r.xmax[j] or 0, math.abs(r.x[row * self.nin + j])) end
      end
      return y
    end
  end
  quant.evaluate(mc, m, fn_batches)
  for _, l in ipairs(lins) do l.mod.forward = rec[l.name].saved or nil end
  return rec
end

-- the reference output of one linear: RTN_tok(X·A) · RTN_ch(W′)ᵀ, X (rows × nin), W′ (nout × nin)
local function reference(X, A, Wp, nin, nout)
  local Xa = A and f32all(A(X)) or X
  local xq, wq = rtn_rows(Xa, nin, 4), rtn_rows(f32all(Wp), nin, 4)
  local wt = {}   -- Wᵀ (nin × nout)
  for o = 0, nout - 1 do for j = 0, nin - 1 do wt[j * nout + o + 1] = wq[o * nin + j + 1] end end
  return mm(xq, wt, #X / nin, nin, nout)
end
local function worst(a, b)
  local d, big = 0, 1
  for i = 1, #a do d, big = math.max(d, math.abs(a[i] - b[i])), math.max(big, math.abs(b[i])) end
  return d / big
end
local function layer_kind(name) return tonumber(name:match("^layers(%d+)")) + 1, name:match("%.(%a+)_proj%.weight$") end

-- ---------------------------------------------------------------- SmoothQuant
local calib = record(batches)   -- the FP model's input maxima (both batches: the calibration set)
local ALPHA = 0.5
local function smooth_reference(name, X)
  local l, kind = layer_kind(name)
  local pre = string.format("layers%d.", l - 1)
  local group = (kind == "q" or kind == "k" or kind == "v") and { "attn.q", "attn.k", "attn.v" }
             or (kind == "gate" or kind == "up") and { "mlp.gate", "mlp.up" } or nil
  local f = FP[name]
  if not group then return reference(X, nil, f.W, f.nin, f.nout) end
  local xmax = calib[pre .. group[1] .. "_proj.weight"].xmax   -- the norm's output, read by the whole group
  local s = {}
  for j = 1, f.nin do
    local wm = 0
    for _, g in ipairs(group) do
      local G = FP[pre .. g .. "_proj.weight"]
      for o = 0, G.nout - 1 do wm = math.max(wm, math.abs(G.W[o * G.nin + j])) end
    end
    s[j] = f32(math.max(xmax[j] ^ ALPHA / math.max(wm, 1e-5) ^ (1 - ALPHA), 1e-5))
  end
  local Wp = {}
  for o = 0, f.nout - 1 do for j = 1, f.nin do Wp[o * f.nin + j] = f.W[o * f.nin + j] * s[j] end end
  local A = function(x)
    local out = {}
    for r = 0, #x / f.nin - 1 do for j = 1, f.nin do out[r * f.nin + j] = x[r * f.nin + j] * f32(1 / s[j]) end end
    return out
  end
  return reference(X, A, Wp, f.nin, f.nout)
end

local function check_all(setting, ref, label, expect_fail)
  local h = quant.apply(mc, m, setting)
  local rec = record({ batches[1] })
  h.restore()
  local bad, worst_seen = {}, 0
  for _, l in ipairs(lins) do
    local r = rec[l.name]
    local e = worst(r.y, ref(l.name, r.x))
    local _, kind = layer_kind(l.name)
    if expect_fail then
      if kind == "o" or (kind == "q" and setting.smooth_scope) then t.ok(e > 1e-3, label .. ": " .. l.name .. " differs from the paper's definition (the test can fail)", e) end
    else
      worst_seen = math.max(worst_seen, e)
      if e > 1e-5 then bad[#bad + 1] = string.format("%s %.2e", l.name, e) end
    end
  end
  if not expect_fail then
    t.ok(#bad == 0, label .. ": every linear's W4A4 output = the paper's definition computed in plain Lua (14 linears)",
      table.concat(bad, ", "))
    t.diag(string.format("%s: worst relative difference %.2e", label, worst_seen))
  end
end

check_all({ wbits = 4, abits = 4, smooth = ALPHA, calib = batches }, smooth_reference, "SmoothQuant (one scale per norm)")
check_all({ wbits = 4, abits = 4, smooth = ALPHA, smooth_scope = "per_linear", calib = batches }, smooth_reference,
  "SmoothQuant per_linear", true)
do   -- and the shared scale: q, k and v receive the same X' (their raw inputs are one tensor)
  local h = quant.apply(mc, m, { smooth = ALPHA, calib = batches })
  local n = 0
  for _, l in ipairs(h.linears) do if rawget(l.mod, "_pre") and #l.mod._pre > 0 then n = n + 1 end end
  h.restore()
  t.is(n, 10, "SmoothQuant divides the inputs of q, k, v, gate and up (5 per block), not o_proj's or down_proj's")
end

-- ---------------------------------------------------------------- QuaRot
local Cd, F, NHD = cfg.d_model, cfg.d_ff, 64
local HC, HF, HO = hadamard(Cd), hadamard(F), hadamard(NHD)
local function rot_reference(name, X)
  local l, kind = layer_kind(name)
  local f = FP[name]
  local Wp, A
  if kind == "o" or kind == "down" then
    -- Qᵀ·W (nout = C rows) then ·H on the input dim; the input rotated online by the same H
    local H = kind == "o" and HO or HF
    Wp = mm(mm(HC, f.W, Cd, Cd, f.nin), H, Cd, f.nin, f.nin)
    A = function(x) return mm(x, H, #x / f.nin, f.nin, f.nin) end
  else
    local g = gains[l][(kind == "gate" or kind == "up") and 2 or 1]
    local Wg = {}
    for o = 0, f.nout - 1 do for j = 1, f.nin do Wg[o * f.nin + j] = f.W[o * f.nin + j] * g[j] end end
    Wp = mm(Wg, HC, f.nout, f.nin, f.nin)
  end
  return reference(X, A, Wp, f.nin, f.nout)
end
check_all({ wbits = 4, abits = 4, hadamard = true }, rot_reference, "QuaRot rotation")
check_all({ wbits = 4, abits = 4, hadamard = "down_only" }, rot_reference, "rotation down_only", true)

-- ---------------------------------------------------------------- every family
-- SmoothQuant's readers found by tensor identity: in every family exactly q, k, v and the MLP's
-- first linear(s) (up; gate too in the llama family) are smoothed — BERT's q, k, v read the
-- previous post-LN (the embedding LayerNorm in layer 0); the KV-cache setting runs everywhere
local lm_batches = dofile(ol.root .. "/tests/lua/lib/lm_batches.lua")
for _, fam in ipairs({ "bert", "vit", "gpt2", "opt", "llama" }) do
  local fc = ol.Context({ seed = 40 })
  local fcfg = models.preset(fam .. "-quick", {})
  local fm = models.build(fc, fcfg)
  local bs
  if fam == "vit" then
    bs = { { images = fc:tensor({ 2, 3, fcfg.image_size, fcfg.image_size }, { persistent = true }):normal_(0, 1, 3),
             labels = fc:tensor({ 2 }, { dtype = "i32", persistent = true }):fill_(0) } }
  else
    bs = lm_batches(fc, fcfg.vocab_size, { n = 1 })
    if fam == "bert" then
      bs[1].token_type = fc:tensor({ 2, 16 }, { dtype = "i32", persistent = true }):fill_(0)
      bs[1].pad_mask = fc:tensor({ 2, 16 }, { dtype = "i32", persistent = true }):fill_(1)
    end
  end
  local h = quant.apply(fc, fm, { smooth = 0.5, calib = bs })
  local wrong = {}
  for _, l in ipairs(h.linears) do
    local smoothed = rawget(l.mod, "_pre") ~= nil and #l.mod._pre > 0
    local want = l.name:match("[qkv]_proj%.weight$") or l.name:match("up_proj%.weight$") or l.name:match("gate_proj%.weight$")
    if smoothed ~= (want ~= nil) then wrong[#wrong + 1] = l.name end
  end
  h.restore()
  t.ok(#wrong == 0, fam .. ": SmoothQuant smooths q, k, v and the MLP's input linears only", table.concat(wrong, ", "))
  if fam == "llama" then   -- a norm the harness does not know: an error, not a silent no-op
    local saved, before = quant.NORM_CLASSES, quant.evaluate(fc, fm, bs)
    quant.NORM_CLASSES = {}
    t.throws(function() quant.apply(fc, fm, { smooth = 0.5, calib = bs }) end, "found no linear reading a norm",
      "SmoothQuant with no known norm is an error")
    quant.NORM_CLASSES = saved
    t.is(quant.evaluate(fc, fm, bs), before, "and the model is FP again, bit for bit")
  end
  if fam == "llama" then   -- the rescalers (nn/norms.lua): their output is what q, k, v, gate and up read
    for _, variant in ipairs({ "preaffine", "gated", "dyt" }) do
      local nc = ol.Context({ seed = 41 })
      local nm = models.build(nc, models.preset("llama-quick", { norm_variant = variant }))
      local nb = lm_batches(nc, fcfg.vocab_size, { n = 1 })
      local fp = quant.evaluate(nc, nm, nb)
      local hn = quant.apply(nc, nm, { smooth = 0.5, calib = nb })
      local bad, n = {}, 0
      for _, l in ipairs(hn.linears) do
        local smoothed = rawget(l.mod, "_pre") ~= nil and #l.mod._pre > 0
        local want = l.name:match("[qkv]_proj%.weight$") or l.name:match("up_proj%.weight$") or l.name:match("gate_proj%.weight$")
        if smoothed then n = n + 1 end
        if smoothed ~= (want ~= nil) then bad[#bad + 1] = l.name end
      end
      hn.restore()
      t.ok(#bad == 0 and n > 0, "llama, norm_variant " .. variant .. ": SmoothQuant smooths q, k, v, gate and up only (not GatedNorm's gate_down)",
           table.concat(bad, ", "))
      t.is(quant.evaluate(nc, nm, nb), fp, "llama, norm_variant " .. variant .. ": restored to FP bit for bit")
    end
  end
  local fp = quant.evaluate(fc, fm, bs)
  local hk = quant.apply(fc, fm, { kv_bits = 4, kv_keep = 1, kv_top = 1 })
  local kv = quant.evaluate(fc, fm, bs)
  hk.restore()
  t.ok(kv == kv and math.abs(kv) < 100 and quant.evaluate(fc, fm, bs) == fp, fam .. ": the KV-cache setting runs (finite loss, restored)")
end

return t.done()
