-- tests/lua/lib/id_batches.lua — n persistent LM batches of token ids made by formulas, for the tests
-- that run a hand-made or imported decoder on fixed inputs.
--   local id_batches = dofile(ol.root .. "/tests/lua/lib/id_batches.lua")
--   id_batches(ctx, n, B, T, function(i, bi) return id end, function(i, bi) return target end)
-- i is the flat position (0 .. B·T − 1), bi the batch (1 .. n).
return function(ctx, n, B, T, id, target)
  local out = {}
  for bi = 1, n do
    local ids = ctx:tensor({ B, T }, { dtype = "i32", persistent = true })
    local tg = ctx:tensor({ B, T }, { dtype = "i32", persistent = true })
    for i = 0, B * T - 1 do ids.idata[i] = id(i, bi); tg.idata[i] = target(i, bi) end
    out[bi] = { ids = ids, targets = tg }
  end
  return out
end
