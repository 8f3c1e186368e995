-- test_norms — the norm variants and residual clipping (lua/outlierlab/nn/norms.lua):
--   forward values against a scalar reference written here in double (the definitions of
--   arXiv 2601.22966 and Zhu et al. 2025, not the engine ops); backward against central finite
--   differences (nn.gradcheck; bounds as test_ops: 2e-3 for the normalisations, 1e-3 smooth);
--   every family × variant builds with the formula's parameter count and trains a step;
--   the defaults build the plain model (same parameters, same loss bits); config errors.
local t = require "tap"
local ol = require "outlierlab"
local nn = require "outlierlab.nn"
local norms = require "outlierlab.nn.norms"
local models = require "outlierlab.models"
local optim = require "outlierlab.optim"
local gradcheck = require "outlierlab.nn.gradcheck"

local ctx = ol.Context{ params = 2^16, step_bytes = 2^24 }
local NORM, SMOOTH, LIN = 2e-3, 1e-3, 1e-4

local function P(shape, seed, lo, hi)
  return ctx:tensor(shape, { persistent = true, name = "x" }):uniform_(lo or -1, hi or 1, seed)
end
local function rows(x, C)   -- the tensor as Lua rows of C values
  local out = {}
  for i = 0, tonumber(x.numel) / C - 1 do
    local r = {}
    for j = 0, C - 1 do r[j + 1] = x.data[i * C + j] end
    out[i + 1] = r
  end
  return out
end
local function worst(y, want)
  local m = 0
  for i, w in ipairs(want) do m = math.max(m, math.abs(y.data[i - 1] - w)) end
  return m
end
local function grad(name, fn, inputs, bound)
  local e, where = gradcheck.check(ctx, fn, inputs)
  t.ok(e <= bound, string.format("%s: gradcheck rel err <= %g (%.2g)", name, bound, e), where)
  ctx:reset()
  return e
end
local function sig(z) return 1 / (1 + math.exp(-z)) end
local function rms_row(r, w, eps)
  local s = 0
  for _, v in ipairs(r) do s = s + v * v end
  local k = 1 / math.sqrt(s / #r + eps)
  local o = {}
  for j, v in ipairs(r) do o[j] = v * k * (w and w[j] or 1) end
  return o
end

-- ---------------------------------------------------------------- forward values
do
  local C = 4
  local x = P({ 2, 3, C }, 1, -3, 3)
  -- PreAffine: RMSNorm(λ₁ ⊙ x) with λ₁ = (0.5, 2, 1, 0.01), gain (1, 1, 1, 1)
  local m = norms.PreAffine_new(ctx, C, nn.RMSNorm(ctx, C, { name = "pa", eps = 1e-6 }), { name = "pa" })
  m.pre:load({ 0.5, 2, 1, 0.01 })
  local want = {}
  for _, r in ipairs(rows(x, C)) do
    local s = {}
    for j = 1, C do s[j] = r[j] * m.pre.data[j - 1] end
    for _, v in ipairs(rms_row(s, nil, 1e-6)) do want[#want + 1] = v end
  end
  local y = m:forward(x)
  t.ok(worst(y, want) < 1e-6, "PreAffine: RMSNorm(λ₁ ⊙ x) against the reference", "max err " .. worst(y, want))
  t.is(ol.ffi.string(m.pre.name), "pa.pre.weight", "PreAffine: λ₁ is <name>.pre.weight, the inner gain keeps <name>.weight")
  ctx:reset()
  grad("PreAffine (2,3,4)", function(a) return m:forward(a) end, { x, m.pre, m.norm.weight }, NORM)

  -- DyT: γ ⊙ tanh(α x) + β
  local d = norms.DyT_new(ctx, C, { name = "dyt", alpha = 0.5 })
  t.is(d.alpha.data[0], 0.5, "DyT: α starts at the given alpha (0.5)")
  d.weight:load({ 1, 2, -1, 0.5 }); d.bias:load({ 0, 0.1, -0.2, 3 }); d.alpha.data[0] = 0.7
  want = {}
  for _, r in ipairs(rows(x, C)) do
    for j = 1, C do want[#want + 1] = d.weight.data[j - 1] * math.tanh(0.7 * r[j]) + d.bias.data[j - 1] end
  end
  y = d:forward(x)
  t.ok(worst(y, want) < 1e-6, "DyT: γ ⊙ tanh(αx) + β against the reference", "max err " .. worst(y, want))
  ctx:reset()
  grad("DyT (2,3,4)", function(a) return d:forward(a) end, { x, d.alpha, d.weight, d.bias }, SMOOTH)

  -- GatedNorm: y = RMSNorm(x); y ⊙ act(W_up · swish(W_down · y)) for every act and both modes
  local acts = { sigmoid = sig, tanh = math.tanh, silu = function(z) return z * sig(z) end, identity = function(z) return z end }
  for _, mode in ipairs { "elementwise", "tensorwise" } do
    for _, act in ipairs { "sigmoid", "tanh", "silu", "identity" } do
      local r = 3
      local g = norms.GatedNorm_new(ctx, C, nn.RMSNorm(ctx, C, { name = "gn", eps = 1e-6 }),
                                    { name = "gn", rank = r, act = act, mode = mode })
      g.down.weight:uniform_(-1, 1, 7); g.up.weight:uniform_(-1, 1, 8); g.norm.weight:uniform_(0.5, 1.5, 9)
      local gain = {}
      for j = 1, C do gain[j] = g.norm.weight.data[j - 1] end
      local Cu = mode == "tensorwise" and 1 or C
      want = {}
      for _, row in ipairs(rows(x, C)) do
        local yy = rms_row(row, gain, 1e-6)
        local hdn = {}
        for k = 1, r do
          local z = 0
          for j = 1, C do z = z + g.down.weight.data[(k - 1) * C + j - 1] * yy[j] end
          hdn[k] = z * sig(z)
        end
        for j = 1, C do
          local u = 0
          local jj = Cu == 1 and 1 or j
          for k = 1, r do u = u + g.up.weight.data[(jj - 1) * r + k - 1] * hdn[k] end
          want[#want + 1] = yy[j] * acts[act](u)
        end
      end
      y = g:forward(x)
      local name = string.format("GatedNorm %s %s", mode, act)
      t.ok(worst(y, want) < 1e-6, name .. ": forward against the reference", "max err " .. worst(y, want))
      t.is(tonumber(g.up.weight.shape[0]), Cu, name .. ": W_up has " .. Cu .. " row(s)")
      ctx:reset()
      grad(name .. " (2,3,4), r 3", function(a) return g:forward(a) end, { x, g.norm.weight, g.down.weight, g.up.weight }, NORM)
    end
  end

  -- GatedNorm around a LayerNorm (the GPT-2/OPT/BERT/ViT families)
  local gl = norms.GatedNorm_new(ctx, C, nn.LayerNorm(ctx, C, { name = "gl" }), { name = "gl", rank = 2 })
  gl.down.weight:uniform_(-1, 1, 3); gl.up.weight:uniform_(-1, 1, 4)
  grad("GatedNorm around LayerNorm (2,3,4), r 2", function(a) return gl:forward(a) end,
       { x, gl.norm.weight, gl.norm.bias, gl.down.weight, gl.up.weight }, NORM)

  -- residual clipping: values, and the gradient 1 inside, 0 outside (x kept away from ±c so
  -- the central difference does not straddle the kink)
  local xc = ctx:tensor({ 6 }, { persistent = true, name = "xc" }):load({ -5, -1.5, 0, 0.7, 1.2, 9 })
  local yc = norms.clip(xc, 1)
  t.is(table.concat(yc:tolist(), " "), "-1 -1 0 0.69999998807907 1 1", "clip at 1: values clamped to [−1, 1]")
  ctx:reset()
  grad("clip at 1 (6)", function(a) return norms.clip(a, 1) end, { xc }, LIN)
  xc:zero_grad(); xc:requires_grad_(true)
  ctx:reset()
  norms.clip(xc, 1):sum_all():backward()
  t.is(table.concat(xc:gradlist(), " "), "0 0 1 1 0 0", "clip at 1: gradient 1 inside, 0 outside")
  ctx:reset()
end

-- ---------------------------------------------------------------- in every family
local function batch_for(c, cfg, B, T)
  local function ids(fn)
    local x = c:tensor({ B, T }, { dtype = "i32", persistent = true })
    for b = 0, B - 1 do for i = 0, T - 1 do x.idata[b * T + i] = fn(b, i) end end
    return x
  end
  if cfg.family == "vit" then
    local S = cfg.image_size
    local lab = c:tensor({ B }, { dtype = "i32", persistent = true })
    for b = 0, B - 1 do lab.idata[b] = b % cfg.n_classes end
    return { images = c:tensor({ B, 3, S, S }, { persistent = true }):normal_(0, 1, 11), labels = lab }
  end
  local V = cfg.vocab_size
  return { ids = ids(function(b, i) return (b * 37 + i * 13 + (i * i) % 7) % V end),
           targets = ids(function(b, i) return (b * 37 + (i + 1) * 13) % V end) }
end

local variants = {
  { norm_variant = "preaffine" }, { norm_variant = "gated" }, { norm_variant = "gated", norm_gate_mode = "tensorwise", norm_gate_rank = 4 },
  { norm_variant = "dyt" }, { residual_clip = 0.5 },
}
local presets = { { "gpt2-quick", {} }, { "opt-quick", {} }, { "opt-quick", { ln_before = false } }, { "bert-quick", {} },
                  { "llama-quick", {} }, { "llama-quick", { post_norms = true } }, { "llama-quick", { norm_gain = "single" } },
                  { "vit-quick", { patch_ln = true } } }
for _, pr in ipairs(presets) do
  for _, v in ipairs(variants) do
    local o = {}
    for k, x in pairs(pr[2]) do o[k] = x end
    for k, x in pairs(v) do o[k] = x end
    local desc = {}
    for k, x in pairs(o) do desc[#desc + 1] = k .. "=" .. tostring(x) end
    table.sort(desc)
    local name = pr[1] .. " " .. table.concat(desc, " ")
    local c = ol.Context{ params = 2^18, step_bytes = 2^24 }
    local cfg = models.preset(pr[1], o)
    local m = models.build(c, cfg)
    t.is(m:num_params(), models.count_params(cfg), name .. ": parameters = the formula")
    local batch = batch_for(c, cfg, 2, 8)
    local hmax = 0
    local probe = function(pn, _, x)
      if pn == "h" then for i = 0, tonumber(x.numel) - 1 do hmax = math.max(hmax, math.abs(x.data[i])) end end
    end
    local opt = optim.AdamW(c, { lr = 1e-2 })
    local l0, l1
    for s = 1, 4 do
      c:zero_grad()
      local loss = m:loss(batch, { probe = s == 4 and cfg.family ~= "bert" and cfg.ln_before ~= false and probe or nil })
      loss:backward()
      if s == 1 then l0 = loss:item() end
      l1 = loss:item()
      opt:step()
      c:reset()
    end
    t.ok(l1 == l1 and l1 < l0, name .. ": 4 AdamW steps lower the loss", string.format("%.4f -> %.4f", l0, l1))
    if v.residual_clip and cfg.family ~= "bert" and cfg.ln_before ~= false then
      t.ok(hmax <= 0.5 and hmax > 0.4, name .. ": every residual value within ±0.5", "max |h| " .. hmax)
    end
  end
end

-- the defaults are the plain model: the same parameter names and count
do
  local c1, c2 = ol.Context{ params = 2^18, step_bytes = 2^22 }, ol.Context{ params = 2^18, step_bytes = 2^22 }
  local a = models.build(c1, models.preset("llama-quick"))
  local b = models.build(c2, models.preset("llama-quick", { norm_variant = "plain", residual_clip = 0 }))
  local same = #a:parameters() == #b:parameters()
  for i, p in ipairs(a:parameters()) do same = same and ol.ffi.string(p.name) == ol.ffi.string(b:parameters()[i].name) end
  t.ok(same, "norm_variant plain, residual_clip 0 = the model without the keys (same parameters)")
end

-- ---------------------------------------------------------------- config errors
local function err(o, pat, what)
  local ok, e = pcall(models.preset, "llama-quick", o)
  t.ok(not ok and tostring(e):find(pat, 1, true), what, tostring(e))
end
err({ norm_variant = "gatednorm" }, "norm_variant must be one of dyt, gated, plain, preaffine", "an unknown norm_variant is named")
err({ norm_gate_rank = 0 }, "norm_gate_rank must be a positive integer", "norm_gate_rank 0 is refused")
err({ norm_gate_act = "relu" }, "norm_gate_act must be one of identity, sigmoid, silu, tanh", "an unknown gate activation is named")
err({ norm_gate_mode = "rowwise" }, "norm_gate_mode must be elementwise or tensorwise", "an unknown gate mode is named")
err({ dyt_alpha = 0 }, "dyt_alpha must be a positive finite number", "dyt_alpha 0 is refused")
err({ residual_clip = -1 }, "residual_clip must be a non-negative finite number", "a negative residual_clip is refused")

do   -- a model with a variant has no Hugging Face layout: export says so
  local c = ol.Context{ params = 2^18, step_bytes = 2^22 }
  local m = models.build(c, models.preset("llama-quick", { norm_variant = "gated" }))
  local ok, e = pcall(require("outlierlab.pretrained.hf").export, "/nonexistent-outlierlab-dir", c, m)
  t.ok(not ok and tostring(e):find("norm_variant 'gated'", 1, true), "hf.export refuses a norm variant", tostring(e))
end

t.done()
