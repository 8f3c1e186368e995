-- bench/train — training throughput against this machine's own sgemm peak (make bench).
--
-- Peak: the best of several engine matmuls (ol_linear: one cblas_sgemm) of the shape
-- x (4096, 768) · Wᵀ, W (3072, 768), i.e. a GPT-2 MLP up-projection for 4096 tokens,
-- 2·4096·768·3072 = 19.3 GFLOP each.
--
-- A training step here is exactly what train.run does: forward, backward, clip, AdamW.
-- FLOPs per step (the PaLM / nanoGPT MFU convention; causal masking is not subtracted
-- because the engine computes the full T×T scores):
--   6·N·B·T            N = parameters that take part in a matmul: 12·L·C² per block
--                      (q, k, v, out-proj C×C each; MLP 2·C·F with F = 4C) plus V·C for the
--                      (tied) lm head; the position embedding and LayerNorms are not counted;
--   + 12·L·B·T²·C      attention scores Q·Kᵀ and probabilities·V: 2·2·T²·C per layer forward,
--                      times 3 for forward + backward.
-- Achieved GFLOP/s = FLOPs per step / median step time; % of peak = that / sgemm peak.
--
-- The machine may be shared: the sgemm peak is measured again right before each model and the
-- load average is printed, so a reader can judge the numbers.
--
--   bin/outlierlab run bench/train.lua [--steps=3] [--big_B=1] [--big_T=1024] [--mini_B=8]
--                                      [--which=both|mini|big] [--phases=true]
local ol = require "outlierlab"
local models = require "outlierlab.models"
local train = require "outlierlab.train.loop"
local progress = require "outlierlab.util.progress"
local optim = require "outlierlab.optim"
local C = ol.C

local cfg = require("outlierlab.config").get {
  steps = 3,            -- timed steps per model (after one untimed warm-up step)
  big_B = 1, big_T = 1024,
  mini_B = 8, mini_T = 256,
  which = "both",       -- both | mini | big
  phases = true,        -- also time forward / backward / optimizer separately
  peak_reps = 6,
}

local now = progress.now
local function median(xs)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  local n = #s
  if n == 0 then return 0 / 0 end
  return n % 2 == 1 and s[(n + 1) / 2] or 0.5 * (s[n / 2] + s[n / 2 + 1])
end

print(string.format("== training throughput (threads: %d) ==", ol.num_threads()))

-- ------------------------------------------------------------------ sgemm peak
local function sgemm_peak()
  local ctx = ol.Context { params = 2 ^ 22, step_bytes = 2 ^ 28 }
  local M, K, N = 4096, 768, 3072
  local w = ctx:param("w", { N, K }):normal_(0, 0.02, 1)
  local best = math.huge
  for r = 0, cfg.peak_reps do
    ctx:reset()
    local x = ctx:tensor({ M, K }):uniform_(-1, 1, 2)
    local t0 = now()
    ctx:no_grad(function() return x:linear(w) end)
    local dt = now() - t0
    if r > 0 and dt < best then best = dt end     -- rep 0 warms up OpenBLAS
  end
  return 2 * M * K * N / best / 1e9
end
local function loadavg()
  local f = io.open("/proc/loadavg")
  if not f then return "?" end
  local s = f:read("*l")
  f:close()
  return (s:match("^(%S+ %S+ %S+)")) or "?"
end

-- ------------------------------------------------------------------ a random-token loader
local function random_loader(B, T, V, seed)
  local l = { pos = 0 }
  function l:next(ctx)
    local ids = ctx:tensor({ B, T }, { dtype = "i32", name = "ids" })
    local tg = ctx:tensor({ B, T }, { dtype = "i32", name = "targets" })
    for i = 0, B * T - 1 do
      ids.idata[i] = math.floor(C.ol_rand_uniform(seed, self.pos * 2) * V)
      tg.idata[i] = math.floor(C.ol_rand_uniform(seed, self.pos * 2 + 1) * V)
      self.pos = self.pos + 1
    end
    return { ids = ids, targets = tg }
  end
  function l:state() return { pos = self.pos } end
  function l:set_state(s) self.pos = s.pos end
  return l
end

local function flops_per_step(mc, B, T)
  local L, Cd, V = mc.n_layer, mc.d_model, mc.vocab_size
  local F = mc.d_ff
  local n_mm = L * (4 * Cd * Cd + 2 * Cd * F) + V * Cd
  return 6 * n_mm * B * T + 12 * L * B * T * T * Cd, n_mm
end

-- ------------------------------------------------------------------ one model
local function bench(name, preset, B, T)
  local peak = sgemm_peak()
  print(string.format("sgemm peak (ol_linear 4096x768 . (3072x768)^T, best of %d): %.1f GFLOP/s; load average %s",
                      cfg.peak_reps, peak, loadavg()))
  local mc = models.preset(preset, { block_size = math.max(T, 1) })
  local ctx = ol.Context { seed = 1 }
  local m = models.build(ctx, mc)
  local loader = random_loader(B, T, mc.vocab_size, 9)
  local times = {}
  train.run { ctx = ctx, model = m, loader = loader,
              cfg = { steps = cfg.steps + 1, lr = 1e-4, progress = "off" },
              log = function(r) if r.kind == "step" and r.step > 1 then times[#times + 1] = r.dt end end }
  local dt = median(times)
  local flops, n_mm = flops_per_step(mc, B, T)
  local gf = flops / dt / 1e9
  print(string.format("%-10s %s: %d params (%d in matmuls), B=%d T=%d: %.3f s/step, %.0f tok/s, %.1f GFLOP/s = %.1f%% of the sgemm peak (step arena peak %.0f MiB)",
                      name, preset, m:num_params(), n_mm, B, T, dt, B * T / dt, gf, 100 * gf / peak,
                      ctx:step_peak() / 2 ^ 20))
  if cfg.phases then
    -- the same step split into its phases (median over the timed steps)
    local opt = optim.AdamW(ctx, { lr = 1e-4 })
    local tf, tb, to = {}, {}, {}
    for s = 1, cfg.steps + 1 do
      ctx:zero_grad()
      ctx:reset()
      local batch = loader:next(ctx)
      local t0 = now()
      local loss = m:loss(batch, { train = true, step = s })
      local t1 = now()
      loss:backward()
      local t2 = now()
      ctx:reset()
      local _, gscale = optim.clip_factor(ctx, 1.0)   -- as train.run: the clip factor folded into AdamW
      opt:step(1e-4, gscale)
      local t3 = now()
      if s > 1 then tf[#tf + 1], tb[#tb + 1], to[#to + 1] = t1 - t0, t2 - t1, t3 - t2 end
    end
    local f, b, o = median(tf), median(tb), median(to)
    -- matmul share: forward 2·N·B·T + 4·L·B·T²·C, backward twice that
    local ff = flops / 3
    print(string.format("           phases: forward %.3f s (%.1f GFLOP/s), backward %.3f s (%.1f GFLOP/s), clip+AdamW %.3f s " ..
                        "= %.1f%% of the phases (goal <= 5%%)",
                        f, ff / f / 1e9, b, 2 * ff / b / 1e9, o, 100 * o / (f + b + o)))
  end
  ctx:reset()
  return { name = name, dt = dt, gflops = gf, pct = 100 * gf / peak }
end

if cfg.which ~= "mini" and cfg.which ~= "big" and cfg.which ~= "both" then
  error("bench/train: --which must be both, mini or big", 0)
end
if cfg.which ~= "big" then bench("reduced", "gpt2-mini", cfg.mini_B, cfg.mini_T) end
if cfg.which ~= "mini" then
  local r2 = bench("paper", "gpt2-124m", cfg.big_B, cfg.big_T)
  print(string.format("target: >= 75%% of the sgemm peak for the gpt2-124m shape: %s (%.1f%%)",
                      r2.pct >= 75 and "met" or "NOT met", r2.pct))
end
print(string.format("load average at the end: %s", loadavg()))
