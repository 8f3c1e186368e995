-- Training through train.run with rank-invariant shards, for tests/lua/test_determinism.lua:
-- a tiny LLaMA, GPT-2 or BERT (--family=) trained a few steps on a global batch of B rows cut into
-- --shards fixed shards; run with any OMP_NUM_THREADS and under mpirun -np 1, 2, 4. Rank 0
-- prints "ranks <n> threads <t> shards <S> loss <last loss> checksum <parameters' FNV-1a>".
local ol = require "outlierlab"
local models = require "outlierlab.models"
local train = require "outlierlab.train.loop"
local dist = require "outlierlab.util.dist"
local cfg = require("outlierlab.config").get { shards = 4, steps = 3, family = "llama", B = 8, T = 32 }
local V = 64
local mc = models.preset(cfg.family .. "-tiny", { block_size = cfg.T, vocab_size = V })
local ctx = ol.Context { seed = 3 }
local m = models.build(ctx, mc)
local B, T = cfg.B, cfg.T
-- the global batch of step s is a function of (s, row) only; this rank builds its rows
local first, rows = dist.shard(B)
local loader = { pos = 0 }
function loader:next(c)
  local ids = c:tensor({ rows, T }, { dtype = "i32", name = "ids" })
  local tg = c:tensor({ rows, T }, { dtype = "i32", name = "targets" })
  for r = 0, rows - 1 do
    for t = 0, T - 1 do
      local g = self.pos * B * T + (first + r) * T + t
      ids.idata[r * T + t] = math.floor(ol.C.ol_rand_uniform(5, 2 * g) * V)
      tg.idata[r * T + t] = (ids.idata[r * T + t] * 7 + 3) % V
    end
  end
  self.pos = self.pos + 1
  if cfg.family ~= "bert" then return { ids = ids, targets = tg } end
  -- masked LM: targets at every 5th token of the global rows 0-2 only, so the shards count
  -- differently and the last shards have no target at all
  for r = 0, rows - 1 do
    for t = 0, T - 1 do
      if first + r > 2 or t % 5 ~= 0 then tg.idata[r * T + t] = -100 end
    end
  end
  return { ids = ids, targets = tg, token_type = c:tensor({ rows, T }, { dtype = "i32" }):fill_(0),
           pad_mask = c:tensor({ rows, T }, { dtype = "i32" }):fill_(1) }
end
local res = train.run { ctx = ctx, model = m, loader = loader,
                        cfg = { steps = cfg.steps, lr = 1e-2, progress = "off", shards = cfg.shards } }
dist.print0(string.format("ranks %d threads %d shards %d loss %.9g checksum %s", dist.size(), ol.num_threads(),
                          cfg.shards, res.losses[cfg.steps], dist.checksum(ctx)))
