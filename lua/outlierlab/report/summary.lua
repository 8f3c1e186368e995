-- report/summary — summary.md of a model report: the verdicts first (one line each: massive
-- activations, attention sinks, super weights, the three kinds of outliers, kurtosis,
-- quantisation, the first token), then the tables behind them. Token strings are quoted with
-- %q-like escaping (Markdown specials and control characters escaped): they come from the user's text.
local measure = require "outlierlab.report.measure"
local sw = require "outlierlab.measure.superweights"

local M = {}

local function fin(x) return x == x and x ~= math.huge and x ~= -math.huge end
local function g(x, f) if not fin(x) then return "n/a" end return string.format(f or "%.3g", x) end
local function pct(x) if not fin(x) then return "undefined" end return string.format("%.0f %%", 100 * x) end

-- a token string for Markdown and HTML: in a code span (where Markdown escapes nothing), with
-- control characters, invalid UTF-8 bytes, "`" and "|" (a table's separator) written as \xNN
function M.token(s)
  s = tostring(s)
  local out, i, n = {}, 1, #s
  while i <= n do
    local c = s:byte(i)
    local len = c < 0x80 and 1 or (c >= 0xC2 and c <= 0xDF) and 2 or (c >= 0xE0 and c <= 0xEF) and 3 or (c >= 0xF0 and c <= 0xF4) and 4 or 0
    local ok = len > 0 and i + len - 1 <= n
    for k = 1, len - 1 do
      local b = ok and s:byte(i + k)
      if not b or b < 0x80 or b > 0xBF then ok = false end
    end
    if ok and len == 3 then   -- no overlong forms or UTF-16 surrogates
      local b = s:byte(i + 1)
      if (c == 0xE0 and b < 0xA0) or (c == 0xED and b > 0x9F) then ok = false end
    elseif ok and len == 4 then
      local b = s:byte(i + 1)
      if (c == 0xF0 and b < 0x90) or (c == 0xF4 and b > 0x8F) then ok = false end
    end
    if ok and len == 1 and (c < 32 or c == 127 or c == 96 or c == 124) then ok = false end
    if ok then out[#out + 1] = s:sub(i, i + len - 1) i = i + len
    else out[#out + 1] = string.format("\\x%02X", c) i = i + 1 end
  end
  return "`" .. table.concat(out) .. "`"
end
local tok = M.token

-- v: figure.values of the report's declaration over data
function M.text(src, r, data, cfg, v)
  local a = data.attrs
  local L = #r.layers
  local lines = { "# Outlier report — " .. src.name, "",
                  string.format("Model: %s. Text: %s; %d sequences of %d tokens.%s", src.label, src.text_label, a.sequences, a.tokens_per_sequence,
                    src.streamed and " Run layer by layer from the memory-mapped checkpoint (streamed)." or ""), "",
                  "## Verdict", "" }
  local function add(s) lines[#lines + 1] = s end
  -- massive activations
  local best = 1
  for i = 1, L do if v.top_ratio[i] > v.top_ratio[best] then best = i end end
  local bl = r.layers[best]
  local tk = v.top_token(best, 1)
  local where = string.format("token %s (id %s, position %s), channel %s", tok(tk and src:token(tk) or "?"), tostring(tk), tostring(v.top_position(best, 1)), tostring(v.top_channel(best, 1)))
  if r.appear then
    add(string.format("- **Massive activations: yes.** Top-1 |h| reaches %s × the median (%s against %s) in layer %d, at %s. They appear in layer %d and %s.",
      g(v.top_ratio[best], "%.0f"), g(v.top_abs(best, 1)), g(v.median_abs[best]), bl, where, r.appear,
      r.fall and string.format("fall below %g × in layer %d", measure.MASSIVE, r.fall) or "stay to the last layer"))
  else
    add(string.format("- **Massive activations: no** (threshold top-1 ≥ %g × median |h|). The largest top-1/median is %s in layer %d, at %s.",
      measure.MASSIVE, g(v.top_ratio[best], "%.1f"), bl, where))
  end
  -- sinks
  local sink_tok = data.coords.sink_token[1]
  add(string.format("- **Attention sinks: %s.** %s of the heads put more than ε = %g of their attention on the first token (Gu et al.'s sink rate; %s of the (sequence, head) pairs). The head with the largest share on the initial token (first sequence): layer %s head %s, %s.%s",
    v.sink_rate >= 0.5 and "yes" or (v.sink_rate > 0 and "some" or "no"), pct(v.sink_rate), v.sink_eps, g(v.sink_rate_pct, "%.0f %%"),
    tostring(v.sink_layer), tostring(v.sink_head), g(v.sink_share, "%.2f"),
    sink_tok and string.format(" Most attention outlier keys (τ_att = %g) sit at %s (%d keys).", cfg.tau_att, tok(sink_tok), v.sink_token_keys[1]) or
      string.format(" No key exceeds τ_att = %g × the mean cumulative attention.", cfg.tau_att)))
  -- super weights
  local nsup, first = 0, nil
  for i = 1, #r.candidates do if v.sw_super[i] == 1 then nsup = nsup + 1 first = first or i end end
  local c1 = r.candidates[1]
  if r.zero then
    if first then
      local c = r.candidates[first]
      local z = r.zero[first]
      add(string.format("- **Super weight: yes.** layer %d down_proj.weight[%d, %d] = %s (output channel %d × input channel %d): zeroed, the loss rises by %+.4f nats and the massive activation falls from %s to %s; zeroing the %d next largest weights of the same matrix instead: %+.4f nats, %s.",
        c.layer, c.row, c.col, g(c.weight), c.row, c.col, z.dloss, g(z.massive), g(z.massive_zero), z.control.k, z.control.dloss, g(z.control.massive)))
    elseif c1 then
      local z = r.zero[1]
      add(string.format("- **Super weight: no.** The largest down_proj spike's entry (layer %d, [%d, %d]) zeroed: %+.4f nats, massive activation %s → %s; the control (%d next largest): %+.4f nats (a super weight needs ≥ %g nats, ≥ %g × the control and the activation at least halved).",
        c1.layer, c1.row, c1.col, z.dloss, g(z.massive), g(z.massive_zero), z.control.k, z.control.dloss, sw.MIN_DLOSS, sw.FACTOR))
    end
  elseif c1 then
    add(string.format("- **Super weight: located, not tested.** The largest down_proj spike (%s × its layer's median) is written by layer %d down_proj.weight[%d, %d] = %s (%s of the spike); zeroing it needs the loss pass, left out for a streamed model.",
      g(c1.spike.ratio, "%.0f"), c1.layer, c1.row, c1.col, g(c1.weight), pct(c1.share)))
  end
  -- the three kinds
  local c = v.consistency
  add(string.format("- **The three kinds of outliers (SO Table 1, τ = %g, τ_att = %g, τ_w = %g):** W_down ~ x_down %s, W_down ~ h %s, x_down ~ h %s, h ~ A %s (SO on LLaMA2-7B: 100 %%, 100 %%, 100 %%, 95 %%; chance %s, %s, %s, %s).",
    cfg.tau, cfg.tau_att, cfg.tau_w, pct(c[1]), pct(c[2]), pct(c[3]), pct(c[4]), pct(v.chance_level[1]), pct(v.chance_level[2]), pct(v.chance_level[3]), pct(v.chance_level[4])))
  -- kurtosis
  local kmax, kl, imax, il, ksum = -1, 0, -1, 0, 0
  for i = 1, L do
    ksum = ksum + v.kurtosis[i]
    if v.kurtosis[i] > kmax then kmax, kl = v.kurtosis[i], r.layers[i] end
    if v.max_inf_norm[i] > imax then imax, il = v.max_inf_norm[i], r.layers[i] end
  end
  add(string.format("- **Kurtosis:** average %s over layers, largest %s (layer %d); max inf norm largest %s (layer %d).", g(ksum / L, "%.1f"), g(kmax, "%.1f"), kl, g(imax), il))
  -- quantisation and the first token
  if r.quant then
    local parts = {}
    for i, s in ipairs(data.coords.setting) do
      local q = r.quant.settings[i]
      parts[#parts + 1] = fin(v.loss_increase[i]) and string.format("%s %+.4f nats", s, v.loss_increase[i])
        or string.format("%s not applicable (%s)", s, q and q.reason or "?")
    end
    add(string.format("- **Quantisation (round to nearest):** the held-out loss (%.4f nats in full precision) changes by %s.", v.fp_loss, table.concat(parts, ", ")))
    local sc = data.coords.scale
    local parts2 = {}
    for j, s in ipairs(sc) do parts2[#parts2 + 1] = string.format("×%g %+.4f", s, v.state_dloss[j]) end
    add(string.format("- **The first token's state** after layer %d, removed and scaled: %s nats.", v.state_layer, table.concat(parts2, ", ")))
  end
  if r.left_out then add("- **Left out (streamed model):** " .. r.left_out .. ".") end
  -- tables
  add("") add("## Massive activations per layer (Sun et al. 2024)") add("")
  add(string.format("Per sequence the three largest |h| and the median |h| of the layer output, averaged over %d sequences; the token and channel of the k-th largest element over all sequences. Outlier tokens: an element above τ = %g × the mean |h| of its sequence (SO).", a.sequences, cfg.tau))
  add("")
  add("| layer | top-1 | top-2 | top-3 | median | top-1/median | top-1 at (token, channel) | kurtosis | max inf norm | outlier tokens |")
  add("|---|---|---|---|---|---|---|---|---|---|")
  for i, l in ipairs(r.layers) do
    local t1 = v.top_token(i, 1)
    add(string.format("| %d | %s | %s | %s | %s | %s | %s, %s | %s | %s | %d |", l, g(v.top_abs(i, 1)), g(v.top_abs(i, 2)), g(v.top_abs(i, 3)), g(v.median_abs[i]),
      g(v.top_ratio[i], "%.1f"), t1 and tok(src:token(t1)) or "?", tostring(v.top_channel(i, 1)), g(v.kurtosis[i], "%.1f"), g(v.max_inf_norm[i]), v.outlier_tokens[i]))
  end
  add("") add("## Attention sinks (Gu et al. 2025)") add("")
  add(string.format("α of a head: the mean attention of the queries on the first key; a sink head has α > %g. Value ratio: the attention-weighted value norm at the initial token over the median value norm of the other tokens (a sink's value is small).", v.sink_eps))
  add("")
  local NH = data.coords.head
  local hdr, sep = { "| layer |" }, { "|---|" }
  for hh = 0, NH - 1 do hdr[#hdr + 1] = " head " .. hh .. " α (value ratio) |" sep[#sep + 1] = "---|" end
  add(table.concat(hdr)) add(table.concat(sep))
  for i, l in ipairs(r.layers) do
    local row = { "| " .. l .. " |" }
    for hh = 1, NH do row[#row + 1] = string.format(" %s (%s) |", g(v.first_key_attention(i, hh), "%.2f"), g(v.sink_value_ratio(i, hh), "%.2f")) end
    add(table.concat(row))
  end
  if #data.coords.sink_token > 0 then
    add("") add(string.format("Sink tokens (keys whose cumulative attention exceeds τ_att = %g × the mean, per head, over layers and sequences):", cfg.tau_att)) add("")
    add("| token | id | outlier keys |") add("|---|---|---|")
    for i, s in ipairs(data.coords.sink_token) do add(string.format("| %s | %d | %d |", tok(s), v.sink_token_id[i], v.sink_token_keys[i])) end
  end
  add("") add("## Super weights (Yu et al. 2024)") add("")
  add(string.format("In every layer the largest |down_proj output| is the spike; its row is the output channel, its column the input channel whose product x_i·W[o, i] writes most of it. Candidates: the %d layers with the largest spike over the median. The test zeroes the entry, then instead the %d next largest |W| entries of the same matrix (the control).", cfg.candidates, cfg.control_k))
  add("")
  add("| candidate | layer | row (out) | col (in) | weight | share of the spike | input spikes too | spike (× median) | at token | Δ loss zeroed | Δ loss control | massive: as is → zeroed / control | super weight |")
  add("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
  for i, cd in ipairs(r.candidates) do
    add(string.format("| %d | %d | %d | %d | %s | %s | %s | %s (%s ×) | %s | %s | %s | %s → %s / %s | %s |", i, cd.layer, cd.row, cd.col, g(cd.weight), pct(cd.share),
      cd.input_spike and "yes" or "no", g(cd.spike.abs), g(cd.spike.ratio, "%.0f"), tok(src:token(cd.spike.token)), g(v.sw_dloss[i], "%+.4f"), g(v.sw_control_dloss[i], "%+.4f"),
      g(v.sw_massive[i]), g(v.sw_massive_zeroed[i]), g(v.sw_massive_control[i]), v.sw_super[i] == 1 and "**yes**" or (v.sw_super[i] == 0 and "no" or "not tested")))
  end
  add("") add("## The three kinds of outliers (SO Table 1)") add("")
  add("| pair | this model | reverse | SO (LLaMA2-7B) | chance | terms |") add("|---|---|---|---|---|---|")
  for i, row in ipairs(data.coords.row) do
    add(string.format("| %s | %s | %s | %s | %s | %d |", row, pct(c[i]), pct(v.consistency_reverse[i]), fin(v.paper_consistency[i]) and pct(v.paper_consistency[i]) or "—", pct(v.chance_level[i]), v.n_terms[i]))
  end
  local th
  for i, tau in ipairs(data.coords.tau) do if not th and v.h_outlier_tokens_sweep[i] > 0 then th = tau end end
  add("") add(string.format("Largest τ at which h has activation outlier tokens: %s.", th and string.format("%g", th) or "none down to τ = 2"))
  if r.quant then
    add("") add("## What the outliers cost") add("")
    add(string.format("Round-to-nearest post-training quantisation (weights per output channel, activations per token, symmetric; the head and the embedding in full precision) on the same %d sequences, and the first token's state in the output of layer %d multiplied by each scale before the next layer reads it (×0: removed).", a.sequences, v.state_layer))
    add("")
    add("| setting | loss increase (nats) |") add("|---|---|")
    for i, s in ipairs(data.coords.setting) do add(string.format("| %s | %s |", s, g(v.loss_increase[i], "%+.4f"))) end
    add("")
    add("| first token's state × | Δ loss (nats) |") add("|---|---|")
    for j, sc in ipairs(data.coords.scale) do add(string.format("| %g | %s |", sc, g(v.state_dloss[j], "%+.4f"))) end
  end
  -- the tokens of the first sequence, each with its largest |h| in the layer of SO Fig. 1's view
  local o = r.overview
  local T, Cc = o.T, o.h.x.shape[2]
  local toks = {}
  for i = 1, T do
    local mx = 0
    for c = 1, Cc do mx = math.max(mx, math.abs(o.h.x.data[(i - 1) * Cc + c])) end
    toks[i] = string.format("%s %s", tok(o.labels[i]), g(mx, "%.3g"))
  end
  add("") add("## The first held-out sequence") add("")
  add(string.format("Each token with its largest |h| in layer %d (the layer with the largest top-1/median on this sequence; report.nc's h_abs holds the whole map):", o.h.layer))
  add("")
  add(table.concat(toks, " · "))
  add("") add("## Run") add("")
  local t = r.timings
  add(string.format("- Wall time %.1f s: one pass %.1f s, SO Fig. 1's views %.1f s%s.", t.total, t.pass, t.overview, r.zero and string.format(", super weights %.1f s, quantisation %.1f s, first token %.1f s", t.superweights, t.quant, t.state) or ""))
  add(string.format("- Settings: τ = %g, τ_att = %g, τ_w = %g, %d batches, %d candidates, control_k = %d.", cfg.tau, cfg.tau_att, cfg.tau_w, cfg.batches, cfg.candidates, cfg.control_k))
  add("- Files: report.nc (every number above), massive.png, sinks.png, outliers.png, superweights.png, cost.png, views/ (the interactive views' record of the first held-out sequence, its h as NetCDF, its attention for CircuitsVis), index.html (this summary, the figures and the interactive views).")
  add("")
  return table.concat(lines, "\n")
end

return M
