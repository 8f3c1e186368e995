-- runner/catalogue — the experiments catalogue: `make list` (bin/outlierlab list) and the
-- experiments table of docs/reference/experiments.md (bin/outlierlab list --markdown).
local ol = require "outlierlab"

local M = {}

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- every experiments/*.lua: id, title, source, profiles (their names, in quick/default/paper
-- order), profile_tables (name -> the profile's settings, as the file returns them) and the
-- profiles that have results (results/<id>/<dir>/summary.md, see runner/report.results_dir)
function M.list(dir, results_root)
  dir = dir or (ol.root .. "/experiments")
  results_root = results_root or os.getenv("OUTLIERLAB_RESULTS") or (ol.root .. "/results")
  local p = io.popen("ls '" .. dir .. "'/*.lua 2>/dev/null")
  local out = {}
  for f in p:lines() do
    local chunk = loadfile(f)
    local ok, exp = pcall(chunk or error)
    if ok and type(exp) == "table" and exp.id then
      local ran = {}
      local q = io.popen("ls -d " .. quote(results_root .. "/" .. exp.id) .. "/*/summary.md 2>/dev/null")
      for md in q:lines() do ran[#ran + 1] = md:match("([^/]+)/summary%.md$") end
      q:close()
      table.sort(ran)
      local profiles = {}
      for name in pairs(exp.profiles or {}) do profiles[#profiles + 1] = name end
      local order = { quick = 1, default = 2, paper = 3 }
      table.sort(profiles, function(x, y)
        local a, b = order[x] or 9, order[y] or 9
        if a ~= b then return a < b end
        return x < y
      end)
      out[#out + 1] = { id = exp.id, title = exp.title, file = f, source = exp.source or {}, profiles = profiles,
                        profile_tables = exp.profiles or {}, results = ran, has_results = #ran > 0 }
    end
  end
  p:close()
  return out
end

-- The figures and tables of the sources that are not experiment files: schematics and formula
-- tables without data, and figures that need an imported pretrained model (run with --model).
M.OTHER_FIGURES = {
  { paper = "QT (Bondarenko et al. 2023)", figure = "Fig. 4", kind = "schematic",
    what = "the attention layer of BERT with the places outliers arise: a diagram, no data (docs/reference/attention.md)" },
  { paper = "SO (An et al. 2025)", figure = "Fig. 2", kind = "schematic",
    what = "where systematic outliers sit in an LLM: a diagram, no data (so-fig1 shows the data)" },
  { paper = "SO (An et al. 2025)", figure = "Table 2", kind = "formulas",
    what = "the attention variants (a)-(e): formulas, implemented in lua/outlierlab/nn/attention.lua (docs/reference/attention.md)" },
  { paper = "SO (An et al. 2025)", figure = "Fig. 13–22", kind = "pretrained only",
    what = "other model families and fine-tuned models: so-fig1 on a downloaded model, make reproduce-so-fig13 MODEL=DIR TEXT=FILE (imports Mistral-7B, LLaMA2-13B, LLaMA3-8B, LLaMA-3.1, OPT-6.7B, Phi-2, Phi-3, MPT-7B, Falcon-7B and their chat models: docs/reference/pretrained.md)" },
}

function M.print_list()
  local list = M.list()
  local w = 4
  for _, e in ipairs(list) do w = math.max(w, #e.id) end
  for _, e in ipairs(list) do
    io.write(string.format("%-" .. w .. "s  %-24s  %s\n", e.id,
      e.has_results and ("results: " .. table.concat(e.results, ",")) or "no results", e.title))
  end
  io.write("\nNot experiment files:\n")
  for _, o in ipairs(M.OTHER_FIGURES) do
    io.write(string.format("  %s %s [%s]: %s\n", o.paper:match("^(%S+)"), o.figure, o.kind, o.what))
  end
  return 0
end

-- the experiments table of docs/reference/experiments.md (bin/outlierlab list --markdown); a test
-- checks that the document holds exactly this text, so the list cannot drift
function M.markdown_table(list)
  list = list or M.list()
  local function cell(s) return (tostring(s or ""):gsub("|", "\\|"):gsub("\n", " ")) end
  local lines = { "| id | paper, figure | title | profiles |", "|---|---|---|---|" }
  for _, e in ipairs(list) do
    local src = e.source.paper .. ((e.source.figure or "") ~= "" and (" " .. e.source.figure) or "")
    lines[#lines + 1] = string.format("| [%s](../../experiments/%s.lua) | %s | %s | %s |", e.id, e.id, cell(src),
                                      cell(e.title), table.concat(e.profiles, ", "))
  end
  for _, o in ipairs(M.OTHER_FIGURES) do
    lines[#lines + 1] = string.format("| (%s) | %s | %s | — |", o.kind, cell(o.paper .. " " .. o.figure), cell(o.what))
  end
  return table.concat(lines, "\n") .. "\n"
end

function M.print_markdown()
  io.write(M.markdown_table())
  return 0
end

return M
