-- scripts/timings.lua — the "Timings" numbers of docs/findings/results.md from the run.json files and the
-- model cache:
--
--   bin/outlierlab run scripts/timings.lua [--results=results] [--cache=cache] [--profile=default] [--ranks=2]
--
-- Each experiment's run.json lists the models it used (their cache hashes); each model's
-- cache/models/<hash>/done.lua holds its training time (train_seconds, measured by the runner's
-- cache) and spec.json its preset and steps. A model is counted once, in the first experiment
-- that uses it in id order (the order `make reproduce-all` runs them), so the per-experiment
-- column says what that experiment adds from an empty cache. The wall time at --ranks models at a
-- time (each model on one rank, as `RANKS=N` trains them) is summed over the experiments, which
-- run one after another: each one's new models spread evenly over the ranks, and never less than
-- its longest model (so --ranks=64 does not promise a 72-model leaderboard in one model's time
-- plus nothing). It assumes each model takes the time it took here.
-- A model resumed from its checkpoint counts the time to that checkpoint too (train_clock.lua);
-- one resumed before the clock existed recorded only its last run's time (flagged). The last line
-- names the machines the models were trained on (done.lua's machine: CPU and OpenBLAS kernels).
-- Nothing is measured here: every number is a field the runner wrote.
local ol = require "outlierlab"
local fs = require "outlierlab.util.fs"
local json = require "outlierlab.util.json"
local cache = require "outlierlab.runner.cache"
local cfg = require("outlierlab.config").get { results = ol.root .. "/results",
                                               cache = os.getenv("OUTLIERLAB_CACHE") or (ol.root .. "/cache"),
                                               profile = "default", ranks = 2 }

local ids = {}
for _, e in ipairs(require("outlierlab.runner.catalogue").list()) do ids[#ids + 1] = e.id end
table.sort(ids)

local seen, n_models, total, resumed, missing = {}, 0, 0, 0, {}
local machines, machine_order = {}, {}   -- where the models were trained (done.lua's machine), in order met
local rows, by_preset, wall_at_ranks = {}, {}, 0
for _, id in ipairs(ids) do
  local path = cfg.results .. "/" .. id .. "/" .. cfg.profile .. "/run.json"
  local text = fs.read_file(path)
  if text then
    local r = json.decode(text, path)
    local new, secs, longest = 0, 0, 0
    for _, h in ipairs(r.models or {}) do
      if not seen[h] then
        seen[h] = true
        local dir = cfg.cache .. "/models/" .. h
        local info = cache.load_data(dir .. "/done.lua")
        if not info then
          missing[#missing + 1] = id .. ":" .. h
        else
          local s = tonumber(info.train_seconds) or 0
          local specs = fs.read_file(dir .. "/spec.json")
          local spec = specs and json.decode(specs, dir .. "/spec.json").spec or {}
          local preset = spec.model and spec.model.preset or "?"
          local steps = spec.train and spec.train.steps or 0
          local key = string.format("%s, %d steps", preset, steps)
          by_preset[key] = by_preset[key] or {}
          table.insert(by_preset[key], s)
          new, secs, n_models, total = new + 1, secs + s, n_models + 1, total + s
          longest = math.max(longest, s)
          -- a model resumed by a version without train_clock.lua recorded its last run's time only
          if info.resumed and not fs.read_file(dir .. "/train_clock.lua") then resumed = resumed + 1 end
          -- the machine decides the time (and the bits): its CPU and OpenBLAS kernels, not the threads
          local m = type(info.machine) == "table" and require("outlierlab.figure.netcdf").machine_kernels(info.machine)
                    or "no machine recorded"
          if not machines[m] then machines[m] = 0; machine_order[#machine_order + 1] = m end
          machines[m] = machines[m] + 1
        end
      end
    end
    rows[#rows + 1] = { id = id, models = #(r.models or {}), new = new, secs = secs, wall = r.seconds or 0 }
    wall_at_ranks = wall_at_ranks + math.max(secs / cfg.ranks, longest)
  end
end

print("| experiment | models used | models it adds | their training | this run's wall time |")
print("|---|---|---|---|---|")
table.sort(rows, function(a, b) if a.secs ~= b.secs then return a.secs > b.secs end return a.id < b.id end)
for _, r in ipairs(rows) do
  print(string.format("| %s | %d | %d | %.0f s (%.0f %%) | %.0f s |", r.id, r.models, r.new, r.secs,
                      total > 0 and 100 * r.secs / total or 0, r.wall))
end
print()
print("| preset | models | training time per model: min / median / max |")
print("|---|---|---|")
local keys = {}
for k in pairs(by_preset) do keys[#keys + 1] = k end
table.sort(keys)
for _, k in ipairs(keys) do
  local t = by_preset[k]
  table.sort(t)
  local n = #t
  local med = n % 2 == 1 and t[(n + 1) / 2] or (t[n / 2] + t[n / 2 + 1]) / 2
  print(string.format("| %s | %d | %.0f / %.0f / %.0f s |", k, n, t[1], med, t[n]))
end
print()
print(string.format("Total: %d distinct models, %.0f s of training (%.1f h); at %d models at a time about %.0f s (%.1f h) of " ..
                    "training wall time (each experiment's new models over the ranks, at least its longest)%s%s.",
                    n_models, total, total / 3600, cfg.ranks, wall_at_ranks, wall_at_ranks / 3600,
                    resumed > 0 and string.format("; %d model(s) resumed from a checkpoint (only their last run's time is recorded)", resumed) or "",
                    #missing > 0 and ("; not in the cache: " .. table.concat(missing, ", ")) or ""))
local where = {}
for i, m in ipairs(machine_order) do where[i] = string.format("%s (%d model%s)", m, machines[m], machines[m] == 1 and "" or "s") end
if #where > 0 then print("Trained on: " .. table.concat(where, "; ") .. ".") end
