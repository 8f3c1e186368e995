-- test_docs — the documentation stays readable and true to the tree.
--
-- Pages checked for length: README.md and every docs/guides/*.md and docs/reference/*.md.
--   * A paragraph is what the reader sees as one block: a run of prose lines with no blank line
--     between them. So a tight list (items with no blank line between them, with their continuation
--     lines and nested items) is one paragraph, and so is a paragraph glued to a list; a loose list's
--     items (a blank line between them) and an item's own later paragraphs are paragraphs of their own.
--     Not prose, and ending a paragraph: blank lines, fenced code blocks (``` or ~~~), indented code
--     blocks (lines of 4+ spaces after a blank line, outside a list, where such a line continues the
--     item), headings (# and a space), rules (---), HTML comments (<!-- … -->) and tables (a row
--     starting with | above a |---| row, and the | rows after it; a prose line that starts with |,
--     as |w|, is prose). Each table cell is a paragraph of its own: a cell over the limit is prose in
--     disguise (cells are held to this limit, not to the sentence limit). Limit: 120 words.
--   * Sentences: each list item and each run of plain lines of a paragraph (a list item ends a
--     sentence), with inline code replaced by one word, split after . ! ?
--     when the next word starts with a capital letter, a backtick, *, [ or ", unless the word before
--     is an abbreviation (e.g., i.e., et al., Fig., vs., cf., …). Limit: 45 words.
--   * Words are whitespace-separated tokens holding a letter or a digit.
--   Pages in TODO (long reference pages not yet rewritten) are measured and reported as "# TODO"
--   lines, not failed; a page on that list that passes fails the test until it leaves the list.
-- No commit hash in README.md, docs/README.md, the guides, the reference pages, and the findings
--   above their "Appendix" heading (the journal and the appendices may name commits). A hash is a
--   word of 7–40 hex digits with a letter and a digit (not after "0x"), or 7–40 digits after
--   "commit"; fenced code blocks are not searched (hex constants live there).
-- README.md's commands: every `make TARGET [VAR=…]` in its code blocks succeeds under `make -n`
--   (nothing runs), and every `bin/outlierlab CMD` names a subcommand of the usage text with an
--   existing file where it runs one from the tree.
-- Links: every relative link of every tracked .md file resolves to a file, and an anchor into a
--   .md file names one of its headings (GitHub's rule: lower case, punctuation dropped, spaces to
--   hyphens).
-- Repository paths named in backticks in README.md, docs/reference/architecture.md and the guides exist.
local t = require "tap"
local root = OUTLIERLAB_ROOT
local slurp, sh = t.slurp, t.sh

local function exists(path) local f = io.open(path, "r") if f then f:close() return true end return false end
local function lines_of(text) local out = {} for l in (text .. "\n"):gmatch("([^\n]*)\n") do out[#out + 1] = l end return out end

-- the pages whose paragraphs and sentences are held to the limits
local function md_files(dir)
  local out = {}
  for f in io.popen("ls " .. root .. "/" .. dir .. "/*.md 2>/dev/null"):lines() do out[#out + 1] = f:sub(#root + 2) end
  return out
end
local limited = { "README.md" }
for _, f in ipairs(md_files("docs/guides")) do limited[#limited + 1] = f end
for _, f in ipairs(md_files("docs/reference")) do limited[#limited + 1] = f end

-- reference pages still to be rewritten to the limits (a known TODO, reported below); empty:
-- every guide and reference page is held to the limits
local TODO = {}

local PAR_MAX, SENT_MAX = 120, 45

-- the rules live in scripts/doc-stats.lua, which prints them for every page
DOC_STATS_LIBRARY = true
local D = dofile(root .. "/scripts/doc-stats.lua")
DOC_STATS_LIBRARY = nil
local paragraphs, words, sentences, measure = D.paragraphs, D.words, D.sentences, D.measure

-- the rules work on a page made here
do
  local function w(n) return string.rep("w ", n) end
  local page = table.concat({
    "# Title", "", "One short paragraph. It has two sentences, e.g. this one.", "",        -- 1
    "```sh", string.rep("code ", 200), "```", "",
    "~~~", string.rep("code ", 200), "~~~", "",
    "    " .. string.rep("code ", 200), "",
    "| a | b |", "|---|---|", "| " .. w(20) .. "| " .. w(121) .. "|", "",                  -- 2, 3, 4, 5
    "- an item", "  continued here", "- " .. w(30), "  - nested " .. w(30), "",               -- 6: a tight list
    "- a loose item " .. w(60), "", "  its second paragraph", "",                            -- 7, 8
    "    indented " .. w(70) .. "in a list: not code", "",                                   -- 9
    "- " .. w(90), "", "Glued to a list:", "- " .. w(50), "- " .. w(50), "",                    -- 10, 11
    "Prose whose line starts", "|w| with a bar: not a table " .. w(20), "",                  -- 12
    "## Heading", "a paragraph glued to its heading",                                        -- 13
  }, "\n")
  local ps = paragraphs(page)
  t.is(#ps, 13, "paragraphs: code blocks, table rules and headings are not prose; a table cell is one")
  t.ok(ps[2].cell and words(ps[2].text) == 1 and words(ps[5].text) == 121, "paragraphs: each table cell is one")
  t.is(words(ps[6].text), 2 + 2 + 30 + 31, "paragraphs: a tight list is one, with continuation lines and nested items")
  t.is(#ps[6].pieces, 3, "paragraphs: each item of a tight list is a piece of it (sentences end there)")
  t.is(words(ps[8].text), 3, "paragraphs: an item's later paragraph is one of its own")
  t.is(words(ps[9].text), 76, "paragraphs: an indented block inside a list is prose, not code")
  t.is(words(ps[11].text), 4 + 50 + 50, "paragraphs: a paragraph glued to a list is one with it")
  t.is(words(ps[12].text), 31, "paragraphs: a prose line starting with | is prose")
  t.is(ps[13].line, #lines_of(page), "paragraphs: a heading ends a paragraph")
  t.is(#sentences(ps[1].text), 2, "sentences: split after a full stop before a capital, not after e.g.")
  local pmax, pline, smax = measure(page)
  t.is(pmax, 121, "measure: the longest paragraph is the long table cell")
  t.is(smax, 90, "measure: a table cell's sentences are not measured (cells are terse catalogues)")
  pmax = measure(table.concat({ "- " .. w(70), "- " .. w(70) }, "\n"))
  t.is(pmax, 140, "measure: two 70-word items with no blank line between them are a 140-word paragraph")
  local _, _, smax2 = measure(table.concat({ "- " .. w(30), "- " .. w(30) }, "\n"))
  t.is(smax2, 30, "measure: sentences end with their list item")
end

for _, page in ipairs(limited) do
  local text = slurp(root .. "/" .. page) or ""
  local pmax, pline, smax, sline, stext = measure(text)
  local ok = pmax <= PAR_MAX and smax <= SENT_MAX
  local what = string.format("%s: longest paragraph %d words (line %d), longest sentence %d words (line %d)",
                             page, pmax, pline, smax, sline)
  if TODO[page] then
    if ok then t.ok(false, page .. " passes the limits now: take it off the TODO list in tests/lua/test_docs.lua")
    else t.diag("TODO (not yet within " .. PAR_MAX .. "/" .. SENT_MAX .. " words): " .. what) end
  else
    t.ok(ok, what .. string.format(" (limits %d and %d)", PAR_MAX, SENT_MAX), smax > SENT_MAX and stext or nil)
  end
end

-- no commit hash outside the journal and the appendices
local function hashes(text)
  local found, fence = {}, false
  for _, l in ipairs(lines_of(text)) do
    if l:match("^%s*```") then fence = not fence
    elseif not fence then
      local s = " " .. l .. " "
      for pre, w in s:gmatch("([^%w_])(%x+)%f[^%w_]") do
        if #w >= 7 and #w <= 40 and w:find("%a") and w:find("%d") and not s:find("0x" .. w, 1, true) then
          found[#found + 1] = w
        end
      end
      for w in l:gmatch("[Cc]ommits? (%d+)") do if #w >= 7 and #w <= 40 then found[#found + 1] = w end end
    end
  end
  return found
end
do
  local bad = hashes("at commit 8fef33d and 4683661 — commit 4683661; 0xdeadbeef1 and `cache/x` and 1234567")
  t.is(table.concat(bad, ","), "8fef33d,4683661", "hash rule: a hex word with a letter and a digit, digits after 'commit'; not 0x constants")
end
local hash_pages = { "README.md", "docs/README.md" }
for _, f in ipairs(md_files("docs/guides")) do hash_pages[#hash_pages + 1] = f end
for _, f in ipairs(md_files("docs/reference")) do hash_pages[#hash_pages + 1] = f end
for _, f in ipairs(md_files("docs/findings")) do hash_pages[#hash_pages + 1] = f end
for _, page in ipairs(hash_pages) do
  local text = slurp(root .. "/" .. page) or ""
  local cut = text:find("\n#+ Appendix")
  if cut then text = text:sub(1, cut) end
  local bad = hashes(text)
  t.ok(#bad == 0, page .. ": no commit hash" .. (cut and " above its appendix" or ""), "found: " .. table.concat(bad, ", "))
end

-- README's commands exist
do
  local readme = slurp(root .. "/README.md") or ""
  local cmds, fence = {}, false
  for _, l in ipairs(lines_of(readme)) do
    if l:match("^```") then fence = not fence
    elseif fence then
      local c = l:gsub("%s+#.*$", "")
      if c:match("^make ") or c:match("^bin/outlierlab ") then cmds[#cmds + 1] = c end
    end
  end
  for c in readme:gmatch("`(make [^`]+)`") do cmds[#cmds + 1] = c end
  local usage = sh("cd " .. root .. " && bin/outlierlab 2>&1") or ""
  local n = 0
  for _, c in ipairs(cmds) do
    c = c:gsub("\\$", ""):gsub("%s+$", "")
    if c:match("^make ") then
      local args = c:sub(6):gsub("ID", "so-fig3"):gsub("<id>", "so-fig3")
      local _, ok = sh("cd " .. root .. " && make -n " .. args .. " >/dev/null 2>&1")
      t.ok(ok, "README: `" .. c .. "` is a make target (make -n " .. args .. ")")
      n = n + 1
    else
      local sub, file = c:match("^bin/outlierlab (%S+)%s*(%S*)")
      t.ok(usage:find("outlierlab " .. sub, 1, true), "README: `bin/outlierlab " .. sub .. "` is a subcommand", usage)
      if sub == "run" and file:match("^[%w_]+/") then
        t.ok(exists(root .. "/" .. file), "README: " .. file .. " exists")
      end
      n = n + 1
    end
  end
  t.ok(n >= 5, "README shows commands (" .. n .. " checked)")
end

-- every relative link of every tracked .md resolves (files, and anchors into .md files)
local function slug(h)
  h = h:gsub("`", ""):gsub("%*", ""):gsub("%[([^%]]*)%]%([^)]*%)", "%1"):lower()
  for _, sym in ipairs({ "→", "×", "±", "≥", "≤", "’", "“", "”", "…", "–", "—", "·", "§", "√", "σ", "τ", "γ", "ζ", "π" }) do
    if sym ~= "σ" and sym ~= "τ" and sym ~= "γ" and sym ~= "ζ" and sym ~= "π" then h = h:gsub(sym, "") end
  end
  h = h:gsub("[%p]", function(c) return (c == "-" or c == "_") and c or "" end)
  return (h:gsub(" ", "-"))
end
t.is(slug("The search for a stronger decoder (v1 → v2)"), "the-search-for-a-stronger-decoder-v1--v2", "slug: GitHub's anchor rule")
t.is(slug("Throughput (bench/train.lua)"), "throughput-benchtrainlua", "slug: punctuation dropped")

local anchors_of = {}
local function anchors(path)
  if anchors_of[path] then return anchors_of[path] end
  local set, fence = {}, false
  for _, l in ipairs(lines_of(slurp(path) or "")) do
    if l:match("^```") then fence = not fence
    elseif not fence then
      local h = l:match("^#+%s+(.-)%s*$")
      if h then
        local s, k = slug(h), 1
        while set[s .. (k > 1 and ("-" .. (k - 1)) or "")] do k = k + 1 end
        set[s .. (k > 1 and ("-" .. (k - 1)) or "")] = true
      end
    end
  end
  anchors_of[path] = set
  return set
end

local tracked = {}
for f in io.popen("cd " .. root .. " && { git ls-files '*.md' 2>/dev/null; ls README.md docs/*.md docs/*/*.md data/*.md 2>/dev/null; } | sort -u"):lines() do
  tracked[#tracked + 1] = f
end
t.ok(#tracked >= 15, #tracked .. " Markdown files found")
for _, page in ipairs(tracked) do
  local text = slurp(root .. "/" .. page)
  if text then
    local dir = page:match("^(.*)/[^/]*$")
    local bad, fence = {}, false
    for _, l in ipairs(lines_of(text)) do
      if l:match("^%s*```") then fence = not fence
      elseif not fence then
        for target in l:gsub("`[^`]*`", ""):gmatch("%]%(([^)%s]+)[^)]*%)") do
          if not target:match("^%a[%w+.-]*:") then
            local file, anchor = target:match("^([^#]*)#?(.*)$")
            local path = file == "" and page or ((dir and (dir .. "/") or "") .. file)
            if file ~= "" and not exists(root .. "/" .. path) and not exists(root .. "/" .. path .. "/") then
              bad[#bad + 1] = target
            elseif anchor ~= "" and path:match("%.md$") and not anchors(root .. "/" .. path)[anchor] then
              bad[#bad + 1] = target .. " (no such heading)"
            end
          end
        end
      end
    end
    t.ok(#bad == 0, page .. ": every relative link resolves", "missing: " .. table.concat(bad, ", "))
  end
end

-- README's layout table stays current: it names every file of scripts/ and bench/ (and bench/peer/;
-- bench/workers/ is mpi.lua's helper) and every folder of lua/outlierlab/
do
  local readme = slurp(root .. "/README.md") or ""
  local missing = {}
  local function need(word) if not readme:find(word, 1, true) then missing[#missing + 1] = word end end
  for _, dir in ipairs({ "scripts", "bench" }) do
    for f in io.popen("ls -p " .. root .. "/" .. dir):lines() do
      if dir == "scripts" or not f:match("/$") or f == "peer/" then need(dir .. "/" .. f) end
    end
  end
  for f in io.popen("ls -p " .. root .. "/lua/outlierlab"):lines() do
    if f:match("/$") then need("`" .. f .. "`") end
  end
  t.ok(#missing == 0, "README's layout table names every script, bench program and package folder",
       "missing: " .. table.concat(missing, ", "))
end

-- repository paths named in backticks
local prefixes = { "engine/", "lua/", "tests/", "scripts/", "bench/", "mk/", "plots/", "experiments/",
                   "examples/", "docs/", ".ci/" }
local path_pages = { "README.md", "docs/reference/architecture.md" }
for _, f in ipairs(md_files("docs/guides")) do path_pages[#path_pages + 1] = f end
for _, page in ipairs(path_pages) do
  local text = slurp(root .. "/" .. page) or ""
  local bad, n = {}, 0
  for code in text:gmatch("`([^`\n]+)`") do
    for word in code:gmatch("[%w_%./%-%*<>]+") do
      for _, pre in ipairs(prefixes) do
        if word:sub(1, #pre) == pre and not word:find("[%*<>]") and (word:match("%.%a+$") or word:match("/$")) then
          n = n + 1
          if not exists(root .. "/" .. word) and not exists(root .. "/" .. word .. ".") then bad[#bad + 1] = word end
        end
      end
    end
  end
  t.ok(#bad == 0, string.format("%s: the %d file paths it names exist", page, n), "missing: " .. table.concat(bad, ", "))
end

return t.done()
