-- test_hf_families — model families imported through the LLaMA mapping, each checked against an
-- independent reference forward written here in plain Lua from the published architecture
-- (transformers' modeling_mistral.py / modeling_llama.py), reading the safetensors files
-- itself (header JSON, F32/BF16 bytes) and computing in double precision, not with the
-- engine's ops:
--   mistral  MistralForCausalLM: LLaMA's block (RMSNorm, RoPE rotate-half, GQA, SwiGLU) with a
--            sliding window; config.json sliding_window bounds the sequence length (the
--            window is the identity for T <= sliding_window, so nothing else is needed).
--   llama3   LLaMA-3-8B's config shape: rope_theta 5e5, GQA, untied head, rope_scaling null.
--   phi3     Phi3ForCausalLM (modeling_phi3.py, Phi-3-mini-4k): LLaMA's block with q, k, v fused
--            in qkv_proj (rows q | k | v) and gate, up in gate_up_proj (rows gate | up, chunked
--            in two: up · silu(gate)); sliding_window as Mistral's. The test writes these files
--            itself (fusing the tensors of an exported LLaMA), and the reference slices the
--            fused projections' outputs, as modeling_phi3.py does.
-- Each: one file and shards, F32 and BF16; logits and every layer's output h equal the
-- reference to fp32 rounding; so-fig1 and so-fig3 run end to end on the Mistral directory.
local t = require "outlierlab.tap"
local ol = require "outlierlab"
local ffi = require "ffi"
local hf = require "outlierlab.pretrained.hf"
local json = require "outlierlab.util.json"
local models = require "outlierlab.models"

local root = os.tmpname()
os.remove(root)
os.execute("mkdir -p " .. root)
local function write(path, s) local f = assert(io.open(path, "wb")) f:write(s) f:close() end
local function read(path) local f = assert(io.open(path, "rb")) local s = f:read("*a") f:close() return s end

-- ---------------------------------------------------------------- reading the files (plain Lua)
local function bf16(u) local b = ffi.new("uint32_t[1]", u * 65536) return ffi.cast("float *", b)[0] end
local function load_dir(dir)
  local W = {}
  local files = {}
  if io.open(dir .. "/model.safetensors", "rb") then files = { "model.safetensors" }
  else
    local seen = {}
    for _, f in pairs(json.decode(read(dir .. "/model.safetensors.index.json")).weight_map) do
      if not seen[f] then seen[f] = true files[#files + 1] = f end
    end
  end
  for _, f in ipairs(files) do
    local s = read(dir .. "/" .. f)
    local n = 0
    for i = 8, 1, -1 do n = n * 256 + s:byte(i) end
    local hdr = json.decode(s:sub(9, 8 + n))
    local base = ffi.cast("const uint8_t *", s) + 8 + n
    for name, e in pairs(hdr) do
      if name ~= "__metadata__" then
        local a, b = e.data_offsets[1], e.data_offsets[2]
        local v = {}
        if e.dtype == "F32" then
          local p = ffi.cast("const float *", base + a)
          for i = 0, (b - a) / 4 - 1 do v[i + 1] = p[i] end
        elseif e.dtype == "BF16" then
          local p = ffi.cast("const uint16_t *", base + a)
          for i = 0, (b - a) / 2 - 1 do v[i + 1] = bf16(p[i]) end
        else error("reference: dtype " .. e.dtype) end
        W[name] = { shape = e.shape, v = v }
      end
    end
  end
  return W
end

-- ---------------------------------------------------------------- the reference forward
-- x: list of T rows (lists of C numbers). W.shape = (out, in): y = x Wᵀ
local function linear(x, w)
  local O, I = w.shape[1], w.shape[2]
  local out = {}
  for t0 = 1, #x do
    local r, y = x[t0], {}
    for o = 0, O - 1 do
      local s = 0
      for i = 1, I do s = s + r[i] * w.v[o * I + i] end
      y[o + 1] = s
    end
    out[t0] = y
  end
  return out
end
-- LlamaRMSNorm: x / sqrt(mean(x²) + eps) · w
local function rmsnorm(x, w, eps)
  local out = {}
  for t0 = 1, #x do
    local r, s = x[t0], 0
    for i = 1, #r do s = s + r[i] * r[i] end
    local inv = 1 / math.sqrt(s / #r + eps)
    local y = {}
    for i = 1, #r do y[i] = r[i] * inv * w.v[i] end
    out[t0] = y
  end
  return out
end
-- rotary embedding, rotate-half layout (apply_rotary_pos_emb): for pair (i, i + HD/2),
-- angle = pos · theta^(−2i/HD)
local function rope(row, nh, hd, pos, theta)
  for h = 0, nh - 1 do
    for i = 0, hd / 2 - 1 do
      local ang = pos * theta ^ (-2 * i / hd)
      local c, s = math.cos(ang), math.sin(ang)
      local a, b = row[h * hd + i + 1], row[h * hd + i + hd / 2 + 1]
      row[h * hd + i + 1] = a * c - b * s
      row[h * hd + i + hd / 2 + 1] = b * c + a * s
    end
  end
end
local function silu(x) return x / (1 + math.exp(-x)) end

-- hf: config.json; returns logits (T × V rows) and hs[l] (each layer's output)
local function reference(W, c, ids, prefix)
  local C, NH = c.hidden_size, c.num_attention_heads
  local NKV, HD = c.num_key_value_heads or NH, C / NH
  local eps, theta = c.rms_norm_eps, c.rope_theta or 10000
  local window = c.sliding_window
  local T = #ids
  local E = W[prefix .. "embed_tokens.weight"]
  local x = {}
  for t0 = 1, T do
    local r = {}
    for i = 1, C do r[i] = E.v[ids[t0] * C + i] end
    x[t0] = r
  end
  local hs = {}
  for l = 0, c.num_hidden_layers - 1 do
    local p = prefix .. "layers." .. l .. "."
    local a = rmsnorm(x, W[p .. "input_layernorm.weight"], eps)
    local q, k, v
    if W[p .. "self_attn.qkv_proj.weight"] then   -- Phi-3: qkv = qkv_proj(x); q, k, v = slices of the last dim
      local qkv = linear(a, W[p .. "self_attn.qkv_proj.weight"])
      q, k, v = {}, {}, {}
      for t0 = 1, T do
        local r = qkv[t0]
        q[t0] = { unpack(r, 1, NH * HD) }
        k[t0] = { unpack(r, NH * HD + 1, NH * HD + NKV * HD) }
        v[t0] = { unpack(r, NH * HD + NKV * HD + 1, NH * HD + 2 * NKV * HD) }
      end
    else
      q, k, v = linear(a, W[p .. "self_attn.q_proj.weight"]), linear(a, W[p .. "self_attn.k_proj.weight"]), linear(a, W[p .. "self_attn.v_proj.weight"])
    end
    for t0 = 1, T do rope(q[t0], NH, HD, t0 - 1, theta) rope(k[t0], NKV, HD, t0 - 1, theta) end
    local att = {}
    for t0 = 1, T do att[t0] = {} end
    for h = 0, NH - 1 do
      local kh = math.floor(h / (NH / NKV))
      for i = 1, T do
        local sc, mx = {}, -math.huge
        for j = 1, i do
          if not window or i - j < window then
            local s = 0
            for d = 1, HD do s = s + q[i][h * HD + d] * k[j][kh * HD + d] end
            sc[j] = s / math.sqrt(HD)
            if sc[j] > mx then mx = sc[j] end
          end
        end
        local z = 0
        for j = 1, i do if sc[j] then sc[j] = math.exp(sc[j] - mx) z = z + sc[j] end end
        for d = 1, HD do
          local s = 0
          for j = 1, i do if sc[j] then s = s + sc[j] / z * v[j][kh * HD + d] end end
          att[i][h * HD + d] = s
        end
      end
    end
    local o = linear(att, W[p .. "self_attn.o_proj.weight"])
    for t0 = 1, T do for i = 1, C do x[t0][i] = x[t0][i] + o[t0][i] end end
    local m = rmsnorm(x, W[p .. "post_attention_layernorm.weight"], eps)
    local g, u
    if W[p .. "mlp.gate_up_proj.weight"] then   -- Phi-3: gate, up = gate_up_proj(x).chunk(2, dim=-1)
      local gu = linear(m, W[p .. "mlp.gate_up_proj.weight"])
      g, u = {}, {}
      for t0 = 1, T do
        local F = #gu[t0] / 2
        g[t0] = { unpack(gu[t0], 1, F) }
        u[t0] = { unpack(gu[t0], F + 1, 2 * F) }
      end
    else
      g, u = linear(m, W[p .. "mlp.gate_proj.weight"]), linear(m, W[p .. "mlp.up_proj.weight"])
    end
    for t0 = 1, T do for i = 1, #g[t0] do g[t0][i] = silu(g[t0][i]) * u[t0][i] end end
    local d = linear(g, W[p .. "mlp.down_proj.weight"])
    for t0 = 1, T do for i = 1, C do x[t0][i] = x[t0][i] + d[t0][i] end end
    local snap = {}
    for t0 = 1, T do snap[t0] = { unpack(x[t0]) } end
    hs[l] = snap
  end
  local f = rmsnorm(x, W[prefix .. "norm.weight"], eps)
  local head = W["lm_head.weight"] or E
  return linear(f, head), hs
end

-- ---------------------------------------------------------------- the engine side
local function engine(dir, ids)
  local ctx, m = hf.load(dir)
  return ctx:no_grad(function()
    ctx:reset()
    local T = #ids
    local b = ctx:tensor({ 1, T }, { dtype = "i32", name = "ids" })
    for i = 1, T do b.idata[i - 1] = ids[i] end
    local hs = {}
    local out = m:forward({ ids = b }, { probe = function(name, l, x)
      if name == "h" then
        local r = {}
        for i = 0, tonumber(x.numel) - 1 do r[i + 1] = x.data[i] end
        hs[l] = r
      end
    end })
    local v = {}
    for i = 0, tonumber(out.numel) - 1 do v[i + 1] = out.data[i] end
    return v, hs
  end)
end
local function flat(rows) local o = {} for _, r in ipairs(rows) do for _, x in ipairs(r) do o[#o + 1] = x end end return o end
local function max_rel(a, b)
  if #a ~= #b then return math.huge end
  local d, s = 0, 0
  for i = 1, #a do d = math.max(d, math.abs(a[i] - b[i])) s = math.max(s, math.abs(b[i])) end
  return d / s
end

-- a model with random weights (norm gains too), written as a LLaMA directory, then config.json
-- turned into the family's
local function make(name, preset, over, edit, opts)
  local ctx = ol.Context{ params = 4 * 1024 * 1024, seed = 5 }
  local m = models.build(ctx, models.preset(preset, over))
  local k = 0
  for _, p in ipairs(ctx:params()) do
    local nm = ffi.string(p.name)
    for i = 0, tonumber(p.numel) - 1 do
      k = k + 1
      local r = math.sin(k * 12.9898 + #nm) * 43758.5453
      r = (r - math.floor(r)) * 2 - 1
      p.data[i] = (nm:find("norm") or nm:find("ln")) and (1 + 0.5 * r) or 0.08 * r
    end
  end
  local dir = root .. "/" .. name
  hf.export(dir, ctx, m, opts)
  local c = json.decode(read(dir .. "/config.json"))
  edit(c)
  write(dir .. "/config.json", json.encode(c))
  return dir, c
end

-- Phi-3's layout written from a LLaMA directory: qkv_proj = rows q | k | v, gate_up_proj =
-- rows gate | up; dtype "F32" or "BF16"; shards = 2 puts the layers in a second file
local DT = { F32 = ol.C.OL_ST_F32, BF16 = ol.C.OL_ST_BF16 }
local function write_phi3(dir, dtype, shards)
  local W = load_dir(dir)
  os.execute("rm -f " .. dir .. "/*.safetensors " .. dir .. "/model.safetensors.index.json")
  local out = {}
  local function put(name, shape, v) out[#out + 1] = { name = name, shape = shape, v = v } end
  for name, w in pairs(W) do
    if not name:find("self_attn%.[qkv]_proj") and not name:find("mlp%.gate_proj") and not name:find("mlp%.up_proj") then put(name, w.shape, w.v) end
  end
  local l = 0
  while W["model.layers." .. l .. ".self_attn.q_proj.weight"] do
    local p = "model.layers." .. l .. "."
    local q, k, v = W[p .. "self_attn.q_proj.weight"], W[p .. "self_attn.k_proj.weight"], W[p .. "self_attn.v_proj.weight"]
    local cat = {}
    for _, x in ipairs { q, k, v } do for _, y in ipairs(x.v) do cat[#cat + 1] = y end end
    put(p .. "self_attn.qkv_proj.weight", { q.shape[1] + k.shape[1] + v.shape[1], q.shape[2] }, cat)
    local g, u = W[p .. "mlp.gate_proj.weight"], W[p .. "mlp.up_proj.weight"]
    cat = {}
    for _, x in ipairs { g, u } do for _, y in ipairs(x.v) do cat[#cat + 1] = y end end
    put(p .. "mlp.gate_up_proj.weight", { 2 * g.shape[1], g.shape[2] }, cat)
    l = l + 1
  end
  table.sort(out, function(a, b) return a.name < b.name end)
  local files, wm = {}, {}
  for _, e in ipairs(out) do
    local f = (shards == 2 and e.name:find("layers")) and 2 or 1
    files[f] = files[f] or {}
    table.insert(files[f], e)
  end
  for i, list in ipairs(files) do
    local fname = shards == 2 and string.format("model-%05d-of-00002.safetensors", i) or "model.safetensors"
    local w = ol.C.ol_st_writer_new()
    local keep = {}
    for _, e in ipairs(list) do
      local n = #e.v
      local f32 = ffi.new("float[?]", n, e.v)
      local data = f32
      if dtype == "BF16" then data = ffi.new("uint16_t[?]", n) assert(ol.C.ol_hf_from_f32(f32, n, DT.BF16, data) == 0) end
      keep[#keep + 1] = data
      assert(ol.C.ol_st_writer_add(w, e.name, DT[dtype], #e.shape, ffi.new("int64_t[?]", #e.shape, e.shape), data) == 0)
      wm[e.name] = fname
    end
    assert(ol.C.ol_st_writer_save(w, dir .. "/" .. fname) == 0)
    ol.C.ol_st_writer_free(w)
  end
  if shards == 2 then write(dir .. "/model.safetensors.index.json", json.encode({ metadata = {}, weight_map = wm })) end
end

local ids = {}
for i = 1, 14 do ids[i] = (i * 37 + 11) % 256 end
local variants = {
  { "mistral", "llama-quick", { n_head = 4, n_kv_head = 2, tie_embeddings = false, rope_base = 10000 },
    function(c) c.model_type = "mistral" c.architectures = { "MistralForCausalLM" } c.sliding_window = 16 end },
  { "llama3", "llama-quick", { n_head = 4, n_kv_head = 1, tie_embeddings = false, rope_base = 500000 },
    function(c) c.rope_scaling = json.null c.architectures = { "LlamaForCausalLM" } end },
  { "phi3", "llama-quick", { n_head = 4, n_kv_head = 2, tie_embeddings = false, rope_base = 10000 },
    function(c) c.model_type = "phi3" c.architectures = { "Phi3ForCausalLM" } c.sliding_window = 2047 c.rope_scaling = json.null end,
    write_phi3 },
}
for _, vt in ipairs(variants) do
  for _, o in ipairs { { tag = "f32", opts = {} }, { tag = "bf16-shards", opts = { dtype = "BF16", shard_bytes = 60000 } } } do
    local name = vt[1] .. "-" .. o.tag
    local dir, c = make(name, vt[2], vt[3], vt[4], vt[5] and {} or o.opts)
    if vt[5] then vt[5](dir, o.opts.dtype or "F32", o.opts.shard_bytes and 2 or 1) end
    local W = load_dir(dir)
    local prefix = W["model.embed_tokens.weight"] and "model." or ""
    local ref, rhs = reference(W, c, ids, prefix)
    local got, hs = engine(dir, ids)
    local e = max_rel(got, flat(ref))
    local eh = 0
    for l = 0, c.num_hidden_layers - 1 do eh = math.max(eh, max_rel(hs[l] or {}, flat(rhs[l]))) end
    t.ok(e < 2e-5 and eh < 2e-5, string.format("%s: logits and every layer's h equal the plain-Lua reference (max rel. error %.1e, %.1e)", name, e, eh))
  end
end

-- the sliding window bounds the sequence length; rope_scaling "llama3" is refused by name
local d = root .. "/mistral-f32"
local ctx, m = hf.load(d)
t.is(m.cfg.block_size, 16, "mistral: sliding_window 16 bounds the model's positions")
t.throws(function()
  ctx:no_grad(function()
    local b = ctx:tensor({ 1, 20 }, { dtype = "i32", name = "ids" }):fill_(1)
    m:forward({ ids = b })
  end)
end, "20", "mistral: a sequence longer than sliding_window is refused, not computed without the window")
local d3 = root .. "/llama3-f32"
local c3 = json.decode(read(d3 .. "/config.json"))
c3.rope_scaling = { rope_type = "llama3", factor = 8, low_freq_factor = 1, high_freq_factor = 4, original_max_position_embeddings = 8192 }
write(d3 .. "/config.json", json.encode(c3))
t.throws(function() hf.open(d3) end, "config.json 'rope_scaling'", "llama3 rope_scaling (LLaMA-3.1) is refused naming the key")

-- so-fig1 and so-fig3 end to end on the Mistral directory
local vocab = { ["<unk>"] = 0, ["<s>"] = 1, ["</s>"] = 2 }
for b = 0, 252 do vocab[string.format("<0x%02X>", b)] = 3 + b end
write(d .. "/tokenizer.json", json.encode({ model = { type = "BPE", byte_fallback = true, vocab = vocab, merges = {} },
  pre_tokenizer = { type = "Metaspace", replacement = "▁", prepend_scheme = "first", split = false } }))
write(d .. "/tokenizer_config.json", json.encode({ bos_token = "<s>", eos_token = "</s>" }))
local lines = {}
for i = 1, 300 do lines[i] = "And it came to pass, in the " .. i .. "th year, that they went." end
write(root .. "/text.txt", table.concat(lines, "\n"))
for _, id in ipairs { "so-fig1", "so-fig3" } do
  local out, ok = t.sh(string.format("bin/outlierlab run experiments/%s.lua --profile=quick --model=%s --text=%s --seq_len=16 --out=%s/results --cache=%s/cache",
    id, d, root .. "/text.txt", root, root))
  t.ok(ok and out:find("mistral-f32", 1, true), id .. " runs end to end on the Mistral directory", out)
end
-- Phi-3 streamed layer by layer (fused tensors converted per layer) = in memory
local dp = root .. "/phi3-bf16-shards"
os.execute("cp " .. d .. "/tokenizer*.json " .. dp .. "/")
local rep = {}
for _, st in ipairs { "no", "yes" } do
  local out, ok = t.sh(string.format("bin/outlierlab run experiments/so-fig3.lua --profile=quick --model=%s --text=%s --seq_len=16 --stream=%s --out=%s/results-%s --cache=%s/cache-%s",
    dp, root .. "/text.txt", st, root, st, root, st))
  rep[st] = ok and out:match("reproduced: ([^\n]*)") or out
end
t.ok(rep.no == rep.yes and rep.no:find("phi3", 1, true), "phi3: so-fig3 streamed from the sharded BF16 files = in memory", rep.no .. "\n" .. rep.yes)
local out, ok = t.sh(string.format("bin/outlierlab run experiments/so-fig3.lua --profile=quick --model=%s --text=%s --seq_len=32 --out=%s/results --cache=%s/cache",
  d, root .. "/text.txt", root, root))
t.ok(not ok and out:find("sliding_window", 1, true), "so-fig3 with seq_len beyond Mistral's sliding_window: refused naming it", out)

os.execute("rm -rf " .. root)
return t.done()
