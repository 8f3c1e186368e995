-- scripts/results-table.lua — the "every target" table of docs/findings/results.md from the run.json files
-- a results root holds (one per experiment and profile, written by the runner):
--
--   bin/outlierlab run scripts/results-table.lua [--results=results] [--profile=default]
--
-- One row per experiment, in id order: the paper's claim and number, what this run reproduced,
-- the verdict, the seeds (the profile's n_seeds, else one), the run's wall time (with what it
-- reused from the cache: its models' training time and its analysis time when computed) and the
-- commit it ran at; a missing experiment is listed as not run. The total time and the commits are printed
-- under the table. Nothing is computed here: every cell is a field of a run.json.
local ol = require "outlierlab"
local fs = require "outlierlab.util.fs"
local json = require "outlierlab.util.json"
local cfg = require("outlierlab.config").get { results = ol.root .. "/results", profile = "default" }

local ids = {}
for _, e in ipairs(require("outlierlab.runner.catalogue").list()) do ids[#ids + 1] = e.id end
table.sort(ids)

local function cell(s) return (tostring(s or ""):gsub("|", "\\|"):gsub("\n", " ")) end
print("| id | the paper's claim and number | reproduced (" .. cfg.profile .. " profile) | verdict | seeds | time |")
print("|---|---|---|---|---|---|")
local total, commits, missing = 0, {}, {}
for _, id in ipairs(ids) do
  local path = cfg.results .. "/" .. id .. "/" .. cfg.profile .. "/run.json"
  local text = fs.read_file(path)
  if not text then
    missing[#missing + 1] = id
    print(string.format("| %s | | (not run) | | | |", id))
  else
    local r = json.decode(text, path)
    local n = r.settings and r.settings.n_seeds or 1
    total = total + (r.seconds or 0)
    commits[(r.git_commit or "?"):sub(1, 7)] = true
    -- what the run reused: its models' training and the analysis stages' seconds when computed
    -- (run files written before these fields existed give the wall time alone)
    local an, known = 0, r.models_train_seconds ~= nil
    for _, st in ipairs(r.stages or {}) do
      if st.name ~= "train" then
        local v = st.cached and st.computed_seconds or (not st.cached and st.seconds) or nil
        if v then an = an + v else known = false end
      end
    end
    local cost = known and string.format(" (models' training %.0f s, analysis %.0f s)", r.models_train_seconds, an) or ""
    print(string.format("| %s | %s: %s | %s | %s | %s | %.0f s%s |", id, cell(r.paper), cell(r.paper_result),
                        cell(r.reproduced), cell(r.verdict), n == 1 and "1 seed" or (n .. " seeds"), r.seconds or 0, cost))
  end
end
local cs = {}
for c in pairs(commits) do cs[#cs + 1] = c end
table.sort(cs)
print()
print(string.format("Total: %.0f s (%.1f h) over %d experiments at commit(s) %s%s.", total, total / 3600,
                    #ids - #missing, table.concat(cs, ", "),
                    #missing > 0 and ("; not run: " .. table.concat(missing, ", ")) or ""))
