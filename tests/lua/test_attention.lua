-- test_attention — every attention variant: fused C forward/backward against the plain-op
-- reference (forward to 2e-6 absolute, gradients to 1e-5 absolute), finite-difference
-- gradient checks (outlierlab.nn.gradcheck, worst relative error <= 1e-2) for q, k, v, x and every
-- parameter under bidirectional, causal and padding masks — also with the knobs on: attention
-- dropout (a fixed mask: fixed seed), the learned sigmoid bias, the gate scale, γ = −α/max_len —
-- clipped-region zero gradients, softmax1 with hopeless scores, multi-tile shapes, thread-count
-- determinism, probes, the training memory bound and spec errors. The knobs' own semantics
-- (hand-computed masks, neutral settings, model plumbing): tests/lua/test_attention_knobs.lua.
local ol = require "outlierlab"
local t = require "tap"
local gradcheck = require "outlierlab.nn.gradcheck"
local attention = require "outlierlab.nn.attention"
-- the documented user-defined variant "softmax_temp" lives outside the library
if not attention.registry.softmax_temp then dofile(require("outlierlab").root .. "/examples/attention_example.lua") end

local ctx = ol.Context({ seed = 7 })
local KINDS = { "softmax", "clipped_softmax", "softmax1", "sigmoid", "fixed_bias", "ca_bias", "attn_bias",
                { kind = "gated", gate = "linear", pi_init = 0.25 }, { kind = "gated", gate = "mlp", n_hid = 3 },
                { kind = "gated", gate = "all_heads_linear" }, "ca_scale",
                -- the knobs (docs/reference/attention.md): learned sigmoid bias, QT's gate scale, γ = −α/max_len,
                -- and attention-probability dropout on every fused kind (seeded: a fixed mask)
                { kind = "sigmoid", learn_bias = true }, { kind = "gated", pi_init = 0.25, gate_scale = "inv_pi_init" },
                { kind = "clipped_softmax", alpha = 0.4, max_len = 16 },
                { kind = "softmax", dropout = 0.3 }, { kind = "clipped_softmax", dropout = 0.3 },
                { kind = "softmax1", dropout = 0.3 }, { kind = "sigmoid", learn_bias = true, dropout = 0.3 },
                { kind = "fixed_bias", dropout = 0.3 }, { kind = "ca_bias", dropout = 0.3 },
                { kind = "attn_bias", dropout = 0.3 }, { kind = "gated", gate = "mlp", dropout = 0.3 },
                { kind = "ca_scale", dropout = 0.3 } }
-- the shared harness (fixed inputs, masks, reference view, the per-variant check)
local H = dofile(ol.root .. "/tests/lua/lib/attention_cases.lua")(ctx, 100)
local kname, dseed, persistent, maxdiff, as_reference = H.kname, H.dseed, H.persistent, H.maxdiff, H.as_reference
local B, NH, T, HD = H.B, H.NH, H.T, H.HD
local q, k, v, x, pad, MASKS = H.q, H.k, H.v, H.x, H.pad, H.MASKS

-- ---------------------------------------------------------------- fused vs reference, gradcheck
H.check_kinds(KINDS, { prefix = "t", param_seed = 1000,
                       eps = function(spec) return (type(spec) == "table" and spec.gate == "mlp") and 1e-3 or 1e-2 end })   -- mlp: ReLU kinks

-- ---------------------------------------------------------------- the example variant
do
  local A = attention.new(ctx, { kind = "softmax_temp", tau_init = 1.5 }, { d_model = NH * HD, n_head = NH, name = "ex" })
  t.is(ol.ffi.string(A:parameters()[1].name), "ex.log_tau", "softmax_temp: its parameter is named under the prefix")
  for _, m in ipairs(MASKS) do
    local err, where = gradcheck.check(ctx, function()
      return A:forward(q, k, v, x, { causal = m.causal, pad_mask = m.pad_mask })
    end, { q, k, v, A:parameters()[1] })
    t.ok(err <= 1e-2, "softmax_temp " .. m.name .. ": gradcheck incl. log_tau", where)
  end
end

-- ---------------------------------------------------------------- head_scale op
do
  local y, g = persistent({ B, NH, T, HD }), persistent({ B, T, NH })
  local err, where = gradcheck.check(ctx, function(a, b) return attention.head_scale(a, b) end, { y, g })
  t.ok(err <= 1e-2, "head_scale: gradcheck", where)
  ctx:reset()
  local d = maxdiff(attention.head_scale(y, g):tolist(), attention.head_scale_reference(y, g):tolist())
  t.ok(d <= 1e-7, "head_scale = plain-op reference", d)
end

-- ---------------------------------------------------------------- clipped region: zero gradient
do
  -- Query 0 of head 0 points hard at key 0: p ≈ (1, 0, 0, ...), so with γ = −0.1, ζ = 1.1 the
  -- whole row is clipped (1.2·p − 0.1 ≥ 1 for key 0, ≤ 0 elsewhere) and its output is v_0
  -- whatever q_0 is: dq_0 must be exactly 0. Query 1 is generic and must get a gradient.
  local cq, ck, cv = persistent({ 1, 1, 4, 4 }), persistent({ 1, 1, 4, 4 }), persistent({ 1, 1, 4, 4 })
  for c = 0, 3 do cq:set(c == 0 and 40 or 0, 0, 0, 0, c); ck:set(c == 0 and 1 or 0, 0, 0, 0, c) end
  for j = 1, 3 do ck:set(-1, 0, 0, j, 0) end
  local A = attention.new(ctx, { kind = "clipped_softmax", gamma = -0.1, zeta = 1.1 }, { d_model = 4, n_head = 1, name = "clip" })
  local probs
  for _, impl in ipairs({ "fused", "reference" }) do
    local obj = impl == "fused" and A or as_reference(A)
    cq:requires_grad_(true):zero_grad(); ck:requires_grad_(true):zero_grad()
    ctx:reset()
    local o = obj:forward(cq, ck, cv, nil, { probe = function(n, p) if n == "attn_probs" then probs = p:tolist() end end })
    o:sum_all():backward()
    local g = cq:gradlist()
    local row0, row1 = 0, 0
    for c = 1, 4 do row0 = row0 + math.abs(g[c]); row1 = row1 + math.abs(g[4 + c]) end
    t.ok(probs[1] == 1 and probs[2] == 0 and probs[3] == 0 and probs[4] == 0,
      "clipped " .. impl .. ": fully clipped row has weights (1,0,0,0)", table.concat(probs, " ", 1, 4))
    t.is(row0, 0, "clipped " .. impl .. ": clipped row gives dq exactly 0")
    t.ok(row1 > 1e-4, "clipped " .. impl .. ": unclipped row gets a gradient", row1)
  end
  local err, where = gradcheck.check(ctx, function(a, b, c) return A:forward(a, b, c, nil, {}) end, { cq, ck, cv }, { eps = 1e-3 })
  t.ok(err <= 1e-2, "clipped: gradcheck with a clipped row", where)
end

-- ---------------------------------------------------------------- softmax1: all scores very negative
do
  local nq, nk, nv = persistent({ 1, 2, 6, 4 }), persistent({ 1, 2, 6, 4 }), persistent({ 1, 2, 6, 4 })
  for i = 0, 47 do nq.data[i] = 30; nk.data[i] = -30 end   -- s = −1800 everywhere
  local A = attention.new(ctx, "softmax1", { d_model = 8, n_head = 2, name = "sm1" })
  for _, m in ipairs(MASKS) do
    if not m.pad_mask then
      ctx:reset()
      nq:requires_grad_(true):zero_grad(); nk:requires_grad_(true):zero_grad(); nv:requires_grad_(true):zero_grad()
      local rows
      local o = A:forward(nq, nk, nv, nil, { causal = m.causal, probe = function(n, p)
        if n == "attn_probs" then rows = p:sum():tolist() end end })
      local finite = true
      for _, val in ipairs(o:tolist()) do finite = finite and val == val and math.abs(val) < 1e30 end
      t.ok(finite, "softmax1 " .. m.name .. ": very negative scores give a finite output")
      local worst = 0
      for _, s in ipairs(rows) do worst = math.max(worst, math.abs(s)) end
      t.ok(worst < 1e-6, "softmax1 " .. m.name .. ": row sums ≈ 0", worst)
      o:sum_all():backward()
      local gfin = true
      for _, tt in ipairs({ nq, nk, nv }) do
        for _, val in ipairs(tt:gradlist()) do gfin = gfin and val == val and math.abs(val) < 1e30 end
      end
      t.ok(gfin, "softmax1 " .. m.name .. ": gradients finite")
    end
  end
  -- a plain softmax row always sums to 1, softmax1 can go below: the difference is real
  local sq, sk = persistent({ 1, 1, 3, 2 }), persistent({ 1, 1, 3, 2 })
  ctx:reset()
  local s1 = ol.C.ol_attention_probs(sq, sk, nil, nil, A.cfg, nil)
  local sums = s1:sum():tolist()
  t.ok(sums[1] < 1 and sums[1] > 0, "softmax1: a generic row sums to strictly between 0 and 1", sums[1])
end

-- ---------------------------------------------------------------- many tiles, causal cut, Tq rows > 64
do
  local Bt, Ht, Tt, Dt = 1, 2, 150, 8
  local bq, bk, bv = persistent({ Bt, Ht, Tt, Dt }), persistent({ Bt, Ht, Tt, Dt }), persistent({ Bt, Ht, Tt, Dt })
  local bx = persistent({ Bt, Tt, Ht * Dt })
  local bpad = ctx:tensor({ Bt, Tt }, { dtype = "i32", persistent = true })
  for j = 0, Tt - 1 do bpad.idata[j] = (j % 7 == 3) and 0 or 1 end
  for _, spec in ipairs({ "softmax", "clipped_softmax", "softmax1", "sigmoid", "ca_bias", "attn_bias", "fixed_bias",
                          { kind = "softmax", dropout = 0.2 }, { kind = "clipped_softmax", dropout = 0.2 },
                          { kind = "sigmoid", learn_bias = true, dropout = 0.2 }, { kind = "attn_bias", dropout = 0.2 },
                          { kind = "ca_bias", dropout = 0.2 } }) do
    local A = attention.new(ctx, spec, { d_model = Ht * Dt, n_head = Ht, name = "big." .. kname(spec) })
    for j, p in ipairs(A:parameters()) do p:normal_(0, 0.5, 55 + j) end
    for _, m in ipairs({ { causal = true, name = "causal" }, { pad_mask = bpad, name = "padding" } }) do
      local res = {}
      for _, obj in ipairs({ A, as_reference(A) }) do
        ctx:reset(); ctx:zero_grad()
        for _, tt in ipairs({ bq, bk, bv }) do tt:requires_grad_(true):zero_grad() end
        local o = obj:forward(bq, bk, bv, bx, { causal = m.causal, pad_mask = m.pad_mask, dropout_seed = dseed(spec) })
        local Rw = {}
        for i = 1, tonumber(o.numel) do Rw[i] = math.cos(i * 0.37) end
        ;(o * ctx:from_table(Rw, o:size())):sum_all():backward()
        local r = { o = o:tolist(), g = {} }
        for _, tt in ipairs({ bq, bk, bv }) do r.g[#r.g + 1] = tt:gradlist() end
        for _, p in ipairs(A:parameters()) do r.g[#r.g + 1] = p:gradlist() end
        res[#res + 1] = r
      end
      local gd = 0
      for i = 1, #res[1].g do gd = math.max(gd, maxdiff(res[1].g[i], res[2].g[i])) end
      local fd = maxdiff(res[1].o, res[2].o)
      t.ok(fd <= 2e-6 and gd <= 2e-5, string.format("%s T=%d %s (3 tiles): fused = reference", kname(spec), Tt, m.name),
        string.format("fwd %.2e grad %.2e", fd, gd))
    end
  end
end

-- ---------------------------------------------------------------- same numbers for 1 and 2 threads
for _, spec in ipairs({ "attn_bias", { kind = "attn_bias", dropout = 0.25 } }) do
  local A = attention.new(ctx, spec, { d_model = 16, n_head = 4, name = "det" .. kname(spec) })
  local dq, dk, dv = persistent({ 2, 4, 100, 4 }), persistent({ 2, 4, 100, 4 }), persistent({ 2, 4, 100, 4 })
  local function once()
    ctx:reset(); ctx:zero_grad()
    for _, tt in ipairs({ dq, dk, dv }) do tt:requires_grad_(true):zero_grad() end
    local o = A:forward(dq, dk, dv, nil, { causal = true, dropout_seed = dseed(spec) })
    o:sum_all():backward()
    local out = o:tolist()
    for _, tt in ipairs({ dq, dk, dv, A:parameters()[1], A:parameters()[2] }) do
      for _, val in ipairs(tt:gradlist()) do out[#out + 1] = val end
    end
    return out
  end
  local n0 = ol.num_threads()
  ol.set_num_threads(1)
  local a = once()
  ol.set_num_threads(2)
  local b = once()
  ol.set_num_threads(n0)
  t.is(maxdiff(a, b), 0, kname(spec) .. " forward+backward bitwise equal on 1 and 2 threads")
end

-- ---------------------------------------------------------------- probes
do
  local A = attention.new(ctx, { kind = "gated", gate = "linear" }, { d_model = NH * HD, n_head = NH, name = "pg" })
  local seen = {}
  ctx:reset()
  A:forward(q, k, v, x, { causal = true, probe = function(n, tt) seen[n] = tt:size() end })
  t.is(table.concat(seen.attn_probs or {}, ","), table.concat({ B, NH, T, T }, ","), "gated: probe attn_probs (B,NH,T,T)")
  t.is(table.concat(seen.gates or {}, ","), table.concat({ B, NH, T }, ","), "gated: probe gates (B,NH,T)")
  local S = attention.new(ctx, "ca_scale", { d_model = NH * HD, n_head = NH, name = "ps" })
  seen = {}
  ctx:reset()
  S:forward(q, k, v, x, { probe = function(n, tt) seen[n] = tt end })
  local sc = seen.scale:tolist()
  local okscale = #sc == B * NH * T
  for _, val in ipairs(sc) do okscale = okscale and val > 0 and val < 2 end
  t.ok(okscale, "ca_scale: probe scale (B,NH,T) in (0, 2)")
  local AB = attention.new(ctx, "attn_bias", { d_model = NH * HD, n_head = NH, name = "pb" })
  seen = {}
  ctx:reset()
  AB:forward(q, k, v, x, { probe = function(n, tt) seen[n] = tt:tolist() end })
  local worst = 0
  for r = 0, B * NH * T - 1 do
    local s = seen.sink_probs[r + 1]
    for j = 1, T do s = s + seen.attn_probs[r * T + j] end
    worst = math.max(worst, math.abs(s - 1))
  end
  t.ok(worst < 1e-6, "attn_bias: attn_probs + sink_probs sum to 1 per row", worst)
  t.ok(#seen.sink_probs == B * NH * T, "attn_bias: probe sink_probs (B,NH,T)")
  -- no probe: no probability tensor is made
  ctx:reset()
  local before = ctx:step_bytes()
  local bq = ctx:tensor({ 1, 1, 1024, 64 }):normal_(0, 1, 3)
  local used0 = ctx:step_bytes()
  ctx:no_grad(function() attention.new(ctx, "softmax", { d_model = 64, n_head = 1 }):forward(bq, bq, bq, nil, {}) end)
  t.ok(ctx:step_bytes() - used0 < 1024 * 1024 * 4 / 2, "softmax forward without probe allocates far less than T×T",
    ctx:step_bytes() - used0 .. " bytes, before " .. before)
end

-- ---------------------------------------------------------------- training memory is not O(T²)
do
  local Tm, Hm = 512, 4
  local mq, mk, mv = ctx:tensor({ 1, Hm, Tm, 16 }, { persistent = true }), ctx:tensor({ 1, Hm, Tm, 16 }, { persistent = true }),
                     ctx:tensor({ 1, Hm, Tm, 16 }, { persistent = true })
  for i, tt in ipairs({ mq, mk, mv }) do tt:normal_(0, 1, i) end
  local function peak(reference)
    local A = attention.new(ctx, "softmax", { d_model = Hm * 16, n_head = Hm, name = "mem", reference = reference })
    ctx:reset()
    for _, tt in ipairs({ mq, mk, mv }) do tt:requires_grad_(true):zero_grad() end
    ol.C.ol_step_reset_peak(ctx.raw)
    local base = ctx:step_bytes()
    A:forward(mq, mk, mv, nil, { causal = true }):sum_all():backward()
    return ctx:step_peak() - base
  end
  local fused, ref = peak(false), peak(true)
  local probs = Hm * Tm * Tm * 4
  t.diag(string.format("T=%d NH=%d: step peak fused %.2f MB, plain-op reference %.2f MB, one (NH,T,T) tensor %.2f MB",
    Tm, Hm, fused / 2 ^ 20, ref / 2 ^ 20, probs / 2 ^ 20))
  t.ok(fused < probs / 2, "fused training step uses less than half of one T×T probability tensor", fused)
  t.ok(ref > probs, "the plain-op reference keeps at least one T×T tensor (the comparison is real)", ref)
end

-- ---------------------------------------------------------------- spec errors
do
  local dims = { d_model = 8, n_head = 2 }
  t.throws(function() attention.new(ctx, { kind = "nope" }, dims) end, "valid kinds: attn_bias, ca_bias, ca_scale, clipped_softmax",
    "unknown kind lists the valid kinds")
  t.throws(function() attention.new(ctx, { kind = "softmax", gamma = -0.1 }, dims) end, "takes no parameter 'gamma'; valid: dropout",
    "softmax with gamma is an error")
  t.throws(function() attention.new(ctx, { kind = "clipped_softmax", beta = 1 }, dims) end, "valid: alpha, dropout, gamma, max_len, zeta",
    "clipped_softmax with an unknown key lists its parameters")
  t.throws(function() attention.new(ctx, { kind = "gated", gate = "conv" }, dims) end, "gate must be one of all_heads_linear, linear, mlp",
    "unknown gate kind lists the valid ones")
  t.throws(function() attention.new(ctx, { kind = "clipped_softmax", gamma = 0.1 }, dims) end, "gamma must be <= 0",
    "positive gamma is an error")
  t.throws(function() attention.new(ctx, { kind = "clipped_softmax", gamma = -0.1, alpha = 4 }, dims) end, "not both",
    "gamma and alpha together is an error")
  t.throws(function() attention.new(ctx, { kind = "gated", pi_init = 1 }, dims) end, "pi_init must be in (0, 1)",
    "pi_init outside (0,1) is an error")
  t.throws(function() attention.new(ctx, "softmax", { d_model = 7, n_head = 2 }) end, "multiple of n_head", "bad dims")
  ctx:reset()
  local bad = ctx:tensor({ 2, 2, 5, 4 })
  t.throws(function() attention.new(ctx, "softmax", dims):forward(q, bad, v, x, {}) end, "does not match q",
    "engine names the mismatched shapes")
  local badpad = ctx:tensor({ 2, 4 }, { dtype = "i32" })
  t.throws(function() attention.new(ctx, "softmax", dims):forward(q, k, v, x, { pad_mask = badpad }) end, "pad_mask",
    "a pad mask of the wrong shape is an error")
  -- α: γ = −α/T with the current T
  local A = attention.new(ctx, { kind = "clipped_softmax", alpha = 12 }, dims)
  local g, z = A:clip_params(512)
  t.near(g, -12 / 512, 1e-12, "alpha = 12 at T = 512 gives gamma = -12/512")
  t.is(z, 1, "alpha: zeta = 1")
  local S = attention.new(ctx, "sigmoid", dims)
  t.near(S:sigmoid_bias(128), -math.log(128), 1e-12, "sigmoid default bias = -log T")
  local G = attention.new(ctx, { kind = "gated", pi_init = 0.25 }, { d_model = 8, n_head = 2, name = "gi" })
  t.near(G:parameters()[2].data[0], -1.0986123, 1e-6, "gate bias starts at logit(pi_init)")
  t.is(ol.ffi.string(G:parameters()[1].name), "gi.gate.weight", "gate parameters are named under the attention prefix")
end

return t.done()
