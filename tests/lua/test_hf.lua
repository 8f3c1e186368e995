-- test_hf — Hugging Face model directories, one family at a time. For each family the test
-- writes a checkpoint in Hugging Face's layout from the project's own model with random
-- weights — names, shapes, Conv1D transposes, fused c_attn, dtypes and shards spelled out
-- HERE, independently of lua/outlierlab/pretrained/hf.lua's tables — imports it with hf.load and compares
-- the logits with the original model's (to fp32 rounding; for F16/BF16 files the original's
-- weights are rounded the same way first). Then hf.export must write the same tensors as this
-- independent writer, and export -> import must give back every parameter bit for bit.
local t = require "tap"
local ol = require "outlierlab"
local hf = require "outlierlab.pretrained.hf"
local json = require "outlierlab.util.json"
local models = require "outlierlab.models"
local ffi, C = ol.ffi, ol.C

local root = os.tmpname()
os.remove(root)
os.execute("mkdir -p " .. root)

-- ---------------------------------------------------------------- an independent HF writer
local function numel(shape) local n = 1 for _, s in ipairs(shape) do n = n * s end return n end
-- fp32 buffer of a parameter (copied), or of its transpose (2-D)
local function copy(p) local n = tonumber(p.numel) local b = ffi.new("float[?]", n) ffi.copy(b, p.data, 4 * n) return b end
local function transpose(p)
  local r, c = tonumber(p.shape[0]), tonumber(p.shape[1])
  local b = ffi.new("float[?]", r * c)
  for i = 0, r - 1 do for j = 0, c - 1 do b[j * r + i] = p.data[i * c + j] end end
  return b
end
-- columns side by side: a list of (rows, c_k) buffers -> (rows, Σc_k)
local function hcat(list, rows)
  local total = 0
  for _, x in ipairs(list) do total = total + x[2] end
  local b = ffi.new("float[?]", rows * total)
  local off = 0
  for _, x in ipairs(list) do
    for i = 0, rows - 1 do for j = 0, x[2] - 1 do b[i * total + off + j] = x[1][i * x[2] + j] end end
    off = off + x[2]
  end
  return b
end
local function concat1(list)
  local n = 0
  for _, p in ipairs(list) do n = n + tonumber(p.numel) end
  local b = ffi.new("float[?]", n)
  local off = 0
  for _, p in ipairs(list) do ffi.copy(b + off, p.data, 4 * tonumber(p.numel)) off = off + tonumber(p.numel) end
  return b
end

local DT = { F32 = C.OL_ST_F32, F16 = C.OL_ST_F16, BF16 = C.OL_ST_BF16 }
-- write tensors {name, shape, fp32 buffer} as dtype into dir: one file, or shards of about
-- shard_bytes with the index Hugging Face writes
local function write_dir(dir, config, tensors, dtype, shard_bytes)
  os.execute("rm -rf " .. dir .. " && mkdir -p " .. dir)
  local f = assert(io.open(dir .. "/config.json", "wb"))
  f:write(json.encode(config))
  f:close()
  local es = dtype == "F32" and 4 or 2
  local keep = {}
  local groups, cur, size = {}, {}, 0
  for _, x in ipairs(tensors) do
    local n = numel(x[2])
    if shard_bytes and #cur > 0 and size + n * es > shard_bytes then groups[#groups + 1] = cur cur, size = {}, 0 end
    cur[#cur + 1] = x
    size = size + n * es
  end
  groups[#groups + 1] = cur
  local wm = {}
  for gi, g in ipairs(groups) do
    local w = ffi.gc(C.ol_st_writer_new(), C.ol_st_writer_free)
    local fname = shard_bytes and string.format("model-%05d-of-%05d.safetensors", gi, #groups) or "model.safetensors"
    for _, x in ipairs(g) do
      local n = numel(x[2])
      local data = x[3]
      if dtype ~= "F32" then
        data = ffi.new("uint16_t[?]", n)
        assert(C.ol_hf_from_f32(x[3], n, DT[dtype], data) == 0)
      end
      keep[#keep + 1] = data
      assert(C.ol_st_writer_add(w, x[1], DT[dtype], #x[2], ffi.new("int64_t[?]", #x[2], x[2]), data) == 0, ffi.string(C.ol_error()))
      wm[x[1]] = fname
    end
    C.ol_st_writer_set_metadata(w, "format", "pt")
    assert(C.ol_st_writer_save(w, dir .. "/" .. fname) == 0, ffi.string(C.ol_error()))
  end
  if shard_bytes then
    f = assert(io.open(dir .. "/model.safetensors.index.json", "wb"))
    f:write(json.encode({ metadata = { total_size = 0 }, weight_map = wm }))
    f:close()
  end
  return #groups
end

-- Hugging Face's tensors of each family, from the project's parameters (P[name])
local writers = {}
function writers.gpt2(P, c, pre)
  local out = { { pre .. "wte.weight", { c.vocab_size, c.d_model }, copy(P["wte.weight"]) },
                { pre .. "wpe.weight", { c.block_size, c.d_model }, copy(P["wpe.weight"]) } }
  local Cd, F = c.d_model, c.d_ff
  for l = 0, c.n_layer - 1 do
    local o, h = "h" .. l .. ".", pre .. "h." .. l .. "."
    local function add(n, s, b) out[#out + 1] = { h .. n, s, b } end
    add("ln_1.weight", { Cd }, copy(P[o .. "ln1.weight"])); add("ln_1.bias", { Cd }, copy(P[o .. "ln1.bias"]))
    -- Conv1D: weight (in, out) = our (out, in) transposed; c_attn = [q | k | v] along out
    add("attn.c_attn.weight", { Cd, 3 * Cd }, hcat({ { transpose(P[o .. "attn.q_proj.weight"]), Cd },
      { transpose(P[o .. "attn.k_proj.weight"]), Cd }, { transpose(P[o .. "attn.v_proj.weight"]), Cd } }, Cd))
    add("attn.c_attn.bias", { 3 * Cd }, concat1({ P[o .. "attn.q_proj.bias"], P[o .. "attn.k_proj.bias"], P[o .. "attn.v_proj.bias"] }))
    add("attn.c_proj.weight", { Cd, Cd }, transpose(P[o .. "attn.o_proj.weight"])); add("attn.c_proj.bias", { Cd }, copy(P[o .. "attn.o_proj.bias"]))
    -- the causal-mask buffer older GPT-2 files carry (ignored by the importer)
    local mask = ffi.new("float[?]", c.block_size * c.block_size)
    add("attn.bias", { 1, 1, c.block_size, c.block_size }, mask)
    add("ln_2.weight", { Cd }, copy(P[o .. "ln2.weight"])); add("ln_2.bias", { Cd }, copy(P[o .. "ln2.bias"]))
    add("mlp.c_fc.weight", { Cd, F }, transpose(P[o .. "mlp.up_proj.weight"])); add("mlp.c_fc.bias", { F }, copy(P[o .. "mlp.up_proj.bias"]))
    add("mlp.c_proj.weight", { F, Cd }, transpose(P[o .. "mlp.down_proj.weight"])); add("mlp.c_proj.bias", { Cd }, copy(P[o .. "mlp.down_proj.bias"]))
  end
  out[#out + 1] = { pre .. "ln_f.weight", { Cd }, copy(P["ln_f.weight"]) }
  out[#out + 1] = { pre .. "ln_f.bias", { Cd }, copy(P["ln_f.bias"]) }
  local conf = { model_type = "gpt2", vocab_size = c.vocab_size, n_positions = c.block_size, n_embd = Cd, n_layer = c.n_layer,
                 n_head = c.n_head, n_inner = F, activation_function = "gelu_new", layer_norm_epsilon = 1e-5 }
  return out, conf
end
function writers.opt(P, c, pre)
  local Cd, F, E = c.d_model, c.d_ff, c.d_embed > 0 and c.d_embed or c.d_model
  local out = { { pre .. "embed_tokens.weight", { c.vocab_size, E }, copy(P["embed_tokens.weight"]) },
                { pre .. "embed_positions.weight", { c.block_size + 2, Cd }, copy(P["embed_positions.weight"]) } }
  if E ~= Cd then
    out[#out + 1] = { pre .. "project_in.weight", { Cd, E }, copy(P["project_in.weight"]) }
    out[#out + 1] = { pre .. "project_out.weight", { E, Cd }, copy(P["project_out.weight"]) }
  end
  for l = 0, c.n_layer - 1 do
    local o, h = "layers" .. l .. ".", pre .. "layers." .. l .. "."
    for _, m in ipairs { { "self_attn.q_proj", "attn.q_proj" }, { "self_attn.k_proj", "attn.k_proj" }, { "self_attn.v_proj", "attn.v_proj" },
                         { "self_attn.out_proj", "attn.o_proj" }, { "self_attn_layer_norm", "ln1" }, { "fc1", "mlp.up_proj" },
                         { "fc2", "mlp.down_proj" }, { "final_layer_norm", "ln2" } } do
      for _, wb in ipairs { "weight", "bias" } do
        local p = P[o .. m[2] .. "." .. wb]
        local s = p:size()
        out[#out + 1] = { h .. m[1] .. "." .. wb, s, copy(p) }
      end
    end
  end
  if c.ln_before then
    out[#out + 1] = { pre .. "final_layer_norm.weight", { Cd }, copy(P["final_layer_norm.weight"]) }
    out[#out + 1] = { pre .. "final_layer_norm.bias", { Cd }, copy(P["final_layer_norm.bias"]) }
  end
  out[#out + 1] = { "lm_head.weight", { c.vocab_size, E }, copy(P["embed_tokens.weight"]) }   -- tied: the same values
  return out, { model_type = "opt", vocab_size = c.vocab_size, max_position_embeddings = c.block_size, hidden_size = Cd,
                word_embed_proj_dim = E, ffn_dim = F, num_hidden_layers = c.n_layer, num_attention_heads = c.n_head,
                activation_function = "relu", do_layer_norm_before = c.ln_before }
end
function writers.bert(P, c, pre)
  local Cd = c.d_model
  local out = {}
  local function add(n, p) out[#out + 1] = { n, p:size(), copy(p) } end
  add(pre .. "embeddings.word_embeddings.weight", P["embeddings.word.weight"])
  add(pre .. "embeddings.position_embeddings.weight", P["embeddings.position.weight"])
  add(pre .. "embeddings.token_type_embeddings.weight", P["embeddings.token_type.weight"])
  -- old BERT checkpoints name LayerNorm parameters gamma/beta
  add(pre .. "embeddings.LayerNorm.gamma", P["embeddings.ln.weight"])
  add(pre .. "embeddings.LayerNorm.beta", P["embeddings.ln.bias"])
  for l = 0, c.n_layer - 1 do
    local o, h = "layer" .. l .. ".", pre .. "encoder.layer." .. l .. "."
    for _, m in ipairs { { "attention.self.query", "attn.q_proj" }, { "attention.self.key", "attn.k_proj" },
                         { "attention.self.value", "attn.v_proj" }, { "attention.output.dense", "attn.o_proj" },
                         { "attention.output.LayerNorm", "ln1" }, { "intermediate.dense", "mlp.up_proj" },
                         { "output.dense", "mlp.down_proj" }, { "output.LayerNorm", "ln2" } } do
      add(h .. m[1] .. ".weight", P[o .. m[2] .. ".weight"])
      add(h .. m[1] .. ".bias", P[o .. m[2] .. ".bias"])
    end
  end
  add(pre .. "pooler.dense.weight", P["pooler.weight"]); add(pre .. "pooler.dense.bias", P["pooler.bias"])
  add("cls.predictions.transform.dense.weight", P["mlm.dense.weight"]); add("cls.predictions.transform.dense.bias", P["mlm.dense.bias"])
  add("cls.predictions.transform.LayerNorm.weight", P["mlm.ln.weight"]); add("cls.predictions.transform.LayerNorm.bias", P["mlm.ln.bias"])
  add("cls.predictions.bias", P["mlm.bias"])
  add("cls.predictions.decoder.weight", P["embeddings.word.weight"]); add("cls.predictions.decoder.bias", P["mlm.bias"])
  -- BertForPreTraining's next-sentence head (skipped by the importer)
  out[#out + 1] = { "cls.seq_relationship.weight", { 2, Cd }, ffi.new("float[?]", 2 * Cd) }
  out[#out + 1] = { "cls.seq_relationship.bias", { 2 }, ffi.new("float[2]") }
  return out, { model_type = "bert", vocab_size = c.vocab_size, max_position_embeddings = c.block_size, type_vocab_size = c.type_vocab_size,
                hidden_size = Cd, intermediate_size = c.d_ff, num_hidden_layers = c.n_layer, num_attention_heads = c.n_head,
                hidden_act = "gelu", layer_norm_eps = 1e-12 }
end
function writers.llama(P, c, pre)
  local out = {}
  local function add(n, p) out[#out + 1] = { n, p:size(), copy(p) } end
  add(pre .. "embed_tokens.weight", P["embed_tokens.weight"])
  for l = 0, c.n_layer - 1 do
    local o, h = "layers" .. l .. ".", pre .. "layers." .. l .. "."
    for _, m in ipairs { { "self_attn.q_proj", "attn.q_proj" }, { "self_attn.k_proj", "attn.k_proj" }, { "self_attn.v_proj", "attn.v_proj" },
                         { "self_attn.o_proj", "attn.o_proj" }, { "mlp.gate_proj", "mlp.gate_proj" }, { "mlp.up_proj", "mlp.up_proj" },
                         { "mlp.down_proj", "mlp.down_proj" }, { "input_layernorm", "ln1" }, { "post_attention_layernorm", "ln2" } } do
      add(h .. m[1] .. ".weight", P[o .. m[2] .. ".weight"])
    end
    out[#out + 1] = { h .. "self_attn.rotary_emb.inv_freq", { c.d_model / c.n_head / 2 }, ffi.new("float[?]", c.d_model / c.n_head / 2) }
  end
  add(pre .. "norm.weight", P["norm.weight"])
  if not c.tie_embeddings then add("lm_head.weight", P["lm_head.weight"]) end
  return out, { model_type = "llama", vocab_size = c.vocab_size, max_position_embeddings = c.block_size, hidden_size = c.d_model,
                intermediate_size = c.d_ff, num_hidden_layers = c.n_layer, num_attention_heads = c.n_head,
                num_key_value_heads = c.n_kv_head, hidden_act = "silu", rms_norm_eps = c.norm_eps, rope_theta = c.rope_base,
                tie_word_embeddings = c.tie_embeddings, rope_scaling = json.null }
end
function writers.vit(P, c, pre)
  local Cd, Pz = c.d_model, c.patch_size
  local N = (c.image_size / Pz) ^ 2
  local out = {}
  local function add(n, s, p) out[#out + 1] = { n, s or p:size(), copy(p) } end
  add(pre .. "embeddings.cls_token", { 1, 1, Cd }, P["cls_token"])
  add(pre .. "embeddings.position_embeddings", { 1, N + 1, Cd }, P["pos_embed"])
  add(pre .. "embeddings.patch_embeddings.projection.weight", { Cd, 3, Pz, Pz }, P["patch_embed.weight"])
  add(pre .. "embeddings.patch_embeddings.projection.bias", nil, P["patch_embed.bias"])
  for l = 0, c.n_layer - 1 do
    local o, h = "blocks" .. l .. ".", pre .. "encoder.layer." .. l .. "."
    for _, m in ipairs { { "layernorm_before", "ln1" }, { "attention.attention.query", "attn.q_proj" }, { "attention.attention.key", "attn.k_proj" },
                         { "attention.attention.value", "attn.v_proj" }, { "attention.output.dense", "attn.o_proj" },
                         { "layernorm_after", "ln2" }, { "intermediate.dense", "mlp.up_proj" }, { "output.dense", "mlp.down_proj" } } do
      add(h .. m[1] .. ".weight", nil, P[o .. m[2] .. ".weight"])
      add(h .. m[1] .. ".bias", nil, P[o .. m[2] .. ".bias"])
    end
  end
  add(pre .. "layernorm.weight", nil, P["norm.weight"]); add(pre .. "layernorm.bias", nil, P["norm.bias"])
  add("classifier.weight", nil, P["head.weight"]); add("classifier.bias", nil, P["head.bias"])
  local id2label = {}
  for i = 0, c.n_classes - 1 do id2label[tostring(i)] = "class" .. i end
  return out, { model_type = "vit", image_size = c.image_size, patch_size = Pz, num_channels = 3, hidden_size = Cd,
                intermediate_size = c.d_ff, num_hidden_layers = c.n_layer, num_attention_heads = c.n_head, hidden_act = "gelu",
                layer_norm_eps = c.norm_eps, qkv_bias = true, id2label = id2label }
end

-- ---------------------------------------------------------------- models and batches
local function build(cfg, seed)
  local ctx = ol.Context{ params = 4 * 1024 * 1024, step_bytes = 256 * 1024 * 1024, seed = seed }
  local m = models.build(ctx, cfg)
  -- every parameter random (biases and norm gains too), so a swapped tensor cannot go unnoticed
  for i, p in ipairs(ctx:params()) do p:normal_(0, 0.3, seed * 1000 + i) end
  m:eval()
  return ctx, m
end
local function batch_for(ctx, cfg)
  if cfg.family == "vit" then
    local img = ctx:tensor({ 2, 3, cfg.image_size, cfg.image_size }, { name = "images" }):normal_(0, 1, 7)
    return { images = img }
  end
  local B, T = 2, math.min(12, cfg.block_size)
  local ids = ctx:tensor({ B, T }, { dtype = "i32", name = "ids" })
  for i = 0, B * T - 1 do ids.idata[i] = (i * 37 + 11) % cfg.vocab_size end
  local b = { ids = ids }
  if cfg.family == "bert" then
    b.token_type = ctx:tensor({ B, T }, { dtype = "i32", name = "tt" })
    for i = 0, B * T - 1 do b.token_type.idata[i] = i % T >= T / 2 and 1 or 0 end
  end
  return b
end
local function logits(ctx, m)
  return ctx:no_grad(function()
    ctx:reset()
    local out = m:forward(batch_for(ctx, m.cfg))
    local v = {}
    for i = 0, tonumber(out.numel) - 1 do v[i + 1] = out.data[i] end
    return v
  end)
end
local function max_rel(a, b)
  local d, s = 0, 0
  for i = 1, #a do d = math.max(d, math.abs(a[i] - b[i])) s = math.max(s, math.abs(a[i])) end
  return d / s, #a == #b
end
-- round every parameter to dtype and back (what a F16/BF16 file holds)
local function round_params(ctx, dtype)
  for _, p in ipairs(ctx:params()) do
    local n = tonumber(p.numel)
    local h = ffi.new("uint16_t[?]", n)
    assert(C.ol_hf_from_f32(p.data, n, DT[dtype], h) == 0)
    assert(C.ol_hf_to_f32(h, DT[dtype], n, p.data) == 0)
  end
end
local function params_equal(ca, cb)
  local pa, pb = hf.params_by_name(ca), hf.params_by_name(cb)
  local n = 0
  for name, p in pairs(pa) do
    local q = pb[name]
    if not q or q.numel ~= p.numel or ffi.C.memcmp(p.data, q.data, 4 * tonumber(p.numel)) ~= 0 then return false, name end
    n = n + 1
  end
  for name in pairs(pb) do if not pa[name] then return false, name end end
  return true, n
end

local cases = {
  { "gpt2", models.preset("gpt2-quick", { bias = true, tie_embeddings = true }), "transformer." },
  { "opt", models.preset("opt-quick", { dropout = 0.0 }), "model.decoder." },
  { "opt-350m-style", models.preset("opt-quick", { dropout = 0.0, d_embed = 32, ln_before = false }), "model.decoder." },
  { "bert", models.preset("bert-quick", { dropout = 0.0, pooler = true }), "bert." },
  { "llama", models.preset("llama-quick", { n_kv_head = 1, rope_base = 500000.0, norm_eps = 1e-5 }), "model." },
  { "llama-tied", models.preset("llama-quick", { n_head = 4, n_kv_head = 2, tie_embeddings = true }), "" },
  { "vit", models.preset("vit-quick", { dropout = 0.0 }), "vit." },
}

for ci, case in ipairs(cases) do
  local label, cfg, pre = case[1], case[2], case[3]
  local ctx, m = build(cfg, ci)
  local ref = logits(ctx, m)
  local tensors, conf = writers[cfg.family](hf.params_by_name(ctx), m.cfg, pre)
  local dir = root .. "/" .. label
  -- F32, one file
  write_dir(dir, conf, tensors, "F32")
  local ctx2, m2, info = hf.load(dir)
  t.is(info.family, cfg.family, label .. ": family from config.json")
  local r, same_n = max_rel(ref, logits(ctx2, m2))
  t.ok(same_n and r < 1e-5, label .. ": F32 import, logits equal the original's (max rel diff " .. string.format("%.2g", r) .. ")")
  t.ok(params_equal(ctx, ctx2), label .. ": F32 import, every parameter bit-identical")
  -- export writes what the independent writer wrote (names, shapes, bytes)
  local edir = dir .. "-export"
  hf.export(edir, ctx2, m2, { prefix = pre ~= "" })
  local want, got = {}, {}
  -- (the old gamma/beta LayerNorm names are written as weight/bias)
  for _, x in ipairs(tensors) do want[(x[1]:gsub("LayerNorm%.gamma$", "LayerNorm.weight"):gsub("LayerNorm%.beta$", "LayerNorm.bias"))] = x end
  local ef = ffi.gc(C.ol_st_open(edir .. "/model.safetensors"), C.ol_st_close)
  local okx, why = true, nil
  local nb = ffi.new("int64_t[1]")
  for i = 0, C.ol_st_count(ef) - 1 do
    local name = ffi.string(C.ol_st_name(ef, i))
    got[name] = true
    local w = want[name]
    if not w then okx, why = false, "extra " .. name break end
    local p = C.ol_st_data(ef, i, nb)
    if tonumber(nb[0]) ~= 4 * numel(w[2]) or ffi.C.memcmp(p, w[3], nb[0]) ~= 0 then okx, why = false, "bytes of " .. name break end
  end
  for name in pairs(want) do
    local skip = name:match("attn%.bias$") or name:match("seq_relationship") or name:match("inv_freq") or name:match("pooler") and cfg.family ~= "bert"
    if okx and not got[name] and not skip and not (name == "lm_head.weight" and cfg.family == "opt") and not name:match("decoder%.") then
      okx, why = false, "missing " .. name
    end
  end
  t.ok(okx, label .. ": hf.export writes the tensors Hugging Face's layout has", why)
  local ctx3 = hf.load(edir)
  t.ok(params_equal(ctx2, ctx3), label .. ": export -> import round trip is exact")
  -- BF16 and F16, sharded
  for _, dt in ipairs { "BF16", "F16" } do
    local nshards = write_dir(dir, conf, tensors, dt, 40000)
    local ctx4, m4 = hf.load(dir)
    round_params(ctx, dt)
    local rr = max_rel(logits(ctx, m), logits(ctx4, m4))
    t.ok(rr < 1e-5 and nshards > 1, string.format("%s: %s import from %d shards, logits equal the rounded original's (max rel diff %.2g)", label, dt, nshards, rr))
    ctx, m = build(cfg, ci)   -- fresh fp32 weights for the next dtype
  end
end

-- a bias-free GPT-2 (SO's) exports zeros for the biases Hugging Face's GPT-2 always has
do
  local cfg = models.preset("gpt2-quick")
  local ctx, m = build(cfg, 42)
  local ref = logits(ctx, m)
  local dir = root .. "/gpt2-nobias"
  hf.export(dir, ctx, m, { dtype = "F32", shard_bytes = 60000 })
  t.ok(io.open(dir .. "/model.safetensors.index.json") ~= nil, "gpt2 without biases: export sharded with an index")
  local ctx2, m2 = hf.load(dir)
  local r = max_rel(ref, logits(ctx2, m2))
  t.ok(r < 1e-6 and m2.cfg.bias == true, string.format("gpt2 without biases: imported as a GPT-2 with zero biases, same logits (%.2g)", r))
end

os.execute("rm -rf " .. root)
return t.done()
