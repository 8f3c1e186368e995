-- scripts/residual-sinks.lua — residual sinks (arXiv 2601.22966) of one model: a trained model of
-- the cache or a Hugging Face directory. Prints the dimensions on top across tokens, the H_avg
-- rank stability and the λ-minimum detector per norm; draws the dimension-sorted token × dimension
-- heat map of |h| and the shares by H_avg rank (outlierlab.measure.residual).
--
--   bin/outlierlab run scripts/residual-sinks.lua --model=DIR [--batches=4] [--k=3] [--share=0.9]
--        [--text=FILE] [--layer=-1] [--out=results/residual-sinks/<name>]
--
-- DIR with spec.json (the cache): the model's own held-out batches. DIR with config.json (Hugging
-- Face): the text file given by --text read with the model's tokenizer (8 sequences of 128 tokens
-- per batch), or, without --text, fixed pseudo-random token ids (the residual sink is a property of
-- every token, so ids are enough to see one; the text is the better input). The heat map shows the
-- first sequence at --layer (−1: the layer with the largest top-k share).
local ol = require "outlierlab"
local R = require "outlierlab.measure.residual"
local recent = require "outlierlab.measure.recent"
local figure = require "outlierlab.figure"
local fs = require "outlierlab.util.fs"
local cfg = require("outlierlab.config").get{ model = "", batches = 4, k = 3, share = 0.9, text = "", layer = -1, out = "" }

local function die(msg) error("residual-sinks: " .. msg, 0) end
if cfg.model == "" then die("--model=DIR (a model directory of the cache, or a Hugging Face directory) is required") end

local ctx, m, batches, label = nil, nil, {}, nil
local function exists(p) local f = io.open(p, "rb") if f then f:close() return true end return false end
if exists(cfg.model .. "/spec.json") then
  local cache = require "outlierlab.runner.cache"
  local recipes = require "outlierlab.recipes"
  local batcher = require "outlierlab.data.batcher"
  local spec, why = cache.read_spec(cfg.model)
  if not spec then die(why) end
  ctx, m = recipes.load(spec, { ckpt = cfg.model .. "/model.safetensors" })
  local va = batcher.batcher(batcher.corpus(spec.data), { B = spec.batch.B, T = spec.batch.T, kind = spec.batch.kind,
                                                        seed = spec.seed + 1, split = "val" })
  batches = require("outlierlab.compress.rtn").batches(ctx, va, cfg.batches)   -- persistent copies
  label = spec.model.preset
elseif exists(cfg.model .. "/config.json") then
  local hf = require "outlierlab.pretrained.hf"
  local info
  ctx, m, info = hf.load(cfg.model)
  label = info.name or cfg.model
  local B, T = 8, math.min(128, m.cfg.block_size)
  if cfg.text ~= "" then
    local text = require "outlierlab.data.text"
    local tk = require("outlierlab.pretrained.tokenizers").load(cfg.model)
    local corpus = text.corpus{ path = cfg.text, tokenizer = tk, max_tokens = B * T * cfg.batches + 16 }
    local ld = text.batcher(corpus, { B = B, T = T, kind = m.cfg.family == "bert" and "mlm" or "lm", n = cfg.batches })
    batches = require("outlierlab.compress.rtn").batches(ctx, ld, cfg.batches)
  else
    local V = m.cfg.vocab_size
    for i = 1, cfg.batches do
      local ids = ctx:tensor({ B, T }, { dtype = "i32", persistent = true })
      local tg = ctx:tensor({ B, T }, { dtype = "i32", persistent = true })
      for j = 0, B * T - 1 do
        ids.idata[j] = math.floor(ol.C.ol_rand_uniform(7 + i, j) * V)
        tg.idata[j] = m.cfg.family == "bert" and -100 or math.floor(ol.C.ol_rand_uniform(1007 + i, j) * V)
      end
      batches[i] = { ids = ids, targets = tg }
    end
  end
else
  die(cfg.model .. " has neither spec.json (a model of the cache) nor config.json (a Hugging Face directory)")
end

local res = R.residual_sinks(ctx, m, batches, { k = cfg.k, share = cfg.share })
local lm = R.lambda_minimum(m, { sinks = res.sinks })

print(string.format("%s (%s, d %d, %d layers): %d token·layer rows, top-%d", cfg.model, label, res.C, #res.layers, res.tokens, res.k))
local top = {}
for i = 1, math.min(5, res.C) do
  local d = res.order[i]
  top[#top + 1] = string.format("%d (H_avg %.3g, share %.2f)", d, res.h_avg[d + 1], res.top_share[d + 1])
end
print("dimensions by H_avg: " .. table.concat(top, ", "))
print(string.format("residual sinks (share ≥ %.2f): %s; max share %.3f at dim %s; H_avg rank stability %.3f (chance %.3f)",
  res.threshold, #res.sinks > 0 and table.concat(res.sinks, " ") or "none", res.max_share, tostring(res.sink_dim),
  res.stability, res.k / res.C))
for _, l in ipairs(res.layers) do
  local b = res.by_layer[l]
  print(string.format("  layer %d: max share %.3f at dim %s, sinks %s", l, b.max_share, tostring(b.sink_dim),
    #b.sinks > 0 and table.concat(b.sinks, " ") or "none"))
end
print(string.format("λ-minimum detector (min|λ|/median|λ| < %g): %d of %d norms flagged, %d on a residual sink", lm.ratio,
  lm.flagged, #lm.layers, lm.coincide))
for _, l in ipairs(lm.layers) do
  local at = {}
  for d, v in pairs(l.at_sink) do at[#at + 1] = string.format("λ[%d] = %.4g", d, v) end
  print(string.format("  %-22s min |λ| %.4g at dim %d, median %.4g, ratio %.4g%s %s", l.name, l.min, l.argmin, l.median, l.ratio,
    l.flagged and " FLAGGED" or "", table.concat(at, " ")))
end

-- the heat map: the first sequence of the first batch at the chosen layer
local layer = cfg.layer
if layer < 0 then
  layer = res.layers[1]
  for _, l in ipairs(res.layers) do if res.by_layer[l].max_share > res.by_layer[layer].max_share then layer = l end end
end
local map
ctx:reset()
ctx:no_grad(function()
  m:loss(batches[1], { train = false, probe = function(name, l, x)
    if name == "h" and l == layer then map = R.sorted_map(x, 0, res.order, { rows = math.min(64, x:size(1)) }) end
  end })
end)
ctx:reset()
if not map then die("layer " .. layer .. " has no block output") end
local ranks = {}
for i = 1, res.C do ranks[i] = i - 1 end
local share_by_rank, havg_by_rank = {}, {}
for i, d in ipairs(res.order) do share_by_rank[i], havg_by_rank[i] = res.top_share[d + 1], res.h_avg[d + 1] end
local FIG = figure.declare{
  title = "Residual sinks: |h| with the dimensions sorted by H_avg (arXiv 2601.22966)",
  dims = { { "token", long_name = "position in the sequence" }, { "rank", long_name = "dimension's rank by H_avg (0 = largest)" } },
  vars = {
    { "h_abs", dims = { "token", "rank" }, long_name = "|h| of the first sequence at the shown layer, dimensions by H_avg", units = "1" },
    { "top_share", dims = { "rank" }, long_name = "share of token·layer rows with the dimension in the top-k of |h|", units = "1", label = "top-{@k} share" },
    { "stability", dims = {}, long_name = "top-k share of the dimension with the largest H_avg", units = "1" },
  },
  panels = {
    { kind = "heatmap", z = "h_abs", logcb = true, title = "layer {@layer}: |h|, dimensions sorted by H_avg", xlabel = "dimension (by H_avg)", ylabel = "token" },
    { kind = "line", x = "rank", y = { "top_share" }, title = "share of tokens with the dimension in the top-{@k} (stability {=stability})",
      xlabel = "dimension (by H_avg)", ylabel = "share" },
  },
}
local out = cfg.out ~= "" and cfg.out or ("results/residual-sinks/" .. (label:gsub("[^%w%-_.]", "_")))
fs.mkdir_p(out)
local data = { coords = { token = map.rows, rank = ranks }, vars = { h_abs = map.z, top_share = share_by_rank, stability = res.stability },
               attrs = { k = res.k, layer = layer } }
figure.write_netcdf(out .. "/residual-sinks.nc", FIG, data, { id = "residual-sinks", title = FIG.title,
  summary = string.format("residual sinks of %s: top-%d shares by H_avg rank, |h| of one sequence at layer %d", label, res.k, layer) })
local files = figure.draw(out, "residual-sinks", FIG, data)
print("figure: " .. (files[3] or out .. "/residual-sinks.png"))
