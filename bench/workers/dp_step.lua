-- Worker for bench/mpi.lua: data-parallel training steps of a reduced GPT-2 (the gpt2-mini
-- preset: 6 layers, d 384, T 256) on random tokens; every rank takes its shard of one global
-- batch. Rank 0 prints tokens/s of the whole job and the fraction of a step spent in the
-- gradient allreduce.
local ol = require "outlierlab"
local models = require "outlierlab.models"
local optim = require "outlierlab.optim"
local dist = require "outlierlab.util.dist"
local cfg = require("outlierlab.config").get{ B = 8, T = 256, steps = 6, warm = 2, preset = "gpt2-mini", tree = false }
-- tree = true: the rank-invariant sum (ol_dist_allreduce_grads_tree, recursive doubling in a
-- fixed order, what train.run's cfg.shards uses) instead of one MPI_Allreduce
local ctx = ol.Context{ seed = 1 }
local mcfg = models.preset(cfg.preset, { block_size = cfg.T })
local model = models.build(ctx, mcfg)
local opt = optim.AdamW(ctx, { lr = 3e-4 })
local first, rows = dist.shard(cfg.B)
local t_step, t_comm, tokens = 0, 0, 0
for step = 1, cfg.warm + cfg.steps do
  local t0 = dist.wtime()
  ctx:reset()
  ctx:zero_grad()
  local ids = ctx:tensor({ rows, cfg.T }, { dtype = "i32" })
  local tg = ctx:tensor({ rows, cfg.T }, { dtype = "i32" })
  for i = 0, rows * cfg.T - 1 do
    local g = first * cfg.T + i
    ids.idata[i] = math.floor(ol.C.ol_rand_uniform(step, g) * mcfg.vocab_size)
    tg.idata[i] = math.floor(ol.C.ol_rand_uniform(step + 1000, g) * mcfg.vocab_size)
  end
  local loss = model:loss({ ids = ids, targets = tg }, { train = true })
  loss:backward()
  dist.barrier()   -- separate waiting for the slowest rank from the transfer itself
  local t1 = dist.wtime()
  if cfg.tree then ol.check_status(ol.C.ol_dist_allreduce_grads_tree(ctx.raw, 1 / dist.size()))
  else dist.allreduce_grads(ctx) end
  local t2 = dist.wtime()
  opt:step(3e-4)
  local t3 = dist.wtime()
  if step > cfg.warm then
    t_step = t_step + (t3 - t0)
    t_comm = t_comm + (t2 - t1)
    tokens = tokens + cfg.B * cfg.T
  end
end
dist.check_params(ctx)
dist.print0(string.format("ranks %d tokens/s %.1f comm_fraction %.4f step_s %.4f params %d",
  dist.size(), tokens / t_step, t_comm / t_step, t_step / cfg.steps, ctx:num_params()))
