-- Model organism — how long, at what settings, until attention heads learn to do nothing.
--
-- Method (docs/ORGANISM.md): the default profiles of the other experiments train small models
-- on the Bigram-Backcopy task (outlierlab.data.organism), in which a head that serves a copy is
-- needed only right after a trigger token and must add nothing elsewhere. This experiment is
-- the recipe map behind that choice: for each family (LLaMA-style decoder, GPT-2-style decoder of
-- the same shape, BERT-style encoder, ViT on flat-background images) it trains the default recipe (the very model the figures
-- analyse, shared through the cache) and one-at-a-time variations of the knobs that matter
-- (learning rate, weight decay, depth, data mix), and records during training, on held-out
-- batches (experiment.tracker, outlierlab.phenomena):
--   the largest sink share of any head (attention of other tokens on <bos>/[CLS] or on
--   delimiters), that head's value norm at the sink over the median value norm (the value
--   drain), top-1/median |h| at the sink token in the layer where it is largest (massive
--   activation), and the average kurtosis of the layer outputs.
-- The thresholds of a "model organism" (the papers' phenomena, scaled down): sink share >= 0.8
-- with a value ratio <= 0.2, top-1/median >= 100 at the sink token, average kurtosis >= 30.
-- The summary says, per member, when each threshold was first reached (or how close it came).
local exp_runner = require "outlierlab.experiment"
local ptq = require "outlierlab.ptq"
local config = require "outlierlab.config"

local THRESHOLDS = { sink_share = 0.8, value_ratio = 0.2, massive_ratio = 100, avg_kurtosis = 30 }

-- the knobs of each family: name -> function(cfg, value) changing the family's profile
local KNOBS = {
  lr = function(c, v) c.lr = v end,
  weight_decay = function(c, v) c.weight_decay = v end,
  depth = function(c, v) c.n_layer = v end,
  groups = function(c, v) c.groups = v; c.n_triggers = math.min(c.n_triggers, 4 * v) end,
  seed = function(c, v) c.seed = v end,
  -- an attention variant by name (docs/ATTENTION.md), put on the spec's model by train
  attention = function(c, v) c.attention = v end,
  -- the remedies' optimizer (adamw, muon, orthoadam) and single-scale RMSNorm (norm_gain=single)
  optimizer = function(c, v) c.optimizer = v end,
  norm_gain = function(c, v) c.norm_gain = v end,
}
-- the knobs whose value is a name, not a number
local NAMED = { attention = true, optimizer = true, norm_gain = true }

-- GPT-2 on the decoder's task and recipe, in the LLaMA organism's shape (4 layers, d 64, 2 heads,
-- F 256 at default): learned absolute positions, LayerNorm and GELU instead of RoPE, RMSNorm and
-- SwiGLU; gpt2-quick is that shape with 2 layers, n_layer sets the depth
local GPT2_PROFILES = {}
for name, p in pairs(exp_runner.LLAMA_LM_PROFILES) do
  local c = config.deep_copy(p)
  if name ~= "paper" then c.preset = "gpt2-quick"; c.n_layer = name == "quick" and 2 or 4 else c.preset = "gpt2-124m" end
  GPT2_PROFILES[name] = c
end

-- family -> { base profile of the shared recipe, spec builder, trainer }
local FAMILIES = {
  llama = { profiles = exp_runner.LLAMA_LM_PROFILES, spec = exp_runner.llama_lm_spec, train = exp_runner.train_model },
  gpt2 = { profiles = GPT2_PROFILES, spec = exp_runner.llama_lm_spec, train = exp_runner.train_model },
  bert = { profiles = exp_runner.BERT_MLM_PROFILES, spec = exp_runner.bert_mlm_spec, train = exp_runner.train_model },
  vit = { profiles = ptq.VIT_PROFILES, spec = ptq.vit_organism_spec, train = ptq.train },
}

-- "knob=value" strings of the profile -> member list
local function members(cfg, profile)
  local out = {}
  for _, fam in ipairs(cfg.families) do
    local F = FAMILIES[fam] or error("organism: unknown family '" .. tostring(fam) .. "'; valid: llama, gpt2, bert, vit", 0)
    local base = F.profiles[profile] or F.profiles.default
    out[#out + 1] = { family = fam, knob = "base", value = 0, label = fam .. " default" }
    for _, kv in ipairs(cfg[fam .. "_vary"] or {}) do
      local k, v = tostring(kv):match("^([%w_]+)=([%w%.%-_]+)$")
      local value = k and (NAMED[k] and v or tonumber(v))
      if not k or not KNOBS[k] or value == nil then
        error(string.format("organism: --%s_vary entry '%s' is not knob=number with a knob of %s, or attention=<kind>, optimizer=<name>, norm_gain=single", fam,
          tostring(kv), "lr, weight_decay, depth, groups, seed"), 0)
      end
      out[#out + 1] = { family = fam, knob = k, value = value, label = string.format("%s %s=%s", fam, k, v) }
    end
    for _, m in ipairs(out) do
      if m.family == fam and not m.cfg then
        local c = config.deep_copy(base)
        if cfg.steps_scale ~= 1 then c.steps = math.max(1, math.floor(c.steps * cfg.steps_scale)) end
        if m.knob ~= "base" then KNOBS[m.knob](c, m.value) end
        m.cfg = c
      end
    end
  end
  return out
end

local function train(run)
  local list = members(run.cfg, run.profile)
  return run:sweep(list, function(m)
    local F = FAMILIES[m.family]
    local spec = F.spec(m.cfg)
    if m.cfg.attention then spec.model.overrides.attention = m.cfg.attention end
    -- a setting that diverges (NaN/Inf: train.run stops with its message) is a point of the map
    local ok, h = pcall(F.train, run, spec)
    if not ok then
      local msg = type(h) == "table" and tostring(h.message) or tostring(h)
      if not msg:find("diverged", 1, true) then error(h, 0) end
      run:log("%s: %s", m.label, msg)
      return { family = m.family, knob = m.knob, value = m.value, label = m.label, curve = {}, diverged = msg }
    end
    local info = h.info or {}
    return { family = m.family, knob = m.knob, value = m.value, label = m.label, curve = info.curve or {},
             steps = info.steps, val_loss = info.val_loss, seconds = info.train_seconds, hash = h.hash,
             describe = info.describe }
  end)
end

-- first step at which a curve meets a condition, or nil
local function first_step(curve, ok)
  for _, p in ipairs(curve) do if ok(p) then return p.step end end
  return nil
end
local CONDITIONS = {
  sink = function(p) return (p.sink_share or 0) >= THRESHOLDS.sink_share and (p.value_ratio or 1 / 0) <= THRESHOLDS.value_ratio end,
  massive = function(p) return (p.massive_ratio or 0) >= THRESHOLDS.massive_ratio end,
  kurtosis = function(p) return (p.avg_kurtosis or 0) >= THRESHOLDS.avg_kurtosis end,
}
local function best(curve, key, lowest)
  local b = nil
  for _, p in ipairs(curve) do
    local v = p[key]
    if v == v and v ~= nil and (b == nil or (lowest and v < b or not lowest and v > b)) then b = v end
  end
  return b or 0 / 0
end

local function analyze(run)
  local out = { members = {} }
  for i, m in ipairs(run.out.train) do
    local e = { family = m.family, knob = m.knob, value = m.value, label = m.label, steps = m.steps,
                val_loss = m.val_loss, seconds = m.seconds, curve = m.curve, diverged = m.diverged }
    for name, cond in pairs(CONDITIONS) do e["first_" .. name] = first_step(m.curve, cond) or -1 end
    local last = m.curve[#m.curve] or {}
    e.final = last
    e.best_sink = best(m.curve, "sink_share")
    e.best_massive = best(m.curve, "massive_ratio")
    e.best_kurtosis = best(m.curve, "avg_kurtosis")
    out.members[i] = e
  end
  return out
end

local METRICS = {
  { key = "sink_share", name = "sink_share", long = "largest sink share of any head (attention of other tokens on the initial token or delimiters)" },
  { key = "value_ratio", name = "sink_value_ratio", long = "value norm at the sink over the median value norm, for the head with the largest sink share" },
  { key = "massive_ratio", name = "massive_ratio", long = "top-1 |h| at a sink token over the median |h|, per sequence averaged, in the layer where it is largest" },
  { key = "max_ratio", name = "top1_median_ratio", long = "top-1 |h| over the median |h| (any token), per sequence averaged, largest over layers" },
  { key = "avg_kurtosis", name = "avg_kurtosis", long = "Pearson kurtosis of the layer outputs h per sequence, averaged over sequences and layers" },
  { key = "loss", name = "train_loss", long = "training loss of the step" },
}

local function plot(run)
  local a = run.out.analyze
  local ms = a.members
  local P = 0
  for _, m in ipairs(ms) do P = math.max(P, #m.curve) end
  local nc = run:netcdf()
  local meanings = {}
  for i, m in ipairs(ms) do meanings[i] = m.label:gsub("[^%w_=.%-]", "_") end
  local vals = {}
  for i = 1, #ms do vals[i] = tostring(i - 1) end
  nc:dim("member", #ms, nil, { long_name = "trained model of the recipe map (family, knob changed from the default recipe)",
                               flag_values = table.concat(vals, " "), flag_meanings = table.concat(meanings, " ") })
  nc:dim("point", P, nil, { long_name = "measurement index during training" })
  local steps = {}
  for i, m in ipairs(ms) do
    steps[i] = {}
    for j = 1, P do steps[i][j] = m.curve[j] and m.curve[j].step or -1 end
  end
  nc:var("step", { "member", "point" }, steps, { long_name = "training step of the measurement (-1: none)", units = "1", type = "int" })
  for _, M in ipairs(METRICS) do
    local data = {}
    for i, m in ipairs(ms) do
      data[i] = {}
      for j = 1, P do
        local v = m.curve[j] and m.curve[j][M.key]
        data[i][j] = (v == nil) and 0 / 0 or v
      end
    end
    nc:var(M.name, { "member", "point" }, data, { long_name = M.long, units = "1", type = "double", _FillValue = 0 / 0 })
  end
  for _, k in ipairs { "sink", "massive", "kurtosis" } do
    local d = {}
    for i, m in ipairs(ms) do d[i] = m["first_" .. k] end
    nc:var("first_step_" .. k, { "member" }, d, { long_name = "first measured step reaching the " .. k ..
      " threshold (-1: not reached)", units = "1", type = "int" })
  end
  for k, v in pairs(THRESHOLDS) do nc:attr("threshold_" .. k, v) end
  nc:close()
  local blocks = {}
  for i, m in ipairs(ms) do
    local rows = {}
    for j, p in ipairs(m.curve) do
      rows[j] = { p.step, p.sink_share, p.value_ratio, p.massive_ratio, p.avg_kurtosis }
    end
    if #rows == 0 then rows[1] = { 0, 0 / 0, 0 / 0, 0 / 0, 0 / 0 } end
    blocks[i] = { columns = { "step", m.label, m.label, m.label, m.label }, rows = rows }
  end
  run:figure(run.id, "organism", blocks)
end

local function fmt_first(s) return s >= 0 and tostring(s) or "not reached" end

local function summary(run)
  local a = run.out.analyze
  local lines, base_ok = {}, {}
  for _, m in ipairs(a.members) do
    local f = m.final
    if m.diverged then
      lines[#lines + 1] = string.format("| %s | diverged: %s | | | | | | | |", m.label, m.diverged:gsub("|", "/"))
    else
    lines[#lines + 1] = string.format("| %s | %s | %s | %s | %.2f / %.2f | %.0f | %.1f | %.3g | %.0f |", m.label,
      fmt_first(m.first_sink), fmt_first(m.first_massive), fmt_first(m.first_kurtosis),
      f.sink_share or 0 / 0, f.value_ratio or 0 / 0, f.massive_ratio or 0 / 0, f.avg_kurtosis or 0 / 0,
      m.val_loss or 0 / 0, m.seconds or 0 / 0)
    end
    if m.knob == "base" then
      base_ok[m.family] = m.first_sink >= 0 and m.first_massive >= 0 and m.first_kurtosis >= 0
    end
  end
  local reached, fams = {}, {}
  for fam, ok in pairs(base_ok) do fams[#fams + 1] = fam if ok then reached[#reached + 1] = fam end end
  table.sort(reached)
  table.sort(fams)
  local notes = table.concat({
    "Thresholds: sink share >= 0.8 with the sink's value norm <= 0.2 of the median; top-1/median |h| >= 100 at the sink token; average kurtosis of h >= 30. A first step is the first of the measurements taken every steps/" .. exp_runner.TRACK_POINTS .. " steps on one held-out batch.",
    "",
    "| model | sink reached at | massive at | kurtosis at | final sink share / value ratio | final top-1/median at sink | final avg kurtosis | val loss | train s |",
    "|---|---|---|---|---|---|---|---|---|",
    table.concat(lines, "\n"),
  }, "\n")
  return {
    paper = "QT, SO and Guo et al. 2024: no-op heads park on the initial token or delimiters with small values; massive activations at that token; kurtosis in the hundreds to thousands (large models, long training)",
    reproduced = string.format("default recipes reaching all three thresholds: %s (of %s)",
      #reached > 0 and table.concat(reached, ", ") or "none", table.concat(fams, ", ")),
    holds = #fams > 0 and #reached == #fams,
    notes = notes,
  }
end

return {
  id = "organism",
  title = "Model organism: the recipe map of sinks, value drains, massive activations and kurtosis over training",
  source = { paper = "QT / SO / Guo et al. 2024", figure = "model organism",
             claim = "In a small model trained on a task whose heads must often do nothing, attention sinks with value drains, massive activations at the sink token and heavy-tailed activations emerge within minutes of training." },
  profiles = {
    quick = { families = { "llama", "gpt2" }, llama_vary = { "lr=0.003" }, gpt2_vary = {}, bert_vary = {}, vit_vary = {}, steps_scale = 1 },
    -- the default map: every family's default recipe over 3 seeds, and for the decoder the knobs
    -- that make or break the phenomena (a 4x higher learning rate, no weight decay, the single
    -- back-copy of the original task); the long map varies every knob, 4x longer
    default = { families = { "llama", "gpt2", "bert", "vit" }, steps_scale = 1,
                llama_vary = { "lr=0.03", "weight_decay=0", "groups=1", "seed=2", "seed=3", "attention=softmax1" },
                gpt2_vary = { "seed=2", "seed=3" },
                bert_vary = { "seed=2", "seed=3" },
                vit_vary = { "seed=2", "seed=3" } },
    long = { families = { "llama", "gpt2", "bert", "vit" }, steps_scale = 4,
             llama_vary = { "lr=0.003", "lr=0.03", "weight_decay=0", "weight_decay=0.3", "depth=2", "depth=6", "groups=1", "groups=3", "seed=2", "seed=3", "attention=softmax1" },
             gpt2_vary = { "seed=2", "seed=3" },
             bert_vary = { "lr=0.003", "weight_decay=0", "depth=2", "groups=1", "seed=2", "seed=3" },
             vit_vary = { "lr=0.0003", "weight_decay=0", "depth=2", "seed=2", "seed=3" } },
  },
  stages = { { "train", train }, { "analyze", analyze, cache = true }, { "plot", plot } },
  summary = summary,
}
