-- test_results_docs — documents that are generated or must agree with the code:
--   * the experiments table of docs/EXPERIMENTS.md is exactly `bin/outlierlab list --markdown`
--     (so it cannot drift from the experiment files);
--   * the repository is self-contained: no tracked file cites a reference file outside it;
--   * docs/CONTAINER.md says what .dockerignore does with .git.
local t = require "outlierlab.tap"
local E = require "outlierlab.experiment"
local root = OUTLIERLAB_ROOT
local sh, slurp = t.sh, t.slurp

local doc = slurp(root .. "/docs/EXPERIMENTS.md") or ""
local block = doc:match("<!%-%- generated: bin/outlierlab list %-%-markdown %-%->\n(.-)<!%-%- end of generated table %-%->")
t.ok(block, "docs/EXPERIMENTS.md has the generated block")
local want = E.markdown_table()
t.is(block, want, "docs/EXPERIMENTS.md lists exactly the experiment files (regenerate: bin/outlierlab list --markdown)")
local cli = sh("cd " .. root .. " && bin/outlierlab list --markdown")
t.is(cli, want, "bin/outlierlab list --markdown prints the same table")
local n = 0
for _ in io.popen("ls " .. root .. "/experiments/*.lua"):lines() do n = n + 1 end
t.is(select(2, want:gsub("\n| %[", "")), n, "one row per experiment file (" .. n .. ")")

-- self-contained: nothing cites the shared reference notes (the name is assembled here so
-- that this file does not match itself)
local name = "REFERENCE" .. "."
local hits, gok = sh("cd " .. root .. " && git ls-files -z | xargs -0 grep -n -e '" .. name .. "md' -e 'REFERENCE" .. " §' 2>/dev/null")
local _, in_git = sh("cd " .. root .. " && git rev-parse --git-dir")
if in_git then
  t.ok(not gok and hits == "", "no tracked file cites a reference file outside the repository", hits)
else
  t.ok(true, "# SKIP not a git checkout")
end

-- .dockerignore and docs/CONTAINER.md agree on .git
local ignore = slurp(root .. "/.dockerignore") or ""
local container = slurp(root .. "/docs/CONTAINER.md") or ""
local ignores_git = ("\n" .. ignore):find("\n%.git\n") ~= nil
t.ok(not ignores_git and container:find("`.git` stays in the build context", 1, true),
     ".dockerignore keeps .git in the build context and docs/CONTAINER.md says so")
-- scripts/results-table.lua: one row per experiment from the run.json files, the missing ones
-- listed, the total time summed (a results root made here with two runs)
do
  local dir = os.tmpname(); os.remove(dir)
  local function put(id, j)
    os.execute("mkdir -p '" .. dir .. "/" .. id .. "/default'")
    local f = io.open(dir .. "/" .. id .. "/default/run.json", "w")
    f:write(j)
    f:close()
  end
  put("so-fig3", '{"paper":"SO Fig. 3","paper_result":"top-1 in the thousands","reproduced":"ratio 87 | at bos",' ..
                 '"verdict":"does not hold","seconds":71.4,"git_commit":"abcdef0123","settings":{"seed":1}}')
  put("so-fig11", '{"paper":"SO Fig. 11","paper_result":"x","reproduced":"y","verdict":"inconclusive","seconds":100,' ..
                  '"git_commit":"abcdef0123","settings":{"n_seeds":3}}')
  local out = sh("cd " .. root .. " && bin/outlierlab run scripts/results-table.lua --results=" .. dir .. " --profile=default")
  os.execute("rm -rf '" .. dir .. "'")
  t.ok(out:find("| so-fig3 | SO Fig. 3: top-1 in the thousands | ratio 87 \\| at bos | does not hold | 1 seed | 71 s |", 1, true),
       "results-table: a run.json becomes its row (the | in a cell escaped)", out)
  t.ok(out:find("| so-fig11 |", 1, true) and out:find("| 3 seeds | 100 s |", 1, true), "results-table: n_seeds from the settings", out)
  t.ok(out:find("| blog-noop | | (not run) |", 1, true), "results-table: an experiment without run.json is listed as not run", out)
  t.ok(out:find("Total: 171 s (0.0 h) over 2 experiments at commit(s) abcdef0", 1, true), "results-table: the total time and the commit", out)
end

return t.done()
