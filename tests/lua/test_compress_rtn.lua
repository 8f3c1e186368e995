-- test_compress_rtn — RTN, SmoothQuant and the Walsh–Hadamard rotation (docs/reference/compression.md):
--   * per-token / per-tensor symmetric RTN of activations by hand (round half to even, clamping);
--   * the Walsh–Hadamard kernel against the explicit Sylvester matrix, its own inverse, blocks for
--     d not a power of two, finite-difference gradients, the in-place row/column forms;
--   * SmoothQuant's scales by hand, and smoothing alone leaves the loss unchanged (fp32);
--   * the QuaRot rotation is exact in full precision: logits with and without it equal to fp32
--     rounding (random norm gains folded; softmax, gated_sdpa, ca_scale; single-scale norms);
--   * W8A8 is close to full precision, restore() gives the FP model back bit for bit, errors;
--   * what quant.evaluate measures per family: exp(loss) = the compression driver's perplexity
--     (outlierlab.compress.evaluate) for BERT's masked tokens, and for the ViT the top-1
--     accuracy it computes by hand = the driver's "acc"; bits ≥ 16 change nothing (bit for bit);
--   * quant.run over every family: the heads and embeddings kept (the blocks' linears only), the
--     rotation reported as not applicable to BERT / ViT / GPT-2 / QT's gate with the reason, the
--     other settings finite, the model restored.
local t = require "tap"
local ol = require "outlierlab"
local quant = require "outlierlab.compress.rtn"
local gradcheck = require "outlierlab.nn.gradcheck"
local models = require "outlierlab.models"
local evaluate = require "outlierlab.compress.evaluate"
local C = ol.C
local lm_batches = dofile(ol.root .. "/tests/lua/lib/lm_batches.lua")

local ctx = ol.Context({ seed = 9 })
local function maxdiff(a, b)
  local m = 0
  for i = 1, #a do m = math.max(m, math.abs(a[i] - b[i])) end
  return m
end

-- ---------------------------------------------------------------- RTN by hand
do
  local x = ctx:tensor({ 2, 4 }, { persistent = true }):load({ 1.25, -0.75, 0.25, 3.5,   0.1, 0.2, -0.3, 0 })
  local q = ol.check_ptr(C.ol_quant_tokens(x, 4, 1, 1)):tolist()
  -- s = 3.5/7 = 0.5: 2.5 → 2 and −1.5 → −2 and 0.5 → 0 (half to even), 7 → 7
  t.ok(maxdiff({ q[1], q[2], q[3], q[4] }, { 1, -1, 0, 3.5 }) < 1e-7, "4-bit per token, row 1: s = max|x|/7, round half to even",
    table.concat(q, " ", 1, 4))
  local s2 = 0.3 / 7
  t.ok(maxdiff({ q[5], q[6], q[7], q[8] }, { 2 * s2, 5 * s2, -7 * s2, 0 }) < 1e-7, "per token: row 2 has its own scale")
  local qt = ol.check_ptr(C.ol_quant_tokens(x, 4, 0, 1)):tolist()
  t.ok(maxdiff({ qt[5], qt[6], qt[7], qt[8] }, { 0, 0, -0.5, 0 }) < 1e-7, "per tensor: one scale (0.5), the small row rounds to 0 and −s")
  local qc = ol.check_ptr(C.ol_quant_tokens(x, 4, 1, 0.5)):tolist()
  t.near(qc[4], 1.75, 1e-7, "clip 0.5: the largest value clamps at 0.5·max")
  local q8 = ol.check_ptr(C.ol_quant_tokens(x, 8, 1, 1)):tolist()
  t.ok(maxdiff({ q8[1], q8[2], q8[3], q8[4] }, { 1.25, -0.75, 0.25, 3.5 }) <= 3.5 / 127 / 2 + 1e-7, "8 bits: error at most s/2")
end

-- ---------------------------------------------------------------- Walsh–Hadamard
do
  local n = 8
  local H = {}
  for i = 0, n - 1 do
    for j = 0, n - 1 do
      local b, v = bit.band(i, j), 0
      while b > 0 do v = v + bit.band(b, 1); b = bit.rshift(b, 1) end
      H[i * n + j] = (v % 2 == 0 and 1 or -1) / math.sqrt(n)   -- Sylvester: (−1)^popcount(i & j)
    end
  end
  local x = ctx:tensor({ 3, n }, { persistent = true }):normal_(0, 1, 4)
  local y = ol.check_ptr(C.ol_hadamard(x, 0)):tolist()
  local xs, worst = x:tolist(), 0
  for r = 0, 2 do
    for j = 0, n - 1 do
      local s = 0
      for k = 0, n - 1 do s = s + xs[r * n + k + 1] * H[k * n + j] end
      worst = math.max(worst, math.abs(y[r * n + j + 1] - s))
    end
  end
  t.ok(worst < 1e-6, "hadamard = x·H/√n with the explicit Sylvester matrix (n = 8)", worst)
  ctx:reset()
  local yy = ol.check_ptr(C.ol_hadamard(ol.check_ptr(C.ol_hadamard(x, 0)), 0)):tolist()
  t.ok(maxdiff(yy, xs) < 1e-6, "hadamard twice = identity (H/√n is its own inverse)")
  -- d = 12: blocks of 4
  local z = ctx:tensor({ 2, 12 }, { persistent = true }):normal_(0, 1, 5)
  local zy = ol.check_ptr(C.ol_hadamard(z, 0)):tolist()
  local zs = z:tolist()
  local a, b, c, d = zs[5], zs[6], zs[7], zs[8]
  t.ok(math.abs(zy[5] - (a + b + c + d) / 2) < 1e-6 and math.abs(zy[6] - (a - b + c - d) / 2) < 1e-6,
    "d = 12: block-diagonal Hadamard of order 4 (the largest power of two dividing 12)")
  local nz, ny = 0, 0
  for i = 1, 12 do nz, ny = nz + zs[i] ^ 2, ny + zy[i] ^ 2 end
  t.near(ny, nz, 1e-5, "the rotation keeps the norm of every row")
  local err, where = gradcheck.check(ctx, function(v) return ol.check_ptr(C.ol_hadamard(v, 0)) end, { z })
  t.ok(err <= 1e-2, "hadamard: gradcheck", where)
  -- in place: rows (t ← t·H) and columns (t ← H·t)
  local w = ctx:tensor({ 8, 4 }, { persistent = true }):normal_(0, 1, 6)
  local w0 = w:tolist()
  ctx:reset()
  local wr = ol.check_ptr(C.ol_hadamard(w, 0)):tolist()
  ol.check_status(C.ol_hadamard_(w, 1, 0))
  t.ok(maxdiff(w:tolist(), wr) < 1e-7, "hadamard_ dim 1 = the op on every row")
  w:load(w0)
  ol.check_status(C.ol_hadamard_(w, 0, 0))
  local wt = ctx:tensor({ 4, 8 }):load((function()
    local o = {}
    for j = 0, 3 do for i = 0, 7 do o[#o + 1] = w0[i * 4 + j + 1] end end
    return o end)())
  local ht = ol.check_ptr(C.ol_hadamard(wt, 0)):tolist()
  local cw = 0
  for i = 0, 7 do for j = 0, 3 do cw = math.max(cw, math.abs(w.data[i * 4 + j] - ht[j * 8 + i + 1])) end end
  t.ok(cw < 1e-7, "hadamard_ dim 0 = the op on every column", cw)
  t.ok(C.ol_hadamard(z, 8) == nil, "a block that does not divide d is an error")
end

-- ---------------------------------------------------------------- SmoothQuant scales by hand
do
  local w = ctx:tensor({ 2, 2 }, { persistent = true }):load({ 1, -2, 0.5, 1 })
  local xm = ol.ffi.new("float[2]", 4, 1)
  local s = ol.ffi.new("float[2]")
  ol.check_status(C.ol_smooth_scales(xm, w, 0.5, s))
  t.near(s[0], 2, 1e-6, "s_0 = √4/√1 = 2 (max|X_0| = 4, max|W_0| = 1)")
  t.near(s[1], 1 / math.sqrt(2), 1e-6, "s_1 = √1/√2 (max|W_1| = 2)")
  ol.check_status(C.ol_smooth_scales(xm, w, 1, s))
  t.near(s[0], 4, 1e-6, "α = 1: s_j = max|X_j|")
end

-- ---------------------------------------------------------------- on a model
local function model_and_batches(over, seed)
  local mc = ol.Context({ seed = seed or 21 })
  local cfg = models.preset("llama-quick", over or {})
  local m = models.build(mc, cfg)
  -- gains away from 1 (so that folding matters) and weights a little larger than init
  for _, p in ipairs(mc:params()) do
    local name = ol.ffi.string(p.name)
    -- trained gains can be negative (the default organism's are): the folding must take any sign
    if name:match("ln%d%.weight$") or name == "norm.weight" then p:uniform_(-1.5, 1.5, 77 + p.param_index) end
  end
  return mc, m, lm_batches(mc, cfg.vocab_size), cfg
end
local function logits(mc, m, b)
  mc:reset()
  local l = mc:no_grad(function() return m:forward(b, { train = false }) end):tolist()
  mc:reset()
  return l
end

for _, over in ipairs({ {}, { attention = { kind = "gated_sdpa", form = "elementwise" } }, { attention = "ca_scale" },
                        { attention = { kind = "gated", gate = "all_heads_linear" } }, { norm_gain = "single" },
                        { attention = "sink_logit" }, { embed_proj = true, norm_gain = "single" } }) do
  local label = over.attention and (type(over.attention) == "table" and over.attention.kind .. "/" .. (over.attention.form or over.attention.gate)
    or over.attention) or over.embed_proj and "OSP projections" or over.norm_gain and "single-scale norm" or "softmax"
  local mc, m, batches = model_and_batches(over)
  for _, p in ipairs(mc:params()) do if p.ndim >= 2 then p:normal_(0, 0.2, 500 + p.param_index) end end
  local before = logits(mc, m, batches[1])
  local h = quant.rotate(mc, m)
  local after = logits(mc, m, batches[1])
  local big = 0
  for _, v in ipairs(before) do big = math.max(big, math.abs(v)) end
  local d = maxdiff(before, after)
  t.ok(d <= 2e-5 * math.max(big, 1), "rotation exact in full precision (" .. label .. "): logits equal to fp32 rounding",
    string.format("max diff %.2e, max |logit| %.2f", d, big))
  t.diag(string.format("rotation %-28s max |Δlogit| %.2e, max |logit| %.2f", label, d, big))
  h.restore()
  t.ok(maxdiff(logits(mc, m, batches[1]), before) == 0, "restore: the unrotated model back bit for bit (" .. label .. ")")
end

do
  local mc, m, batches = model_and_batches({}, 33)
  local fp = quant.evaluate(mc, m, batches)
  -- smoothing alone (no bits): unchanged up to fp32 rounding
  local h = quant.apply(mc, m, { smooth = 0.5, calib = batches })
  t.near(quant.evaluate(mc, m, batches), fp, 1e-5, "SmoothQuant without quantisation leaves the loss unchanged")
  h.restore()
  local r = quant.compare(mc, m, batches, { calib = batches })
  t.ok(math.abs(r.w8a8 - fp) < 0.02, "W8A8 RTN (per channel, per token) is close to FP", string.format("%.4f vs %.4f", r.w8a8, fp))
  for _, s in ipairs(quant.SETTINGS) do
    t.ok(r[s.name] == r[s.name] and r[s.name] < 100, "compare: " .. s.name .. " gives a finite loss", r[s.name])
  end
  t.is(quant.evaluate(mc, m, batches), fp, "after compare the model is FP again, bit for bit")
  local h2 = quant.apply(mc, m, { wbits = 4, abits = 4 })
  t.ok(#h2.linears == 2 * 7, "llama-quick: 7 linears per block quantised (q, k, v, o, gate, up, down), the head kept", #h2.linears)
  h2.restore()
  local gm = models.build(ol.Context({ seed = 1 }), models.preset("gpt2-quick", {}))
  t.throws(function() quant.rotate(mc, gm) end, "llama family", "rotation of a LayerNorm model is an error")
  local mq = models.build(ol.Context({ seed = 1 }), models.preset("llama-quick", { attention = { kind = "gated", gate = "linear" } }))
  t.throws(function() quant.rotate(mc, mq) end, "not rotation-invariant", "QT's per-head gate cannot be rotated")
  t.throws(function() quant.apply(mc, m, { wbits = 4, smooth = 0.5 }) end, "smooth needs calib", "smooth without calibration")
end

-- ---------------------------------------------------------------- what quant.evaluate measures
-- batches of each family (persistent tensors), random weights a little larger than init
local function family_batches(fam, mc, cfg, n)
  local out = {}
  for i = 1, n do
    local b = {}
    if fam == "vit" then
      local B, S = 6, cfg.image_size
      b.images = mc:tensor({ B, 3, S, S }, { persistent = true }):normal_(0, 1, 300 + i)
      b.labels = mc:tensor({ B }, { dtype = "i32", persistent = true })
      for r = 0, B - 1 do b.labels.idata[r] = math.floor(C.ol_rand_uniform(40 + i, r) * cfg.n_classes) end
    else
      b.ids = mc:tensor({ 2, 16 }, { dtype = "i32", persistent = true })
      b.targets = mc:tensor({ 2, 16 }, { dtype = "i32", persistent = true })
      for j = 0, 31 do
        b.ids.idata[j] = math.floor(C.ol_rand_uniform(i, j) * cfg.vocab_size)
        -- BERT: every third position masked (a target), the others -100
        local tg = math.floor(C.ol_rand_uniform(i + 7, j) * cfg.vocab_size)
        b.targets.idata[j] = (fam ~= "bert" or j % 3 == 0) and tg or -100
      end
      if fam == "bert" then
        b.token_type = mc:tensor({ 2, 16 }, { dtype = "i32", persistent = true }):fill_(0)
        b.pad_mask = mc:tensor({ 2, 16 }, { dtype = "i32", persistent = true }):fill_(1)
      end
    end
    out[i] = b
  end
  return out
end
local function list_loader(bs)
  return function() local i = 0 return { next = function() i = i + 1 return bs[i] end } end
end
for _, fam in ipairs({ "bert", "vit", "gpt2", "llama" }) do
  local mc = ol.Context({ seed = 40 })
  local cfg = models.preset(fam .. "-quick", {})
  local m = models.build(mc, cfg)
  if m.eval then m:eval() end
  for _, p in ipairs(mc:params()) do if p.ndim >= 2 then p:normal_(0, 0.2, 900 + p.param_index) end end
  local bs = family_batches(fam, mc, cfg, 2)
  local loss, info = quant.evaluate(mc, m, bs)
  if fam == "vit" then
    local r = evaluate.evaluate(mc, m, { metric = "acc", loader = list_loader(bs), n = #bs })
    t.ok(info.accuracy ~= nil and info.accuracy == r.value and math.abs(loss - r.loss) <= 1e-12 * math.abs(r.loss),
      "vit: quant.evaluate's top-1 accuracy and loss = the compression driver's on the same batches",
      string.format("%s %% vs %s %%, loss %.9g vs %.9g", tostring(info.accuracy), tostring(r.value), loss, r.loss))
  else
    local r = evaluate.evaluate(mc, m, { metric = "ppl", loader = list_loader(bs), n = #bs })
    t.ok(info.accuracy == nil and math.abs(math.exp(loss) - r.value) <= 1e-12 * r.value and info.ntokens == r.ntokens,
      fam .. ": exp(quant.evaluate's loss) = the driver's perplexity, over the same " .. r.ntokens .. " target tokens (no accuracy for a " ..
      (fam == "bert" and "masked LM" or "decoder") .. ")", string.format("%.9g vs %.9g, %d vs %d tokens", math.exp(loss), r.value, info.ntokens, r.ntokens))
  end
  local h16 = quant.apply(mc, m, { wbits = 16, abits = 16 })
  t.is(quant.evaluate(mc, m, bs), loss, fam .. ": bits ≥ 16 quantise nothing (the FP loss bit for bit)")
  h16.restore()
  local h = quant.apply(mc, m, { wbits = 4, abits = 4 })
  local want = { bert = 12, vit = 12, gpt2 = 12, llama = 14 }
  t.is(#h.linears, want[fam], fam .. ": the blocks' linears quantised (q, k, v, o, MLP), the head and embeddings kept")
  h.restore()
  local r = quant.run(mc, m, bs, { calib = bs })
  local H = r.by_name.w4a4_hadamard
  if fam == "llama" then
    t.ok(H.applicable, "llama: W4A4 + Hadamard applies")
  else
    local why = { bert = "BERT is post-LN", vit = "the ViT's blocks are pre-LN with LayerNorm", gpt2 = "GPT-2's blocks are pre-LN with LayerNorm" }
    t.ok(not H.applicable and H.reason:find(why[fam], 1, true) and H.loss == nil, fam .. ": W4A4 + Hadamard not applicable, the reason says why", H.reason)
  end
  local finite = true
  for _, x in ipairs(r.settings) do if x.applicable and not (x.loss == x.loss and math.abs(x.loss) < math.huge) then finite = false end end
  t.ok(finite and r.fp.loss == loss, fam .. ": every applicable setting gives a finite loss; quant.run's FP = quant.evaluate's")
  if fam == "vit" then t.ok(r.by_name.w4a4.accuracy ~= nil, "vit: each setting's top-1 accuracy is measured") end
  t.is(quant.evaluate(mc, m, bs), loss, fam .. ": after quant.run the model is FP again, bit for bit")
  local cmp = quant.compare(mc, m, bs, { calib = bs })
  t.ok(fam == "llama" or cmp.w4a4_hadamard ~= cmp.w4a4_hadamard, fam .. ": compare gives NaN where a setting does not apply")
end
do
  local mq = models.build(ol.Context({ seed = 1 }), models.preset("llama-quick", { attention = { kind = "gated", gate = "linear" } }))
  t.ok((quant.blocker(mq, { hadamard = true }) or ""):find("not rotation-invariant", 1, true) and quant.blocker(mq, { wbits = 4 }) == nil,
    "blocker: QT's per-head gate blocks the rotation only")
end

return t.done()
