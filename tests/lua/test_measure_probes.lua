-- test_measure_probes — the probe collector: dispatch by point and layer with the batch at
-- hand (a scripted fake model whose calls are known), then a real llama-quick forward pass
-- streamed into the analysis accumulators, checked against invariants and direct counts.
local ol = require "outlierlab"
local probes = require "outlierlab.measure.probes"
local analysis = require "outlierlab.measure.metrics"
local t = require "tap"

local ctx = ol.Context{ seed = 3 }

-- ------------------------------------------------------------------ dispatch (fake model)
do
  local x = ctx:tensor({ 1, 2, 2 }):load({ 1, 2, 3, 4 })
  local seen_train
  local fake = { forward = function(self, batch, opts)
    seen_train = opts.train
    for l = 0, 2 do
      opts.probe("h", l, x)
      opts.probe("ffn_out", l, x)
      opts.probe("q", l, x)
    end
    return "out"
  end }
  local got = {}
  local P = probes.new{ points = { "h" }, layers = { 0, 2 },
                        on = function(name, layer, tensor, batch) got[#got + 1] = name .. layer .. batch.tag end }
  local per = {}
  P:attach("ffn_out", function(tensor, layer, batch, name) per[#per + 1] = name .. layer end, { 2 })
  local ends = 0
  P:attach("h", { probe = function() end, end_batch = function(self, batch) ends = ends + 1 end })
  local out = P:forward(fake, { tag = "B1" })
  local train = seen_train
  t.is(out, "out", "forward returns the model output")
  t.is(train, false, "forward runs in eval mode by default")
  t.is(table.concat(got, ","), "h0B1,ffn_out0B1,h2B1,ffn_out2B1", "on() sees requested points and layers with the batch")
  t.is(table.concat(per, ","), "ffn_out2", "attached handler honours its own layer list")
  t.is(P.counts.q, nil, "points nobody asked for are ignored")
  t.is(P.counts.h, 2, "counts per point")
  t.is(ends, 1, "end_batch called once per forward")
  t.is(P.batch, nil, "batch cleared after the forward")
  t.throws(function() P:attach("h", 42) end, "must be a function", "bad handler is an error")
  t.throws(function() probes.new{ pointz = {} } end, "unknown key 'pointz'", "unknown option is an error")
end

-- ------------------------------------------------------------------ real model (llama-quick)
local models = ol.models
local ok_models = models ~= nil and pcall(function() return models.preset("llama-quick") end)
if not ok_models then
  t.ok(false, "outlierlab.models with the llama-quick preset is available")
  return t.done()
end
do
  local cfg = models.preset("llama-quick")
  local m = models.build(ctx, cfg)
  local B, T, C = 3, 16, cfg.d_model
  local V = cfg.vocab_size
  local cat = function(id) return id == 0 and "initial" or id % 7 == 0 and "delimiter" or id % 5 == 0 and "weak" or "other" end
  local hstats = analysis.LayerStats{ T = T, C = C, V = V, topk = 3, rule = analysis.SO_TAU, category = cat,
                                      bins = 8, lo = 1e-3, hi = 1e3, log = true }
  local s6 = analysis.LayerStats{ T = T, C = C, V = V, rule = { kind = "sigma", k = 3, scope = "batch" } }
  local astats = analysis.LayerAttn{ rule = "code", frac = 0.1, topk = 2, category = cat }
  local ov = analysis.Overlap{ act_rule = { kind = "sigma", k = 3, scope = "sequence" }, att = { rule = "code", frac = 0.1 } }
  local direct = { n = 0, out3 = 0, max_sum = 0, seqs = 0 }
  local sums_ok = true
  local P = probes.new{}
  P:attach("h", hstats)
  P:attach("h", s6)
  P:attach("attn_probs", astats)
  P:attach_overlap(ov, "h", "attn_probs")
  -- direct recomputation of the layer-1 h statistics, from the same tensors
  P:attach("h", function(h, layer, batch)
    if layer ~= 1 then return end
    local n = tonumber(h.numel)
    local s, ss = 0, 0
    for i = 0, n - 1 do s = s + h.data[i] end
    local mu = s / n
    for i = 0, n - 1 do ss = ss + (h.data[i] - mu) ^ 2 end
    local sd = math.sqrt(ss / (n - 1))
    for i = 0, n - 1 do if math.abs(h.data[i] - mu) > 3 * sd then direct.out3 = direct.out3 + 1 end end
    for b = 0, B - 1 do
      local mx = 0
      for i = 0, T * C - 1 do mx = math.max(mx, math.abs(h.data[b * T * C + i])) end
      direct.max_sum = direct.max_sum + mx
      direct.seqs = direct.seqs + 1
    end
  end)
  -- Σ_j Â_j = number of queries (rows of A sum to 1, causal mask included)
  P:attach("attn_probs", function(A, layer)
    local cum = analysis.cumulative_attention(A)
    for b = 0, cum.B - 1 do for h = 0, cum.NH - 1 do
      local s = 0
      for j = 0, cum.Tk - 1 do s = s + cum.at(b, h, j) end
      if math.abs(s - cum.Tq) > 1e-4 then sums_ok = false end
    end end
  end)
  for step = 1, 2 do
    ctx:reset()
    local ids = ctx:tensor({ B, T }, { dtype = "i32" })
    for i = 0, B * T - 1 do ids.idata[i] = (i % T == 0) and 0 or 1 + (i * 37 + step * 11) % (V - 1) end
    ctx:no_grad(function() P:forward(m, { ids = ids, targets = ids }) end)
  end
  t.ok(sums_ok, "Σ_j Â_j = T for every head and sequence (real attention probabilities)")
  local hr = hstats:result()
  t.ok(#hr.layers == cfg.n_layer and hr[0].nseq == 2 * B and hr[1].ntok == 2 * B * T,
       "h: one accumulator per layer, every sequence and token seen")
  local r6 = s6:result()[1]
  t.is(r6.outliers.elements, direct.out3, "3σ count (batch scope) equals a direct count over the probed tensors")
  t.ok(direct.out3 > 0, "the direct 3σ count is not trivially zero", direct.out3)
  t.ok(math.abs(r6.avg_max_inf_norm - direct.max_sum / direct.seqs) < 1e-6, "max inf norm equals the direct value")
  local hsum = 0
  for _, c in ipairs(hr[1].hist.counts) do hsum = hsum + c end
  t.is(hsum + hr[1].hist.under + hr[1].hist.over, hr[1].n, "histogram holds every value")
  t.is(hr[1].tokens_by_category.initial, 2 * B, "one initial token per sequence (category from ids)")
  local ar = astats:result()
  t.ok(#ar.layers == cfg.n_layer and ar[0].nseq == 2 * B, "attention: per layer, every sequence")
  -- with a causal mask query 0 sees only key 0, so Â_0 ≥ 1 ≥ 0.1·T: key 0 is always a code-rule outlier
  t.ok((ar[0].code.by_position[0] or 0) == 2 * B and (ar[0].code.by_category.initial or 0) >= 2 * B,
       "code rule flags the initial key of every sequence")
  local orr = ov:result()
  t.ok(orr.n + orr.skipped > 0 and (orr.n == 0 or (orr.overall >= 0 and orr.overall <= 1)), "overlap in [0, 1]",
       "n " .. orr.n .. " overall " .. tostring(orr.overall))
  -- weights of the model: extremal ratio of the down projection (O = C, I = F)
  local wd
  for _, p in ipairs(ctx:params()) do if p:name_str():match("layers1%.mlp%.down_proj%.weight") then wd = p end end
  local ws = analysis.weight_stats(wd, { tau = 1000 })
  t.ok(#ws.col_ratio == cfg.d_ff and #ws.row_ratio == C and ws.extremal_ratio >= 1, "weight stats on W_down")
end

-- ------------------------------------------------------------------ points nobody wants are not computed
-- The collector tells the models which points it wants (nn.probe_wants): with only "h" attached,
-- the attention does not compute its B·NH·T² probabilities (the step arena shows it), and "h" is
-- the same either way.
do
  local nn = require "outlierlab.nn"
  local P = probes.new{ layers = { 1 } }
  P:attach("h", function() end)
  P:attach("attn_probs", function() end, { 0 })
  t.ok(P:wants("h", 1) and not P:wants("h", 0), "wants: the collector's layer list")
  t.ok(not P:wants("attn_probs", 1) and not P:wants("q", 1), "wants: a handler's own layer list, unattached points")
  t.ok(nn.probe_wants(P.fn, "h", 1) and not nn.probe_wants(P.fn, "q", 1), "nn.probe_wants asks the registered collector")
  t.ok(nn.probe_wants(function() end, "attn_probs", 0), "an unregistered probe function gets every point")
  local cfg = models.preset("llama-quick")
  local m = models.build(ctx, cfg)
  local B, T = 2, 32
  local function run(points)
    local Q = probes.new{}
    local h
    for _, pt in ipairs(points) do Q:attach(pt, function(x, layer) if pt == "h" and layer == 0 then h = x:tolist() end end) end
    ctx:reset()
    local ids = ctx:tensor({ B, T }, { dtype = "i32" })
    for i = 0, B * T - 1 do ids.idata[i] = (i * 13) % cfg.vocab_size end
    ctx:no_grad(function() Q:forward(m, { ids = ids }) end)
    local bytes = ctx:step_bytes()
    ctx:reset()
    return bytes, table.concat(h, " ")
  end
  local b_h, h1 = run { "h" }
  local b_all, h2 = run { "h", "attn_probs" }
  local probs = cfg.n_layer * B * cfg.n_head * T * T * 4
  t.ok(b_all - b_h >= probs, "probes on h only: no attention probabilities computed",
       string.format("step bytes %d (h) vs %d (h + attn_probs), probabilities %d", b_h, b_all, probs))
  t.is(h1, h2, "h is the same with and without the probabilities computed")
end

return t.done()
