-- test_eval_rows — a decoder profile's eval_rows: the held-out batches' rows apart from the
-- training batch (recipes.llama_lm_spec, data.batcher.eval_B, measure.batches), and a spec that
-- does not set it stays the spec it was (docs/reference/training.md).
local t = require "tap"
local ol = require "outlierlab"
local recipes = require "outlierlab.recipes"
local batcher = require "outlierlab.data.batcher"
local batches = require "outlierlab.measure.batches"
local config = require "outlierlab.config"

local function profile(extra)
  local p = config.deep_copy(recipes.LLAMA_LM_PROFILES.quick)
  for k, v in pairs(extra or {}) do p[k] = v end
  return p
end

-- the spec: eval_B only when eval_rows is set and differs from the batch
do
  local s0 = recipes.llama_lm_spec(profile())
  t.is(s0.batch.eval_B, nil, "eval_rows = 0: no eval_B in the spec")
  t.is(batcher.eval_B(s0), s0.batch.B, "eval_rows = 0: held-out batches have the training batch's rows")
  local s1 = recipes.llama_lm_spec(profile { eval_rows = s0.batch.B })
  t.is(s1.batch.eval_B, nil, "eval_rows = batch: no eval_B in the spec")
  local s2 = recipes.llama_lm_spec(profile { batch = 4, eval_rows = 6 })
  t.is(s2.batch.B, 4, "eval_rows: the training batch stays the profile's")
  t.is(s2.batch.eval_B, 6, "eval_rows = 6 with batch 4: eval_B = 6")
  t.is(batcher.eval_B(s2), 6, "batcher.eval_B reads it")
  -- wsd's cooldown likewise: in the spec only with the wsd schedule
  t.is(s0.train.cooldown, nil, "a constant schedule's spec has no cooldown")
  local s3 = recipes.llama_lm_spec(profile { schedule = "wsd", cooldown = 5 })
  t.is(s3.train.cooldown, 5, "wsd: the cooldown is in the spec")
  t.is(s3.train.min_lr, 0, "wsd: the shared profiles decay to 0")
end

-- the analyses' held-out batches: eval_B rows each, and the global sequence offsets follow them
do
  local spec = recipes.llama_lm_spec(profile { batch = 4, eval_rows = 6 })
  local corpus = batcher.corpus(spec.data)
  local ctx = ol.Context { params = 64, step_bytes = 2 ^ 22 }
  local seen = {}
  local P = { distributable = function() return false end,
              forward = function(_, _, b) seen[#seen + 1] = { rows = tonumber(b.ids.shape[0]), off = b.seq_offset } end }
  batches.probe_batches(ctx, nil, P, corpus, spec, 3)
  t.is(#seen, 3, "three held-out batches")
  t.is(seen[1].rows, 6, "each with eval_B = 6 rows (not the training batch's 4)")
  t.is(seen[3].off, 12, "batch 3 starts at sequence 2·6")
end

return t.done()
