-- Data-parallel training of a tiny MLP language model, for tests/lua/test_mpi.lua.
-- Every rank takes its shard of the same global batch; gradients are averaged with one
-- MPI_Allreduce; parameters are compared across ranks (checksum) at the end.
-- Prints "loss <step> <value>" lines (rank 0) and "checksum <hex>".
local ol = require "outlierlab"
local nn = ol.nn
local dist = require "outlierlab.util.dist"
local cfg = require("outlierlab.config").get{ steps = 12, B = 8, T = 16, V = 32, d = 32, seed = 5 }
local ctx = ol.Context{ seed = cfg.seed }
local emb = nn.Embedding(ctx, cfg.V, cfg.d, { name = "emb" })
local fc1 = nn.Linear(ctx, cfg.d, 4 * cfg.d, { name = "fc1" })
local fc2 = nn.Linear(ctx, 4 * cfg.d, cfg.V, { name = "fc2" })
local first, rows = dist.shard(cfg.B)
local groups = ol.ffi.new("float[2]", 1, 1)
local wd = ol.ffi.new("float[2]", 0.1, 0)
for _, p in ipairs(ctx:params()) do ol.C.ol_param_set_group(p, p.ndim >= 2 and 0 or 1) end
for step = 1, cfg.steps do
  ctx:reset()
  ctx:zero_grad()
  -- the global batch is a function of (seed, step) only; this rank reads rows [first, first+rows)
  local ids = ctx:tensor({ rows, cfg.T }, { dtype = "i32" })
  local tg = ctx:tensor({ rows, cfg.T }, { dtype = "i32" })
  for r = 0, rows - 1 do
    for t = 0, cfg.T - 1 do
      local g = (first + r) * cfg.T + t
      local tok = math.floor(ol.C.ol_rand_uniform(cfg.seed * 7777 + step, g) * cfg.V)
      ids.idata[r * cfg.T + t] = tok
      tg.idata[r * cfg.T + t] = (tok * 3 + 1) % cfg.V   -- a learnable map
    end
  end
  local loss = fc2(fc1(emb(ids)):gelu()):cross_entropy(tg)
  loss:backward()
  local l = ol.ffi.new("double[1]", loss:item())
  dist.allreduce_f64(l, 1, "sum")
  dist.allreduce_grads(ctx)   -- average over ranks = gradient of the global-batch mean
  ol.check_status(ol.C.ol_adamw_step(ctx.raw, 2e-2, 0.9, 0.95, 1e-8, 2, groups, wd, step))
  dist.print0(string.format("loss %d %.9g", step, l[0] / dist.size()))
end
dist.check_params(ctx)
dist.print0("checksum " .. dist.checksum(ctx))
