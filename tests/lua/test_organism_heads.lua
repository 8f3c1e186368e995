-- test_organism_heads — scripts/organism-heads.lua on hand-made model directories of the quick
-- LLaMA organism (2 layers × 2 heads):
--   * every head's α (Gu et al.'s mean attention on the first key) is what the test computes
--     itself from the attention probabilities of the same held-out batch;
--   * the split of the sink heads by the state they read: untouched, no layer's input is massive;
--     with planted sinks in both layers and a massive `<bos>` embedding (below), layer 1's input
--     ratio is ≥ 100 and exactly layer 1's sink heads form the massive group, with the mean of
--     their printed value ratios, and layer 0's the plain group;
--   * errors name the flag or the file: no --model, no spec.json, a spec without a language-model
--     batch, --batches=0.
local t = require "tap"
local ol = require "outlierlab"
local fs = require "outlierlab.util.fs"
local json = require "outlierlab.util.json"
local recipes = require "outlierlab.recipes"
local batcher = require "outlierlab.data.batcher"
local probes = require "outlierlab.measure.probes"
local model_dir = dofile(ol.root .. "/tests/lua/lib/model_dir.lua")

local spec = recipes.llama_lm_spec(recipes.LLAMA_LM_PROFILES.quick)
local root = os.tmpname()
os.remove(root)

local function run(args)
  return io.popen("cd " .. OUTLIERLAB_ROOT .. " && bin/outlierlab run scripts/organism-heads.lua " .. args .. " 2>&1"):read("*a")
end

-- the script's per-head lines: heads[l][h] = { alpha, value, sink }; the layers' input ratios
local function parse(out)
  local heads, input, l = {}, {}, nil
  for ln in out:gmatch("[^\n]+") do
    local ll, rest = ln:match("^layer (%d+): first token's top%-1/median |h| in the input (.*)$")
    if ll then
      l = tonumber(ll)
      heads[l], input[l] = {}, tonumber(rest:match("^([%d%.]+)"))
    end
    local h, a, v = ln:match("^  head (%d+): α ([%d%.]+), share [%d%.—]+, value ratio ([%d%.—]+)")
    if h and l then heads[l][tonumber(h)] = { alpha = tonumber(a), value = tonumber(v), sink = ln:find("(sink)", 1, true) ~= nil } end
  end
  return heads, input
end
local function group(out, name)
  local n, mean = out:match(name .. "[^\n]-: (%d+) sink head%(s%), mean value ratio ([%d%.—]+)")
  return tonumber(n), tonumber(mean)
end

-- α computed here from the attention probabilities of the first held-out batch
local function alphas(dir)
  local ctx, m = recipes.load(spec, { ckpt = dir .. "/model.safetensors" })
  local va = batcher.batcher(batcher.corpus(spec.data), { B = math.min(16, spec.batch.B), T = spec.batch.T, kind = "lm",
                                                          seed = spec.seed + 1, split = "val" })
  local sum, cnt = {}, {}
  ctx:no_grad(function()
    local P = probes.new{}
    P:attach("attn_probs", function(A, l)
      local B, NH, Tq, Tk = A:size(0), A:size(1), A:size(2), A:size(3)
      sum[l], cnt[l] = sum[l] or {}, cnt[l] or {}
      for h = 0, NH - 1 do
        local s = 0
        for b = 0, B - 1 do
          for i = 0, Tq - 1 do s = s + A.data[((b * NH + h) * Tq + i) * Tk] end
        end
        sum[l][h], cnt[l][h] = (sum[l][h] or 0) + s, (cnt[l][h] or 0) + B * Tq
      end
    end)
    ctx:reset()
    P:forward(m, va:next(ctx))
  end)
  local out = {}
  for l, H in pairs(sum) do
    out[l] = {}
    for h, s in pairs(H) do out[l][h] = s / cnt[l][h] end
  end
  return out
end

-- untouched: α as computed here, no massive input
local plain = model_dir(spec, root .. "/plain")
local out = run("--model=" .. plain .. " --batches=1")
local heads, input = parse(out)
local want = alphas(plain)
local n_heads, close = 0, true
for l, H in pairs(want) do
  for h, a in pairs(H) do
    n_heads = n_heads + 1
    local got = heads[l] and heads[l][h]
    if not (got and math.abs(got.alpha - a) <= 6e-4) then
      close = false
      t.diag(string.format("layer %d head %d: printed α %s, computed %.4f", l, h, tostring(got and got.alpha), a))
    end
  end
end
t.is(n_heads, 4, "the quick organism has 2 layers × 2 heads", out)
t.ok(close, "every head's printed α is the mean attention on the first key computed from the probabilities")
t.ok(input[0] == nil and out:find("layer 0: first token's top-1/median |h| in the input — (the embedding)", 1, true),
     "layer 0 reads the embedding", out)
t.ok(input[1] and input[1] < 100, "untouched: layer 1's input ratio is ordinary (" .. tostring(input[1]) .. ")")
local nm = group(out, "reading a massive first%-token state")
t.is(nm, 0, "untouched: no sink head reads a massive state", out)

-- planted sinks: every ordinary embedding row gets a large common direction u (dims 1..C-1),
-- <bos>'s row is 5,000 along dim 0, so every layer's normalised input is ≈ √C·u at an ordinary
-- token and ≈ √C·e0 at <bos>, and layer 0's output at <bos> is massive. In both layers the
-- queries read u and the (one, shared) key reads e0, both into the head's last dimension, which
-- belongs to RoPE's slowest pair (a rotation of at most 0.006 rad over the window): every query's
-- logit on <bos> is ≈ C/√head_dim = 11.3 above the others, so all four heads are sinks — layer
-- 0's reading the embedding, layer 1's reading a massive state.
local BOS = batcher.corpus(spec.data).special.bos
local planted = model_dir(spec, root .. "/planted", function(W, cfg)
  local C, V = cfg.d_model, cfg.vocab_size
  local hd = cfg.head_dim > 0 and cfg.head_dim or C / cfg.n_head
  local u = 1 / math.sqrt(C - 1)
  local e = W["embed_tokens.weight"]
  for id = 0, V - 1 do
    for k = 0, C - 1 do
      local i = id * C + k
      if id == BOS then e.data[i] = k == 0 and 5000 or 0 elseif k > 0 then e.data[i] = e.data[i] + 5 * u end
    end
  end
  for l = 0, cfg.n_layer - 1 do
    local q, kk = W["layers" .. l .. ".attn.q_proj.weight"], W["layers" .. l .. ".attn.k_proj.weight"]
    for h = 0, cfg.n_head - 1 do
      local row = (h * hd + hd - 1) * C
      for k = 0, C - 1 do q.data[row + k] = k > 0 and u or 0 end
    end
    for g = 0, (cfg.n_kv_head > 0 and cfg.n_kv_head or cfg.n_head) - 1 do
      local row = (g * hd + hd - 1) * C
      for k = 0, C - 1 do kk.data[row + k] = k == 0 and 1 or 0 end
    end
  end
end)
out = run("--model=" .. planted .. " --batches=1")
heads, input = parse(out)
t.ok(input[1] and input[1] >= 100, "planted: layer 1's input ratio is massive (" .. tostring(input[1]) .. ")", out)
local n1, s1, n0 = 0, 0, 0
for _, e in pairs(heads[1] or {}) do if e.sink then n1, s1 = n1 + 1, s1 + e.value end end
for _, e in pairs(heads[0] or {}) do if e.sink then n0 = n0 + 1 end end
t.ok(n0 == 2 and n1 == 2, string.format("planted: all four heads are sinks (layer 0: %d, layer 1: %d)", n0, n1), out)
local gm, gmean = group(out, "reading a massive first%-token state")
local gp = group(out, "reading the embedding or a plain state")
t.is(gm, n1, "planted: the massive group is layer 1's sink heads")
t.is(gp, n0, "planted: the plain group is layer 0's sink heads")
t.ok(n1 > 0 and gmean and math.abs(gmean - s1 / n1) <= 1e-3,
     string.format("planted: the massive group's mean value %s is its heads' mean %.4f", tostring(gmean), s1 / math.max(n1, 1)))

-- errors: name the flag or the file
t.ok(run(""):find("--model=DIR", 1, true), "no --model: the error names the flag")
t.ok(run("--model=" .. root .. "/none"):find(root .. "/none/spec.json", 1, true), "no spec.json: the error names the file")
local bad = root .. "/vit"
fs.mkdir_p(bad)
fs.write_atomic(bad .. "/spec.json", json.encode({ spec = { batch = { kind = "image" } } }) .. "\n")
t.ok(run("--model=" .. bad):find("not a language model's spec", 1, true), "an image spec: refused, naming why")
t.ok(run("--model=" .. plain .. " --batches=0"):find("--batches must be a positive integer", 1, true), "--batches=0: refused")

os.execute("rm -rf '" .. root .. "'")
t.done()
