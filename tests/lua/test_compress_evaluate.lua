-- test_compress_evaluate — the W8A8 driver (compress/evaluate) on tiny models — the plain-op attention switch, which tensors are
-- quantised (scores, probabilities; not masks, not gates), high-precision round trips, restore.
local t = require "tap"
local ol = require "outlierlab"
local compress = require "outlierlab.compress.fakequant"
local models = require "outlierlab.models"
local batchers = require "outlierlab.data.batcher"
local evaluate = require "outlierlab.compress.evaluate"
local papers = require "outlierlab.recipes.papers"
local ffi = ol.ffi

local corpus = batchers.corpus{ seed = 3, n_tokens = 20000, vocab_size = 256 }

local function setup(preset, kind, attn)
  local ctx = ol.Context{ seed = 5 }
  local ov = { vocab_size = 256, block_size = 16, dropout = 0 }
  if attn then ov.attention = attn end
  local m = models.build(ctx, models.preset(preset, ov))
  m:eval()
  local o = {
    metric = "ppl", n = 2, n_calib = 2,
    loader = function() return batchers.batcher(corpus, { B = 2, T = 16, kind = kind, seed = 7, split = "val" }) end,
    calib_loader = function() return batchers.batcher(corpus, { B = 2, T = 16, kind = kind, seed = 8 }) end,
  }
  return ctx, m, o
end

local function params_copy(ctx)
  local s = compress.snapshot(ctx)
  local out = {}
  for i = 0, s.n - 1 do out[i] = s.buf[i] end
  return out, s.n
end
local function same_params(ctx, ref, n)
  local s = compress.snapshot(ctx)
  for i = 0, n - 1 do if s.buf[i] ~= ref[i] then return false end end
  return true
end

-- 1. the plain-op path computes the same loss as the fused kernel (causal GPT-2, gated BERT)
for _, c in ipairs({ { "gpt2-quick", "lm", nil }, { "bert-quick", "mlm", { kind = "gated" } },
                     { "opt-quick", "lm", { kind = "clipped_softmax", alpha = 4 } } }) do
  local ctx, m, o = setup(c[1], c[2], c[3])
  local fused = evaluate.evaluate(ctx, m, o)
  local undo, nmods = evaluate.plain_attention(m)
  t.is(nmods, 2, c[1] .. ": two attention modules found")
  local plain = evaluate.evaluate(ctx, m, o)
  undo()
  t.near(plain.loss, fused.loss, 1e-4, c[1] .. ": plain-op attention gives the fused loss")
  local back = evaluate.evaluate(ctx, m, o)
  t.is(back.loss, fused.loss, c[1] .. ": undo restores the fused path exactly")
  for _, A in ipairs(evaluate.attention_modules(m)) do
    t.ok(not A.use_reference, c[1] .. ": use_reference off after undo")
  end
end

-- 2. which tensors are quantised: calibrated sites per layer. softmax attention through the
-- reference adds 3 sites per layer (scores q·kᵀ, softmax, probs·V); gated adds one more (the
-- gated product) but none for the gate's own ops (full precision); the causal mask is not a site.
local function sites(preset, kind, attn, plain)
  local ctx, m, o = setup(preset, kind, attn)
  local undo = plain and evaluate.plain_attention(m) or function() end
  local q = compress.ActivationQuantizer{ bits = 8 }
  local kinds = {}
  ctx:no_grad(function()
    ctx:reset()
    local b = o.calib_loader():next(ctx)
    q:calibrate(function() m:forward(b, { train = false }) end)
  end)
  undo()
  for _, s in ipairs(q.sites) do kinds[s.kind] = (kinds[s.kind] or 0) + 1 end
  return q:num_sites(), kinds
end
local n_fused, k_fused = sites("gpt2-quick", "lm", nil, false)
local n_plain, k_plain = sites("gpt2-quick", "lm", nil, true)
t.is(n_plain - n_fused, 3 * 2, "reference softmax attention: 3 more quantised sites per layer (2 layers)")
t.is((k_plain.matmul or 0) - (k_fused.matmul or 0), 2 * 2, "scores and probs·V matmuls are quantised")
t.is((k_plain.softmax or 0) - (k_fused.softmax or 0), 2, "softmax outputs are quantised")
t.is((k_plain.__add or 0), (k_fused.__add or 0), "the causal mask addition is not a quantised site")
local n_gated = sites("gpt2-quick", "lm", { kind = "gated" }, true)
t.is(n_gated - n_plain, 2, "gated: only the gated product is added, the gate's ops stay in full precision")
local n_ca = sites("gpt2-quick", "lm", { kind = "ca_scale" }, true)
t.is(n_ca - n_plain, 2, "ca_scale: the scaling factor stays in full precision")

-- 3. W16A16 is (almost) the FP model; W4A4 is not; the weights come back either way
do
  local ctx, m, o = setup("gpt2-quick", "lm", nil)
  local ref, n = params_copy(ctx)
  local fp = evaluate.evaluate(ctx, m, o)
  local q16 = evaluate.w8a8(ctx, m, { metric = "ppl", n = 2, n_calib = 2, loader = o.loader, calib_loader = o.calib_loader,
                                 wbits = 16, abits = 16 })
  t.ok(math.abs(q16.loss - fp.loss) < 2e-3, "W16A16 loss equals the FP loss (masks not quantised)",
       string.format("fp %.6f q16 %.6f", fp.loss, q16.loss))
  t.ok(q16.sites > 0 and q16.weights == 2 * 6 + 1, "sites quantised and 13 weight matrices (wte kept FP)",
       string.format("sites %d weights %d", q16.sites, q16.weights))
  t.ok(same_params(ctx, ref, n), "weights restored after w8a8")
  local q4 = evaluate.w8a8(ctx, m, { metric = "ppl", n = 2, n_calib = 2, loader = o.loader, calib_loader = o.calib_loader,
                                wbits = 4, abits = 4 })
  t.ok(math.abs(q4.loss - fp.loss) > 1e-3, "W4A4 changes the loss", string.format("fp %.6f q4 %.6f", fp.loss, q4.loss))
  t.ok(same_params(ctx, ref, n), "weights restored after W4A4")
  for _, A in ipairs(evaluate.attention_modules(m)) do t.ok(not A.use_reference, "fused attention back after w8a8") end
  t.is(ol.activation_hook(), nil, "no hook left installed")

  -- one part at a time (evaluate.W8A8_PARTS): no weights and no kinds is the FP model; one kind
  -- quantises its sites alone; the W4 weights alone change the loss
  local none = evaluate.w8a8(ctx, m, { metric = "ppl", n = 2, n_calib = 2, loader = o.loader, calib_loader = o.calib_loader,
                                  wbits = 32, abits = 4, kinds = {} })
  t.ok(none.sites == 0 and math.abs(none.loss - fp.loss) < 2e-5, "kinds = {} and wbits 32: nothing quantised, the FP loss",
       string.format("sites %d fp %.6f q %.6f", none.sites, fp.loss, none.loss))
  local lin = evaluate.w8a8(ctx, m, { metric = "ppl", n = 2, n_calib = 2, loader = o.loader, calib_loader = o.calib_loader,
                                 wbits = 32, abits = 4, kinds = { linear = true } })
  local sums = evaluate.w8a8(ctx, m, { metric = "ppl", n = 2, n_calib = 2, loader = o.loader, calib_loader = o.calib_loader,
                                  wbits = 32, abits = 4, kinds = { __add = true } })
  local all = evaluate.w8a8(ctx, m, { metric = "ppl", n = 2, n_calib = 2, loader = o.loader, calib_loader = o.calib_loader,
                                 wbits = 32, abits = 4 })
  t.ok(lin.sites > 0 and sums.sites > 0 and lin.sites + sums.sites < all.sites,
       "kinds: the linear outputs and the sums are each a part of the quantised sites",
       string.format("linear %d, sums %d, all %d", lin.sites, sums.sites, all.sites))
  t.ok(math.abs(lin.loss - fp.loss) > 1e-4 and math.abs(lin.loss - all.loss) > 1e-4, "A4 at the linear outputs alone: a loss of its own",
       string.format("fp %.6f linear %.6f all %.6f", fp.loss, lin.loss, all.loss))
  local w4 = evaluate.w8a8(ctx, m, { metric = "ppl", n = 2, n_calib = 2, loader = o.loader, calib_loader = o.calib_loader,
                                wbits = 4, abits = 8, kinds = {} })
  t.ok(w4.sites == 0 and math.abs(w4.loss - fp.loss) > 1e-4, "W4 alone (kinds = {}): the weights' error, no activation site",
       string.format("sites %d fp %.6f w4 %.6f", w4.sites, fp.loss, w4.loss))
  t.ok(same_params(ctx, ref, n), "weights restored after the parts")
  local names = {}
  for _, part in ipairs(evaluate.W8A8_PARTS) do names[#names + 1] = part.name end
  t.is(table.concat(names, " "), "weights activations sums linear attention softmax norms mlp_act products", "W8A8_PARTS: the parts measured")

  -- weight-only: pruning 50 % of the block linears, then restore
  local r = evaluate.weight_only(ctx, m, { metric = "ppl", n = 2, loader = o.loader, only = evaluate.LINEAR_ONLY,
                                      fn = function(ps) return compress.prune(ps, { sparsity = 0.5 }) end })
  t.near(r.sparsity, 0.5, 1e-9, "weight_only: 50 % of the block linears pruned")
  t.is(r.weights, 12, "weight_only: the 12 block linear weights (no embeddings, no head)")
  t.ok(same_params(ctx, ref, n), "weights restored after weight_only")
end

-- 4. what stays in full precision
do
  local ctx = ol.Context{}
  models.build(ctx, models.preset("bert-quick", { attention = { kind = "gated" } }))
  local names = table.concat(evaluate.names(evaluate.weights(ctx)), " ")
  t.ok(not names:find("gate") and not names:find("embeddings.word"), "BERT: gates and the tied decoder/embedding stay FP", names)
  t.ok(names:find("embeddings.position.weight", 1, true) and names:find("mlm.dense.weight", 1, true), "BERT: position embedding and MLM dense quantised")
  local ctx2 = ol.Context{}
  models.build(ctx2, models.preset("vit-quick", {}))
  local n2 = table.concat(evaluate.names(evaluate.weights(ctx2)), " ")
  t.ok(not n2:find("head.weight", 1, true) and n2:find("patch_embed.weight", 1, true), "ViT: head FP, patch embedding quantised", n2)
end

-- 5. accuracy metric on a ViT (hand check: recomputed from the logits) and outlier statistics
do
  local ctx = ol.Context{ seed = 2 }
  local m = models.build(ctx, models.preset("vit-quick", {}))
  m:eval()
  local data = require "outlierlab.data"
  local mk = function() return data.ImageLoader{ n = 64, size = 16, classes = 4, seed = 1, B = 4, split = "val" } end
  local r = evaluate.evaluate(ctx, m, { metric = "acc", n = 2, loader = mk })
  local L = mk()
  local correct = 0
  ctx:no_grad(function()
    for _ = 1, 2 do
      ctx:reset()
      local b = L:next(ctx)
      local lg = m:forward(b, { train = false }):tolist()
      for i = 0, 3 do
        local best, bi = -math.huge, -1
        for k = 0, 3 do if lg[i * 4 + k + 1] > best then best, bi = lg[i * 4 + k + 1], k end end
        if bi == b.labels.idata[i] then correct = correct + 1 end
      end
    end
  end)
  t.near(r.value, 100 * correct / 8, 1e-9, "top-1 accuracy in % over 8 images")
  local s = evaluate.outlier_stats(ctx, m, { loader = mk, n = 2, points = { "h", "ln1" } })
  t.is(#s.per, 4, "outlier_stats: 2 points × 2 layers")
  local mx, ks = -1, 0
  for _, p in ipairs(s.per) do mx = math.max(mx, p.max_inf_norm); ks = ks + p.kurtosis end
  t.is(s.max_inf_norm, mx, "max inf norm = max over hooked tensors")
  t.near(s.avg_kurtosis, ks / 4, 1e-9, "avg kurtosis = mean over hooked tensors")
end

-- 6. mean ± std: {1, 2, 3} -> 2 ± 1 (sample std)
local mu, sd = evaluate.mean_std({ 1, 2, 3 })
t.is(mu, 2, "mean of 1, 2, 3")
t.is(sd, 1, "sample std of 1, 2, 3")
t.is(evaluate.pm({ 1, 2, 3 }, "%.1f"), "2.0 ± 1.0", "pm formatting")
t.is(papers.qt_gamma(-0.025, 128, 64), -0.05, "γ scaled to T = 64 keeps γ·T")
-- ---------------------------------------------------------------- every ViT profile can run
-- (the paper profile once asked for 12 classes of the 8 synthetic shapes: its loader refused)
do
  local config = require "outlierlab.config"
  local batcher = require "outlierlab.data.batcher"
  for _, name in ipairs({ "quick", "default", "long", "paper" }) do
    local c = config.deep_copy(papers.VIT_PROFILES[name])
    local spec = papers.vit_spec(c)
    for _, split in ipairs({ "train", "val" }) do
      local ok, e = pcall(batcher.image_loader, spec, split)
      t.ok(ok, string.format("ViT %s profile: the %s image loader builds%s", name, split, ok and "" or ": " .. tostring(e)))
    end
    local ok, n = pcall(function() return models.count_params(models.preset(spec.model.preset, spec.model.overrides)) end)
    t.ok(ok and n > 0, string.format("ViT %s profile: the model config builds (%s parameters)", name, tostring(n)))
    t.is(spec.model.overrides.n_layer, nil, "ViT " .. name .. " profile: n_layer = 0 keeps the preset's depth out of the spec")
  end
  local c = config.deep_copy(papers.VIT_PROFILES.default)
  c.n_layer = 6
  t.is(papers.vit_spec(c).model.overrides.n_layer, 6, "ViT --vit_n_layer=6 sets the model's depth")
end

return t.done()
