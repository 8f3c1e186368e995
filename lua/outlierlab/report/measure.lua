-- report/measure — every measure of the model report, in one pass over the text where it can
-- (docs/reference/report.md). Each number comes from the module that defines it:
--   massive activations   measure.metrics LayerStats on h (SO Fig. 3's accumulator: per sequence the
--                         top-3 and the lower median of |h|, averaged; kurtosis and max inf norm)
--   attention sinks       measure.phenomena (Gu et al.'s α on the first key and sink rate, ε 0.3;
--                         the value norms at the sink), measure.metrics LayerAttn (SO's attention
--                         outlier keys: the sink tokens)
--   the three kinds       measure.consistency (SO Table 1's rows)
--   super weights         measure.superweights (detector in the same pass; zeroing, loss passes)
--   quantisation          compress.rtn (W8A8, W4A4, W4A4 + Hadamard; loss passes)
--   the first token       measure.recent.scale_state (loss passes)
--   SO Fig. 1's views     figure.overview (one sequence: the |h| map, the sink head's attention)
--   interactive views     figure.views' record of the same sequence, in the same pass
-- A streamed model (larger than memory) gets the one pass only: every loss pass would read the
-- whole model again and needs its head, which the streamed skeleton does not hold.
local analysis = require "outlierlab.measure.metrics"
local probes = require "outlierlab.measure.probes"
local phenomena = require "outlierlab.measure.phenomena"
local consistency = require "outlierlab.measure.consistency"
local sw = require "outlierlab.measure.superweights"
local recent = require "outlierlab.measure.recent"
local thresholds = require "outlierlab.judge.thresholds"
local quant = require "outlierlab.compress.rtn"
local overview = require "outlierlab.figure.overview"
local views = require "outlierlab.figure.views"
local progress = require "outlierlab.util.progress"

local M = {}

M.MASSIVE = thresholds.THRESHOLDS.massive_ratio   -- top-1 / median |h| of a massive activation (100)
M.QUANT = { "w8a8", "w4a4", "w4a4_hadamard" }
M.SINK_TOKENS = 5                                  -- the sink tokens listed
M.LEFT_OUT_STREAMED = "the loss passes: the super weights' zeroing and control, the W8A8/W4A4/W4A4 + Hadamard loss increases and the first token's state removed and scaled (each would read the whole model again and needs its head, which a streamed model does not hold)"

local function log(fmt, ...) io.write("[report] ", string.format(fmt, ...), "\n") io.flush() end

-- the one pass: every accumulator on one probe set, the held-out batches through it once
local function one_pass(src, cfg)
  local m, T = src.m, src.T
  local C, F, NH, L = m.cfg.d_model, m.cfg.d_ff, m.cfg.n_head, m.cfg.n_layer
  local cat = src.corpus.category
  local rule = analysis.rule{ kind = "tau_mean", tau = cfg.tau, scope = "sequence" }
  local P = probes.new{ points = { "h", "x_down", "ffn_out", "attn_probs", "v" } }
  local hs = P:attach("h", analysis.LayerStats{ T = T, C = C, V = m.cfg.vocab_size, topk = 3, category = cat, median = "lower", rule = rule })
  local ph = phenomena.new{ category = cat, T = T, C = C, n_head = NH, causal = true }
  ph:attach(P)
  local la = P:attach("attn_probs", analysis.LayerAttn{ T = T, NH = NH, V = m.cfg.vocab_size, rule = "tau_mean", tau = cfg.tau_att, frac = 0.1, category = cat })
  local cons = consistency.new{ L = L, C = C, F = F, NH = NH, T = T, tau_h = cfg.tau, tau_x = cfg.tau, tau_att = cfg.tau_att, tau_w = cfg.tau_w }
  cons:weights(src:blocks())
  cons:attach(P)
  local det = sw.Detector{ weight = function(l) return src:weight(l) end }
  det:attach(P)
  src:probe(P)
  return { h = hs:result(), ph = ph:result(), la = la:result(), cons = cons:result(src.n * src.B), det = det }
end

-- first layer at or above the massive threshold, and the first layer after it below it again
local function appear_fall(ratios, layers)
  local appear, fall
  for i, r in ipairs(ratios) do
    if not appear and r >= M.MASSIVE then appear = layers[i] end
    if appear and not fall and layers[i] > appear and r < M.MASSIVE then fall = layers[i] end
  end
  return appear, fall
end

-- the whole report's numbers (plain tables; report/init.lua turns them into the file's variables)
function M.run(src, cfg)
  local t0 = progress.now()
  local r = { timings = {} }
  log("%s: one pass over %d batches of %d×%d tokens (%s)", src.label, src.n, src.B, src.T, src.text_label)
  local p = one_pass(src, cfg)
  r.timings.pass = progress.now() - t0
  r.pass = p
  -- per layer: massive activations, kurtosis, max inf norm
  local h = p.h
  r.layers, r.ratio = {}, {}
  for i, l in ipairs(h.layers) do
    r.layers[i] = l
    r.ratio[i] = h[l].avg_topk[1] / h[l].avg_median
  end
  r.appear, r.fall = appear_fall(r.ratio, r.layers)
  -- super-weight candidates
  r.candidates = p.det:candidates(cfg.candidates)
  -- SO Fig. 1's views (one held-out sequence)
  local t1 = progress.now()
  -- and in the same pass the interactive views' record of that sequence (figure.views)
  local rec = views.recorder(src.corpus, { key = "model", label = src.name })
  r.overview = overview.measure(src.ctx, src.m, src.corpus, src.spec, cfg.tau, rec.attach)
  r.views = rec.record()
  r.timings.overview = progress.now() - t1
  -- the loss passes (in memory only)
  local batches = src:loss_batches()
  if not batches then
    r.left_out = M.LEFT_OUT_STREAMED
    return r
  end
  local t2 = progress.now()
  r.zero = {}
  for i, c in ipairs(r.candidates) do
    r.zero[i] = sw.zero(src.ctx, src.m, batches, c, { weight = function(l) return src:weight(l) end, control_k = cfg.control_k })
    log("super-weight candidate layer %d (row %d, col %d): zeroed %+.4f nats, control (%d next largest) %+.4f", c.layer, c.row, c.col,
      r.zero[i].dloss, r.zero[i].control.k, r.zero[i].control.dloss)
  end
  r.timings.superweights = progress.now() - t2
  local t3 = progress.now()
  local settings = {}
  for _, s in ipairs(quant.SETTINGS) do
    for _, n in ipairs(M.QUANT) do if s.name == n then settings[#settings + 1] = s end end
  end
  r.quant = quant.run(src.ctx, src.m, batches, { settings = settings, log = log })
  r.timings.quant = progress.now() - t3
  -- the first token's state after the layer where the massive activation appears (else the
  -- layer where top-1/median is largest), removed (×0) and scaled
  local t4 = progress.now()
  local best = 1
  for i, x in ipairs(r.ratio) do if x > r.ratio[best] then best = i end end
  r.state_layer = r.appear or r.layers[best]
  r.state = recent.scale_state(src.ctx, src.m, batches, { layer = r.state_layer })
  r.timings.state = progress.now() - t4
  return r
end

return M
