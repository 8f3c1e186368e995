-- examples/mlp.lua — a two-layer MLP learns y = sin(3·x0) + x1·x2 on 256 generated points.
--   bin/outlierlab run examples/mlp.lua --steps=400 --lr=0.003
local ol    = require "outlierlab"
local nn    = require "outlierlab.nn"
local optim = require "outlierlab.optim"
local cfg   = require("outlierlab.config").get{ steps = 300, lr = 1e-2, hidden = 64, n = 256, seed = 1 }

local ctx   = ol.Context{ seed = cfg.seed }          -- flat param/grad buffers + step arena
local model = nn.Sequential{
  nn.Linear(ctx, 3, cfg.hidden, { name = "fc1", std = 0.5 }), nn.GELU(),
  nn.Linear(ctx, cfg.hidden, 1, { name = "fc2", std = 0.1 }),
}
local opt   = optim.AdamW(ctx, { lr = cfg.lr, weight_decay = 0.01 })
local lr_at = optim.schedule{ kind = "cosine", lr = cfg.lr, min_lr = cfg.lr / 10, warmup = 20, steps = cfg.steps }

-- the data set lives in persistent tensors: they survive ctx:reset()
local x = ctx:tensor({ cfg.n, 3 }, { persistent = true, name = "x" }):uniform_(-1, 1, cfg.seed)
local y = ctx:tensor({ cfg.n, 1 }, { persistent = true, name = "y" })
for i = 0, cfg.n - 1 do y:set(math.sin(3 * x:get(i, 0)) + x:get(i, 1) * x:get(i, 2), i, 0) end

local first, last
for step = 1, cfg.steps do
  ctx:reset()                                  -- frees the last step's activations and tape
  ctx:zero_grad()
  local loss = (model(x) - y):square():mean_all()   -- ops record themselves on the tape
  loss:backward()                              -- gradients accumulate in the flat grad buffer
  optim.clip_grad_norm(ctx, 1.0)
  opt:step(lr_at(step))
  last = loss:item()
  first = first or last
  if step % 100 == 0 then print(string.format("step %4d  mse %.5f", step, last)) end
end
print(string.format("mse %.5f -> %.5f", first, last))
