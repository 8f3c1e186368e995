-- test_views — the interactive views' data and pages without a browser (lua/outlierlab/figure/views.lua):
-- text made safe (UTF-8 repair, JSON inside <script>, HTML), a record's numbers against a
-- hand-computed case (the first token's state, Gu et al.'s α, the channels kept), the saved files
-- (record, CircuitsVis attention, CF NetCDF) and a page's markup (no token reaches it unescaped,
-- nothing loads from outside its folder). The browser half is test_views_browser.lua.
local t = require "tap"
local views = require "outlierlab.figure.views"
local cjson = require "cjson"

-- ---------------------------------------------------------------- UTF-8 repair
local FFFD = "\239\191\189"
t.is(views.utf8_clean("plain <ascii>"), "plain <ascii>", "ASCII unchanged")
t.is(views.utf8_clean("caf\195\169 \240\159\152\128"), "caf\195\169 \240\159\152\128", "valid 2- and 4-byte sequences unchanged")
t.is(views.utf8_clean("a\255b"), "a" .. FFFD .. "b", "a stray byte becomes U+FFFD")
t.is(views.utf8_clean("\192\128"), FFFD .. FFFD, "an overlong NUL is two replacements")
t.is(views.utf8_clean("\237\160\128"), FFFD .. FFFD .. FFFD, "a UTF-16 surrogate (U+D800) is replaced")
t.is(views.utf8_clean("x\226\130"), "x" .. FFFD .. FFFD, "a truncated sequence at the end is replaced")
t.is(views.utf8_clean("\244\144\128\128"), FFFD .. FFFD .. FFFD .. FFFD, "a code point above U+10FFFF is replaced")

-- ---------------------------------------------------------------- JSON inside <script>, HTML
local hostile = "</script><script>alert(1)</script><!-- & \"q\" 'q' \1\31\127 \226\128\168 bad\255"
local sj = views.script_json({ s = hostile, n = 0 / 0, x = 1.5 })
t.ok(not sj:find("[<>&]"), "script JSON has no <, > or &", sj)
t.ok(not sj:find("\226\128\168", 1, true), "script JSON has no raw U+2028")
t.ok(not sj:find("[%z\1-\31]"), "script JSON has no raw control character")
local back = cjson.decode(sj)
t.is(back.s, views.utf8_clean(hostile), "the string decodes back (invalid bytes as U+FFFD)")
t.is(back.n, cjson.null, "NaN is written as null")
t.is(back.x, 1.5, "numbers unchanged")
t.is(views.html("<b a=\"1\">&'"), "&lt;b a=&quot;1&quot;&gt;&amp;&#39;", "HTML text escaped")

-- ---------------------------------------------------------------- a record, by hand
-- T = 3 tokens, C = 2 channels, one layer; h rows (1, -2), (3, 0.5), (-4, 1); one causal head
-- with rows (1, 0, 0), (0.6, 0.4, 0), (0.2, 0.3, 0.5)
local rec = views.from_arrays{ key = "hand", label = "by hand", tokens = { "<bos>", "b", "c" }, layers = { 0 }, C = 2,
  h = { { 1, -2, 3, 0.5, -4, 1 } }, NH = 1, attn = { { 1, 0, 0, 0.6, 0.4, 0, 0.2, 0.3, 0.5 } } }
t.is(rec.first.top1[1], 2, "first token: its largest |h| (|-2|)")
t.is(rec.first.top_channel[1], 1, "first token: in channel 1")
t.is(rec.first.others_top1[1], 4, "the other tokens' largest |h| (|-4|)")
t.is(rec.first.median[1], 1, "median |h|: the lower middle of 0.5, 1, 1, 2, 3, 4")
t.near(rec.first.norm[1], math.sqrt(5), 1e-3, "first token's norm sqrt(1 + 4)")
t.near(rec.sink[1][1], 0.6, 1e-9, "α = mean over the queries of the attention to key 0 = (1 + 0.6 + 0.2) / 3")
t.is(rec.h[1][2][1], 3, "h kept per layer, token, channel")
t.is(rec.attn[1][1][3][2], 0.3, "attention kept per layer, head, query, key")
t.is(#rec.channels, 2, "every channel kept when C is small")

-- more channels than kept: the ones with the largest |h| over the shown tokens, in index order
local h4 = { 0.1, 9, 0.2, -7, 0.3, 1, 0.1, 2 }   -- T = 2, C = 4: channel 1 (9), channel 3 (7)
local r4 = views.from_arrays{ key = "wide", tokens = { "a", "b" }, layers = { 0 }, C = 4, h = { h4 }, max_channels = 2 }
t.is(table.concat(r4.channels, ","), "1,3", "the two channels with the largest |h|")
t.is(r4.h[1][1][2], -7, "their values, in the kept order")
t.is(r4.attn, nil, "no attention without attn")
local r5 = views.from_arrays{ key = "cut", tokens = { "a", "b", "c" }, layers = { 0 }, C = 1, h = { { 1, 2, 3 } }, max_tokens = 2 }
t.is(#r5.tokens, 2, "max_tokens keeps the first tokens")
t.is(r5.first.others_top1[1], 3, "the first token's statistics still over the whole sequence")

t.throws(function() views.from_arrays{ key = "bad", tokens = { "a" }, layers = { 0 }, C = 2, h = { { 1, 2, 3 } } } end,
  "views record 'bad': h of layer 0 has 3 values", "a wrong h size names the record and the layer")
t.throws(function() views.from_arrays{ key = "bad", tokens = { "a" }, layers = { 0 }, C = 1, h = { { 1 } }, attn = { { 1 } } } end,
  "NH (heads) is required", "attn without NH")
t.throws(function() views.from_arrays{ key = "no/slash", tokens = { "a" }, layers = { 0 }, C = 1, h = { { 1 } } } end,
  "key must be", "a key that is not a file name")

-- ---------------------------------------------------------------- files
local tmp = os.tmpname()
os.remove(tmp)
os.execute("mkdir -p " .. tmp)
local files = views.save(tmp, rec)
t.is(#files, 3, "saved: record, CircuitsVis attention, NetCDF")
local loaded = views.load(tmp .. "/views/hand.json")
t.is(loaded.label, "by hand", "the record loads back")
t.is(loaded.sink[1][1], 0.6, "with its numbers")
local cv = cjson.decode(t.slurp(tmp .. "/views/hand.attention.json"))
t.is(cv.tokens[1], "<bos>", "CircuitsVis export: the token strings")
t.is(#cv.attention[1], 1, "CircuitsVis export: [heads, dest, src] per layer (1 head)")
t.is(cv.attention[1][1][2][1], 0.6, "CircuitsVis export: dest 1 attends to src 0 with 0.6")
local dump = t.sh("ncdump -h " .. tmp .. "/views/hand.h.nc")
t.ok(dump:find("float h(layer, token, channel)", 1, true), "NetCDF: h over layer, token, channel", dump)
t.is(#views.records_in(tmp), 1, "records_in finds the record (not the attention export)")
-- the NetCDF file of a record with more channels than it keeps: every channel, unrounded
views.save(tmp, views.from_arrays{ key = "wide", tokens = { "a", "b" }, layers = { 0 }, C = 4,
                                   h = { { 0.123456, 9, 0.2, -7, 0.3, 1, 0.1, 2 } }, max_channels = 2 })
local wide = t.sh("ncdump -v h " .. tmp .. "/views/wide.h.nc")
t.ok(wide:find("channel = 4 ;", 1, true) and wide:find("0.123456", 1, true), "NetCDF: every channel, unrounded", wide)
t.throws(function() views.load(tmp .. "/views/hand.attention.json") end, "is not a views record", "load refuses another JSON file")

-- ---------------------------------------------------------------- the page's markup
-- a stand-in for the library: the page links it only when the file is there
os.execute("mkdir -p " .. tmp .. "/_assets && echo '// stand-in' > " .. tmp .. "/_assets/" .. views.ASSET)
local nasty = views.from_arrays{ key = "nasty", label = "<img src=x onerror=alert(1)>", tokens = { "<bos>", hostile, "&amp;" },
  layers = { 0 }, C = 1, h = { { 1, 2, 3 } }, NH = 1, attn = { { 1, 0, 0, 0.5, 0.5, 0, 0.3, 0.3, 0.4 } } }
local path, bytes = views.page{ path = tmp .. "/run/views.html", title = "<script>alert(2)</script>", assets = tmp .. "/_assets",
  facts = { claim = "</dd><script>alert(3)</script>", verdict = "holds" }, links = { { "a \"link\"", "run.json" } },
  views = views.default_views(nasty) }
local page = t.slurp(path)
t.is(#page, bytes, "page size returned")
t.ok(page:find("\\u003c\\/script\\u003e\\u003cscript\\u003ealert(1)", 1, true), "the hostile token is in the page, escaped")
t.ok(not page:find("<script>alert", 1, true) and not page:find("<img src=x", 1, true), "no injected element")
local n_script = select(2, page:gsub("<script", ""))
t.is(n_script, 4, "four script elements: the record, the spec, the library, the views")
t.ok(page:find('<script src="../_assets/echarts.min.js"></script>', 1, true), "the library from the assets folder, relative")
t.ok(page:find("default-src 'none'", 1, true), "a content security policy that loads nothing else")
t.ok(not page:find("https?://"), "no URL to the network in the page")
t.is(views.relative("a/b/c", "a/_assets"), "../../_assets", "relative path between folders")
-- beyond the inline budget the records go to data files beside the page
local _, _, extra = views.page{ path = tmp .. "/run/big.html", views = views.run_views({ rec, nasty }), inline_bytes = 0 }
t.ok(extra > 0 and t.slurp(tmp .. "/run/big-data/olv-rec-1.js"):match('^OLV_DATA%("olv%-rec%-1", '), "data files written", extra)
t.ok(not t.slurp(tmp .. "/run/big.html"):find('type="application/json" id="olv-rec', 1, true), "and not inline")
local _, nolib = views.page{ path = tmp .. "/run/nolib.html", assets = tmp .. "/nowhere", views = views.default_views(rec) }
t.ok(not t.slurp(tmp .. "/run/nolib.html"):find("<script src=", 1, true) and nolib > 0, "no library tag without the library (no failed load)")
t.throws(function() views.page{ path = tmp .. "/x.html", views = { { kind = "pie", data = rec } } } end, "unknown view kind", "unknown kind refused")
os.execute("rm -rf " .. tmp)
t.done()
