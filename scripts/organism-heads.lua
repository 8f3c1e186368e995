-- scripts/organism-heads.lua — every attention head of one trained language model of the cache:
-- how much it attends to the first token, and whether the value it takes from there is drained
-- (docs/findings/organism.md, "What it reaches": which heads keep the sink heads' mean value above 0.2).
--
--   bin/outlierlab run scripts/organism-heads.lua --model=cache/models/<hash> [--batches=16]
--
-- On `batches` held-out batches of 16 sequences of the model's own validation stream (the
-- stream and the measurement of the training history: tracked.measure_phenomena,
-- measure/phenomena.lua), per layer: top-1/median |h| at the first token in the layer's input
-- (the previous layer's output; "—" for layer 0, whose input is the embedding) and, per head,
-- Gu et al.'s α (the mean attention on the first key), its share (the largest weight on one
-- initial key, per query), the value ratio at the first token (its attention-weighted value norm
-- over the median value norm of the other keys) and the attention left for ordinary tokens.
-- Then the sink heads (α > ε = 0.3) and their mean value ratio, over all of them and split by
-- whether the head reads a massive first-token state (its layer's input ratio ≥ the organism's
-- massive threshold, judge/thresholds.lua) or not. Nothing is trained or written.
local cache = require "outlierlab.runner.cache"
local recipes = require "outlierlab.recipes"
local tracked = require "outlierlab.recipes.track"
local batcher = require "outlierlab.data.batcher"
local phenomena = require "outlierlab.measure.phenomena"
local thresholds = require "outlierlab.judge.thresholds"
local cfg = require("outlierlab.config").get{ model = "", batches = 16 }

local function fail(msg) error("organism-heads: " .. msg, 0) end
if cfg.model == "" then fail("--model=DIR (a model directory of the cache, with spec.json and model.safetensors) is required") end
local spec, spec_path = cache.read_spec(cfg.model)   -- or nil and the reason, naming the file
if not spec then fail(spec_path) end
if type(spec.batch) ~= "table" or (spec.batch.kind ~= "lm" and spec.batch.kind ~= "mlm") then
  fail(spec_path .. " is not a language model's spec (batch.kind \"lm\" or \"mlm\")")
end
local n = tonumber(cfg.batches)
if not n or n < 1 or n % 1 ~= 0 then fail("--batches must be a positive integer, got " .. tostring(cfg.batches)) end

local ctx, m = recipes.load(spec, { ckpt = cfg.model .. "/model.safetensors" })
local ok, r = pcall(tracked.measure_phenomena, ctx, m, batcher.corpus(spec.data), spec, 16, n)
if not ok then fail(cfg.model .. ": " .. tostring(r)) end

local MASSIVE, EPS, DRAIN = thresholds.THRESHOLDS.massive_ratio, phenomena.SINK_EPS, thresholds.THRESHOLDS.value_ratio
local function f3(x) return x == x and string.format("%.3f", x) or "—" end
print(string.format("%s: %s, %d layers × %d heads; %d held-out batches of 16 × %d tokens", cfg.model, spec.model.preset,
                    m.cfg.n_layer, m.cfg.n_head, n, spec.batch.T))
local groups = { massive = { n = 0, sum = 0, drained = 0 }, plain = { n = 0, sum = 0, drained = 0 } }
local prev
for _, l in ipairs(r.layers) do
  local input = prev and r.per_layer[prev].ratio_at.initial or 0 / 0
  local g = (input == input and input >= MASSIVE) and "massive" or "plain"
  print(string.format("layer %d: first token's top-1/median |h| in the input %s", l,
                      input == input and string.format("%.1f", input) or "— (the embedding)"))
  local H = r.heads[l] or {}
  for h = 0, m.cfg.n_head - 1 do
    local e = H[h]
    if e then
      local sink = e.alpha_first > EPS
      local v = e.value_ratio.initial or 0 / 0
      print(string.format("  head %d: α %s, share %s, value ratio %s, attention on ordinary tokens %s%s", h, f3(e.alpha_first),
                          f3(e.share.initial or 0 / 0), f3(v), f3(e.mass.other or 0 / 0), sink and "  (sink)" or ""))
      if sink and v == v then
        local G = groups[g]
        G.n, G.sum = G.n + 1, G.sum + v
        if v <= DRAIN then G.drained = G.drained + 1 end
      end
    end
  end
  prev = l
end
local all = { n = groups.massive.n + groups.plain.n, sum = groups.massive.sum + groups.plain.sum,
              drained = groups.massive.drained + groups.plain.drained }
local function line(name, G)
  return string.format("%s: %d sink head(s), mean value ratio %s, %d with value ≤ %g", name, G.n,
                       G.n > 0 and string.format("%.3f", G.sum / G.n) or "—", G.drained, DRAIN)
end
print(string.format("sink rate %.2f (ε = %g; %d of %d heads)", r.sink_rate, EPS, r.sink_heads, r.n_heads))
print(line("all", all))
print(line(string.format("reading a massive first-token state (input ratio ≥ %g)", MASSIVE), groups.massive))
print(line("reading the embedding or a plain state", groups.plain))
