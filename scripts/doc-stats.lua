-- scripts/doc-stats.lua — how long the documentation's paragraphs and sentences are:
--
--   bin/outlierlab run scripts/doc-stats.lua [--rev=REV]
--
-- For README.md and every guide and reference page: the words of the first prose paragraph
-- (README's "what it is"), the longest paragraph, the longest sentence and the page's words.
-- --rev=REV measures the pages as they were at a git revision (a page that was docs/NAME.md
-- before docs/ had folders is found under that name). The rules (what a paragraph and a
-- sentence are) are the ones tests/lua/test_docs.lua enforces; that test loads this file for
-- them (with DOC_STATS_LIBRARY set, nothing is printed).
local M = {}

local function lines_of(text) local out = {} for l in (text .. "\n"):gmatch("([^\n]*)\n") do out[#out + 1] = l end return out end
M.lines_of = lines_of

-- paragraphs of a page: { {text=, line=, pieces={...}, cell=}, ... } (the rules: tests/lua/test_docs.lua's
-- header). A paragraph is what the reader sees as one block: prose lines with no blank line between
-- them, so a tight list (items with no blank line between them, nested items included) is one
-- paragraph, and a paragraph glued to a list is one with it. Its pieces (each list item, each run of
-- plain lines) are where sentences end. A table cell is a paragraph of its own (cell = true), held
-- to the paragraph limit only.
local function is_item(l) return l:match("^%s*[-*+] ") or l:match("^%s*%d+[.)] ") end
local function is_delim(l) return l and l:match("^%s*|?%s*:?%-+:?%s*|[%s:|%-]*$") end
local function cells(l)
  local s, out = l:gsub("\\|", "\1"):gsub("^%s*|", ""):gsub("|%s*$", ""), {}
  for c in (s .. "|"):gmatch("([^|]*)|") do out[#out + 1] = (c:gsub("\1", "|")) end
  return out
end
M.cells = cells

function M.paragraphs(text)
  local L = lines_of(text)
  local out, cur, fence, comment, code, intable, inlist = {}, nil, false, false, false, false, false
  local function close() if cur then out[#out + 1] = cur; cur = nil end end
  for i, l in ipairs(L) do
    local blank = l:match("^%s*$")
    -- an indented code block: 4 or more spaces after a blank line (not inside a list, where such a
    -- line continues the item), until the next line that is not indented
    code = not blank and l:match("^    ") and (code or (not cur and not inlist)) or false
    if not blank and not cur and not l:match("^%s") and not is_item(l) then inlist = false end
    -- a table: a row starting with | above a delimiter row (|---|), and the | rows after it; a prose
    -- line that happens to start with | (|w| set to zero) is prose
    if intable and not l:match("^%s*|") then intable = false end
    if not intable and not fence and not code and l:match("^%s*|") and is_delim(L[i + 1]) then intable = true end
    if fence then if l:match("^%s*```") or l:match("^%s*~~~") then fence = false end
    elseif l:match("^%s*```") or l:match("^%s*~~~") then close(); fence = true
    elseif code then -- code
    elseif comment then if l:find("-->", 1, true) then comment = false end
    elseif l:match("^%s*<!%-%-") then close(); if not l:find("-->", 1, true) then comment = true end
    elseif intable then
      close()
      if not is_delim(l) then
        for _, c in ipairs(cells(l)) do out[#out + 1] = { text = c, line = i, pieces = { c }, cell = true } end
      end
    elseif blank or l:match("^%s?%s?%s?#+%s") or l:match("^%s?%s?%s?#+$") or l:match("^%s*[-*_=][-*_=%s]*$") then close()
    else
      local item = is_item(l)
      if item then inlist = true end
      if not cur then cur = { text = l, line = i, pieces = { l } }
      else
        cur.text = cur.text .. " " .. l
        if item then cur.pieces[#cur.pieces + 1] = l else cur.pieces[#cur.pieces] = cur.pieces[#cur.pieces] .. " " .. l end
      end
    end
  end
  close()
  return out
end

function M.words(s)
  local n = 0
  for w in s:gmatch("%S+") do if w:find("[%w\128-\255]") then n = n + 1 end end
  return n
end

local ABBREV = { ["e.g."] = true, ["i.e."] = true, ["al."] = true, ["Fig."] = true, ["Figs."] = true,
                 ["vs."] = true, ["cf."] = true, ["Eq."] = true, ["No."] = true, ["etc."] = true, ["App."] = true,
                 ["Tab."] = true, ["resp."] = true, ["approx."] = true, ["incl."] = true }

function M.sentences(par)
  local s = par:gsub("`[^`]*`", "CODE"):gsub("%b()", function(p) return p end)
  local out, cur = {}, {}
  local toks = {}
  for w in s:gmatch("%S+") do toks[#toks + 1] = w end
  for i, w in ipairs(toks) do
    cur[#cur + 1] = w
    local nxt = toks[i + 1]
    if nxt and w:match("[.!?][)\"'*]*$") and not ABBREV[w:gsub("^[(*]+", "")] and nxt:match('^[%u`*%["]') then
      out[#out + 1] = table.concat(cur, " "); cur = {}
    end
  end
  if #cur > 0 then out[#out + 1] = table.concat(cur, " ") end
  return out
end

-- a page's measures: longest paragraph and sentence, with where they are
function M.measure(text)
  local pmax, pline, smax, sline, stext = 0, 0, 0, 0, ""
  for _, p in ipairs(M.paragraphs(text)) do
    local n = M.words(p.text)
    if n > pmax then pmax, pline = n, p.line end
    -- a table cell is held to the paragraph limit only: cells are terse catalogues (a; b; c)
    for _, piece in ipairs(p.cell and {} or p.pieces or { p.text }) do
      for _, s in ipairs(M.sentences(piece)) do
        local m = M.words(s)
        if m > smax then smax, sline, stext = m, p.line, s end
      end
    end
  end
  return pmax, pline, smax, sline, stext
end


if DOC_STATS_LIBRARY then return M end

local ol = require "outlierlab"
local cfg = require("outlierlab.config").get { rev = "" }
local root = ol.root

local pages = { "README.md" }
for _, dir in ipairs({ "docs/guides", "docs/reference" }) do
  for f in io.popen("ls " .. root .. "/" .. dir .. "/*.md 2>/dev/null"):lines() do pages[#pages + 1] = f:sub(#root + 2) end
end

local function read(page)
  if cfg.rev == "" then return require("outlierlab.util.fs").read_file(root .. "/" .. page) end
  local function show(p)
    local h = io.popen("cd '" .. root .. "' && git show '" .. cfg.rev .. ":" .. p .. "' 2>/dev/null")
    local s = h:read("*a"); h:close()
    return s ~= "" and s or nil
  end
  return show(page) or show("docs/" .. page:match("([^/]+)%.md$"):upper() .. ".md")
end

print(string.format("| page%s | first paragraph | longest paragraph | longest sentence | words |", cfg.rev ~= "" and (" (at " .. cfg.rev .. ")") or ""))
print("|---|---|---|---|---|")
for _, page in ipairs(pages) do
  local text = read(page)
  if not text then
    print(string.format("| %s | (absent) | | | |", page))
  else
    local first
    for _, p in ipairs(M.paragraphs(text)) do if not p.cell then first = p; break end end
    local pmax, _, smax = M.measure(text)
    print(string.format("| %s | %d | %d | %d | %d |", page, first and M.words(first.text) or 0, pmax, smax, M.words(text)))
  end
end
