-- gallery — one page with every experiment's figure, claim, verdict, profile and run time:
-- results/index.html and its Markdown twin results/index.md (make gallery).
--
--   bin/outlierlab gallery [--results=DIR] [--out=DIR]
--
-- It reads the run.json that the experiment runner writes into each run's directory
-- (results/<id>/<profile>/run.json, lua/outlierlab/runner/report.lua) and lists every experiment
-- file (an experiment without a run says how to make one). Links are relative to the index,
-- so the page works from a clone, a copied results directory or a web server.
local cjson = require "cjson"
local E = require "outlierlab.runner.catalogue"
local plot = require "outlierlab.figure.gnuplot"

local M = {}

local function html(s)
  return (tostring(s or ""):gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;"):gsub('"', "&quot;"))
end
local function md(s) return (tostring(s or ""):gsub("([|*_`%[%]])", "\\%1"):gsub("\n", " ")) end
local function url(path) return (path:gsub("[^%w%-_%./~]", function(c) return string.format("%%%02X", c:byte()) end)) end

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

local PROFILE_ORDER = { quick = 1, default = 2, paper = 3 }

-- every run under root: { [id] = { rec, ... } }, each rec = run.json + dir (relative to root)
function M.runs(root)
  local out = {}
  local p = io.popen("ls -d '" .. root:gsub("'", "'\\''") .. "'/*/*/run.json 2>/dev/null")
  for path in p:lines() do
    local rel = path:sub(#root + 2):match("^(.*)/run%.json$")
    local ok, rec = pcall(cjson.decode, require("outlierlab.util.fs").read_file(path) or "")
    if ok and type(rec) == "table" and rec.id then
      rec.dir = rel
      out[rec.id] = out[rec.id] or {}
      table.insert(out[rec.id], rec)
    end
  end
  p:close()
  for _, list in pairs(out) do
    table.sort(list, function(a, b)
      local x, y = PROFILE_ORDER[a.profile] or 9, PROFILE_ORDER[b.profile] or 9
      if x ~= y then return x < y end
      return a.dir < b.dir
    end)
  end
  return out
end

-- the files of a run worth linking: figure PNG/PDF, NetCDF files, summary, histories
local function classify(rec, root)
  local c = { png = {}, pdf = {}, nc = {}, hist_png = {}, hist_nc = {}, other = {} }
  for _, f in ipairs(rec.files or {}) do
    local path = rec.dir .. "/" .. f
    -- views/ (one sequence's records and exports) is linked from the run's views page
    if not f:match("^views/") and exists(root .. "/" .. path) then
      local hist = f:match("^history/")
      local ext = f:match("%.(%w+)$")
      if hist and ext == "png" then c.hist_png[#c.hist_png + 1] = path
      elseif hist and ext == "nc" then c.hist_nc[#c.hist_nc + 1] = path
      elseif ext == "png" then c.png[#c.png + 1] = path
      elseif ext == "pdf" then c.pdf[#c.pdf + 1] = path
      elseif ext == "nc" then c.nc[#c.nc + 1] = path
      elseif f ~= "summary.md" and ext ~= "dat" then c.other[#c.other + 1] = path end
    end
  end
  c.summary = exists(root .. "/" .. rec.dir .. "/summary.md") and (rec.dir .. "/summary.md") or nil
  c.json = rec.dir .. "/run.json"
  return c
end

local function bytes_text(n)
  if n >= 1e6 then return string.format("%.1f MB", n / 1e6) end
  return string.format("%.0f kB", n / 1e3)
end

local function seconds_text(s)
  s = tonumber(s) or 0
  if s < 90 then return string.format("%.1f s", s) end
  if s < 5400 then return string.format("%.1f min", s / 60) end
  return string.format("%.1f h", s / 3600)
end

-- where the run computed (run.json's machine; older runs have none): ", on CPU, OpenBLAS X kernels, N threads"
local function machine_text(r)
  if type(r.machine) ~= "table" then return "" end
  return ", on " .. require("outlierlab.figure.netcdf").machine_line(r.machine)
end

-- the interactive views of a run that saved views records (outlierlab.figure.views): its page
-- <run dir>/views.html beside the claim, the paper's number, ours and the verdict; the charting
-- library in <root>/_assets. Returns the page's path relative to root and its size, or nil.
function M.views_page(r, root, index)
  local views = require "outlierlab.figure.views"
  local dir = root .. "/" .. r.dir
  local recs = views.records_in(dir, r.files)
  if #recs == 0 then return nil end
  local links = { { "index", views.relative(dir, index) }, { "run.json", "run.json" } }
  for _, f in ipairs(r.files or {}) do
    if f == "summary.md" or (f:match("%.png$") and not f:match("^history/")) or (f:match("%.nc$") and not f:match("^history/")) then
      links[#links + 1] = { f:match("[^/]+$"), f }
    end
  end
  for _, rec in ipairs(recs) do
    if exists(dir .. "/views/" .. rec.key .. ".attention.json") then
      links[#links + 1] = { rec.key .. " attention (CircuitsVis JSON)", "views/" .. rec.key .. ".attention.json" }
    end
  end
  local path, bytes, extra = views.page{
    path = dir .. "/views.html", assets = root .. "/_assets",
    title = r.id .. " — interactive views (" .. tostring(r.profile) .. " profile)",
    subtitle = "One held-out sequence through the run's model" .. (#recs > 1 and "s" or "") .. ": " .. tostring(r.title or ""),
    facts = { claim = r.claim, source = ((r.paper or "") .. " " .. (r.figure or "")), paper = r.paper_result, ours = r.reproduced,
              verdict = r.verdict, run = string.format("profile %s, seed %s, %s", tostring(r.profile), tostring(r.seed), tostring(r.date)) },
    links = links, views = views.run_views(recs) }
  return r.dir .. "/views.html", bytes + extra, #recs
end

local VERDICT_CLASS = { holds = "holds", ["does not hold"] = "fails", inconclusive = "open",
                        [require("outlierlab.runner.report").NO_VERDICT] = "open" }

local CSS = [[
body { font-family: "DejaVu Sans", sans-serif; margin: 0 auto; max-width: 1200px; padding: 1em 2em; color: #222; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #ccc; padding-bottom: 0.2em; }
.lead { color: #555; }
table.toc { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
table.toc td, table.toc th { border: 1px solid #ddd; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
.run { display: flex; gap: 1.5em; margin: 1em 0; padding: 1em; border: 1px solid #ddd; border-radius: 6px; }
.run figure { margin: 0; flex: 0 0 55%; }
.run figure img { width: 100%; height: auto; border: 1px solid #eee; }
.run .facts { flex: 1; font-size: 0.92em; }
.facts dt { font-weight: bold; margin-top: 0.5em; }
.facts dd { margin-left: 0; }
.verdict { display: inline-block; padding: 0.1em 0.5em; border-radius: 4px; font-weight: bold; }
.holds { background: #d7f2d7; color: #135c13; }
.fails { background: #f8d8d8; color: #7a1515; }
.open { background: #eee; color: #444; }
.missing { color: #888; font-style: italic; }
.links a { margin-right: 0.8em; }
.views-link { font-size: 0.92em; margin: 0.4em 0 0; }
.views-link a { font-weight: bold; }
]]

-- write <out>/index.html and <out>/index.md for the results under root; returns both paths
function M.build(root, out)
  out = out or root
  local runs = M.runs(root)
  local list = E.list(nil, root)
  local prefix = ""
  if out ~= root then
    -- links from the index to the runs: root relative to out when root lies below out
    if root:sub(1, #out + 1) == out .. "/" then prefix = root:sub(#out + 2) .. "/"
    else prefix = root .. "/" end
  end
  -- the interactive views' charting library once for every page (make views-assets; without it
  -- the pages draw plain heat maps and say how to install it)
  local have_assets = require("outlierlab.figure.views").install_assets(root .. "/_assets")
  local counts = { holds = 0, ["does not hold"] = 0, inconclusive = 0 }
  local nruns, n_views = 0, 0
  for _, rs in pairs(runs) do
    for _, r in ipairs(rs) do nruns = nruns + 1; counts[r.verdict] = (counts[r.verdict] or 0) + 1 end
  end
  local h, m = {}, {}
  local function H(s) h[#h + 1] = s end
  local function Md(s) m[#m + 1] = s end
  H('<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>outlierlab results</title>')
  H('<style>\n' .. CSS .. '</style>\n</head>\n<body>')
  H('<h1>outlierlab results</h1>')
  local nv = counts[require("outlierlab.runner.report").NO_VERDICT] or 0
  local lead = string.format("%d experiments, %d runs: the claim holds in %d, does not hold in %d, inconclusive in %d%s. " ..
    "Generated %s by <code>make gallery</code> from each run's run.json.", #list, nruns, counts.holds,
    counts["does not hold"], counts.inconclusive, nv > 0 and string.format("; %d quick runs without a verdict", nv) or "",
    require("outlierlab.figure.netcdf").timestamp())
  H('<p class="lead">' .. lead .. '</p>')
  Md("# outlierlab results\n")
  Md((lead:gsub("<code>", "`"):gsub("</code>", "`")) .. "\n")
  -- overview table
  H('<table class="toc"><tr><th>experiment</th><th>source</th><th>runs (verdict)</th></tr>')
  Md("| experiment | source | runs (verdict) |\n|---|---|---|")
  for _, e in ipairs(list) do
    local cells_h, cells_m = {}, {}
    for _, r in ipairs(runs[e.id] or {}) do
      cells_h[#cells_h + 1] = string.format('<a href="#%s-%s">%s</a> <span class="verdict %s">%s</span>', html(e.id),
        html(r.dir:match("[^/]+$")), html(r.dir:match("[^/]+$")), VERDICT_CLASS[r.verdict] or "open", html(r.verdict))
      cells_m[#cells_m + 1] = md(r.dir:match("[^/]+$")) .. " (" .. md(r.verdict) .. ")"
    end
    local src = (e.source.paper or "") .. " " .. (e.source.figure or "")
    H(string.format('<tr><td><a href="#%s">%s</a></td><td>%s</td><td>%s</td></tr>', html(e.id), html(e.id), html(src),
      #cells_h > 0 and table.concat(cells_h, "<br>") or '<span class="missing">not run yet</span>'))
    Md(string.format("| [%s](#%s) | %s | %s |", md(e.id), e.id, md(src),
      #cells_m > 0 and table.concat(cells_m, ", ") or "not run yet"))
  end
  H('</table>')
  Md("")
  for _, e in ipairs(list) do
    H(string.format('<h2 id="%s">%s — %s</h2>', html(e.id), html(e.id), html(e.title)))
    Md(string.format('## %s — %s\n\n<a id="%s"></a>\n', md(e.id), md(e.title), e.id))
    local rs = runs[e.id] or {}
    if #rs == 0 then
      local how = "make reproduce-" .. e.id .. " PROFILE=quick|default|long|paper"
      H('<p class="missing">Not run yet: <code>' .. html(how) .. '</code>. Claim: ' .. html(e.source.claim) .. '</p>')
      Md("Not run yet: `" .. how .. "`. Claim: " .. md(e.source.claim) .. "\n")
    end
    for _, r in ipairs(rs) do
      local c = classify(r, root)
      local leaf = r.dir:match("[^/]+$")
      local vclass = VERDICT_CLASS[r.verdict] or "open"
      H(string.format('<div class="run" id="%s-%s">', html(e.id), html(leaf)))
      local vpage, vbytes, nrec = M.views_page(r, root, (out or root) .. "/index.html")
      local vlink = vpage and string.format('<p class="views-link"><a href="%s">Interactive views</a> of %s: |h| per token and channel, ' ..
        'the first token across the layers, the sink map, every head\'s attention (%s)</p>', url(prefix .. vpage),
        nrec > 1 and (nrec .. " models side by side") or "the model", bytes_text(vbytes)) or ""
      if c.png[1] then
        H(string.format('<figure><a href="%s"><img src="%s" alt="%s, %s profile"></a>%s</figure>',
          url(prefix .. (c.pdf[1] or c.png[1])), url(prefix .. c.png[1]), html(e.id), html(r.profile), vlink))
      else
        H('<figure><p class="missing">no figure</p>' .. vlink .. '</figure>')
      end
      if vpage then n_views = n_views + 1 end
      H('<dl class="facts">')
      H('<dt>Claim, ' .. html((r.paper or "") .. " " .. (r.figure or "")) .. '</dt><dd>' .. html(r.claim) .. '</dd>')
      if r.paper_result then H('<dt>Paper</dt><dd>' .. html(r.paper_result) .. '</dd>') end
      if r.reproduced then H('<dt>Reproduced</dt><dd>' .. html(r.reproduced) .. '</dd>') end
      local scale = r.verdict == require("outlierlab.runner.report").NO_VERDICT and "" or " at this scale"
      H(string.format('<dt>Verdict</dt><dd><span class="verdict %s">%s</span>%s</dd>', vclass, html(r.verdict), scale))
      H(string.format('<dt>Run</dt><dd>profile <b>%s</b>, seed %s, %s, %d MPI rank(s)%s, %s, commit <code>%s</code></dd>',
        html(r.profile), html(r.seed), seconds_text(r.seconds), tonumber(r.mpi_ranks) or 1, html(machine_text(r)), html(r.date),
        html(tostring(r.git_commit or ""):sub(1, 12))))
      local links_h, links_m = {}, {}
      local function link(label, path)
        links_h[#links_h + 1] = string.format('<a href="%s">%s</a>', url(prefix .. path), html(label))
        links_m[#links_m + 1] = string.format("[%s](%s)", md(label), url(prefix .. path))
      end
      for _, f in ipairs(c.nc) do link(f:match("[^/]+$"), f) end
      if c.summary then link("summary.md", c.summary) end
      for _, f in ipairs(c.pdf) do link(f:match("[^/]+$"), f) end
      for i, f in ipairs(c.hist_png) do link("training history" .. (#c.hist_png > 1 and (" " .. i) or ""), f) end
      -- every model the run used: its training history (loss, and the phenomena over the steps
      -- with their thresholds: runner/history.lua), small, each linking to the full figure
      if #c.hist_png > 0 then
        local thumbs = {}
        for _, f in ipairs(c.hist_png) do
          local hash = f:match("([^/]+)%.png$") or ""
          thumbs[#thumbs + 1] = string.format('<a href="%s"><img src="%s" width="240" loading="lazy" alt="training history of model %s" title="model %s"></a>',
            url(prefix .. f), url(prefix .. f), html(hash), html(hash))
        end
        H('<dt>Training histories</dt><dd class="histories">' .. table.concat(thumbs, " ") ..
          '<br><small>per model: loss, gradient norm, sink share, value ratio, top-1/median at the sink, kurtosis over the steps; ' ..
          'dashed: the thresholds; grey: the final window the recipe map judges</small></dd>')
      end
      for i, f in ipairs(c.hist_nc) do link("history " .. (#c.hist_nc > 1 and (i .. " ") or "") .. "(NetCDF)", f) end
      link("run.json", c.json)
      H('<dt>Files</dt><dd class="links">' .. table.concat(links_h, " ") .. '</dd>')
      H('</dl>\n</div>')
      Md(string.format("### %s profile\n", md(r.profile)))
      if c.png[1] then Md(string.format("![%s, %s profile](%s)\n", md(e.id), md(r.profile), url(prefix .. c.png[1]))) end
      if vpage then Md(string.format("[Interactive views](%s) (HTML)\n", url(prefix .. vpage))) end
      Md("- Claim, " .. md((r.paper or "") .. " " .. (r.figure or "")) .. ": " .. md(r.claim))
      if r.paper_result then Md("- Paper: " .. md(r.paper_result)) end
      if r.reproduced then Md("- Reproduced: " .. md(r.reproduced)) end
      Md("- Verdict: **" .. md(r.verdict) .. "**" .. (r.verdict == require("outlierlab.runner.report").NO_VERDICT and "" or " at this scale"))
      Md(string.format("- Run: profile %s, seed %s, %s, %d MPI rank(s)%s, %s, commit `%s`", md(r.profile), md(r.seed),
        seconds_text(r.seconds), tonumber(r.mpi_ranks) or 1, md(machine_text(r)), md(r.date), tostring(r.git_commit or ""):sub(1, 12)))
      Md("- Files: " .. table.concat(links_m, ", ") .. "\n")
    end
  end
  -- a real browser marks images that failed to load (the gallery check reads it back)
  H([[<script>
window.addEventListener("load", function () {
  var bad = 0, imgs = document.images;
  for (var i = 0; i < imgs.length; i++) if (!imgs[i].complete || imgs[i].naturalWidth === 0) bad++;
  document.body.setAttribute("data-images", imgs.length + " loaded " + (imgs.length - bad) + " broken " + bad);
});
</script>]])
  H('</body>\n</html>')
  local hp, mp = out .. "/index.html", out .. "/index.md"
  plot.write_atomic(hp, table.concat(h, "\n") .. "\n")
  plot.write_atomic(mp, table.concat(m, "\n") .. "\n")
  return hp, mp, nruns, n_views, have_assets
end

-- ---------------------------------------------------------------- checking the page in a browser
-- Debian's headless Chromium (package chromium; not a dependency of make test: it is large).
-- Every call gets a fresh profile directory and none of the browser's network services.
function M.browser()
  for _, b in ipairs({ "chromium", "chromium-browser", "google-chrome" }) do
    local p = io.popen("command -v " .. b .. " 2>/dev/null")
    local path = p:read("*l")
    p:close()
    if path and path ~= "" then return path end
  end
  return nil
end

local function sq(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- run the browser on page (a file path) with extra arguments; returns its stdout, ok
local function headless(page, args)
  local b = M.browser()
  if not b then return "no chromium on this machine (apt-get install chromium)", false end
  local p = io.popen("mktemp -d")
  local profile = p:read("*l")
  p:close()
  local abs = page:sub(1, 1) == "/" and page or ((os.getenv("PWD") or ".") .. "/" .. page)
  local cmd = string.format("timeout 120 %s --headless --no-sandbox --disable-gpu --disable-quic --no-first-run " ..
    "--disable-background-networking --disable-component-update --disable-sync --user-data-dir=%s %s %s 2>/dev/null; " ..
    "echo \"__rc=$?\"", sq(b), sq(profile), args, sq("file://" .. abs))
  local q = io.popen(cmd)
  local out = q:read("*a")
  q:close()
  os.execute("rm -rf " .. sq(profile))
  local rc = tonumber(out:match("__rc=(%d+)%s*$"))
  return (out:gsub("__rc=%d+%s*$", "")), rc == 0
end

-- a PNG of the page as the browser draws it
function M.screenshot(page, png, width, height)
  local out, ok = headless(page, string.format("--window-size=%d,%d --screenshot=%s", width or 1280, height or 2400, sq(png)))
  local f = io.open(png, "rb")
  local size = f and f:seek("end") or 0
  if f then f:close() end
  return ok and size > 0, out
end

-- the page's DOM after its scripts ran: the gallery's body carries data-images="N loaded L broken B"
function M.dom(page)
  return headless(page, "--virtual-time-budget=5000 --dump-dom")
end

-- load pages (file paths) in headless Chromium through scripts/browser.js (node, the DevTools
-- protocol on a pipe); returns the report ({ pages = { { url, load_ms, errors, ... } } }) or nil
-- and why. Each page waits until its views are drawn (data-olv-ready) when it has views.
function M.load_pages(paths)
  local b = M.browser()
  if not b then return nil, "no chromium on this machine (apt-get install chromium)" end
  local p = io.popen("command -v node 2>/dev/null")
  local node = p:read("*l")
  p:close()
  if not node or node == "" then return nil, "no node on this machine (apt-get install nodejs)" end
  local ol = require "outlierlab"
  local plan = { chromium = b, pages = {} }
  for i, path in ipairs(paths) do
    local abs = path:sub(1, 1) == "/" and path or ((os.getenv("PWD") or ".") .. "/" .. path)
    plan.pages[i] = { url = "file://" .. abs,
                      ready = "!document.getElementById('olv-spec') || document.body.getAttribute('data-olv-ready')",
                      -- then every view drawn (the page draws those below the window on scroll)
                      steps = { { eval = "!window.OLV || OLV.ensureAll()", as = "all" }, { wait = 500 } } }
  end
  local tmp = os.tmpname()
  require("outlierlab.util.fs").write_atomic(tmp, cjson.encode(plan))
  local q = io.popen(sq(node) .. " " .. sq(ol.root .. "/scripts/browser.js") .. " " .. sq(tmp) .. " 2>&1")
  local out = q:read("*a")
  q:close()
  os.remove(tmp)
  local ok, rep = pcall(cjson.decode, out:match("(%b{})%s*$") or "")
  if not ok or type(rep) ~= "table" or not rep.pages then return nil, "scripts/browser.js: " .. out:sub(1, 500) end
  return rep
end

-- bin/outlierlab gallery [--results=DIR] [--out=DIR] [--check=PNG]: --check also loads the
-- page in headless Chromium, fails when an image is broken, and saves a screenshot to PNG
function M.main(argv)
  local ol = require "outlierlab"
  local root = os.getenv("OUTLIERLAB_RESULTS") or (ol.root .. "/results")
  local out, check
  for i = 2, #argv do
    local k, v = argv[i]:match("^%-%-(%w+)=(.*)$")
    if k == "results" then root = v
    elseif k == "out" then out = v
    elseif k == "check" then check = v
    else
      io.stderr:write("usage: outlierlab gallery [--results=DIR] [--out=DIR] [--check=SCREENSHOT.png]\n")
      return 2
    end
  end
  root = root:gsub("/+$", "")
  if out then out = out:gsub("/+$", "") end
  os.execute("mkdir -p " .. sq(out or root))
  local hp, mp, n, nv, assets = M.build(root, out)
  print(string.format("gallery: %d run(s) -> %s and %s; %d with interactive views%s", n, hp, mp, nv,
    (nv > 0 and not assets) and " (no charting library: make views-assets; the views draw plain heat maps)" or ""))
  if check then
    local dom, ok = M.dom(hp)
    local imgs = dom:match('data%-images="([^"]*)"')
    if not ok or not imgs then error("gallery: headless Chromium could not load " .. hp .. ": " .. dom:sub(1, 300), 0) end
    print("gallery: Chromium loaded " .. hp .. ": images " .. imgs)
    if not imgs:match("broken 0$") then error("gallery: " .. hp .. " has broken images (" .. imgs .. ")", 0) end
    local sok, msg = M.screenshot(hp, check)
    if not sok then error("gallery: screenshot failed: " .. msg, 0) end
    print("gallery: screenshot " .. check)
    -- the index and every interactive views page, with their scripts: no console error
    local pages = { hp }
    for _, rs in pairs(M.runs(root)) do
      for _, r in ipairs(rs) do
        local v = root .. "/" .. r.dir .. "/views.html"
        local f = io.open(v, "rb")
        if f then f:close() pages[#pages + 1] = v end
      end
    end
    local rep, why = M.load_pages(pages)
    if not rep then error("gallery: " .. why, 0) end
    local bad = 0
    for _, p in ipairs(rep.pages) do
      print(string.format("gallery: %s loaded in %s ms (%s ms of renderer CPU), %d console error(s)%s", p.url, tostring(p.ready_ms or p.load_ms),
        tostring(p.cpu_ms), #p.errors,
        p.errors[1] and (": " .. p.errors[1]) or ""))
      bad = bad + #p.errors
    end
    if bad > 0 then error("gallery: " .. bad .. " console error(s) on the pages", 0) end
  end
  return 0
end

return M
