-- bench/attention — the attention variants' speed and a training step's memory (make bench).
--
-- 1. Forward + backward wall time of every variant (fused C path, engine/attention.c) on
--    q, k, v (B, NH, T, HD) with HD = 64, causal mask, L = Σ out ⊙ R, at T = 256 and 1024;
--    median of `reps` runs after a warm-up. The plain-op softmax (attention.reference) is
--    timed beside it. GFLOP/s counts 4·B·NH·T²·HD forward + 8·B·NH·T²·HD backward (the
--    full T×T, causal masking not subtracted).
-- 2. Peak step-arena memory (ctx:step_peak) of one GPT-2 training step (forward + backward)
--    at T = 1024 with the fused attention, beside the same step with every layer's
--    probabilities kept (the plain-op reference).
--
--   bin/outlierlab run bench/attention.lua [--B=2] [--NH=4] [--reps=3] [--mem_T=1024] [--mem_preset=gpt2-tiny]
local ol = require "outlierlab"
local attention = require "outlierlab.nn.attention"
-- the documented user-defined variant "softmax_temp" lives outside the library
if not attention.registry.softmax_temp then dofile(require("outlierlab").root .. "/examples/attention_example.lua") end
local progress = require "outlierlab.util.progress"
local models = require "outlierlab.models"

local cfg = require("outlierlab.config").get {
  B = 2, NH = 4, HD = 64, reps = 3, mem_T = 1024, mem_B = 1, mem_preset = "gpt2-tiny", skip_mem = false,
}
local now = progress.now

local function median(xs)
  table.sort(xs)
  local n = #xs
  return n % 2 == 1 and xs[(n + 1) / 2] or 0.5 * (xs[n / 2] + xs[n / 2 + 1])
end

print(string.format("== attention forward+backward (B=%d, NH=%d, HD=%d, causal; threads: %d) ==",
  cfg.B, cfg.NH, cfg.HD, ol.num_threads()))
print(string.format("%-26s %6s %10s %10s %9s", "variant", "T", "fwd ms", "fwd+bwd ms", "GFLOP/s"))

local variants = { "softmax", { kind = "clipped_softmax", gamma = -0.025 }, "softmax1", "sigmoid", "fixed_bias",
                   "ca_bias", "attn_bias", { kind = "gated", gate = "linear" }, { kind = "gated", gate = "mlp" },
                   { kind = "gated", gate = "all_heads_linear" }, "ca_scale", "softmax_temp" }
local function vname(s) return type(s) == "string" and s or s.kind .. (s.gate and ("/" .. s.gate) or "") end

for _, T in ipairs({ 256, 1024 }) do
  local B, NH, HD = cfg.B, cfg.NH, cfg.HD
  local ctx = ol.Context({ params = 2 ^ 22, step_bytes = 2 ^ 33 })
  local shape = { B, NH, T, HD }
  local q = ctx:tensor(shape, { persistent = true }):normal_(0, 1, 1):requires_grad_(true)
  local k = ctx:tensor(shape, { persistent = true }):normal_(0, 1, 2):requires_grad_(true)
  local v = ctx:tensor(shape, { persistent = true }):normal_(0, 1, 3):requires_grad_(true)
  local x = ctx:tensor({ B, T, NH * HD }, { persistent = true }):normal_(0, 1, 4):requires_grad_(true)
  local R = ctx:tensor(shape, { persistent = true }):normal_(0, 1, 5)
  local rows = {}
  for _, spec in ipairs(variants) do rows[#rows + 1] = { spec = spec } end
  rows[#rows + 1] = { spec = "softmax", reference = true }
  for _, row in ipairs(rows) do
    local A = attention.new(ctx, row.spec, { d_model = NH * HD, n_head = NH, name = "b", reference = row.reference })
    local tf, tb = {}, {}
    for rep = 0, cfg.reps do
      ctx:reset()
      local t0 = now()
      local o = A:forward(q, k, v, x, { causal = true })
      local t1 = now()
      ;(o * R):sum_all():backward()
      local t2 = now()
      if rep > 0 then tf[#tf + 1] = t1 - t0; tb[#tb + 1] = t2 - t0 end
    end
    local f, fb = median(tf), median(tb)
    local flops = 12 * B * NH * T * T * HD
    print(string.format("%-26s %6d %10.2f %10.2f %9.1f", vname(row.spec) .. (row.reference and " (plain ops)" or ""), T,
      f * 1e3, fb * 1e3, flops / fb / 1e9))
  end
end

-- ------------------------------------------------------------------ training-step memory
if not cfg.skip_mem then
  local T, B = cfg.mem_T, cfg.mem_B
  print(string.format("\n== peak step memory of one training step: %s, B=%d, T=%d ==", cfg.mem_preset, B, T))
  -- every attention object in a model, wherever the model keeps it
  local function attention_objects(root)
    local seen, out = {}, {}
    local function walk(t)
      if type(t) ~= "table" or seen[t] then return end
      seen[t] = true
      if getmetatable(t) == attention.Attn then out[#out + 1] = t return end
      for _, v in pairs(t) do walk(v) end
    end
    walk(root)
    return out
  end
  local results = {}
  for _, reference in ipairs({ false, true }) do
    local ctx = ol.Context({ seed = 1 })
    local mcfg = models.preset(cfg.mem_preset, { block_size = T })
    local m = models.build(ctx, mcfg)
    local objs = attention_objects(m)
    for _, a in ipairs(objs) do a.use_reference = reference end
    local ids = ctx:tensor({ B, T }, { dtype = "i32", persistent = true })
    local tg = ctx:tensor({ B, T }, { dtype = "i32", persistent = true })
    for i = 0, B * T - 1 do
      ids.idata[i] = math.floor(ol.C.ol_rand_uniform(3, i) * mcfg.vocab_size)
      tg.idata[i] = math.floor(ol.C.ol_rand_uniform(4, i) * mcfg.vocab_size)
    end
    ctx:reset()
    ol.C.ol_step_reset_peak(ctx.raw)
    local t0 = now()
    local loss = m:loss({ ids = ids, targets = tg })
    loss:backward()
    local dt = now() - t0
    results[#results + 1] = { peak = ctx:step_peak(), time = dt, layers = #objs, heads = mcfg.n_head }
  end
  local probs = results[1].layers * B * results[1].heads * T * T * 4
  print(string.format("fused attention             peak %8.1f MB   step %6.2f s", results[1].peak / 2 ^ 20, results[1].time))
  print(string.format("probabilities kept (plain)  peak %8.1f MB   step %6.2f s", results[2].peak / 2 ^ 20, results[2].time))
  print(string.format("(L·B·NH·T² floats = %.1f MB for %d attention layers; ratio plain/fused %.1fx)",
    probs / 2 ^ 20, results[1].layers, results[2].peak / results[1].peak))
end
