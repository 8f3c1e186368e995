-- test_make_help — `make help` lists every target with one line, read from the `##` comments on
-- the rule lines of the Makefile and mk/*.mk: every .PHONY target (as make itself expands the
-- .PHONY lists) has a line, each line has a text, and no target is listed twice. A new phony
-- target without a `## …` on its rule line fails here.
local t = require "tap"
local root = OUTLIERLAB_ROOT

local help, ok = t.sh("cd " .. root .. " && make -s --no-print-directory help")
t.ok(ok, "make help runs", help)
local entries, names, twice = {}, {}, {}
for line in help:gmatch("[^\n]+") do
  local name, text = line:match("^  (%S+)%s+(.+)$")
  if name then
    if names[name] then twice[#twice + 1] = name end
    names[name] = true
    entries[#entries + 1] = { name = name, text = text }
  end
end
t.ok(#entries >= 20, "make help lists the targets (" .. #entries .. ")", help)
t.is(table.concat(twice, " "), "", "no target listed twice")

-- a listed name covers a phony target when equal, or when its <id> stands for the rest
-- (reproduce-<id>) or its "…N" ends a numbered range (reproduce-so-fig13…22)
local function covered(target)
  for _, e in ipairs(entries) do
    if e.name == target then return true end
    local pre = e.name:match("^(.-)<id>$")
    if pre and target:sub(1, #pre) == pre and #target > #pre then return true end
    local base, lo, hi = e.name:match("^(.-)(%d+)…(%d+)$")
    local n = base and target:sub(1, #base) == base and tonumber(target:sub(#base + 1))
    if n and n >= tonumber(lo) and n <= tonumber(hi) then return true end
  end
  return false
end

-- the phony targets as make expands them (its database, without running a recipe)
local db = t.sh("cd " .. root .. " && make -pq -f Makefile 2>/dev/null; true")
local phony, missing = {}, {}
for line in db:gmatch("[^\n]+") do
  local list = line:match("^%.PHONY: (.*)$")
  if list then for name in list:gmatch("%S+") do phony[#phony + 1] = name end end
end
t.ok(#phony >= 40, "make's database names the .PHONY targets (" .. #phony .. ", every reproduce-<id> among them)")
for _, name in ipairs(phony) do if not covered(name) then missing[#missing + 1] = name end end
t.is(table.concat(missing, " "), "", "every .PHONY target has a line in make help (a `## text` on its rule line)")
for _, want in ipairs { "reproduce-so-fig3", "reproduce-so-fig17", "test", "test-deps", "deps", "help", "sbatch-so-fig3" } do
  t.ok(covered(want), "make help covers " .. want)
end

-- the rule behind the check: a phony target without a help line is caught
local tmp = os.tmpname()
os.remove(tmp)
os.execute("mkdir -p " .. tmp .. "/mk && cp " .. root .. "/Makefile " .. tmp .. "/ && cp " .. root .. "/mk/*.mk " .. tmp .. "/mk/")
local f = assert(io.open(tmp .. "/mk/zz-new.mk", "w"))
f:write(".PHONY: undocumented documented\nundocumented:\n\t@true\ndocumented: ## a line\n\t@true\n")
f:close()
local h2 = t.sh("cd " .. tmp .. " && make -s --no-print-directory help")
t.ok(h2:find("\n  documented%s+a line") and not h2:find("undocumented", 1, true), "a new target's ## line is listed, a target without one is not", h2)
os.execute("rm -rf " .. tmp)
return t.done()
