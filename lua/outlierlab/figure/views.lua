-- views — interactive views of one sequence's activations and attention, as HTML pages that open
-- as local files (docs/reference/views.md). One set of views serves make gallery and make report.
--
-- The data (a "views record", written at a run's views stage beside its NetCDF file):
--   local views = require "outlierlab.figure.views"
--   local rec = views.capture(ctx, m, corpus, spec, { key = "vanilla", label = "vanilla (softmax, AdamW)" })
--   views.save(run, rec)      -- <run.dir>/views/<key>.json, <key>.attention.json (CircuitsVis), <key>.h.nc
--   rec = views.from_arrays{ key =, tokens = {T strings}, layers = {0, 1, ..}, C =, h = {flat T·C per layer},
--                            NH =, attn = {flat NH·T·T per layer} }     -- the same from plain lists (tests)
--   rec = views.load(path)    -- a saved record
--
-- The pages (every argument's data is a record or the path of a saved one):
--   views.page{ path = "results/x/views.html", title = "...", assets = "results/_assets",
--               facts = { claim =, paper =, ours =, verdict =, source =, run = },   -- beside the views
--               links = { { "run.json", "run.json" }, ... },                        -- label, href (relative)
--               views = { views.activations{ data = rec },       -- |h|: layer × token × channel
--                         views.first_token{ data = rec },       -- the first token's state over the layers
--                         views.sink_map{ data = rec },          -- Gu et al.'s α per layer × head
--                         views.attention_grid{ data = rec },    -- every head, enlarged on click
--                         views.side_by_side{ of = "activations", data = { rec1, rec2, ... } } } }
--   views.parts{ path =, assets =, views = }  -- the same views as pieces for another page's layout
--                              (the model report's index.html): css, sections, tail, records, bytes
--   views.install_assets(dir)  -- copies the pinned ECharts (make views-assets) into dir; false without it
--
-- Everything the page shows from a record goes through views.script_json: strings made valid
-- UTF-8 and `<`, `>`, `&`, U+2028/9 written as \u escapes, so no token ends the <script> element
-- holding it; the page's script shows strings through textContent only (never as HTML).
local cjson = require "cjson"
local fs = require "outlierlab.util.fs"

local M = {}

M.FORMAT = "outlierlab.views/1"
M.SINK_EPS = 0.3          -- Gu et al.'s ε: a head is a sink when its mean attention to the first token exceeds it
M.MAX_TOKENS = 64         -- tokens kept per record (the first ones of the sequence)
M.MAX_CHANNELS = 256      -- channels kept per record: all up to this, else the ones with the largest |h|
M.INLINE_BYTES = 1500000  -- a page's records inline up to this; beyond, in data files loaded on demand
M.MAX_BATCH_TOKENS = 8192 -- capture runs one batch of at most this many tokens
M.ECHARTS = "echarts-6.1.0"
M.ASSET = "echarts.min.js"

-- ---------------------------------------------------------------- safe text
local REPLACEMENT = "\239\191\189"   -- U+FFFD

-- s as valid UTF-8: every byte that does not start a well-formed sequence (overlong forms,
-- surrogates and code points above U+10FFFF included) becomes U+FFFD
function M.utf8_clean(s)
  s = tostring(s)
  if not s:find("[\128-\255]") then return s end
  local out, i, n = {}, 1, #s
  while i <= n do
    local c = s:byte(i)
    local len, min = 0, 0
    if c < 0x80 then len = 1
    elseif c >= 0xC2 and c <= 0xDF then len, min = 2, 0x80
    elseif c >= 0xE0 and c <= 0xEF then len, min = 3, 0x800
    elseif c >= 0xF0 and c <= 0xF4 then len, min = 4, 0x10000 end
    local ok = len > 0 and i + len - 1 <= n
    if ok and len > 1 then
      local cp = c % (2 ^ (7 - len))
      for k = 1, len - 1 do
        local b = s:byte(i + k)
        if b < 0x80 or b > 0xBF then ok = false break end
        cp = cp * 64 + b % 64
      end
      if ok and (cp < min or cp > 0x10FFFF or (cp >= 0xD800 and cp <= 0xDFFF)) then ok = false end
    end
    if ok then out[#out + 1] = s:sub(i, i + len - 1) i = i + len
    else out[#out + 1] = REPLACEMENT i = i + 1 end
  end
  return table.concat(out)
end

-- text for HTML element content and quoted attributes
function M.html(s)
  return (M.utf8_clean(s or ""):gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;"):gsub('"', "&quot;"):gsub("'", "&#39;"))
end

-- a value cjson can write: strings cleaned, NaN and infinities as null, tables as arrays when
-- their keys are 1..n and as objects otherwise
local function clean(v)
  local ty = type(v)
  if ty == "string" then return M.utf8_clean(v) end
  if ty == "number" then
    if v ~= v or v == math.huge or v == -math.huge then return cjson.null end
    return v
  end
  if ty ~= "table" or v == cjson.null then return v end
  local n, array = 0, true
  for k in pairs(v) do
    if type(k) == "number" and k >= 1 and k % 1 == 0 then n = math.max(n, k) else array = false end
  end
  local out = {}
  if array then
    for i = 1, n do local x = v[i] if x == nil then out[i] = cjson.null else out[i] = clean(x) end end
  else
    for k, x in pairs(v) do out[tostring(k)] = clean(x) end
  end
  return out
end

function M.json(v) return cjson.encode(clean(v)) end

-- JSON that may stand inside <script type="application/json">: <, > and & only occur inside
-- strings in JSON text, so replacing them by their \u escapes keeps the value and leaves no
-- "</script>" or "<!--" for the HTML parser; U+2028/9 are escaped for older JavaScript parsers
function M.script_json(v)
  return (M.json(v):gsub("<", "\\u003c"):gsub(">", "\\u003e"):gsub("&", "\\u0026")
                   :gsub("\226\128\168", "\\u2028"):gsub("\226\128\169", "\\u2029"))
end

-- ---------------------------------------------------------------- records
local function r4(x) if x ~= x then return x end return tonumber(string.format("%.4g", x)) end
local function p4(x) if x ~= x then return x end return tonumber(string.format("%.4f", x)) end

local function lower_median(xs)
  local s = {}
  for i = 1, #xs do s[i] = xs[i] end
  table.sort(s)
  return s[math.floor((#s + 1) / 2)]
end

-- the first token's state in one layer: h flat T·C (0-based get(t, c))
local function first_stats(get, T, C)
  local top, top_c, others, sq, all = 0, 0, 0, 0, {}
  for c = 0, C - 1 do
    local a = math.abs(get(0, c))
    sq = sq + a * a
    if a > top then top, top_c = a, c end
    all[#all + 1] = a
  end
  for t = 1, T - 1 do
    for c = 0, C - 1 do
      local a = math.abs(get(t, c))
      if a > others then others = a end
      all[#all + 1] = a
    end
  end
  return { top1 = top, top_channel = top_c, others_top1 = others, median = lower_median(all), norm = math.sqrt(sq) }
end

-- Gu et al.'s α of every head of one layer: mean over the queries of the attention to key 0
-- (every query of a causal model sees it); A flat NH·T·T
local function alphas(get, NH, T)
  local out = {}
  for h = 0, NH - 1 do
    local s = 0
    for q = 0, T - 1 do s = s + get(h, q, 0) end
    out[h + 1] = s / T
  end
  return out
end

-- the unrounded h of a record's kept tokens over every channel, for its NetCDF file (not part
-- of the JSON record; kept while the record lives)
local FULL = setmetatable({}, { __mode = "k" })

local function need(cond, key, msg) if not cond then error("views record '" .. tostring(key) .. "': " .. msg, 3) end end

-- A record from plain lists: o.tokens (T strings, the whole sequence), o.layers (layer numbers),
-- o.C, o.h[i] (flat T·C, signed, layer o.layers[i]), optionally o.NH and o.attn[i] (flat NH·T·T),
-- o.categories (T strings), o.key, o.label, o.note, o.max_tokens, o.max_channels. o.first and
-- o.sink (per layer, as computed here) may be given when h and attn hold only the first tokens.
function M.from_arrays(o)
  local key = o.key or "model"
  need(type(key) == "string" and key:match("^[%w_%-%.]+$"), key, "key must be letters, digits, _, - or .")
  need(type(o.tokens) == "table" and #o.tokens > 0, key, "tokens must be a non-empty list of strings")
  need(type(o.layers) == "table" and #o.layers > 0, key, "layers must be a non-empty list")
  need(type(o.C) == "number" and o.C > 0, key, "C (channels) is required")
  need(type(o.h) == "table" and #o.h == #o.layers, key, "h needs one list per layer")
  local T, C = o.T or #o.tokens, o.C
  local Tk = #o.tokens                       -- tokens present in the arrays (o.T: of the whole sequence)
  local Ts = math.min(Tk, o.max_tokens or M.MAX_TOKENS)
  local L = #o.layers
  for i = 1, L do
    need(type(o.h[i]) == "table" and #o.h[i] == Tk * C, key,
         string.format("h of layer %s has %d values, not tokens × C = %d × %d", tostring(o.layers[i]), type(o.h[i]) == "table" and #o.h[i] or 0, Tk, C))
  end
  local NH = o.NH
  if o.attn then
    need(type(NH) == "number" and NH > 0, key, "NH (heads) is required with attn")
    for i = 1, L do
      need(type(o.attn[i]) == "table" and #o.attn[i] == NH * Tk * Tk, key,
           string.format("attn of layer %s has %d values, not NH × T × T = %d × %d × %d", tostring(o.layers[i]), type(o.attn[i]) == "table" and #o.attn[i] or 0, NH, Tk, Tk))
    end
  end
  local rec = { format = M.FORMAT, key = key, label = o.label or key, note = o.note, model = o.model,
                n_tokens = T, tokens = {}, categories = {}, layers = {}, n_channels = C, channels = {},
                first = { top1 = {}, top_channel = {}, others_top1 = {}, median = {}, norm = {} }, h = {} }
  for t = 1, Ts do
    rec.tokens[t] = tostring(o.tokens[t])
    rec.categories[t] = o.categories and o.categories[t] or nil
  end
  if not o.categories then rec.categories = nil end
  -- the first token's state and the sink α from the whole arrays (or as given)
  for i = 1, L do
    rec.layers[i] = o.layers[i]
    local hi = o.h[i]
    local f = o.first and o.first[i] or first_stats(function(t, c) return hi[t * C + c + 1] end, Tk, C)
    for _, k in ipairs({ "top1", "others_top1", "median", "norm" }) do rec.first[k][i] = r4(f[k]) end
    rec.first.top_channel[i] = f.top_channel
  end
  -- channels: all, or the max_channels with the largest |h| over the shown tokens and layers
  local maxc = o.max_channels or M.MAX_CHANNELS
  local chans = {}
  if C <= maxc then
    for c = 0, C - 1 do chans[#chans + 1] = c end
  else
    local peak = {}
    for c = 0, C - 1 do peak[c + 1] = { c = c, v = 0 } end
    for i = 1, L do
      local hi = o.h[i]
      for t = 0, Ts - 1 do
        for c = 0, C - 1 do
          local a = math.abs(hi[t * C + c + 1])
          if a > peak[c + 1].v then peak[c + 1].v = a end
        end
      end
    end
    table.sort(peak, function(a, b) if a.v ~= b.v then return a.v > b.v end return a.c < b.c end)
    for k = 1, maxc do chans[k] = peak[k].c end
    table.sort(chans)
  end
  rec.channels = chans
  FULL[rec] = { h = o.h, C = C, Ts = Ts }
  for i = 1, L do
    local hi, rows = o.h[i], {}
    for t = 0, Ts - 1 do
      local row = {}
      for k, c in ipairs(chans) do row[k] = r4(hi[t * C + c + 1]) end
      rows[t + 1] = row
    end
    rec.h[i] = rows
  end
  if o.attn then
    rec.n_heads, rec.sink_eps, rec.attn, rec.sink = NH, M.SINK_EPS, {}, {}
    for i = 1, L do
      local ai = o.attn[i]
      local s = o.sink and o.sink[i] or alphas(function(h, q, k) return ai[(h * Tk + q) * Tk + k + 1] end, NH, Tk)
      local heads = {}
      for h = 0, NH - 1 do
        local rows = {}
        for q = 0, Ts - 1 do
          local row = {}
          for k = 0, Ts - 1 do row[k + 1] = p4(ai[(h * Tk + q) * Tk + k + 1]) end
          rows[q + 1] = row
        end
        heads[h + 1] = rows
        s[h + 1] = r4(s[h + 1])
      end
      rec.attn[i], rec.sink[i] = heads, s
    end
  end
  return rec
end

-- A recorder of sequence o.row (default 0) of the first batch through a probe set: the layer
-- outputs h and the attention probabilities of its first o.max_tokens tokens; the first token's
-- state and the sink α over the whole sequence. Only the kept part is copied out of the probes,
-- so long sequences stay cheap. R.attach(P) on a probe set with the points h and attn_probs (a
-- pass that measures other things too, e.g. the model report's); R.record() after the pass.
function M.recorder(corpus, o)
  o = o or {}
  local B = require "outlierlab.measure.batches"
  local row, maxt = o.row or 0, o.max_tokens or M.MAX_TOKENS
  local a = { tokens = {}, categories = {}, layers = {}, h = {}, attn = {}, first = {}, sink = {}, byl = {} }
  local function slot(l)
    if not a.byl[l] then a.byl[l] = {} end
    return a.byl[l]
  end
  local R = {}
  function R.attach(P)
    P:attach("h", function(t, l, batch)
      local T, C = t:size(1), t:size(2)
      local s = slot(l)
      if s.h then return end          -- the first batch only
      if #a.tokens == 0 then
        a.T = T
        for i = 0, T - 1 do
          local id = batch.ids.idata[row * T + i]
          a.tokens[i + 1] = B.token_label(corpus, id)
          a.categories[i + 1] = corpus.category and corpus.category(id) or nil
        end
      end
      a.C = C
      local base, Ts = row * T * C, math.min(T, maxt)
      local d = t.data
      s.first = first_stats(function(q, c) return d[base + q * C + c] end, T, C)
      local h = {}
      for i = 0, Ts * C - 1 do h[i + 1] = d[base + i] end
      s.h = h
    end)
    P:attach("attn_probs", function(t, l)
      local NH, T = t:size(1), t:size(2)
      local base, Ts, s = row * NH * T * T, math.min(T, maxt), slot(l)
      if s.attn then return end
      local d = t.data
      a.NH = NH
      s.sink = alphas(function(h, q, k) return d[base + (h * T + q) * T + k] end, NH, T)
      local A = {}
      for h = 0, NH - 1 do
        for q = 0, Ts - 1 do
          for k = 0, Ts - 1 do A[#A + 1] = d[base + (h * T + q) * T + k] end
        end
      end
      s.attn = A
    end)
  end
  function R.record()
    local ls = {}
    for l in pairs(a.byl) do ls[#ls + 1] = l end
    table.sort(ls)
    local with_attn = true
    for i, l in ipairs(ls) do
      local s = a.byl[l]
      if not s.h then error("views.capture: no layer output h at layer " .. l .. " (the model reports none)", 2) end
      a.layers[i], a.h[i], a.first[i] = l, s.h, s.first
      if s.attn then a.attn[i], a.sink[i] = s.attn, s.sink else with_attn = false end
    end
    if #ls == 0 then error("views.capture: the model reported no layer output h", 2) end
    local Ts = math.min(a.T, maxt)
    local tokens, cats = {}, {}
    for t = 1, Ts do tokens[t], cats[t] = a.tokens[t], a.categories[t] end
    return M.from_arrays{ key = o.key, label = o.label, note = o.note, model = o.model, T = a.T,
                          tokens = tokens, categories = #cats > 0 and cats or nil, layers = a.layers, C = a.C,
                          h = a.h, first = a.first, NH = with_attn and a.NH or nil, attn = with_attn and a.attn or nil,
                          sink = with_attn and a.sink or nil, max_tokens = maxt, max_channels = o.max_channels }
  end
  return R
end

-- Run the first held-out batch through a loaded model (the batches every analysis of the run
-- sees) and make a record of its sequence o.row (M.recorder)
function M.capture(ctx, m, corpus, spec, o)
  local probes = require "outlierlab.measure.probes"
  local B = require "outlierlab.measure.batches"
  local R = M.recorder(corpus, o)
  local P = probes.new{ points = { "h", "attn_probs" } }
  R.attach(P)
  -- one batch of at most MAX_BATCH_TOKENS tokens: the attention probabilities of a paper-sized
  -- batch (480 × 1024 tokens, 12 heads) would not fit in memory; the default profiles' batches
  -- (32 × 64) are taken whole, so the sequence is the one every analysis of the run sees first
  local bs = spec.batch
  local EB = bs and (bs.eval_B or bs.B)
  if EB and bs.T and EB * bs.T > M.MAX_BATCH_TOKENS then
    local s2 = {}
    for k, v in pairs(spec) do s2[k] = v end
    s2.batch = {}
    for k, v in pairs(bs) do s2.batch[k] = v end
    s2.batch.B = math.max(1, math.floor(M.MAX_BATCH_TOKENS / bs.T))
    s2.batch.eval_B = nil
    spec = s2
  end
  B.probe_batches(ctx, m, P, corpus, spec, 1)
  return R.record()
end

-- ---------------------------------------------------------------- files
-- attention in CircuitsVis's layout: per layer [heads][dest][src], with the token strings
-- (circuitsvis.attention.attention_heads(tokens=d["tokens"], attention=d["attention"][layer]))
function M.circuitsvis(rec)
  if not rec.attn then return nil end
  return { format = "circuitsvis.attention_heads", key = rec.key, label = rec.label, tokens = rec.tokens,
           layers = rec.layers, attention = rec.attn }
end

-- the record's h as a CF NetCDF file (layer × token × channel; the token strings as the labels
-- of the categorical token dim): unrounded over every channel when the record was made here,
-- else the record's values on its kept channels
function M.write_netcdf(path, rec, meta)
  local figure = require "outlierlab.figure"
  local fig = figure.declare{
    title = "Layer outputs h of one held-out sequence (" .. rec.label .. ")",
    dims = { { "layer", long_name = "transformer layer (0-based)" },
             { "token", long_name = "position in the sequence, labelled with its token", labels = true },
             { "channel", long_name = "hidden dimension (0-based)" } },
    vars = { { "h", dims = { "layer", "token", "channel" }, long_name = "layer output h (the first tokens of the sequence)", units = "1", type = "float" } },
  }
  local labels = {}
  for t, s in ipairs(rec.tokens) do labels[t] = M.utf8_clean(s) end
  local full, h, chans = FULL[rec], rec.h, rec.channels
  if full then
    h, chans = {}, full.C
    for i = 1, #rec.layers do
      local src, dst = full.h[i], {}
      for k = 1, full.Ts * full.C do dst[k] = src[k] end
      h[i] = dst
    end
  end
  return figure.write_netcdf(path, fig, { coords = { layer = rec.layers, token = labels, channel = chans },
                                          vars = { h = h } }, meta)
end

-- write <dir>/views/<key>.json, <key>.attention.json and <key>.h.nc; run = a runner's run (its
-- files list gets them) or a directory; returns the paths
function M.save(run, rec)
  local dir = type(run) == "table" and run.dir or run
  if require("outlierlab.util.dist").world_rank() ~= 0 then return {} end
  fs.mkdir_p(dir .. "/views", "views.save")
  local base = dir .. "/views/" .. rec.key
  local out = { base .. ".json" }
  fs.write_atomic(base .. ".json", M.json(rec) .. "\n")
  local cv = M.circuitsvis(rec)
  if cv then
    fs.write_atomic(base .. ".attention.json", M.json(cv) .. "\n")
    out[#out + 1] = base .. ".attention.json"
  end
  local meta = type(run) == "table" and run.meta and run:meta() or nil
  if meta then meta.title = "Layer outputs h of one held-out sequence (" .. M.utf8_clean(rec.label) .. ")" end
  M.write_netcdf(base .. ".h.nc", rec, meta)
  out[#out + 1] = base .. ".h.nc"
  if type(run) == "table" and run.files then
    for _, f in ipairs(out) do run.files[#run.files + 1] = f end
  end
  return out
end

-- a model's name from its spec: the preset and what differs from the default recipe
local function spec_label(spec)
  local m = spec.model or {}
  local ov, parts = m.overrides or {}, {}
  local att = ov.attention
  if type(att) == "table" then att = att.kind .. (att.form and (" " .. att.form) or "") end
  if att then parts[#parts + 1] = tostring(att) end
  if ov.optimizer or (spec.train and spec.train.optimizer) then parts[#parts + 1] = tostring(ov.optimizer or spec.train.optimizer) end
  return tostring(m.preset or "model") .. (#parts > 0 and (" (" .. table.concat(parts, ", ") .. ")") or "")
end

-- The views stage of an experiment: a record of every model the train stage returned, each on
-- the first held-out sequence of its data (the same text for models that share a data spec).
--   { "views", views.stage{ spec = model_spec } }        -- run.out.train is one model's handle
--   { "views", views.stage{ key = function(it) return it.key end, label = ..., keep = ... } }
--                                                         -- run.out.train is a list of {spec =, handle =, ...}
-- o.keep(it, run) picks the items (e.g. the first seed); o.max_tokens, o.max_channels as capture.
function M.stage(o)
  o = o or {}
  return function(run)
    local recipes = require "outlierlab.recipes"
    local batcher = require "outlierlab.data.batcher"
    local tr, items = run.out[o.from or "train"], {}
    if o.spec then
      items[1] = { spec = o.spec(run.cfg), handle = tr }
    else
      for _, it in ipairs(tr or {}) do
        if not o.keep or o.keep(it, run) then items[#items + 1] = it end
      end
    end
    local keys = {}
    for i, it in ipairs(items) do
      local ctx, m = recipes.load(it.spec, it.handle)
      local key = o.key and tostring(o.key(it)) or (#items > 1 and ("model" .. i) or "model")
      if keys[key] then error("views.stage: two models with the key '" .. key .. "'", 0) end
      keys[key] = true
      local label = o.label and o.label(it) or (run.pretrained and run.pretrained:label()) or spec_label(it.spec)
      M.save(run, M.capture(ctx, m, batcher.corpus(it.spec.data, run), it.spec,
                            { key = key, label = label, max_tokens = o.max_tokens, max_channels = o.max_channels }))
    end
    return { records = #items }
  end
end

function M.load(path)
  local text = fs.read_file(path)
  if not text then error("views.load: cannot read " .. tostring(path), 2) end
  local ok, rec = pcall(cjson.decode, text)
  if not ok or type(rec) ~= "table" or rec.format ~= M.FORMAT then
    error("views.load: " .. path .. " is not a views record (format " .. M.FORMAT .. ")", 2)
  end
  return rec
end

-- the saved records of a run directory (views/<key>.json), sorted by the order the run wrote them
-- (run.json's files list) or by name
function M.records_in(dir, files)
  local paths = {}
  if files then
    for _, f in ipairs(files) do
      if f:match("^views/[^/]+%.json$") and not f:match("%.attention%.json$") then paths[#paths + 1] = dir .. "/" .. f end
    end
  else
    for _, f in ipairs(fs.list_dir(dir .. "/views") or {}) do
      if f:match("%.json$") and not f:match("%.attention%.json$") then paths[#paths + 1] = dir .. "/views/" .. f end
    end
    table.sort(paths)
  end
  local out = {}
  for _, p in ipairs(paths) do
    local ok, rec = pcall(M.load, p)
    if ok then out[#out + 1] = rec end
  end
  return out
end

-- ---------------------------------------------------------------- pages
local function view(kind)
  return function(o)
    if type(o) ~= "table" or o.data == nil then error("views." .. kind .. ": data (a record or its path) is required", 2) end
    return { kind = kind, data = o.data, title = o.title, note = o.note, of = o.of, show = o.show }
  end
end
M.activations = view("activations")
M.first_token = view("first_token")
M.sink_map = view("sink_map")
M.attention_grid = view("attention_grid")
M.side_by_side = view("side_by_side")

local KINDS = { activations = true, first_token = true, sink_map = true, attention_grid = true }

-- the root of the source tree (plots/views.js, build/npm/...)
local function root() return require("outlierlab").root end

function M.asset_source() return root() .. "/build/npm/" .. M.ECHARTS .. "/package" end

-- copy the charting library and its licence into dir; false (and why) when make views-assets has not run
function M.install_assets(dir)
  local src = M.asset_source()
  local js = fs.read_file(src .. "/dist/" .. M.ASSET)
  if not js then return false, "no " .. src .. "/dist/" .. M.ASSET .. " (make views-assets)" end
  fs.mkdir_p(dir, "views.install_assets")
  if fs.read_file(dir .. "/" .. M.ASSET) ~= js then fs.write_atomic(dir .. "/" .. M.ASSET, js) end
  local lic = (fs.read_file(src .. "/LICENSE") or "") .. "\n" .. (fs.read_file(src .. "/NOTICE") or "") ..
              "\n--- licenses/LICENSE-d3\n" .. (fs.read_file(src .. "/licenses/LICENSE-d3") or "")
  fs.write_atomic(dir .. "/" .. M.ECHARTS .. ".LICENSE.txt", lic)
  return true
end

-- the relative path from directory `from` to path `to` (both relative to the same folder or both absolute)
function M.relative(from, to)
  local function parts(p)
    local t = {}
    for s in p:gmatch("[^/]+") do if s ~= "." then t[#t + 1] = s end end
    return t
  end
  local a, b = parts(from), parts(to)
  local i = 1
  while i <= #a and i <= #b and a[i] == b[i] do i = i + 1 end
  local out = {}
  for _ = i, #a do out[#out + 1] = ".." end
  for k = i, #b do out[#out + 1] = b[k] end
  return table.concat(out, "/")
end

local function href(s) return (s:gsub("[^%w%-_%./~#]", function(c) return string.format("%%%02X", c:byte()) end)) end

local VERDICT_CLASS = { holds = "holds", ["does not hold"] = "fails" }

-- the Content-Security-Policy of a page of views: nothing from the network, scripts only from
-- the page and local files; img adds sources for images (the report's PNG figures: "'self' file:")
function M.csp(img)
  return [[<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'self' 'unsafe-inline' file:; style-src 'unsafe-inline'; img-src ]] ..
         (img and (img .. " ") or "") .. [[data: blob:">]]
end

-- The pieces of views that any page embeds (views.page here, the model report's index.html):
--   o.path (the page's path: data files go beside it), o.views, o.assets, o.inline_bytes
-- returns { css = the stylesheet's text, sections = { '<section ...>' per view, in order },
--           tail = the data blocks, the library and the script (after the sections, before
--           </body>), labels = { record labels in order }, records = the records, bytes = data-file bytes }
function M.parts(o)
  if type(o) ~= "table" or type(o.path) ~= "string" then error("views.page: path is required", 2) end
  if type(o.views) ~= "table" or #o.views == 0 then error("views.page: views (a non-empty list) is required", 2) end
  local dir = o.path:match("^(.*)/[^/]+$") or "."
  -- one data block per record, shared by the views that show it
  local recs, ids, texts = {}, {}, {}
  local function ref(d)
    local rec = type(d) == "string" and M.load(d) or d
    if type(rec) ~= "table" or not rec.h then error("views.page: a view's data is not a views record", 3) end
    if not ids[rec] then
      recs[#recs + 1] = rec
      ids[rec] = "olv-rec-" .. #recs
      texts[#recs] = M.script_json(rec)
    end
    return ids[rec]
  end
  local specs = {}
  for i, v in ipairs(o.views) do
    local s = { kind = v.kind, title = v.title, note = v.note, id = "olv-view-" .. i, show = v.show }
    if v.kind == "side_by_side" then
      if not KINDS[v.of or "activations"] then error("views.page: side_by_side of an unknown view '" .. tostring(v.of) .. "'", 2) end
      s.of = v.of or "activations"
      s.data = {}
      if type(v.data) ~= "table" or v.data.h then error("views.page: side_by_side needs a list of records", 2) end
      for k, d in ipairs(v.data) do s.data[k] = ref(d) end
    elseif KINDS[v.kind] then
      s.data = { ref(v.data) }
    else
      error("views.page: unknown view kind '" .. tostring(v.kind) .. "'", 2)
    end
    specs[i] = s
  end
  -- the records inline while they are small; else each in a data file beside the page that the
  -- page loads when a view needs it (a side-by-side view loads only the models it shows)
  local total, blocks, files, labels = 0, {}, {}, {}
  for _, t in ipairs(texts) do total = total + #t end
  local stem = o.path:match("([^/]+)$"):gsub("%.html?$", "")
  local inline = total <= (o.inline_bytes or M.INLINE_BYTES)
  for i, rec in ipairs(recs) do
    local id = ids[rec]
    labels[id] = rec.label
    if inline then
      blocks[#blocks + 1] = '<script type="application/json" id="' .. id .. '">' .. texts[i] .. '</script>'
    else
      local rel = stem .. "-data/" .. id .. ".js"
      fs.mkdir_p(dir .. "/" .. stem .. "-data", "views.page")
      fs.write_atomic(dir .. "/" .. rel, 'OLV_DATA("' .. id .. '", ' .. texts[i] .. ');\n')
      files[id] = rel
    end
  end
  local assets = o.assets and M.relative(dir, o.assets) or nil
  local css = fs.read_file(root() .. "/plots/views.css") or ""
  local js = fs.read_file(root() .. "/plots/views.js")
  if not js then error("views.page: cannot read " .. root() .. "/plots/views.js", 2) end
  local sections, tail = {}, { '<div id="olv-status" class="olv-status"></div>' }
  for i, s in ipairs(specs) do sections[i] = '<section class="olv-view" id="' .. s.id .. '"></section>' end
  for _, b in ipairs(blocks) do tail[#tail + 1] = b end
  tail[#tail + 1] = '<script type="application/json" id="olv-spec">' .. M.script_json({ views = specs, assets = assets or cjson.null,
    asset = M.ASSET, library = M.ECHARTS, labels = labels, files = next(files) and files or cjson.null }) .. '</script>'
  -- the library only when it is there (a missing file would be a failed load in the console);
  -- without it the page draws plain heat maps and says how to install it
  local lib = assets and io.open(o.assets .. "/" .. M.ASSET, "rb")
  if lib then lib:close() end
  if lib then tail[#tail + 1] = '<script src="' .. href(assets .. "/" .. M.ASSET) .. '"></script>' end
  tail[#tail + 1] = '<script>\n' .. js .. '\n</script>'
  return { css = css, sections = sections, tail = table.concat(tail, "\n"), records = recs, bytes = inline and 0 or total }
end

-- write an HTML page of views; returns its path, its size in bytes and the bytes of its data files
function M.page(o)
  local p = M.parts(o)
  local dir = o.path:match("^(.*)/[^/]+$") or "."
  local f = o.facts or {}
  local h = {}
  local function H(s) h[#h + 1] = s end
  H('<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">')
  H('<meta name="viewport" content="width=device-width, initial-scale=1">')
  H(M.csp())
  H('<title>' .. M.html(o.title or "outlierlab views") .. '</title>')
  H('<style>\n' .. p.css .. '</style>')
  H('</head>\n<body>')
  H('<header><h1>' .. M.html(o.title or "outlierlab views") .. '</h1>')
  if o.subtitle then H('<p class="lead">' .. M.html(o.subtitle) .. '</p>') end
  H('</header>\n<div class="olv-layout">\n<aside class="olv-facts"><dl>')
  if f.claim then H('<dt>Claim' .. (f.source and (", " .. M.html(f.source)) or "") .. '</dt><dd>' .. M.html(f.claim) .. '</dd>') end
  if f.paper then H('<dt>Paper</dt><dd>' .. M.html(f.paper) .. '</dd>') end
  if f.ours then H('<dt>Ours</dt><dd>' .. M.html(f.ours) .. '</dd>') end
  if f.verdict then
    H('<dt>Verdict</dt><dd><span class="verdict ' .. (VERDICT_CLASS[f.verdict] or "open") .. '">' .. M.html(f.verdict) .. '</span></dd>')
  end
  if f.run then H('<dt>Run</dt><dd>' .. M.html(f.run) .. '</dd>') end
  local ls = {}
  for _, l in ipairs(o.links or {}) do ls[#ls + 1] = '<a href="' .. href(l[2]) .. '">' .. M.html(l[1]) .. '</a>' end
  if #ls > 0 then H('<dt>Files</dt><dd class="links">' .. table.concat(ls, " ") .. '</dd>') end
  local models = {}
  for _, r in ipairs(p.records) do models[#models + 1] = M.html(r.label) .. (r.note and (' <small>(' .. M.html(r.note) .. ')</small>') or "") end
  H('<dt>Models</dt><dd>' .. table.concat(models, "<br>") .. '</dd>')
  H('</dl></aside>\n<main class="olv-views">')
  for _, s in ipairs(p.sections) do H(s) end
  H('</main>\n</div>')
  H(p.tail)
  H('</body>\n</html>\n')
  local text = table.concat(h, "\n")
  fs.mkdir_p(dir, "views.page")
  fs.write_atomic(o.path, text)
  return o.path, #text, p.bytes
end

-- the views a record supports, in the order a page shows them
function M.default_views(rec)
  local out = { M.activations{ data = rec }, M.first_token{ data = rec } }
  if rec.attn then
    out[#out + 1] = M.sink_map{ data = rec }
    out[#out + 1] = M.attention_grid{ data = rec }
  end
  return out
end

-- the views of several records of one run: each model's views when there is one, else the
-- models side by side (activations, the first token, the sink map and the heads)
function M.run_views(recs)
  if #recs == 1 then return M.default_views(recs[1]) end
  local out = {}
  for _, of in ipairs({ "activations", "first_token", "sink_map", "attention_grid" }) do
    if of == "activations" or of == "first_token" or recs[1].attn then out[#out + 1] = M.side_by_side{ of = of, data = recs } end
  end
  return out
end

return M
