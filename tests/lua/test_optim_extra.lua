-- test_optim_extra — Muon, OrthoAdam and single-scale RMSNorm (docs/reference/training.md):
--   * Newton–Schulz: the classic cubic converges to the orthogonal polar factor (XXᵀ = I to 1e-5,
--     and G = Q·D gives Q back); Muon's quintic, 5 steps, gives singular values in [0.5, 1.5]
--     (its known behaviour), for wide and tall matrices;
--   * a Muon step by hand (μ = 0: p − lr·NS5(g); the Nesterov momentum; the Jordan and RMS scales),
--     the default partition (projections by Muon, the rest by AdamW, which equals AdamW's step),
--     the same numbers on 1 and 2 threads;
--   * OrthoAdam with the identity rotation equals AdamW bit for bit (3 steps); the random rotation
--     is orthogonal and the first step equals Qaᵀ·(G̃/(|G̃| + ε))·Qb computed by hand in double;
--   * single-scale RMSNorm: one gain, y = g·x/rms(x), finite-difference gradients, a llama model
--     built with it; train.run with optimizer = muon / orthoadam lowers the loss.
local t = require "tap"
local ol = require "outlierlab"
local optim = require "outlierlab.optim"
local ox = require "outlierlab.nn.optim_extra"
local gradcheck = require "outlierlab.nn.gradcheck"
local ffi = require "ffi"
local C = ol.C

-- eigenvalues of a symmetric n×n matrix (Lua table, row-major, 1-based) by cyclic Jacobi
local function sym_eig(A, n)
  A = { unpack(A) }
  for _ = 1, 100 do
    local off = 0
    for i = 1, n do for j = i + 1, n do off = off + A[(i - 1) * n + j] ^ 2 end end
    if off < 1e-24 then break end
    for p = 1, n do
      for q = p + 1, n do
        local apq = A[(p - 1) * n + q]
        if math.abs(apq) > 1e-300 then
          local app, aqq = A[(p - 1) * n + p], A[(q - 1) * n + q]
          local th = (aqq - app) / (2 * apq)
          local tt = (th >= 0 and 1 or -1) / (math.abs(th) + math.sqrt(th * th + 1))
          local c = 1 / math.sqrt(tt * tt + 1)
          local s = tt * c
          for k = 1, n do
            local akp, akq = A[(k - 1) * n + p], A[(k - 1) * n + q]
            A[(k - 1) * n + p], A[(k - 1) * n + q] = c * akp - s * akq, s * akp + c * akq
          end
          for k = 1, n do
            local apk, aqk = A[(p - 1) * n + k], A[(q - 1) * n + k]
            A[(p - 1) * n + k], A[(q - 1) * n + k] = c * apk - s * aqk, s * apk + c * aqk
          end
        end
      end
    end
  end
  local ev = {}
  for i = 1, n do ev[i] = A[(i - 1) * n + i] end
  return ev
end

local function gauss(n, seed)
  local a = ffi.new("float[?]", n)
  for i = 0, n - 1 do
    local u1, u2 = C.ol_rand_uniform(seed, 2 * i), C.ol_rand_uniform(seed, 2 * i + 1)
    a[i] = math.sqrt(-2 * math.log(1 - u1)) * math.cos(2 * math.pi * u2)
  end
  return a
end

-- X·Xᵀ (r×r, double) for X (r×c), r = the smaller side
local function gram(X, rows, cols)
  local tall = rows > cols
  local r, c = tall and cols or rows, tall and rows or cols
  local function at(i, j) return tall and X[j * cols + i] or X[i * cols + j] end
  local G = {}
  for i = 0, r - 1 do
    for j = 0, r - 1 do
      local s = 0
      for k = 0, c - 1 do s = s + at(i, k) * at(j, k) end
      G[i * r + j + 1] = s
    end
  end
  return G, r
end

-- ---------------------------------------------------------------- Newton–Schulz
do
  local cubic = ffi.new("float[3]", 1.5, -0.5, 0)
  for _, shape in ipairs({ { 8, 16 }, { 24, 10 } }) do
    local rows, cols = shape[1], shape[2]
    local g, out = gauss(rows * cols, rows * 100 + cols), ffi.new("float[?]", rows * cols)
    ol.check_status(C.ol_newton_schulz(g, rows, cols, 60, cubic, out))
    local G, r = gram(out, rows, cols)
    local worst = 0
    for i = 0, r - 1 do for j = 0, r - 1 do worst = math.max(worst, math.abs(G[i * r + j + 1] - (i == j and 1 or 0))) end end
    t.ok(worst < 1e-5, string.format("newton_schulz cubic, 60 steps, %dx%d: X·Xᵀ = I (smaller side) to 1e-5", rows, cols), worst)
    ol.check_status(C.ol_newton_schulz(g, rows, cols, 5, nil, out))
    local ev = sym_eig((gram(out, rows, cols)), r)
    local lo, hi = math.huge, 0
    for _, e in ipairs(ev) do lo, hi = math.min(lo, math.sqrt(math.max(e, 0))), math.max(hi, math.sqrt(math.max(e, 0))) end
    t.ok(lo >= 0.5 and hi <= 1.5, string.format("newton_schulz Muon quintic, 5 steps, %dx%d: singular values in [0.5, 1.5]", rows, cols),
      string.format("[%.3f, %.3f]", lo, hi))
  end
  -- G = Q·D (Q orthogonal, D positive diagonal): the polar factor is Q
  local ctx = ol.Context{ params = 4096, step_bytes = 2 ^ 22 }
  local n = 12
  local Q = ctx:tensor({ n, n }, { persistent = true })
  ol.check_status(C.ol_random_orthogonal(Q, 5))
  local Gm, out = ffi.new("float[?]", n * n), ffi.new("float[?]", n * n)
  for i = 0, n - 1 do for j = 0, n - 1 do Gm[i * n + j] = Q.data[i * n + j] * (0.2 + j / n) end end
  ol.check_status(C.ol_newton_schulz(Gm, n, n, 60, cubic, out))
  local worst = 0
  for i = 0, n * n - 1 do worst = math.max(worst, math.abs(out[i] - Q.data[i])) end
  t.ok(worst < 1e-5, "newton_schulz cubic: G = Q·D (D > 0 diagonal) gives Q back (the polar factor)", worst)
  local QQ = gram(Q.data, n, n)
  local wq = 0
  for i = 0, n - 1 do for j = 0, n - 1 do wq = math.max(wq, math.abs(QQ[i * n + j + 1] - (i == j and 1 or 0))) end end
  t.ok(wq < 1e-6, "random_orthogonal: Q·Qᵀ = I to 1e-6", wq)
  t.ok(C.ol_newton_schulz(Gm, 0, n, 5, nil, out) ~= 0, "newton_schulz: bad shape is an error")
end

-- ---------------------------------------------------------------- Muon by hand
do
  local ctx = ol.Context{ params = 4096, step_bytes = 2 ^ 22 }
  local W = ctx:param("l.q_proj.weight", { 6, 10 }):normal_(0, 1, 3)
  local T = ctx:param("l.up_proj.weight", { 12, 4 }):normal_(0, 1, 4)     -- tall: rows > cols
  local b = ctx:param("l.q_proj.bias", { 6 }):normal_(0, 1, 5)
  local E = ctx:param("wte.weight", { 7, 10 }):normal_(0, 1, 6)
  local opt = ox.Muon(ctx, { lr = 0.1, momentum = 0, nesterov = false, scale = "jordan", weight_decay = 0 })
  local part = opt:partition()
  t.is(table.concat(part.muon, ","), "l.q_proj.weight,l.up_proj.weight", "muon default: the 2-D *_proj.weight parameters")
  t.is(table.concat(part.adamw, ","), "l.q_proj.bias,wte.weight", "muon default: biases and embeddings go to AdamW")
  for _, p in ipairs({ W, T, b, E }) do
    local g = gauss(tonumber(p.numel), 77 + p.param_index)
    for i = 0, tonumber(p.numel) - 1 do p.grad[i] = g[i] end
  end
  local before = { W = W:tolist(), T = T:tolist(), E = E:tolist() }
  local nsW, nsT = ffi.new("float[60]"), ffi.new("float[48]")
  ol.check_status(C.ol_newton_schulz(W.grad, 6, 10, 5, nil, nsW))
  ol.check_status(C.ol_newton_schulz(T.grad, 12, 4, 5, nil, nsT))
  -- AdamW's view of E, for comparison: the same first step from zero moments
  local eg = {}
  for i = 0, 69 do eg[i + 1] = E.grad[i] end
  opt:step()
  local dW, dT = 0, 0
  for i = 0, 59 do dW = math.max(dW, math.abs(W.data[i] - (before.W[i + 1] - 0.1 * nsW[i]))) end
  local k = math.sqrt(12 / 4)
  for i = 0, 47 do dT = math.max(dT, math.abs(T.data[i] - (before.T[i + 1] - 0.1 * k * nsT[i]))) end
  t.ok(dW < 1e-6, "muon μ = 0: p − lr·NS5(g) (wide)", dW)
  t.ok(dT < 1e-6, "muon μ = 0: p − lr·√(rows/cols)·NS5(g) (tall, Jordan's scale)", dT)
  local dE = 0
  for i = 0, 69 do
    local ghat = eg[i + 1]
    local upd = 0.1 * ghat / (math.abs(ghat) + 1e-8)   -- first AdamW step: m̂/√v̂ = g/|g|
    dE = math.max(dE, math.abs(E.data[i] - (before.E[i + 1] - upd)))
  end
  t.ok(dE < 1e-6, "muon: the AdamW part takes AdamW's step (first step: −lr·g/|g|)", dE)
  -- Nesterov momentum: m = (1−μ)g after one step, u = (1−μ)g + μm; RMS scale 0.2·√max(r, c)
  local ctx2 = ol.Context{ params = 4096, step_bytes = 2 ^ 22 }
  local W2 = ctx2:param("a.o_proj.weight", { 6, 10 }):normal_(0, 1, 3)
  local g = gauss(60, 91)
  for i = 0, 59 do W2.grad[i] = g[i] end
  local w0 = W2:tolist()
  local u = ffi.new("float[60]")
  for i = 0, 59 do u[i] = 0.05 * g[i] + 0.95 * (0.05 * g[i]) end
  local ns = ffi.new("float[60]")
  ol.check_status(C.ol_newton_schulz(u, 6, 10, 5, nil, ns))
  ox.Muon(ctx2, { lr = 0.01, weight_decay = 0 }):step()
  local dm, dp = 0, 0
  local mbuf = C.ol_adam_m_data(ctx2.raw)
  for i = 0, 59 do
    dm = math.max(dm, math.abs(mbuf[i] - 0.05 * g[i]))
    dp = math.max(dp, math.abs(W2.data[i] - (w0[i + 1] - 0.01 * 0.2 * math.sqrt(10) * ns[i])))
  end
  t.ok(dm < 1e-7, "muon: momentum buffer m = (1−μ)·g after the first step (μ = 0.95)", dm)
  t.ok(dp < 1e-6, "muon: Nesterov u = (1−μ)g + μm, RMS scale 0.2·√max(rows, cols)", dp)
  t.throws(function() ox.Muon(ctx2, { momentum = 1 }) end, "momentum must be in [0, 1)", "muon: momentum 1 is an error")
  t.throws(function() ox.Muon(ctx2, { bogus = 1 }) end, "unknown option 'bogus'", "muon: unknown option")
end

-- ---------------------------------------------------------------- Muon: 1 and 2 threads
do
  local function run(nthreads)
    ol.set_num_threads(nthreads)
    local ctx = ol.Context{ params = 2 ^ 18, step_bytes = 2 ^ 22 }
    local W = ctx:param("x.down_proj.weight", { 96, 160 }):normal_(0, 1, 8)
    local opt = ox.Muon(ctx, { lr = 0.02 })
    for s = 1, 3 do
      local g = gauss(96 * 160, 500 + s)
      for i = 0, 96 * 160 - 1 do W.grad[i] = g[i] end
      opt:step()
    end
    return W:tolist()
  end
  local n0 = ol.num_threads()
  local a, b = run(1), run(2)
  ol.set_num_threads(n0)
  local d = 0
  for i = 1, #a do d = math.max(d, math.abs(a[i] - b[i])) end
  t.is(d, 0, "muon: 3 steps on a 96x160 weight bitwise equal on 1 and 2 threads")
end

-- ---------------------------------------------------------------- OrthoAdam
local function twin(seed)
  local ctx = ol.Context{ params = 4096, step_bytes = 2 ^ 22 }
  local ps = { ctx:param("W.weight", { 5, 7 }):normal_(0, 1, seed), ctx:param("b.bias", { 7 }):normal_(0, 1, seed + 1),
               ctx:param("g.weight", { 2, 3, 4 }):normal_(0, 1, seed + 2) }
  return ctx, ps
end
local function set_grads(ps, step)
  for k, p in ipairs(ps) do
    local g = gauss(tonumber(p.numel), 1000 * step + k)
    for i = 0, tonumber(p.numel) - 1 do p.grad[i] = g[i] end
  end
end
do
  local ca, pa = twin(1)
  local cb, pb = twin(1)
  local oa = optim.AdamW(ca, { lr = 0.01, weight_decay = 0.1 })
  local ob = ox.OrthoAdam(cb, { lr = 0.01, weight_decay = 0.1, rotation = "identity" })
  for step = 1, 3 do
    set_grads(pa, step); set_grads(pb, step)
    oa:step(); ob:step()
  end
  local same = true
  for k = 1, #pa do
    local a, b = pa[k]:tolist(), pb[k]:tolist()
    for i = 1, #a do same = same and a[i] == b[i] end
  end
  t.ok(same, "orthoadam with the identity rotation equals AdamW bit for bit (3 steps, 2-D, 1-D, 3-D parameters)")
  local mv = true
  local ma, mb = C.ol_adam_v_data(ca.raw), C.ol_adam_v_data(cb.raw)
  for i = 0, tonumber(C.ol_params_numel(ca.raw)) - 1 do mv = mv and ma[i] == mb[i] end
  t.ok(mv, "orthoadam identity: the second moments equal AdamW's bit for bit")

  -- random rotation: first step = Qaᵀ·(G̃/(|G̃| + ε))·Qb with G̃ = Qa·G·Qbᵀ, by hand in double
  local cc, pc = twin(1)
  local oc = ox.OrthoAdam(cc, { lr = 0.01, weight_decay = 0, seed = 3 })
  local W = pc[1]
  local w0 = W:tolist()
  set_grads(pc, 1)
  local G = W:gradlist()
  oc:step()
  local Qa, Qb = oc:rotation_of(5), oc:rotation_of(7)
  local function q(Qm, n, i, j) return Qm.data[i * n + j] end
  local Gt = {}
  for i = 0, 4 do
    for j = 0, 6 do
      local s = 0
      for a = 0, 4 do for b = 0, 6 do s = s + q(Qa, 5, i, a) * G[a * 7 + b + 1] * q(Qb, 7, j, b) end end
      Gt[i * 7 + j] = s / (math.abs(s) + 1e-8)
    end
  end
  local worst = 0
  for i = 0, 4 do
    for j = 0, 6 do
      local s = 0
      for a = 0, 4 do for b = 0, 6 do s = s + q(Qa, 5, a, i) * Gt[a * 7 + b] * q(Qb, 7, b, j) end end
      worst = math.max(worst, math.abs(W.data[i * 7 + j] - (w0[i * 7 + j + 1] - 0.01 * s)))
    end
  end
  t.ok(worst < 1e-6, "orthoadam random rotation: first step = −lr·Qaᵀ·sign(Qa·G·Qbᵀ)·Qb (by hand)", worst)
  local same2 = true
  local _, pd = twin(1)
  for i = 1, #w0 do same2 = same2 and W.data[i - 1] == pd[1].data[i - 1] end
  t.ok(not same2, "orthoadam random rotation: the step differs from AdamW's (the basis matters)")
  t.throws(function() ox.OrthoAdam(cc, { rotation = "hadamard" }) end, "rotation must be random or identity",
    "orthoadam: unknown rotation")
end

-- ---------------------------------------------------------------- single-scale RMSNorm
do
  local nn = require "outlierlab.nn"
  local ctx = ol.Context{ params = 4096, step_bytes = 2 ^ 22, seed = 3 }
  local N = nn.RMSNorm(ctx, 6, { name = "sn", single = true, eps = 1e-6 })
  t.is(table.concat(N.weight:size(), ","), "1", "single-scale RMSNorm: one gain")
  N.weight:load({ 1.7 })
  local x = ctx:tensor({ 2, 3, 6 }, { persistent = true }):normal_(0, 2, 9)
  ctx:reset()
  local y = N:forward(x):tolist()
  local xs, worst = x:tolist(), 0
  for r = 0, 5 do
    local ms = 0
    for c = 1, 6 do ms = ms + xs[r * 6 + c] ^ 2 end
    local inv = 1 / math.sqrt(ms / 6 + 1e-6)
    for c = 1, 6 do worst = math.max(worst, math.abs(y[r * 6 + c] - 1.7 * xs[r * 6 + c] * inv)) end
  end
  t.ok(worst < 1e-5, "single-scale RMSNorm: y = g·x/√(mean x² + eps)", worst)
  local err, where = gradcheck.check(ctx, function(a) return N:forward(a) end, { x, N.weight })
  t.ok(err <= 1e-2, "single-scale RMSNorm: gradcheck (x, g)", where)
  local models = require "outlierlab.models"
  local c2 = ol.Context({ seed = 2 })
  local m = models.build(c2, models.preset("llama-quick", { norm_gain = "single" }))
  local ones = 0
  for i = 0, C.ol_param_count(c2.raw) - 1 do
    local p = C.ol_param_get(c2.raw, i)
    if ffi.string(p.name):match("ln%d%.weight$") or ffi.string(p.name) == "norm.weight" then
      if p.numel == 1 then ones = ones + 1 end
    end
  end
  t.is(ones, 5, "llama-quick norm_gain = single: all 5 RMSNorms have one gain")
  t.throws(function() models.build(ol.Context({ seed = 2 }), models.preset("llama-quick", { norm_gain = "row" })) end,
    "norm_gain must be", "norm_gain: an unknown value is an error")
  ignore = m
  -- Park et al.'s projections: orthogonal at init, counted, in the forward
  local c3 = ol.Context({ seed = 2 })
  local cfg3 = models.preset("llama-quick", { embed_proj = true })
  local m3 = models.build(c3, cfg3)
  t.is(m3:num_params(), require("outlierlab.models.llama").count(cfg3), "embed_proj: parameter count includes 2·C²")
  local wq = 0
  for _, W in ipairs({ m3.embed_proj.weight, m3.head_proj.weight }) do
    local n = cfg3.d_model
    for i = 0, n - 1 do
      for j = 0, n - 1 do
        local s = 0
        for k = 0, n - 1 do s = s + W.data[i * n + k] * W.data[j * n + k] end
        wq = math.max(wq, math.abs(s - (i == j and 1 or 0)))
      end
    end
  end
  t.ok(wq < 1e-5, "embed_proj, head_proj: orthogonal at init (W·Wᵀ = I)", wq)
  t.ok(ox.default_muon(m3.embed_proj.weight), "muon default rule takes the projections (2-D *_proj.weight)")
end

-- ---------------------------------------------------------------- train.run with muon / orthoadam
do
  local train = require "outlierlab.train.loop"
  local models = require "outlierlab.models"
  for _, kind in ipairs({ "muon", "orthoadam" }) do
    local ctx = ol.Context({ seed = 4 })
    local cfg = models.preset("llama-quick", {})
    local m = models.build(ctx, cfg)
    local V, B, T = cfg.vocab_size, 4, 16
    local loader = { pos = 0 }
    function loader:next(c)
      local ids = c:tensor({ B, T }, { dtype = "i32" })
      local tg = c:tensor({ B, T }, { dtype = "i32" })
      for b = 0, B - 1 do
        local x = math.floor(C.ol_rand_uniform(9, self.pos) * 16)
        self.pos = self.pos + 1
        for i = 0, T - 1 do ids.idata[b * T + i] = x; x = (3 * x + 1) % 16; tg.idata[b * T + i] = x end
      end
      return { ids = ids, targets = tg }
    end
    local res = train.run { ctx = ctx, model = m, loader = loader,
                            cfg = { steps = 40, lr = 1e-2, warmup = 4, progress = "off", optimizer = kind } }
    local first = (res.losses[1] + res.losses[2]) / 2
    local last = (res.losses[39] + res.losses[40]) / 2
    t.ok(last < first - 1, "train.run optimizer = " .. kind .. ": the loss falls", string.format("%.3f -> %.3f", first, last))
  end
  t.throws(function() ox.new("sgd", ol.Context({ seed = 1 }), {}) end, "valid: adamw, muon, orthoadam", "unknown optimizer")
end

-- the token embeddings' own decay (embed_weight_decay, a third AdamW group) reaches the AdamW part
-- of Muon and OrthoAdam: a zero gradient leaves only the decay, p <- p (1 - lr wd_group)
for _, kind in ipairs { "muon", "orthoadam" } do
  local ctx = ol.Context{ params = 4096, step_bytes = 2^20 }
  local w = ctx:param("fc.weight", { 2, 2 })
  local e = ctx:param("embed_tokens.weight", { 2, 2 })
  for i = 0, 3 do w.data[i] = 1; e.data[i] = 1 end
  local opt = ox.new(kind, ctx, { lr = 0.1, weight_decay = 0.1, embed_weight_decay = 2.0 })
  ctx:zero_grad()
  opt:step()
  t.near(e.data[0], 1 - 0.1 * 2.0, 1e-7, kind .. ": the embedding group decays at embed_weight_decay")
  t.near(w.data[0], 1 - 0.1 * 0.1, 1e-7, kind .. ": the decayed group at weight_decay")
end

return t.done()
