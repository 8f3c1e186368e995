-- test_docs_catalogue — documents that are generated or must agree with the code:
--   * the experiments table of docs/reference/experiments.md is exactly `bin/outlierlab list --markdown`
--     (so it cannot drift from the experiment files);
--   * the verdict tables of README.md and docs/findings/results.md are exactly what
--     scripts/verdicts.lua makes of docs/findings/verdicts.tsv, that file has every row written and
--     agrees with the run files' table of results.md, and --update flags a verdict that moved;
--   * the repository is self-contained: no tracked file cites a reference file outside it;
--   * docs/guides/container.md says what .dockerignore does with .git.
local t = require "tap"
local catalogue = require "outlierlab.runner.catalogue"
local root = OUTLIERLAB_ROOT
local sh, slurp = t.sh, t.slurp

local doc = slurp(root .. "/docs/reference/experiments.md") or ""
local block = doc:match("<!%-%- generated: bin/outlierlab list %-%-markdown %-%->\n(.-)<!%-%- end of generated table %-%->")
t.ok(block, "docs/reference/experiments.md has the generated block")
local want = catalogue.markdown_table()
t.is(block, want, "docs/reference/experiments.md lists exactly the experiment files (regenerate: bin/outlierlab list --markdown)")
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
  t.skip("not a git checkout")
end

-- .dockerignore and docs/guides/container.md agree on .git
local ignore = slurp(root .. "/.dockerignore") or ""
local container = slurp(root .. "/docs/guides/container.md") or ""
local ignores_git = ("\n" .. ignore):find("\n%.git\n") ~= nil
t.ok(not ignores_git and container:find("`.git` stays in the build context", 1, true),
     ".dockerignore keeps .git in the build context and docs/guides/container.md says so")
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
                  '"git_commit":"abcdef0123","settings":{"n_seeds":3},"models_train_seconds":2400.4,' ..
                  '"stages":[{"name":"train","seconds":1,"cached":false},{"name":"analyze","seconds":0.01,"cached":true,' ..
                  '"computed_seconds":95.6},{"name":"plot","seconds":2.2,"cached":false}]}')
  local out = sh("cd " .. root .. " && bin/outlierlab run scripts/results-table.lua --results=" .. dir .. " --profile=default")
  os.execute("rm -rf '" .. dir .. "'")
  t.ok(out:find("| so-fig3 | SO Fig. 3: top-1 in the thousands | ratio 87 \\| at bos | does not hold | 1 seed | 71 s |", 1, true),
       "results-table: a run.json becomes its row (the | in a cell escaped)", out)
  t.ok(out:find("| so-fig11 |", 1, true) and out:find("| 3 seeds | 100 s (models' training 2400 s, analysis 98 s) |", 1, true),
       "results-table: n_seeds from the settings; what the run reused (models' training, the cached analysis's computed time)", out)
  t.ok(out:find("| blog-noop | | (not run) |", 1, true), "results-table: an experiment without run.json is listed as not run", out)
  t.ok(out:find("Total: 171 s (0.0 h) over 2 experiments at commit(s) abcdef0", 1, true), "results-table: the total time and the commit", out)
end
-- scripts/timings.lua: each model's training time once, in the first experiment (id order) that
-- uses it; per preset min / median / max; the total and the wall time at N models at a time; a
-- resumed model flagged, a model missing from the cache named (a results root and a cache made here)
do
  local dir = os.tmpname(); os.remove(dir)
  local function put(path, text)
    os.execute("mkdir -p '" .. (dir .. "/" .. path):match("^(.*)/[^/]+$") .. "'")
    local f = io.open(dir .. "/" .. path, "w")
    f:write(text)
    f:close()
  end
  local function model(h, preset, steps, secs, resumed, core)
    put("cache/models/" .. h .. "/spec.json", string.format('{"code":"x","spec":{"model":{"preset":"%s"},"train":{"steps":%d}}}', preset, steps))
    put("cache/models/" .. h .. "/done.lua", string.format("return {[\"train_seconds\"]=%s,[\"resumed\"]=%s%s}", secs, tostring(resumed),
      core and string.format(',[\"machine\"]={[\"cpu\"]=\"Test CPU\",[\"blas_core\"]=\"%s\",[\"threads\"]=2}', core) or ""))
  end
  model("aa01", "llama-organism", 6000, 300, false, "Zen")
  model("aa02", "llama-organism", 6000, 340, false, "Zen")
  model("aa03", "llama-organism", 6000, 400, true, "SkylakeX")
  model("bb01", "bert-organism", 2500, 180, false)
  -- so-fig10 comes first in id order: it adds aa01 and aa02; so-fig11 adds aa03 and bb01 (aa01 again: not counted)
  put("results/so-fig10/default/run.json", '{"models":["aa01","aa02"],"seconds":350}')
  put("results/so-fig11/default/run.json", '{"models":["aa01","aa03","bb01","cc09"],"seconds":12}')
  local out = sh("cd " .. root .. " && bin/outlierlab run scripts/timings.lua --results=" .. dir .. "/results --cache=" ..
                 dir .. "/cache --profile=default --ranks=2")
  os.execute("rm -rf '" .. dir .. "'")
  t.ok(out:find("| so-fig10 | 2 | 2 | 640 s (52 %) | 350 s |", 1, true), "timings: the first experiment that uses a model counts it", out)
  t.ok(out:find("| so-fig11 | 4 | 2 | 580 s (48 %) | 12 s |", 1, true), "timings: a model counted once (aa01 not again)", out)
  t.ok(out:find("| llama-organism, 6000 steps | 3 | 300 / 340 / 400 s |", 1, true), "timings: per preset min / median / max", out)
  t.ok(out:find("| bert-organism, 2500 steps | 1 | 180 / 180 / 180 s |", 1, true), "timings: a preset of one model", out)
  -- at 2 ranks: so-fig10's 300 + 340 s take max(640 / 2, 340) = 340 s, so-fig11's 400 + 180 s max(290, 400) = 400 s
  t.ok(out:find("Total: 4 distinct models, 1220 s of training (0.3 h); at 2 models at a time about 740 s (0.2 h)", 1, true),
       "timings: the total and the wall time over the ranks, each experiment at least its longest model", out)
  t.ok(out:find("1 model(s) resumed from a checkpoint", 1, true), "timings: a resumed model is flagged", out)
  t.ok(out:find("not in the cache: so-fig11:cc09", 1, true), "timings: a model missing from the cache is named", out)
  t.ok(out:find("Trained on: Test CPU, OpenBLAS Zen kernels (2 models); Test CPU, OpenBLAS SkylakeX kernels (1 model); no machine recorded (1 model).", 1, true),
       "timings: the machines the models were trained on (and those that recorded none)", out)
end

-- the verdict tables of README.md and docs/findings/results.md are what scripts/verdicts.lua makes
-- of docs/findings/verdicts.tsv, and that file agrees with the run files' table of results.md
do
  local function block(path)
    local text = slurp(root .. "/" .. path) or ""
    return text:match("<!%-%- generated: bin/outlierlab run scripts/verdicts%.lua %-%-write %(from docs/findings/verdicts%.tsv%) %-%->\n(.-)<!%-%- end of generated verdicts %-%->")
  end
  local readme, findings = block("README.md"), block("docs/findings/results.md")
  t.ok(readme and findings, "README.md and docs/findings/results.md have the generated verdict blocks")
  t.is(readme, sh("cd " .. root .. " && bin/outlierlab run scripts/verdicts.lua"),
       "README.md's verdict table is current (regenerate: bin/outlierlab run scripts/verdicts.lua --write)")
  t.is(findings, sh("cd " .. root .. " && bin/outlierlab run scripts/verdicts.lua --print=findings"),
       "results.md's verdict block is current (regenerate: bin/outlierlab run scripts/verdicts.lua --write)")
  local tsv = slurp(root .. "/docs/findings/verdicts.tsv") or ""
  local rows, bad = 0, {}
  for line in tsv:gmatch("([^\n]*)\n") do
    rows = rows + 1
    if line:find("REVIEW", 1, true) or line:find("\t\t", 1, true) or line:find("\t$") then bad[#bad + 1] = line:match("^[^\t]*") end
  end
  t.ok(#bad == 0, "verdicts.tsv: every row has its claim, why and change written (no REVIEW, no empty cell)", table.concat(bad, ", "))
  -- the run files' table in results.md's appendix (scripts/results-table.lua) gives the same verdicts
  local doc = slurp(root .. "/docs/findings/results.md") or ""
  local mismatch, n = {}, 0
  for line in tsv:gmatch("([^\n]*)\n") do
    local id, verdict = line:match("^([^\t]+)\t([^\t]+)")
    if id and id ~= "id" then
      n = n + 1
      local row = doc:match("\n| " .. id:gsub("%-", "%%-") .. " |[^\n]*")
      local v = row and row:match("| ([^|]+) | %d+ seeds? |")
      if v ~= verdict then mismatch[#mismatch + 1] = id .. " (" .. verdict .. " vs " .. tostring(v) .. ")" end
    end
  end
  t.ok(n > 0 and #mismatch == 0, "verdicts.tsv agrees with the run files' table of results.md (" .. n .. " rows)",
       table.concat(mismatch, ", "))
  -- --update copies a run file's verdict and flags a row whose verdict moved
  local dir = os.tmpname(); os.remove(dir)
  os.execute("mkdir -p '" .. dir .. "/so-fig3/default'")
  local f = io.open(dir .. "/so-fig3/default/run.json", "w")
  f:write('{"paper":"SO","paper_result":"x","reproduced":"ratio 999","verdict":"holds","settings":{"seed":1}}')
  f:close()
  os.execute("cp '" .. root .. "/docs/findings/verdicts.tsv' '" .. dir .. "/v.tsv'")
  local before = slurp(dir .. "/v.tsv") or ""
  local fig3_was = before:match("\nso%-fig3\t([^\t]+)\t") or "?"
  local fig11_row = before:match("\nso%-fig11\t[^\n]*\n") or "?"
  sh("cd " .. root .. " && bin/outlierlab run scripts/verdicts.lua --update --tsv=" .. dir .. "/v.tsv --results=" .. dir .. " 2>/dev/null")
  local out = slurp(dir .. "/v.tsv") or ""
  os.execute("rm -rf '" .. dir .. "'")
  local row = out:match("\nso%-fig3\t[^\n]*") or ""
  -- (the so-fig3 row's verdict moves unless it already holds; the check needs it to move)
  t.ok(fig3_was ~= "holds" and row:find("\tholds\t1\tSO\tx\tratio 999\t", 1, true) and row:find("REVIEW: verdict was " .. fig3_was, 1, true),
       "verdicts --update: the run file's fields copied, the why flagged for review when the verdict moved", row)
  t.ok(out:find(fig11_row, 1, true) ~= nil, "verdicts --update: a row without a run file is kept as it was")
end

-- outlierlab.util.marked: each block between its markers rewritten, the captures passed on, the
-- rest of the page kept; an unclosed block is an error naming the page and the marker
do
  local marked = require "outlierlab.util.marked"
  local page = "a\n<!-- x 1 -->\nold\n<!-- end -->\nb\n<!-- x 2 -->\nsame\n<!-- end -->\nc\n"
  local seen = {}
  local new, n, changed = marked.rewrite(page, "<!%-%- x (%d) %-%->", "<!-- end -->", function(inner, k)
    seen[#seen + 1] = k .. "=" .. inner
    return k == "1" and "\nnew\n" or inner
  end, "p.md")
  t.is(new, "a\n<!-- x 1 -->\nnew\n<!-- end -->\nb\n<!-- x 2 -->\nsame\n<!-- end -->\nc\n", "marked.rewrite: one block rewritten, the other and the page kept")
  t.is(n .. " " .. changed .. " " .. table.concat(seen, ","), "2 1 1=\nold\n,2=\nsame\n", "marked.rewrite: counts and captures")
  local plain = marked.rewrite("<!-- (a) -->X<!-- end -->", "<!-- (a) -->", "<!-- end -->", function() return "Y" end, "p.md", true)
  t.is(plain, "<!-- (a) -->Y<!-- end -->", "marked.rewrite: a plain opening marker")
  local ok, err = pcall(marked.rewrite, "<!-- x 1 -->\nno end\n", "<!%-%- x (%d) %-%->", "<!-- end -->", function(s) return s end, "p.md")
  t.ok(not ok and tostring(err):find('p.md: the block opened by "<!-- x 1 -->" has no closing marker "<!-- end -->"', 1, true),
       "marked.rewrite: an unclosed block names the page and both markers", tostring(err))
end

-- scripts/findings-tables.lua: a marked block becomes the summary's table of that rank; a block
-- already equal is left; --check fails while one differs; a missing table is an error naming it;
-- every block of the findings pages names an experiment of the catalogue
do
  local dir = os.tmpname(); os.remove(dir)
  os.execute("mkdir -p '" .. dir .. "/so-fig11/default'")
  local function put(path, s) local f = io.open(path, "w"); f:write(s); f:close() end
  put(dir .. "/so-fig11/default/summary.md", "# so-fig11\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\ntext | not a table\n\n" ..
      "| setting | value |\n|---|---|\n| seeds | 3 |\n| lr | 0.02 |\nafter\n")
  local OPEN2 = "<!-- generated table: so-fig11 #2 (scripts/findings-tables.lua) -->\n"
  local CLOSE = "<!-- end of generated table -->"
  put(dir .. "/page.md", "# page\n\n" .. OPEN2 .. "| old |\n" .. CLOSE .. "\n\nprose\n" ..
      "<!-- generated table: so-fig11 #1 (scripts/findings-tables.lua) -->\n| a | b |\n|---|---|\n| 1 | 2 |\n" .. CLOSE .. "\nend\n")
  local cmd = "cd " .. root .. " && bin/outlierlab run scripts/findings-tables.lua --doc=" .. dir .. "/page.md --results=" .. dir
  local out1, ok1 = sh(cmd .. " --check")
  t.ok(not ok1 and out1:find("differs: so-fig11 #2", 1, true) and not out1:find("#1\n", 1, true),
       "findings-tables --check: the stale block named, the command fails", out1)
  local out2 = sh(cmd .. " --write")
  local page = slurp(dir .. "/page.md") or ""
  t.is(page, "# page\n\n" .. OPEN2 .. "| setting | value |\n|---|---|\n| seeds | 3 |\n| lr | 0.02 |\n" .. CLOSE .. "\n\nprose\n" ..
       "<!-- generated table: so-fig11 #1 (scripts/findings-tables.lua) -->\n| a | b |\n|---|---|\n| 1 | 2 |\n" .. CLOSE .. "\nend\n",
       "findings-tables --write: the second table copied into its block, the rest of the page kept")
  t.ok(out2:find("2 generated table(s), 1 rewritten", 1, true), "findings-tables --write: counts the blocks", out2)
  local _, ok3 = sh(cmd .. " --check")
  t.ok(ok3, "findings-tables --check: passes once the blocks are the run files' tables")
  put(dir .. "/page.md", "<!-- generated table: so-fig11 #3 (scripts/findings-tables.lua) -->\n" .. CLOSE .. "\n")
  local out4, ok4 = sh(cmd .. " --check 2>&1")
  t.ok(not ok4 and out4:find("block so-fig11 #3: " .. dir .. "/so-fig11/default/summary.md has 2 table(s)", 1, true),
       "findings-tables: a missing table is an error naming the block and the file", out4)
  os.execute("rm -rf '" .. dir .. "'")
  local ids = {}
  for _, e in ipairs(catalogue.list()) do ids[e.id] = true end
  local bad = {}
  for _, page in ipairs({ "results.md", "organism.md" }) do
    local text = slurp(root .. "/docs/findings/" .. page) or ""
    for id in text:gmatch("<!%-%- generated table: ([%w%-_]+) #%d+") do
      if not ids[id] then bad[#bad + 1] = page .. ": " .. id end
    end
  end
  t.ok(#bad == 0, "every generated table of the findings pages names an experiment", table.concat(bad, ", "))
end

-- the seeds a verdict states are the seeds it judges: an experiment whose profile trains more
-- than one seed reads them (seeds.list, a sweep member's it.seed, cfg.n_seeds); one that judges a
-- single model says n_seeds = 1, so the verdict table does not claim three seeds for one model
do
  local bad = {}
  for _, e in ipairs(catalogue.list()) do
    local src = slurp(e.file) or ""
    local uses = src:find("seeds%.list") or src:find("it%.seed") or src:find("cfg%.n_seeds")
    for name, p in pairs(e.profile_tables) do
      if (p.n_seeds or 1) > 1 and not uses then bad[#bad + 1] = e.id .. " (" .. name .. ": n_seeds " .. p.n_seeds .. ")" end
    end
  end
  table.sort(bad)
  t.ok(#bad == 0, "an experiment with n_seeds > 1 reads its seeds; one that judges one model says n_seeds = 1", table.concat(bad, ", "))
end

return t.done()
