-- ptq — the compression experiments' vocabulary in one table (docs/reference/compression.md):
--   local ptq = require "outlierlab.ptq"
-- the quantisation and its evaluations (outlierlab.compress.evaluate: evaluate, w8a8,
-- weight_only, outlier_stats, weights, KEEP_FP, mean_std, pm, ...) and the model specs of the
-- papers (outlierlab.recipes.papers: qt_profiles, qt_spec, so_profiles, so_spec, vit_spec,
-- qt_row, ...; train = recipes.fit, load = recipes.load, image_loader = data.batcher's).
-- It holds no code of its own; library modules require those modules directly.
local quant = require "outlierlab.compress.evaluate"
local papers = require "outlierlab.recipes.papers"
local recipes = require "outlierlab.recipes"
local batcher = require "outlierlab.data.batcher"

local M = {}
for k, v in pairs(quant) do M[k] = v end
for k, v in pairs(papers) do M[k] = v end
M.train, M.load = recipes.fit, recipes.load
M.image_loader = batcher.image_loader
M.measure_vit_phenomena = recipes.measure_vit_phenomena
return M
