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

-- paragraphs of a page: { {text=, line=}, ... } (the rules: tests/lua/test_docs.lua's header)
function M.paragraphs(text)
  local out, cur, fence, comment, indented = {}, nil, false, false, false
  local function close() if cur then out[#out + 1] = cur; cur = nil end end
  for i, l in ipairs(lines_of(text)) do
    -- an indented code block: 4 or more spaces after a blank line, until the next line that is not
    indented = l:match("^    ") and (indented or not cur) and not l:match("^%s*$") or false
    if l:match("^%s*```") then close(); fence = not fence
    elseif fence or indented then -- code
    elseif comment then if l:find("-->", 1, true) then comment = false end
    elseif l:match("^%s*<!%-%-") then close(); if not l:find("-->", 1, true) then comment = true end
    elseif l:match("^%s*$") or l:match("^%s*|") or l:match("^#") then close()
    elseif l:match("^%s*[-*] ") or l:match("^%s*%d+%. ") then
      close(); cur = { text = l, line = i }
    elseif cur then cur.text = cur.text .. " " .. l
    else cur = { text = l, line = i } end
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
    for _, s in ipairs(M.sentences(p.text)) do
      local m = M.words(s)
      if m > smax then smax, sline, stext = m, p.line, s end
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
    local ps = M.paragraphs(text)
    local pmax, _, smax = M.measure(text)
    print(string.format("| %s | %d | %d | %d | %d |", page, ps[1] and M.words(ps[1].text) or 0, pmax, smax, M.words(text)))
  end
end
