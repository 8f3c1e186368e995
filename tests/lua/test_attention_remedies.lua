-- test_attention_remedies — the 2024–2026 attention variants (docs/reference/attention.md): learned sink
-- logit (gpt-oss), softpick, the two other forms of sigmoid attention (b = −log n, no bias) and
-- Qiu et al.'s gated attention after SDPA (headwise, elementwise).
--   * fused C forward/backward against the plain-op reference (forward 2e-6, gradients 1e-5
--     absolute) and finite differences (outlierlab.gradcheck, worst relative error <= 1e-2) for
--     q, k, v, x and every parameter, under bidirectional, causal and padding masks, with and
--     without attention-probability dropout; 150-row multi-tile shapes;
--   * sink_logit with s_h = 0 equals softmax1 bit for bit (forward and every gradient);
--   * gated_sdpa with σ ≡ 1 (saturated gates) equals softmax bit for bit;
--   * softpick against hand-computed rows (masked entries 0, an all-negative row gives 0);
--   * the sigmoid forms' biases; spec errors; thread-count determinism.
local ol = require "outlierlab"
local t = require "tap"
local gradcheck = require "outlierlab.nn.gradcheck"
local attention = require "outlierlab.nn.attention"

local ctx = ol.Context({ seed = 11 })
local KINDS = { "sink_logit", { kind = "sink_logit", init = 1.5 }, "softpick", { kind = "softpick", eps = 1e-3 },
                "sigmoid_logn", { kind = "sigmoid_logn", n = 64 }, "sigmoid_nobias",
                { kind = "gated_sdpa", form = "headwise" }, { kind = "gated_sdpa", form = "elementwise" },
                { kind = "sink_logit", dropout = 0.3 }, { kind = "softpick", dropout = 0.3 },
                { kind = "sigmoid_nobias", dropout = 0.3 }, { kind = "gated_sdpa", form = "elementwise", dropout = 0.3 } }
-- the shared harness (fixed inputs, masks, reference view, the per-variant check)
local H = dofile(ol.root .. "/tests/lua/lib/attention_cases.lua")(ctx, 300)
local kname, dseed, persistent, maxdiff, as_reference, run = H.kname, H.dseed, H.persistent, H.maxdiff, H.as_reference, H.run
local B, NH, T, HD = H.B, H.NH, H.T, H.HD
local q, k, v, x, pad, MASKS = H.q, H.k, H.v, H.x, H.pad, H.MASKS

-- ---------------------------------------------------------------- fused vs reference, gradcheck
local function kinked(spec) return spec == "softpick" or type(spec) == "table" and spec.kind == "softpick" end
H.check_kinds(KINDS, { prefix = "r", param_seed = 2000,
                       eps = function(spec) return kinked(spec) and 1e-3 or 1e-2 end })   -- softpick: ReLU and |·| kinks at s = 0

-- ---------------------------------------------------------------- many tiles
do
  local Bt, Ht, Tt, Dt = 1, 2, 150, 8
  local bq, bk, bv = persistent({ Bt, Ht, Tt, Dt }), persistent({ Bt, Ht, Tt, Dt }), persistent({ Bt, Ht, Tt, Dt })
  local bx = persistent({ Bt, Tt, Ht * Dt })
  local bpad = ctx:tensor({ Bt, Tt }, { dtype = "i32", persistent = true })
  for j = 0, Tt - 1 do bpad.idata[j] = (j % 7 == 3) and 0 or 1 end
  for _, spec in ipairs({ "sink_logit", "softpick", "sigmoid_nobias", { kind = "softpick", dropout = 0.2 },
                          { kind = "sink_logit", dropout = 0.2 } }) do
    local A = attention.new(ctx, spec, { d_model = Ht * Dt, n_head = Ht, name = "big." .. kname(spec) })
    for j, p in ipairs(A:parameters()) do p:normal_(0, 0.5, 77 + j) end
    for _, m in ipairs({ { causal = true, name = "causal" }, { pad_mask = bpad, name = "padding" } }) do
      local inputs = { bq, bk, bv }
      for _, p in ipairs(A:parameters()) do inputs[#inputs + 1] = p end
      local mm = { causal = m.causal, pad_mask = m.pad_mask, dropout_seed = dseed(spec) }
      local of, gf = run(A, inputs, mm, bq, bk, bv, bx)
      local orf, gr = run(as_reference(A), inputs, mm, bq, bk, bv, bx)
      local gd = 0
      for i = 1, #gf do gd = math.max(gd, maxdiff(gf[i], gr[i])) end
      -- relative to the largest output (sigmoid_nobias sums ~T/2 weights: outputs of size ~10)
      local big = 1
      for _, val in ipairs(of) do big = math.max(big, math.abs(val)) end
      local fd = maxdiff(of, orf) / big
      gd = gd / big
      t.ok(fd <= 2e-6 and gd <= 2e-5, string.format("%s T=%d %s (3 tiles): fused = reference", kname(spec), Tt, m.name),
        string.format("fwd %.2e grad %.2e", fd, gd))
    end
  end
end

-- ---------------------------------------------------------------- s_h = 0 is softmax1, bit for bit
do
  local S = attention.new(ctx, "sink_logit", { d_model = NH * HD, n_head = NH, name = "sl0" })
  local S1 = attention.new(ctx, "softmax1", { d_model = NH * HD, n_head = NH, name = "sm1" })
  t.is(S:parameters()[1].data[0], 0, "sink_logit: s_h starts at 0")
  for _, m in ipairs(MASKS) do
    local a, ga = run(S, { q, k, v }, m)
    local b, gb = run(S1, { q, k, v }, m)
    local gd = 0
    for i = 1, 3 do gd = math.max(gd, maxdiff(ga[i], gb[i])) end
    t.is(maxdiff(a, b), 0, "sink_logit s_h = 0 " .. m.name .. ": output equals softmax1 exactly")
    t.is(gd, 0, "sink_logit s_h = 0 " .. m.name .. ": dq, dk, dv equal softmax1's exactly")
  end
  -- the sink's share: each row's weights sum to 1 − P′ = 1 − e^{s_h}/(e^{s_h} + Σ e^{s_j})
  S:parameters()[1]:load({ 2, -1 })
  local probs
  ctx:reset()
  S:forward(q, k, v, x, { causal = true, probe = function(n, p) if n == "attn_probs" then probs = p:tolist() end end })
  local worst = 0
  for b = 0, B - 1 do
    for h = 0, NH - 1 do
      for i = 0, T - 1 do
        local sh = h == 0 and 2 or -1
        local z, sum = math.exp(sh), 0
        for j = 0, i do
          local s = 0
          for c = 0, HD - 1 do s = s + q:get(b, h, i, c) * k:get(b, h, j, c) end
          z = z + math.exp(s / math.sqrt(HD))
        end
        for j = 0, T - 1 do sum = sum + probs[(((b * NH + h) * T + i) * T) + j + 1] end
        worst = math.max(worst, math.abs(sum - (1 - math.exp(sh) / z)))
      end
    end
  end
  t.ok(worst < 1e-6, "sink_logit: rows sum to 1 − e^{s_h}/(e^{s_h} + Σ e^{s_j}) (hand-computed)", worst)
  -- the probe sink_probs is that dropped weight: attn_probs + sink_probs sum to 1, fused and reference
  for _, obj in ipairs({ S, as_reference(S) }) do
    local seen = {}
    ctx:reset()
    obj:forward(q, k, v, x, { causal = true, probe = function(n, p) seen[n] = p:tolist() end })
    local w2 = 0
    for r = 0, B * NH * T - 1 do
      local s = seen.sink_probs[r + 1]
      for j = 1, T do s = s + seen.attn_probs[r * T + j] end
      w2 = math.max(w2, math.abs(s - 1))
    end
    t.ok(#seen.sink_probs == B * NH * T and w2 < 1e-6, "sink_logit: probe sink_probs (B,NH,T) completes every row to 1 ("
      .. (obj == S and "fused" or "reference") .. ")", w2)
  end
end

-- ---------------------------------------------------------------- gated_sdpa with σ ≡ 1 is softmax
do
  local xp = persistent({ B, T, NH * HD })
  for i = 0, B * T * NH * HD - 1 do xp.data[i] = math.abs(xp.data[i]) + 1 end   -- x ≥ 1
  local Sm = attention.new(ctx, "softmax", { d_model = NH * HD, n_head = NH, name = "qs" })
  for _, form in ipairs({ "headwise", "elementwise" }) do
    local G = attention.new(ctx, { kind = "gated_sdpa", form = form }, { d_model = NH * HD, n_head = NH, name = "q" .. form })
    G:parameters()[1]:fill_(10)   -- logits ≥ 60: σ = 1 in fp32
    local gates
    ctx:reset()
    G:forward(q, k, v, xp, { probe = function(n, g) if n == "gates" then gates = g:tolist() end end })
    local all1 = #gates == B * NH * T
    for _, g in ipairs(gates) do all1 = all1 and g == 1 end
    t.ok(all1, "gated_sdpa " .. form .. ": saturated gates are exactly 1 (probe gates (B,NH,T))")
    for _, m in ipairs(MASKS) do
      local a, ga = run(G, { q, k, v }, m, nil, nil, nil, xp)
      local b, gb = run(Sm, { q, k, v }, m, nil, nil, nil, xp)
      local gd = 0
      for i = 1, 3 do gd = math.max(gd, maxdiff(ga[i], gb[i])) end
      t.is(maxdiff(a, b), 0, "gated_sdpa " .. form .. " σ ≡ 1 " .. m.name .. ": output equals softmax exactly")
      t.is(gd, 0, "gated_sdpa " .. form .. " σ ≡ 1 " .. m.name .. ": dq, dk, dv equal softmax's exactly")
    end
  end
  local H = attention.new(ctx, { kind = "gated_sdpa" }, { d_model = 8, n_head = 2, name = "qh" })
  local E = attention.new(ctx, { kind = "gated_sdpa", form = "elementwise" }, { d_model = 8, n_head = 2, name = "qe" })
  t.is(table.concat(H:parameters()[1]:size(), ","), "2,8", "gated_sdpa headwise: W_θ is (NH, C), no bias")
  t.is(table.concat(E:parameters()[1]:size(), ","), "8,8", "gated_sdpa elementwise: W_θ is (NH·HD, C), no bias")
end

-- ---------------------------------------------------------------- softpick by hand
do
  -- one head, HD = 1, q = 1: scores s_j = k_j (√HD = 1)
  local sq, sk, sv = persistent({ 1, 1, 1, 1 }), persistent({ 1, 1, 4, 1 }), persistent({ 1, 1, 4, 1 })
  sq:load({ 1 })
  local A = attention.new(ctx, "softpick", { d_model = 1, n_head = 1, name = "sp" })
  local function probs_of(keys, pm)
    sk:load(keys)
    ctx:reset()
    local pr
    A:forward(sq, sk, sv, nil, { pad_mask = pm, probe = function(n, p) if n == "attn_probs" then pr = p:tolist() end end })
    return pr
  end
  local function expect(keys, mask)
    local num, den = {}, 1e-8
    for j, s in ipairs(keys) do
      local u = math.exp(s) - 1
      num[j] = (mask and mask[j] == 0) and 0 or math.max(u, 0)
      if not (mask and mask[j] == 0) then den = den + math.abs(u) end
    end
    for j = 1, #num do num[j] = num[j] / den end
    return num
  end
  local keys = { 2, 0.5, -1, -3 }
  local got = probs_of(keys)
  t.ok(maxdiff(got, expect(keys)) < 1e-6, "softpick: (2, 0.5, −1, −3) by hand: ReLU(e^s − 1)/(Σ|e^s − 1| + ε)",
    table.concat(got, " "))
  t.ok(got[3] == 0 and got[4] == 0, "softpick: negative scores get weight exactly 0")
  local sum = got[1] + got[2]
  t.ok(sum < 1, "softpick: the row sums to less than 1 (negative scores take part of the denominator)", sum)
  local pm = ctx:tensor({ 1, 4 }, { dtype = "i32", persistent = true }):load({ 1, 1, 0, 1 })
  got = probs_of(keys, pm)
  t.ok(maxdiff(got, expect(keys, { 1, 1, 0, 1 })) < 1e-6 and got[3] == 0,
    "softpick: a masked key contributes 0 to the numerator and the denominator", table.concat(got, " "))
  got = probs_of({ -1, -2, -0.5, -4 })
  t.is(got[1] + got[2] + got[3] + got[4], 0, "softpick: an all-negative row gives weights 0 (the head does nothing)")
  got = probs_of({ -200, -300, -250, -400 })
  local fin = true
  for _, p in ipairs(got) do fin = fin and p == 0 end
  t.ok(fin, "softpick: very negative scores stay finite (m = max(0, max s)) and give 0")
  got = probs_of({ 60, 59, 0, -2 })
  t.ok(maxdiff(got, expect({ 60, 59, 0, -2 })) < 1e-6, "softpick: large scores (e^60) are stable", table.concat(got, " "))
end

-- ---------------------------------------------------------------- sigmoid forms
do
  local dims = { d_model = 8, n_head = 2, block_size = 256 }
  t.near(attention.new(ctx, "sigmoid_logn", dims):sigmoid_bias(17), -math.log(256), 1e-12,
    "sigmoid_logn: b = −log n with n the model's block_size, whatever the current length")
  t.near(attention.new(ctx, { kind = "sigmoid_logn", n = 1000 }, dims):sigmoid_bias(17), -math.log(1000), 1e-12,
    "sigmoid_logn: n from the spec")
  t.is(attention.new(ctx, "sigmoid_nobias", dims):sigmoid_bias(17), 0, "sigmoid_nobias: b = 0")
  t.near(attention.new(ctx, "sigmoid", dims):sigmoid_bias(17), -math.log(17), 1e-12, "sigmoid (SO): b = −log T (current)")
end

-- ---------------------------------------------------------------- 1 and 2 threads
for _, spec in ipairs({ "sink_logit", "softpick" }) do
  local A = attention.new(ctx, spec, { d_model = 16, n_head = 4, name = "det" .. kname(spec) })
  for j, p in ipairs(A:parameters()) do p:normal_(0, 0.5, 9 + j) end
  local dq, dk, dv = persistent({ 2, 4, 100, 4 }), persistent({ 2, 4, 100, 4 }), persistent({ 2, 4, 100, 4 })
  local function once()
    ctx:reset(); ctx:zero_grad()
    for _, tt in ipairs({ dq, dk, dv }) do tt:requires_grad_(true):zero_grad() end
    local o = A:forward(dq, dk, dv, nil, { causal = true })
    o:sum_all():backward()
    local out = o:tolist()
    local ts = { dq, dk, dv }
    for _, p in ipairs(A:parameters()) do ts[#ts + 1] = p end
    for _, tt in ipairs(ts) do for _, val in ipairs(tt:gradlist()) do out[#out + 1] = val end end
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

-- ---------------------------------------------------------------- spec errors
do
  local dims = { d_model = 8, n_head = 2 }
  t.throws(function() attention.new(ctx, { kind = "softpick", eps = -1 }, dims) end, "eps must be finite and >= 0",
    "softpick: negative eps is an error")
  t.throws(function() attention.new(ctx, { kind = "gated_sdpa", form = "diag" }, dims) end,
    "form must be headwise or elementwise", "gated_sdpa: unknown form")
  t.throws(function() attention.new(ctx, { kind = "sink_logit", init = 0 / 0 }, dims) end, "init must be finite",
    "sink_logit: NaN init")
  t.throws(function() attention.new(ctx, { kind = "sigmoid_logn", n = 0 }, dims) end, "n must be >= 1",
    "sigmoid_logn: n = 0")
  ctx:reset()
  local cfg = ol.ffi.new("ol_attn_cfg")
  cfg.kind = ol.C.OL_ATTN_SINK_LOGIT
  t.ok(ol.C.ol_attention(q, k, v, nil, nil, nil, cfg) == nil and ol.ffi.string(ol.C.ol_error()):find("sink logit", 1, true),
    "engine: sink_logit without s_h is an error naming it")
end

-- the leaderboard lists each distinct model once: at the organism's T = n, sigmoid −log T and −log n
-- are the same bias, so the default profile trains one of them (experiments/remedies.lua, same_as)
do
  local exp = dofile(OUTLIERLAB_ROOT .. "/experiments/remedies.lua")
  local seen = {}
  for _, k in ipairs(exp.profiles.default.variants) do seen[k] = (seen[k] or 0) + 1 end
  t.is(seen.sigmoid, 1, "remedies default: sigmoid −log T (= −log n at T = n) is a row")
  t.is(seen.sigmoid_logn, nil, "remedies default: sigmoid −log n is not a second row of the same model")
  local dims = { d_model = 8, n_head = 2, block_size = 16 }
  t.is(attention.new(ctx, "sigmoid_logn", dims):sigmoid_bias(16), attention.new(ctx, "sigmoid", dims):sigmoid_bias(16),
    "at T = n the two biases are the same number")
end

return t.done()
