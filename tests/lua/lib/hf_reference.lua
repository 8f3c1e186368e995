-- hf_reference — what the tests of imported Hugging Face families share: reading and writing
-- safetensors files in plain Lua (header JSON, F32/BF16 bytes), random weights, and an
-- independent reference forward of each decoder family written from the published
-- architecture (transformers' modeling_<family>.py), in double precision, never with the
-- engine's ops. Used by tests/lua/test_hf_families.lua and tests/lua/test_hf_qwen_gemma.lua.
--
--   local R = require "lib.hf_reference"   (tests put tests/lua on package.path)
--   local W = R.load_dir(dir)               -- name -> { shape =, v = {1-based values} }
--   R.write_dir(dir, tensors, config, { dtype = "F32"|"BF16", shards = 1|2 })
--   local logits, hs = R.forward(W, config, ids)   -- rows of T × V; hs[l] = layer l's output
--   R.engine(dir, ids) -> logits (flat), hs[l] (flat) through hf.load; R.max_rel(a, b); R.flat(rows)
local ol = require "outlierlab"
local ffi = require "ffi"
local json = require "outlierlab.util.json"
local hf = require "outlierlab.pretrained.hf"

local R = {}

local function read(path) local f = assert(io.open(path, "rb")) local s = f:read("*a") f:close() return s end
local function write(path, s) local f = assert(io.open(path, "wb")) f:write(s) f:close() end
R.read, R.write = read, write

-- ---------------------------------------------------------------- files
local function bf16(u) local b = ffi.new("uint32_t[1]", u * 65536) return ffi.cast("float *", b)[0] end
function R.load_dir(dir)
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

-- tensors: list of { name =, shape =, v = {values} }; config: the config.json table.
-- dtype "F32" or "BF16"; shards = 2 puts the layers' tensors in a second file (with the index)
local DT = { F32 = ol.C.OL_ST_F32, BF16 = ol.C.OL_ST_BF16 }
function R.write_dir(dir, tensors, config, opts)
  opts = opts or {}
  local dtype, shards = opts.dtype or "F32", opts.shards or 1
  os.execute("mkdir -p " .. dir .. " && rm -f " .. dir .. "/*.safetensors " .. dir .. "/model.safetensors.index.json")
  local out = {}
  for _, e in ipairs(tensors) do out[#out + 1] = e end
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
  if config then write(dir .. "/config.json", json.encode(config)) end
end

-- deterministic values in (-1, 1) for the k-th number of a stream (sine hash)
function R.rand(k)
  local r = math.sin(k * 12.9898 + 78.233) * 43758.5453
  return (r - math.floor(r)) * 2 - 1
end
-- a random tensor: scale·u, or 1 + scale·u (norm gains) when gain; seed picks the stream
function R.tensor(name, shape, seed, scale, gain)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local v = {}
  for i = 1, n do
    local u = R.rand(seed * 7919 + i)
    v[i] = gain and (1 + scale * u) or scale * u
  end
  return { name = name, shape = shape, v = v }
end

-- ---------------------------------------------------------------- the reference pieces
-- f applied to each of the T rows of x (lists of numbers): a new list of rows
local function rows(x, f) local out = {} for t0 = 1, #x do out[t0] = f(x[t0]) end return out end
-- w.shape = (out, in): y = x Wᵀ (+ b)
local function linear(x, w, b)
  local O, I = w.shape[1], w.shape[2]
  return rows(x, function(r)
    local y = {}
    for o = 0, O - 1 do
      local s = 0
      for i = 1, I do s = s + r[i] * w.v[o * I + i] end
      y[o + 1] = s + (b and b.v[o + 1] or 0)
    end
    return y
  end)
end
R.linear = linear
-- LlamaRMSNorm: x / sqrt(mean(x²) + eps) · w; GemmaRMSNorm (plus_one): · (1 + w)
local function rmsnorm_row(r, w, eps, plus_one, off, n)
  off, n = off or 0, n or #r
  local s = 0
  for i = 1, n do s = s + r[off + i] * r[off + i] end
  local inv = 1 / math.sqrt(s / n + eps)
  for i = 1, n do
    local g = w.v[i]
    if plus_one then g = 1 + g end
    r[off + i] = r[off + i] * inv * g
  end
end
local function rmsnorm(x, w, eps, plus_one)
  return rows(x, function(r) local y = { unpack(r) } rmsnorm_row(y, w, eps, plus_one) return y end)
end
R.rmsnorm = rmsnorm
-- rotary embedding, rotate-half layout (apply_rotary_pos_emb) over the first rd dims of each
-- head (rd = hd: the whole head): pair (i, i + rd/2), angle = pos · theta^(−2i/rd), or
-- pos · inv[i + 1] with the inverse frequencies inv of a rope_scaling
local function rope(row, nh, hd, pos, theta, rd, inv)
  rd = rd or hd
  for h = 0, nh - 1 do
    for i = 0, rd / 2 - 1 do
      local ang = inv and pos * inv[i + 1] or pos * theta ^ (-2 * i / rd)
      local c, s = math.cos(ang), math.sin(ang)
      local a, b = row[h * hd + i + 1], row[h * hd + i + rd / 2 + 1]
      row[h * hd + i + 1] = a * c - b * s
      row[h * hd + i + rd / 2 + 1] = b * c + a * s
    end
  end
end
R.rope = rope
-- modeling_rope_utils.py _compute_llama3_parameters(config) for rope_scaling rs, in double:
-- inv_freq = 1 / base^(arange(0, dim, 2) / dim); wavelen = 2π / inv_freq;
-- inv_freq_llama = where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq);
-- smooth = (old_context_len / wavelen − low_freq_factor) / (high_freq_factor − low_freq_factor);
-- smoothed = (1 − smooth)·inv_freq_llama / factor + smooth·inv_freq_llama;
-- is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen);
-- inv_freq_llama = where(is_medium, smoothed, inv_freq_llama)
function R.llama3_inv_freq(base, dim, rs)
  local factor, lo, hi, old = rs.factor, rs.low_freq_factor, rs.high_freq_factor, rs.original_max_position_embeddings
  local low_freq_wavelen, high_freq_wavelen = old / lo, old / hi
  local out = {}
  for j = 0, dim - 2, 2 do
    local inv_freq = 1.0 / (base ^ (j / dim))
    local wavelen = 2 * math.pi / inv_freq
    local llama = wavelen > low_freq_wavelen and inv_freq / factor or inv_freq
    local smooth = (old / wavelen - lo) / (hi - lo)
    local smoothed = (1 - smooth) * llama / factor + smooth * llama
    local medium = not (wavelen < high_freq_wavelen) and not (wavelen > low_freq_wavelen)
    out[#out + 1] = medium and smoothed or llama
  end
  return out
end
local function silu(x) return x / (1 + math.exp(-x)) end
-- NewGELUActivation (gelu_new, gelu_pytorch_tanh) and GELUActivation (gelu: erf, from libm)
local function gelu_tanh(x) return 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ^ 3))) end
pcall(ffi.cdef, "double erf(double x);")
local function gelu_erf(x) return 0.5 * x * (1 + ffi.C.erf(x / math.sqrt(2))) end
R.silu, R.gelu_tanh, R.gelu_erf = silu, gelu_tanh, gelu_erf
local ACT = { gelu_new = gelu_tanh, gelu_pytorch_tanh = gelu_tanh, gelu = gelu_erf, silu = silu }
-- nn.LayerNorm over n values of r from off + 1: (x − mean) / √(var + eps) · w (+ b), the
-- biased variance; b nil: no bias (MPT's norm_1.bias = None)
local function layernorm_row(r, w, b, eps, off, n)
  off, n = off or 0, n or #r
  local m = 0
  for i = 1, n do m = m + r[off + i] end
  m = m / n
  local var = 0
  for i = 1, n do var = var + (r[off + i] - m) ^ 2 end
  local inv = 1 / math.sqrt(var / n + eps)
  for i = 1, n do r[off + i] = (r[off + i] - m) * inv * w.v[i] + (b and b.v[i] or 0) end
end
local function layernorm(x, w, b, eps)
  return rows(x, function(r) local y = { unpack(r) } layernorm_row(y, w, b, eps) return y end)
end
R.layernorm = layernorm
local function fl32(x) return tonumber(ffi.new("float", x)) end

-- causal softmax attention over heads: q (T rows, NH·HD), k, v (T rows, NKV·HD);
-- o = { scale =, softcap =, window = (key j hidden when i − j ≥ window), alibi = slopes
-- (head h's score + slopes[h + 1]·(j − T), j and T 1-based: modeling_mpt.py's position bias) }
local function attend(q, k, v, NH, NKV, HD, o)
  local T = #q
  local att = {}
  for t0 = 1, T do att[t0] = {} end
  for h = 0, NH - 1 do
    local kh = math.floor(h / (NH / NKV))
    for i = 1, T do
      local sc, mx = {}, -math.huge
      for j = 1, i do
        if not o.window or i - j < o.window then
          local s = 0
          for d = 1, HD do s = s + q[i][h * HD + d] * k[j][kh * HD + d] end
          s = s * o.scale
          if o.softcap then s = math.tanh(s / o.softcap) * o.softcap end
          if o.alibi then s = s + o.alibi[h + 1] * (j - T) end
          sc[j] = s
          if s > mx then mx = s end
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
  return att
end
R.attend = attend

-- the embedding rows of ids (0-based) in E (V, C), times scale (default 1)
local function embed(E, ids, C, scale)
  local x = {}
  for t0 = 1, #ids do
    local r = {}
    for i = 1, C do r[i] = E.v[ids[t0] * C + i] * (scale or 1) end
    x[t0] = r
  end
  return x
end
local function add(x, y) for t0 = 1, #x do for i = 1, #x[t0] do x[t0][i] = x[t0][i] + y[t0][i] end end end
local function snapshot(x) local o = {} for t0 = 1, #x do o[t0] = { unpack(x[t0]) } end return o end
local function slice(rows, a, b) local o = {} for t0 = 1, #rows do o[t0] = { unpack(rows[t0], a, b) } end return o end

-- ---------------------------------------------------------------- the LLaMA-named decoders
-- LLaMA, Mistral (modeling_mistral.py: sliding window on every layer), Phi-3 (modeling_phi3.py:
-- qkv_proj and gate_up_proj sliced), Qwen2 (modeling_qwen2.py: q/k/v biases), Qwen3
-- (modeling_qwen3.py: q_norm, k_norm per head before RoPE, head_dim), Gemma (modeling_gemma.py:
-- (1 + w) RMSNorm, GeGLU with gelu tanh, embeddings × √hidden_size in the hidden dtype (fp32),
-- tied head), Gemma 2 (modeling_gemma2.py: post-attention and post-FFN norms, score scale
-- query_pre_attn_scalar^−½, attention and final soft-capping, window on the even layers).
local function llama_forward(W, c, ids)
  local mt = c.model_type
  local gemma = mt == "gemma" or mt == "gemma2"
  local C, NH = c.hidden_size, c.num_attention_heads
  local NKV = c.num_key_value_heads or NH
  local HD = ((mt == "qwen3" or gemma) and c.head_dim) or C / NH
  local eps, theta = c.rms_norm_eps, c.rope_theta or 10000
  local prefix = W["model.embed_tokens.weight"] and "model." or ""
  local T = #ids
  local E = W[prefix .. "embed_tokens.weight"]
  local x = embed(E, ids, C, gemma and fl32(math.sqrt(C)) or 1)   -- × torch.tensor(hidden_size**0.5, dtype=hidden dtype)
  local function norm(rows, name) return rmsnorm(rows, W[name], eps, gemma) end
  local hs = {}
  for l = 0, c.num_hidden_layers - 1 do
    local p = prefix .. "layers." .. l .. "."
    local a = norm(x, p .. "input_layernorm.weight")
    local q, k, v
    if W[p .. "self_attn.qkv_proj.weight"] then   -- Phi-3: qkv = qkv_proj(x); q, k, v = slices of the last dim
      local qkv = linear(a, W[p .. "self_attn.qkv_proj.weight"])
      q, k, v = slice(qkv, 1, NH * HD), slice(qkv, NH * HD + 1, NH * HD + NKV * HD), slice(qkv, NH * HD + NKV * HD + 1, NH * HD + 2 * NKV * HD)
    else
      local function proj(n) return linear(a, W[p .. "self_attn." .. n .. ".weight"], W[p .. "self_attn." .. n .. ".bias"]) end
      q, k, v = proj("q_proj"), proj("k_proj"), proj("v_proj")
    end
    if mt == "qwen3" and W[p .. "self_attn.q_norm.weight"] then   -- q_norm(q.view(..., head_dim)), k_norm(k.view(...)): each head on its own
      for t0 = 1, T do
        for h = 0, NH - 1 do rmsnorm_row(q[t0], W[p .. "self_attn.q_norm.weight"], eps, false, h * HD, HD) end
        for h = 0, NKV - 1 do rmsnorm_row(k[t0], W[p .. "self_attn.k_norm.weight"], eps, false, h * HD, HD) end
      end
    end
    local inv = type(c.rope_scaling) == "table" and c.rope_scaling.rope_type == "llama3" and R.llama3_inv_freq(theta, HD, c.rope_scaling) or nil
    for t0 = 1, T do rope(q[t0], NH, HD, t0 - 1, theta, nil, inv) rope(k[t0], NKV, HD, t0 - 1, theta, nil, inv) end
    local o = { scale = 1 / math.sqrt(HD) }
    if mt == "mistral" or mt == "phi3" then o.window = c.sliding_window end
    if mt == "gemma2" then
      o.scale = c.query_pre_attn_scalar ^ -0.5
      o.softcap = c.attn_logit_softcapping
      if l % 2 == 0 then o.window = c.sliding_window end   -- Gemma2Attention: sliding on even layers
    end
    local att = attend(q, k, v, NH, NKV, HD, o)
    local ao = linear(att, W[p .. "self_attn.o_proj.weight"], W[p .. "self_attn.o_proj.bias"])
    if mt == "gemma2" then ao = norm(ao, p .. "post_attention_layernorm.weight") end
    add(x, ao)
    local m = norm(x, p .. (mt == "gemma2" and "pre_feedforward_layernorm.weight" or "post_attention_layernorm.weight"))
    local g, u
    if W[p .. "mlp.gate_up_proj.weight"] then   -- Phi-3: gate, up = gate_up_proj(x).chunk(2, dim=-1)
      local gu = linear(m, W[p .. "mlp.gate_up_proj.weight"])
      local F = #gu[1] / 2
      g, u = slice(gu, 1, F), slice(gu, F + 1, 2 * F)
    else
      g, u = linear(m, W[p .. "mlp.gate_proj.weight"]), linear(m, W[p .. "mlp.up_proj.weight"])
    end
    local act = gemma and gelu_tanh or silu
    for t0 = 1, T do for i = 1, #g[t0] do g[t0][i] = act(g[t0][i]) * u[t0][i] end end
    local d = linear(g, W[p .. "mlp.down_proj.weight"])
    if mt == "gemma2" then d = norm(d, p .. "post_feedforward_layernorm.weight") end
    add(x, d)
    hs[l] = snapshot(x)
  end
  local f = norm(x, prefix .. "norm.weight")
  local logits = linear(f, W["lm_head.weight"] or E)
  if mt == "gemma2" and c.final_logit_softcapping then
    local cap = c.final_logit_softcapping
    for t0 = 1, T do for i = 1, #logits[t0] do logits[t0][i] = math.tanh(logits[t0][i] / cap) * cap end end
  end
  return logits, hs
end

-- ---------------------------------------------------------------- Phi
-- modeling_phi.py PhiForCausalLM: h = input_layernorm(x) (LayerNorm with bias); q, k, v =
-- q/k/v_proj(h) with biases, viewed (T, heads, head_dim); qk_layernorm: q_layernorm and
-- k_layernorm (LayerNorm(head_dim) with bias) on each head; the rotary embedding on
-- q[..., :rotary_ndims] and k[..., :rotary_ndims], rotary_ndims = int(head_dim ·
-- partial_rotary_factor), the rest passed; attention scaled by head_dim^−½; dense (with bias);
-- x = attn_outputs + fc2(act(fc1(h))) + x; final_layernorm; lm_head with bias.
-- c._sequential (a control, not Phi): the MLP reads input_layernorm(x + attention) instead.
local function phi_forward(W, c, ids)
  local C, NH = c.hidden_size, c.num_attention_heads
  local NKV = c.num_key_value_heads or NH
  if NKV == json.null then NKV = NH end
  local HD = C / NH
  local rd = math.floor(HD * (c.partial_rotary_factor or 0.5))
  local eps, theta = c.layer_norm_eps or 1e-5, c.rope_theta or 10000
  local act = ACT[c.hidden_act or "gelu_new"]
  local T = #ids
  local x = embed(W["model.embed_tokens.weight"], ids, C)
  local hs = {}
  for l = 0, c.num_hidden_layers - 1 do
    local p = "model.layers." .. l .. "."
    local function w(n) return W[p .. n .. ".weight"], W[p .. n .. ".bias"] end
    local h = layernorm(x, W[p .. "input_layernorm.weight"], W[p .. "input_layernorm.bias"], eps)
    local q, k, v = linear(h, w("self_attn.q_proj")), linear(h, w("self_attn.k_proj")), linear(h, w("self_attn.v_proj"))
    if c.qk_layernorm then
      local qw, qb = w("self_attn.q_layernorm")
      local kw, kb = w("self_attn.k_layernorm")
      for t0 = 1, T do
        if qw then for hh = 0, NH - 1 do layernorm_row(q[t0], qw, qb, eps, hh * HD, HD) end end
        if kw then for hh = 0, NKV - 1 do layernorm_row(k[t0], kw, kb, eps, hh * HD, HD) end end
      end
    end
    for t0 = 1, T do rope(q[t0], NH, HD, t0 - 1, theta, rd) rope(k[t0], NKV, HD, t0 - 1, theta, rd) end
    local ao = linear(attend(q, k, v, NH, NKV, HD, { scale = 1 / math.sqrt(HD) }), w("self_attn.dense"))
    local m = h
    if c._sequential then
      m = snapshot(x)
      add(m, ao)
      m = layernorm(m, W[p .. "input_layernorm.weight"], W[p .. "input_layernorm.bias"], eps)
    end
    local u = linear(m, w("mlp.fc1"))
    for t0 = 1, T do for i = 1, #u[t0] do u[t0][i] = act(u[t0][i]) end end
    local ff = linear(u, w("mlp.fc2"))
    for t0 = 1, T do for i = 1, C do x[t0][i] = ao[t0][i] + ff[t0][i] + x[t0][i] end end
    hs[l] = snapshot(x)
  end
  local f = layernorm(x, W["model.final_layernorm.weight"], W["model.final_layernorm.bias"], eps)
  return linear(f, W["lm_head.weight"], W["lm_head.bias"]), hs
end

-- ---------------------------------------------------------------- Falcon
-- modeling_falcon.py FalconForCausalLM / FalconDecoderLayer.forward, transcribed: LayerNorms with
-- bias; fused = query_key_value(attention_layernorm_out); FalconAttention._split_heads:
--   new_decoder_architecture: view (T, -1, NH/NKV + 2, HD): query = [..., :-2], key = [..., [-2]],
--     value = [..., [-1]], key and value broadcast to the query's shape (every head);
--   not multi_query: view (T, NH, 3, HD): q, k, v = [..., 0, :], [..., 1, :], [..., 2, :];
--   multi_query: view (T, NH + 2, HD): q = [..., :-2, :], k = [..., [-2], :], v = [..., [-1], :];
-- rotary over the whole head; scores / √HD; dense; the MLP input and the residual as in
-- FalconDecoderLayer.forward; mlp_output += attention_output (new architecture or parallel_attn);
-- output = mlp_output + residual; ln_f; lm_head (tied: word_embeddings).
-- c._qkv_blocks (a control, not Falcon): the fused rows read as [all q | all k | all v];
-- c._sequential (a control): the MLP after the attention, input_layernorm(x + attention).
local function falcon_forward(W, c, ids)
  local C, NH = c.hidden_size, c.num_attention_heads
  local HD = C / NH
  local function opt(v, d) if v == nil or v == json.null then return d end return v end
  local new, mq, par = opt(c.new_decoder_architecture, false), opt(c.multi_query, true), opt(c.parallel_attn, true)
  local NKV = opt(c.num_kv_heads, NH)
  local nln = opt(c.num_ln_in_parallel_attn, new and 2 or nil)
  local eps, theta = opt(c.layer_norm_epsilon, 1e-5), opt(c.rope_theta, 10000)
  local act = ACT[opt(c.activation, "gelu")]
  local Wt = W["transformer.word_embeddings.weight"]
  local T = #ids
  local x = embed(Wt, ids, C)
  local hs = {}
  for l = 0, c.num_hidden_layers - 1 do
    local p = "transformer.h." .. l .. "."
    local function w(n) return W[p .. n .. ".weight"], W[p .. n .. ".bias"] end
    local function ln(rows_, n) return layernorm(rows_, W[p .. n .. ".weight"], W[p .. n .. ".bias"], eps) end
    local residual = x
    local attn_in, mlp_in
    if new and nln == 2 then attn_in, mlp_in = ln(x, "ln_attn"), ln(x, "ln_mlp") else attn_in = ln(x, "input_layernorm") end
    local fused = linear(attn_in, w("self_attention.query_key_value"))
    -- heads: q (T rows of NH·HD), k and v (T rows of nk·HD)
    local q, k, v, nk = {}, {}, {}, NH
    local function head(row, i) return { unpack(row, i * HD + 1, (i + 1) * HD) } end
    for t0 = 1, T do
      local f = fused[t0]
      local qh, kh, vh = {}, {}, {}
      if c._qkv_blocks then
        nk = new and NKV or (mq and 1 or NH)
        for h = 0, NH - 1 do qh[#qh + 1] = head(f, h) end
        for h = 0, nk - 1 do kh[#kh + 1] = head(f, NH + h) vh[#vh + 1] = head(f, NH + nk + h) end
      elseif new then
        local rep = NH / NKV
        for g = 0, NKV - 1 do
          for j = 0, rep - 1 do
            qh[#qh + 1] = head(f, g * (rep + 2) + j)
            kh[#kh + 1] = head(f, g * (rep + 2) + rep)       -- broadcast_to(key, query.shape)
            vh[#vh + 1] = head(f, g * (rep + 2) + rep + 1)
          end
        end
      elseif not mq then
        for h = 0, NH - 1 do qh[#qh + 1] = head(f, 3 * h) kh[#kh + 1] = head(f, 3 * h + 1) vh[#vh + 1] = head(f, 3 * h + 2) end
      else
        for h = 0, NH - 1 do qh[#qh + 1] = head(f, h) end
        kh[1], vh[1], nk = head(f, NH), head(f, NH + 1), 1
      end
      local function cat(list) local o = {} for _, hh in ipairs(list) do for _, y in ipairs(hh) do o[#o + 1] = y end end return o end
      q[t0], k[t0], v[t0] = cat(qh), cat(kh), cat(vh)
      nk = #kh
    end
    for t0 = 1, T do rope(q[t0], NH, HD, t0 - 1, theta) rope(k[t0], nk, HD, t0 - 1, theta) end
    local ao = linear(attend(q, k, v, NH, nk, HD, { scale = 1 / math.sqrt(HD) }), w("self_attention.dense"))
    if c._sequential then   -- the control: the MLP after the attention, from input_layernorm
      residual = snapshot(x)
      add(residual, ao)
      mlp_in, new, par = ln(residual, "input_layernorm"), false, false
    elseif not new then
      if par then mlp_in = attn_in
      else
        residual = snapshot(x)
        add(residual, ao)
        mlp_in = ln(residual, "post_attention_layernorm")
      end
    end
    if new and par and nln == 1 then mlp_in = attn_in end
    local u = linear(mlp_in, w("mlp.dense_h_to_4h"))
    for t0 = 1, T do for i = 1, #u[t0] do u[t0][i] = act(u[t0][i]) end end
    local mlp_out = linear(u, w("mlp.dense_4h_to_h"))
    if new or par then add(mlp_out, ao) end
    add(mlp_out, residual)
    x = mlp_out
    hs[l] = snapshot(x)
  end
  local f = layernorm(x, W["transformer.ln_f.weight"], W["transformer.ln_f.bias"], eps)
  return linear(f, W["lm_head.weight"] or Wt), hs
end

-- ---------------------------------------------------------------- MPT
-- modeling_mpt.py's gen_slopes / build_mpt_alibi_tensor: n = 2^ceil(log2(n_heads));
-- m = arange(1, n + 1) · (alibi_bias_max / n); slopes = 1 / 2^m; for n ≠ n_heads
-- concat(slopes[1::2], slopes[::2])[:n_heads] (0-based: the odd-indexed first).
-- plain_order (a control, not MPT): slopes 2^(−i·alibi_bias_max/n_heads), i = 1 … n_heads.
function R.mpt_slopes(n_heads, alibi_bias_max, plain_order)
  local n = plain_order and n_heads or 2 ^ math.ceil(math.log(n_heads) / math.log(2) - 1e-12)
  local slopes = {}
  for i = 1, n do slopes[i] = 1 / 2 ^ (i * (alibi_bias_max / n)) end
  if n == n_heads then return slopes end
  local out = {}
  for i = 2, n, 2 do out[#out + 1] = slopes[i] end   -- slopes[1::2]
  for i = 1, n, 2 do out[#out + 1] = slopes[i] end   -- slopes[::2]
  return { unpack(out, 1, n_heads) }
end
-- MptForCausalLM: x = wte(ids); per block: h = norm_1(x) (LayerNorm, no bias); mixed_qkv =
-- Wqkv(h), clamped to [−clip_qkv, clip_qkv] when clip_qkv; q, k, v = chunk(3); scores × softmax_scale
-- (default (d_model/n_heads)^−½) + ALiBi; causal softmax; out_proj; x = x + attention; x = x +
-- down_proj(gelu(up_proj(norm_2(x)))) (exact GELU); norm_f; lm_head tied to wte.
-- c._plain_slopes (a control): ALiBi slopes in the plain order (R.mpt_slopes). The slopes use
-- alibi_bias_max 8 whatever attn_config says: MptModel.forward calls build_mpt_alibi_tensor
-- without it (its default 8); c._alibi_bias_max (a control) sets another.
local function mpt_forward(W, c, ids)
  local C, NH = c.d_model, c.n_heads
  local HD = C / NH
  local ac = type(c.attn_config) == "table" and c.attn_config or {}
  local function opt(v, d) if v == nil or v == json.null then return d end return v end
  local eps = opt(c.layer_norm_epsilon, 1e-5)
  local clip = opt(ac.clip_qkv, 0)
  local o = { scale = opt(ac.softmax_scale, 1 / math.sqrt(C / NH)), alibi = R.mpt_slopes(NH, c._alibi_bias_max or 8, c._plain_slopes) }
  local wte = W["transformer.wte.weight"]
  local x = embed(wte, ids, C)
  local hs = {}
  for l = 0, c.n_layers - 1 do
    local p = "transformer.blocks." .. l .. "."
    local h = layernorm(x, W[p .. "norm_1.weight"], nil, eps)
    local qkv = linear(h, W[p .. "attn.Wqkv.weight"])
    if clip ~= 0 then
      for _, r in ipairs(qkv) do for i = 1, #r do r[i] = math.min(math.max(r[i], -clip), clip) end end
    end
    local q, k, v = slice(qkv, 1, C), slice(qkv, C + 1, 2 * C), slice(qkv, 2 * C + 1, 3 * C)
    add(x, linear(attend(q, k, v, NH, NH, HD, o), W[p .. "attn.out_proj.weight"]))
    local u = linear(layernorm(x, W[p .. "norm_2.weight"], nil, eps), W[p .. "ffn.up_proj.weight"])
    for t0 = 1, #u do for i = 1, #u[t0] do u[t0][i] = gelu_erf(u[t0][i]) end end
    add(x, linear(u, W[p .. "ffn.down_proj.weight"]))
    hs[l] = snapshot(x)
  end
  local f = layernorm(x, W["transformer.norm_f.weight"], nil, eps)
  return linear(f, W["lm_head.weight"] or wte), hs
end

local FORWARD = { llama = llama_forward, mistral = llama_forward, phi3 = llama_forward, qwen2 = llama_forward,
                  qwen3 = llama_forward, gemma = llama_forward, gemma2 = llama_forward, phi = phi_forward,
                  falcon = falcon_forward, mpt = mpt_forward }
-- the reference forward of a directory's config.json: logits (T rows of V), hs[l] (T rows of C)
function R.forward(W, c, ids)
  local f = FORWARD[c.model_type] or error("reference: no forward for model_type " .. tostring(c.model_type))
  return f(W, c, ids)
end

-- ---------------------------------------------------------------- the engine side and comparison
function R.engine(dir, ids)
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
    return v, hs, m
  end)
end
function R.flat(rows) local o = {} for _, r in ipairs(rows) do for _, x in ipairs(r) do o[#o + 1] = x end end return o end
-- max |a − b| / max |b| (math.huge when the lengths differ), and max |a − b|
function R.max_rel(a, b)
  if #a ~= #b or #a == 0 then return math.huge, math.huge end
  local d, s = 0, 0
  for i = 1, #a do d = math.max(d, math.abs(a[i] - b[i])) s = math.max(s, math.abs(b[i])) end
  return d / s, d
end
-- compare a directory's engine forward with the reference: rel. errors of logits and of the
-- worst layer, and the max abs error of the logits
function R.compare(dir, ids)
  local W = R.load_dir(dir)
  local c = json.decode(read(dir .. "/config.json"))
  local ref, rhs = R.forward(W, c, ids)
  local got, hs = R.engine(dir, ids)
  local e, abs = R.max_rel(got, R.flat(ref))
  local eh = 0
  for l = 0, (c.num_hidden_layers or c.n_layers) - 1 do eh = math.max(eh, (R.max_rel(hs[l] or {}, R.flat(rhs[l])))) end
  return e, eh, abs
end

-- ---------------------------------------------------------------- what the family tests share
-- a new empty directory under /tmp (the test removes it at the end)
function R.tmpdir()
  local root = os.tmpname()
  os.remove(root)
  os.execute("mkdir -p " .. root)
  return root
end

-- a tensor list and the function that adds to it: add(name, shape, scale, gain) draws the next
-- seed's values (R.tensor)
function R.builder()
  local out, seed = {}, 0
  return out, function(name, shape, scale, gain)
    seed = seed + 1
    out[#out + 1] = R.tensor(name, shape, seed, scale, gain)
  end
end

-- For each family { name =, tensors = fn(config) -> list, config = fn() -> config.json table,
-- control = fn(W, c) (optional: the reference without the family's feature), control_what = }:
-- a directory in F32 (one file) and one in BF16 (two shards) under root, whose logits and
-- every layer's output h must equal the reference forward's to 2e-5 relative; the control,
-- on the F32 directory, must differ by more than 1e-3 (the check can fail). Returns
-- { [name .. "-f32" | name .. "-bf16-shards"] = dir }.
function R.check_families(t, root, families, ids)
  local dirs = {}
  for _, fam in ipairs(families) do
    for _, o in ipairs { { tag = "f32", dtype = "F32", shards = 1 }, { tag = "bf16-shards", dtype = "BF16", shards = 2 } } do
      local name = fam.name .. "-" .. o.tag
      local dir = root .. "/" .. name
      local c = fam.config()
      if o.dtype == "BF16" then c.torch_dtype = "bfloat16" end
      R.write_dir(dir, fam.tensors(c), c, { dtype = o.dtype, shards = o.shards })
      dirs[name] = dir
      local ok, e, eh, abs = pcall(R.compare, dir, ids)
      t.ok(ok and e < 2e-5 and eh < 2e-5, string.format("%s: logits and every layer's h equal the plain-Lua reference (max rel. error %.1e, %.1e; max abs %.1e)",
        name, ok and e or -1, ok and eh or -1, ok and abs or -1), not ok and tostring(e) or nil)
      if fam.control and o.tag == "f32" then R.check_control(t, dir, ids, fam.control, name .. ": the reference " .. fam.control_what) end
    end
  end
  return dirs
end

-- the reference with edit(W, c) applied (its weights and config.json) must differ from the
-- engine's logits on dir by more than min (default 1e-3): the check can fail
function R.check_control(t, dir, ids, edit, what, min)
  min = min or 1e-3
  local W = R.load_dir(dir)
  local cc = json.decode(read(dir .. "/config.json"))
  edit(W, cc)
  local okc, ref = pcall(R.forward, W, cc, ids)
  local got = R.engine(dir, ids)
  local ec = okc and R.max_rel(got, R.flat(ref)) or -1
  t.ok(okc and ec > min, string.format("%s differs (rel. error %.1e > %.0e): the check can fail", what, ec, min), not okc and tostring(ref) or nil)
end

-- bad config values: each { dir name, fn(config.json table), the text the error must hold }
-- applied to a copy of dirs[name] must be refused by hf.open naming config.json and the text
function R.check_refused(t, root, dirs, bad)
  for i, b in ipairs(bad) do
    local d = root .. "/bad" .. i
    os.execute("rm -rf " .. d .. " && cp -r " .. dirs[b[1]] .. " " .. d)
    local c = json.decode(read(d .. "/config.json"))
    b[2](c)
    write(d .. "/config.json", json.encode(c))
    local ok, err = pcall(hf.open, d)
    t.ok(not ok and tostring(err):find(b[3], 1, true) and tostring(err):find("config.json", 1, true),
      b[1] .. ": " .. b[3] .. " refused naming it", tostring(err))
    os.execute("rm -rf " .. d)
  end
end

-- GPT-2's bytes_to_unicode: byte b -> its printable symbol (UTF-8)
function R.byte_symbols()
  local out, n = {}, 0
  for b = 0, 255 do
    local keep = (b >= 33 and b <= 126) or (b >= 161 and b <= 172) or (b >= 174 and b <= 255)
    local cp = keep and b or 256 + n
    if not keep then n = n + 1 end
    out[b] = cp < 128 and string.char(cp) or (cp < 2048 and string.char(192 + math.floor(cp / 64), 128 + cp % 64))
  end
  return out
end
-- a byte-level vocabulary: every byte's symbol (ids 0–255), extra = { [token] = id } on top
function R.byte_vocab(extra)
  local vocab = {}
  for b, sym in pairs(R.byte_symbols()) do vocab[sym] = b end
  for k, v in pairs(extra or {}) do vocab[k] = v end
  return vocab
end

-- a text of 300 lines (a few KB) for the end-to-end runs, written under root
function R.text(root)
  local lines = {}
  for i = 1, 300 do lines[i] = "And it came to pass, in the " .. i .. "th year, that they went." end
  write(root .. "/text.txt", table.concat(lines, "\n"))
  return root .. "/text.txt"
end

-- so-fig1 (quick profile, 16 tokens) end to end on dir: the run succeeds and names the model
function R.check_so_fig1(t, dir, text, root, what)
  local name = dir:match("([^/]+)$")
  local out, ok = t.sh(string.format("bin/outlierlab run experiments/so-fig1.lua --profile=quick --model=%s --text=%s --seq_len=16 --out=%s/results-%s --cache=%s/cache-%s",
    dir, text, root, name, root, name))
  t.ok(ok and out:find(name, 1, true), "so-fig1 runs end to end on the " .. what .. " directory", out)
end

-- so-fig3 (quick profile) on dir streamed layer by layer (--stream=yes) and in memory (no):
-- the same reproduced numbers, and they name the family
function R.check_stream(t, dir, text, root, family)
  local rep = {}
  for _, st in ipairs { "no", "yes" } do
    local out, ok = t.sh(string.format("bin/outlierlab run experiments/so-fig3.lua --profile=quick --model=%s --text=%s --seq_len=16 --stream=%s --out=%s/results-%s --cache=%s/cache-%s",
      dir, text, st, root, st, root, st))
    rep[st] = ok and out:match("reproduced: ([^\n]*)") or out
  end
  t.ok(rep.no == rep.yes and rep.no:find(family, 1, true), family .. ": so-fig3 streamed from the sharded BF16 files = in memory", rep.no .. "\n" .. rep.yes)
end

return R
