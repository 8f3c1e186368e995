-- test_report — the model report (bin/outlierlab report, make report; outlierlab.report):
--   * the super-weight detector on a hand-computed case (measure/superweights: the spike's row,
--     the column with the largest x_i·W[o, i], its share; the control's k largest entries);
--   * a known answer: a LLaMA-style model of the cache (the quick organism's llama-quick on its
--     task) with ONE planted down_proj entry, W[5, 7] of layer 0 = 20, that turns an input spike
--     at <bos> (planted in <bos>'s embedding and the gate/up rows of channel 7) into a massive
--     activation in hidden channel 5; trained 300 steps with it, so that the model relies on it.
--     The report must name layer 0, row 5, column 7 as its first candidate and a super weight:
--     zeroing it removes the massive activation and costs loss, zeroing the 10 next largest
--     entries of the same matrix (the control) does neither. The cache model's run is also the
--     end-to-end run on a cached quick organism (its held-out data, no TEXT);
--   * end to end on a generated Hugging Face directory (random LLaMA weights, a SentencePiece-style
--     BPE tokenizer whose vocabulary holds the piece "▁<script>" and friends) on a hostile text: every
--     file is written, report.nc opens in xarray (warnings as errors) with its dims, index.html shows
--     the token "<script>" as text (escaped, no script element but the views' own, no outside
--     resource; tests/lua/test_views_browser.lua loads a report in Chromium) and summary.md
--     writes it in a code span; the same directory streamed (--stream=yes) gives the same one-pass
--     numbers and says what it leaves out;
--   * on so-fig3's quick model with so-fig3's τ and batches, the report's per-layer top-3, median
--     and outlier tokens are so-fig3's.
local t = require "tap"
local ol = require "outlierlab"
local ffi = require "ffi"
local fs = require "outlierlab.util.fs"
local json = require "outlierlab.util.json"
local recipes = require "outlierlab.recipes"
local models = require "outlierlab.models"
local batcher = require "outlierlab.data.batcher"
local train = require "outlierlab.train.loop"
local checkpoint = require "outlierlab.train.checkpoint"
local sw = require "outlierlab.measure.superweights"
local tiny_hf = dofile(ol.root .. "/tests/lua/lib/tiny_hf.lua")   -- a small HF directory with a byte-fallback tokenizer

local root = os.tmpname()
os.remove(root)
os.execute("mkdir -p " .. root)
local function write(path, s) local f = assert(io.open(path, "wb")) f:write(s) f:close() end
-- the values of a NetCDF variable (false where a fill value)
local function nc_values(file, var)
  local d = t.sh("ncdump -p 9,17 -v " .. var .. " " .. file)
  local body = d:match("\n " .. var .. " =%s*([^;]*);") or ""
  local out = {}
  for x in body:gmatch("[^,%s]+") do out[#out + 1] = tonumber(x) or false end
  return out
end
local function report(model, extra)
  return t.sh(string.format("bin/outlierlab report %s --out=%s/results/report --cache=%s/cache %s 2>&1", model, root, root, extra or ""))
end

-- ---------------------------------------------------------------- the detector, by hand
do
  local ctx = ol.Context{ params = 1024 }
  -- one token, F = 3 inputs, C = 2 outputs: y = x·Wᵀ
  local x = ctx:tensor({ 1, 1, 3 }, { persistent = true })
  x.data[0], x.data[1], x.data[2] = 1, 4, -2
  local W = ctx:tensor({ 2, 3 }, { persistent = true })
  -- row 0: 0.1·1 + 0.2·4 + 0.1·(−2) = 0.7; row 1: 0.5·1 + 0.5·4 + 3·(−2) = −3.5 (the spike)
  W.data[0], W.data[1], W.data[2], W.data[3], W.data[4], W.data[5] = 0.1, 0.2, 0.1, 0.5, 0.5, 3
  local y = ctx:tensor({ 1, 1, 2 }, { persistent = true })
  y.data[0], y.data[1] = 0.7, -3.5
  local d = sw.Detector{ weight = function() return W end }
  local ids = ctx:tensor({ 1, 1 }, { dtype = "i32", persistent = true })
  ids.idata[0] = 42
  d:probe_x(x, 3)
  d:probe_y(y, 3, { ids = ids })
  local c = d:candidates(1)[1]
  -- the products of row 1: 0.5, 2, −6: column 2 writes −6 of the −3.5 (share 6/3.5); the
  -- largest |x| is column 1 (4), so the input does not spike at the entry's column
  t.ok(c.layer == 3 and c.row == 1 and c.col == 2 and c.weight == 3 and math.abs(c.share - 6 / 3.5) < 1e-6
       and c.input_spike == false and c.x_channel == 1 and c.spike.abs == 3.5 and c.spike.token == 42 and c.spike.pos == 0,
       "detector: the spike's row, the column with the largest |x_i W_oi| and its share, by hand",
       json.encode({ c.layer, c.row, c.col, c.weight, c.share, c.input_spike, c.x_channel, c.spike.abs }))
  local top = sw.largest(W, 2, 1, 2)
  t.ok(#top == 2 and top[1].row == 0 and top[1].col == 1 and top[1].value == 0.2 or
       (#top == 2 and ((top[1].row == 1 and top[1].col <= 1) and (top[2].row == 1 and top[2].col <= 1))),
       "largest: the k largest |W| entries other than the candidate", json.encode(top))
  t.ok(#top == 2 and math.abs(top[1].abs - 0.5) < 1e-7 and math.abs(top[2].abs - 0.5) < 1e-7, "largest: 0.5 and 0.5 (the 3 left out)", json.encode(top))
end

-- ---------------------------------------------------------------- the planted super weight
local spec = recipes.llama_lm_spec(recipes.LLAMA_LM_PROFILES.quick)
spec.train.steps = 300
local LAYER, ROW, COL, C0 = 0, 5, 7, 3
local sdir = root .. "/cache/models/planted00000000"
do
  local ctx = ol.Context{ seed = spec.seed }
  local m = models.build(ctx, models.spec_cfg(spec))
  local W = {}
  for _, p in ipairs(ctx:params()) do W[ffi.string(p.name)] = p end
  local C, F = m.cfg.d_model, m.cfg.d_ff
  local pre = "layers" .. LAYER .. ".mlp."
  -- the input spike at <bos> (id 1): its embedding large in channel C0, which the gate and up
  -- rows of channel COL read; then the ONE planted weight W_down[ROW, COL]
  W["embed_tokens.weight"].data[1 * C + C0] = 4
  W[pre .. "gate_proj.weight"].data[COL * C + C0] = 2
  W[pre .. "up_proj.weight"].data[COL * C + C0] = 2
  W[pre .. "down_proj.weight"].data[ROW * F + COL] = 20
  local corpus = batcher.corpus(spec.data)
  local tr = batcher.batcher(corpus, { B = spec.batch.B, T = spec.batch.T, kind = "lm", seed = spec.seed, shard = true })
  local tcfg = {}
  for k, v in pairs(spec.train) do tcfg[k] = v end
  tcfg.progress = "off"
  train.run{ ctx = ctx, model = m, loader = tr, cfg = tcfg }
  fs.mkdir_p(sdir)
  checkpoint.save(sdir .. "/model.safetensors", ctx, {})
  fs.write_atomic(sdir .. "/spec.json", json.encode({ spec = spec }) .. "\n")
end
local out, ok = report(sdir, "--batches=4")
local rd = root .. "/results/report/cache-planted00000000/"
local nc = rd .. "report.nc"
t.ok(ok and t.slurp(nc) and t.slurp(rd .. "summary.md") and t.slurp(rd .. "index.html"), "the report runs on a model of the cache (its held-out data, no TEXT)", out)
local L, Rw, Cl = nc_values(nc, "sw_layer"), nc_values(nc, "sw_row"), nc_values(nc, "sw_col")
t.ok(L[1] == LAYER and Rw[1] == ROW and Cl[1] == COL, string.format("the first candidate is the planted entry: layer %d, down_proj.weight[%d, %d]", LAYER, ROW, COL),
     json.encode({ L, Rw, Cl }))
local dl, cdl = nc_values(nc, "sw_dloss"), nc_values(nc, "sw_control_dloss")
local ma, mz, mc = nc_values(nc, "sw_massive"), nc_values(nc, "sw_massive_zeroed"), nc_values(nc, "sw_massive_control")
local sup = nc_values(nc, "sw_super")
t.diag(string.format("planted entry zeroed: Δ loss %+.4f, massive %.4g -> %.4g; control: Δ loss %+.4f, massive %.4g",
  dl[1] or 0 / 0, ma[1] or 0 / 0, mz[1] or 0 / 0, cdl[1] or 0 / 0, mc[1] or 0 / 0))
t.ok(dl[1] and dl[1] >= 0.05 and mz[1] < 0.2 * ma[1], "zeroing the planted weight costs loss (≥ 0.05 nats) and removes the massive activation (below 20 %)",
     json.encode({ dl[1], ma[1], mz[1] }))
t.ok(cdl[1] and math.abs(cdl[1]) < 0.1 * dl[1] and mc[1] > 0.9 * ma[1], "zeroing the control (10 next largest weights) costs < 10 % of that and keeps the massive activation",
     json.encode({ cdl[1], mc[1] }))
t.ok(sup[1] == 1, "the report calls the planted entry a super weight", json.encode(sup))
local md = t.slurp(rd .. "summary.md") or ""
t.ok(md:find("Super weight: yes.** layer 0 down_proj.weight[5, 7]", 1, true) and md:find("Massive activations: yes", 1, true),
     "summary.md: the verdict names the super weight and the massive activation", md:sub(1, 1500))

-- ---------------------------------------------------------------- a Hugging Face directory, a hostile text
local hdir = root .. "/tiny-llama"
do
  -- "▁<script>" in the vocabulary, built by merges from its characters
  local word, vocab, merges, id = { "▁", "<", "s", "c", "r", "i", "p", "t", ">" }, {}, {}, 256
  local acc = word[1]
  for i, ch in ipairs(word) do
    if not vocab[ch] then vocab[ch] = id id = id + 1 end
    if i > 1 then
      merges[#merges + 1] = acc .. " " .. ch
      acc = acc .. ch
      if not vocab[acc] then vocab[acc] = id id = id + 1 end
    end
  end
  t.ok(id <= 288, "the tokenizer's ids fit the model's 288 (" .. id .. ")")
  tiny_hf(hdir, "llama-quick", { tie_embeddings = false, n_kv_head = 1, vocab_size = 288 }, { vocab = vocab, merges = merges })
end
local lines = {}
for i = 1, 200 do lines[i] = "And it came to pass <script> & \"quotes\" 'too' in the " .. i .. "th year </script>." end
local textfile = root .. "/hostile.txt"
write(textfile, table.concat(lines, "\n"))
out, ok = report(hdir, "--text=" .. textfile .. " --seq_len=32 --batches=2")
local hd = root .. "/results/report/tiny-llama/"
t.ok(ok, "the report runs on a generated Hugging Face directory with --text", out)
local files = { "report.nc", "summary.md", "index.html", "massive.png", "sinks.png", "outliers.png", "superweights.png", "cost.png" }
local missing = {}
for _, f in ipairs(files) do if not t.slurp(hd .. f) then missing[#missing + 1] = f end end
t.ok(#missing == 0, "every file of the report is written", table.concat(missing, ", "))
local page = t.slurp(hd .. "index.html") or ""
-- the page's own script elements (the interactive views: data blocks, their spec, the charting
-- library, views.js); with them taken out no "<script" is left, and the token's string sits in
-- the data blocks as \u003cscript\u003e (views.script_json)
local own = page:gsub('<script type="application/json" id="olv%-[%w%-]+">.-</script>', "")
                :gsub('<script src="%.%./_assets/echarts%.min%.js"></script>', "")
                :gsub("<script>\n// views%.js .-</script>", "")
t.ok(page:find("<code> &lt;script&gt;</code>", 1, true) and not own:lower():find("<script", 1, true),
     "index.html shows the token <script> as text, and has no script element but the views' own", own:match("[^\n]*<script[^\n]*") or "")
local raw = {}
for b in page:gmatch('<script type="application/json" id="olv%-[%w%-]+">(.-)</script>') do if b:find("<", 1, true) then raw[#raw + 1] = b:sub(1, 200) end end
t.ok(page:find("\\u003cscript\\u003e") and #raw == 0, "the views' data blocks hold the token as \\u003cscript\\u003e, and no raw <", table.concat(raw, " | "))
t.ok(not page:find("https?://") and not page:find("src=\"/", 1, true) and page:find("default-src 'none'", 1, true),
     "index.html loads nothing from outside the results folder (and says so in its Content-Security-Policy)")
local srcs = {}
for sv in page:gmatch('src="([^"]*)"') do if sv:find("..", 1, true) and sv ~= "../_assets/echarts.min.js" then srcs[#srcs + 1] = sv end end
t.ok(#srcs == 0, "the only file from outside the report's folder is the charting library in ../_assets", table.concat(srcs, " "))
t.ok(t.slurp(hd .. "views/model.json") and t.slurp(hd .. "views/model.attention.json") and t.slurp(hd .. "views/model.h.nc"),
     "the views' record and its exports (CircuitsVis JSON, NetCDF) are written beside the report")
local hmd = t.slurp(hd .. "summary.md") or ""
t.ok(hmd:find("` <script>`", 1, true), "summary.md writes the token in a code span", hmd:match("[^\n]*script[^\n]*") or "")
-- xarray (Debian's python3-xarray), warnings as errors
local py = "/usr/bin/python3"
local _, have = t.sh(py .. " -c 'import xarray, netCDF4'")
if have then
  write(root .. "/check.py", [[
import sys, warnings
warnings.simplefilter("error")
import xarray as xr
ds = xr.open_dataset(sys.argv[1])
assert ds["top_abs"].dims == ("layer", "rank"), ds["top_abs"].dims
assert ds["first_key_attention"].dims == ("layer", "head")
assert ds.sizes["layer"] == 2 and ds.sizes["rank"] == 3 and ds.sizes["candidate"] == 2, dict(ds.sizes)
assert ds.attrs["Conventions"] == "CF-1.10, ACDD-1.3"
for v in ds.variables:
    assert "long_name" in ds[v].attrs and "units" in ds[v].attrs, v
print("xarray ok", float(ds["top_ratio"].max()))
]])
  local xo, xok = t.sh(py .. " " .. root .. "/check.py " .. hd .. "report.nc")
  t.ok(xok and xo:find("xarray ok", 1, true), "xarray opens report.nc without warnings, with its dims", xo)
else
  t.skip("python3-xarray not installed (make test-deps)")
end
-- the same directory streamed: the one pass gives the same numbers, the loss passes are left out
local before = {}
for _, v in ipairs({ "top_abs", "median_abs", "first_key_attention", "consistency", "sw_row", "sw_col" }) do before[v] = nc_values(hd .. "report.nc", v) end
out, ok = report(hdir, "--text=" .. textfile .. " --seq_len=32 --batches=2 --stream=yes")
local same, diffs = true, {}
for v, a in pairs(before) do
  local b = nc_values(hd .. "report.nc", v)
  for i = 1, math.max(#a, #b) do
    local x, y = a[i], b[i]
    if not ((x == false and y == false) or (x and y and math.abs(x - y) <= 1e-5 * math.max(1, math.abs(x)))) then same = false diffs[#diffs + 1] = v .. "[" .. i .. "]" end
  end
end
t.ok(ok and same and #before.top_abs == 6 and #before.first_key_attention == 4, "streamed (--stream=yes): the one-pass numbers equal the in-memory run's",
     out .. table.concat(diffs, ", "))
local smd = t.slurp(hd .. "summary.md") or ""
t.ok(smd:find("Left out (streamed model):** the loss passes", 1, true) and smd:find("Super weight: located, not tested", 1, true),
     "streamed: summary.md says what it leaves out", smd:sub(1, 1200))
local sdl = nc_values(hd .. "report.nc", "sw_dloss")
t.ok(sdl[1] == false, "streamed: the zeroing's loss change is undefined in report.nc (not measured)", json.encode(sdl))

-- the report of so-fig3's model agrees with so-fig3 (the same accumulators on the same batches)
local fo, fok = t.sh(string.format("bin/outlierlab run experiments/so-fig3.lua --profile=quick --out=%s/results --cache=%s/cache 2>&1", root, root))
local runj = t.slurp(root .. "/results/so-fig3/quick/run.json") or "{}"
local hash = (json.decode(runj).models or {})[1]
if fok and hash then
  local ro, rok = report(root .. "/cache/models/" .. hash, "--tau=10 --batches=2")
  local same = rok
  for _, v in ipairs({ "top_abs", "median_abs", "outlier_tokens" }) do
    local a, b = nc_values(root .. "/results/so-fig3/quick/so-fig3.nc", v), nc_values(root .. "/results/report/cache-" .. hash .. "/report.nc", v)
    same = same and #a > 0 and json.encode(a) == json.encode(b)
    if #a == 0 or json.encode(a) ~= json.encode(b) then t.diag(v .. ": " .. json.encode(a) .. " vs " .. json.encode(b)) end
  end
  t.ok(same, "on so-fig3's model with its τ and batches, the report's top-3, median and outlier tokens per layer are so-fig3's", ro)
else
  t.ok(false, "so-fig3 --profile=quick ran", fo)
end

-- errors name what is wrong
local eo, eok = report(root .. "/nowhere")
t.ok(not eok and eo:find("no such model", 1, true), "a missing model: a clear error", eo)
eo, eok = report(sdir, "--text=" .. textfile)
t.ok(not eok and eo:find("leave TEXT out", 1, true), "a model of the cache with TEXT: a clear error", eo)

os.execute("rm -rf " .. root)
return t.done()
