-- test_gallery — the results gallery (lua/outlierlab/runner/gallery.lua, make gallery) from
-- real runs: two experiments in their quick profile write run.json, a second profile of one of
-- them is added (a copy with another verdict and a claim holding HTML), and the gallery must
-- show every experiment, every run's claim, verdict, profile and run time, escape the text,
-- and link only files that exist (HTML and Markdown). Where Debian's chromium is installed,
-- headless Chromium loads the page: no broken image, and a screenshot is taken.
local t = require "tap"
local gallery = require "outlierlab.runner.gallery"
local cjson = require "cjson"
local catalogue = require "outlierlab.runner.catalogue"
local sh, slurp = t.sh, t.slurp

local tmp = os.tmpname()
os.remove(tmp)
local res = tmp .. "/results"
os.execute("mkdir -p " .. res)
for _, id in ipairs({ "so-fig3", "qt-fig1" }) do
  local out, ok = sh(string.format("OMP_NUM_THREADS=1 bin/outlierlab run experiments/%s.lua --profile=quick --out=%s --cache=%s/cache",
                                   id, res, tmp))
  t.ok(ok, id .. ": quick run", out)
end
-- a second profile of so-fig3: same files, another verdict, a claim with markup to escape
os.execute(string.format("cp -r %s/so-fig3/quick %s/so-fig3/default", res, res))
local rec = cjson.decode(slurp(res .. "/so-fig3/default/run.json"))
rec.profile, rec.verdict, rec.seconds, rec.claim = "default", "holds", 754.2, "outliers <b>at</b> token & \"dims\""
local f = io.open(res .. "/so-fig3/default/run.json", "w")
f:write(cjson.encode(rec))
f:close()

local out, ok = sh("bin/outlierlab gallery --results=" .. res)
t.ok(ok and out:find("3 run(s)", 1, true), "gallery built from 3 runs", out)
local page = slurp(res .. "/index.html") or ""
local md = slurp(res .. "/index.md") or ""
for _, e in ipairs(catalogue.list()) do
  t.ok(page:find('id="' .. e.id .. '"', 1, true) and md:find("## " .. e.id:gsub("%-", "-"), 1, true),
       e.id .. ": has a section in both pages")
end
t.ok(select(2, page:gsub("Not run yet", "")) == #catalogue.list() - 2, "experiments without a run say how to make one")
for _, want in ipairs({ "profile <b>quick</b>", "profile <b>default</b>", "12.6 min", "no verdict (quick profile", "holds",
                        "outliers &lt;b&gt;at&lt;/b&gt; token &amp; &quot;dims&quot;",
                        'src="so-fig3/quick/so-fig3.png"', 'href="so-fig3/quick/so-fig3.nc"',
                        'href="qt-fig1/quick/summary.md"', "training history" }) do
  t.ok(page:find(want, 1, true), "index.html shows " .. want)
end
local mc = require("outlierlab.figure.netcdf").machine()
local where = "on " .. mc.cpu .. ", OpenBLAS " .. mc.blas_core .. " kernels, 1 thread,"
t.ok(page:find(where:gsub("&", "&amp;"), 1, true) and md:find(where, 1, true), "both pages name the machine of each run: " .. where)
t.ok(not page:find("<b>at</b>", 1, true), "markup in a claim is escaped")
local claim = cjson.decode(slurp(res .. "/qt-fig1/quick/run.json")).claim
t.ok(md:find("Verdict: **no verdict (quick profile", 1, true) and md:find("Verdict: **holds**", 1, true) and md:find("![so-fig3, default profile](so-fig3/default/so-fig3.png)", 1, true)
     and md:find(claim:sub(1, 30), 1, true), "index.md has the verdicts, figures and claims")

-- every relative link of both pages names an existing file
local links, missing = 0, {}
local function check(path)
  if path:match("^#") or path:match("^%a+:") then return end
  links = links + 1
  local p = path:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end)
  if not slurp(res .. "/" .. p) then missing[#missing + 1] = path end
end
for l in page:gmatch('href="([^"]+)"') do check(l) end
for l in page:gmatch('src="([^"]+)"') do check(l) end
for l in md:gmatch("%]%(([^)]+)%)") do check(l) end
t.ok(links > 20 and #missing == 0, links .. " links, all resolve", table.concat(missing, " "))

-- the page in a real browser
if not gallery.browser() then
  for _ = 1, 2 do t.skip("chromium is not installed: no browser check (apt-get install chromium; make gallery-check)") end
else
  local dom, dok = gallery.dom(res .. "/index.html")
  local imgs = dom:match('data%-images="([^"]*)"')
  -- the runs' figures and, under each run, its models' training histories: every one loads
  local total, loaded, broken = tostring(imgs):match("^(%d+) loaded (%d+) broken (%d+)$")
  t.ok(dok and total and tonumber(total) >= 3 and total == loaded and broken == "0",
    "Chromium loads the page, every image (figures and histories): " .. tostring(imgs), dom:sub(1, 400))
  local sok, msg = gallery.screenshot(res .. "/index.html", tmp .. "/shot.png")
  local png = slurp(tmp .. "/shot.png") or ""
  t.ok(sok and png:sub(1, 8) == "\137PNG\r\n\26\n" and #png > 50000, "screenshot taken (" .. #png .. " bytes)", msg)
end
os.execute("rm -rf '" .. tmp .. "'")
return t.done()
