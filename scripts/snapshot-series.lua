-- scripts/snapshot-series.lua — a checkpoint series of the decoder organism: train so-fig3's model
-- (recipes.llama_lm_spec at --profile; any key of the profile as --key=value: --seed=2,
-- --embed_scale=0, --steps=3000, …) and keep its weights at step 0 and every --every steps, each
-- as a model directory (spec.json + model.safetensors, weights only) that scripts/checkpoint-series.lua
-- reads. The model itself, with the curve its tracker recorded, goes to OUT/final.
--
--   bin/outlierlab run scripts/snapshot-series.lua --out=DIR [--profile=default] [--seed=1] [--every=300]
--   bin/outlierlab run scripts/checkpoint-series.lua --dir=DIR/series
--
-- Written: OUT/series/step<N>/ for N = 0, every, 2·every, … and the last step; OUT/final/ (the trained
-- model, its track.lua). A killed run resumes from OUT/final's checkpoint and keeps the snapshots it
-- has. At the end it prints the onset table of the tracked curve (the tracker's points every steps/20
-- on one held-out batch), to set beside checkpoint-series' table of the same run's snapshots.
local fs = require "outlierlab.util.fs"
local json = require "outlierlab.util.json"
local serialize = require "outlierlab.util.serialize"
local config = require "outlierlab.config"
local recipes = require "outlierlab.recipes"
local checkpoint = require "outlierlab.train.checkpoint"
local onsets = require "outlierlab.judge.onsets"

local function die(msg) error("snapshot-series: " .. msg, 0) end
-- the profile first, then its keys (and the script's own) strictly
local profile = config.get({ profile = "default" }, { strict = false }).profile
local base = recipes.LLAMA_LM_PROFILES[profile]
if not base then die("--profile=" .. tostring(profile) .. " is not one of quick, default, long, paper") end
local defaults = config.deep_copy(base)
defaults.out, defaults.profile, defaults.every = "", profile, 300
local cfg = config.get(defaults)
if cfg.out == "" then die("--out=DIR is required (where the series and the final model go)") end
if math.floor(cfg.every) ~= cfg.every or cfg.every < 1 then die("--every must be a positive integer, got " .. tostring(cfg.every)) end
local args = { out = cfg.out, every = cfg.every }
cfg.out, cfg.profile, cfg.every = nil, nil, nil
local spec = recipes.llama_lm_spec(cfg)
if args.every > spec.train.steps then die(string.format("--every=%d is beyond the %d training steps", args.every, spec.train.steps)) end

local final = args.out .. "/final"
fs.mkdir_p(final, "snapshot-series")
local spec_text = json.encode{ spec = spec } .. "\n"
local function snapshot(step, ctx)
  local d = string.format("%s/series/step%d", args.out, step)
  fs.mkdir_p(d, "snapshot-series")
  checkpoint.save(d .. "/model.safetensors", ctx, { step = step }, { optim = false })
  fs.write_atomic(d .. "/spec.json", spec_text)
end
local facts = recipes.trainer(spec)(final, final .. "/model.ckpt", {
  on_start = function(ctx) snapshot(0, ctx) end,
  on_step = function(step, _, ctx)
    if step % args.every == 0 or step == spec.train.steps then snapshot(step, ctx) end
  end,
})
fs.write_atomic(final .. "/spec.json", spec_text)
fs.write_atomic(final .. "/done.lua", serialize.serialize{ val_loss = facts.val_loss, steps = facts.steps })
print(string.format("snapshot-series: %d steps, final validation loss %.4f; series in %s/series", facts.steps,
                    facts.val_loss or 0 / 0, args.out))
local track = fs.read_file(final .. "/track.lua")
local curve = track and serialize.deserialize(track, "@" .. final .. "/track.lua")
if type(curve) == "table" and #curve > 0 then
  print("")
  print("The tracked curve of the same run (recipes/track.lua):")
  for _, line in ipairs(onsets.table{ { label = "tracked", seed = spec.seed, curve = curve } }) do print(line) end
end
