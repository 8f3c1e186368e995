-- test_optim — AdamW (groups, the update against a hand computation in double), gradient
-- clipping by global norm, learning-rate schedules, and the optimizer state round trip.
local t = require "tap"
local ol = require "outlierlab"
local optim = require "outlierlab.optim"
local ffi = require "ffi"

local function names_set(list) local s = {} for _, n in ipairs(list) do s[n] = true end return s end

-- ---------------------------------------------------------------- groups
do
  local ctx = ol.Context{ params = 4096, step_bytes = 2^20 }
  ctx:param("fc.weight", { 3, 2 })
  ctx:param("fc.bias", { 3 })
  ctx:param("ln.weight", { 3 })
  ctx:param("ln.bias", { 3 })
  ctx:param("wte.weight", { 5, 3 })
  local g = optim.AdamW(ctx):groups()
  local d, nd = names_set(g.decay), names_set(g.no_decay)
  t.ok(d["fc.weight"] and d["wte.weight"] and #g.decay == 2, "default rule: 2-D params (fc.weight, wte.weight) decay")
  t.ok(nd["fc.bias"] and nd["ln.weight"] and nd["ln.bias"] and #g.no_decay == 3, "default rule: biases and LN gains do not decay")
  local g2 = optim.AdamW(ctx, { decay_norm_gains = true }):groups()
  local d2, nd2 = names_set(g2.decay), names_set(g2.no_decay)
  t.ok(d2["ln.weight"] and d2["fc.weight"] and #g2.decay == 3, "decay_norm_gains: 1-D '.weight' (LN gain) decays too")
  t.ok(nd2["ln.bias"] and nd2["fc.bias"] and #g2.no_decay == 2, "decay_norm_gains: biases still do not decay")
  local g3 = optim.AdamW(ctx, { decay = function(p) return ffi.string(p.name) == "fc.bias" end }):groups()
  t.ok(#g3.decay == 1 and g3.decay[1] == "fc.bias", "custom decay rule replaces the default")
  -- a parameter created after the optimizer gets its group lazily
  local opt = optim.AdamW(ctx)
  local late = ctx:param("late.weight", { 2, 2 })
  opt:step(0)
  t.is(ol.C.ol_param_group(late), 0, "parameter created after the optimizer is assigned at step()")
  t.throws(function() optim.AdamW(ctx, { weight_decy = 0.1 }) end, "unknown option 'weight_decy'", "unknown AdamW option is an error")
  t.throws(function() optim.AdamW(ctx, { betas = { 0.9, 1.5 } }) end, "betas", "betas outside [0,1) is an error")
  -- embed_weight_decay: the token embedding in a third group with its own decay
  local g4 = optim.AdamW(ctx, { embed_weight_decay = 1.0 }):groups()
  t.ok(#g4.embed == 1 and g4.embed[1] == "wte.weight", "embed_weight_decay: the token embedding has its own group")
  t.ok(names_set(g4.decay)["fc.weight"] and not names_set(g4.decay)["wte.weight"], "... and leaves the decayed group")
  t.throws(function() optim.AdamW(ctx, { embed_weight_decay = -1 }) end, "embed_weight_decay", "a negative embedding decay is an error")
end

-- embed_weight_decay by hand: a zero gradient leaves only the decay, p <- p (1 - lr wd_group)
do
  local ctx = ol.Context{ params = 4096, step_bytes = 2^20 }
  local w = ctx:param("fc.weight", { 2, 2 })
  local e = ctx:param("embed_tokens.weight", { 2, 2 })
  for i = 0, 3 do w.data[i] = 1; e.data[i] = 1 end
  local opt = optim.AdamW(ctx, { lr = 0.1, weight_decay = 0.1, embed_weight_decay = 2.0 })
  ctx:zero_grad()
  opt:step()
  t.near(w.data[0], 1 - 0.1 * 0.1, 1e-7, "decayed group: p (1 - lr wd)")
  t.near(e.data[0], 1 - 0.1 * 2.0, 1e-7, "embedding group: p (1 - lr embed_weight_decay)")
end

-- ---------------------------------------------------------------- the update, by hand
-- Two params: W (2,2) decayed, b (2) not. Three steps with fixed gradients per step,
-- reference computed in double from the AdamW formula (Loshchilov & Hutter Alg. 2):
--   m = β1 m + (1-β1) g; v = β2 v + (1-β2) g²; p -= lr (m̂/(sqrt v̂ + eps) + wd p)
do
  local ctx = ol.Context{ params = 4096, step_bytes = 2^20 }
  local W = ctx:param("W.weight", { 2, 2 }):load({ 0.5, -1.0, 2.0, 0.25 })
  local b = ctx:param("b.bias", { 2 }):load({ 0.1, -0.3 })
  local lr, b1, b2, eps, wd = 0.01, 0.9, 0.95, 1e-8, 0.1
  local opt = optim.AdamW(ctx, { lr = lr, betas = { b1, b2 }, eps = eps, weight_decay = wd })
  local ref = { W = W:tolist(), b = b:tolist() }
  local m = { W = { 0, 0, 0, 0 }, b = { 0, 0 } }
  local v = { W = { 0, 0, 0, 0 }, b = { 0, 0 } }
  local grads = {
    { W = { 0.3, -0.2, 0.0, 1.0 }, b = { -0.5, 0.05 } },
    { W = { 0.1, 0.4, -0.7, 0.2 }, b = { 0.25, -0.1 } },
    { W = { -0.3, 0.0, 0.6, -0.9 }, b = { 0.0, 0.3 } },
  }
  for step = 1, 3 do
    for key, p in pairs({ W = W, b = b }) do
      for i = 1, #grads[step][key] do p.grad[i - 1] = grads[step][key][i] end
      local wdk = key == "W" and wd or 0
      for i = 1, #ref[key] do
        local g = grads[step][key][i]
        m[key][i] = b1 * m[key][i] + (1 - b1) * g
        v[key][i] = b2 * v[key][i] + (1 - b2) * g * g
        local mh = m[key][i] / (1 - b1 ^ step)
        local vh = v[key][i] / (1 - b2 ^ step)
        ref[key][i] = ref[key][i] - lr * (mh / (math.sqrt(vh) + eps) + wdk * ref[key][i])
      end
    end
    opt:step()
  end
  local worst = 0
  for key, p in pairs({ W = W, b = b }) do
    local got = p:tolist()
    for i = 1, #got do worst = math.max(worst, math.abs(got[i] - ref[key][i])) end
  end
  t.ok(worst <= 1e-6, "AdamW 3 steps match the double-precision hand computation (max abs err <= 1e-6)",
       "max abs err " .. worst)
  t.is(opt:state().step, 3, "state().step counts the steps taken")

  -- decoupled decay: zero gradient, fresh moments -> only the decay term acts
  local nbytes = 4 * tonumber(ol.C.ol_params_numel(ctx.raw))
  ffi.fill(ol.C.ol_adam_m_data(ctx.raw), nbytes, 0)
  ffi.fill(ol.C.ol_adam_v_data(ctx.raw), nbytes, 0)
  ctx:zero_grad()
  local w0, b0 = W:tolist(), b:tolist()
  opt:step(0.5)
  local okw, okb = true, true
  for i = 1, 4 do if math.abs(W.data[i - 1] - w0[i] * (1 - 0.5 * wd)) > 1e-6 then okw = false end end
  for i = 1, 2 do if b.data[i - 1] ~= b0[i] then okb = false end end
  t.ok(okw, "zero gradient: decayed group shrinks by exactly (1 - lr*wd)")
  t.ok(okb, "zero gradient: no-decay group is unchanged")
  t.throws(function() opt:step("x") end, "lr must be a number", "step with a non-number lr is an error")
end

-- ---------------------------------------------------------------- state round trip
do
  local function make()
    local ctx = ol.Context{ params = 4096, step_bytes = 2^20 }
    local p = ctx:param("p.weight", { 2, 3 }):load({ 1, 2, 3, -1, -2, -3 })
    return ctx, p, optim.AdamW(ctx, { lr = 0.1 })
  end
  local ca, pa, oa = make()
  local cb, pb, ob = make()
  local function grads(p, k) for i = 0, 5 do p.grad[i] = math.sin(i + k) end end
  for k = 1, 3 do grads(pa, k); oa:step() end
  -- rebuild b as if loaded from a checkpoint: params, m, v copied, then load_state
  local n = tonumber(ol.C.ol_params_numel(ca.raw))
  ffi.copy(ol.C.ol_params_data(cb.raw), ol.C.ol_params_data(ca.raw), n * 4)
  ffi.copy(ol.C.ol_adam_m_data(cb.raw), ol.C.ol_adam_m_data(ca.raw), n * 4)
  ffi.copy(ol.C.ol_adam_v_data(cb.raw), ol.C.ol_adam_v_data(ca.raw), n * 4)
  ob:load_state(oa:state())
  grads(pa, 4); oa:step()
  grads(pb, 4); ob:step()
  local same = true
  for i = 0, 5 do if pa.data[i] ~= pb.data[i] then same = false end end
  t.ok(same, "load_state(state()) resumes with the same bias correction: bit-identical next step")
  t.throws(function() ob:load_state({ step = -1 }) end, "integer step", "load_state rejects a bad step")
end

-- ---------------------------------------------------------------- clipping
do
  local ctx = ol.Context{ params = 4096, step_bytes = 2^20 }
  local a = ctx:param("a", { 2 })
  local b = ctx:param("b", { 1 })
  a.grad[0], a.grad[1], b.grad[0] = 3, 0, 4        -- global norm 5 across two params
  local n = optim.clip_grad_norm(ctx, 1.0)
  t.near(n, 5, 1e-6, "clip_grad_norm returns the global norm before clipping (3,0 | 4 -> 5)")
  t.near(a.grad[0], 0.6, 1e-6, "clipped to norm 1: 3 -> 0.6")
  t.near(b.grad[0], 0.8, 1e-6, "clipped to norm 1: 4 -> 0.8 (second param, same factor)")
  local before = b.grad[0]
  local n2 = optim.clip_grad_norm(ctx, 10)
  t.near(n2, 1, 1e-5, "norm below max: returns it")
  t.is(b.grad[0], before, "norm below max: gradients unchanged (bitwise)")
  a.grad[0] = 0 / 0
  local n3 = optim.clip_grad_norm(ctx, 1.0)
  t.ok(n3 ~= n3 and b.grad[0] == b.grad[0], "non-finite norm is returned and gradients are left alone")
  t.throws(function() optim.clip_grad_norm(ctx, 0) end, "max_norm", "max_norm <= 0 is an error")
end

-- ---------------------------------------------------------------- schedules
do
  local cos = optim.schedule{ kind = "cosine", lr = 1.0, min_lr = 0.1, warmup = 10, steps = 110 }
  t.near(cos(1), 0.1, 1e-12, "cosine: warmup step 1 = lr/warmup")
  t.near(cos(5), 0.5, 1e-12, "cosine: warmup step 5 of 10 = lr/2")
  t.near(cos(10), 1.0, 1e-12, "cosine: end of warmup = lr")
  t.near(cos(60), 0.55, 1e-12, "cosine: halfway through decay = (lr+min_lr)/2")
  t.near(cos(35), 0.1 + 0.5 * (1 + math.cos(math.pi * 0.25)) * 0.9, 1e-12, "cosine: quarter of decay")
  t.near(cos(110), 0.1, 1e-12, "cosine: last step = min_lr")
  t.near(cos(500), 0.1, 1e-12, "cosine: past the end stays at min_lr")
  local lin = optim.schedule{ kind = "linear", lr = 2.0, min_lr = 0, warmup = 0, steps = 100 }
  t.near(lin(1), 2.0 * (1 - 1 / 100), 1e-12, "linear without warmup: step 1")
  t.near(lin(50), 1.0, 1e-12, "linear: halfway = lr/2")
  t.near(lin(100), 0.0, 1e-12, "linear: last step = min_lr")
  local con = optim.schedule{ kind = "constant", lr = 3e-4, warmup = 4 }
  t.near(con(2), 1.5e-4, 1e-15, "constant: warmup applies")
  t.near(con(1000), 3e-4, 1e-15, "constant: lr after warmup")
  -- wsd: 2 warmup steps, stable to step 100 - 20 = 80, then linear to min_lr 0.1 at step 100
  local wsd = optim.schedule{ kind = "wsd", lr = 2.0, min_lr = 0.1, warmup = 2, steps = 100, cooldown = 20 }
  t.near(wsd(1), 1.0, 1e-12, "wsd: warmup step 1 of 2 = lr/2")
  t.near(wsd(2), 2.0, 1e-12, "wsd: end of warmup = lr")
  t.near(wsd(80), 2.0, 1e-12, "wsd: the last stable step = lr")
  t.near(wsd(81), 2.0 - 1.9 / 20, 1e-12, "wsd: first decay step = lr - (lr - min_lr)/decay")
  t.near(wsd(90), 1.05, 1e-12, "wsd: halfway through the decay = (lr + min_lr)/2")
  t.near(wsd(100), 0.1, 1e-12, "wsd: last step = min_lr")
  t.near(wsd(130), 0.1, 1e-12, "wsd: past the end stays at min_lr")
  t.throws(function() optim.schedule{ kind = "wsd", lr = 1, steps = 10 } end, "wsd needs cooldown steps",
           "wsd without cooldown steps is an error")
  t.throws(function() optim.schedule{ kind = "wsd", lr = 1, steps = 10, warmup = 5, cooldown = 6 } end,
           "in [1, steps - warmup = 5]", "wsd decaying into its warmup is an error")
  t.throws(function() optim.schedule{ kind = "step", lr = 1, steps = 10 } end, "kind must be", "unknown schedule kind is an error")
  t.throws(function() optim.schedule{ kind = "cosine", lr = 1 } end, "needs steps", "cosine without steps is an error")
end

return t.done()
