-- Distributed analysis, for tests/lua/test_mpi_measure.lua: 8 sequences through a small
-- LLaMA-style model; each rank takes a disjoint block of sequences, streams h and the
-- attention probabilities into accumulators, and the accumulators are merged across ranks
-- (dist.allmerge). Rank 0 prints every number the NetCDF files would hold.
local ol = require "outlierlab"
local models = require "outlierlab.models"
local analysis = require "outlierlab.measure.metrics"
local probes = require "outlierlab.measure.probes"
local dist = require "outlierlab.util.dist"
local cfg = require("outlierlab.config").get{ nseq = 8, T = 16, seed = 3 }
ol.set_num_threads(1)
local ctx = ol.Context{ seed = cfg.seed }
local mcfg = models.preset("llama-quick")
local model = models.build(ctx, mcfg)
model:eval()
local hs = analysis.LayerStats{ T = cfg.T, C = mcfg.d_model, V = mcfg.vocab_size, topk = 3,
  rule = analysis.rule{ kind = "sigma", k = 2, scope = "batch" } }
local at = analysis.LayerAttn{ T = cfg.T, rule = "code", frac = 0.1 }
local P = probes.new{}
P:attach("h", hs)
P:attach("attn_probs", at)
local first, rows = dist.shard(cfg.nseq)
for s = first, first + rows - 1 do   -- one sequence per forward: the same batches on any rank count
  ctx:reset()
  for l = 0, mcfg.n_layer - 1 do hs:get(l) end   -- create every layer's accumulator now
  for _, st in pairs(hs.stats) do st:set_seq_offset(s) end   -- global sequence index
  local ids = ctx:tensor({ 1, cfg.T }, { dtype = "i32" })
  for t = 0, cfg.T - 1 do ids.idata[t] = math.floor(ol.C.ol_rand_uniform(cfg.seed, s * cfg.T + t) * mcfg.vocab_size) end
  ctx:no_grad(function() P:forward(model, { ids = ids }) end)
end
dist.allmerge(hs)
dist.allmerge(at)
local r, a = hs:result(), at:result()
for _, l in ipairs(r.layers) do
  local x = r[l]
  dist.print0(string.format("h %d n %d nseq %d mean %.17g std %.17g maxabs %.17g kurt %.17g inf %.17g out %d tok %d top %.17g %.17g %.17g",
    l, x.n, x.nseq, x.mean, x.std, x.max_abs, x.avg_kurtosis, x.avg_max_inf_norm, x.outliers.elements,
    x.outliers.tokens, x.avg_topk[1], x.avg_topk[2], x.avg_topk[3]))
  for i, tp in ipairs(x.top) do dist.print0(string.format("top %d %d %.9g seq %d pos %d ch %d", l, i, tp.value, tp.seq, tp.pos, tp.channel)) end
end
for _, l in ipairs(a.layers) do
  local x = a[l]
  dist.print0(string.format("attn %d nseq %d top %.17g median %.17g code %d", l, x.nseq, x.avg_topk[1], x.avg_median, x.code.count))
end
