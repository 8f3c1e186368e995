-- test_quant_formats — the Lua face of engine/formats.c (outlierlab.compress.formats) and the
-- format and KV-cache settings of outlierlab.compress.rtn (docs/reference/compression.md):
--   * formats.round / quantize agree with hand-computed values (E4M3 per row, MXFP4 and NVFP4 blocks);
--   * every FORMAT_SETTINGS / KV_SETTINGS entry runs on llama-quick: finite losses, FP8 E4M3 close
--     to FP, the model restored bit for bit, a bad format named in the error;
--   * a planted attention sink (one token's key 30× the others' in one channel): with the KV cache
--     at 4 bits, keeping the first token in full precision makes the logits' error smaller when the
--     sink is the first token, not when it is token 5; keeping the largest token helps in both;
--     without the sink, keeping the first token changes little.
-- (The round-trip tests of every representable value are tests/c/test_formats.c.)
local t = require "tap"
local ol = require "outlierlab"
local models = require "outlierlab.models"
local quant = require "outlierlab.compress.rtn"
local formats = require "outlierlab.compress.formats"
local C = ol.C

local ctx = ol.Context({ seed = 3 })
do
  t.is(formats.round(449, "e4m3"), 448, "round: E4M3 saturates at 448")
  t.is(formats.round(0.3, "e2m1"), 0.5, "round: E2M1 0.3 → 0.5")
  t.is(formats.round(3 * 2 ^ -17, "e5m2"), 2 ^ -15, "round: E5M2 subnormal tie to even")
  local x = ctx:tensor({ 2, 3 }):load({ 896, 3, 1.1, 448, 0.3, -7 })
  local y = formats.quantize(x, "e4m3"):tolist()
  -- row 0: s = 2: 1.1/2 = 0.55 → E4M3 0.5625 (quantum 1/32 in [0.5, 1)) → 1.125; row 1: s = 1
  t.ok(y[1] == 896 and y[2] == 3 and y[3] == 1.125 and y[4] == 448 and math.abs(y[5] - 0.3125) < 1e-9 and y[6] == -7,
    "quantize e4m3 per row: hand-computed", table.concat(y, " "))
  local b = ctx:tensor({ 1, 32 }):fill_(0)
  b.data[0], b.data[1], b.data[2] = 12, 7, -2.5
  local q = formats.quantize(b, "mxfp4"):tolist()
  t.ok(q[1] == 12 and q[2] == 8 and q[3] == -2, "quantize mxfp4: amax 12 → scale 2; 7 → 8, −2.5 → −2 (ties to even)")
  local n = formats.quantize(b, "nvfp4"):tolist()
  -- tensor scale 12/2688; the block's E4M3(12/6/(12/2688)) = E4M3(448) = 448 → scale 2 (up to fp32)
  t.ok(math.abs(n[1] - 12) < 1e-5 and math.abs(n[2] - 8) < 1e-5 and math.abs(n[3] + 2) < 1e-5, "quantize nvfp4: the block holding the tensor's amax has scale amax/6")
  t.throws(function() formats.quantize(x, "fp6") end, "unknown format", "an unknown format is an error")
  t.throws(function() formats.quantize(x, "e4m3", "block") end, "scaling must be", "an unknown scaling is an error")
  ctx:reset()
end

-- llama-quick with random weights, batches whose first token is id 0
local function setup(seed, at)
  local mc = ol.Context({ seed = seed })
  local cfg = models.preset("llama-quick", {})
  local m = models.build(mc, cfg)
  for _, p in ipairs(mc:params()) do if p.ndim >= 2 then p:normal_(0, 0.2, 800 + p.param_index) end end
  -- every sequence starts with id 0 (the planted sink's token); other positions may hold 0 too
  return mc, m, dofile(ol.root .. "/tests/lua/lib/lm_batches.lua")(mc, cfg.vocab_size, { B = 4, seed = 50, first = 0, at = at }), cfg
end
local function logits(mc, m, bs)
  local out = {}
  for _, b in ipairs(bs) do
    mc:reset()
    for _, v in ipairs(mc:no_grad(function() return m:forward(b, { train = false }) end):tolist()) do out[#out + 1] = v end
  end
  mc:reset()
  return out
end
local function mse(a, b)
  local s = 0
  for i = 1, #a do s = s + (a[i] - b[i]) ^ 2 end
  return s / #a
end

do
  local mc, m, bs = setup(11)
  local fp = quant.evaluate(mc, m, bs)
  local r = quant.run(mc, m, bs, { settings = (function()
    local all = {}
    for _, s in ipairs(quant.FORMAT_SETTINGS) do all[#all + 1] = s end
    for _, s in ipairs(quant.KV_SETTINGS) do all[#all + 1] = s end
    return all end)() })
  for _, s in ipairs(r.settings) do
    t.ok(s.applicable and s.loss == s.loss and math.abs(s.loss) < 100, s.label .. ": a finite loss", s.loss)
  end
  -- the logits' error of each format (signs cancel in the loss): finer formats, smaller errors
  local ref, d = logits(mc, m, bs), {}
  for _, s in ipairs(quant.FORMAT_SETTINGS) do
    local h = quant.apply(mc, m, s)
    d[s.name] = mse(logits(mc, m, bs), ref)
    h.restore()
  end
  t.diag(string.format("logits MSE against FP: E4M3 %.3g, E5M2 %.3g, NVFP4 %.3g, MXFP4 %.3g", d.w8a8_e4m3, d.w8a8_e5m2, d.w4a4_nvfp4, d.w4a4_mxfp4))
  t.ok(d.w8a8_e4m3 < d.w8a8_e5m2 and d.w8a8_e5m2 < d.w4a4_nvfp4 and d.w4a4_nvfp4 < d.w4a4_mxfp4,
    "logits' error: E4M3 (3 mantissa bits) < E5M2 (2) < NVFP4 (blocks of 16, E4M3 scales) < MXFP4 (blocks of 32, powers of two)")
  t.is(quant.evaluate(mc, m, bs), fp, "after the format settings the model is FP again, bit for bit")
  t.throws(function() quant.apply(mc, m, { wfmt = "fp6" }) end, "wfmt = \"fp6\" is not a format", "a bad wfmt is an error naming the key")
  t.throws(function() quant.apply(mc, m, { kv_bits = 4, kv_keep = -1 }) end, "kv_keep", "a negative kv_keep is an error")
  t.is(quant.evaluate(mc, m, bs), fp, "after a failed apply the model is FP again")
end

-- the planted sink: token 0's embedding on channel j only, a large ln1 gain at j, channel j
-- of every other token's embedding zero, so that token 0's key is about 30× the others' there
local function kv_errors(plant, at, settings)
  local mc, m, bs, cfg = setup(12, at)
  local j = 7
  if plant then
    local E = m.embed_tokens.weight
    for v = 0, cfg.vocab_size - 1 do
      for c = 0, cfg.d_model - 1 do
        if v == 0 then E.data[c] = c == j and 1 or 0
        elseif c == j then E.data[v * cfg.d_model + c] = 0 end
      end
    end
    for _, blk in ipairs(m.blocks) do blk.ln1.weight.data[j] = 30 end
  end
  local ref = logits(mc, m, bs)
  local out = {}
  for i, s in ipairs(settings) do
    local h = quant.apply(mc, m, s)
    out[i] = mse(logits(mc, m, bs), ref)
    h.restore()
  end
  return unpack(out)
end
local KV4, KEEP1, TOP1 = { kv_bits = 4 }, { kv_bits = 4, kv_keep = 1 }, { kv_bits = 4, kv_top = 1 }
local e0, e1, et = kv_errors(true, 0, { KV4, KEEP1, TOP1 })
t.ok(e1 < 0.5 * e0, "planted sink at the first token: KV4 with the first token kept has less than half the logits' error of KV4",
  string.format("MSE %.3g kept vs %.3g not", e1, e0))
t.ok(et < 0.5 * e0, "planted sink at the first token: KV4 keeping the largest token finds it", string.format("MSE %.3g vs %.3g", et, e0))
t.diag(string.format("planted sink at token 0: logits MSE KV4 %.3g, first token kept %.3g, largest token kept %.3g", e0, e1, et))
local m0, m1, mt = kv_errors(true, 5, { KV4, KEEP1, TOP1 })
t.ok(mt < 0.5 * m0 and m1 > 0.5 * m0, "planted sink at token 5: keeping the first token does not help, keeping the largest does",
  string.format("MSE KV4 %.3g, first kept %.3g, largest kept %.3g", m0, m1, mt))
t.diag(string.format("planted sink at token 5: logits MSE KV4 %.3g, first token kept %.3g, largest token kept %.3g", m0, m1, mt))
local n0, n1 = kv_errors(false, 0, { KV4, KEEP1 })
t.ok(n1 <= n0 * 1.5 and n0 < e0, "no sink: keeping the first token changes the error less, and the error is smaller than with the sink",
  string.format("MSE %.3g kept vs %.3g not", n1, n0))
t.diag(string.format("no sink: logits MSE KV4 %.3g, KV4 first token kept %.3g", n0, n1))

return t.done()
