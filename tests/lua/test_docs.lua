-- test_docs — the newcomer's pages stay true to the tree: every relative Markdown link in
-- README.md, docs/reference/architecture.md and docs/guides/container.md points at a file that exists, and every repository path that
-- README.md, docs/reference/architecture.md and docs/guides/container.md name in backticks (engine/…, lua/…,
-- tests/…, scripts/…, bench/…, mk/…, plots/…, experiments/…, examples/…) exists.
local t = require "tap"
local root = OUTLIERLAB_ROOT

local slurp = t.slurp
local function exists(path) local f = io.open(path, "r") if f then f:close() return true end return false end

local pages = { "README.md", "docs/reference/architecture.md", "docs/guides/container.md" }

for _, page in ipairs(pages) do
  local text = slurp(root .. "/" .. page)
  t.ok(text ~= nil, page .. " exists")
  if text then
    local dir = page:match("^(.*)/[^/]*$")
    local bad = {}
    for target in text:gmatch("%]%(([^)%s#]+)[^)]*%)") do
      if not target:match("^%a+:") then            -- skip http:, https:, mailto:
        local path = dir and (dir .. "/" .. target) or target
        if not exists(root .. "/" .. path) then bad[#bad + 1] = target end
      end
    end
    t.ok(#bad == 0, page .. ": every relative link resolves", "missing: " .. table.concat(bad, ", "))
  end
end

-- repository paths named in backticks
local prefixes = { "engine/", "lua/", "tests/", "scripts/", "bench/", "mk/", "plots/", "experiments/",
                   "examples/", "docs/", ".ci/" }
for _, page in ipairs({ "README.md", "docs/reference/architecture.md", "docs/guides/container.md" }) do
  local text = slurp(root .. "/" .. page) or ""
  local bad, n = {}, 0
  for code in text:gmatch("`([^`\n]+)`") do
    for word in code:gmatch("[%w_%./%-%*<>]+") do
      for _, pre in ipairs(prefixes) do
        if word:sub(1, #pre) == pre and not word:find("[%*<>]") and word:match("%.%a+$") then
          n = n + 1
          if not exists(root .. "/" .. word) then bad[#bad + 1] = word end
        end
      end
    end
  end
  t.ok(n > 0 and #bad == 0, string.format("%s: the %d file paths it names exist", page, n),
       "missing: " .. table.concat(bad, ", "))
end

return t.done()
