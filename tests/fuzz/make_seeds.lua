-- tests/fuzz/make_seeds.lua — the realistic seeds of the fuzz corpus: a checkpoint (weights, AdamW
-- moments, JSON metadata) and a weights-only one as checkpoint.save writes them, and one token
-- file of each format as data.write_tokens writes them (the malformed seeds are tests/hostile/).
--   bin/outlierlab run tests/fuzz/make_seeds.lua
local ol = require "outlierlab"
local nn = require "outlierlab.nn"
local optim = require "outlierlab.optim"
local checkpoint = require "outlierlab.train.checkpoint"
local data = require "outlierlab.data"
local dir = ol.root .. "/tests/fuzz/corpus"
local ctx = ol.Context{ seed = 1, params = 4096, step_bytes = 2^20 }
local m = nn.Sequential{ nn.Linear(ctx, 3, 8, { name = "fc1" }), nn.GELU(), nn.Linear(ctx, 8, 2, { name = "fc2" }) }
local opt = optim.AdamW(ctx, { lr = 1e-3 })
checkpoint.save(dir .. "/safetensors/checkpoint_mlp.safetensors", ctx,
  { config = { train = { steps = 3, lr = 1e-3 }, model = { name = "mlp" } }, step = 3, optim = opt:state(),
    data = { step = 3 }, extra = { losses = { 1.5, 1.25, 1.0 } } })
checkpoint.save(dir .. "/safetensors/weights_only.safetensors", ctx, { step = 1 }, { optim = false })
local ids = {}
for i = 1, 64 do ids[i] = (i * 37) % 300 end
data.write_tokens(dir .. "/tokens/llmc_64.bin", ids, { format = "llmc" })
data.write_tokens(dir .. "/tokens/raw16_64.bin", ids, { format = "raw16" })
print("seeds written to " .. dir)
