-- runner/report — what a run leaves behind: <run dir>/summary.md, run.json (what the results
-- gallery reads) and the training history of each model the run used (outlierlab.runner.history).
local ol = require "outlierlab"
local fs = require "outlierlab.util.fs"
local dist = require "outlierlab.util.dist"
local results = require "outlierlab.figure.netcdf"
local plot = require "outlierlab.figure.gnuplot"
local canonical_json = require("outlierlab.util.json").canonical

local M = {}
local read_file = fs.read_file

-- ---------------------------------------------------------------- summary.md
-- The quick profile is a smoke test (seconds of training): its summaries give the numbers but
-- no verdict (M.NO_VERDICT), whatever the experiment's criterion says.
M.NO_VERDICT = "no verdict (quick profile: a smoke test)"
local function verdict_word(s)
  if s.no_verdict then return M.NO_VERDICT end
  return s.holds == true and "holds" or s.holds == false and "does not hold" or "inconclusive"
end
M.verdict_word = verdict_word
local function verdict(s)
  if s.no_verdict then return "**" .. M.NO_VERDICT .. "**" end
  local h = s.holds
  if h == true then return "the claim **holds** at this scale" end
  if h == false then return "the claim **does not hold** at this scale" end
  return "the claim is **inconclusive** at this scale"
end

-- the training seconds of the models a run used, from their cache entries (done.lua's
-- train_seconds, trained now or earlier): what the run costs from an empty cache, one model at a
-- time; nil when the run used none
local function models_train_seconds(run, models)
  if not models or #models == 0 or not run.cache_root then return nil end
  local load_data, sum = require("outlierlab.runner.cache").load_data, 0
  for _, h in ipairs(models) do
    local info = load_data(run.cache_root .. "/models/" .. h .. "/done.lua")
    sum = sum + (info and tonumber(info.train_seconds) or 0)
  end
  return sum
end

-- A number as a person writes it: the shortest of %.15g, %.16g and %.17g that reads back as
-- the same double (0.1, not 0.10000000000000001; 1e-05; 3000), NaN and infinities in words.
local function human_number(x)
  if x ~= x then return "NaN" end
  if x == math.huge then return "∞" elseif x == -math.huge then return "−∞" end
  if x == math.floor(x) and math.abs(x) < 2 ^ 53 then return string.format("%d", x) end
  for _, f in ipairs { "%.15g", "%.16g" } do
    local t = string.format(f, x)
    if tonumber(t) == x then return t end
  end
  return string.format("%.17g", x)
end
M.human_number = human_number

-- a setting's value for a Markdown table cell: numbers as above, lists comma-separated, a
-- nested table as {key = value, …} in sorted key order; a '|' is escaped
local function human_value(v)
  local ty = type(v)
  local out
  if ty == "number" then out = human_number(v)
  elseif ty == "table" then
    local parts, n, keys = {}, #v, {}
    for k in pairs(v) do keys[#keys + 1] = k end
    if n > 0 and #keys == n then
      for i = 1, n do parts[i] = human_value(v[i]) end
      out = table.concat(parts, ", ")
    else
      table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
      for i, k in ipairs(keys) do parts[i] = tostring(k) .. " = " .. human_value(v[k]) end
      out = "{" .. table.concat(parts, ", ") .. "}"
    end
  elseif v == nil then out = ""
  else out = tostring(v) end
  return (out:gsub("|", "\\|"))
end
M.human_value = human_value

-- the settings as a two-column Markdown table, keys sorted
local function settings_table(cfg)
  local keys = {}
  for k in pairs(cfg) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  local lines = { "| setting | value |", "|---|---|" }
  for _, k in ipairs(keys) do
    local v = cfg[k]
    if v == nil then v = cfg[tonumber(k)] end
    lines[#lines + 1] = "| " .. k .. " | " .. human_value(v) .. " |"
  end
  return lines
end

-- The criteria a verdict was decided on, the unmet ones first: s.criteria, a list of
-- { met = true|false, text = "what was measured (needs …)" } that an experiment's summary may
-- return. Without it, the "met: …" / "not met: …" items of its notes (the form the older
-- summaries write their margins in), taken out of the notes so they are said once.
-- Returns failed, met (lists of texts) and the notes left.
local function criteria(s)
  local list, notes = {}, s.notes
  if type(s.criteria) == "table" then
    for _, c in ipairs(s.criteria) do list[#list + 1] = { met = c.met and true or false, text = tostring(c.text) } end
  elseif type(notes) == "string" then
    -- an item ends at "; " or at a full stop followed by a space or the end (not 0.5's point)
    local kept, pos = {}, 1
    while pos <= #notes do
      local _, e = notes:find("[;.]%s+", pos)
      if not e then _, e = notes:find("[;.]$", pos) end
      e = e or #notes
      local piece = notes:sub(pos, e)
      local neg, text = piece:match("^%s*(n?o?t? ?)met: (.-)[;.]?%s*$")
      if text and (neg == "" or neg == "not ") then list[#list + 1] = { met = neg == "", text = text }
      else kept[#kept + 1] = piece end
      pos = e + 1
    end
    notes = table.concat(kept):gsub("%s+$", "")
  end
  local failed, met = {}, {}
  for _, c in ipairs(list) do
    if c.met then met[#met + 1] = c.text else failed[#failed + 1] = c.text end
  end
  return failed, met, notes
end
M.criteria = criteria

-- summary.md, read top down in half a minute: the verdict first, then which criterion failed
-- and by how much (one line each), the claim and the numbers, the settings as a table, and
-- last how the run was made (engine, command, machine, stages, files).
local function write_summary(run, s, timings, models, mts)
  local src = run.exp.source
  local lines = { "# " .. run.id .. " — " .. run.exp.title, "", "Verdict: " .. verdict(s) .. "." }
  local failed, met, notes = criteria(s)
  if #failed > 0 or #met > 0 then
    lines[#lines + 1] = ""
    -- the quick profile decides nothing: its criteria are reported as measured
    local judged = not s.no_verdict
    for _, c in ipairs(failed) do lines[#lines + 1] = "- " .. (judged and "**Not met**: " or "Not met: ") .. c end
    for _, c in ipairs(met) do lines[#lines + 1] = "- Met: " .. c end
  end
  local add = function(...) for _, l in ipairs { ... } do lines[#lines + 1] = l end end
  add("", "## Claim", "", src.paper .. (src.figure ~= "" and (", " .. src.figure) or "") .. ": " .. src.claim, "",
      "## Result", "",
      "- Paper: " .. tostring(s.paper or "(no number given)"),
      "- Reproduced (" .. run.profile .. " profile): " .. tostring(s.reproduced or "(none)"))
  if notes and notes ~= "" then add("", notes) end
  add("", "## Settings", "")
  -- s.settings: an imported model's (outlierlab.pretrained): a note saying what was analysed
  -- (s.settings_note) and the analysis settings
  if s.settings_note then add(s.settings_note, "") end
  if type(s.settings) == "string" then add(s.settings)
  else for _, l in ipairs(settings_table(s.settings or run.cfg)) do add(l) end end
  add("", "## Run", "",
      "- Profile: " .. run.profile .. ", seed " .. tostring(run.seed),
      "- Engine: " .. ol.version() .. ", git commit " .. results.git_commit(),
      "- Command: `" .. results.command_line() .. "`",
      "- Machine: " .. results.machine_line() .. " × " .. results.mpi_ranks() .. " rank(s)")
  local parts = {}
  for _, t in ipairs(timings) do
    parts[#parts + 1] = string.format("%s %.1f s%s", t.name, t.seconds, not t.cached and "" or
      t.computed_seconds and string.format(" (cached; computed in %.1f s)", t.computed_seconds) or " (cached)")
  end
  add("- Stages: " .. table.concat(parts, ", "))
  if mts then
    add(string.format("- Models: %d, %.0f s of training in all (their cache entries; trained now or by an earlier run)",
                      #models, mts))
  end
  local files = {}
  for _, f in ipairs(run.files) do
    local base = f:match("([^/]+)$")
    if not base:match("%.dat$") then files[#files + 1] = "`" .. base .. "`" end
  end
  add("- Files: " .. table.concat(files, ", "))
  plot.write_atomic(run.dir .. "/summary.md", table.concat(lines, "\n") .. "\n")
end

-- ---------------------------------------------------------------- results directory, run.json
-- Where a run's files go: <results root>/<id>/<profile>/, so that runs of different profiles
-- never overwrite each other; a run on an imported model (o.model = its name or directory)
-- goes to <results root>/<id>/<model name>-<profile>/, a run on a real text (o.data = "kjv" for
-- --data=kjv, "mix50" for --p_text=0.5: runner/run.data_leaf) to <results root>/<id>/<o.data>-<profile>/.
function M.results_dir(root, id, o)
  o = o or {}
  local leaf = o.profile or "default"
  if o.data and o.data ~= "" then leaf = o.data .. "-" .. leaf end
  if o.model and o.model ~= "" then
    local name = tostring(o.model):gsub("/+$", ""):match("([^/]+)$") or "model"
    leaf = name:gsub("[^%w%-_%.]", "_") .. "-" .. leaf
  end
  return root .. "/" .. id .. "/" .. leaf
end

-- the hashes of the models this run used (trained or cached), the same list on every rank
-- (sweep groups each saw their own members)
local function model_list(run)
  local mine = {}
  for h in pairs(run.model_hashes or {}) do mine[#mine + 1] = h end
  if dist.world_size() > 1 then
    local set = {}
    for _, text in ipairs(dist.allgather_string(table.concat(mine, " "))) do
      for h in text:gmatch("%x+") do set[h] = true end
    end
    mine = {}
    for h in pairs(set) do mine[#mine + 1] = h end
  end
  table.sort(mine)
  return mine
end

-- each model's training history (outlierlab.runner.history), written next to the cached model when
-- missing and copied to <run dir>/history/<hash>.{nc,png} (rank 0)
local function copy_histories(run, hashes)
  local history = require "outlierlab.runner.history"
  run.histories = {}
  -- a history another model of an earlier run left there (a changed profile or code) goes
  local keep = {}
  for _, h in ipairs(hashes) do keep[h .. ".nc"], keep[h .. ".png"] = true, true end
  for _, name in ipairs(fs.list_dir(run.dir .. "/history")) do
    if name:match("^%x+%.nc$") or name:match("^%x+%.png$") then
      if not keep[name] then os.remove(run.dir .. "/history/" .. name) end
    end
  end
  for _, h in ipairs(hashes) do   -- every rank's models (model_list): sweep groups trained some of them
    local dir = run.cache_root .. "/models/" .. h
    -- written once per model, and again when the figure's contents changed (history.VERSION)
    local ok, err = pcall(history.ensure, dir, { id = run.id, profile = run.profile, seed = run.seed,
                                                 config = { model_hash = h } })
    if not ok then run:log("model %s: its training history could not be written (%s)", h, tostring(err)) end
    for _, ext in ipairs({ "nc", "png" }) do
      local text = read_file(dir .. "/history." .. ext)
      if text then
        local dst = run.dir .. "/history/" .. h .. "." .. ext
        plot.write_atomic(dst, text)
        run.files[#run.files + 1] = dst
        run.histories[#run.histories + 1] = "history/" .. h .. "." .. ext
      end
    end
  end
end

-- run.json: what the results gallery (outlierlab.runner.gallery) reads about one run
local function write_run_json(run, s, timings, seconds, models, mts)
  local src = run.exp.source
  local files = {}
  for _, f in ipairs(run.files) do
    local rel = f:sub(1, #run.dir + 1) == run.dir .. "/" and f:sub(#run.dir + 2) or f
    files[#files + 1] = rel
  end
  files[#files + 1] = "summary.md"
  local stages = {}
  for i, t in ipairs(timings) do
    stages[i] = { name = t.name, seconds = t.seconds, cached = t.cached, computed_seconds = t.computed_seconds }
  end
  local rec = {
    id = run.id, title = run.exp.title, paper = src.paper, figure = src.figure, claim = src.claim,
    profile = run.profile, seed = run.seed, settings = run.pretrained and run.pretrained:settings(run.cfg) or run.cfg,   -- an import trained nothing
    paper_result = s.paper and tostring(s.paper) or nil, reproduced = s.reproduced and tostring(s.reproduced) or nil,
    verdict = verdict_word(s), criterion_met = s.criterion_met,
    seconds = seconds, stages = stages, files = files, models = models,
    models_train_seconds = mts,
    histories = run.histories, engine = ol.version(), git_commit = results.git_commit(),
    date = results.timestamp(), mpi_ranks = results.mpi_ranks(), command = results.command_line(),
    machine = results.machine(),
  }
  plot.write_atomic(run.dir .. "/run.json", canonical_json(rec) .. "\n")
end
M.model_list, M.copy_histories, M.write_summary, M.write_run_json = model_list, copy_histories, write_summary, write_run_json
M.models_train_seconds = models_train_seconds

return M
