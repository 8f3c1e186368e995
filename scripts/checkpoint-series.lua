-- scripts/checkpoint-series.lua — when each phenomenon appears over a series of checkpoints: every
-- model directory in a folder (Hugging Face directories with config.json, or models of the cache
-- with spec.json), in the order of the step number in its name (the last integer: step1000,
-- checkpoint-264000, …; a cached model's training steps otherwise), measured on the same batches:
-- Gu et al.'s sink rate, the massive ratio at the first token and the residual-sink share
-- (measure/residual.series_point); then the step at which each first crosses its threshold and the
-- step from which it stays across (judge/onsets).
--
--   bin/outlierlab run scripts/checkpoint-series.lua --dir=FOLDER [--text=FILE] [--batches=2]
--        [--sink_rate=0.5] [--massive_ratio=100] [--resid_share=0.9]
--
-- Inputs: --text=FILE read with the first model's tokenizer (Hugging Face directories), else the
-- held-out batches of the first cached model's data, else fixed pseudo-random token ids (8
-- sequences of up to 128 tokens per batch). Every checkpoint must have the first one's vocabulary.
-- Prints one line per checkpoint and the onset table (markdown). Nothing is written.
local ol = require "outlierlab"
local fs = require "outlierlab.util.fs"
local R = require "outlierlab.measure.residual"
local onsets = require "outlierlab.judge.onsets"
local cfg = require("outlierlab.config").get{ dir = "", text = "", batches = 2, sink_rate = 0.5, massive_ratio = 100, resid_share = 0.9 }

local function die(msg) error("checkpoint-series: " .. msg, 0) end
if cfg.dir == "" then die("--dir=FOLDER (a folder of Hugging Face directories or cached models) is required") end
local function exists(p) local f = io.open(p, "rb") if f then f:close() return true end return false end

local list = {}
for _, name in ipairs(fs.list_dir(cfg.dir) or die("cannot list " .. cfg.dir)) do
  local d = cfg.dir .. "/" .. name
  local kind = exists(d .. "/config.json") and "hf" or exists(d .. "/spec.json") and "cache" or nil
  if kind then
    local step = tonumber(name:match("(%d+)%D*$"))
    if not step and kind == "cache" then
      local spec = require("outlierlab.runner.cache").read_spec(d)
      step = spec and spec.train and spec.train.steps
    end
    list[#list + 1] = { dir = d, name = name, kind = kind, step = step }
  end
end
if #list == 0 then die(cfg.dir .. " holds no model directory (config.json or spec.json)") end
for i, e in ipairs(list) do if not e.step then die(e.dir .. ": no step number in its name") end end
table.sort(list, function(a, b) return a.step < b.step end)

local function load(e)
  if e.kind == "hf" then
    local ctx, m = require("outlierlab.pretrained.hf").load(e.dir)
    return ctx, m
  end
  local spec, why = require("outlierlab.runner.cache").read_spec(e.dir)
  if not spec then die(why) end
  local ctx, m = require("outlierlab.recipes").load(spec, { ckpt = e.dir .. "/model.safetensors" })
  m:eval()
  return ctx, m, spec
end

-- the batches, built in each checkpoint's own context from the same token ids
local ids_rows
local function batches_for(ctx, m, spec)
  local quant = require "outlierlab.compress.rtn"
  if not ids_rows then
    local src
    if cfg.text ~= "" and list[1].kind == "hf" then
      local text = require "outlierlab.data.text"
      local tk = require("outlierlab.pretrained.tokenizers").load(list[1].dir)
      local T = math.min(128, m.cfg.block_size)
      local corpus = text.corpus{ path = cfg.text, tokenizer = tk, max_tokens = 8 * T * cfg.batches + 16 }
      src = quant.batches(ctx, text.batcher(corpus, { B = 8, T = T, kind = "lm", n = cfg.batches }), cfg.batches)
    elseif spec then
      local batcher = require "outlierlab.data.batcher"
      src = quant.batches(ctx, batcher.batcher(batcher.corpus(spec.data), { B = spec.batch.B, T = spec.batch.T, kind = "lm",
                                                                           seed = spec.seed + 1, split = "val" }), cfg.batches)
    end
    ids_rows = {}
    for i = 1, cfg.batches do
      local b = src and src[i]
      local B, T = b and b.ids:size(0) or 8, b and b.ids:size(1) or math.min(128, m.cfg.block_size)
      local r = { B = B, T = T, ids = {}, targets = {} }
      for j = 0, B * T - 1 do
        r.ids[j] = b and b.ids.idata[j] or math.floor(ol.C.ol_rand_uniform(7 + i, j) * m.cfg.vocab_size)
        r.targets[j] = b and b.targets.idata[j] or math.floor(ol.C.ol_rand_uniform(1007 + i, j) * m.cfg.vocab_size)
      end
      ids_rows[i] = r
    end
  end
  local out = {}
  for i, r in ipairs(ids_rows) do
    local ids = ctx:tensor({ r.B, r.T }, { dtype = "i32", persistent = true })
    local tg = ctx:tensor({ r.B, r.T }, { dtype = "i32", persistent = true })
    for j = 0, r.B * r.T - 1 do
      if r.ids[j] >= m.cfg.vocab_size then die(string.format("token id %d is beyond the vocabulary of %d", r.ids[j], m.cfg.vocab_size)) end
      ids.idata[j], tg.idata[j] = r.ids[j], r.targets[j]
    end
    out[i] = { ids = ids, targets = tg }
  end
  return out
end

local curve = {}
for _, e in ipairs(list) do
  local ctx, m, spec = load(e)
  local p = R.series_point(ctx, m, batches_for(ctx, m, spec))
  p.step = e.step
  curve[#curve + 1] = p
  print(string.format("%-28s step %-8d sink rate %.3f  massive ratio %8.2f  residual-sink share %.3f", e.name, e.step,
                      p.sink_rate, p.massive_ratio, p.resid_share))
end
local th = { sink_rate = cfg.sink_rate, massive_ratio = cfg.massive_ratio, resid_share = cfg.resid_share }
for k, v in pairs(th) do onsets.THRESHOLDS[k] = v end
print("")
for _, line in ipairs(onsets.table{ { label = cfg.dir, curve = curve } }) do print(line) end
