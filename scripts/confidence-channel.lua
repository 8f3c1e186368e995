-- scripts/confidence-channel.lua — the confidence-regulation channel ("entropy neuron", Stolfo et
-- al. 2024; Gurnee et al. 2024) of one trained decoder of the cache (outlierlab.measure.confidence):
-- the channel of the last block's output that is largest (≥ tau × the token's mean |h|) most often,
-- at which positions it fires (where the next token is fixed by a rule of the organism task — a copy,
-- recall or pointer — against where it is a random draw), the share of its direction and of the
-- last block's write there in the unembedding's near-null space (the right singular directions of
-- W_U with the C/8 smallest singular values), and the entropy and loss change when it is
-- mean-ablated at the positions where it fires.
--
--   bin/outlierlab run scripts/confidence-channel.lua --model=cache/models/<hash> [--batches=4]
--        [--tau=100] [--layer=-1 (the last)] [--channel=-1 (found)]
--
-- Nothing is trained or written; the numbers are printed.
local cache = require "outlierlab.runner.cache"
local recipes = require "outlierlab.recipes"
local batcher = require "outlierlab.data.batcher"
local quant = require "outlierlab.compress.rtn"
local CR = require "outlierlab.measure.confidence"
local cfg = require("outlierlab.config").get{ model = "", batches = 4, tau = 100, layer = -1, channel = -1 }

local function die(msg) error("confidence-channel: " .. msg, 0) end
if cfg.model == "" then die("--model=DIR (a model directory of the cache, with spec.json and model.safetensors) is required") end
local spec, spec_path = cache.read_spec(cfg.model)
if not spec then die(spec_path) end
if type(spec.batch) ~= "table" or spec.batch.kind ~= "lm" then die(spec_path .. " is not a language model's spec (batch.kind \"lm\")") end
local ctx, m = recipes.load(spec, { ckpt = cfg.model .. "/model.safetensors" })
m:eval()
local corpus = batcher.corpus(spec.data)
local va = batcher.batcher(corpus, { B = spec.batch.B, T = spec.batch.T, kind = "lm", seed = spec.seed + 1, split = "val" })
local batches = quant.batches(ctx, va, cfg.batches)
local kinds = corpus.ruled and CR.organism_kinds(corpus) or nil
local r = CR.measure(ctx, m, batches, { tau = cfg.tau, kinds = kinds, layer = cfg.layer >= 0 and cfg.layer or nil,
                                        channel = cfg.channel >= 0 and cfg.channel or nil })

print(string.format("%s: %s, d %d, %d layers; %d held-out batches of %d × %d tokens", cfg.model, spec.model.preset,
  m.cfg.d_model, m.cfg.n_layer, cfg.batches, spec.batch.B, spec.batch.T))
print(string.format("channel %d of layer %d's output%s: fires (|h_c| ≥ %g × the token's mean |h|) at %d of %d positions (position 0 left out)",
  r.channel, r.layer, r.max_ratio and string.format(" (largest ratio %.1f)", r.max_ratio) or "", r.tau, r.fires, r.positions))
if r.by_kind then
  for _, k in ipairs { "draw", "copy" } do
    local b = r.by_kind[k]
    print(string.format("  next token a %s: %d of %d positions fire (%.1f %%)", k == "draw" and "random draw" or "rule (copy, recall, pointer)",
      b.fires, b.n, b.n > 0 and 100 * b.fires / b.n or 0))
  end
else
  print("  (the data is not the organism task: no copy/draw split)")
end
print(string.format("near-null space of W_U (bottom %d of %d singular directions; a random direction: %.3f): channel %.3f, the last block's write where it fires %s",
  r.bottom, r.C, r.chance, r.null_channel, r.null_write and string.format("%.3f", r.null_write) or "n/a"))
print(string.format("mean ablation (the channel set to %.4g, its mean where it does not fire) at the firing positions:", r.ablate_value))
print(string.format("  output entropy where it fires %.4f → %.4f nats (%+.4f); elsewhere %.4f → %.4f (%+.4f)", r.entropy.fire,
  r.entropy_ablated.fire, r.delta_entropy.fire, r.entropy.rest, r.entropy_ablated.rest, r.delta_entropy.rest))
print(string.format("  loss %.4f → %.4f (%+.4f)", r.loss, r.loss_ablated, r.loss_ablated - r.loss))
