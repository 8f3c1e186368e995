-- test_models — the five model families (lua/outlierlab/models) and the RoPE op, in their
-- quick shapes (the paper shapes are in test_models_paper.lua): built parameter count = the
-- formula, forward shapes, loss at init ≈ log(classes), AdamW steps drive the loss down on a fixed
-- batch, probe points (names, layers, shapes; no probe = no extra step memory), causality
-- of the decoders, padding invariance of BERT, dropout train/eval, config errors, ViT
-- patch layout, RoPE values, relative-position property and gradient check.
local ol = require "outlierlab"
local t = require "tap"
local models = require "outlierlab.models"
local optim = require "outlierlab.optim"
local gradcheck = require "outlierlab.nn.gradcheck"
local C = ol.C
local now = require("outlierlab.util.progress").now

-- ---------------------------------------------------------------- helpers
local function persistent_ids(ctx, B, T, fn)
  local x = ctx:tensor({ B, T }, { dtype = "i32", persistent = true })
  for b = 0, B - 1 do for i = 0, T - 1 do x.idata[b * T + i] = fn(b, i) end end
  return x
end

-- a fixed batch for a family's quick preset
local function make_batch(ctx, cfg, B, T)
  if cfg.family == "vit" then
    local S = cfg.image_size
    local img = ctx:tensor({ B, 3, S, S }, { persistent = true }):normal_(0, 1, 11)
    local lab = ctx:tensor({ B }, { dtype = "i32", persistent = true })
    for b = 0, B - 1 do lab.idata[b] = b % cfg.n_classes end
    return { images = img, labels = lab }
  end
  local V = cfg.vocab_size
  local ids = persistent_ids(ctx, B, T, function(b, i) return (b * 37 + i * 13 + (i * i) % 7) % V end)
  if cfg.family == "bert" then
    -- mask every third position: the target is the original id, the input a [MASK] id (V-1)
    local tg = persistent_ids(ctx, B, T, function(b, i) return i % 3 == 1 and ids.idata[b * T + i] or -100 end)
    for i = 0, B * T - 1 do if tg.idata[i] ~= -100 then ids.idata[i] = V - 1 end end
    local tt = persistent_ids(ctx, B, T, function(_, i) return i < T / 2 and 0 or 1 end)
    local pm = persistent_ids(ctx, B, T, function() return 1 end)
    return { ids = ids, targets = tg, token_type = tt, pad_mask = pm }
  end
  local tg = persistent_ids(ctx, B, T, function(b, i) return (b * 37 + (i + 1) * 13 + ((i + 1) * (i + 1)) % 7) % V end)
  return { ids = ids, targets = tg }
end

local function max_abs_diff(a, b, n, offa, offb)
  local m = 0
  for i = 0, n - 1 do
    local d = math.abs(a[(offa or 0) + i] - b[(offb or 0) + i])
    if d > m or d ~= d then m = d ~= d and math.huge or d end
  end
  return m
end

-- copy a step tensor's data to a Lua-owned float array
local function snapshot(x)
  local n = tonumber(x.numel)
  local a = ol.ffi.new("float[?]", n)
  ol.ffi.copy(a, x.data, n * 4)
  return a, n
end

-- ---------------------------------------------------------------- each family, quick preset
local fams = { "gpt2", "opt", "llama", "bert", "vit" }
for _, fam in ipairs(fams) do
  local ctx = ol.Context({ seed = 7 })
  local cfg = models.preset(fam .. "-quick", { dropout = 0.0 })
  local m = models.build(ctx, cfg)
  t.is(m:num_params(), models.count_params(cfg), fam .. "-quick: built count = formula count (" .. models.commas(m:num_params()) .. ")")
  local B, T = 2, 12
  local batch = make_batch(ctx, cfg, B, T)
  local ncls = fam == "vit" and cfg.n_classes or cfg.vocab_size
  local Tn = fam == "vit" and (cfg.image_size / cfg.patch_size) ^ 2 + 1 or T

  -- forward shape and the probes
  local seen, bad = {}, {}
  local HD = cfg.d_model / cfg.n_head
  local function expect(name)
    local D, F, NH = cfg.d_model, cfg.d_ff, cfg.n_head
    local NKV = fam == "llama" and cfg.n_kv_head or NH
    local s = {
      emb = { B, Tn, D }, attn_in = { B, Tn, D }, ln1 = { B, Tn, D }, ln2 = { B, Tn, D }, attn_out = { B, Tn, D },
      ffn_out = { B, Tn, D }, h = { B, Tn, D }, ln_f = { B, Tn, D },
      q = { B, NH, Tn, HD }, k = { B, NKV, Tn, HD }, v = { B, NKV, Tn, HD }, attn_head_out = { B, NH, Tn, HD },
      attn_probs = { B, NH, Tn, Tn }, mlp_up = { B, Tn, F }, mlp_gate = { B, Tn, F }, x_down = { B, Tn, F },
    }
    return s[name] and "(" .. table.concat(s[name], ",") .. ")"
  end
  local probe = function(name, layer, x)
    seen[name] = (seen[name] or 0) + 1
    local want = expect(name)
    if x:shape_str() ~= want then bad[#bad + 1] = string.format("%s[%d] %s want %s", name, layer, x:shape_str(), tostring(want)) end
    if layer < 0 or layer > cfg.n_layer or (layer == cfg.n_layer and name ~= "ln_f") then
      bad[#bad + 1] = name .. " bad layer " .. layer
    end
  end
  local logits
  ctx:no_grad(function() logits = m:forward(batch, { probe = probe, train = false }) end)
  t.is(logits:shape_str(), fam == "vit" and string.format("(%d,%d)", B, ncls) or string.format("(%d,%d,%d)", B, T, ncls),
    fam .. ": logits shape")
  t.ok(#bad == 0, fam .. ": every probe tensor has the documented shape and layer", table.concat(bad, "; "))
  local names = { "attn_in", "q", "k", "v", "attn_probs", "attn_head_out", "attn_out", "mlp_up", "x_down", "ffn_out",
                  "h", "ln1", "ln2" }
  if fam == "llama" then names[#names + 1] = "mlp_gate" end
  local missing = {}
  for _, n in ipairs(names) do if seen[n] ~= cfg.n_layer then missing[#missing + 1] = n .. "=" .. tostring(seen[n]) end end
  if fam ~= "bert" and seen.ln_f ~= 1 then missing[#missing + 1] = "ln_f" end
  if fam ~= "llama" and seen.mlp_gate then missing[#missing + 1] = "mlp_gate fired without a gate" end
  t.ok(#missing == 0, fam .. ": each probe point fires once per layer", table.concat(missing, ", "))

  -- no probe, no extra work: with a probe the model allocates nothing beyond what the
  -- attention variant itself computes for its own probes (the fused kernels materialise
  -- the T×T probabilities only when asked), measured on one attention module.
  local function bytes(fn) ctx:reset(); ctx:no_grad(fn); local b = ctx:step_bytes(); ctx:reset(); return b end
  local plain = bytes(function() m:forward(batch, { train = false }) end)
  local probed = bytes(function() m:forward(batch, { train = false, probe = function() end }) end)
  local A = (m.blocks and m.blocks[1] or m.layers[1]).attn.attn
  local causal = fam ~= "bert" and fam ~= "vit"
  local function attn_bytes(probe)
    return bytes(function()
      local q = ctx:tensor({ B, cfg.n_head, Tn, HD }):normal_(0, 1, 1)
      local k = ctx:tensor({ B, cfg.n_head, Tn, HD }):normal_(0, 1, 2)
      local v = ctx:tensor({ B, cfg.n_head, Tn, HD }):normal_(0, 1, 3)
      local x = ctx:tensor({ B, Tn, cfg.d_model }):normal_(0, 1, 4)
      A:forward(q, k, v, x, { causal = causal, probe = probe })
    end)
  end
  local per_layer = attn_bytes(function() end) - attn_bytes(nil)
  t.is(probed - plain, cfg.n_layer * per_layer,
    string.format("%s: a probe adds no step memory beyond the attention variant's own probe tensors (%d B/layer)", fam, per_layer))
  -- loss at init ≈ log(classes)
  local loss, info = m:loss(batch)
  local l0 = loss:item()
  t.near(l0, math.log(ncls), 0.15, fam .. ": loss at init ≈ log(" .. ncls .. ")")
  t.ok(info.ntokens > 0 and info.logits ~= nil, fam .. ": loss info has ntokens and logits")

  -- AdamW on the fixed batch drives the loss down
  local opt = optim.AdamW(ctx, { lr = 5e-3, betas = { 0.9, 0.95 }, weight_decay = 0.0 })
  local last = l0
  local steps = 15
  local t0 = now()
  for _ = 1, steps do
    ctx:reset(); ctx:zero_grad()
    local l = m:loss(batch)
    last = l:item()
    l:backward()
    opt:step()
  end
  local dt = (now() - t0) / steps
  t.ok(last < 0.5 * l0, string.format("%s: %d AdamW steps on a fixed batch: loss %.3f -> %.3f (< half)", fam, steps, l0, last))
  t.ok(ctx:grads_finite(), fam .. ": gradients finite")
  t.diag(string.format("%s-quick: %.1f ms per training step (B=%d, T=%d)", fam, dt * 1000, B, T))
  ctx:reset()

  -- decoders do not see the future: changing token j leaves logits before j unchanged
  if fam == "gpt2" or fam == "opt" or fam == "llama" then
    local ids2 = persistent_ids(ctx, B, T, function(b, i) return batch.ids.idata[b * T + i] end)
    local j = 7
    for b = 0, B - 1 do ids2.idata[b * T + j] = (ids2.idata[b * T + j] + 5) % cfg.vocab_size end
    local a = snapshot(ctx:no_grad(function() return m:forward({ ids = batch.ids }, { train = false }) end))
    ctx:reset()
    local y = ctx:no_grad(function() return m:forward({ ids = ids2 }, { train = false }) end)
    local V = cfg.vocab_size
    local before, after = 0, 0
    for b = 0, B - 1 do
      before = math.max(before, max_abs_diff(a, y.data, j * V, b * T * V, b * T * V))
      after = math.max(after, max_abs_diff(a, y.data, (T - j) * V, (b * T + j) * V, (b * T + j) * V))
    end
    t.ok(before == 0, fam .. ": logits before the changed token are bit-identical (causal)", "max diff " .. before)
    t.ok(after > 1e-4, fam .. ": logits from the changed token on do change", "max diff " .. after)
    ctx:reset()
  end
end

-- ---------------------------------------------------------------- BERT: padding changes nothing
do
  local ctx = ol.Context({ seed = 3 })
  local m = models.build(ctx, models.preset("bert-quick"))
  local B, T, R = 2, 10, 6   -- R real tokens, T − R padding
  local V = m.cfg.vocab_size
  local real = function(b, i) return (b * 31 + i * 17) % V end
  local ids_short = persistent_ids(ctx, B, R, real)
  local ids_pad = persistent_ids(ctx, B, T, function(b, i) return i < R and real(b, i) or 0 end)
  local ids_pad2 = persistent_ids(ctx, B, T, function(b, i) return i < R and real(b, i) or (i * 7 + b) % V end)
  local mask = persistent_ids(ctx, B, T, function(_, i) return i < R and 1 or 0 end)
  local ya = snapshot(ctx:no_grad(function() return m:forward({ ids = ids_short }, { train = false }) end))
  ctx:reset()
  local yb = snapshot(ctx:no_grad(function() return m:forward({ ids = ids_pad, pad_mask = mask }, { train = false }) end))
  ctx:reset()
  local yc = ctx:no_grad(function() return m:forward({ ids = ids_pad2, pad_mask = mask }, { train = false }) end)
  local d1, d2 = 0, 0
  for b = 0, B - 1 do
    d1 = math.max(d1, max_abs_diff(ya, yb, R * V, b * R * V, b * T * V))
    d2 = math.max(d2, max_abs_diff(yb, yc.data, R * V, b * T * V, b * T * V))
  end
  t.ok(d1 < 1e-5, "bert: real-token logits with padding + mask = without the padding", "max diff " .. d1)
  t.ok(d2 < 1e-5, "bert: changing the padded ids changes no real-token logit", "max diff " .. d2)
  ctx:reset()
  -- without the mask the padding does leak in (so the test above can fail)
  local yd = ctx:no_grad(function() return m:forward({ ids = ids_pad2 }, { train = false }) end)
  local d3 = max_abs_diff(yb, yd.data, R * V)
  t.ok(d3 > 1e-5, "bert: without pad_mask the padding changes real-token logits", "max diff " .. d3)
  ctx:reset()
end

-- ---------------------------------------------------------------- BERT: loss on the masked rows only
do
  local ctx = ol.Context({ seed = 4 })
  local m = models.build(ctx, models.preset("bert-quick", { dropout = 0.0 }))
  local batch = make_batch(ctx, m.cfg, 2, 9)
  local full = ctx:no_grad(function() return m:forward(batch, { train = false }):cross_entropy(batch.targets, -100):item() end)
  ctx:reset()
  local l, info = m:loss(batch, { train = false })
  t.near(l:item(), full, 1e-5, "bert: loss on the gathered masked rows = cross entropy of the full logits")
  t.is(info.logits:shape_str(), string.format("(%d,%d)", info.ntokens, m.cfg.vocab_size), "bert: info.logits are the masked rows (M,V)")
  -- the gradient reaches the word embedding through both the input and the tied decoder
  ctx:zero_grad()
  l:backward()
  local g = m.word.weight:gradlist()
  local nz = 0
  for i = 1, #g do if g[i] ~= 0 then nz = nz + 1 end end
  t.ok(nz == #g, "bert: every word-embedding row gets a gradient (tied decoder)", nz .. " of " .. #g)
  ctx:reset()
end

-- ---------------------------------------------------------------- every attention variant plugs in
do
  local attention = require "outlierlab.nn.attention"
  for _, kind in ipairs(attention.kinds()) do
    local ctx = ol.Context({ seed = 2 })
    local fam = (kind == "gated" or kind == "clipped_softmax") and "bert" or "gpt2"
    local cfg = models.preset(fam .. "-quick", { dropout = 0.0, attention = { kind = kind } })
    local m = models.build(ctx, cfg)
    local batch = make_batch(ctx, cfg, 2, 8)
    local names = {}
    local ok, err = pcall(function()
      local l = m:loss(batch, { probe = function(n) names[n] = true end })
      ctx:zero_grad()
      l:backward()
      if not ctx:grads_finite() then error("non-finite gradients") end
    end)
    local extra = ""
    if kind == "gated" and not names.gates then ok, extra = false, " (no gates probe)" end
    if kind == "ca_scale" and not names.scale then ok, extra = false, " (no scale probe)" end
    t.ok(ok and names.attn_probs, string.format("attention '%s' in %s-quick: loss, probes, finite gradients", kind, fam),
      tostring(err) .. extra)
    ctx:reset()
  end
end

-- ---------------------------------------------------------------- dropout: train vs eval, resumable masks
do
  local ctx = ol.Context({ seed = 5 })
  local m = models.build(ctx, models.preset("opt-quick", { dropout = 0.1 }))
  local batch = make_batch(ctx, m.cfg, 2, 8)
  local function run(opts)
    local y = ctx:no_grad(function() return m:forward(batch, opts) end)
    local a = snapshot(y); ctx:reset(); return a, tonumber(y.numel)
  end
  local e1, n = run({ train = false })
  local e2 = run({ train = false })
  local d1 = run({ train = true, step = 3 })
  local d2 = run({ train = true, step = 3 })
  local d3 = run({ train = true, step = 4 })
  t.is(max_abs_diff(e1, e2, n), 0, "dropout: eval forward is deterministic")
  t.ok(max_abs_diff(e1, d1, n) > 1e-4, "dropout: the training forward differs from eval")
  t.is(max_abs_diff(d1, d2, n), 0, "dropout: the same step gives the same masks (resume)")
  t.ok(max_abs_diff(d1, d3, n) > 1e-4, "dropout: another step gives other masks")
  m:eval()
  local e3 = run({})
  t.is(max_abs_diff(e1, e3, n), 0, "dropout: m:eval() turns it off by default")
end

-- ---------------------------------------------------------------- whole-model gradient checks
-- Backprop through each family (RoPE, kv-head repeat, tied heads, patchify, [CLS] concat,
-- padding mask) against finite differences, on every third parameter tensor of a micro
-- model. Parameters are redrawn from N(0, 0.4²) (norm gains 1): at the 0.02 init a ±1e-2
-- step is as large as the embeddings themselves and the finite difference, not the
-- backward, would be wrong.
do
  local micro = {
    { family = "gpt2", vocab_size = 11, block_size = 8, n_layer = 1, n_head = 2, d_model = 8, d_ff = 12 },
    { family = "opt", vocab_size = 11, block_size = 8, n_layer = 1, n_head = 2, d_model = 8, d_ff = 12 },
    { family = "llama", vocab_size = 11, block_size = 8, n_layer = 1, n_head = 2, n_kv_head = 1, d_model = 8, d_ff = 12 },
    { family = "bert", vocab_size = 11, block_size = 8, n_layer = 1, n_head = 2, d_model = 8, d_ff = 12, pooler = false },
    { family = "vit", image_size = 4, patch_size = 2, n_classes = 3, n_layer = 1, n_head = 2, d_model = 8, d_ff = 12,
      patch_ln = true },
  }
  for _, spec in ipairs(micro) do
    local ctx = ol.Context({ seed = 1 })
    local cfg = models.config(spec)
    local m = models.build(ctx, cfg)
    local batch
    if cfg.family == "vit" then
      batch = { images = ctx:tensor({ 2, 3, 4, 4 }, { persistent = true }):normal_(0, 1, 5) }
    else
      batch = { ids = persistent_ids(ctx, 2, 5, function(b, i) return (b * 5 + i) * 3 % 11 end) }
      if cfg.family == "bert" then batch.pad_mask = persistent_ids(ctx, 2, 5, function(_, i) return i < 4 and 1 or 0 end) end
    end
    local sel, n = {}, 0
    for i, p in ipairs(m:parameters()) do
      p:normal_(0, 0.4, 100 + i)
      if p.ndim == 1 and ol.ffi.string(p.name):match("weight$") then p:fill_(1) end
      if i % 3 == 1 then sel[#sel + 1] = p; n = n + tonumber(p.numel) end
    end
    local err, where = gradcheck.check(ctx, function() return m:forward(batch, { train = false }) end, sel, { eps = 3e-3 })
    t.ok(err < 1e-2, string.format("%s: backprop through the whole model matches finite differences (%d parameters)", cfg.family, n),
      string.format("%g at %s", err, where))
    ctx:reset()
  end
end

-- ---------------------------------------------------------------- ViT patch layout
do
  local ctx = ol.Context()
  local vit = require "outlierlab.models.vit"
  local B, CH, S, P = 2, 3, 8, 4
  local img = ctx:tensor({ B, CH, S, S })
  for i = 0, tonumber(img.numel) - 1 do img.data[i] = i end
  local p = vit.patchify(img, P)
  t.is(p:shape_str(), "(2,4,48)", "patchify: (B, N, 3·P·P)")
  local ok = true
  for b = 0, B - 1 do for pi = 0, 1 do for pj = 0, 1 do
    for c = 0, CH - 1 do for y = 0, P - 1 do for x = 0, P - 1 do
      local want = ((b * CH + c) * S + pi * P + y) * S + pj * P + x
      local got = p.data[(b * 4 + pi * 2 + pj) * 48 + (c * P + y) * P + x]
      if got ~= want then ok = false end
    end end end
  end end end
  t.ok(ok, "patchify: patch (i,j) row is image[b, c, iP+y, jP+x] in (c, y, x) order (conv kernel layout)")
  ctx:reset()
end

-- ---------------------------------------------------------------- ViT per-patch labels (dense)
-- the loss of cfg.dense against a hand computation in double: [CLS]'s cross entropy plus the
-- mean over the patches of the cross entropy of (dense_head · final-LN output) with the targets
-- "the image's class at an object patch, K at a background patch"; its backward against finite
-- differences through both heads
do
  local vit = require "outlierlab.models.vit"
  local ctx = ol.Context({ seed = 3 })
  local K, N, C, B = 3, 4, 8, 2
  local cfg = models.config({ family = "vit", image_size = 4, patch_size = 2, n_classes = K, n_layer = 1, n_head = 2,
                              d_model = C, d_ff = 12, dense = true })
  local m = models.build(ctx, cfg)
  t.is(m:num_params(), models.count_params(cfg), "dense ViT: the parameter count formula counts the patch head")
  t.is(models.count_params(cfg) - models.count_params(models.config({ family = "vit", image_size = 4, patch_size = 2,
    n_classes = K, n_layer = 1, n_head = 2, d_model = C, d_ff = 12 })), (C + 1) * (K + 1), "the patch head is C+1 by K+1")
  for i, p in ipairs(m:parameters()) do
    p:normal_(0, 0.4, 200 + i)
    if p.ndim == 1 and ol.ffi.string(p.name):match("weight$") then p:fill_(1) end
  end
  local batch = { images = ctx:tensor({ B, 3, 4, 4 }, { persistent = true }):normal_(0, 1, 7),
                  labels = ctx:tensor({ B }, { dtype = "i32", persistent = true }),
                  patch_object = persistent_ids(ctx, B, N, function(b, p) return (b + p) % 3 == 0 and 1 or 0 end) }
  batch.labels.idata[0], batch.labels.idata[1] = 2, 1
  local tg = vit.dense_targets(ctx, batch.labels, batch.patch_object, K, N)
  local want_t = { 2, 3, 3, 2, 3, 3, 1, 3 }   -- (b + p) % 3 == 0: object patch
  local same = true
  for i = 0, B * N - 1 do if tg.idata[i] ~= want_t[i + 1] then same = false end end
  t.ok(same, "dense targets: the image's class at object patches, K at background patches")
  local loss = m:loss(batch, { train = false })
  local logits, x = m:forward_tokens(batch, { train = false })
  local W, bias = m.dense_head.weight, m.dense_head.bias
  local function ce(z, y)
    local mx = -math.huge
    for _, v in ipairs(z) do mx = math.max(mx, v) end
    local s = 0
    for _, v in ipairs(z) do s = s + math.exp(v - mx) end
    return mx + math.log(s) - z[y + 1]
  end
  local want = 0
  for b = 0, B - 1 do
    local z = {}
    for k = 0, K - 1 do z[k + 1] = logits.data[b * K + k] end
    want = want + ce(z, batch.labels.idata[b]) / B
  end
  local dense = 0
  for b = 0, B - 1 do for p = 0, N - 1 do
    local z = {}
    for k = 0, K do
      local acc = bias.data[k]
      for c = 0, C - 1 do acc = acc + W.data[k * C + c] * x.data[(b * (N + 1) + 1 + p) * C + c] end
      z[k + 1] = acc
    end
    dense = dense + ce(z, want_t[b * N + p + 1]) / (B * N)
  end end
  want = want + dense
  t.ok(math.abs(loss.data[0] - want) < 1e-5 * math.max(1, math.abs(want)),
    string.format("dense ViT loss = [CLS] CE + mean patch CE by hand (%.6f vs %.6f)", loss.data[0], want))
  ctx:reset()
  local sel = {}
  for i, p in ipairs(m:parameters()) do if i % 3 == 1 or p == W or p == bias then sel[#sel + 1] = p end end
  local err, where = gradcheck.check(ctx, function() return (m:loss(batch, { train = false })) end, sel, { eps = 3e-3 })
  t.ok(err < 1e-2, "dense ViT: backprop through both heads matches finite differences", string.format("%g at %s", err, where))
  ctx:reset()
  local nb = { images = batch.images, labels = batch.labels }
  t.throws(function() m:loss(nb) end, "dense = true needs batch.patch_object", "dense ViT without patch_object: an error naming it")
  local wrong = { images = batch.images, labels = batch.labels, patch_object = persistent_ids(ctx, B, N + 1, function() return 0 end) }
  t.throws(function() m:loss(wrong) end, "has 5 patches per image, the model 4", "dense ViT with patch_object of another patch count: an error naming both")
  ctx:reset()
end

-- ---------------------------------------------------------------- config errors
t.throws(function() models.preset("gpt3-175b") end, "unknown preset 'gpt3-175b'", "unknown preset is an error listing the valid ones")
t.throws(function() models.preset("gpt2-quick", { n_layers = 3 }) end, "unknown key 'n_layers'", "unknown key is an error")
t.throws(function() models.preset("gpt2-quick", { n_layer = "3" }) end, "key 'n_layer' must be a number", "wrong type is an error")
t.throws(function() models.preset("gpt2-quick", { n_head = 3 }) end, "not a multiple of n_head", "d_model % n_head is checked")
t.throws(function() models.preset("llama-quick", { n_kv_head = 3, n_head = 4 }) end, "not a multiple of n_kv_head",
  "n_head % n_kv_head is checked")
do
  local ctx = ol.Context()
  t.throws(function() models.build(ctx, { family = "llama", n_layer = 1, d_model = 64, n_head = 4, n_kv_head = 3 }) end,
    "not a multiple of n_kv_head", "build checks a hand-made config too")
  local m = models.build(ctx, "gpt2-quick")
  local ids = persistent_ids(ctx, 1, 40, function() return 1 end)
  t.throws(function() m:forward({ ids = ids }) end, "sequence length 40 exceeds block_size 32", "too long a sequence")
  t.throws(function() m:loss({ ids = ids }) end, "loss needs batch.targets", "loss without targets")
  local bad = ctx:tensor({ 1, 4 }, { persistent = true })
  t.throws(function() m:forward({ ids = bad }) end, "batch.ids", "float ids are refused naming batch.ids")
end

-- ---------------------------------------------------------------- RoPE
do
  local ctx = ol.Context()
  -- HD = 2: θ_0 = 1, so position p rotates (x0, x1) by angle p
  local x = ctx:tensor({ 1, 1, 3, 2 }):load({ 1, 2, 1, 2, 1, 2 })
  local y = ol.check_ptr(C.ol_rope(x, 10000, 1))   -- positions 1, 2, 3
  local worst = 0
  for tt = 0, 2 do
    local p = tt + 1
    local w0, w1 = math.cos(p) - 2 * math.sin(p), 2 * math.cos(p) + math.sin(p)
    worst = math.max(worst, math.abs(y.data[2 * tt] - w0), math.abs(y.data[2 * tt + 1] - w1))
  end
  t.ok(worst < 1e-6, "rope: hand-computed rotation for HD=2 with offset 1", "max err " .. worst)
  -- HD = 4: pairs (0,2) and (1,3), θ = (1, base^(-1/2))
  local x4 = ctx:tensor({ 1, 2, 4 }):load({ 1, 0, 0, 0, 0, 1, 0, 0 })
  local y4 = ol.check_ptr(C.ol_rope(x4, 100, 0))
  local p, th = 1, 100 ^ -0.5
  local want = { 1, 0, 0, 0, 0, math.cos(p * th), 0, math.sin(p * th) }
  worst = 0
  for i = 1, 8 do worst = math.max(worst, math.abs(y4.data[i - 1] - want[i])) end
  t.ok(worst < 1e-6, "rope: rotate-half pairing (i, i+HD/2), θ_i = base^(-2i/HD)", "max err " .. worst)
  -- relative positions: <rope(q)_s, rope(k)_u> depends only on s − u
  local q = ctx:tensor({ 1, 6, 8 }):normal_(0, 1, 3)
  local k = ctx:tensor({ 1, 6, 8 }):normal_(0, 1, 4)
  local function dots(off)
    local rq, rk = ol.check_ptr(C.ol_rope(q, 10000, off)), ol.check_ptr(C.ol_rope(k, 10000, off))
    local s = rq:matmul(rk, false, true)
    return snapshot(s)
  end
  local d0 = dots(0)
  local d5 = dots(5)
  t.ok(max_abs_diff(d0, d5, 36) < 1e-4, "rope: q·k scores are unchanged by a common position shift")
  ctx:reset()
  t.throws(function() ol.check_ptr(C.ol_rope(ctx:tensor({ 2, 3 }), 10000, 0)) end, "must be even", "rope: odd head dim refused")
  t.throws(function() ol.check_ptr(C.ol_rope(ctx:tensor({ 2, 4 }), 1, 0)) end, "base", "rope: base <= 1 refused")
  ctx:reset()
  -- gradient check (B, NH, T, HD) = (2, 2, 3, 6), offset 2
  local xin = ctx:tensor({ 2, 2, 3, 6 }, { persistent = true }):normal_(0, 1, 9)
  local err, where = gradcheck.check(ctx, function(a) return ol.check_ptr(C.ol_rope(a, 10000, 2)) end, { xin })
  t.ok(err < 1e-2, "rope: backward matches finite differences", string.format("%g at %s", err, where))
  ctx:reset()
end

-- ---------------------------------------------------------------- fused block ops
-- ol_heads (view + transpose [+ RoPE]), ol_heads_merge (transpose + view) and ol_swiglu
-- (silu(g)·u): the chain of ops each replaces gives the same bits, forward and backward
-- (L = Σ y⊙R for a fixed random R), and the backward matches finite differences.
do
  local ctx = ol.Context()
  local function P(x) return ol.check_ptr(x) end
  local function run(fn, inputs)   -- bits of y and of every input's gradient
    for _, x in ipairs(inputs) do x:requires_grad_(true):zero_grad() end
    ctx:reset()
    local y = fn(unpack(inputs))
    local R = ctx:tensor(y:size()):uniform_(-1, 1, 77)
    local loss = (y * R):sum_all()
    loss:backward()
    local bits = {}
    for i = 0, tonumber(y.numel) - 1 do bits[#bits + 1] = string.format("%a", y.data[i]) end
    for _, x in ipairs(inputs) do
      for _, g in ipairs(x:gradlist()) do bits[#bits + 1] = string.format("%a", g) end
    end
    ctx:reset()
    return table.concat(bits, " ")
  end
  local function same(name, fused, chain, inputs)
    t.is(run(fused, inputs), run(chain, inputs), name .. ": the same bits as the chain of ops, forward and backward")
    local err, where = gradcheck.check(ctx, fused, inputs)
    t.ok(err < 1e-2, name .. ": backward matches finite differences", string.format("%g at %s", err, where))
  end
  local x = ctx:tensor({ 2, 3, 12 }, { persistent = true }):normal_(0, 1, 21)
  same("heads with RoPE", function(a) return P(C.ol_heads(a, 2, 10000, 2)) end,
       function(a) return P(C.ol_rope(a:view({ 2, 3, 2, 6 }):transpose(1, 2), 10000, 2)) end, { x })
  same("heads without RoPE", function(a) return P(C.ol_heads(a, 3, 0, 0)) end,
       function(a) return a:view({ 2, 3, 3, 4 }):transpose(1, 2) end, { x })
  local y = ctx:tensor({ 2, 2, 3, 6 }, { persistent = true }):normal_(0, 1, 22)
  same("heads_merge", function(a) return P(C.ol_heads_merge(a)) end,
       function(a) return a:transpose(1, 2):view({ 2, 3, 12 }) end, { y })
  local g = ctx:tensor({ 2, 3, 5 }, { persistent = true }):normal_(0, 2, 23)
  local u = ctx:tensor({ 2, 3, 5 }, { persistent = true }):normal_(0, 1, 24)
  same("swiglu", function(a, b) return P(C.ol_swiglu(a, b)) end, function(a, b) return a:silu() * b end, { g, u })
  same("swiglu of one tensor", function(a) return P(C.ol_swiglu(a, a)) end, function(a) return a:silu() * a end, { g })
  -- a consumer before and after: the input gradient accumulates onto another contribution
  same("heads after another consumer", function(a) return P(C.ol_heads(a:tanh() + a, 2, 500, 0)) end,
       function(a) return P(C.ol_rope((a:tanh() + a):view({ 2, 3, 2, 6 }):transpose(1, 2), 500, 0)) end, { x })
  same("swiglu with a shared input", function(a, b) return P(C.ol_swiglu(a, b)) * a end,
       function(a, b) return a:silu() * b * a end, { g, u })
  ctx:reset()
  -- under an activation hook (post-training quantisation) the SwiGLU's silu and product are
  -- two hooked activation sites, as before the fusion, with the same output as the fused op
  local lm = models.build(ctx, models.preset("llama-quick"))
  ctx:reset()
  local ids = ctx:tensor({ 1, 8 }, { dtype = "i32" })
  for i = 0, 7 do ids.idata[i] = i * 3 end
  local kinds = {}
  local y0, ny = snapshot(ctx:no_grad(function() return lm:forward({ ids = ids }, { train = false }) end))
  ol.set_activation_hook(function(x, kind) kinds[kind] = (kinds[kind] or 0) + 1 return x end)
  local y1 = snapshot(ctx:no_grad(function() return lm:forward({ ids = ids }, { train = false }) end))
  ol.set_activation_hook(nil)
  local L = lm.cfg.n_layer
  t.ok(kinds.silu == L and (kinds.__mul or 0) >= L, "hooked forward: SwiGLU's silu and product are activation sites",
       string.format("silu %s, __mul %s for %d layers", tostring(kinds.silu), tostring(kinds.__mul), L))
  t.ok(max_abs_diff(y0, y1, ny) == 0, "the hooked forward (identity hook) gives the fused forward's logits")
  ctx:reset()
  t.throws(function() P(C.ol_heads(ctx:tensor({ 2, 3, 12 }), 5, 0, 0)) end, "5 heads do not divide", "heads: NH must divide C")
  t.throws(function() P(C.ol_heads(ctx:tensor({ 2, 3, 12 }), 4, 10000, 0)) end, "must be even", "heads: RoPE needs an even head dim")
  t.throws(function() P(C.ol_swiglu(ctx:tensor({ 2, 3 }), ctx:tensor({ 3, 2 }))) end, "one shape", "swiglu: shapes must match")
  t.throws(function() P(C.ol_heads_merge(ctx:tensor({ 2, 3 }))) end, "must be (B,NH,T,HD)", "heads_merge: 4-D input")
end

return t.done()
