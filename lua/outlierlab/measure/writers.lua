-- analysis.writers — who writes each token's state in a SwiGLU model (the LLaMA family): every
-- layer's FFN write f = W_down·x_down (x_down = silu(W_gate·x̂) ⊙ W_up·x̂, x̂ the normalised FFN
-- input) decomposed neuron by neuron, at position 0 (the first token) and at the other positions
-- (docs/findings/organism.md, "Why the ratio stops"; scripts/organism-writers.lua, organism-search.lua).
--
--   local writers = require "outlierlab.measure.writers"
--   local res = writers.measure(ctx, m, function() return loader:next(ctx) end, 8)
--   for _, line in ipairs(writers.lines(res)) do print(line) end
--
-- res[l] (l = 0 … L−1) = {
--   first = { h, out, j, share, xd, cg, cu, gr, ur, dc, top_channel } — position 0 of the first
--     batch (a causal model's first token has the same state in every sequence): ‖h‖ after the
--     layer, ‖f‖, the neuron j with the largest contribution |x_down_j|·‖W_down[:, j]‖, the share
--     of f it carries (its write projected on f, over ‖f‖²), x_down_j, the cosines of its gate and
--     up rows with x̂, its gate / up row and down column norms over the layer's medians, and the
--     share of its down column's largest channel;
--   ordinary = the medians over every other position of h, out, share, |xd|, |cg|, |cu|, dc (of
--     each token's own top neuron), and per token id: same (the median over ids of the share of
--     an id's occurrences whose top neuron is that id's most frequent one: 1 = a fixed neuron per
--     token, a lookup table), n_ids, n_neurons (distinct neurons that are some id's). }
local ffi = require "ffi"
local probes = require "outlierlab.measure.probes"
local median = require("outlierlab.measure.inspect").median

local M = {}

local function norm(d, off, n)
  local s = 0
  for i = 0, n - 1 do local v = d[off + i] s = s + v * v end
  return math.sqrt(s)
end

-- the SwiGLU weights of every layer with their row (column) norms and the layers' medians
local function mlp_weights(ctx, L, Cd, F)
  local W = {}
  for _, p in ipairs(ctx:params()) do W[ffi.string(p.name)] = p end
  local out = {}
  for l = 0, L - 1 do
    local pre = "layers" .. l .. ".mlp."
    local g, u, dn = W[pre .. "gate_proj.weight"], W[pre .. "up_proj.weight"], W[pre .. "down_proj.weight"]
    if not (g and u and dn) then error("writers.measure: the model has no " .. pre .. "{gate,up,down}_proj weights", 3) end
    local gr, ur, dc, a, b, c = {}, {}, {}, {}, {}, {}
    for j = 0, F - 1 do
      gr[j], ur[j] = norm(g.data, j * Cd, Cd), norm(u.data, j * Cd, Cd)
      local s = 0
      for k = 0, Cd - 1 do s = s + dn.data[k * F + j] ^ 2 end
      dc[j] = math.sqrt(s)
      a[j + 1], b[j + 1], c[j + 1] = gr[j], ur[j], dc[j]
    end
    out[l] = { down = dn, gr = gr, ur = ur, dc = dc, mg = median(a), mu = median(b), md = median(c) }
  end
  return out
end

function M.measure(ctx, m, next_batch, n)
  local mc = m.cfg
  if mc.family ~= "llama" or (mc.mlp or "glu") ~= "glu" then
    error(string.format("writers.measure: a %s model; the decomposition needs a LLaMA-family SwiGLU MLP", tostring(mc.family)), 2)
  end
  local Cd, F, L = mc.d_model, mc.d_ff, mc.n_layer
  local mlp = mlp_weights(ctx, L, Cd, F)
  local acc = {}
  for l = 0, L - 1 do acc[l] = { h = {}, out = {}, share = {}, xd = {}, cg = {}, cu = {}, dc = {}, by_id = {} } end
  local cur
  local P = probes.new{ points = { "ln2", "mlp_gate", "mlp_up", "x_down", "ffn_out", "h" },
                        on = function(name, l, t) cur[l] = cur[l] or {} cur[l][name] = t end }
  ctx:no_grad(function()
    for _ = 1, n do
      ctx:reset()
      local batch = next_batch()
      cur = {}
      P:forward(m, batch)
      local ids = batch.ids
      local B, T = tonumber(ids.shape[0]), tonumber(ids.shape[1])
      for l = 0, L - 1 do
        local c, w, A = cur[l], mlp[l], acc[l]
        local x, gt, up, xd, fo, h = c.ln2.data, c.mlp_gate.data, c.mlp_up.data, c.x_down.data, c.ffn_out.data, c.h.data
        for b = 0, B - 1 do
          for t = 0, T - 1 do
            local r = b * T + t
            local fn = norm(fo, r * Cd, Cd)
            local best, j = -1, 0
            for k = 0, F - 1 do
              local v = math.abs(xd[r * F + k]) * w.dc[k]
              if v > best then best, j = v, k end
            end
            local xn = norm(x, r * Cd, Cd)
            local dot = 0   -- neuron j's write projected on the layer's
            for k = 0, Cd - 1 do dot = dot + xd[r * F + j] * w.down.data[k * F + j] * fo[r * Cd + k] end
            local share = fn > 0 and dot / (fn * fn) or 0 / 0
            local cg, cu = gt[r * F + j] / (w.gr[j] * xn), up[r * F + j] / (w.ur[j] * xn)
            if t == 0 then
              if not A.first then
                local mx, tot = 0, 0
                for k = 0, Cd - 1 do
                  local v = w.down.data[k * F + j] ^ 2
                  tot = tot + v
                  if v > mx then mx = v end
                end
                A.first = { h = norm(h, r * Cd, Cd), out = fn, j = j, share = share, xd = xd[r * F + j], cg = cg, cu = cu,
                            gr = w.gr[j] / w.mg, ur = w.ur[j] / w.mu, dc = w.dc[j] / w.md, top_channel = mx / tot }
              end
            else
              local k = #A.h + 1
              A.h[k], A.out[k], A.share[k], A.xd[k] = norm(h, r * Cd, Cd), fn, share, math.abs(xd[r * F + j])
              A.cg[k], A.cu[k], A.dc[k] = math.abs(cg), math.abs(cu), w.dc[j] / w.md
              local id = ids.idata[r]
              A.by_id[id] = A.by_id[id] or {}
              A.by_id[id][j] = (A.by_id[id][j] or 0) + 1
            end
          end
        end
      end
    end
  end)
  ctx:reset()
  local res = {}
  for l = 0, L - 1 do
    local A = acc[l]
    local same, owners, n_ids, n_neurons = {}, {}, 0, 0
    for _, cnt in pairs(A.by_id) do
      local tot, best, bj = 0, 0, nil
      for j, k in pairs(cnt) do
        tot = tot + k
        if k > best then best, bj = k, j end
      end
      same[#same + 1] = best / tot
      if not owners[bj] then owners[bj], n_neurons = true, n_neurons + 1 end
      n_ids = n_ids + 1
    end
    res[l] = { first = A.first, ordinary = { h = median(A.h), out = median(A.out), share = median(A.share), xd = median(A.xd),
               cg = median(A.cg), cu = median(A.cu), dc = median(A.dc), same = median(same), n_ids = n_ids, n_neurons = n_neurons } }
  end
  return res
end

-- the report of M.measure's result, three lines per layer
function M.lines(res)
  local out = {}
  for l = 0, #res do
    local f, o = res[l].first, res[l].ordinary
    out[#out + 1] = string.format("layer %d: ‖h‖ at position 0 %.0f, ordinary median %.0f (× %.1f); FFN write there %.0f, ordinary %.1f (× %.1f)",
                                  l, f.h, o.h, f.h / o.h, f.out, o.out, f.out / o.out)
    out[#out + 1] = string.format("  position 0: neuron #%d carries %.2f of the write; x_down %.1f, cos(gate row, x̂) %.2f, cos(up row, x̂) %.2f; " ..
                                  "gate / up / down norms %.2f / %.2f / %.2f × the layer's median; its down column's largest channel %.2f of it",
                                  f.j, f.share, f.xd, f.cg, f.cu, f.gr, f.ur, f.dc, f.top_channel)
    out[#out + 1] = string.format("  ordinary tokens: the top neuron carries %.2f of the write; |x_down| %.1f (position 0: × %.1f), |cos| gate %.2f, up %.2f, " ..
                                  "down norm %.2f × median; per token id the same neuron on %.2f of its occurrences (%d ids, %d distinct neurons)",
                                  o.share, o.xd, math.abs(f.xd) / o.xd, o.cg, o.cu, o.dc, o.same, o.n_ids, o.n_neurons)
  end
  return out
end

return M
