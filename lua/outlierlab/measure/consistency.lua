-- measure/consistency — SO Table 1's consistency between the three kinds of outliers (weight
-- outliers in W_down, activation outliers in x_down and h, attention outliers in A), measured
-- in one pass over held-out batches. The definitions (SO §4.1, Table 1, App. B.2) are in
-- experiments/so-table1.lua's header; so-table1 and the model report (outlierlab.report) call this.
--
--   local consistency = require "outlierlab.measure.consistency"
--   local c = consistency.new{ L =, C =, F =, NH =, T =, tau_h =, tau_x =, tau_att =, tau_w =,
--                              grid = consistency.TAU_GRID (the τ sweep; {} for none) }
--   c:weights(blocks)          -- for l, blk in blocks: W_down outlier columns and rows per layer
--   c:attach(P)                -- probes on h, x_down and attn_probs (outlierlab.measure.probes)
--   ... the held-out batches through P ...
--   local out = c:result(nseq) -- { rows = { w_x, w_h, x_h, h_a, h_a_code, x_a, x_a_code } each
--                              --   { value, reverse, chance, n, ... }, layers = { {layer, w_cols,
--                              --   x_channels, h_channels, ...} }, sweep = { {tau, h_tokens, ...} } }
local analysis = require "outlierlab.measure.metrics"

local M = {}

-- activation τ values of the sweep (the paper's 1000 down to 2)
M.TAU_GRID = { 1000, 500, 200, 100, 50, 20, 10, 5, 3, 2 }

local function tau_rule(tau) return analysis.rule{ kind = "tau_mean", tau = tau, scope = "sequence" } end
local function nan_if_nil(v) if v == nil then return 0 / 0 end return v end

function M.new(o)
  for _, k in ipairs({ "L", "C", "F", "NH", "T", "tau_h", "tau_x", "tau_att", "tau_w" }) do
    if type(o[k]) ~= "number" then error("consistency.new: " .. k .. " (a number) is required", 2) end
  end
  local L, C, F, NH, T = o.L, o.C, o.F, o.NH, o.T
  local grid = o.grid or M.TAU_GRID
  local self = {}
  local wcols, wrows, col_ratio, row_ratio = {}, {}, {}, {}
  local ov, sweep_h, sweep_x, hs, xs, la_tau, la_code, x_h, cnt_h, cnt_x

  -- weights: outlier columns and rows of every W_down (l 1-based, as ipairs; a streamed model
  -- loads each layer in turn)
  function self:weights(iter, state, init)
    for l, blk in iter, state, init do
      local r = analysis.weight_stats(blk.mlp.down.weight, { tau = o.tau_w })
      wcols[l], wrows[l], col_ratio[l], row_ratio[l] = r.outlier_cols, r.outlier_rows, r.col_ratio, r.row_ratio
    end
  end

  function self:attach(P)
    local att_tau = { rule = "tau_mean", tau = o.tau_att }
    local att_code = { rule = "code", frac = 0.1 }
    ov = {
      h_a = analysis.Overlap{ act_rule = tau_rule(o.tau_h), att = att_tau },
      h_a_code = analysis.Overlap{ act_rule = tau_rule(o.tau_h), att = att_code },
      x_a = analysis.Overlap{ act_rule = tau_rule(o.tau_x), att = att_tau },
      x_a_code = analysis.Overlap{ act_rule = tau_rule(o.tau_x), att = att_code },
    }
    P:attach_overlap(ov.h_a, "h", "attn_probs")
    P:attach_overlap(ov.h_a_code, "h", "attn_probs")
    P:attach_overlap(ov.x_a, "x_down", "attn_probs")
    P:attach_overlap(ov.x_a_code, "x_down", "attn_probs")
    sweep_h, sweep_x = {}, {}
    for i, tau in ipairs(grid) do
      sweep_h[i] = P:attach_overlap(analysis.Overlap{ act_rule = tau_rule(tau), att = att_tau }, "h", "attn_probs")
      sweep_x[i] = P:attach_overlap(analysis.Overlap{ act_rule = tau_rule(tau), att = att_tau }, "x_down", "attn_probs")
    end
    -- outlier channels per layer (feature dimension)
    hs = P:attach("h", analysis.LayerStats{ T = T, C = C, V = 0, topk = 1, rule = tau_rule(o.tau_h) })
    xs = P:attach("x_down", analysis.LayerStats{ T = T, C = F, V = 0, topk = 1, rule = tau_rule(o.tau_x) })
    -- attention outlier keys per head (chance level of row 4)
    la_tau = P:attach("attn_probs", analysis.LayerAttn{ T = T, NH = NH, rule = "tau_mean", tau = o.tau_att, frac = 0.1 })
    la_code = P:attach("attn_probs", analysis.LayerAttn{ T = T, NH = NH, rule = "code", frac = 0.1 })
    -- row 3 (x_down ~ h, per sample and layer) and the token counts of the τ sweep
    local xflags = {}
    x_h = { sum = 0, rev = 0, n = 0, nrev = 0, h_tokens = 0, tokens = 0 }
    cnt_h, cnt_x = {}, {}
    for i = 1, #grid do cnt_h[i], cnt_x[i] = 0, 0 end
    P:attach("x_down", function(x, l)
      xflags[l] = (analysis.token_outliers(x, tau_rule(o.tau_x)))
      for i, tau in ipairs(grid) do
        local _, n = analysis.token_outliers(x, tau_rule(tau))
        cnt_x[i] = cnt_x[i] + n
      end
    end)
    P:attach("h", function(x, l)
      local hf = analysis.token_outliers(x, tau_rule(o.tau_h))
      for i, tau in ipairs(grid) do
        local _, n = analysis.token_outliers(x, tau_rule(tau))
        cnt_h[i] = cnt_h[i] + n
      end
      local xf = xflags[l]
      local B = #hf / T
      for b = 0, B - 1 do
        local nx, nh, both = 0, 0, 0
        for t = 1, T do
          local i = b * T + t
          if xf[i] == 1 then nx = nx + 1 end
          if hf[i] == 1 then nh = nh + 1 end
          if xf[i] == 1 and hf[i] == 1 then both = both + 1 end
        end
        if nx > 0 then x_h.sum, x_h.n = x_h.sum + both / nx, x_h.n + 1 end
        if nh > 0 then x_h.rev, x_h.nrev = x_h.rev + both / nh, x_h.nrev + 1 end
        x_h.h_tokens, x_h.tokens = x_h.h_tokens + nh, x_h.tokens + T
      end
    end)
  end

  -- the numbers of Table 1's rows over nseq held-out sequences
  function self:result(nseq)
    local out = { L = L, C = C, F = F, NH = NH, T = T, nseq = nseq, tau_h = o.tau_h, tau_x = o.tau_x,
                  tau_att = o.tau_att, tau_w = o.tau_w, rows = {}, layers = {}, sweep = {} }

    -- (1) W_down columns ~ x_down channels, (layer, channel) pairs
    local hres, xres = hs:result(), xs:result()
    local wdims, adims, nwcols = {}, {}, 0
    local pct_sum, pct_n = 0, 0
    for l = 0, L - 1 do
      for _, j in ipairs(wcols[l + 1]) do wdims[#wdims + 1] = l * F + j end
      nwcols = nwcols + #wcols[l + 1]
      local r = xres[l]
      local nch = 0
      if r then
        for c = 1, F do
          if r.outliers.by_channel[c] > 0 then
            adims[#adims + 1] = l * F + (c - 1)
            nch = nch + 1
            -- percentile of this column's extremal ratio within its W_down (scale-free diagnostic)
            local below = 0
            for j = 1, F do if col_ratio[l + 1][j] < col_ratio[l + 1][c] then below = below + 1 end end
            pct_sum, pct_n = pct_sum + below / (F - 1), pct_n + 1
          end
        end
      end
      out.layers[l + 1] = { layer = l, w_cols = #wcols[l + 1], w_rows = #wrows[l + 1], x_channels = nch,
                            h_tokens = hres[l] and hres[l].outliers.tokens or 0,
                            x_tokens = xres[l] and xres[l].outliers.tokens or 0 }
    end
    local fa, fw, hit = analysis.feature_consistency(wdims, adims)
    out.rows.w_x = { value = nan_if_nil(fa), reverse = nan_if_nil(fw), n = #adims, hit = hit, n_w = #wdims,
                     chance = nwcols / (L * F), percentile = pct_n > 0 and pct_sum / pct_n or 0 / 0 }
    -- (2) W_down rows ~ h channels, unions over layers
    local wrow_set, hch_set = {}, {}
    local maxrow = {}
    for c = 1, C do maxrow[c] = -math.huge end
    for l = 0, L - 1 do
      for _, i in ipairs(wrows[l + 1]) do wrow_set[i] = true end
      for c = 1, C do maxrow[c] = math.max(maxrow[c], row_ratio[l + 1][c]) end
      local r = hres[l]
      local nch = 0
      if r then for c = 1, C do if r.outliers.by_channel[c] > 0 then hch_set[c - 1] = true nch = nch + 1 end end end
      out.layers[l + 1].h_channels = nch
    end
    local wlist, hlist = {}, {}
    for i in pairs(wrow_set) do wlist[#wlist + 1] = i end
    for c in pairs(hch_set) do hlist[#hlist + 1] = c end
    table.sort(wlist) table.sort(hlist)
    local pct2, n2 = 0, 0
    for _, c in ipairs(hlist) do
      local below = 0
      for j = 1, C do if maxrow[j] < maxrow[c + 1] then below = below + 1 end end
      pct2, n2 = pct2 + below / (C - 1), n2 + 1
    end
    fa, fw, hit = analysis.feature_consistency(wlist, hlist)
    out.rows.w_h = { value = nan_if_nil(fa), reverse = nan_if_nil(fw), n = #hlist, hit = hit, n_w = #wlist,
                     chance = #wlist / C, percentile = n2 > 0 and pct2 / n2 or 0 / 0, w_dims = wlist, h_dims = hlist }
    -- (3) x_down ~ h tokens
    out.rows.x_h = { value = x_h.n > 0 and x_h.sum / x_h.n or 0 / 0, reverse = x_h.nrev > 0 and x_h.rev / x_h.nrev or 0 / 0,
                     n = x_h.n, chance = x_h.tokens > 0 and x_h.h_tokens / x_h.tokens or 0 / 0 }
    -- (4) activation ~ attention, per head
    local function att_chance(la)
      local res, keys = la:result(), 0
      for _, l in ipairs(res.layers) do
        for h = 1, NH do keys = keys + (res[l].per_head[h] and res[l].per_head[h].count or 0) end
      end
      return keys / (L * NH * nseq * T)
    end
    local ch_tau, ch_code = att_chance(la_tau), att_chance(la_code)
    out.att_keys_fraction = { tau = ch_tau, code = ch_code }
    for key, o in pairs(ov) do
      local r = o:result()
      out.rows[key] = { value = r.overall, n = r.n, skipped = r.skipped, chance = key:match("_code$") and ch_code or ch_tau,
                        reverse = 0 / 0, by_layer = {} }
      for l = 0, L - 1 do out.rows[key].by_layer[l + 1] = r.by_layer[l] and r.by_layer[l].mean or 0 / 0 end
    end
    -- the τ sweep
    for i, tau in ipairs(grid) do
      local rh, rx = sweep_h[i]:result(), sweep_x[i]:result()
      out.sweep[i] = { tau = tau, h_tokens = cnt_h[i], x_tokens = cnt_x[i], h_overlap = rh.overall, x_overlap = rx.overall }
    end
    return out
  end
  return self
end

return M
