-- report — the outlier report of one model (make report MODEL=… [TEXT=…]; docs/reference/report.md):
-- every measure of the project on one model and one text, in results/report/<model>/:
--   report.nc     CF-1.10 NetCDF (outlierlab.figure.netcdf): every number below, per layer, head,
--                 candidate and setting
--   summary.md    verdict first: massive activations, sinks, super weights, the three kinds of
--                 outliers, kurtosis, quantisation, the first token's state; then the tables
--   *.png         gnuplot figures (outlierlab.figure): massive, sinks, outliers, superweights, cost
--   views/        the interactive views' record of the first held-out sequence and its exports
--                 (figure.views: model.json, model.attention.json for CircuitsVis, model.h.nc)
--   index.html    the summary, the figures and the interactive views on one page (report/html.lua;
--                 token strings escaped)
--
--   bin/outlierlab report MODEL [--text=FILE] [--tau=100] [--tau_att=10] [--tau_w=5] [--seq_len=]
--                        [--batch=] [--batches=4] [--candidates=2] [--control_k=10] [--stream=auto]
--                        [--out=results/report] [--cache=cache]
local ol = require "outlierlab"
local config = require "outlierlab.config"
local fs = require "outlierlab.util.fs"
local json = require "outlierlab.util.json"
local progress = require "outlierlab.util.progress"
local figure = require "outlierlab.figure"
local results = require "outlierlab.figure.netcdf"
local analysis = require "outlierlab.measure.metrics"
local phenomena = require "outlierlab.measure.phenomena"
local sw = require "outlierlab.measure.superweights"
local source = require "outlierlab.report.model"
local measure = require "outlierlab.report.measure"
local html = require "outlierlab.report.html"
local views = require "outlierlab.figure.views"

local M = {}

M.DEFAULTS = { text = "", tau = 100, tau_att = 10, tau_w = 5, seq_len = 0, batch = 0, batches = 4, candidates = 2,
               control_k = 10, stream = "auto", out = "", cache = "" }

local CATS = analysis.categories
local ROWS = { "W_down cols ~ x_down", "W_down rows ~ h", "x_down ~ h", "h ~ A (tau)", "h ~ A (0.1T)", "x_down ~ A (tau)", "x_down ~ A (0.1T)" }
local ROW_KEYS = { "w_x", "w_h", "x_h", "h_a", "h_a_code", "x_a", "x_a_code" }
local PAPER = { 1, 1, 1, 0.95, 0.95 }

M.FIG = figure.declare{
  title = "Outlier report of {@model}",
  dims = {
    { "layer", long_name = "transformer layer (0-based)" },
    { "rank", long_name = "rank of the value among the largest |h| (1 = largest)" },
    { "head", long_name = "attention head (0-based)" },
    { "sink_token", long_name = "token that collects attention outlier keys (SO's rule)", labels = true },
    { "row", long_name = "pair of outlier kinds (SO Table 1's four rows, the code's attention rule, x_down against attention)", labels = true },
    { "tau", long_name = "activation outlier threshold tau of the sweep (|x| > tau mean|x| per sequence)" },
    { "candidate", long_name = "super-weight candidate (1 = largest down_proj output spike over its layer's median)" },
    { "setting", long_name = "post-training quantisation setting", labels = true },
    { "scale", long_name = "factor the first token's state is multiplied by" },
    { "position", long_name = "token of the first held-out sequence", labels = true },
    { "key", long_name = "key token of the first held-out sequence", labels = true },
    { "channel", long_name = "hidden dimension (0-based)" },
  },
  vars = {
    -- massive activations (Sun et al. 2024; SO Fig. 3)
    { "top_abs", dims = { "layer", "rank" }, long_name = "k-th largest |h| of the layer output per sequence, averaged over sequences", units = "1", label = "top-{rank}" },
    { "median_abs", dims = { "layer" }, long_name = "median |h| of the layer output per sequence (lower middle value), averaged", units = "1", label = "median" },
    { "top_ratio", dims = { "layer" }, long_name = "top-1 / median |h| of the layer output", units = "1", label = "top-1 / median" },
    { "top_token", dims = { "layer", "rank" }, long_name = "token id of the k-th largest |h| element over all sequences", units = "1", type = "int" },
    { "top_position", dims = { "layer", "rank" }, long_name = "position (0-based) of the k-th largest |h| element over all sequences", units = "1", type = "int" },
    { "top_channel", dims = { "layer", "rank" }, long_name = "hidden dimension of the k-th largest |h| element over all sequences", units = "1", type = "int" },
    { "top_value", dims = { "layer", "rank" }, long_name = "signed value of the k-th largest |h| element over all sequences", units = "1" },
    { "massive_appear_layer", dims = {}, long_name = "first layer whose top-1/median |h| reaches the massive threshold (undefined: none)", units = "1", type = "int" },
    { "massive_fall_layer", dims = {}, long_name = "first layer after it whose top-1/median |h| is below the threshold again (undefined: none)", units = "1", type = "int" },
    { "massive_threshold", dims = {}, long_name = "top-1/median |h| of a massive activation", units = "1" },
    { "kurtosis", dims = { "layer" }, long_name = "Pearson kurtosis of each sequence's values of h, averaged over sequences", units = "1", label = "kurtosis" },
    { "max_inf_norm", dims = { "layer" }, long_name = "per-sequence max |h|, averaged over sequences", units = "1", label = "max inf norm" },
    { "outlier_tokens", dims = { "layer" }, long_name = "tokens with an element |h| > tau mean|h| of its sequence", units = "1", type = "int", label = "τ = {@tau}" },
    -- attention sinks (Gu et al. 2025; SO Fig. 6)
    { "first_key_attention", dims = { "layer", "head" }, long_name = "Gu et al.'s alpha: mean attention of the queries on the first key", units = "1" },
    { "sink_rate_by_head", dims = { "layer", "head" }, long_name = "share of sequences in which the head's alpha on the first key exceeds eps", units = "1" },
    { "sink_value_ratio", dims = { "layer", "head" }, long_name = "attention-weighted value norm at the initial token over the median value norm of the other tokens", units = "1" },
    { "sink_rate", dims = {}, long_name = "share of heads whose alpha on the first key exceeds eps (Gu et al.)", units = "1" },
    { "sink_rate_pct", dims = {}, long_name = "percentage of (sequence, head) pairs with alpha above eps (Gu et al.'s code)", units = "percent" },
    { "sink_eps", dims = {}, long_name = "eps of the sink rate", units = "1" },
    { "sink_token_keys", dims = { "sink_token" }, long_name = "attention outlier keys (cumulative attention > tau_att mean, per head) at this token, over layers, heads and sequences", units = "1", type = "int", label = "keys" },
    { "sink_token_id", dims = { "sink_token" }, long_name = "token id of the sink token", units = "1", type = "int" },
    -- SO Table 1
    { "consistency", dims = { "row" }, long_name = "consistency |type1 and type2| / |type1| (undefined: no type-1 outliers)", units = "1", label = "this model" },
    { "consistency_reverse", dims = { "row" }, long_name = "reverse fraction |type1 and type2| / |type2|", units = "1" },
    { "paper_consistency", dims = { "row" }, long_name = "SO Table 1 (LLaMA2-7B; undefined: row not in the paper)", units = "1", label = "SO Table 1" },
    { "chance_level", dims = { "row" }, long_name = "consistency random positions or channels would give", units = "1", label = "chance" },
    { "n_terms", dims = { "row" }, long_name = "terms averaged in the row", units = "1", type = "int" },
    { "h_outlier_tokens_sweep", dims = { "tau" }, long_name = "activation outlier tokens in h over layers and sequences", units = "1", type = "int", label = "h" },
    { "x_down_outlier_tokens_sweep", dims = { "tau" }, long_name = "activation outlier tokens in x_down over layers and sequences", units = "1", type = "int", label = "x_down" },
    -- super weights (Yu et al. 2024)
    { "sw_layer", dims = { "candidate" }, long_name = "layer of the candidate's down_proj", units = "1", type = "int" },
    { "sw_row", dims = { "candidate" }, long_name = "row of down_proj.weight = the output (hidden) channel of the spike", units = "1", type = "int" },
    { "sw_col", dims = { "candidate" }, long_name = "column of down_proj.weight = the input (intermediate) channel with the largest |x_i W_oi| at the spike", units = "1", type = "int" },
    { "sw_weight", dims = { "candidate" }, long_name = "value of the entry", units = "1" },
    { "sw_share", dims = { "candidate" }, long_name = "the entry's share x_i W_oi / y_o of the spike", units = "1" },
    { "sw_input_spike", dims = { "candidate" }, long_name = "1 when the column is also the largest |x_down| of the spike's token (Yu et al.'s criterion)", units = "1", type = "int" },
    { "sw_spike", dims = { "candidate" }, long_name = "the spike: largest |down_proj output| of the layer", units = "1" },
    { "sw_spike_ratio", dims = { "candidate" }, long_name = "the spike over the layer's median |down_proj output|", units = "1" },
    { "sw_spike_token", dims = { "candidate" }, long_name = "token id at the spike", units = "1", type = "int" },
    { "sw_spike_position", dims = { "candidate" }, long_name = "position of the spike", units = "1", type = "int" },
    { "sw_dloss", dims = { "candidate" }, long_name = "held-out loss change when the entry is zeroed", units = "nat", label = "entry zeroed" },
    { "sw_control_dloss", dims = { "candidate" }, long_name = "held-out loss change when the control_k next largest |W| entries of the same matrix are zeroed", units = "nat", label = "control zeroed" },
    { "sw_massive", dims = { "candidate" }, long_name = "massive activation (max over layers of the per-sequence top-1 |h|, averaged) of the model as it is", units = "1", label = "as is" },
    { "sw_massive_zeroed", dims = { "candidate" }, long_name = "the massive activation with the entry zeroed", units = "1", label = "entry zeroed" },
    { "sw_massive_control", dims = { "candidate" }, long_name = "the massive activation with the control zeroed", units = "1", label = "control zeroed" },
    { "sw_super", dims = { "candidate" }, long_name = "1 when the entry is a super weight (loss rise >= min_dloss and >= factor x the control's, massive activation at least halved)", units = "1", type = "int" },
    -- compression and the first token
    { "loss_increase", dims = { "setting" }, long_name = "held-out loss minus the full-precision loss", units = "nat", label = "loss increase" },
    { "fp_loss", dims = {}, long_name = "held-out loss in full precision", units = "nat" },
    { "state_dloss", dims = { "scale" }, long_name = "held-out loss change when the first token's state after layer state_layer is multiplied by the scale", units = "nat", label = "Δ loss" },
    { "state_layer", dims = {}, long_name = "layer whose output's first-token state is scaled", units = "1", type = "int" },
    -- SO Fig. 1's views of the first held-out sequence
    { "h_abs", dims = { "position", "channel" }, long_name = "|h| of the layer with the largest top-1/median on the first held-out sequence", units = "1" },
    { "h_layer", dims = {}, long_name = "layer of h_abs", units = "1", type = "int" },
    { "attention", dims = { "position", "key" }, long_name = "attention of the head with the largest share on the initial token, first held-out sequence", units = "1" },
    { "sink_layer", dims = {}, long_name = "layer of that head", units = "1", type = "int" },
    { "sink_head", dims = {}, long_name = "that head", units = "1", type = "int" },
    { "sink_share", dims = {}, long_name = "its share of attention on the initial token", units = "1" },
  },
  panels = {},
}

-- the figures: views of the one declaration
M.VIEWS = {
  { "massive", "Massive activations and kurtosis per layer — {@model}", {
    { kind = "line", x = "layer", y = { "top_abs", "median_abs" }, logy = true, title = "largest and median |h| per layer", xlabel = "layer", ylabel = "|h| (log scale)" },
    { kind = "line", x = "layer", y = "top_ratio", title = "top-1 / median |h| (massive: ≥ {=massive_threshold})", xlabel = "layer", ylabel = "top-1 / median" },
    { kind = "line", x = "layer", y = { "kurtosis", "max_inf_norm" }, logy = true, title = "kurtosis and max inf norm of h", xlabel = "layer", ylabel = "log scale" },
    { kind = "heatmap", z = "h_abs", logcb = true, title = "|h| of layer {=h_layer}, first held-out sequence (log colour scale)", xlabel = "channel", ylabel = "token", y_labels = true },
  } },
  { "sinks", "Attention sinks — {@model}", {
    { kind = "heatmap", z = "first_key_attention", title = "α on the first key (Gu et al.; sink: > {=sink_eps})", xlabel = "head", ylabel = "layer", values = "%.2f" },
    { kind = "heatmap", z = "sink_value_ratio", title = "value norm at the sink / median value norm", xlabel = "head", ylabel = "layer", values = "%.2f" },
    { kind = "bars", x = "sink_token", y = "sink_token_keys", title = "tokens holding attention outlier keys (τ_att = {@tau_att})", ylabel = "outlier keys", values = "%d",
      zero_is_empty = true, why_empty = "no attention outlier key at τ_att = {@tau_att}" },
    { kind = "heatmap", z = "attention", title = "attention of layer {=sink_layer} head {=sink_head}, first sequence", xlabel = "key", ylabel = "query" },
  } },
  { "outliers", "The three kinds of outliers and their overlaps (SO Table 1) — {@model}", {
    { kind = "bars", x = "row", y = { "consistency", "paper_consistency", "chance_level" }, title = "consistency per pair (τ = {@tau}, τ_att = {@tau_att}, τ_w = {@tau_w})",
      ylabel = "fraction", values = "%.2f", note = "n/a: undefined (no type-1 outliers, or no number in SO)" },
    { kind = "line", x = "tau", y = { "h_outlier_tokens_sweep", "x_down_outlier_tokens_sweep" }, logx = true, logy = true, title = "activation outlier tokens over τ",
      xlabel = "τ (|x| > τ·mean|x|)", ylabel = "tokens (log scale)", why_empty = "no activation outlier at any τ down to 2" },
  } },
  { "superweights", "Super weights (Yu et al. 2024) — {@model}", {
    { kind = "bars", x = "candidate", y = { "sw_dloss", "sw_control_dloss" }, title = "Δ held-out loss when zeroed (control: the {@control_k} next largest)", ylabel = "Δ loss (nats)",
      values = "%.3g", why_empty = "not measured (a streamed model has no loss pass)" },
    { kind = "bars", x = "candidate", y = { "sw_massive", "sw_massive_zeroed", "sw_massive_control" }, title = "massive activation (largest top-1 |h|) after zeroing",
      ylabel = "top-1 |h|", values = "%.3g", why_empty = "not measured (a streamed model has no loss pass)" },
  } },
  { "cost", "What the outliers cost — {@model}", {
    { kind = "bars", x = "setting", y = "loss_increase", title = "loss increase over full precision (RTN)", ylabel = "Δ loss (nats)", values = "%.3g",
      why_empty = "not measured (a streamed model has no loss pass)" },
    { kind = "line", x = "scale", y = "state_dloss", title = "first token's state after layer {=state_layer} scaled", xlabel = "scale", ylabel = "Δ loss (nats)",
      why_empty = "not measured (a streamed model has no loss pass)" },
  } },
}
for _, v in ipairs(M.VIEWS) do M.FIG:check_panels(v[3], 1) end

local function nan() return 0 / 0 end
local function int_or_nil(v) if v == nil then return false end return v end

-- the report's numbers as the declaration's data
function M.data(src, r, cfg)
  local p = r.pass
  local h, ph = p.h, p.ph
  local v = { top_abs = {}, median_abs = {}, top_ratio = {}, top_token = {}, top_position = {}, top_channel = {}, top_value = {},
              kurtosis = {}, max_inf_norm = {}, outlier_tokens = {}, first_key_attention = {}, sink_rate_by_head = {}, sink_value_ratio = {} }
  local NH = src.m.cfg.n_head
  for i, l in ipairs(r.layers) do
    local x = h[l]
    v.top_abs[i] = { x.avg_topk[1], x.avg_topk[2], x.avg_topk[3] }
    v.median_abs[i], v.top_ratio[i] = x.avg_median, r.ratio[i]
    v.top_token[i], v.top_position[i], v.top_channel[i], v.top_value[i] = {}, {}, {}, {}
    for k = 1, 3 do
      local e = x.top[k]
      v.top_token[i][k], v.top_position[i][k], v.top_channel[i][k], v.top_value[i][k] = e and e.token or false, e and e.pos or false, e and e.channel or false, e and e.value or nan()
    end
    v.kurtosis[i], v.max_inf_norm[i], v.outlier_tokens[i] = x.avg_kurtosis, x.avg_max_inf_norm, x.outliers.tokens
    v.first_key_attention[i], v.sink_rate_by_head[i], v.sink_value_ratio[i] = {}, {}, {}
    for hh = 0, NH - 1 do
      local e = ph.heads[l] and ph.heads[l][hh]
      v.first_key_attention[i][hh + 1] = e and e.alpha_first or nan()
      v.sink_value_ratio[i][hh + 1] = e and e.value_ratio.initial or nan()
      v.sink_rate_by_head[i][hh + 1] = ph.sink_rate_by_layer[l] and ph.sink_rate_by_layer[l][hh + 1] or nan()
    end
  end
  v.massive_appear_layer, v.massive_fall_layer, v.massive_threshold = int_or_nil(r.appear), int_or_nil(r.fall), measure.MASSIVE
  v.sink_rate, v.sink_rate_pct, v.sink_eps = ph.sink_rate, ph.sink_rate_pct, phenomena.SINK_EPS
  -- sink tokens: attention outlier keys by token over layers
  local by = {}
  for _, l in ipairs(p.la.layers) do for id, n in pairs(p.la[l].by_token) do by[id] = (by[id] or 0) + n end end
  local toks = {}
  for id, n in pairs(by) do toks[#toks + 1] = { id = id, n = n } end
  table.sort(toks, function(a, b) if a.n ~= b.n then return a.n > b.n end return a.id < b.id end)
  local sink_labels = {}
  v.sink_token_keys, v.sink_token_id = {}, {}
  for i = 1, math.min(measure.SINK_TOKENS, #toks) do
    sink_labels[i] = src:token(toks[i].id)
    v.sink_token_keys[i], v.sink_token_id[i] = toks[i].n, toks[i].id
  end
  -- SO Table 1
  local c = p.cons
  v.consistency, v.consistency_reverse, v.paper_consistency, v.chance_level, v.n_terms = {}, {}, {}, {}, {}
  for i, k in ipairs(ROW_KEYS) do
    local x = c.rows[k]
    v.consistency[i], v.consistency_reverse[i], v.chance_level[i], v.n_terms[i] = x.value, x.reverse, x.chance, x.n
    v.paper_consistency[i] = PAPER[i] or nan()
  end
  local taus = {}
  v.h_outlier_tokens_sweep, v.x_down_outlier_tokens_sweep = {}, {}
  for i, s in ipairs(c.sweep) do taus[i], v.h_outlier_tokens_sweep[i], v.x_down_outlier_tokens_sweep[i] = s.tau, s.h_tokens, s.x_tokens end
  -- super weights
  local names = { "sw_layer", "sw_row", "sw_col", "sw_weight", "sw_share", "sw_input_spike", "sw_spike", "sw_spike_ratio", "sw_spike_token",
                  "sw_spike_position", "sw_dloss", "sw_control_dloss", "sw_massive", "sw_massive_zeroed", "sw_massive_control", "sw_super" }
  for _, n in ipairs(names) do v[n] = {} end
  for i, cd in ipairs(r.candidates) do
    v.sw_layer[i], v.sw_row[i], v.sw_col[i], v.sw_weight[i], v.sw_share[i] = cd.layer, cd.row, cd.col, cd.weight, cd.share
    v.sw_input_spike[i] = cd.input_spike and 1 or 0
    v.sw_spike[i], v.sw_spike_ratio[i], v.sw_spike_token[i], v.sw_spike_position[i] = cd.spike.abs, cd.spike.ratio, cd.spike.token, cd.spike.pos
    local z = r.zero and r.zero[i]
    v.sw_dloss[i], v.sw_control_dloss[i] = z and z.dloss or nan(), z and z.control.dloss or nan()
    v.sw_massive[i], v.sw_massive_zeroed[i], v.sw_massive_control[i] = z and z.massive or nan(), z and z.massive_zero or nan(), z and z.control.massive or nan()
    v.sw_super[i] = z and (z.super and 1 or 0) or false
  end
  -- quantisation and the first token
  local settings = {}
  v.loss_increase = {}
  for i, name in ipairs(measure.QUANT) do
    local s = r.quant and r.quant.by_name[name]
    settings[i] = s and s.label or name
    v.loss_increase[i] = s and s.applicable and s.loss - r.quant.fp.loss or nan()
  end
  v.fp_loss = r.quant and r.quant.fp.loss or nan()
  local scales = require("outlierlab.measure.recent").STATE_SCALES
  v.state_dloss = {}
  for j = 1, #scales do v.state_dloss[j] = r.state and r.state.delta[j] or nan() end
  v.state_layer = r.state_layer
  -- SO Fig. 1's views
  local o = r.overview
  local T, Cc = o.T, o.h.x.shape[2]
  v.h_abs, v.attention = {}, {}
  for i = 1, T * Cc do v.h_abs[i] = math.abs(o.h.x.data[i]) end
  for i = 1, T * T do v.attention[i] = o.A.map and o.A.map[i] or nan() end
  v.h_layer, v.sink_layer, v.sink_head, v.sink_share = o.h.layer, o.A.layer, o.A.head, o.A.s >= 0 and o.A.s or nan()
  return {
    coords = { layer = r.layers, rank = { 1, 2, 3 }, head = NH, sink_token = sink_labels, row = ROWS, tau = taus,
               candidate = #r.candidates, setting = settings, scale = scales, position = o.labels, key = o.labels, channel = Cc },
    vars = v,
    attrs = { model = src.name, model_label = src.label, text = src.text_label, tau = cfg.tau, tau_att = cfg.tau_att, tau_w = cfg.tau_w,
              control_k = cfg.control_k, streamed = src.streamed and 1 or 0, left_out = r.left_out or "nothing",
              sequences = src.n * src.B, tokens_per_sequence = src.T,
              sw_min_dloss = sw.MIN_DLOSS, sw_factor = sw.FACTOR, sw_removed = sw.REMOVED },
  }
end

local summary = require "outlierlab.report.summary"

-- a directory name for the model
local function safe(name) return (name:gsub("[^%w%-_%.]", "_")) end

-- the whole report: returns the output directory and the list of files written
function M.run(model_path, cfg)
  local t0 = progress.now()
  local root = ol.root
  cfg.cache = cfg.cache ~= "" and cfg.cache or os.getenv("OUTLIERLAB_CACHE") or (root .. "/cache")
  local src = source.open(model_path, { text = cfg.text, seq_len = cfg.seq_len > 0 and cfg.seq_len or nil, batch = cfg.batch, batches = cfg.batches,
                                        stream = cfg.stream, cache = cfg.cache })
  local r = measure.run(src, cfg)
  local data = M.data(src, r, cfg)
  local out = (cfg.out ~= "" and cfg.out or (os.getenv("OUTLIERLAB_RESULTS") or (root .. "/results")) .. "/report") .. "/" .. safe(src.name)
  fs.mkdir_p(out, "report: the results folder")
  local files = {}
  local meta = { title = "Outlier report of " .. src.name, summary = "Every outlier measure of outlierlab on " .. src.label .. ", read on " .. src.text_label,
                 id = "report", profile = "report", config = cfg, attrs = data.attrs }
  local nc = results.new(out .. "/report.nc", meta)
  M.FIG:netcdf(nc, data)
  nc:close()
  files[#files + 1] = out .. "/report.nc"
  local figs = {}
  for _, view in ipairs(M.VIEWS) do
    local f = setmetatable({ title = view[2], panels = view[3] }, { __index = M.FIG })
    local written = figure.draw(out, view[1], f, data)
    for _, w in ipairs(written) do files[#files + 1] = w end
    figs[#figs + 1] = { file = view[1] .. ".png", title = (view[2]:gsub(" — {@model}", "")) }
  end
  r.timings.total = progress.now() - t0
  local v = figure.values(M.FIG, data)
  local md = summary.text(src, r, data, cfg, v)
  fs.write_atomic(out .. "/summary.md", md)
  files[#files + 1] = out .. "/summary.md"
  -- the interactive views (figure.views, the gallery's): the record and its exports in views/,
  -- the charting library once for every report in <out>/../_assets (results/report/_assets)
  for _, f in ipairs(views.save(out, r.views)) do files[#files + 1] = f end
  local assets = out:match("^(.*)/[^/]+$") .. "/_assets"
  views.install_assets(assets)
  fs.write_atomic(out .. "/index.html", html.page(src, r, data, cfg, v, figs, md, { path = out .. "/index.html", assets = assets }))
  files[#files + 1] = out .. "/index.html"
  src:close()
  return out, files, r
end

-- bin/outlierlab report MODEL [--key=value ...]
function M.main(argv)
  local rest = {}
  for i = 2, #argv do rest[#rest + 1] = argv[i] end
  local positional = config.set_args(rest)
  local model = positional[1]
  if not model then
    io.stderr:write("usage: outlierlab report MODEL [--text=FILE] [--tau=100] [--batches=4] [--out=DIR] ...\n" ..
      "  MODEL: a Hugging Face directory, a llama2.c checkpoint (.bin) or cache/models/<hash> (docs/reference/report.md)\n")
    return 2
  end
  local cfg = config.get(M.DEFAULTS)
  local left = config.unconsumed()
  if #left > 0 then error("report: unknown key(s): --" .. table.concat(left, ", --") .. " (known: " .. table.concat((function()
    local k = {} for n in pairs(M.DEFAULTS) do k[#k + 1] = n end table.sort(k) return k end)(), ", ") .. ")", 0) end
  if cfg.batches < 1 then error("report: --batches must be at least 1", 0) end
  local out, _, r = M.run(model, cfg)
  print(string.format("report: %s (%.1f s) -> %s/index.html", model, r.timings.total, out))
  return 0
end

return M
