-- test_confidence — the confidence-regulation channel (lua/outlierlab/measure/confidence.lua):
-- entropy, Gram matrix and near-null fraction against hand-computed cases; the organism task's
-- ruled positions (copy vs draw) against its own generator; and the whole measure on a hand-made
-- model whose answer is known: channel 7 of the token embedding is 50 for even token ids and 0 for
-- odd ones, W_U's column 7 is zero (the channel lies in W_U's null space), so the channel fires
-- exactly at the even-id positions, writes nothing W_U can read (fraction 1), raises the entropy
-- only through the final RMSNorm, and its mean ablation lowers the entropy there and changes
-- nothing elsewhere.
local t = require "tap"
local ol = require "outlierlab"
local ffi = require "ffi"
local CR = require "outlierlab.measure.confidence"
local models = require "outlierlab.models"
local org = require "outlierlab.data.organism"
local id_batches = dofile(ol.root .. "/tests/lua/lib/id_batches.lua")

-- ---------------------------------------------------------------- entropy, Gram, null fraction
do
  local x = ffi.new("float[4]", 0, 0, 0, 0)
  t.near(CR.entropy(x, 0, 4), math.log(4), 1e-12, "entropy of equal logits = log 4")
  local y = ffi.new("double[3]", math.log(1), math.log(2), math.log(3))   -- p = 1/6, 2/6, 3/6
  t.near(CR.entropy(y, 0, 3), math.log(6) / 6 + math.log(3) / 3 + math.log(2) / 2, 1e-12,
         "entropy of p = (1, 2, 3)/6 = ln6/6 + ln3/3 + ln2/2")
  local ctx = ol.Context{ params = 1024, step_bytes = 2^16 }
  -- W = [[1, 2, 0], [3, 0, 1]]: WᵀW = [[10, 2, 3], [2, 4, 0], [3, 0, 1]]
  local W = ctx:tensor({ 2, 3 }, { persistent = true }):load({ 1, 2, 0, 3, 0, 1 })
  t.is(table.concat(CR.gram(W, 2, 3), " "), "10 2 3 2 4 0 3 0 1", "Gram WᵀW by hand")
  -- G = diag(9, 4, 0.01) (W = diag(3, 2, 0.1)): the smallest direction is e_2
  local G = { 9, 0, 0, 0, 4, 0, 0, 0, 0.01 }
  t.near(CR.null_fraction(G, 3, { 0, 1, 1 }, 1), 0.5, 1e-12, "u = (0, 1, 1): half of ‖u‖² in the bottom-1 space e_2")
  t.near(CR.null_fraction(G, 3, { 0, 1, 1 }, 2), 1, 1e-12, "u = (0, 1, 1): all of it in the bottom-2 space {e_1, e_2}")
  t.near(CR.null_fraction(G, 3, { 1, 0, 0 }, 2), 0, 1e-12, "u = e_0: none in the bottom-2 space")
  -- a rotated case: G = R diag(1, 0) Rᵀ, R a rotation by 45°: null direction (1, −1)/√2
  t.near(CR.null_fraction({ 0.5, 0.5, 0.5, 0.5 }, 2, { 1, 0 }, 1), 0.5, 1e-9, "rotated: e_0 is half in the null direction (1, −1)/√2")
  t.near(CR.null_fraction({ 0.5, 0.5, 0.5, 0.5 }, 2, { 3, -3 }, 1), 1, 1e-9, "rotated: (3, −3) lies in it")
end

-- ---------------------------------------------------------------- copy vs draw positions of the organism
do
  local ok = true
  for _, o in ipairs { { vocab_size = 64, n_triggers = 8, groups = 2, p_trigger = 0.12 },
                       { vocab_size = 128, n_triggers = 24, groups = 8, p_trigger = 0.08, n_pointer = 3, p_pointer = 0.15, pointer_hops = 3 },
                       { vocab_size = 128, n_triggers = 8, groups = 2, n_recall = 4, p_recall = 0.05, loop_free = true } } do
    local task = org.task(o)
    local buf, out = ffi.new("int32_t[?]", 100), ffi.new("int32_t[?]", 100)
    for i = 0, 30 do
      local _, draws = task.chain(5, i, 100, buf)
      task.ruled(buf, 100, out)
      local n = 0
      for j = 0, 99 do n = n + (1 - out[j]) end
      ok = ok and n == draws
    end
  end
  t.ok(ok, "task.ruled marks as draws exactly the positions the generator drew (3 tasks × 31 sequences)")
  -- by hand, groups = 1: after the trigger at position 2, position 3 copies position 1
  local task = org.task{ vocab_size = 64, n_triggers = 8, groups = 1, p_trigger = 0.12 }
  local a, b, T0 = task.ord0, task.ord0 + 1, task.trig0
  local seq = ffi.new("int32_t[6]", a, b, T0, b, a, a)
  local out = task.ruled(seq, 6, ffi.new("int32_t[6]"))
  t.is(string.format("%d %d %d %d %d %d", out[0], out[1], out[2], out[3], out[4], out[5]), "0 0 0 1 0 0",
       "groups = 1: only the position after the trigger is ruled")
end

-- ---------------------------------------------------------------- the planted model
local function planted(zero_col)
  local ctx = ol.Context{ params = 2^18, step_bytes = 2^24, seed = 5 }
  local m = models.build(ctx, models.preset("llama-quick"))
  m:eval()
  local V, C, CH = m.cfg.vocab_size, m.cfg.d_model, 7
  for v = 0, V - 1 do m.embed_tokens.weight.data[v * C + CH] = v % 2 == 0 and 50 or 0 end
  local Wu = m.lm_head.weight
  for i = 0, V * C - 1 do Wu.data[i] = Wu.data[i] * 100 end   -- logits of order 1
  for v = 0, V - 1 do Wu.data[v * C + CH] = zero_col and 0 or 50 end   -- or the largest column by far
  local batches = id_batches(ctx, 2, 4, 16, function(i, bi) return (i * 37 + bi * 11) % V end,
                             function(i, bi) return (i * 13 + bi) % V end)
  -- kinds: a "draw" where the input id is even (where the channel was planted), a "copy" elsewhere
  local function kinds(batch)
    local out = {}
    for i = 0, 63 do out[i] = batch.ids.idata[i] % 2 == 0 and 0 or 1 end
    return out
  end
  return ctx, m, batches, kinds
end

do
  local ctx, m, batches, kinds = planted(true)
  local r = CR.measure(ctx, m, batches, { tau = 20, kinds = kinds })
  t.is(r.channel, 7, "the channel found: 7")
  t.is(r.layer, 1, "the last layer (1 of llama-quick's 0..1)")
  local even = 0
  for _, b in ipairs(batches) do for i = 0, 63 do if i % 16 > 0 and b.ids.idata[i] % 2 == 0 then even = even + 1 end end end
  t.is(r.fires, even, "fires at every even-id position after position 0 (" .. even .. ")")
  t.is(r.by_kind.draw.fires .. "/" .. r.by_kind.draw.n, even .. "/" .. even, "every draw position fires")
  t.is(r.by_kind.copy.fires, 0, "no copy position fires")
  t.near(r.null_channel, 1, 1e-9, "W_U's column 7 is zero: e_7 entirely in the near-null space")
  -- the last block does not write the planted channel (the embedding does): its write is only a
  -- fraction in [0, 1], with nothing to expect of its size
  t.ok(r.null_write and r.null_write >= 0 and r.null_write <= 1, "the block's write at the firing positions: a fraction in [0, 1]",
       tostring(r.null_write))
  t.near(r.chance, 8 / 64, 1e-12, "chance = bottom/C = 8/64")
  t.ok(r.entropy.fire > r.entropy_ablated.fire, "mean ablation lowers the entropy where it fired",
       string.format("%.4f -> %.4f", r.entropy.fire, r.entropy_ablated.fire))
  t.is(r.delta_entropy.rest, 0, "and leaves every other position's entropy as it was")
  t.ok(math.abs(r.ablate_value) < 1, "the ablation value is the channel's mean where it does not fire", tostring(r.ablate_value))
end
do   -- the same channel read by W_U (column 7 = 50 on every row, W_U's top direction): not in the null space
  local ctx, m, batches, kinds = planted(false)
  local r = CR.measure(ctx, m, batches, { tau = 20, kinds = kinds, channel = 7 })
  t.ok(r.null_channel < 1e-3, "W_U reads channel 7: e_7 outside the near-null space", tostring(r.null_channel))
end

t.done()
