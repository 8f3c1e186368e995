-- bench/analysis — forward-only analysis throughput of pretrained-model runs (make bench),
-- against this machine's own sgemm peak measured in the same run.
--
-- Three runs of the same analysis forward (embeddings, blocks, final norm: what the probes
-- see; no lm head) over the same batches of the gpt2-124m shape:
--   plain     the model in memory, no probe;
--   probes    the model in memory with so-fig3's probes (per-layer outlier statistics of the
--             layer outputs h: τ·mean rule per sequence, top-3, by channel and by token);
--   streamed  the same model read layer by layer from a BF16 checkpoint (outlierlab.pretrained.stream),
--             with the same probes: conversion BF16 -> fp32 included.
-- FLOPs per token (forward; causal masking not subtracted, the engine computes all T×T
-- scores): 2·12·L·C² (q, k, v, out, MLP up and down) + 4·L·T·C (scores and probabilities·V).
-- Targets: probes cost ≤ 10 % over plain; streamed ≥ 70 % of the in-memory GFLOP/s. Plain and
-- probes are timed in turn (--alternations, best of each), so a load change hits both.
--
-- The memory claim for a model larger than memory is a manual measurement (minutes, GBs of
-- disk), not part of make bench:
--   bin/outlierlab run bench/analysis.lua --big_layers=8 --big_dir=/tmp/llama-big
-- writes a LLaMA-2-7B-shaped BF16 checkpoint with that many layers (8 layers: 3.5 GB of BF16,
-- 7 GB as fp32), then analyses it streamed in a fresh process and reports its peak RSS.
local ol = require "outlierlab"
local hf = require "outlierlab.pretrained.hf"
local stream = require "outlierlab.pretrained.stream"
local models = require "outlierlab.models"
local analysis = require "outlierlab.measure.metrics"
local probes = require "outlierlab.measure.probes"
local progress = require "outlierlab.util.progress"
local ffi, C = ol.ffi, ol.C

local cfg = require("outlierlab.config").get {
  B = 1, T = 1024, batches = 4,      -- analysis batches of the gpt2-124m runs (SO's context: 1024)
  reps = 1,                          -- timed repetitions (the best counts), after a warm-up
  alternations = 2,                  -- plain and probes timed in turn this many times (the best of each counts)
  big_layers = 0,                    -- > 0: the manual large-model measurement instead
  big_dir = "/tmp/outlierlab-llama-big",
  big_only = "",                     -- internal: "make" or "run" (the two processes of the measurement)
  big_T = 512, big_batches = 2,
}
local now = progress.now

local function sgemm_peak()
  local ctx = ol.Context { params = 2 ^ 22, step_bytes = 2 ^ 28 }
  local M, K, N = 4096, 768, 3072
  local w = ctx:param("w", { N, K }):normal_(0, 0.02, 1)
  local best = math.huge
  for r = 0, 6 do
    ctx:reset()
    local x = ctx:tensor({ M, K }):uniform_(-1, 1, 2)
    local t0 = now()
    ctx:no_grad(function() return x:linear(w) end)
    if r > 0 then best = math.min(best, now() - t0) end
  end
  return 2 * M * K * N / best / 1e9
end

local function loader(V, B, T)
  return { step = 0, next = function(self, ctx)
    local ids = ctx:tensor({ B, T }, { dtype = "i32", name = "ids" })
    for i = 0, B * T - 1 do ids.idata[i] = (self.step * 7919 + i * 2654435761) % V end
    self.step = self.step + 1
    return { ids = ids }
  end }
end

local function so_fig3_probes(c, T)
  local P = probes.new{ points = { "h" } }
  P:attach("h", analysis.LayerStats{ T = T, C = c.d_model, V = c.vocab_size, topk = 3,
                                     rule = analysis.rule{ kind = "tau_mean", tau = 1000, scope = "sequence" } })
  return P
end

-- the analysis forward of an in-memory model: embed, blocks, final norm
local function forward(m, batch, P)
  local fn = P and P.fn
  if P then P:set_batch(batch) end
  local x = m:embed(batch, { probe = fn, train = false })
  for l, blk in ipairs(m.blocks) do x = blk:forward(x, m, l - 1, fn) end
  local norm = m.ln_f or m.norm
  x = norm:forward(x)
  if fn then fn("ln_f", m.cfg.n_layer, x) end
  if P then P:end_batch() end
end

local function flops_per_token(c, T)
  return 2 * 12 * c.n_layer * c.d_model ^ 2 + 4 * c.n_layer * T * c.d_model
end

local function rss_gb() local cur, peak = stream.rss() return (cur or 0) / 2 ^ 30, (peak or 0) / 2 ^ 30 end

-- ---------------------------------------------------------------- the large-model measurement
-- a LLaMA-2-7B-shaped BF16 checkpoint with n layers, one shard per layer, written tensor by
-- tensor (the generator never holds the model in fp32)
local function make_big(dir, n)
  local c = models.preset("tinyllama-120m", { vocab_size = 32000, block_size = 4096, n_layer = n, n_head = 32, n_kv_head = 32,
                                              d_model = 4096, d_ff = 11008, tie_embeddings = false })
  os.execute("rm -rf '" .. dir .. "' && mkdir -p '" .. dir .. "'")
  local ctx = ol.Context{ params = 1024, step_bytes = 2 ^ 32 }
  local groups = { { l = "g" } }
  for l = 0, n - 1 do groups[#groups + 1] = { l = l } end
  local weight_map = {}
  local all = hf.entries(c)
  for gi, g in ipairs(groups) do
    local fname = string.format("model-%05d-of-%05d.safetensors", gi, #groups)
    local w = ffi.gc(C.ol_st_writer_new(), C.ol_st_writer_free)
    local keep = {}
    for _, e in ipairs(all) do
      if #e.parts > 0 and ((g.l == "g" and e.layer == nil) or e.layer == g.l) then
        ctx:reset()
        local numel = 1
        for _, s in ipairs(e.shape) do numel = numel * s end
        local x = ctx:tensor({ numel })
        if #e.shape == 1 then x:fill_(1) else x:normal_(0, 0.02, gi * 1000 + #keep) end
        local h = ffi.new("uint16_t[?]", numel)
        assert(C.ol_hf_from_f32(x.data, numel, C.OL_ST_BF16, h) == 0)
        keep[#keep + 1] = h
        local name = (e.top and "" or "model.") .. e.hf
        assert(C.ol_st_writer_add(w, name, C.OL_ST_BF16, #e.shape, ffi.new("int64_t[?]", #e.shape, e.shape), h) == 0)
        weight_map[name] = fname
      end
    end
    assert(C.ol_st_writer_save(w, dir .. "/" .. fname) == 0, ffi.string(C.ol_error()))
    keep = nil
    collectgarbage()
  end
  local json = require "outlierlab.util.json"
  local f = io.open(dir .. "/model.safetensors.index.json", "w") f:write(json.encode({ weight_map = weight_map })) f:close()
  local conf = hf.to_hf.llama(c, { bos = 1, eos = 2 })
  conf.torch_dtype = "bfloat16"
  f = io.open(dir .. "/config.json", "w") f:write(json.encode(conf)) f:close()
end

if cfg.big_only == "make" then make_big(cfg.big_dir, cfg.big_layers) return end
if cfg.big_only == "run" then
  local t0 = now()
  local sm = stream.open(cfg.big_dir, { log = function(fmt, ...) print("  " .. string.format(fmt, ...)) end })
  local fp32, file = sm.d:sizes()
  local P = so_fig3_probes(sm.cfg, cfg.big_T)
  local r = sm:probe(P, loader(sm.cfg.vocab_size, 1, cfg.big_T), cfg.big_batches)
  local _, peak = rss_gb()
  local fl = flops_per_token(sm.cfg, cfg.big_T) * r.tokens
  print(string.format("  %s: %.2f GB of BF16 (%.2f GB as fp32); %d tokens in %.1f s (load %.1f s), %.1f GFLOP/s; peak RSS %.2f GB = %.0f %% of the fp32 size",
    sm:describe(), file / 2 ^ 30, fp32 / 2 ^ 30, r.tokens, now() - t0, r.load_seconds, fl / r.seconds / 1e9, peak, 100 * peak * 2 ^ 30 / fp32))
  return
end
if cfg.big_layers > 0 then
  local self_cmd = "bin/outlierlab run bench/analysis.lua --big_layers=" .. cfg.big_layers .. " --big_dir=" .. cfg.big_dir
  print(string.format("== streamed analysis of a LLaMA-2-7B-shaped model with %d layers (BF16, %s) ==", cfg.big_layers, cfg.big_dir))
  local t0 = now()
  assert(os.execute(self_cmd .. " --big_only=make") == 0, "writing the checkpoint failed")
  print(string.format("  checkpoint written in %.0f s", now() - t0))
  os.execute("sync")
  assert(os.execute(self_cmd .. " --big_only=run --big_T=" .. cfg.big_T .. " --big_batches=" .. cfg.big_batches) == 0)
  return
end

-- ---------------------------------------------------------------- make bench: gpt2-124m
print(string.format("== analysis throughput, gpt2-124m shape, %d batches of %d×%d tokens (threads: %d) ==", cfg.batches, cfg.B, cfg.T, ol.num_threads()))
local peak = sgemm_peak()
print(string.format("  sgemm peak (4096×768 · 768×3072): %.1f GFLOP/s", peak))
local c = models.preset("gpt2-124m", { vocab_size = 50257, bias = true })
local ctx = ol.Context{ seed = 1 }
local m = models.build(ctx, c)
m:eval()
local fpt = flops_per_token(c, cfg.T)
local ntok = cfg.B * cfg.T * cfg.batches
local function report(name, seconds, base)
  local gf = fpt * ntok / seconds / 1e9
  print(string.format("  %-9s %8.0f tokens/s  %6.1f GFLOP/s = %5.1f %% of sgemm peak%s", name, ntok / seconds, gf, 100 * gf / peak,
    base and string.format("  (%s)", base(gf)) or ""))
  return gf
end
local function time_in_memory(with_probes)
  local best = math.huge
  for r = 0, cfg.reps do
    local ld = loader(c.vocab_size, cfg.B, cfg.T)
    local P = with_probes and so_fig3_probes(c, cfg.T) or nil
    local t0 = now()
    ctx:no_grad(function()
      for _ = 1, cfg.batches do ctx:reset() forward(m, ld:next(ctx), P) end
    end)
    ctx:reset()
    if r > 0 then best = math.min(best, now() - t0) end
  end
  return best
end
-- plain and probes alternate (best of each): a load change on a shared machine hits both
local t_plain, t_probe = math.huge, math.huge
for _ = 1, cfg.alternations do
  t_plain = math.min(t_plain, time_in_memory(false))
  t_probe = math.min(t_probe, time_in_memory(true))
end
local g_plain = report("plain", t_plain)
report("probes", t_probe, function() return string.format("probes cost %+.1f %% over plain; target <= 10 %%", 100 * (t_probe / t_plain - 1)) end)
local dir = os.tmpname()
os.remove(dir)
hf.export(dir, ctx, m, { dtype = "BF16" })
local best = math.huge
local sm = stream.open(dir)   -- one skeleton for all repetitions, as one analysis uses one
for r = 0, cfg.reps do
  local P = so_fig3_probes(c, cfg.T)
  local t0 = now()
  sm:probe(P, loader(c.vocab_size, cfg.B, cfg.T), cfg.batches)
  if r > 0 then best = math.min(best, now() - t0) end
  sm.loaded = nil               -- the next repetition converts every layer again
end
sm:close()
os.execute("rm -rf '" .. dir .. "'")
report("streamed", best, function(g) return string.format("%.0f %% of the in-memory plain GFLOP/s; target >= 70 %%", 100 * g / g_plain) end)
