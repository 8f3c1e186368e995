-- test_attention_knobs — what the attention knobs mean, on cases worked out by hand
-- (docs/reference/attention.md, "Knobs"): the dropout mask of the fused kernel against the mask formula
-- (u(seed, row·Tk + j) < p, drawn here with ol_rand_uniform), the sink weight's mask, neutral
-- settings that give bit-identical numbers (dropout 0, evaluation, b_h = 0, max_len = T), the
-- learned sigmoid bias and its gradient with q = 0, the gate scale 1/π_init, γ = −α/max_len,
-- spec and engine errors, and the model plumbing of attention dropout (seeded by model seed,
-- step and layer: deterministic and resumable). Fused = reference and the finite-difference
-- checks of every knob are in tests/lua/test_attention.lua.
local ol = require "outlierlab"
local t = require "tap"
local attention = require "outlierlab.nn.attention"
local models = require "outlierlab.models"
local bit = require "bit"
local ffi = ol.ffi

local ctx = ol.Context({ seed = 5 })
local seed = 300
local function persistent(shape, std)
  seed = seed + 1
  return ctx:tensor(shape, { persistent = true }):normal_(0, std or 1, seed)
end
local function maxdiff(a, b)
  local m = 0
  for i = 1, #a do m = math.max(m, math.abs(a[i] - b[i])) end
  return m
end
local function same(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end
-- the engine's uniform in float precision: ol__u01(seed, i) = (hash >> 40) / 2^24, and
-- ol_rand_uniform(seed, i) = (hash >> 11) / 2^53, so the former is the latter cut to 24 bits
local function u01(s, i) return math.floor(ol.C.ol_rand_uniform(s, i) * 2 ^ 24) / 2 ^ 24 end
local function fwd(A, q, k, v, x, opts)
  ctx:reset()
  local probs, sink
  local o = A:forward(q, k, v, x, { causal = opts.causal, pad_mask = opts.pad_mask, dropout_seed = opts.dropout_seed,
    probe = function(n, p) if n == "attn_probs" then probs = p:tolist() elseif n == "sink_probs" then sink = p:tolist() end end })
  return o:tolist(), probs, sink
end

-- ---------------------------------------------------------------- the dropout mask, by hand
-- Tk = HD and V = identity per head: out[b,h,i,c] = Ã[b,h,i,c], the dropped weights themselves.
-- Ã_ij = A_ij·z_ij, z = 0 if u(seed, row·Tk + j) < p else 1/(1 − p), row = (b·NH + h)·Tq + i;
-- A_ij from the probe (weights before dropout). p = 0.5: z ∈ {0, 2}, products exact.
do
  local B, NH, T = 2, 2, 6
  local q, k = persistent({ B, NH, T, T }), persistent({ B, NH, T, T })
  local eye = ctx:tensor({ B, NH, T, T }, { persistent = true })
  for bh = 0, B * NH - 1 do for i = 0, T - 1 do for c = 0, T - 1 do eye.data[(bh * T + i) * T + c] = i == c and 1 or 0 end end end
  local S = 77
  for _, spec in ipairs({ { kind = "softmax", dropout = 0.5 }, { kind = "clipped_softmax", gamma = -0.1, zeta = 1.1, dropout = 0.5 },
                          { kind = "sigmoid", dropout = 0.5 }, { kind = "attn_bias", dropout = 0.5 } }) do
    local A = attention.new(ctx, spec, { d_model = NH * T, n_head = NH, name = "mask." .. spec.kind })
    if spec.kind == "attn_bias" then A.p.v:fill_(0) end        -- v′ = 0: out = Ã·V only
    for _, causal in ipairs({ false, true }) do
      local out, probs = fwd(A, q, k, eye, nil, { causal = causal, dropout_seed = S })
      local worst, dropped, n = 0, 0, 0
      for row = 0, B * NH * T - 1 do
        for j = 0, T - 1 do
          local a = probs[row * T + j + 1]
          local z = u01(S, row * T + j) < 0.5 and 0 or 2
          worst = math.max(worst, math.abs(out[row * T + j + 1] - a * z))
          if a ~= 0 then n = n + 1; if z == 0 then dropped = dropped + 1 end end
        end
      end
      t.ok(worst <= 1e-7, string.format("%s %s: fused weights = A·z with z from u(seed, row·Tk + j)", spec.kind,
        causal and "causal" or "bidirectional"), worst)
      t.ok(dropped > 0.3 * n and dropped < 0.7 * n, spec.kind .. ": about half of the visible weights dropped",
        dropped .. " of " .. n)
    end
  end
  -- the sink weight: V = 0, v′ = e_0 -> out[.., i, 0] = P′_i·z′_i, z′ from u(seed ^ salt, row)
  local A = attention.new(ctx, { kind = "attn_bias", dropout = 0.5 }, { d_model = NH * T, n_head = NH, name = "mask.sink" })
  A.p.v:fill_(0)
  for h = 0, NH - 1 do A.p.v:set(1, h, 0) end
  local zero = ctx:tensor({ B, NH, T, T }, { persistent = true }):fill_(0)
  local out, _, sink = fwd(A, q, k, zero, nil, { dropout_seed = S })
  local sseed = bit.bxor(ffi.cast("uint64_t", S), 0x9E3779B97F4A7C15ULL)
  local worst, dropped = 0, 0
  for row = 0, B * NH * T - 1 do
    local z = u01(sseed, row) < 0.5 and 0 or 2
    if z == 0 then dropped = dropped + 1 end
    worst = math.max(worst, math.abs(out[row * T + 1] - sink[row + 1] * z))
  end
  t.ok(worst <= 1e-7 and dropped > 0 and dropped < B * NH * T,
    "attn_bias: sink weight = P′·z′ with z′ from u(seed ^ 0x9E3779B97F4A7C15, row)", worst .. ", dropped " .. dropped)
end

-- ---------------------------------------------------------------- neutral settings are bit-identical
do
  local B, NH, T, HD = 2, 2, 9, 4
  local q, k, v = persistent({ B, NH, T, HD }), persistent({ B, NH, T, HD }), persistent({ B, NH, T, HD })
  local x = persistent({ B, T, NH * HD })
  local dims = { d_model = NH * HD, n_head = NH }
  for _, kind in ipairs({ "softmax", "sigmoid", "ca_bias", "attn_bias" }) do
    dims.name = "neutral." .. kind
    local plain = attention.new(ctx, kind, dims)
    local drop = attention.new(ctx, { kind = kind, dropout = 0.4 }, dims)
    for i, p in ipairs(plain:parameters()) do drop:parameters()[i]:load(p:tolist()) end
    local o0 = fwd(plain, q, k, v, x, { causal = true })
    t.ok(same(o0, fwd(drop, q, k, v, x, { causal = true })), kind .. ": dropout 0.4 without a seed (evaluation) = no dropout, bitwise")
    t.ok(same(o0, fwd(plain, q, k, v, x, { causal = true, dropout_seed = 9 })), kind .. ": dropout 0 with a seed = no dropout, bitwise")
    local o1 = fwd(drop, q, k, v, x, { causal = true, dropout_seed = 9 })
    t.ok(not same(o0, o1), kind .. ": dropout 0.4 in training changes the output")
    t.ok(same(o1, fwd(drop, q, k, v, x, { causal = true, dropout_seed = 9 })), kind .. ": same seed, same mask")
    t.ok(not same(o1, fwd(drop, q, k, v, x, { causal = true, dropout_seed = 10 })), kind .. ": another seed, another mask")
  end
  -- learned sigmoid bias at its initial value b_h = 0 = the fixed-bias variant
  dims.name = "neutral.lb"
  local s0, s1 = attention.new(ctx, "sigmoid", dims), attention.new(ctx, { kind = "sigmoid", learn_bias = true }, dims)
  t.is(ol.ffi.string(s1:parameters()[1].name), "neutral.lb.sigmoid_bias", "learn_bias: parameter <name>.sigmoid_bias (NH)")
  t.ok(same(fwd(s0, q, k, v, x, { causal = true }), fwd(s1, q, k, v, x, { causal = true })),
    "learn_bias: b_h = 0 at init gives the fixed-bias numbers, bitwise")
  -- γ = −α/max_len with max_len = T: the same as γ = −α/T
  dims.name = "neutral.clip"
  local c0 = attention.new(ctx, { kind = "clipped_softmax", alpha = 3 }, dims)
  local c1 = attention.new(ctx, { kind = "clipped_softmax", alpha = 3, max_len = T }, dims)
  t.ok(same(fwd(c0, q, k, v, x, {}), fwd(c1, q, k, v, x, {})), "max_len = T: same numbers as gamma = -alpha/T, bitwise")
  local g, z = c1:clip_params(17)
  t.ok(g == -3 / T and z == 1, "max_len: gamma = -alpha/max_len whatever the key length", g)
  local g2 = c0:clip_params(17)
  t.near(g2, -3 / 17, 1e-15, "without max_len: gamma = -alpha/T of the current keys")
  -- gate scale: π_init = 0.25 -> c = 1/π_init = 4, a power of two: the output is exactly 4× the
  -- unscaled one; the probe reports the gate probabilities (before the scale)
  local outs, gates = {}, {}
  for i, gs in ipairs({ 1, "inv_pi_init", 2.5 }) do
    local G = attention.new(ctx, { kind = "gated", pi_init = 0.25, gate_scale = gs },
      { d_model = NH * HD, n_head = NH, name = "gs" .. i })
    if i > 1 then for j, p in ipairs(G:parameters()) do p:load(outs.params[j]) end
    else
      for j, p in ipairs(G:parameters()) do p:normal_(0, 0.3, 40 + j) end
      outs.params = {}
      for j, p in ipairs(G:parameters()) do outs.params[j] = p:tolist() end
    end
    ctx:reset()
    local o = G:forward(q, k, v, x, { probe = function(n, p) if n == "gates" then gates[i] = p:tolist() end end })
    outs[i] = o:tolist()
  end
  local exact = true
  for i = 1, #outs[1] do exact = exact and outs[2][i] == 4 * outs[1][i] end
  t.ok(exact, "gate_scale = inv_pi_init (pi_init 0.25): output = 4 × the unscaled output, bitwise")
  local rel = 0
  for i = 1, #outs[1] do rel = math.max(rel, math.abs(outs[3][i] - 2.5 * outs[1][i]) / math.max(1e-6, math.abs(outs[1][i]))) end
  t.ok(rel < 1e-6, "gate_scale = 2.5: output = 2.5 × the unscaled output", rel)
  t.ok(same(gates[1], gates[2]), "gate_scale: the gates probe reports sigmoid(G(x)), before the scale")
end

-- ---------------------------------------------------------------- learned sigmoid bias by hand
-- q = 0: s = 0, A_ij = σ(b + b_h) on every visible key. b = −1, b_h = (0.5, −0.25), causal:
-- out[b,h,i,:] = σ(b + b_h)·Σ_{j ≤ i} v_j. L = Σ out: dL/db_h = σ'(b + b_h)·Σ_{b,i} Σ_{j ≤ i} Σ_c v_jc.
do
  local B, NH, T, HD = 1, 2, 4, 3
  local q = ctx:tensor({ B, NH, T, HD }, { persistent = true }):fill_(0)
  local k, v = persistent({ B, NH, T, HD }), persistent({ B, NH, T, HD })
  for _, impl in ipairs({ "fused", "reference" }) do
    local A = attention.new(ctx, { kind = "sigmoid", bias = -1, learn_bias = true }, { d_model = NH * HD, n_head = NH, name = "lb." .. impl })
    local bh = A:parameters()[1]
    bh:load({ 0.5, -0.25 })
    local obj = impl == "fused" and A or setmetatable({ use_reference = true }, { __index = A })
    ctx:zero_grad()
    ctx:reset()
    local o = obj:forward(q, k, v, nil, { causal = true })
    o:sum_all():backward()
    local out, gb = o:tolist(), bh:gradlist()
    local worst, gworst = 0, 0
    for h = 0, NH - 1 do
      local a = 1 / (1 + math.exp(-(-1 + (h == 0 and 0.5 or -0.25))))
      local gsum = 0
      for i = 0, T - 1 do
        for c = 0, HD - 1 do
          local s = 0
          for j = 0, i do s = s + v.data[((h * T) + j) * HD + c] end
          gsum = gsum + s
          worst = math.max(worst, math.abs(out[(h * T + i) * HD + c + 1] - a * s))
        end
      end
      gworst = math.max(gworst, math.abs(gb[h + 1] - a * (1 - a) * gsum))
    end
    t.ok(worst < 1e-6, impl .. ": sigmoid with learned bias, q = 0: out = σ(b + b_h)·Σ_{j≤i} v_j", worst)
    t.ok(gworst < 1e-5, impl .. ": db_h = σ'(b + b_h)·Σ v over visible keys", gworst)
  end
end

-- ---------------------------------------------------------------- errors
do
  local dims = { d_model = 8, n_head = 2 }
  t.throws(function() attention.new(ctx, { kind = "softmax", dropout = 1 }, dims) end, "dropout must be in [0, 1)", "dropout 1 is an error")
  t.throws(function() attention.new(ctx, { kind = "gated", dropout = -0.1 }, dims) end, "dropout must be in [0, 1)", "negative dropout is an error")
  t.throws(function() attention.new(ctx, { kind = "clipped_softmax", max_len = 128 }, dims) end, "give alpha with it",
    "max_len without alpha is an error")
  t.throws(function() attention.new(ctx, { kind = "clipped_softmax", alpha = 4, max_len = 0 }, dims) end, "max_len must be a positive integer",
    "max_len 0 is an error")
  t.throws(function() attention.new(ctx, { kind = "gated", gate_scale = 0 }, dims) end, "gate_scale must be a number > 0",
    "gate_scale 0 is an error")
  t.throws(function() attention.new(ctx, { kind = "gated", gate_scale = "pi" }, dims) end, 'or "inv_pi_init"',
    "an unknown gate_scale word is an error")
  t.throws(function() attention.new(ctx, { kind = "sigmoid", learn_bias = "yes" }, dims) end, "learn_bias must be true or false",
    "learn_bias must be a boolean")
  -- the engine checks the configuration too
  ctx:reset()
  local q = ctx:tensor({ 1, 2, 3, 4 }):fill_(0)
  local cfg = ffi.new("ol_attn_cfg")
  cfg.kind, cfg.zeta, cfg.dropout = ol.C.OL_ATTN_SOFTMAX, 1, 1.5
  t.throws(function() ol.check_ptr(ol.C.ol_attention(q, q, q, nil, nil, nil, cfg)) end, "dropout 1.5 not in [0, 1)",
    "engine: dropout outside [0, 1) names the value")
  cfg.dropout = 0
  cfg.sigmoid_bias_h = ctx:tensor({ 2 }):fill_(0)
  t.throws(function() ol.check_ptr(ol.C.ol_attention(q, q, q, nil, nil, nil, cfg)) end, "only for sigmoid",
    "engine: a per-head bias on softmax is an error")
  cfg.kind = ol.C.OL_ATTN_SIGMOID
  cfg.sigmoid_bias_h = ctx:tensor({ 3 }):fill_(0)
  t.throws(function() ol.check_ptr(ol.C.ol_attention(q, q, q, nil, nil, nil, cfg)) end, "must be (NH) = (2)",
    "engine: a per-head bias of the wrong shape names the shapes")
end

-- ---------------------------------------------------------------- models: seeded, resumable
-- bert-quick with attention dropout 0.1 against the same weights with none: evaluation is
-- bitwise the same; a training forward differs; the same step gives the same loss, on the same
-- model and on a fresh one (a resumed run); another step gives another mask.
do
  local function build(spec)
    local c = ol.Context({ seed = 1 })
    local cfg = models.preset("bert-quick", { attention = spec })
    return c, models.build(c, cfg), cfg
  end
  local function batch(c, cfg)
    local ids = c:tensor({ 2, 16 }, { dtype = "i32", persistent = true })
    local tg = c:tensor({ 2, 16 }, { dtype = "i32", persistent = true })
    for i = 0, 31 do
      ids.idata[i] = math.floor(ol.C.ol_rand_uniform(3, i) * cfg.vocab_size)
      tg.idata[i] = i % 3 == 0 and math.floor(ol.C.ol_rand_uniform(4, i) * cfg.vocab_size) or -100
    end
    return { ids = ids, targets = tg }
  end
  local function loss(c, m, b, opts)
    c:reset()
    return c:no_grad(function() return m:loss(b, opts):item() end)
  end
  local c0, m0, cfg0 = build("softmax")
  local c1, m1, cfg1 = build({ kind = "softmax", dropout = 0.1 })
  local b0, b1 = batch(c0, cfg0), batch(c1, cfg1)
  t.is(loss(c1, m1, b1, { train = false }), loss(c0, m0, b0, { train = false }), "model: evaluation ignores attention dropout (bitwise)")
  local l5 = loss(c1, m1, b1, { train = true, step = 5 })
  t.ok(l5 ~= loss(c0, m0, b0, { train = true, step = 5 }), "model: a training forward applies attention dropout")
  t.is(loss(c1, m1, b1, { train = true, step = 5 }), l5, "model: same step, same masks (deterministic)")
  local c2, m2, cfg2 = build({ kind = "softmax", dropout = 0.1 })
  t.is(loss(c2, m2, batch(c2, cfg2), { train = true, step = 5 }), l5, "model: a fresh model at step 5 reproduces it (resumable)")
  t.ok(loss(c1, m1, b1, { train = true, step = 6 }) ~= l5, "model: another step, another mask")
end

return t.done()
