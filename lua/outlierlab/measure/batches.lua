-- measure/batches — held-out batches through a probed model, the blocks of a model and token labels
-- (what the analyses of trained and imported models share).
local dist = require "outlierlab.util.dist"
local batcher = require "outlierlab.data.batcher"

local M = {}

-- run fn(batch) over n held-out batches with the probe P attached (no gradients)
function M.probe_batches(ctx, m, P, corpus, spec, n)
  if corpus.kind == "text" then return require("outlierlab.pretrained").probe_batches(ctx, m, P, corpus, spec, n) end
  local EB = batcher.eval_B(spec)
  local va = batcher.batcher(corpus, { B = EB, T = spec.batch.T, kind = spec.batch.kind,
                                 seed = spec.seed + 1, split = "val" })
  -- Under MPI with mergeable accumulators the ranks take turns (batch i on rank i mod size)
  -- and merge at the end; otherwise every rank sees every batch (still correct, no speedup).
  local spread = dist.size() > 1 and P:distributable()
  local size, rank = dist.size(), dist.rank()
  ctx:no_grad(function()
    for i = 0, n - 1 do
      ctx:reset()
      if spread and i % size ~= rank then
        va.step = va.step + 1   -- another rank's batch
      else
        local batch = va:next(ctx)
        batch.seq_offset = i * EB   -- global index of its first sequence
        P:forward(m, batch)
      end
    end
  end)
  ctx:reset()
  if spread then P:merge_ranks() end
end

-- for l, blk in M.blocks(m): every block of a model with its weights (l 1-based); a streamed
-- model (outlierlab.pretrained.stream) loads each layer in turn
function M.blocks(m)
  if m.streamed then return m:blocks() end
  return ipairs(m.blocks or m.layers)
end

-- a readable label for a token id
function M.token_label(corpus, id)
  local s = corpus.vocab[id]
  if s == nil then return "#" .. tostring(id) end
  if s == "\n" then return "\\n" end
  return s
end

return M
