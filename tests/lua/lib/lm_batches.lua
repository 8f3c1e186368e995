-- tests/lua/lib/lm_batches.lua — random next-token batches in persistent tensors, shared by the
-- quantisation tests (test_quant.lua, test_quant_papers.lua, test_quant_formats.lua):
--   local batches = dofile(ol.root .. "/tests/lua/lib/lm_batches.lua")
--   batches(mc, vocab, { n = 2, B = 2, T = 16, seed = 0, first = nil })
--     -> n batches { ids, targets } (i32 (B, T)); ids from ol_rand_uniform(seed + i, ·), targets from
--        seed + i + 7; first = an id: every sequence holds it at position `at` (default 0: a planted
--        first token)
-- (a library of the tests, not a test: prove runs tests/lua/*.lua only)
local ol = require "outlierlab"
local C = ol.C

return function(mc, vocab, o)
  o = o or {}
  local n, B, T, seed = o.n or 2, o.B or 2, o.T or 16, o.seed or 0
  local out = {}
  for i = 1, n do
    local ids = mc:tensor({ B, T }, { dtype = "i32", persistent = true })
    local tg = mc:tensor({ B, T }, { dtype = "i32", persistent = true })
    for j = 0, B * T - 1 do
      ids.idata[j] = math.floor(C.ol_rand_uniform(seed + i, j) * vocab)
      if o.first and j % T == (o.at or 0) then ids.idata[j] = o.first end
      tg.idata[j] = math.floor(C.ol_rand_uniform(seed + i + 7, j) * vocab)
    end
    out[i] = { ids = ids, targets = tg }
  end
  return out
end
