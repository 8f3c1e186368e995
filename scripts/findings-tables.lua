-- scripts/findings-tables.lua — the tables of the findings pages copied from the run files:
--
--   bin/outlierlab run scripts/findings-tables.lua [--doc=docs/findings/results.md]
--       [--results=results] [--profile=default]          say which blocks differ from the run files
--   ... --write                                          rewrite them in place
--   ... --check                                          the same as the first, exit 1 if any differs
--
-- A findings page marks a table it takes from an experiment's summary with two comment lines:
--
--   <!-- generated table: qt-table2 #1 (scripts/findings-tables.lua) -->
--   | model | attention | ... |
--   <!-- end of generated table -->
--
-- "#1" is the table's rank among the markdown tables of results/<id>/<profile>/summary.md (a
-- table: a line starting with "|" followed by a "|---" line, up to the first line that does not
-- start with "|"). Nothing is computed here: each block is a copy of a table the experiment wrote,
-- so the numbers in a page's tables are the run files' to the digit. A missing summary or table is
-- an error naming the file and the rank.
local ol = require "outlierlab"
local fs = require "outlierlab.util.fs"
local marked = require "outlierlab.util.marked"
local cfg = require("outlierlab.config").get {
  doc = ol.root .. "/docs/findings/results.md", results = ol.root .. "/results", profile = "default",
  write = false, check = false,
}

local OPEN = "<!%-%- generated table: ([%w%-_]+) #(%d+) %(scripts/findings%-tables%.lua%) %-%->"
local CLOSE = "<!-- end of generated table -->"

-- the markdown tables of a summary, in order, each as its lines joined with "\n"
local function tables_of(text)
  local lines = {}
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
  local out, i = {}, 1
  while i <= #lines do
    if lines[i]:sub(1, 1) == "|" and (lines[i + 1] or ""):sub(1, 4) == "|---" then
      local j = i
      while j + 1 <= #lines and lines[j + 1]:sub(1, 1) == "|" do j = j + 1 end
      out[#out + 1] = table.concat(lines, "\n", i, j)
      i = j + 1
    else
      i = i + 1
    end
  end
  return out
end

local summaries = {}   -- path -> the summary's tables (read and split once per summary)
local function table_from(id, rank)
  local path = cfg.results .. "/" .. id .. "/" .. cfg.profile .. "/summary.md"
  if not summaries[path] then
    local text = fs.read_file(path)
    if not text then error(cfg.doc .. ": block " .. id .. " #" .. rank .. ": cannot read " .. path, 0) end
    summaries[path] = tables_of(text)
  end
  local t = summaries[path][rank]
  if not t then
    error(string.format("%s: block %s #%d: %s has %d table(s)", cfg.doc, id, rank, path, #summaries[path]), 0)
  end
  return t
end

local text = fs.read_file(cfg.doc) or error(cfg.doc .. ": cannot read", 0)
local new, n_blocks, n_diff = marked.rewrite(text, OPEN, CLOSE, function(inner, id, rank)
  local want = "\n" .. table_from(id, tonumber(rank)) .. "\n"   -- the table on the lines between the markers
  if inner ~= want then print(string.format("differs: %s #%s", id, rank)) end
  return want
end, cfg.doc)

if cfg.write then
  if n_diff > 0 then fs.write_atomic(cfg.doc, new) end
  print(string.format("%s: %d generated table(s), %d rewritten", cfg.doc, n_blocks, n_diff))
else
  print(string.format("%s: %d generated table(s), %d differ from %s", cfg.doc, n_blocks, n_diff, cfg.results))
  if cfg.check and n_diff > 0 then os.exit(1) end
end
