-- tests/lua/lib/attention_cases.lua — the shared harness of the attention tests
-- (test_attention.lua, test_attention_remedies.lua): fixed inputs, the three masks, the plain-op
-- reference view, and the check every variant passes — fused C forward and gradients against
-- the plain-op reference (forward 2e-6, gradients 1e-5 absolute) and finite differences
-- (outlierlab.nn.gradcheck, worst relative error <= 1e-2) for q, k, v, x and every parameter.
--   local H = dofile(ol.root .. "/tests/lua/lib/attention_cases.lua")(ctx, 100)   -- seed base
--   H.q, H.k, H.v, H.x, H.MASKS, H.persistent(shape), H.run(A, inputs, m), H.check_kinds(KINDS, {...})
-- (a library of the tests, not a test: prove runs tests/lua/*.lua only)
local t = require "tap"
local gradcheck = require "outlierlab.nn.gradcheck"
local attention = require "outlierlab.nn.attention"

return function(ctx, seed0)
  local H = {}

  -- "kind(key=value,...)" for a spec table, the name for a string
  function H.kname(s)
    if type(s) == "string" then return s end
    local keys = {}
    for key, val in pairs(s) do if key ~= "kind" then keys[#keys + 1] = key .. "=" .. tostring(val) end end
    table.sort(keys)
    return s.kind .. (#keys > 0 and "(" .. table.concat(keys, ",") .. ")" or "")
  end
  -- training forwards carry a dropout seed (fixed here, so the mask is fixed)
  function H.dseed(spec) return type(spec) == "table" and spec.dropout and 4242 or nil end

  local seed = seed0
  function H.persistent(shape, std)
    seed = seed + 1
    return ctx:tensor(shape, { persistent = true }):normal_(0, std or 1, seed)
  end

  local B, NH, T, HD = 2, 2, 5, 3
  H.B, H.NH, H.T, H.HD = B, NH, T, HD
  H.q, H.k, H.v = H.persistent({ B, NH, T, HD }), H.persistent({ B, NH, T, HD }), H.persistent({ B, NH, T, HD })
  H.x = H.persistent({ B, T, NH * HD })
  H.pad = ctx:tensor({ B, T }, { dtype = "i32", persistent = true }):load({ 1, 1, 1, 1, 1, 1, 1, 1, 0, 0 })
  H.MASKS = { { name = "bidirectional" }, { name = "causal", causal = true }, { name = "padding", pad_mask = H.pad } }

  function H.maxdiff(a, b)
    local m = 0
    for i = 1, #a do m = math.max(m, math.abs(a[i] - b[i])) end
    return m
  end
  -- the reference view of an attention object: same parameters, plain ops
  function H.as_reference(A) return setmetatable({ use_reference = true }, { __index = A }) end

  -- forward output and gradients of L = Σ out ⊙ R for inputs (q, k, v, x, params...); other
  -- tensors than the fixed ones can be given as qq, kk, vv, xx
  function H.run(A, inputs, opts, qq, kk, vv, xx)
    ctx:zero_grad()
    for _, p in ipairs(inputs) do if not p:is_param() then p:requires_grad_(true):zero_grad() end end
    ctx:reset()
    local o = A:forward(qq or H.q, kk or H.k, vv or H.v, xx or H.x, { causal = opts.causal, pad_mask = opts.pad_mask,
                                                                      dropout_seed = opts.dropout_seed })
    local Rw = {}
    for i = 1, tonumber(o.numel) do Rw[i] = math.sin(i * 0.7) end
    ;(o * ctx:from_table(Rw, o:size())):sum_all():backward()
    local grads = {}
    for i, p in ipairs(inputs) do grads[i] = p:gradlist() end
    return o:tolist(), grads
  end

  -- every spec of KINDS under every mask: fused = reference (forward, gradients), and a gradcheck.
  -- o.prefix names the objects, o.param_seed × (index) + j seeds parameter j (moved away from its
  -- init so that every term matters), o.eps(spec) the gradcheck step (1e-2 unless a kink asks less)
  function H.check_kinds(KINDS, o)
    for vi, spec in ipairs(KINDS) do
      local A = attention.new(ctx, spec, { d_model = NH * HD, n_head = NH, name = o.prefix .. vi })
      for j, p in ipairs(A:parameters()) do p:normal_(0, 0.5, o.param_seed * vi + j) end
      local inputs = { H.q, H.k, H.v, H.x }
      for _, p in ipairs(A:parameters()) do inputs[#inputs + 1] = p end
      for _, m0 in ipairs(H.MASKS) do
        local m = { name = m0.name, causal = m0.causal, pad_mask = m0.pad_mask, dropout_seed = H.dseed(spec) }
        local label = H.kname(spec) .. " " .. m.name
        local of, gf = H.run(A, inputs, m)
        local orf, gr = H.run(H.as_reference(A), inputs, m)
        t.ok(H.maxdiff(of, orf) <= 2e-6, label .. ": fused forward = plain-op reference", "max diff " .. H.maxdiff(of, orf))
        local worst, which = 0, ""
        for i = 1, #inputs do
          local d = H.maxdiff(gf[i], gr[i])
          if d > worst then worst, which = d, tostring(inputs[i]) end
        end
        t.ok(worst <= 1e-5, label .. ": fused gradients = plain-op reference", "max diff " .. worst .. " in " .. which)
        local err, where = gradcheck.check(ctx, function()
          return A:forward(H.q, H.k, H.v, H.x, { causal = m.causal, pad_mask = m.pad_mask, dropout_seed = m.dropout_seed })
        end, inputs, { eps = o.eps and o.eps(spec) or 1e-2 })
        t.ok(err <= 1e-2, label .. ": gradcheck (q, k, v, x, " .. #A:parameters() .. " params)", where)
        t.diag(string.format("%-36s fwd %.1e grad %.1e gradcheck %.1e", label, H.maxdiff(of, orf), worst, err))
      end
    end
  end

  return H
end
