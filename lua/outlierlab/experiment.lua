-- experiment — the vocabulary of the experiment files in one table (docs/reference/experiments.md):
--   local E = require "outlierlab.experiment"
-- It holds no code of its own: each name is looked up in the module that implements it,
--   the runner            outlierlab.runner.run (run_file, sweep_size), .cache (code_hash, ...),
--                         .report (results_dir, NO_VERDICT), .catalogue (list, markdown_table)
--   the recipes           outlierlab.recipes (LLAMA_LM_PROFILES, BERT_MLM_PROFILES, llama_lm_spec,
--                         bert_mlm_spec, profiles_with, fit = train_model, load = load_model, ...)
--   the data              outlierlab.data.batcher (corpus, batcher, data_spec, organism_task)
--   the analysis helpers  outlierlab.measure.batches (probe_batches, blocks, token_label)
--   the bounds            outlierlab.train.bounds (check_run, check_memory, check_profile)
--   file helpers          outlierlab.util.fs (hash, read_file, mkdir), outlierlab.util.serialize
-- and an assignment (E.CORPUS_FILE_TOKENS = n in a test) goes to the module that owns the name.
-- Library modules require those modules directly, never this one (tests/lua/test_layering.lua).
local fs = require "outlierlab.util.fs"
local serialize = require "outlierlab.util.serialize"
local bounds = require "outlierlab.train.bounds"

local aliases = {
  hash = fs.hash, read_file = fs.read_file, mkdir = fs.mkdir_p,
  serialize = serialize.serialize, deserialize = serialize.deserialize,
  check_sizes = bounds.check_batch, check_profile = bounds.check_profile,
}
local owners = {
  require "outlierlab.runner.run", require "outlierlab.runner.cache", require "outlierlab.runner.report",
  require "outlierlab.runner.catalogue", require "outlierlab.recipes", require "outlierlab.data.batcher",
  require "outlierlab.measure.batches", aliases,
}

return setmetatable({}, {
  __index = function(_, k)
    for _, m in ipairs(owners) do
      local v = m[k]
      if v ~= nil then return v end
    end
  end,
  __newindex = function(t, k, v)
    for _, m in ipairs(owners) do
      if m[k] ~= nil then m[k] = v return end
    end
    rawset(t, k, v)
  end,
})
