-- test_views_browser — the interactive views in a real browser: Debian's headless Chromium, driven
-- by scripts/browser.js (node, the DevTools protocol on a pipe). Pages: a hand-made record with a
-- known spike at <bos> and sink heads (inline), two records side by side (in data files), the
-- plain fallback without the charting library, a page of hostile text, so-fig3's quick run
-- through make gallery's code (its views page and the gallery index) and the model report of
-- its model (make report's index.html, which embeds the same views). Every page must load with
-- no console error, exception or failed load; a real mouse move over a known cell must show that
-- cell's value and token; a click on a thumbnail must open that head enlarged; screenshots are
-- PNG files that are not empty. Needs chromium, node and make views-assets (make test runs them:
-- make deps installs chromium and nodejs); where one is missing the test skips, except under CI (CI set), where it fails.
local t = require "tap"
local views = require "outlierlab.figure.views"
local gallery = require "outlierlab.runner.gallery"
local cjson = require "cjson"
local ol = require "outlierlab"

local chromium = gallery.browser()
local node = t.sh("command -v node"):match("^(%S+)")
local have_lib = t.slurp(views.asset_source() .. "/dist/" .. views.ASSET) ~= nil
local missing = (not chromium and "chromium") or (not node and "node (Debian nodejs)") or
                (not have_lib and "the charting library (make views-assets)") or nil
if missing then
  if os.getenv("CI") then
    t.ok(false, "the browser test needs " .. missing .. " (make deps installs it)")
  else
    t.skip("no " .. missing .. ": make test-deps")
  end
  t.done()
  return
end

local tmp = os.tmpname()
os.remove(tmp)
local res = tmp .. "/results"
os.execute("mkdir -p " .. res)
local function url(p) return "file://" .. (p:sub(1, 1) == "/" and p or (ol.root .. "/" .. p)) end
local function js(s) return cjson.encode(s) end

-- ---------------------------------------------------------------- hand-made records
-- T = 8 tokens, C = 16 channels, 3 layers, 2 heads; h = sin(...) except a spike of `spike` at
-- <bos>, channel 5, in layers 1 and 2; head 0 a sink (0.9 of every later query on key 0)
local TOKENS = { "<bos>", "<script>alert(1)</script>", "a\"b'c&d", "\1\2ctl", "bad\255\254utf", "</script><!--", "x", "y" }
local function record(key, label, spike)
  local T, C, L, NH = #TOKENS, 16, 3, 2
  local h, attn, layers = {}, {}, {}
  for l = 1, L do
    layers[l] = l - 1
    local hl = {}
    for q = 0, T - 1 do
      for c = 0, C - 1 do hl[q * C + c + 1] = (q == 0 and c == 5 and l >= 2) and spike or 0.5 * math.sin(q * 3 + c + l) end
    end
    h[l] = hl
    local a = {}
    for hh = 0, NH - 1 do
      for q = 0, T - 1 do
        for k = 0, T - 1 do
          local v
          if k > q then v = 0
          elseif hh == 0 then v = (k == 0) and (q == 0 and 1 or 0.9) or 0.1 / q
          else v = 1 / (q + 1) end
          a[#a + 1] = v
        end
      end
    end
    attn[l] = a
  end
  return views.from_arrays{ key = key, label = label, tokens = TOKENS, layers = layers, C = C, h = h, NH = NH, attn = attn }
end
local A = record("vanilla", "vanilla", 500)
local B = record("gated", "gated <i>variant</i>", 250)
local assets = res .. "/_assets"
t.ok(views.install_assets(assets), "the charting library installed into the results' _assets")
local pages = {
  single = views.page{ path = res .. "/syn/views.html", title = "hand-made record", assets = assets,
                       facts = { claim = "a spike at <bos>", verdict = "holds" }, views = views.default_views(A) },
  -- (the records in data files beside the page, loaded on demand: the single page has them inline)
  side = views.page{ path = res .. "/syn/side.html", title = "side by side", assets = assets, views = views.run_views({ A, B }),
                     inline_bytes = 0 },
  fallback = views.page{ path = res .. "/syn/fallback.html", title = "no library", assets = res .. "/nowhere",
                         views = views.default_views(A) },
  hostile = views.page{ path = res .. "/syn/hostile.html", title = "<script>window.__pwned = 1</script>",
                        assets = assets, facts = { claim = "</dd></dl><script>window.__pwned = 2</script>", ours = "\"'&<>",
                                                   verdict = "<b>holds</b>" },
                        links = { { "<script>x</script>", "javascript:window.__pwned=3" } },
                        views = { views.activations{ data = B }, views.attention_grid{ data = B } } },
}

-- so-fig3's quick run and the gallery (the same code as make reproduce-so-fig3 and make gallery)
local out, ok = t.sh(string.format("OMP_NUM_THREADS=1 bin/outlierlab run experiments/so-fig3.lua --profile=quick --out=%s --cache=%s/cache",
                                   res, tmp))
t.ok(ok, "so-fig3: quick run", out)
out, ok = t.sh("bin/outlierlab gallery --results=" .. res)
t.ok(ok and out:find("1 with interactive views", 1, true), "gallery: the run's interactive views", out)
-- the model report of the same model (make report's code): its index.html embeds the same views
local hash = (cjson.decode(t.slurp(res .. "/so-fig3/quick/run.json") or "{}").models or {})[1]
out, ok = t.sh(string.format("OMP_NUM_THREADS=1 bin/outlierlab report %s/cache/models/%s --out=%s/report --cache=%s/cache --batches=1 2>&1",
                             tmp, tostring(hash), res, tmp))
local report_dir = res .. "/report/cache-" .. tostring(hash)
t.ok(ok and t.slurp(report_dir .. "/index.html"), "report: runs on so-fig3's quick model", out)

-- a saved record's known cell: the page opens at the layer with the largest |h|; there, the
-- first token's largest channel (its x on the heat map) and its value
local function known_cell(path)
  local r = views.load(path)
  local pl, best = 1, -1
  for i, L in ipairs(r.h) do
    for _, row in ipairs(L) do for _, v in ipairs(row) do if math.abs(v) > best then best, pl = math.abs(v), i end end end
  end
  local ch = r.first.top_channel[pl]
  local x
  for k, c in ipairs(r.channels) do if c == ch then x = k - 1 end end
  return { rec = r, layer = r.layers[pl], channel = ch, x = x, value = r.h[pl][1][x + 1] }
end
local real = known_cell(res .. "/so-fig3/quick/views/model.json")
local rep_cell = known_cell(report_dir .. "/views/model.json")

-- ---------------------------------------------------------------- the plan
local READY = "document.body && document.body.getAttribute('data-olv-ready')"
local function cell(id, k, x, y)
  return string.format("(function(){document.getElementById(%s).scrollIntoView(); return OLV.cell(%s, %d, %d, %d)})()", js(id), js(id), k, x, y)
end
local function readout(id, k) return string.format("(function(){var v = OLV.views[%s]; return (v.parts ? v.parts[%d] : v).readout.textContent})()", js(id), k or 0) end
local function tip(id) return string.format("document.getElementById(%s).querySelector('.olv-chart').textContent", js(id)) end
local THUMB = [[(function(){OLV.ensureAll(); var c = document.querySelector('canvas.olv-thumb[data-layer="1"][data-head="0"]'); c.scrollIntoView();
  var r = c.getBoundingClientRect(); return {x: r.left + r.width / 2, y: r.top + r.height / 2}})()]]
local function BUTTON(sel)
  return string.format("(function(){var b = document.querySelector(%s); b.scrollIntoView(); var r = b.getBoundingClientRect(); " ..
    "return {x: r.left + r.width / 2, y: r.top + r.height / 2}})()", js(sel))
end
local MODAL_CELL = "(function(){return OLV.modal.heat.cell(0, 3)})()"
local shots = tmp .. "/shots"
os.execute("mkdir -p " .. shots)
local plan = { chromium = chromium, width = 1400, height = 1600, timeout_ms = 60000, overall_timeout_ms = 400000, pages = {
  { url = url(pages.single), ready = READY, steps = {
      { eval = "OLV.ensureAll()", as = "all" },
      { eval = "OLV.library", as = "library" },
      { hover = cell("olv-view-1", 0, 5, 0) },
      { eval = readout("olv-view-1"), as = "spike" },
      { eval = tip("olv-view-1"), as = "spike_tip" },
      { hover = cell("olv-view-1", 0, 3, 1) },
      { eval = readout("olv-view-1"), as = "script_token" },
      { screenshot = shots .. "/single-hover.png" },
      { click = THUMB },
      { eval = "document.body.getAttribute('data-olv-modal')", as = "modal" },
      { hover = MODAL_CELL },
      { eval = "OLV.modal.readout.textContent", as = "modal_cell" },
      { screenshot = shots .. "/single-head.png" },
      { click = BUTTON(".olv-modal .olv-close") },
      { eval = "String(document.body.getAttribute('data-olv-modal'))", as = "closed" },
      { click = BUTTON("#olv-view-1 .olv-layer:nth-of-type(3)") },
      { hover = cell("olv-view-1", 0, 5, 0) },
      { eval = readout("olv-view-1"), as = "layer2" },
      { wait = 500 } } },
  { url = url(pages.side), ready = READY, steps = {
      { eval = "OLV.ensureAll()", as = "all" },
      { eval = "OLV.views['olv-view-1'].parts.length", as = "parts" },
      { hover = cell("olv-view-1", 1, 5, 0) },
      { eval = readout("olv-view-1", 1), as = "second" },
      { screenshot = shots .. "/side.png" } } },
  { url = url(pages.fallback), ready = READY, steps = {
      { eval = "OLV.ensureAll()", as = "all" },
      { eval = "OLV.library", as = "library" },
      { eval = "document.getElementById('olv-status').textContent", as = "status" },
      { hover = cell("olv-view-1", 0, 5, 0) },
      { eval = readout("olv-view-1"), as = "spike" },
      { click = THUMB },
      { eval = "document.body.getAttribute('data-olv-modal')", as = "modal" },
      { screenshot = shots .. "/fallback.png" } } },
  { url = url(pages.hostile), ready = READY, steps = {
      { eval = "OLV.ensureAll()", as = "all" },
      { eval = "String(window.__pwned)", as = "pwned" },
      { eval = "document.querySelector('h1').textContent", as = "h1" },
      { eval = "document.querySelector('.olv-facts').textContent", as = "facts" },
      { eval = "document.scripts.length", as = "scripts" },
      { hover = cell("olv-view-1", 0, 0, 1) },
      { eval = readout("olv-view-1"), as = "token" },
      { screenshot = shots .. "/hostile.png" } } },
  { url = url(res .. "/so-fig3/quick/views.html"), ready = READY, steps = {
      { eval = "OLV.ensureAll()", as = "all" },
      { hover = cell("olv-view-1", 0, real.x, 0) },
      { eval = readout("olv-view-1"), as = "bos" },
      { screenshot = shots .. "/so-fig3.png" } } },
  { url = url(report_dir .. "/index.html"), ready = READY, steps = {
      { eval = "OLV.ensureAll()", as = "all" },
      { eval = "OLV.library", as = "library" },
      { eval = "document.querySelectorAll('section.olv-view').length", as = "views" },
      { eval = "Array.prototype.every.call(document.images, function (i) { return i.complete && i.naturalWidth > 0 })", as = "images" },
      { hover = cell("olv-view-1", 0, rep_cell.x, 0) },
      { eval = readout("olv-view-1"), as = "bos" },
      { eval = tip("olv-view-1"), as = "bos_tip" },
      { screenshot = shots .. "/report-hover.png" },
      { click = THUMB },
      { eval = "document.body.getAttribute('data-olv-modal')", as = "modal" },
      { screenshot = shots .. "/report-head.png" } } },
  { url = url(res .. "/index.html"), steps = {
      { eval = "document.querySelectorAll('.views-link a').length", as = "links" },
      { eval = "document.querySelector('.views-link a').href", as = "href" } } },
} }
local pf = tmp .. "/plan.json"
local f = io.open(pf, "w")
f:write(cjson.encode(plan))
f:close()
local t0 = os.time()
local raw = t.sh(node .. " scripts/browser.js " .. pf)
local okj, rep = pcall(cjson.decode, raw:match("(%b{})%s*$") or "")
t.ok(okj and rep.pages and #rep.pages == #plan.pages, "the browser ran every page", raw:sub(1, 2000))
if not (okj and rep.pages) then t.done() return end
t.diag(string.format("browser: %d pages in %d s", #rep.pages, os.time() - t0))

local names = { "single", "side", "fallback", "hostile", "so-fig3", "report", "gallery" }
local R = {}
for i, p in ipairs(rep.pages) do
  R[names[i]] = p.results
  t.is(#p.errors, 0, names[i] .. ": no console error, exception or failed load" .. (p.errors[1] and (": " .. p.errors[1]) or ""))
  -- (times are diagnostics: a busy machine stretches them; docs/reference/views.md has the measured ones)
  t.ok(p.load_ms, names[i] .. string.format(": loaded in %s ms, drawn in %s ms of renderer CPU", tostring(p.ready_ms or p.load_ms), tostring(p.cpu_ms)))
  for path, n in pairs(p.screenshots) do
    local png = t.slurp(path) or ""
    t.ok(n > 10000 and png:sub(1, 8) == "\137PNG\r\n\26\n", names[i] .. ": screenshot is a PNG of " .. n .. " bytes")
  end
end
local S = R.single
t.is(S.library, "echarts 6.1.0", "the pinned ECharts drew the page")
local SPIKE = "layer 1 · token 0 “<bos>” · channel 5 · h = 500 (|h| = 500)"
t.is(S.spike, SPIKE, "hover on the spike: its layer, token, channel and value")
t.ok(tostring(S.spike_tip):find(SPIKE, 1, true), "the tooltip says the same", S.spike_tip)
t.ok(tostring(S.script_token):find("token 1 “<script>alert(1)</script>” · channel 3", 1, true), "a hostile token shows as text", S.script_token)
t.is(S.modal, "vanilla:1:0", "a click on a thumbnail opens that head enlarged")
t.is(S.modal_cell, "layer 1 head 0 · query 3 “\\x01\\x02ctl” → key 0 “<bos>” · p = 0.9", "hover in the enlarged head: query, key, probability")
t.is(S.closed, "null", "the close button closes the enlarged head")
t.is(S.layer2, "layer 2 · token 0 “<bos>” · channel 5 · h = 500 (|h| = 500)", "the layer buttons switch the heat map's layer")
t.is(R.side.parts, 2, "side by side: both models")
t.is(R.side.second, "layer 1 · token 0 “<bos>” · channel 5 · h = 250 (|h| = 250)", "side by side (data files loaded on demand): the hover reads the second model")
t.is(R.fallback.library, cjson.null, "fallback page: no library")
t.ok(tostring(R.fallback.status):find("make views-assets", 1, true), "fallback page says how to install it", R.fallback.status)
t.is(R.fallback.spike, SPIKE, "fallback canvas: the same hover read-out")
t.is(R.fallback.modal, "vanilla:1:0", "fallback: the thumbnail still opens the head")
local H = R.hostile
t.is(H.pwned, "undefined", "hostile page: no injected script ran")
t.is(H.h1, "<script>window.__pwned = 1</script>", "hostile title shows as text")
t.ok(tostring(H.facts):find("</dd></dl><script>window.__pwned = 2</script>", 1, true), "hostile claim shows as text", H.facts)
t.is(H.scripts, 4, "no script element beyond the page's own four")
t.ok(tostring(H.token):find("“<script>alert(1)</script>”", 1, true), "hostile token shows as text in the read-out", H.token)
-- a hover at a record's known cell names its layer, token and channel and reads its value
local function read_known(name, c, text)
  t.ok(tostring(text):find(string.format("layer %d · token 0 “%s” · channel %d · h = ", c.layer, c.rec.tokens[1], c.channel), 1, true),
       name .. ": hover at the first token's largest channel names it", text)
  local got = tonumber(tostring(text):match("· h = (%-?[%d.e+-]+)"))
  t.ok(got and math.abs(got - c.value) <= 1e-3 * math.max(1, math.abs(c.value)), name .. ": the value read is the record's", tostring(got) .. " vs " .. c.value)
end
read_known("so-fig3 quick", real, R["so-fig3"].bos)
local RP = R.report
t.is(RP.library, "echarts 6.1.0", "report: the pinned ECharts (copied beside the reports) drew the views")
t.is(RP.views, 4, "report: the four views (|h|, first token, sink map, attention grid)")
t.is(RP.images, true, "report: every figure (PNG) loaded under the page's Content-Security-Policy")
read_known("report", rep_cell, RP.bos)
t.ok(tostring(RP.bos_tip):find(tostring(RP.bos), 1, true), "report: the tooltip says the same", RP.bos_tip)
t.is(RP.modal, "model:1:0", "report: a click on a thumbnail opens that head enlarged")
t.is(R.gallery.links, 1, "gallery index links the views page")
t.is(R.gallery.href, url(res .. "/so-fig3/quick/views.html"), "the link leads to the run's views page")
-- what the reader downloads: the page, its data and the library
local function size(p) local s = t.slurp(p) return s and #s or 0 end
t.diag(string.format("so-fig3 quick views page %d bytes + ECharts %d bytes; loaded in %d ms", size(res .. "/so-fig3/quick/views.html"),
  size(assets .. "/" .. views.ASSET), rep.pages[5].load_ms))
t.diag(string.format("report index.html %d bytes; loaded in %d ms, views drawn in %s ms", size(report_dir .. "/index.html"), rep.pages[6].load_ms,
  tostring(rep.pages[6].ready_ms)))
if os.getenv("OLV_KEEP") then t.diag("kept " .. tmp) else os.execute("rm -rf " .. tmp) end
t.done()
