-- Model organism — how long, at what settings, until attention heads learn to do nothing.
--
-- Method (docs/findings/organism.md): the default profiles of the other experiments train small models
-- on the Bigram-Backcopy task (outlierlab.data.organism), in which a head that serves a copy is
-- needed only right after a trigger token and must add nothing elsewhere. This experiment is
-- the recipe map behind that choice: for each family (LLaMA-style decoder, GPT-2-style decoder of
-- the same shape, BERT-style encoder, ViT on flat-background images) it trains the default recipe (the very model the figures
-- analyse, shared through the cache) and one-at-a-time variations of the knobs that matter
-- (learning rate, weight decay, depth, data mix), and records during training, on held-out
-- batches (train/track.lua, recipes/track.lua, outlierlab.measure.phenomena):
--   the largest sink share of any head (attention of other tokens on <bos>/[CLS] or on
--   delimiters), that head's value norm at the sink over the median value norm (the value
--   drain), top-1/median |h| at the sink token in the layer where it is largest (massive
--   activation), and the average kurtosis of the layer outputs.
-- The thresholds of a "model organism" (the papers' phenomena, scaled down; one place,
-- outlierlab.judge.thresholds, which the training histories draw): sink share >= 0.8 with a
-- value ratio <= 0.2, top-1/median >= 100 at the sink token, average kurtosis >= 30.
-- The verdict judges the FINAL measurement of each model: the mean over the tracked points of
-- the last 10 % of training (the end-of-training state the figures analyse). The summary says
-- separately when a threshold was first met on the way ("reached on the way at step N"); a
-- threshold met on the way and lost by the end is not reached.
local config = require "outlierlab.config"
local thresholds = require "outlierlab.judge.thresholds"
local tracked = require "outlierlab.recipes.track"
local track = require "outlierlab.train.track"
local papers = require "outlierlab.recipes.papers"
local recipes = require "outlierlab.recipes"

local THRESHOLDS = thresholds.THRESHOLDS

-- the knobs of each family: name -> function(cfg, value) changing the family's profile
local KNOBS = {
  lr = function(c, v) c.lr = v end,
  weight_decay = function(c, v) c.weight_decay = v end,
  depth = function(c, v) c.n_layer = v end,
  groups = function(c, v) c.groups = v; c.n_triggers = math.min(c.n_triggers, 4 * v) end,
  seed = function(c, v) c.seed = v end,
  -- an attention variant by name (docs/reference/attention.md), put on the spec's model by train
  attention = function(c, v) c.attention = v end,
  -- the task and shape knobs of the search for a stronger organism (docs/findings/organism.md,
  -- "The search"): sequence length at the same tokens per step, copies that never repeat a
  -- trigger, recall tokens (an induction circuit), pointer tokens and their hops (a chain of
  -- attention layers), the token embeddings' own weight decay, width and heads
  seq_len = function(c, v) c.batch = math.max(1, math.floor(c.batch * c.seq_len / v)); c.seq_len = v end,
  loop_free = function(c, v) c.loop_free = v ~= 0 end,
  recall = function(c, v) c.n_recall = v; c.p_recall = c.p_recall or 0.08 end,
  pointer = function(c, v) c.n_pointer = v; c.p_pointer = c.p_pointer or 0.15; c.p_trigger = math.min(c.p_trigger, 0.08) end,
  embed_wd = function(c, v) c.embed_weight_decay = v end,
  width = function(c, v) c.d_model = v; c.d_ff = 4 * v end,
  heads = function(c, v) c.n_head = v end,
  -- the ViT's images (docs/findings/organism.md, "The ViT's recipe map"): side in pixels at the same
  -- patch size, number of shape classes, background style (flat or textured), per-patch labels
  -- (dense=1: every patch token labelled object class or background, models/vit.lua)
  image = function(c, v) c.image = v end,
  classes = function(c, v) c.classes = v end,
  style = function(c, v) c.style = v end,
  dense = function(c, v) c.dense = v ~= 0 end,
  -- the remedies' optimizer (adamw, muon, orthoadam) and single-scale RMSNorm (norm_gain=single)
  optimizer = function(c, v) c.optimizer = v end,
  norm_gain = function(c, v) c.norm_gain = v end,
  -- a fixed factor on the LLaMA decoder's token embedding (docs/findings/organism.md, "Why the ratio
  -- stops": at 20 layer 0 writes no per-token table and <bos>'s state stands out)
  embed_scale = function(c, v) c.embed_scale = v end,
}
-- hops: pointers of 1 .. v hops (at least v pointer tokens, the pointer knob's masses)
KNOBS.hops = function(c, v) KNOBS.pointer(c, math.max(c.n_pointer or 0, v)); c.pointer_hops = v end
-- the knobs whose value is a name, not a number
local NAMED = { attention = true, optimizer = true, norm_gain = true, style = true }
-- the knobs of one family only: knob -> { family, whose it is in the error message }
local VIT_KNOB, LLAMA_KNOB = { "vit", "the ViT's (images)" }, { "llama", "the LLaMA decoder's" }
local ONE_FAMILY = { image = VIT_KNOB, classes = VIT_KNOB, style = VIT_KNOB, dense = VIT_KNOB, embed_scale = LLAMA_KNOB }

-- GPT-2 on the decoder's task and recipe, in the LLaMA organism's shape (4 layers, d 64, 2 heads,
-- F 256 at default): learned absolute positions, LayerNorm and GELU instead of RoPE, RMSNorm and
-- SwiGLU; gpt2-quick is that shape with 2 layers, n_layer sets the depth
local GPT2_PROFILES = {}
for name, p in pairs(recipes.LLAMA_LM_PROFILES) do
  local c = config.deep_copy(p)
  if name ~= "paper" then c.preset = "gpt2-quick"; c.n_layer = name == "quick" and 2 or 4 else c.preset = "gpt2-124m" end
  c.embed_scale = 0   -- GPT-2 has no embedding factor (the LLaMA decoder's × 20)
  GPT2_PROFILES[name] = c
end

-- family -> { base profile of the shared recipe, spec builder, trainer }
local FAMILIES = {
  llama = { profiles = recipes.LLAMA_LM_PROFILES, spec = recipes.llama_lm_spec, train = recipes.fit },
  gpt2 = { profiles = GPT2_PROFILES, spec = recipes.llama_lm_spec, train = recipes.fit },
  bert = { profiles = recipes.BERT_MLM_PROFILES, spec = recipes.bert_mlm_spec, train = recipes.fit },
  vit = { profiles = papers.VIT_PROFILES, spec = papers.vit_organism_spec, train = recipes.fit },
}

-- "knob=value" strings of the profile -> member list
local function members(cfg, profile)
  local out = {}
  for _, fam in ipairs(cfg.families) do
    local F = FAMILIES[fam] or error("organism: unknown family '" .. tostring(fam) .. "'; valid: llama, gpt2, bert, vit", 0)
    local base = F.profiles[profile] or F.profiles.default
    out[#out + 1] = { family = fam, knobs = {}, base = true, label = fam .. " default" }
    for _, kv in ipairs(cfg[fam .. "_vary"] or {}) do
      -- an entry is knob=value, or several joined by "+" (groups=1+seed=2), applied in order
      local knobs = {}
      for part in (tostring(kv) .. "+"):gmatch("([^+]*)%+") do
        local k, v = part:match("^([%w_]+)=([%w%.%-_]+)$")
        local value = k and (NAMED[k] and v or tonumber(v))
        if not k or not KNOBS[k] or value == nil then
          local names = {}
          for n in pairs(KNOBS) do if not NAMED[n] then names[#names + 1] = n end end
          table.sort(names)
          error(string.format("organism: --%s_vary entry '%s' is not knob=number (or several joined by +) with a knob of %s, or attention=<kind>, optimizer=<name>, norm_gain=single, style=flat|textured", fam,
            tostring(kv), table.concat(names, ", ")), 0)
        end
        local only = ONE_FAMILY[k]
        if only and fam ~= only[1] then
          error(string.format("organism: --%s_vary entry '%s': the knob %s is %s, not %s's", fam, kv, k, only[2], fam), 0)
        end
        knobs[#knobs + 1] = { k, value }
      end
      out[#out + 1] = { family = fam, knobs = knobs, label = string.format("%s %s", fam, kv) }
    end
    for _, m in ipairs(out) do
      if m.family == fam and not m.cfg then
        local c = config.deep_copy(base)
        if cfg.steps_scale ~= 1 then c.steps = math.max(1, math.floor(c.steps * cfg.steps_scale)) end
        for _, kv in ipairs(m.knobs) do KNOBS[kv[1]](c, kv[2]) end
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
      return { family = m.family, base = m.base, label = m.label, curve = {}, diverged = msg }
    end
    local info = h.info or {}
    -- a curve measured by other code than this tree's is not judged (recipes/track.lua)
    local fresh, why = tracked.fresh(info, h.hash)
    if not fresh then error("organism: " .. why, 0) end
    return { family = m.family, base = m.base, label = m.label, curve = info.curve or {},
             steps = info.steps, val_loss = info.val_loss, seconds = info.train_seconds, hash = h.hash,
             describe = info.describe }
  end)
end

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
    local e = { family = m.family, base = m.base, label = m.label, steps = m.steps,
                val_loss = m.val_loss, seconds = m.seconds, curve = m.curve, diverged = m.diverged }
    -- the one verdict (judge/thresholds): the final measurement, and the first step on the way
    local j = thresholds.judge(m.curve)
    for _, name in ipairs(thresholds.ORDER) do
      e["first_" .. name] = j.first[name] or -1
      e["reached_" .. name] = j.reached[name]
    end
    e.reached_all = j.all
    e.final = j.final
    e.final_from = j.window.from
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
  for _, k in ipairs(thresholds.ORDER) do
    local d, r = {}, {}
    for i, m in ipairs(ms) do d[i], r[i] = m["first_" .. k], m["reached_" .. k] and 1 or 0 end
    nc:var("first_step_" .. k, { "member" }, d, { long_name = "first tracked step at which the " .. k ..
      " threshold was met on the way (-1: never)", units = "1", type = "int" })
    nc:var("reached_" .. k, { "member" }, r, { long_name = "the " .. k .. " threshold is met by the final measurement " ..
      "(mean over the tracked points of the last 10 % of training): 1, else 0", units = "1", type = "int" })
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

local function summary(run)
  local a = run.out.analyze
  local lines, base_ok = {}, {}
  for _, m in ipairs(a.members) do
    if m.diverged then
      lines[#lines + 1] = string.format("| %s | diverged: %s | | | | |", m.label, m.diverged:gsub("|", "/"))
    else
      local j = { final = m.final or {}, reached = {}, first = {} }
      for _, k in ipairs(thresholds.ORDER) do
        j.reached[k] = m["reached_" .. k]
        j.first[k] = m["first_" .. k] >= 0 and m["first_" .. k] or nil
      end
      lines[#lines + 1] = string.format("| %s | %s | %s | %s | %.3g | %.0f |", m.label,
        thresholds.words(j, "sink"), thresholds.words(j, "massive"), thresholds.words(j, "kurtosis"),
        m.val_loss or 0 / 0, m.seconds or 0 / 0)
    end
    if m.base then base_ok[m.family] = m.reached_all == true end
  end
  local reached, fams = {}, {}
  for fam, ok in pairs(base_ok) do fams[#fams + 1] = fam if ok then reached[#reached + 1] = fam end end
  table.sort(reached)
  table.sort(fams)
  local notes = table.concat({
    "What is judged: each model's **final measurement**, the mean of each quantity over the tracked points of the last " ..
      string.format("%.0f %%", 100 * thresholds.FINAL_SHARE) .. " of its training (points every steps/" .. track.STABLE_POINTS_PER_RUN .. " steps there, each on " ..
      track.TRACK_BATCHES .. " held-out batches of at most 16 sequences of its own; earlier points every steps/" ..
      track.TRACK_POINTS .. " steps on the same batches). A threshold met at an earlier point and lost by the end is reported as \"reached on the way at step N\" and does not count. The same final means and thresholds are drawn in each model's training history (history.png).",
    "",
    "Thresholds (judge/thresholds): sink — " .. thresholds.WHAT.sink .. "; massive — " .. thresholds.WHAT.massive ..
      "; kurtosis — " .. thresholds.WHAT.kurtosis .. ".",
    "",
    "The figures judge other quantities of the same final models, and their verdicts do not replace these: so-fig3 (on the LLaMA default model) " ..
      "judges SO's τ·mean|h| rule (τ = 100 at the default profile) over eval_batches held-out batches — which tokens and channels the outliers are at — " ..
      "and is inconclusive when no element exceeds τ·mean|h|; this map's massive threshold is top-1/median |h| at the sink token. " ..
      "A model below 100 here has no decided massive activation, whatever a peak on the way reached.",
    "",
    "| model | sink share / value ratio | top-1/median at the sink | avg kurtosis | val loss | train s |",
    "|---|---|---|---|---|---|",
    table.concat(lines, "\n"),
  }, "\n")
  return {
    paper = "QT, SO and Guo et al. 2024: no-op heads park on the initial token or delimiters with small values; massive activations at that token; kurtosis in the hundreds to thousands (large models, long training)",
    reproduced = string.format("default recipes meeting all three thresholds at the end of training (mean of the last %.0f %% of the tracked steps): %s (of %s)",
      100 * thresholds.FINAL_SHARE, #reached > 0 and table.concat(reached, ", ") or "none", table.concat(fams, ", ")),
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
    -- back-copy of the original task, the plain token embedding instead of × 20); the long map
    -- varies every knob, 4x longer
    default = { families = { "llama", "gpt2", "bert", "vit" }, steps_scale = 1,
                llama_vary = { "lr=0.03", "weight_decay=0", "groups=1", "embed_scale=0", "seed=2", "seed=3", "attention=softmax1" },
                gpt2_vary = { "seed=2", "seed=3" },
                bert_vary = { "seed=2", "seed=3" },
                vit_vary = { "seed=2", "seed=3" } },
    long = { families = { "llama", "gpt2", "bert", "vit" }, steps_scale = 4,
             llama_vary = { "lr=0.003", "lr=0.03", "weight_decay=0", "weight_decay=0.3", "depth=2", "depth=6", "groups=1", "groups=3", "embed_scale=0", "seed=2", "seed=3", "attention=softmax1" },
             gpt2_vary = { "seed=2", "seed=3" },
             bert_vary = { "lr=0.003", "weight_decay=0", "depth=2", "groups=1", "seed=2", "seed=3" },
             vit_vary = { "lr=0.0003", "weight_decay=0", "depth=2", "depth=8", "classes=8", "style=textured", "image=48", "dense=1", "seed=2", "seed=3" } },
  },
  stages = { { "train", train }, { "analyze", analyze, cache = true }, { "plot", plot } },
  summary = summary,
}
