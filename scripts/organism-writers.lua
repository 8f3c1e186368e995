-- scripts/organism-writers.lua — who writes the first token's state, and who writes everyone
-- else's: the SwiGLU write of every layer of one trained LLaMA-family model of the cache,
-- decomposed neuron by neuron (docs/findings/organism.md, "Why the ratio stops").
--
--   bin/outlierlab run scripts/organism-writers.lua --model=cache/models/<hash> [--batches=8]
--
-- On `batches` held-out batches of 16 sequences of the model's own validation stream (the
-- stream phenomena.lua measures), per layer l:
--   * the state norm ‖h‖ at the first token (position 0, the initial token) against the ordinary
--     tokens' median (every other position; the norm ratio of docs/findings/organism.md), and the same for
--     the FFN's write f = W_down·x_down (x_down = silu(W_gate·x̂) ⊙ W_up·x̂, x̂ the normalised input);
--   * at the first token: the neuron j with the largest contribution |x_down_j|·‖W_down[:, j]‖,
--     the share of the write it carries (its projection on f over ‖f‖²), x_down_j, the cosines of
--     its gate and up rows with x̂, its three weight norms against the layer's median row (column)
--     norm, and the share of its W_down column's largest channel;
--   * at the ordinary tokens (medians over tokens): the same top neuron's share of the write, its
--     |x_down|, cosines and W_down column norm; and per token id how often the same neuron is the
--     top one (1.00: a fixed neuron per token, a lookup table) and how many distinct neurons serve
--     the ids seen.
-- The measurement is outlierlab.measure.writers (organism-search.lua prints it for the model it
-- trains, too). Nothing is trained or written; the numbers are printed.
local cache = require "outlierlab.runner.cache"
local recipes = require "outlierlab.recipes"
local batcher = require "outlierlab.data.batcher"
local writers = require "outlierlab.measure.writers"
local cfg = require("outlierlab.config").get{ model = "", batches = 8 }

if cfg.model == "" then error("organism-writers: --model=DIR (a model directory of the cache, with spec.json and model.safetensors) is required", 0) end
local spec, spec_path = cache.read_spec(cfg.model)   -- or nil and the reason, naming the file
if not spec then error("organism-writers: " .. spec_path, 0) end
if type(spec.batch) ~= "table" or spec.batch.kind ~= "lm" then
  error("organism-writers: " .. spec_path .. " is not a language model's spec (batch.kind \"lm\")", 0)
end
local ctx, m = recipes.load(spec, { ckpt = cfg.model .. "/model.safetensors" })
local va = batcher.batcher(batcher.corpus(spec.data), { B = 16, T = spec.batch.T, kind = "lm", seed = spec.seed + 1, split = "val" })
local ok, res = pcall(writers.measure, ctx, m, function() return va:next(ctx) end, cfg.batches)
if not ok then error("organism-writers: " .. cfg.model .. ": " .. tostring(res), 0) end
print(string.format("%s: %s, d %d, F %d, %d layers; %d held-out batches of 16 × %d tokens", cfg.model, spec.model.preset,
                    m.cfg.d_model, m.cfg.d_ff, m.cfg.n_layer, cfg.batches, spec.batch.T))
for _, line in ipairs(writers.lines(res)) do print(line) end
