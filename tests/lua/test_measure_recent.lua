-- test_measure_recent — the 2024–2026 metrics (docs/reference/metrics.md) against hand-computed values:
-- Gu et al.'s key importance α(k) and sink rate (causal, bidirectional with padding, ε = 0.3),
-- Sun et al.'s top-3/median and massive-activation flags, BOS norm, the matrix entropy of token
-- representations (rank 1 → 0, equal orthogonal rows → log n, diag(2,1) by hand), and on a model:
-- the intervention (nothing flagged → the loss unchanged exactly; the whole last residual stream
-- zeroed → logits 0 → loss = log V), the scaled state of the initial token (×1 exact, the
-- embedding equal to scaled weights, scale-free before the final norm), the sink rate and the
-- layer profile.
local t = require "tap"
local ol = require "outlierlab"
local AR = require "outlierlab.measure.recent"

local ctx = ol.Context({ seed = 3 })
local function tensor(shape, vals)
  return ctx:tensor(shape, { persistent = true }):load(vals)
end

-- ---------------------------------------------------------------- key importance, sink rate
do
  -- B = 2, NH = 2, T = 4, causal rows (each sums to 1 over the visible keys)
  local rows = {
    -- b0 h0: a sink on key 0
    { 1, 0, 0, 0 }, { 0.6, 0.4, 0, 0 }, { 0.5, 0.2, 0.3, 0 }, { 0.7, 0.1, 0.1, 0.1 },
    -- b0 h1: diagonal-ish, little on key 0
    { 1, 0, 0, 0 }, { 0, 1, 0, 0 }, { 0, 0.5, 0.5, 0 }, { 0, 0, 0, 1 },
    -- b1 h0: α(0) = (1 + 0.1 + 0 + 0)/4 = 0.275 — below ε
    { 1, 0, 0, 0 }, { 0.1, 0.9, 0, 0 }, { 0, 0.5, 0.5, 0 }, { 0, 0, 0, 1 },
    -- b1 h1: α(0) = (1 + 0.5 + 0.5 + 0.5)/4 = 0.625
    { 1, 0, 0, 0 }, { 0.5, 0.5, 0, 0 }, { 0.5, 0.25, 0.25, 0 }, { 0.5, 0.2, 0.2, 0.1 },
  }
  local vals = {}
  for _, r in ipairs(rows) do for _, v in ipairs(r) do vals[#vals + 1] = v end end
  local A = tensor({ 2, 2, 4, 4 }, vals)
  local a = AR.key_importance(A, { causal = true })
  t.near(a.at(0, 0, 0), (1 + 0.6 + 0.5 + 0.7) / 4, 1e-7, "α(0): mean of column 0 over the 4 queries that see it")
  t.near(a.at(0, 0, 1), (0.4 + 0.2 + 0.1) / 3, 1e-7, "α(1): over the 3 queries t ≥ 1")
  t.near(a.at(0, 0, 3), 0.1, 1e-7, "α(3): only the last query sees key 3")
  t.near(a.at(1, 1, 0), 0.625, 1e-7, "α(0) of sample 1, head 1")
  local s = AR.SinkRate{}
  s:update(A, 0, { causal = true })
  local r = s:result()
  t.near(r.rate, 50, 1e-9, "sink rate: 2 of the 4 (sample, head) pairs have α(0) > 0.3 → 50 %")
  t.near(r.by_layer[0][1], 0.5, 1e-12, "layer 0 head 0 is a sink in 1 of 2 samples (α = 0.275 in the other)")
  t.near(r.by_layer[0][2], 0.5, 1e-12, "layer 0 head 1 is a sink in 1 of 2 samples")
  s:update(A, 1, { causal = true })
  t.near(s:result().rate, 50, 1e-9, "two identical layers: still 50 %")
  t.is(s:result().heads, 4, "heads counted over layers: 2 layers × 2 heads")
  local s2 = AR.SinkRate{ eps = 0.27 }
  s2:update(A, 0, { causal = true })
  t.near(s2:result().rate, 75, 1e-9, "ε = 0.27: α = 0.275 now counts → 75 %")
  -- bidirectional with padding: sample 0's key 3 is padding; only real queries count
  local pad = ctx:tensor({ 1, 3 }, { dtype = "i32", persistent = true }):load({ 1, 1, 0 })
  local Bd = tensor({ 1, 1, 3, 3 }, { 0.5, 0.5, 0, 0.2, 0.8, 0, 0.9, 0.1, 0 })
  local ab = AR.key_importance(Bd, { pad_mask = pad })
  t.near(ab.at(0, 0, 0), (0.5 + 0.2) / 2, 1e-7, "bidirectional + padding: α(0) over the 2 real queries (the padded query is left out)")
  t.is(ab.at(0, 0, 2), 0, "a padded key has α = 0")
end

-- ---------------------------------------------------------------- top-3 / median, flags
do
  local x = tensor({ 2, 2, 3 }, { 1, -2, 3, -4, 5, -100,   2, 2, 2, 2, 2, -8 })
  local r = AR.top_median(x)
  t.near(r.top[1], (100 + 8) / 2, 1e-9, "top-1 averaged over sequences")
  t.near(r.top[3], (4 + 2) / 2, 1e-9, "top-3 averaged over sequences")
  t.near(r.median, (3.5 + 2) / 2, 1e-9, "median |x| per sequence (mean of the middle two), averaged")
  local fl = AR.massive_flags(x, 0, 10)
  t.is(table.concat(fl, ","), "5", "massive_flags: |x| ≥ 10·median (35) flags only the −100 (flat index 5)")
  local fl1 = AR.massive_flags(x, 1, 3)
  t.is(table.concat(fl1, ","), "11", "massive_flags in sequence 1: −8 ≥ 3·2 (index 11)")
  local m = ctx:tensor({ 2, 2 }, { dtype = "i32", persistent = true }):load({ 1, 0, 1, 1 })
  local rm = AR.top_median(x, m)
  t.near(rm.top[1], (3 + 8) / 2, 1e-9, "a masked token is left out of top-k")
end

-- ---------------------------------------------------------------- BOS norm, matrix entropy
do
  local x = tensor({ 1, 2, 2 }, { 3, 4, 0, 1 })
  local b = AR.bos_norm(x)
  t.near(b.bos, 5, 1e-9, "BOS norm ‖(3,4)‖ = 5")
  t.near(b.others, 1, 1e-9, "other tokens' mean norm 1")
  t.near(b.ratio, 5, 1e-9, "BOS / others = 5")
  local r1 = AR.matrix_entropy(tensor({ 1, 3, 2 }, { 1, 2, 2, 4, -1, -2 }))
  t.ok(math.abs(r1.entropy) < 1e-9, "matrix entropy of a rank-1 matrix is 0", r1.entropy)
  local r2 = AR.matrix_entropy(tensor({ 1, 2, 2 }, { 3, 0, 0, 3 }))
  t.near(r2.entropy, math.log(2), 1e-9, "two equal orthogonal rows: entropy log 2")
  t.near(r2.normalized, 1, 1e-9, "… normalised by log min(T, C) = 1")
  local r3 = AR.matrix_entropy(tensor({ 1, 2, 2 }, { 2, 0, 0, 1 }))
  t.near(r3.entropy, -(0.8 * math.log(0.8) + 0.2 * math.log(0.2)), 1e-9, "diag(2,1): p = (4/5, 1/5)")
  -- tall and wide give the same (XXᵀ and XᵀX share their nonzero eigenvalues)
  local xw = tensor({ 1, 2, 3 }, { 1, 2, 0, 0, 1, 3 })
  local xt = tensor({ 1, 3, 2 }, { 1, 0, 2, 1, 0, 3 })
  t.near(AR.matrix_entropy(xw).entropy, AR.matrix_entropy(xt).entropy, 1e-9, "entropy(X) = entropy(Xᵀ)")
end

-- ---------------------------------------------------------------- on a model
do
  local models = require "outlierlab.models"
  local mc = ol.Context({ seed = 5 })
  local cfg = models.preset("llama-quick", {})
  local m = models.build(mc, cfg)
  local batches = {}
  for i = 1, 2 do
    local ids = mc:tensor({ 2, 16 }, { dtype = "i32", persistent = true })
    local tg = mc:tensor({ 2, 16 }, { dtype = "i32", persistent = true })
    for j = 0, 31 do
      ids.idata[j] = math.floor(ol.C.ol_rand_uniform(i, j) * cfg.vocab_size)
      tg.idata[j] = math.floor(ol.C.ol_rand_uniform(i + 10, j) * cfg.vocab_size)
    end
    batches[i] = { ids = ids, targets = tg }
  end
  local none = AR.intervention(mc, m, batches, { layer = 1, ratio = 1e9 })
  t.is(none.n, 0, "intervention: ratio 1e9 flags nothing")
  t.is(none.loss_zero, none.loss, "nothing flagged: the loss is unchanged, exactly")
  local last = cfg.n_layer - 1
  local all = AR.intervention(mc, m, batches, { layer = last, ratio = 0, min_abs = 1e-30 })
  t.ok(all.n == 2 * 2 * 16 * cfg.d_model, "ratio 0: every entry of the last block's output is flagged", all.n)
  t.near(all.loss_zero, math.log(cfg.vocab_size), 1e-5, "the residual stream zeroed before the head: logits 0, loss = log V")
  t.ok(all.loss_mean == all.loss_mean and all.loss ~= all.loss_zero, "the mean intervention gives a finite loss")
  local some = AR.intervention(mc, m, batches, { layer = 0, ratio = 3 })
  t.ok(some.n > 0 and some.delta_zero ~= 0, "ratio 3 in layer 0: some entries flagged, the loss moves", some.n)
  -- scale_state: ×1 leaves the loss as it is, bit for bit; the embedding of a token that sits at
  -- position 0 alone, scaled by the intervention, gives the loss of the model whose embedding row
  -- of that token is scaled in its weights (an independent path through the same forward); the
  -- last block's output scaled ×4 changes only the final RMSNorm's eps term
  do
    local sb = {}
    for i = 1, 2 do
      local ids = mc:tensor({ 2, 16 }, { dtype = "i32", persistent = true })
      local tg = mc:tensor({ 2, 16 }, { dtype = "i32", persistent = true })
      for j = 0, 31 do
        ids.idata[j] = j % 16 == 0 and 1 or 2 + math.floor(ol.C.ol_rand_uniform(i + 20, j) * (cfg.vocab_size - 2))
        tg.idata[j] = 2 + math.floor(ol.C.ol_rand_uniform(i + 30, j) * (cfg.vocab_size - 2))
      end
      sb[i] = { ids = ids, targets = tg }
    end
    local one = AR.scale_state(mc, m, sb, { layer = 0, scales = { 1 } })
    t.is(one.delta[1], 0, "scale_state: the state of the initial token ×1 leaves the loss unchanged, exactly")
    local emb = AR.scale_state(mc, m, sb, { layer = 0, point = "emb", scales = { 3, 0.5 } })
    local W = m.embed_tokens.weight
    local C = cfg.d_model
    local row = {}
    for c = 0, C - 1 do row[c] = W.data[C + c] end
    local function loss_with(s)
      for c = 0, C - 1 do W.data[C + c] = row[c] * s end
      local l = AR.run_model(mc, m, sb)
      for c = 0, C - 1 do W.data[C + c] = row[c] end
      return l
    end
    t.is(emb.loss_at[1], loss_with(3), "scale_state at the embedding ×3 = the loss with token 1's embedding row ×3, bit for bit")
    t.is(emb.loss_at[2], loss_with(0.5), "and ×0.5 likewise")
    t.ok(emb.delta[1] ~= 0, "scaling the initial token's embedding moves the loss", emb.delta[1])
    local fin = AR.scale_state(mc, m, sb, { layer = cfg.n_layer - 1, scales = { 4 } })
    t.ok(math.abs(fin.delta[1]) < 1e-5, "the last block's output ×4 at the initial token: the final RMSNorm is scale-free (|Δloss| < 1e-5)", fin.delta[1])
    t.ok(not pcall(AR.scale_state, mc, m, sb, { position = 16 }), "scale_state: a position outside the sequence is an error")
  end
  local sr = AR.sink_rate(mc, m, batches)
  t.is(sr.heads, cfg.n_layer * cfg.n_head, "sink_rate on a model: every (layer, head)")
  t.ok(sr.rate >= 0 and sr.rate <= 100 and sr.samples == 4, "sink_rate: a percentage over 4 samples", sr.rate)
  local prof = AR.layer_profile(mc, m, batches)
  t.is(#prof.layers, cfg.n_layer + 1, "layer_profile: the embedding and every block")
  local ok = true
  for _, l in ipairs(prof.layers) do
    local r = prof[l]
    ok = ok and r.median > 0 and r.top[1] >= r.top[2] and r.bos > 0 and r.entropy > 0 and r.normalized <= 1 + 1e-9
  end
  t.ok(ok, "layer_profile: medians, ordered top-3, BOS norms and entropies in (0, 1] normalised")
  t.near(prof.loss, none.loss, 1e-6, "layer_profile reports the same evaluation loss")
  -- the tracked phenomena carry the same sink rate
  local phenomena = require "outlierlab.measure.phenomena"
  local probes = require "outlierlab.measure.probes"
  local ph = phenomena.new{ category = function(id) return id == 0 and "initial" or "other" end, T = 16,
                            C = cfg.d_model, n_head = cfg.n_head, causal = true }
  local P = probes.new{}
  ph:attach(P)
  for _, b in ipairs(batches) do mc:no_grad(function() mc:reset(); P:forward(m, b) end) end
  mc:reset()
  local r = ph:result()
  t.near(r.sink_rate_pct, sr.rate, 1e-9, "phenomena: sink_rate_pct is Gu et al.'s per-sample rate, the same as measure.recent.sink_rate")
  t.ok(phenomena.describe(r):find("sink rate", 1, true) ~= nil, "phenomena.describe() reports the sink rate")
end

return t.done()
