-- measure/confidence — the confidence-regulation channel ("entropy neurons": Stolfo et al. 2024,
-- Gurnee et al. 2024): a hidden channel of the last layer that is large where the next token is
-- hard to guess, points into the (near) null space of the unembedding W_U, and so changes no
-- logit directly: through the final RMSNorm it scales every logit down and raises the entropy.
--
--   local CR = require "outlierlab.measure.confidence"
--   CR.measure(ctx, model, batches, {
--       layer = L − 1 (the last block), channel = nil (found: the dimension of h_layer with the
--       most elements ≥ tau × the token's mean |h|, position 0 left out), tau = 100,
--       bottom = ⌈C/8⌉ (the near-null space: the right singular directions of W_U with the
--       `bottom` smallest singular values),
--       kinds = fn(batch) -> int array (B·T): 1 where the next token is fixed by a rule (a copy),
--               0 where it is a random draw, −1 (or nil) unknown; nil: no split }) -> {
--     layer, channel, max_ratio (when found: its largest |h_c| / the token's mean |h|), tau, bottom, C, chance = bottom / C (a random direction's expected fraction),
--     positions, fires        the positions counted (position 0 and padding left out) and those
--                             where |h_c| ≥ tau × mean |h| of the token,
--     by_kind = { copy = {n, fires}, draw = {n, fires} }     (with kinds),
--     null_channel            fraction of g ⊙ e_c (g the final norm's gain) in W_U's bottom subspace,
--     null_write              the same for g ⊙ w, w the last block's mean write (h_layer − h_{layer−1})
--                             at the firing positions (nil without firing positions),
--     ablate_value            the channel's mean over the positions where it does not fire,
--     entropy = {fire =, rest =}, entropy_ablated = {fire =, rest =}, delta_entropy = {fire =, rest =}
--                             mean output entropy (nats) before and after the channel is set to
--                             ablate_value at the firing positions (mean ablation), and the change,
--     loss, loss_ablated      the model's loss before and after }
--   CR.null_fraction(G, C, u, r) -> fraction of ‖u‖² in the span of the eigenvectors of the C×C
--       Gram matrix G = W_Uᵀ W_U (flat, row-major) with the r smallest eigenvalues
--   CR.gram(W, V, C) -> W_Uᵀ W_U of a (V, C) tensor, flat
--   CR.entropy(x, off, V) -> −Σ p log p of softmax(x[off .. off + V − 1]) in nats
local inspect = require "outlierlab.measure.inspect"
local residual = require "outlierlab.measure.residual"

local M = {}

function M.gram(W, V, C)
  local G = {}
  for i = 0, C - 1 do
    for j = i, C - 1 do
      local s = 0
      for v = 0, V - 1 do s = s + W.data[v * C + i] * W.data[v * C + j] end
      G[i * C + j + 1], G[j * C + i + 1] = s, s
    end
  end
  return G
end

function M.null_fraction(G, C, u, r)
  local vals, vecs = inspect.sym_eig(G, C)   -- descending; eigenvectors as columns
  local norm2 = 0
  for i = 1, C do norm2 = norm2 + u[i] * u[i] end
  if norm2 == 0 then return 0 / 0 end
  local s = 0
  for k = C - r, C - 1 do   -- the r smallest
    local d = 0
    for i = 0, C - 1 do d = d + vecs[i * C + k + 1] * u[i + 1] end
    s = s + d * d
  end
  return s / norm2, vals
end

function M.entropy(x, off, V)
  local m = -math.huge
  for v = 0, V - 1 do m = math.max(m, x[off + v]) end
  local z, ez = 0, 0
  for v = 0, V - 1 do
    local e = math.exp(x[off + v] - m)
    z = z + e
    ez = ez + e * (x[off + v] - m)
  end
  return math.log(z) - ez / z
end

-- the unembedding (V, C) and the per-channel factor the final norm puts on a direction before
-- W_U reads it (its gain, times PreAffine's λ₁; GatedNorm's data-dependent gate left out; all 1
-- when the norm has no gain per channel) of a decoder
local function head_of(model)
  local W = model.lm_head and model.lm_head.weight or (model.embed_tokens or model.wte or {}).weight
  if not W then error("confidence: the model has no lm_head or tied token embedding", 3) end
  local C = tonumber(W.shape[1])
  local g = {}
  for i = 1, C do g[i] = 1 end
  local ln_f = model.norm or model.ln_f
  for _, nl in ipairs(residual.norm_layers(model)) do
    if ln_f and nl.name == ln_f.name then
      for i = 1, C do g[i] = nl.weight.data[i - 1] * (nl.pre and nl.pre.data[i - 1] or 1) end
    end
  end
  return W, tonumber(W.shape[0]), C, g
end

local function mean_abs_row(xd, base, C)
  local s = 0
  for j = 0, C - 1 do s = s + math.abs(xd[base + j]) end
  return s / C
end

function M.measure(ctx, model, batches, opts)
  opts = opts or {}
  local L = model.cfg.n_layer
  local layer = opts.layer or L - 1
  local tau = opts.tau or 100
  local W, V, C, g = head_of(model)
  local bottom = opts.bottom or math.ceil(C / 8)
  -- pass 1: the channel (most τ-flags at layer `layer`, position 0 left out) unless given
  local channel, max_ratio = opts.channel, nil
  if not channel then
    local count, ratio = {}, {}
    for j = 1, C do count[j], ratio[j] = 0, 0 end
    for _, batch in ipairs(batches) do
      ctx:reset()
      ctx:no_grad(function()
        model:loss(batch, { train = false, probe = function(name, l, x)
          if name ~= "h" or l ~= layer then return end
          local B, T = x:size(0), x:size(1)
          for b = 0, B - 1 do
            for t = 1, T - 1 do
              if not batch.pad_mask or batch.pad_mask.idata[b * T + t] ~= 0 then
                local base = (b * T + t) * C
                local ma = mean_abs_row(x.data, base, C)
                for j = 0, C - 1 do
                  local r = ma > 0 and math.abs(x.data[base + j]) / ma or 0
                  if r >= tau then count[j + 1] = count[j + 1] + 1 end
                  if r > ratio[j + 1] then ratio[j + 1] = r end
                end
              end
            end
          end
        end })
      end)
    end
    ctx:reset()
    local best = 1
    for j = 2, C do
      if count[j] > count[best] or (count[j] == count[best] and ratio[j] > ratio[best]) then best = j end
    end
    channel = best - 1
    max_ratio = ratio[best]
  end
  -- pass 2: firing positions, kinds, the block's write there, the rest's mean of the channel,
  -- entropies and loss as the model is
  local res = { layer = layer, channel = channel, max_ratio = max_ratio, tau = tau, bottom = bottom, C = C, chance = bottom / C,
                positions = 0, fires = 0, entropy = {}, entropy_ablated = {}, delta_entropy = {} }
  local fire_mask, kinds_of = {}, {}
  local write = {}
  for j = 1, C do write[j] = 0 end
  local rest_sum, rest_n = 0, 0
  local function run(bi, batch, edit)
    local prev, fm = nil, fire_mask[bi]
    local loss, info = ctx:no_grad(function()
      return model:loss(batch, { train = false, probe = function(name, l, x)
        if (name == "h" and l == layer - 1) or (name == "emb" and layer == 0) then prev = x end
        if name ~= "h" or l ~= layer then return end
        local B, T = x:size(0), x:size(1)
        if not fm then
          fm = {}
          for b = 0, B - 1 do
            for t = 1, T - 1 do
              local i = b * T + t
              if not batch.pad_mask or batch.pad_mask.idata[i] ~= 0 then
                local base = i * C
                local v = math.abs(x.data[base + channel])
                local f = v >= tau * mean_abs_row(x.data, base, C) and v > 0
                fm[i] = f
                if f then
                  if prev then for j = 0, C - 1 do write[j + 1] = write[j + 1] + x.data[base + j] - prev.data[base + j] end end
                else
                  rest_sum, rest_n = rest_sum + x.data[base + channel], rest_n + 1
                end
              end
            end
          end
          fire_mask[bi] = fm
        end
        if edit then for i, f in pairs(fm) do if f then x.data[i * C + channel] = edit end end end
      end })
    end)
    local ent = {}
    local lg = info.logits
    for i in pairs(fm) do ent[i] = M.entropy(lg.data, i * V, V) end
    local l = loss:item()
    ctx:reset()
    return l, ent
  end
  local sums = { fire = 0, rest = 0 }
  local n = { fire = 0, rest = 0 }
  local ents, loss = {}, 0
  for bi, batch in ipairs(batches) do
    ctx:reset()
    local l, ent = run(bi, batch, nil)
    loss = loss + l
    ents[bi] = ent
    local ks = opts.kinds and opts.kinds(batch)
    kinds_of[bi] = ks
    for i, f in pairs(fire_mask[bi]) do
      local grp = f and "fire" or "rest"
      sums[grp], n[grp] = sums[grp] + ent[i], n[grp] + 1
      res.positions = res.positions + 1
      if f then res.fires = res.fires + 1 end
      if ks then
        local k = ks[i]
        local name = k == 1 and "copy" or k == 0 and "draw" or nil
        if name then
          res.by_kind = res.by_kind or { copy = { n = 0, fires = 0 }, draw = { n = 0, fires = 0 } }
          res.by_kind[name].n = res.by_kind[name].n + 1
          if f then res.by_kind[name].fires = res.by_kind[name].fires + 1 end
        end
      end
    end
  end
  res.loss = loss / #batches
  for _, k in ipairs { "fire", "rest" } do res.entropy[k] = n[k] > 0 and sums[k] / n[k] or 0 / 0 end
  res.ablate_value = rest_n > 0 and rest_sum / rest_n or 0
  -- pass 3: the channel set to its mean elsewhere at the firing positions
  local asums = { fire = 0, rest = 0 }
  local aloss = 0
  for bi, batch in ipairs(batches) do
    ctx:reset()
    local l, ent = run(bi, batch, res.ablate_value)
    aloss = aloss + l
    for i, f in pairs(fire_mask[bi]) do
      local grp = f and "fire" or "rest"
      asums[grp] = asums[grp] + ent[i]
    end
  end
  ctx:reset()
  res.loss_ablated = aloss / #batches
  for _, k in ipairs { "fire", "rest" } do
    res.entropy_ablated[k] = n[k] > 0 and asums[k] / n[k] or 0 / 0
    res.delta_entropy[k] = res.entropy_ablated[k] - res.entropy[k]
  end
  -- the near-null space of W_U
  local G = M.gram(W, V, C)
  local u = {}
  for i = 1, C do u[i] = 0 end
  u[channel + 1] = g[channel + 1]
  res.null_channel = M.null_fraction(G, C, u, bottom)
  if res.fires > 0 then
    local w = {}
    for i = 1, C do w[i] = g[i] * write[i] / res.fires end
    res.null_write = M.null_fraction(G, C, w, bottom)
  end
  return res
end

-- the LM batches' kinds from the organism task (data/organism.lua task.ruled): target position t
-- of row b is a copy (1) when a rule fixes it, a draw (0) otherwise
function M.organism_kinds(task)
  local ffi = require "ffi"
  return function(batch)
    local tg = batch.targets
    local B, T = tg:size(0), tg:size(1)
    local out, row = {}, ffi.new("int32_t[?]", T)
    local buf = ffi.new("int32_t[?]", T)
    for b = 0, B - 1 do
      for t = 0, T - 1 do buf[t] = tg.idata[b * T + t] end
      task.ruled(buf, T, row)
      for t = 0, T - 1 do out[b * T + t] = row[t] end
    end
    return out
  end
end

return M
