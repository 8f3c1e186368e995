-- tests/lua/lib/model_dir.lua — a model directory of the cache made by hand, for the scripts
-- that read one (scripts/organism-*.lua): the initial weights of spec's model, changed by
-- plant(W, cfg) first when given (W: the parameters by name), saved as dir/model.safetensors with
-- dir/spec.json as the runner's cache writes it ({ spec = spec }).
--   local model_dir = dofile(ol.root .. "/tests/lua/lib/model_dir.lua")
--   model_dir(spec, dir, function(W, cfg) ... end)   -- returns dir
local ol = require "outlierlab"
local ffi = require "ffi"
local fs = require "outlierlab.util.fs"
local json = require "outlierlab.util.json"
local recipes = require "outlierlab.recipes"
local models = require "outlierlab.models"
local checkpoint = require "outlierlab.train.checkpoint"

return function(spec, dir, plant)
  local ctx = ol.Context{ seed = spec.seed }
  local m = models.build(ctx, models.spec_cfg(spec))
  local W = {}
  for _, p in ipairs(ctx:params()) do W[ffi.string(p.name)] = p end
  if plant then plant(W, m.cfg) end
  fs.mkdir_p(dir)
  checkpoint.save(dir .. "/model.safetensors", ctx, {})
  fs.write_atomic(dir .. "/spec.json", json.encode({ spec = spec }) .. "\n")
  return dir
end
