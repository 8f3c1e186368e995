-- scripts/onset-table.lua — when each phenomenon appears, per remedy and seed, from the curves the
-- trainer tracked (track.lua of every model of the cache: the tracker's points every steps/20 on a
-- held-out batch, recipes.tracker): the step at which Gu et al.'s sink rate, the massive ratio at a
-- sink token and the residual-sink share first cross their thresholds, and the step from which they
-- stay across (judge/onsets). Models trained before the residual-sink share was tracked say "n/a".
--
--   bin/outlierlab run scripts/onset-table.lua [--models=cache/models] [--run=results/<id>/<profile>/run.json]
--        [--steps=0 (any)] [--preset=""] [--sink_rate=0.5] [--massive_ratio=100] [--resid_share=0.9] [--partial]
--
-- A model's label is what its spec sets beyond its preset: the attention variant, the optimizer,
-- the norm options (norm_gain, norm_variant, residual_clip, embed_proj); "vanilla" when none.
-- --steps and --preset keep only the models of that many steps / that preset; of models with the
-- same label and seed (retrained under newer code) the latest is kept; a model still training (no
-- done.lua yet) is left out unless --partial, which lists it with its last tracked step. --run
-- keeps only the models one experiment's run used (its run.json's models): in a cache that holds
-- the recipe map's knob variants too (a learning rate, a data option), those share the label
-- "vanilla" with the leaderboard's models, and the note under the table counts the models left out
-- that way. Prints markdown.
local fs = require "outlierlab.util.fs"
local serialize = require "outlierlab.util.serialize"
local onsets = require "outlierlab.judge.onsets"
local cache = require "outlierlab.runner.cache"
local json = require "outlierlab.util.json"
local cfg = require("outlierlab.config").get{ models = "cache/models", run = "", steps = 0, preset = "", sink_rate = 0.5,
                                              massive_ratio = 100, resid_share = 0.9, partial = false }

-- --run: the model hashes a run.json lists
local only
if cfg.run ~= "" then
  local text = fs.read_file(cfg.run) or error("onset-table: cannot read " .. cfg.run, 0)
  local r = json.decode(text, cfg.run)
  only = {}
  for _, h in ipairs(type(r.models) == "table" and r.models or {}) do only[h] = true end
  if not next(only) then error("onset-table: " .. cfg.run .. " lists no models (its field models)", 0) end
end

local function label(spec)
  local parts = {}
  local ov = spec.model.overrides or {}
  local a = ov.attention
  if a then
    local kind = type(a) == "table" and (a.kind or "softmax") or a
    local extra = type(a) == "table" and (a.form or a.gate) or nil
    parts[#parts + 1] = kind .. (extra and ("/" .. extra) or "")
  end
  if spec.train.optimizer then parts[#parts + 1] = spec.train.optimizer end
  for _, k in ipairs { "norm_gain", "norm_variant", "residual_clip", "embed_proj", "norm_gate_mode", "norm_gate_act" } do
    if ov[k] ~= nil then parts[#parts + 1] = k .. "=" .. tostring(ov[k]) end
  end
  return #parts > 0 and table.concat(parts, ", ") or "vanilla"
end

local rows, shadowed = {}, 0
for _, name in ipairs(fs.list_dir(cfg.models) or error("onset-table: cannot list " .. cfg.models, 0)) do
  local d = cfg.models .. "/" .. name
  local track = (not only or only[name]) and fs.read_file(d .. "/track.lua")
  local spec = track and (cfg.partial or fs.read_file(d .. "/done.lua")) and cache.read_spec(d)
  if spec and (cfg.steps == 0 or spec.train.steps == cfg.steps) and (cfg.preset == "" or spec.model.preset == cfg.preset) then
    local curve = serialize.deserialize(track, "@" .. d .. "/track.lua")
    if type(curve) == "table" and #curve > 0 then
      local row = { label = string.format("%s (%s, %d steps)", label(spec), spec.model.preset, spec.train.steps),
                    seed = spec.seed, curve = curve, mtime = fs.mtime(d .. "/track.lua") or 0 }
      -- one row per (label, seed): the latest trained (a retrained model of newer code has another hash)
      local key = row.label .. "\0" .. tostring(row.seed)
      if rows[key] then shadowed = shadowed + 1 end
      if not rows[key] or row.mtime > rows[key].mtime then rows[key] = row end
    end
  end
end
local list = {}
for _, r in pairs(rows) do list[#list + 1] = r end
rows = list
if #rows == 0 then error("onset-table: no model with a tracked curve (track.lua) in " .. cfg.models, 0) end
table.sort(rows, function(a, b) if a.label ~= b.label then return a.label < b.label end return a.seed < b.seed end)
for k, v in pairs { sink_rate = cfg.sink_rate, massive_ratio = cfg.massive_ratio, resid_share = cfg.resid_share } do
  onsets.THRESHOLDS[k] = v
end
for _, line in ipairs(onsets.table(rows)) do print(line) end
print("")
print("Cells: the first tracked step at or above the threshold (held N: from step N on it stays there; lost: below again at the end); — never; n/a not tracked.")
if shadowed > 0 then
  print(string.format("%d model(s) with the label and seed of a later one left out (a retrained model, or another " ..
                      "experiment's recipe: --run picks one experiment's models).", shadowed))
end
