-- scripts/verdicts.lua — the verdict tables of README.md and docs/findings/results.md, generated
-- from one file, docs/findings/verdicts.tsv:
--
--   bin/outlierlab run scripts/verdicts.lua                    print README's block
--   bin/outlierlab run scripts/verdicts.lua --print=findings   print results.md's block
--   bin/outlierlab run scripts/verdicts.lua --write            rewrite both blocks in place
--   bin/outlierlab run scripts/verdicts.lua --update [--results=results] [--profile=default]
--                                                              refresh the TSV from the run files
--
-- The TSV has one row per experiment. Its columns verdict, seeds, paper, paper_result and
-- reproduced are copies of run.json fields (results/<id>/<profile>/run.json, written by the
-- runner); --update rewrites them. The columns claim, why and change are prose a person writes:
-- the claim in a few words, one line of why, and what would change the verdict. When --update
-- finds a verdict that moved, it replaces that row's why with "REVIEW: …", which the docs test
-- refuses, so a stale explanation cannot survive a new result. tests/lua/test_results_docs.lua
-- checks that both blocks equal what this script prints.
local ol = require "outlierlab"
local fs = require "outlierlab.util.fs"
local json = require "outlierlab.util.json"
local marked = require "outlierlab.util.marked"
local catalogue = require "outlierlab.runner.catalogue"
local cfg = require("outlierlab.config").get {
  tsv = ol.root .. "/docs/findings/verdicts.tsv", results = ol.root .. "/results", profile = "default",
  print = "readme", write = false, update = false,
}

local COLUMNS = { "id", "verdict", "seeds", "paper", "paper_result", "reproduced", "claim", "why", "change" }
local FROM_RUN = { verdict = "verdict", paper = "paper", paper_result = "paper_result", reproduced = "reproduced" }

local function read_tsv(path)
  local text = fs.read_file(path)
  if not text then error(path .. ": cannot read the verdicts file", 0) end
  local rows, header = {}, nil
  local n = 0
  for line in text:gmatch("([^\n]*)\n") do
    n = n + 1
    local cells = {}
    for c in (line .. "\t"):gmatch("([^\t]*)\t") do cells[#cells + 1] = c end
    if not header then
      header = table.concat(cells, "\t")
      if header ~= table.concat(COLUMNS, "\t") then
        error(path .. ":1: the header must be: " .. table.concat(COLUMNS, " "), 0)
      end
    else
      if #cells ~= #COLUMNS then
        error(string.format("%s:%d: %d columns, expected %d", path, n, #cells, #COLUMNS), 0)
      end
      local r = {}
      for i, k in ipairs(COLUMNS) do r[k] = cells[i] end
      rows[#rows + 1] = r
    end
  end
  return rows
end

local function write_tsv(path, rows)
  local out = { table.concat(COLUMNS, "\t") }
  for _, r in ipairs(rows) do
    local cells = {}
    for i, k in ipairs(COLUMNS) do cells[i] = (tostring(r[k] or ""):gsub("[\t\n]", " ")) end
    out[#out + 1] = table.concat(cells, "\t")
  end
  fs.write_atomic(path, table.concat(out, "\n") .. "\n")
end

-- the rows in the catalogue's order; an experiment without a row is an error naming it
local function rows_by_catalogue(rows, path)
  local by = {}
  for _, r in ipairs(rows) do by[r.id] = r end
  local out = {}
  for _, e in ipairs(catalogue.list()) do
    local r = by[e.id]
    if not r then error(path .. ": no row for experiment " .. e.id .. " (run --update)", 0) end
    r.title = e.title
    out[#out + 1] = r
  end
  return out
end

local function cell(s) return (tostring(s or ""):gsub("|", "\\|")) end

local function counts(rows)
  local n = { holds = 0, ["does not hold"] = 0, inconclusive = 0 }
  for _, r in ipairs(rows) do n[r.verdict] = (n[r.verdict] or 0) + 1 end
  return string.format("%d hold, %d do not hold at this scale, %d are inconclusive (%s profile, %d experiments).",
                       n.holds, n["does not hold"], n.inconclusive, cfg.profile, #rows)
end

-- the table: link is where an id points (README: the findings page; the findings page: its own sections)
local function summary_table(rows, link)
  local lines = { "| experiment | the claim, in a few words | verdict | why |", "|---|---|---|---|" }
  for _, r in ipairs(rows) do
    lines[#lines + 1] = string.format("| [%s](%s#%s) | %s | **%s** | %s |", r.id, link, r.id, cell(r.claim),
                                      cell(r.verdict), cell(r.why))
  end
  lines[#lines + 1] = ""
  lines[#lines + 1] = counts(rows)
  return table.concat(lines, "\n") .. "\n"
end

local function findings_block(rows)
  local out = { summary_table(rows, "") }
  for _, r in ipairs(rows) do
    local seeds = r.seeds == "1" and "1 seed" or (r.seeds .. " seeds")
    out[#out + 1] = table.concat({
      "### " .. r.id, "",
      string.format("*%s* ([experiments/%s.lua](../../experiments/%s.lua))", r.title, r.id, r.id), "",
      string.format("- **Claim** (%s): %s", r.paper, r.paper_result),
      string.format("- **Ours** (%s profile, %s): %s", cfg.profile, seeds, r.reproduced),
      string.format("- **Verdict: %s.** %s.", r.verdict, r.why),
      string.format("- **What would change it:** %s.", r.change),
    }, "\n") .. "\n"
  end
  return table.concat(out, "\n")
end

local BEGIN = "<!-- generated: bin/outlierlab run scripts/verdicts.lua --write (from docs/findings/verdicts.tsv) -->\n"
local END = "<!-- end of generated verdicts -->"

local function replace_block(path, block)
  local text = fs.read_file(path) or error(path .. ": cannot read", 0)
  local new, n = marked.rewrite(text, BEGIN, END, function() return block end, path, true)
  if n ~= 1 then error(string.format("%s: %d generated-verdicts blocks, expected one", path, n), 0) end
  fs.write_atomic(path, new)
end

local rows = read_tsv(cfg.tsv)

if cfg.update then
  local by = {}
  for _, r in ipairs(rows) do by[r.id] = r end
  for _, e in ipairs(catalogue.list()) do
    local path = cfg.results .. "/" .. e.id .. "/" .. cfg.profile .. "/run.json"
    local text = fs.read_file(path)
    if text then
      local run = json.decode(text, path)
      local r = by[e.id]
      if not r then
        r = { id = e.id, claim = "REVIEW: new experiment", why = "REVIEW: new experiment", change = "REVIEW" }
        by[e.id] = r
        rows[#rows + 1] = r
      end
      if r.verdict and r.verdict ~= run.verdict then
        r.why = "REVIEW: verdict was " .. r.verdict .. "; " .. (r.why or "")
      end
      for k, f in pairs(FROM_RUN) do r[k] = run[f] end
      r.seeds = tostring(run.settings and run.settings.n_seeds or 1)
    else
      io.stderr:write("no run file: " .. path .. " (row kept)\n")
    end
  end
  table.sort(rows, function(a, b) return a.id < b.id end)
  write_tsv(cfg.tsv, rows)
  print("wrote " .. cfg.tsv)
  return
end

rows = rows_by_catalogue(rows, cfg.tsv)
if cfg.write then
  replace_block(ol.root .. "/README.md", summary_table(rows, "docs/findings/results.md"))
  replace_block(ol.root .. "/docs/findings/results.md", findings_block(rows))
  print("wrote the verdict blocks of README.md and docs/findings/results.md")
elseif cfg.print == "findings" then
  io.write(findings_block(rows))
else
  io.write(summary_table(rows, "docs/findings/results.md"))
end
