-- hf — Hugging Face model directories: import a pretrained checkpoint into the project's own
-- models, and export the project's models in the same layout (docs/reference/pretrained.md).
--
--   local hf = require "outlierlab.pretrained.hf"
--   local ctx, m, info = hf.load("models/gpt2")        -- config.json + model.safetensors (or shards)
--   m:forward({ ids = ... })                           -- the project's GPT-2, eval mode
--   hf.export("out/my-llama", ctx, m, { dtype = "BF16", shard_bytes = 2^30 })
--   local d = hf.open("models/llama-2-7b")             -- names, shapes, config; nothing converted
--   d.cfg (the project's model config), d.hf (config.json), d.family, d:close()
--
-- A directory holds config.json and either model.safetensors or model.safetensors.index.json
-- with its shards (model-0000i-of-0000n.safetensors). Tensors may be F32, F16, BF16 (or F64)
-- and are converted to fp32 by engine/io_hf.c straight from the file's memory map, whose pages
-- are handed back once converted. Families (config.json "model_type"):
--   gpt2  GPT-2: Conv1D weights are stored (in, out), so they are transposed; the fused c_attn
--         (C, 3C) is split into q, k, v. The causal-mask buffers attn.bias/masked_bias are skipped.
--   opt   OPT: learned positions with the offset 2; project_in/project_out when
--         word_embed_proj_dim ≠ hidden_size; pre- or post-LN (do_layer_norm_before).
--   bert  BERT (BertForMaskedLM names, bert.* and cls.*): pooler when present, the MLM head
--         (transform + bias, decoder tied to the word embedding); the NSP head is skipped.
--   llama LLaMA: grouped-query attention, rope_theta, rms_norm_eps, tied or untied head. HF
--         stores q/k in the rotate-half layout that engine/ops_model.c's RoPE uses: no permutation.
--         LLaMA-3.1's rope_scaling "llama3" (modeling_rope_utils.py _compute_llama3_parameters)
--         becomes the model's rope_factor keys (rope_scaling below).
--   mistral  Mistral (modeling_mistral.py MistralForCausalLM): LLaMA's names and block;
--         sliding_window bounds the sequence length (the window masks nothing for
--         T <= sliding_window; the engine's attention has none), see from_hf.mistral.
--   phi3  Phi-3 (modeling_phi3.py Phi3ForCausalLM): LLaMA's block with fused qkv_proj and
--         gate_up_proj split into q, k, v, gate, up by rows (layout.phi3); sliding_window as
--         Mistral's.
--   qwen2, qwen3, gemma, gemma2  (modeling_qwen2.py, modeling_qwen3.py, modeling_gemma.py,
--         modeling_gemma2.py): LLaMA's names, imported into the llama model with the options of
--         models/llama.lua (q/k/v biases; q_norm/k_norm and head_dim; Gemma's (1 + w) norm gains
--         stored as 1 + w, GeGLU, √d embedding scale; Gemma 2's four norms, soft-capping,
--         query_pre_attn_scalar and a window on the even layers), see from_hf.qwen2 … gemma2.
--   phi   Phi-1/1.5/2 (modeling_phi.py PhiForCausalLM): one LayerNorm feeding attention and MLP in
--         parallel, partial rotary, biases everywhere, lm_head bias, optional qk_layernorm
--         (from_hf.phi, layout.phi).
--   falcon  Falcon (modeling_falcon.py FalconForCausalLM): parallel blocks from one or two
--         LayerNorms (or sequential), the fused query_key_value in _split_heads' three layouts
--         (new_decoder_architecture, multi_query, per head), rotary (from_hf.falcon, layout.falcon).
--   mpt   MPT (modeling_mpt.py MptForCausalLM): ALiBi, LayerNorms without bias, fused Wqkv,
--         clip_qkv, softmax_scale, tied head (from_hf.mpt, layout.mpt).
--   vit   ViT (vit.* and classifier): [CLS], the patch embedding convolution (C, 3, P, P) as
--         the linear layer over patches flattened in (channel, row, column) order.
-- Before anything is built, open() checks the config values (sizes 1 .. 2^31-1, heads dividing
-- the width, positive finite epsilons and rope_theta, each named by its config.json key), counts
-- the layers config.json asks for in the files, and resolves every tensor's shape and dtype;
-- load() and stream.open() refuse a tensor holding +-Inf or NaN (Dir:check_finite).
-- Every mismatch is an error that names the directory and the first tensor missing, extra or
-- mis-shaped (with the config key behind the expected shape), or the config key or family that
-- is not supported. PyTorch pickles (.bin, .pt) are refused, never unpickled: the message says
-- how to convert them.
local ol = require "outlierlab"
local json = require "outlierlab.util.json"
local models = require "outlierlab.models"
local ffi, C = ol.ffi, ol.C

local M = {}

pcall(ffi.cdef, "int memcmp(const void *a, const void *b, size_t n);")

local DTYPES = { F32 = C.OL_ST_F32, F16 = C.OL_ST_F16, BF16 = C.OL_ST_BF16, F64 = C.OL_ST_F64 }
local ESIZE = { F32 = 4, F16 = 2, BF16 = 2, F64 = 8 }
local TORCH_DTYPE = { F32 = "float32", F16 = "float16", BF16 = "bfloat16" }
M.FAMILIES = { "bert", "falcon", "gemma", "gemma2", "gpt2", "llama", "mistral", "mpt", "opt", "phi", "phi3", "qwen2", "qwen3", "vit" }

local function fail(where, fmt, ...) error("hf: " .. where .. ": " .. string.format(fmt, ...), 0) end
local function shape_str(s) return "(" .. table.concat(s, ",") .. ")" end

-- the whole content of a file, or nil
local function read_file(path)
  local f = io.open(path, "rb")
  local s = f and f:read("*a")
  if f then f:close() end
  return s
end
M.read_file = read_file

-- the XXH64 of a file's whole content as 16 hex digits (engine/io_hf.c ol_hf_hash_file):
-- content-based cache keys for every file an analysis of an imported model reads
local hash_buf = ffi.new("uint64_t[1]")
function M.hash_file(path)
  if C.ol_hf_hash_file(path, hash_buf) ~= 0 then ol.engine_error(1) end
  local h = hash_buf[0]
  return bit.tohex(tonumber(h / 0x100000000ULL)) .. bit.tohex(tonumber(h % 0x100000000ULL))
end

local function read_json(path, what)
  local text = read_file(path)
  if not text then return nil end
  local ok, v = pcall(json.decode, text, path)
  if not ok then fail(what or path, "%s is not valid JSON: %s", path:match("([^/]+)$"), tostring(v):gsub("\n", " ")) end
  if type(v) ~= "table" or v[1] ~= nil then fail(what or path, "%s must hold a JSON object", path:match("([^/]+)$")) end
  return v
end

local function exists(path) local f = io.open(path, "rb") if f then f:close() return true end return false end
local function is_dir(path) return os.execute("test -d '" .. path:gsub("'", "'\\''") .. "'") == 0 end
local function is_file(path) return os.execute("test -f '" .. path:gsub("'", "'\\''") .. "'") == 0 end
M.is_dir, M.is_file = is_dir, is_file
-- an engine error (safetensors header, …) as one line without a Lua source position
local function engine_fail(where)
  local msg = ffi.string(C.ol_error())
  C.ol_clear_error()
  error("hf: " .. where .. ": " .. (msg ~= "" and msg or "engine call failed"), 0)
end
local list_dir = require("outlierlab.util.fs").list_dir

-- ---------------------------------------------------------------- config.json <-> model config

local ACT = { gelu = "gelu_erf", gelu_new = "gelu_tanh", gelu_pytorch_tanh = "gelu_tanh", relu = "relu" }
local ACT_HF = { gelu_erf = "gelu", gelu_tanh = "gelu_new", relu = "relu" }

-- hf: the config.json table; key: its name; default: value when absent (nil: required).
-- Integers are bounded (0 .. 2^31 - 1) here, and by the file's tensors in M.open before
-- anything is built: a size in config.json never allocates more than the files hold.
local MAX_INT = 2 ^ 31 - 1
local function show(v) local ok, s = pcall(json.encode, v) return ok and s or tostring(v) end
local function key(hf, dir, k, default, kind)
  local v = hf[k]
  if v == nil then
    if default == nil then fail(dir, "config.json has no '%s'", k) end
    return default
  end
  kind = kind or type(default)
  if kind == "integer" then
    if type(v) ~= "number" or v ~= math.floor(v) or v < 0 then fail(dir, "config.json '%s' must be a non-negative integer, got %s", k, show(v)) end
    if v > MAX_INT then fail(dir, "config.json '%s' = %s is out of range (at most %d)", k, show(v), MAX_INT) end
  elseif kind ~= "nil" and type(v) ~= kind then
    fail(dir, "config.json '%s' must be a %s, got %s", k, kind, show(v))
  end
  return v
end
local function int(hf, dir, k, default) return key(hf, dir, k, default, "integer") end
-- a size that must be at least 1
local function size(hf, dir, k, default)
  local v = int(hf, dir, k, default)
  if v < 1 then fail(dir, "config.json '%s' = %s must be at least 1", k, show(v)) end
  return v
end
-- a positive finite number (epsilons, rope_theta): a negative epsilon or theta gives NaN
local function positive(hf, dir, k, default)
  local v = key(hf, dir, k, default, "number")
  if not (v > 0 and v < math.huge) then fail(dir, "config.json '%s' = %s must be a positive finite number", k, v ~= v and "NaN" or tostring(v)) end
  return v
end
-- heads: hk = heads key, dk = width key; kvk = key-value heads key (optional)
local function heads(dir, hk, nh, dk, d, kvk, kv)
  if d % nh ~= 0 then fail(dir, "config.json '%s' = %d does not divide '%s' = %d", hk, nh, dk, d) end
  if kvk and nh % kv ~= 0 then fail(dir, "config.json '%s' = %d does not divide '%s' = %d", kvk, kv, hk, nh) end
end
-- keys whose other values change the computation and are not supported
local function must(hf, dir, k, allowed, family)
  local v = hf[k]
  if v == nil then return end
  for _, a in ipairs(allowed) do if v == a then return end end
  fail(dir, "config.json '%s' = %s is not supported for %s (supported: %s)", k, json.encode(v), family,
       table.concat((function() local o = {} for i, a in ipairs(allowed) do o[i] = json.encode(a) end return o end)(), ", "))
end
local function act(hf, dir, k, default, family)
  local a = key(hf, dir, k, default, "string")
  if not ACT[a] then fail(dir, "config.json '%s' = \"%s\" is not supported for %s (supported: gelu, gelu_new, gelu_pytorch_tanh, relu)", k, a, family) end
  return ACT[a]
end
local function n_classes(hf, dir)
  if type(hf.id2label) == "table" then local n = 0 for _ in pairs(hf.id2label) do n = n + 1 end if n > 0 then return n end end
  return int(hf, dir, "num_labels", 2)
end

-- config.json -> the project's model config (family defaults under it)
local from_hf = {}
function from_hf.gpt2(hf, dir)
  must(hf, dir, "scale_attn_weights", { true }, "gpt2")
  must(hf, dir, "scale_attn_by_inverse_layer_idx", { false }, "gpt2")
  must(hf, dir, "add_cross_attention", { false }, "gpt2")
  local Cd, NH = size(hf, dir, "n_embd"), size(hf, dir, "n_head")
  heads(dir, "n_head", NH, "n_embd", Cd)
  local inner = hf.n_inner ~= nil and hf.n_inner ~= json.null and size(hf, dir, "n_inner") or nil
  return { family = "gpt2", vocab_size = size(hf, dir, "vocab_size"), block_size = size(hf, dir, "n_positions", 1024),
           n_layer = size(hf, dir, "n_layer"), n_head = NH, d_model = Cd,
           d_ff = inner or 4 * Cd, bias = true, dropout = 0.0,
           tie_embeddings = key(hf, dir, "tie_word_embeddings", true), norm_eps = positive(hf, dir, "layer_norm_epsilon", 1e-5),
           act = act(hf, dir, "activation_function", "gelu_new", "gpt2") }
end
function from_hf.opt(hf, dir)
  must(hf, dir, "layer_norm_elementwise_affine", { true }, "opt")
  must(hf, dir, "tie_word_embeddings", { true }, "opt")
  must(hf, dir, "_remove_final_layer_norm", { false }, "opt")
  local Cd, NH = size(hf, dir, "hidden_size"), size(hf, dir, "num_attention_heads")
  heads(dir, "num_attention_heads", NH, "hidden_size", Cd)
  local E = size(hf, dir, "word_embed_proj_dim", Cd)
  return { family = "opt", vocab_size = size(hf, dir, "vocab_size"), block_size = size(hf, dir, "max_position_embeddings"),
           n_layer = size(hf, dir, "num_hidden_layers"), n_head = NH, d_model = Cd,
           d_ff = size(hf, dir, "ffn_dim"), bias = key(hf, dir, "enable_bias", true), dropout = 0.0, norm_eps = 1e-5,
           act = act(hf, dir, "activation_function", "relu", "opt"), d_embed = E ~= Cd and E or 0,
           ln_before = key(hf, dir, "do_layer_norm_before", true) }
end
function from_hf.bert(hf, dir)
  must(hf, dir, "position_embedding_type", { "absolute" }, "bert")
  must(hf, dir, "is_decoder", { false }, "bert")
  must(hf, dir, "add_cross_attention", { false }, "bert")
  local Cd, NH = size(hf, dir, "hidden_size"), size(hf, dir, "num_attention_heads")
  heads(dir, "num_attention_heads", NH, "hidden_size", Cd)
  return { family = "bert", vocab_size = size(hf, dir, "vocab_size"), block_size = size(hf, dir, "max_position_embeddings", 512),
           type_vocab_size = size(hf, dir, "type_vocab_size", 2), n_layer = size(hf, dir, "num_hidden_layers"),
           n_head = NH, d_model = Cd,
           d_ff = size(hf, dir, "intermediate_size"), dropout = 0.0, norm_eps = positive(hf, dir, "layer_norm_eps", 1e-12),
           act = act(hf, dir, "hidden_act", "gelu", "bert"), pooler = false }
end
-- a sub-object of config.json (rope_scaling, attn_config), or nil when absent or null: a table
-- whose keys are read as "k.key", so that the helpers above name them so in messages
-- (config.json 'rope_scaling.factor')
local function sub(hf, dir, k)
  local v = hf[k]
  if v == nil or v == json.null then return nil end
  if type(v) ~= "table" or v[1] ~= nil then fail(dir, "config.json '%s' must be an object or null, got %s", k, show(v)) end
  return setmetatable({}, { __index = function(_, name) return v[name:sub(#k + 2)] end })
end
-- rope_scaling: null (plain RoPE), {"rope_type": "default"}, or for fam "llama" LLaMA-3.1's
-- {"rope_type": "llama3", factor, low_freq_factor, high_freq_factor,
-- original_max_position_embeddings} (modeling_rope_utils.py _compute_llama3_parameters: the
-- model's rope_factor … keys, models/llama.lua llama3_inv_freq); "type" is the old name of
-- "rope_type" (modeling_rope_utils.py's BC). Every other scaling is refused naming the key.
local function rope_scaling(hf, dir, fam, c)
  local rs = sub(hf, dir, "rope_scaling")
  if not rs then return c end
  local rt = hf.rope_scaling.rope_type
  if rt == nil then rt = hf.rope_scaling.type end
  if rt == "default" then return c end
  if rt ~= "llama3" or fam ~= "llama" then
    fail(dir, "config.json 'rope_scaling' = %s is not supported for %s (only null: plain RoPE%s)", json.encode(hf.rope_scaling), fam,
         fam == "llama" and "; or rope_type \"llama3\", LLaMA-3.1's" or "")
  end
  c.rope_factor = positive(rs, dir, "rope_scaling.factor")
  c.rope_low_freq_factor = positive(rs, dir, "rope_scaling.low_freq_factor")
  c.rope_high_freq_factor = positive(rs, dir, "rope_scaling.high_freq_factor")
  if not (c.rope_high_freq_factor > c.rope_low_freq_factor) then
    fail(dir, "config.json 'rope_scaling.high_freq_factor' = %s must be greater than 'rope_scaling.low_freq_factor' = %s (the smooth interpolation divides by their difference)",
         show(c.rope_high_freq_factor), show(c.rope_low_freq_factor))
  end
  c.rope_original_max_pos = size(rs, dir, "rope_scaling.original_max_position_embeddings")
  return c
end
-- LLaMA (modeling_llama.py LlamaForCausalLM) and the families that are LLaMA's block with
-- other config keys: fam names the family in messages
local function llama_like(hf, dir, fam)
  must(hf, dir, "hidden_act", { "silu" }, fam)
  must(hf, dir, "attention_bias", { false }, fam)
  must(hf, dir, "mlp_bias", { false }, fam)
  local Cd, NH = size(hf, dir, "hidden_size"), size(hf, dir, "num_attention_heads")
  local KV = size(hf, dir, "num_key_value_heads", NH)
  heads(dir, "num_attention_heads", NH, "hidden_size", Cd, "num_key_value_heads", KV)
  if hf.head_dim ~= nil and hf.head_dim ~= json.null and int(hf, dir, "head_dim") * NH ~= Cd then
    fail(dir, "config.json 'head_dim' = %d with %d heads differs from hidden_size %d: not supported for %s", hf.head_dim, NH, Cd, fam)
  end
  return rope_scaling(hf, dir, fam, {
           family = "llama", vocab_size = size(hf, dir, "vocab_size"), block_size = size(hf, dir, "max_position_embeddings", 2048),
           n_layer = size(hf, dir, "num_hidden_layers"), n_head = NH, n_kv_head = KV,
           d_model = Cd, d_ff = size(hf, dir, "intermediate_size"), norm_eps = positive(hf, dir, "rms_norm_eps", 1e-6),
           rope_base = positive(hf, dir, "rope_theta", 10000.0), tie_embeddings = key(hf, dir, "tie_word_embeddings", false),
           init = "hf", dropout = 0.0 })
end
function from_hf.llama(hf, dir) return llama_like(hf, dir, "llama") end
-- Mistral (modeling_mistral.py MistralForCausalLM): LLaMA's block and tensor names, with a
-- sliding window (each query sees the last sliding_window keys: key j for query i when
-- i − j < sliding_window). For T <= sliding_window the window masks nothing, so the model is
-- LLaMA's exactly; the engine's attention has no window, so sliding_window bounds the sequence
-- length (block_size): a longer sequence is refused by the model, never computed unwindowed.
-- sliding_window null (Mistral-7B v0.2 and later) means full causal attention.
local function sliding_window(hf, dir, c)
  if hf.sliding_window ~= nil then
    local w = size(hf, dir, "sliding_window")
    if w < c.block_size then c.block_size = w end
  end
  return c
end
function from_hf.mistral(hf, dir) return sliding_window(hf, dir, llama_like(hf, dir, "mistral")) end
-- Phi-3 (modeling_phi3.py Phi3ForCausalLM; Phi-3-mini/medium 4k): LLaMA's block (RMSNorm,
-- rotate-half RoPE over the whole head, SwiGLU) with fused projections: qkv_proj (q | k | v
-- rows: num_attention_heads·head_dim, then num_key_value_heads·head_dim twice) and
-- gate_up_proj (gate | up rows: modeling_phi3's chunk(2, dim=-1) then up · silu(gate)); the
-- import copies each row block into the project's q, k, v, gate and up (layout.phi3).
-- sliding_window as Mistral's. Refused: rope_scaling (the 128k models' "longrope"/"su") and a
-- partial_rotary_factor below 1 (Phi-4-mini).
function from_hf.phi3(hf, dir)
  must(hf, dir, "partial_rotary_factor", { 1, 1.0 }, "phi3")
  return sliding_window(hf, dir, llama_like(hf, dir, "phi3"))
end
-- an explicit head_dim (Qwen3, Gemma): null or absent means hidden_size / num_attention_heads
local function head_dim(hf, dir, c, default)
  local v = hf.head_dim
  if v == nil or v == json.null then
    if default then v = default else return c end
  else
    v = size(hf, dir, "head_dim")
  end
  if v % 2 ~= 0 then fail(dir, "config.json 'head_dim' = %d must be even (RoPE rotates pairs of dims)", v) end
  if v * c.n_head ~= c.d_model then c.head_dim = v end
  return c
end
-- the keys of a LLaMA-like block that these families do not use or refuse (named in messages)
local function no_window(hf, dir, fam)
  if hf.use_sliding_window == true then
    fail(dir, "config.json 'use_sliding_window' = true is not supported for %s (the released models have false: full causal attention)", fam)
  end
end
-- Qwen2 / Qwen2.5 (modeling_qwen2.py Qwen2ForCausalLM, Qwen2Attention): LLaMA's block with
-- biases on q_proj, k_proj and v_proj (bias=True) and none on o_proj; tied (0.5B–3B) or
-- untied head. use_sliding_window (false in every released model) is refused when true.
function from_hf.qwen2(hf, dir)
  no_window(hf, dir, "qwen2")
  local hf2 = setmetatable({ attention_bias = false }, { __index = hf })
  local c = llama_like(hf2, dir, "qwen2")
  c.qkv_bias = true
  return c
end
-- Qwen3 (modeling_qwen3.py Qwen3ForCausalLM, Qwen3Attention): an explicit head_dim (often
-- n_head·head_dim ≠ hidden_size), q_norm and k_norm — Qwen3RMSNorm(head_dim) applied to every
-- head of q and k after the projection and before RoPE — and no biases unless attention_bias
-- (then on q, k, v and o).
function from_hf.qwen3(hf, dir)
  no_window(hf, dir, "qwen3")
  local ab = key(hf, dir, "attention_bias", false)
  local hf2 = setmetatable({ attention_bias = false, head_dim = json.null }, { __index = hf })
  local c = head_dim(hf, dir, llama_like(hf2, dir, "qwen3"), 128)
  c.qk_norm = true
  c.qkv_bias, c.o_bias = ab, ab
  return c
end
-- Gemma's activation (modeling_gemma.py GemmaMLP): hidden_activation when given, otherwise
-- gelu_pytorch_tanh whatever hidden_act says (transformers ≥ 4.39: "Gemma's activation
-- function should be approximate GeLU and not exact GeLU")
local function gemma_act(hf, dir, fam)
  local a = hf.hidden_activation
  if a == nil or a == json.null then return "gelu_tanh" end
  a = key(hf, dir, "hidden_activation", "", "string")
  local ok = { gelu_pytorch_tanh = "gelu_tanh", gelu_new = "gelu_tanh", gelu = "gelu_erf", silu = "silu" }
  if not ok[a] then fail(dir, "config.json 'hidden_activation' = \"%s\" is not supported for %s (supported: gelu_pytorch_tanh, gelu_new, gelu, silu)", a, fam) end
  return ok[a]
end
-- Gemma (modeling_gemma.py GemmaForCausalLM): LLaMA's names and block with GemmaRMSNorm —
-- x/√(mean(x²)+eps)·(1 + w), computed in fp32: the import stores 1 + w (rounded to fp32, as
-- HF's 1.0 + weight.float()) as the gain (layout entries plus_one) —, GeGLU (gelu tanh),
-- explicit head_dim, the embeddings times √hidden_size (HF: a tensor of the hidden dtype;
-- the engine computes in fp32, so fp32(√d)) and the head tied to the embedding.
local function gemma_like(hf, dir, fam)
  must(hf, dir, "tie_word_embeddings", { true }, fam)
  local hf2 = setmetatable({ hidden_act = "silu", head_dim = json.null, tie_word_embeddings = true }, { __index = hf })
  local c = head_dim(hf, dir, llama_like(hf2, dir, fam), 256)
  c.act = gemma_act(hf, dir, fam)
  c.embed_scale = tonumber(ffi.new("float", math.sqrt(c.d_model)))
  return c
end
function from_hf.gemma(hf, dir) return gemma_like(hf, dir, "gemma") end
-- Gemma 2 (modeling_gemma2.py Gemma2ForCausalLM, Gemma2DecoderLayer, eager_attention_forward):
-- Gemma's block with four norms (input_layernorm → attention → post_attention_layernorm → +x;
-- pre_feedforward_layernorm → MLP → post_feedforward_layernorm → +x), the score scale
-- query_pre_attn_scalar^−½, attention soft-capping c·tanh(s/c) (attn_logit_softcapping), a
-- sliding window (sliding_window) on the even layers (layer_idx % 2 == 0; key j hidden from
-- query i when i − j ≥ sliding_window) and global attention on the odd ones, and final logit
-- soft-capping (final_logit_softcapping).
function from_hf.gemma2(hf, dir)
  local c = gemma_like(hf, dir, "gemma2")
  c.post_norms = true
  local q = positive(hf, dir, "query_pre_attn_scalar", 256)
  c.attn_scale = q ^ -0.5
  local function cap(k)
    local v = hf[k]
    if v == nil or v == json.null then return 0 end
    return positive(hf, dir, k)
  end
  c.attn_softcap, c.logit_softcap = cap("attn_logit_softcapping"), cap("final_logit_softcapping")
  if hf.sliding_window ~= nil and hf.sliding_window ~= json.null then
    c.window, c.window_every = size(hf, dir, "sliding_window", 4096), 2
  end
  return c
end
-- Phi-1, 1.5, 2 (modeling_phi.py PhiForCausalLM, PhiDecoderLayer, PhiAttention, PhiMLP): one
-- LayerNorm with bias (input_layernorm) feeds the attention and the MLP, whose outputs are
-- added to the residual together (PhiDecoderLayer: attn_outputs + feed_forward_hidden_states +
-- residual: the model's parallel = "shared"); q_proj, k_proj, v_proj and dense (the output
-- projection) with biases; the rotary embedding on the first rotary_ndims = int(head_dim ·
-- partial_rotary_factor) dims of each head (rotate_half on that slice, θ_i =
-- rope_theta^(−2i/rotary_ndims)), the other dims passed through (rotary_dim); optional
-- qk_layernorm: LayerNorm(head_dim) with bias on every q and k head after the projection and
-- before the rotary embedding (qk_norm with norm = "layernorm"); PhiMLP fc1 → hidden_act
-- (gelu_new: the tanh approximation) → fc2, with biases (mlp = "plain"); final_layernorm;
-- lm_head with a bias (head_bias), untied (tie_word_embeddings true is refused).
function from_hf.phi(hf, dir)
  must(hf, dir, "tie_word_embeddings", { false }, "phi")
  local Cd, NH = size(hf, dir, "hidden_size"), size(hf, dir, "num_attention_heads")
  local KV = NH
  if hf.num_key_value_heads ~= json.null then KV = size(hf, dir, "num_key_value_heads", NH) end
  heads(dir, "num_attention_heads", NH, "hidden_size", Cd, "num_key_value_heads", KV)
  local HD = Cd / NH
  if hf.head_dim ~= nil and hf.head_dim ~= json.null and int(hf, dir, "head_dim") ~= HD then
    fail(dir, "config.json 'head_dim' = %s differs from hidden_size / num_attention_heads = %d: not supported for phi (PhiAttention's q_layernorm has hidden_size / num_attention_heads)", show(hf.head_dim), HD)
  end
  local f = key(hf, dir, "partial_rotary_factor", 0.5, "number")
  if not (f > 0 and f <= 1) then fail(dir, "config.json 'partial_rotary_factor' = %s must be in (0, 1]", show(f)) end
  local rd = math.floor(HD * f)   -- int(head_dim * partial_rotary_factor)
  if rd < 2 or rd % 2 ~= 0 then
    fail(dir, "config.json 'partial_rotary_factor' = %s gives %d rotary dims of the head's %d: they must be even and at least 2 (rotate_half pairs dim i with i + rotary_ndims/2)", show(f), rd, HD)
  end
  return rope_scaling(hf, dir, "phi", {
    family = "llama", vocab_size = size(hf, dir, "vocab_size"), block_size = size(hf, dir, "max_position_embeddings", 2048),
    n_layer = size(hf, dir, "num_hidden_layers"), n_head = NH, n_kv_head = KV, d_model = Cd, d_ff = size(hf, dir, "intermediate_size"),
    norm = "layernorm", norm_bias = true, norm_eps = positive(hf, dir, "layer_norm_eps", 1e-5), mlp = "plain",
    act = act(hf, dir, "hidden_act", "gelu_new", "phi"), mlp_bias = true, qkv_bias = true, o_bias = true,
    qk_norm = key(hf, dir, "qk_layernorm", false), parallel = "shared", rotary_dim = rd < HD and rd or 0,
    rope_base = positive(hf, dir, "rope_theta", 10000.0), tie_embeddings = false, head_bias = true, init = "hf", dropout = 0.0 })
end
-- Falcon (modeling_falcon.py FalconForCausalLM, FalconDecoderLayer, FalconAttention, FalconMLP):
-- LayerNorms with bias; the attention and the MLP in parallel, x + (MLP + attention)
-- (FalconDecoderLayer: mlp_output += attention_output, then + residual): with
-- new_decoder_architecture (Falcon-40B, 180B) from two LayerNorms ln_attn and ln_mlp
-- (num_ln_in_parallel_attn 2, the default; parallel = "separate") or one input_layernorm
-- (num_ln_in_parallel_attn 1, Falcon2-11B; "shared"); without it (Falcon-7B) from one
-- input_layernorm when parallel_attn ("shared"), else sequentially with post_attention_layernorm
-- before the MLP ("none"). Key/value heads: num_kv_heads with new_decoder_architecture, one with
-- multi_query (Falcon-7B), every head otherwise; their rows interleave in query_key_value
-- (layout.falcon). Rotary embedding over the whole head (rope_theta); scores × head_dim^−½;
-- FalconMLP dense_h_to_4h → activation (gelu: exact) → dense_4h_to_h; biases on every linear
-- layer when bias; ln_f; lm_head tied to word_embeddings unless tie_word_embeddings is false.
-- Refused naming the key: alibi (Falcon-RW: its ALiBi, build_alibi_tensor, is not
-- implemented), rope_scaling, apply_residual_connection_post_layernorm, and the combinations
-- FalconDecoderLayer cannot run (new_decoder_architecture without parallel_attn,
-- num_ln_in_parallel_attn 2 without new_decoder_architecture).
function from_hf.falcon(hf, dir)
  must(hf, dir, "alibi", { false }, "falcon (ALiBi, build_alibi_tensor: the Falcon-RW models, is not implemented; the rotary models are)")
  must(hf, dir, "apply_residual_connection_post_layernorm", { false }, "falcon")
  local Cd, NH = size(hf, dir, "hidden_size"), size(hf, dir, "num_attention_heads")
  heads(dir, "num_attention_heads", NH, "hidden_size", Cd)
  if (Cd / NH) % 2 ~= 0 then fail(dir, "config.json 'hidden_size' / 'num_attention_heads' = %d must be even (the rotary embedding rotates pairs of dims)", Cd / NH) end
  local new = key(hf, dir, "new_decoder_architecture", false)
  local mq = key(hf, dir, "multi_query", true)
  local par = key(hf, dir, "parallel_attn", true)
  local nln = hf.num_ln_in_parallel_attn
  if nln == json.null then nln = nil end
  if nln ~= nil then
    nln = size(hf, dir, "num_ln_in_parallel_attn")
    if nln > 2 then fail(dir, "config.json 'num_ln_in_parallel_attn' = %d must be 1 or 2", nln) end
  end
  local KV, parallel
  local kv = hf.num_kv_heads
  if kv == json.null then kv = nil end
  if new then
    if not par then fail(dir, "config.json 'parallel_attn' = false with 'new_decoder_architecture' = true is not supported for falcon (FalconDecoderLayer has no sequential form of it)") end
    KV = kv and size(hf, dir, "num_kv_heads") or NH
    heads(dir, "num_attention_heads", NH, "hidden_size", Cd, "num_kv_heads", KV)
    parallel = (nln or 2) == 2 and "separate" or "shared"
  else
    if nln == 2 then fail(dir, "config.json 'num_ln_in_parallel_attn' = 2 needs 'new_decoder_architecture' = true (FalconDecoderLayer)") end
    KV = mq and 1 or NH
    if not mq and kv and size(hf, dir, "num_kv_heads") ~= NH then
      fail(dir, "config.json 'num_kv_heads' = %d with 'multi_query' = false and 'new_decoder_architecture' = false: every head has its key and value (num_kv_heads must be num_attention_heads = %d)", kv, NH)
    end
    parallel = par and "shared" or "none"
  end
  local bias = key(hf, dir, "bias", false)
  local F = hf.ffn_hidden_size
  F = (F ~= nil and F ~= json.null) and size(hf, dir, "ffn_hidden_size") or 4 * Cd
  return rope_scaling(hf, dir, "falcon", {
    family = "llama", vocab_size = size(hf, dir, "vocab_size"), block_size = size(hf, dir, "max_position_embeddings", 2048),
    n_layer = size(hf, dir, "num_hidden_layers"), n_head = NH, n_kv_head = KV, d_model = Cd, d_ff = F,
    norm = "layernorm", norm_bias = true, norm_eps = positive(hf, dir, "layer_norm_epsilon", 1e-5), mlp = "plain",
    act = act(hf, dir, "activation", "gelu", "falcon"), mlp_bias = bias, qkv_bias = bias, o_bias = bias, parallel = parallel,
    rope_base = positive(hf, dir, "rope_theta", 10000.0), tie_embeddings = key(hf, dir, "tie_word_embeddings", true),
    init = "hf", dropout = 0.0 })
end
-- MPT (modeling_mpt.py MptForCausalLM, MptBlock, MptAttention, MptMLP, build_mpt_alibi_tensor;
-- MptConfig with its attn_config): pre-LN blocks with LayerNorms without bias (norm_1, norm_2,
-- norm_f: "self.norm_1.bias = None"); Wqkv (3·d_model, d_model) chunked into q, k, v, clamped
-- to [−clip_qkv, clip_qkv] first when attn_config.clip_qkv is set (the model's clip_qkv:
-- common.clamp); scores × softmax_scale (null: (d_model / n_heads)^−½) plus ALiBi:
-- slope_h·(j − (T − 1)) for key j, slopes 2^(−i·alibi_bias_max/n), i = 1 … n, n the power of two
-- ≥ n_heads, and for n_heads < n the odd-indexed slopes first, then the even ones (the model's
-- alibi: common.alibi_slopes); no positions otherwise; out_proj; MptMLP up_proj (4·d_model: HF
-- ignores expansion_ratio) → exact GELU → down_proj, no biases; head tied to wte.
-- Refused naming the key: what HF's MptAttention does not compute (attn_config.alibi false,
-- attn_type other than multihead_attention, qk_ln, prefix_lm), no_bias false, logit_scale,
-- an expansion_ratio other than 4, an untied head.
function from_hf.mpt(hf, dir)
  local Cd, NH = size(hf, dir, "d_model"), size(hf, dir, "n_heads")
  heads(dir, "n_heads", NH, "d_model", Cd)
  if key(hf, dir, "expansion_ratio", 4, "number") ~= 4 then
    fail(dir, "config.json 'expansion_ratio' = %s is not supported for mpt (modeling_mpt.py's MptMLP has 4 × d_model)", show(hf.expansion_ratio))
  end
  must(hf, dir, "no_bias", { true }, "mpt (modeling_mpt.py's layers have no biases)")
  must(hf, dir, "norm_type", { "low_precision_layernorm", "layernorm" }, "mpt")
  must(hf, dir, "logit_scale", { json.null }, "mpt")
  must(hf, dir, "tie_word_embeddings", { true }, "mpt")
  local ac = sub(hf, dir, "attn_config") or {}
  must(ac, dir, "attn_config.alibi", { true }, "mpt (HF's MptModel always adds ALiBi)")
  must(ac, dir, "attn_config.attn_type", { "multihead_attention" }, "mpt")
  must(ac, dir, "attn_config.qk_ln", { false }, "mpt")
  must(ac, dir, "attn_config.prefix_lm", { false }, "mpt")
  local function opt_number(k, what)   -- null or absent: 0
    local v = ac[k]
    if v == nil or v == json.null then return 0 end
    v = key(ac, dir, k, 0, "number")
    if not (v >= 0 and v < math.huge) then fail(dir, "config.json '%s' = %s must be %s", k, show(v), what) end
    return v
  end
  local scale = opt_number("attn_config.softmax_scale", "a positive number or null")
  if ac["attn_config.softmax_scale"] ~= nil and ac["attn_config.softmax_scale"] ~= json.null and scale == 0 then
    fail(dir, "config.json 'attn_config.softmax_scale' = 0 must be a positive number or null")
  end
  return {
    family = "llama", vocab_size = size(hf, dir, "vocab_size"), block_size = size(hf, dir, "max_seq_len", 2048),
    n_layer = size(hf, dir, "n_layers"), n_head = NH, n_kv_head = NH, d_model = Cd, d_ff = 4 * Cd,
    norm = "layernorm", norm_bias = false, norm_eps = positive(hf, dir, "layer_norm_epsilon", 1e-5), mlp = "plain",
    act = "gelu_erf", rope_base = 0.0, alibi = positive(ac, dir, "attn_config.alibi_bias_max", 8),
    attn_scale = scale, clip_qkv = opt_number("attn_config.clip_qkv", "a non-negative number or null (0: no clamp, as MptAttention's `if self.clip_qkv`)"),
    tie_embeddings = true, init = "hf", dropout = 0.0 }
end
function from_hf.vit(hf, dir)
  must(hf, dir, "qkv_bias", { true }, "vit")
  local Cd, NH = size(hf, dir, "hidden_size"), size(hf, dir, "num_attention_heads")
  heads(dir, "num_attention_heads", NH, "hidden_size", Cd)
  local IS, PS = size(hf, dir, "image_size", 224), size(hf, dir, "patch_size", 16)
  if IS % PS ~= 0 then fail(dir, "config.json 'patch_size' = %d does not divide 'image_size' = %d", PS, IS) end
  return { family = "vit", image_size = IS, patch_size = PS,
           channels = size(hf, dir, "num_channels", 3), n_classes = n_classes(hf, dir),
           n_layer = size(hf, dir, "num_hidden_layers"), n_head = NH,
           d_model = Cd, d_ff = size(hf, dir, "intermediate_size"),
           norm_eps = positive(hf, dir, "layer_norm_eps", 1e-12), act = act(hf, dir, "hidden_act", "gelu", "vit"),
           patch_ln = false, dropout = 0.0 }
end

-- the project's config -> config.json (the task-head class HF would save), special = ids
local to_hf = {}
function to_hf.gpt2(c, sp)
  return { architectures = { "GPT2LMHeadModel" }, model_type = "gpt2", vocab_size = c.vocab_size, n_positions = c.block_size,
           n_ctx = c.block_size, n_embd = c.d_model, n_layer = c.n_layer, n_head = c.n_head, n_inner = c.d_ff,
           activation_function = ACT_HF[c.act], layer_norm_epsilon = c.norm_eps, tie_word_embeddings = c.tie_embeddings ~= false,
           resid_pdrop = 0, embd_pdrop = 0, attn_pdrop = 0, scale_attn_weights = true, bos_token_id = sp.bos, eos_token_id = sp.eos }
end
function to_hf.opt(c, sp)
  return { architectures = { "OPTForCausalLM" }, model_type = "opt", vocab_size = c.vocab_size, max_position_embeddings = c.block_size,
           hidden_size = c.d_model, word_embed_proj_dim = (c.d_embed or 0) > 0 and c.d_embed or c.d_model, ffn_dim = c.d_ff,
           num_hidden_layers = c.n_layer, num_attention_heads = c.n_head, activation_function = ACT_HF[c.act],
           do_layer_norm_before = c.ln_before ~= false, enable_bias = c.bias ~= false, dropout = 0, attention_dropout = 0,
           layer_norm_elementwise_affine = true, tie_word_embeddings = true,
           bos_token_id = sp.bos, eos_token_id = sp.eos, pad_token_id = sp.pad }
end
function to_hf.bert(c, sp)
  if (c.rope_base or 0) > 0 then
    error("hf.export: a BERT with rotary positions (rope_base = " .. tostring(c.rope_base) .. ", the model organism's encoder) " ..
          "has no Hugging Face BertForMaskedLM layout (BERT has a learned position table)", 0)
  end
  return { architectures = { "BertForMaskedLM" }, model_type = "bert", vocab_size = c.vocab_size, max_position_embeddings = c.block_size,
           type_vocab_size = c.type_vocab_size, hidden_size = c.d_model, intermediate_size = c.d_ff,
           num_hidden_layers = c.n_layer, num_attention_heads = c.n_head, hidden_act = ACT_HF[c.act], layer_norm_eps = c.norm_eps,
           hidden_dropout_prob = 0, attention_probs_dropout_prob = 0, position_embedding_type = "absolute", pad_token_id = sp.pad }
end
function to_hf.llama(c, sp)
  return { architectures = { "LlamaForCausalLM" }, model_type = "llama", vocab_size = c.vocab_size,
           max_position_embeddings = c.block_size, hidden_size = c.d_model, intermediate_size = c.d_ff,
           num_hidden_layers = c.n_layer, num_attention_heads = c.n_head, num_key_value_heads = c.n_kv_head or c.n_head,
           hidden_act = "silu", rms_norm_eps = c.norm_eps, rope_theta = c.rope_base, tie_word_embeddings = c.tie_embeddings == true,
           attention_bias = false, mlp_bias = false, bos_token_id = sp.bos, eos_token_id = sp.eos }
end
function to_hf.vit(c)
  local id2label = {}
  for i = 0, c.n_classes - 1 do id2label[tostring(i)] = "LABEL_" .. i end
  return { architectures = { "ViTForImageClassification" }, model_type = "vit", image_size = c.image_size, patch_size = c.patch_size,
           num_channels = c.channels or 3, hidden_size = c.d_model, intermediate_size = c.d_ff, num_hidden_layers = c.n_layer,
           num_attention_heads = c.n_head, hidden_act = ACT_HF[c.act], layer_norm_eps = c.norm_eps, qkv_bias = true,
           hidden_dropout_prob = 0, attention_probs_dropout_prob = 0, id2label = id2label }
end
M.from_hf, M.to_hf = from_hf, to_hf

-- ---------------------------------------------------------------- tensor names
-- An entry is one tensor of the Hugging Face file: { hf = name, shape = {...}, why = "config
-- keys behind the shape", parts = { {ours = param name, off = first element} ... } (plain
-- copies: the parts tile the tensor in order) or t = true with parts { {ours =, col0 =, n =} }
-- (the file holds a (rows, cols) Conv1D weight; each part is the transpose of columns
-- [col0, col0+n)), optional = true (absent: the parameters stay 0 and info.absent names it) }.
-- A plain part may also give n (elements) and dst (the first element in the parameter): it
-- fills that slice only (Falcon's fused query_key_value, whose heads interleave q, k and v).
-- zero = true on a part: the project's model has no such parameter (a bias-free GPT-2); it is
-- written as zeros and must be zero on import.

local function E(hf, shape, why, parts, o)
  local e = { hf = hf, shape = shape, why = why, parts = parts }
  for k, v in pairs(o or {}) do e[k] = v end
  return e
end
local function one(ours) return { { ours = ours, off = 0 } } end

-- The entries of one standard block (OPT, BERT, ViT): hn = the Hugging Face names of its
-- q, k, v, o projections, ln1, up (fc1), down (fc2), ln2; o = the project's layer prefix;
-- ff = the config key of d_ff. Linear weights are (out, in) in both layouts; biases unless
-- bias == false; LayerNorms have weight and bias.
local OURS = { q = "attn.q_proj", k = "attn.k_proj", v = "attn.v_proj", o = "attn.o_proj", ln1 = "ln1",
               up = "mlp.up_proj", down = "mlp.down_proj", ln2 = "ln2" }
local function block_entries(c, h, o, hn, ff, bias)
  local Cd, F = c.d_model, c.d_ff
  local out = {}
  for _, k in ipairs { "ln1", "q", "k", "v", "o", "ln2", "up", "down" } do
    local nout, nin, why = Cd, Cd, "hidden_size"
    if k == "up" then nout, why = F, ff .. ", hidden_size" elseif k == "down" then nin, why = F, "hidden_size, " .. ff end
    local hw, ow = h .. hn[k], o .. OURS[k]
    if k == "ln1" or k == "ln2" then
      out[#out + 1] = E(hw .. ".weight", { Cd }, why, one(ow .. ".weight"))
      out[#out + 1] = E(hw .. ".bias", { Cd }, why, one(ow .. ".bias"))
    else
      out[#out + 1] = E(hw .. ".weight", { nout, nin }, why, one(ow .. ".weight"))
      if bias ~= false then out[#out + 1] = E(hw .. ".bias", { nout }, why, one(ow .. ".bias")) end
    end
  end
  return out
end

local layout = {}   -- family -> { prefix(s), global(c), layer(c, l, lo), ignore = {patterns}, head_prefix }
-- the decoders' lm_head.weight (V, C): tied to the embedding emb (optional in the files, equal to
-- it when present) or, with tie_word_embeddings false, the model's own lm_head; appended to g
local function head_e(g, c, emb)
  local V, Cd = c.vocab_size, c.d_model
  if c.tie_embeddings then
    g[#g + 1] = E("lm_head.weight", { V, Cd }, "vocab_size, hidden_size", {}, { top = true, optional = true, tied = emb })
  else
    g[#g + 1] = E("lm_head.weight", { V, Cd }, "vocab_size, hidden_size (tie_word_embeddings = false)", one("lm_head.weight"), { top = true })
  end
  return g
end
-- the config.json key of the number of layers
local LAYER_KEY = { gpt2 = "n_layer", opt = "num_hidden_layers", bert = "num_hidden_layers", llama = "num_hidden_layers",
                    mistral = "num_hidden_layers", phi3 = "num_hidden_layers", vit = "num_hidden_layers", phi = "num_hidden_layers",
                    falcon = "num_hidden_layers", mpt = "n_layers",
                    qwen2 = "num_hidden_layers", qwen3 = "num_hidden_layers", gemma = "num_hidden_layers", gemma2 = "num_hidden_layers" }

layout.gpt2 = {
  prefixes = { "transformer.", "" }, export_prefix = "transformer.",
  ignore = { "^h%.%d+%.attn%.bias$", "^h%.%d+%.attn%.masked_bias$" },
  global = function(c)
    local Cd, V = c.d_model, c.vocab_size
    local g = {
      E("wte.weight", { V, Cd }, "vocab_size, n_embd", one("wte.weight")),
      E("wpe.weight", { c.block_size, Cd }, "n_positions, n_embd", one("wpe.weight")),
      E("ln_f.weight", { Cd }, "n_embd", one("ln_f.weight")),
      E("ln_f.bias", { Cd }, "n_embd", one("ln_f.bias")),
    }
    if c.tie_embeddings == false then g[#g + 1] = E("lm_head.weight", { V, Cd }, "vocab_size, n_embd", one("lm_head.weight"), { top = true }) end
    return g
  end,
  layer = function(c, l, lo)
    local Cd, F = c.d_model, c.d_ff
    local h, o = "h." .. l .. ".", "h" .. lo .. "."
    local w = "n_embd"
    return {
      E(h .. "ln_1.weight", { Cd }, w, one(o .. "ln1.weight")),
      E(h .. "ln_1.bias", { Cd }, w, one(o .. "ln1.bias")),
      E(h .. "attn.c_attn.weight", { Cd, 3 * Cd }, w, { { ours = o .. "attn.q_proj.weight", col0 = 0, n = Cd },
        { ours = o .. "attn.k_proj.weight", col0 = Cd, n = Cd }, { ours = o .. "attn.v_proj.weight", col0 = 2 * Cd, n = Cd } }, { t = true }),
      E(h .. "attn.c_attn.bias", { 3 * Cd }, w, { { ours = o .. "attn.q_proj.bias", off = 0 },
        { ours = o .. "attn.k_proj.bias", off = Cd }, { ours = o .. "attn.v_proj.bias", off = 2 * Cd } }),
      E(h .. "attn.c_proj.weight", { Cd, Cd }, w, { { ours = o .. "attn.o_proj.weight", col0 = 0, n = Cd } }, { t = true }),
      E(h .. "attn.c_proj.bias", { Cd }, w, one(o .. "attn.o_proj.bias")),
      E(h .. "ln_2.weight", { Cd }, w, one(o .. "ln2.weight")),
      E(h .. "ln_2.bias", { Cd }, w, one(o .. "ln2.bias")),
      E(h .. "mlp.c_fc.weight", { Cd, F }, "n_embd, n_inner", { { ours = o .. "mlp.up_proj.weight", col0 = 0, n = F } }, { t = true }),
      E(h .. "mlp.c_fc.bias", { F }, "n_inner", one(o .. "mlp.up_proj.bias")),
      E(h .. "mlp.c_proj.weight", { F, Cd }, "n_inner, n_embd", { { ours = o .. "mlp.down_proj.weight", col0 = 0, n = Cd } }, { t = true }),
      E(h .. "mlp.c_proj.bias", { Cd }, w, one(o .. "mlp.down_proj.bias")),
    }
  end,
}

layout.opt = {
  prefixes = { "model.decoder.", "decoder.", "" }, export_prefix = "model.decoder.",
  ignore = {},
  global = function(c)
    local Cd, V = c.d_model, c.vocab_size
    local Ed = (c.d_embed or 0) > 0 and c.d_embed or Cd
    local g = {
      E("embed_tokens.weight", { V, Ed }, "vocab_size, word_embed_proj_dim", one("embed_tokens.weight")),
      E("embed_positions.weight", { c.block_size + 2, Cd }, "max_position_embeddings + 2, hidden_size", one("embed_positions.weight")),
    }
    if Ed ~= Cd then
      g[#g + 1] = E("project_in.weight", { Cd, Ed }, "hidden_size, word_embed_proj_dim", one("project_in.weight"))
      g[#g + 1] = E("project_out.weight", { Ed, Cd }, "word_embed_proj_dim, hidden_size", one("project_out.weight"))
    end
    if c.ln_before ~= false then
      g[#g + 1] = E("final_layer_norm.weight", { Cd }, "hidden_size", one("final_layer_norm.weight"))
      g[#g + 1] = E("final_layer_norm.bias", { Cd }, "hidden_size", one("final_layer_norm.bias"))
    end
    g[#g + 1] = E("lm_head.weight", { V, Ed }, "vocab_size, word_embed_proj_dim", {}, { top = true, tied = "embed_tokens.weight", optional = true })
    return g
  end,
  layer = function(c, l, lo)
    return block_entries(c, "layers." .. l .. ".", "layers" .. lo .. ".", { q = "self_attn.q_proj", k = "self_attn.k_proj",
      v = "self_attn.v_proj", o = "self_attn.out_proj", ln1 = "self_attn_layer_norm", up = "fc1", down = "fc2",
      ln2 = "final_layer_norm" }, "ffn_dim", c.bias)
  end,
}

layout.bert = {
  prefixes = { "bert.", "" }, export_prefix = "bert.",
  ignore = { "^cls%.seq_relationship%.", "^embeddings%.position_ids$" },
  aliases = { ["LayerNorm.weight"] = "LayerNorm.gamma", ["LayerNorm.bias"] = "LayerNorm.beta" },
  global = function(c, d)
    local Cd, V = c.d_model, c.vocab_size
    local g = {
      E("embeddings.word_embeddings.weight", { V, Cd }, "vocab_size, hidden_size", one("embeddings.word.weight")),
      E("embeddings.position_embeddings.weight", { c.block_size, Cd }, "max_position_embeddings, hidden_size", one("embeddings.position.weight")),
      E("embeddings.token_type_embeddings.weight", { c.type_vocab_size, Cd }, "type_vocab_size, hidden_size", one("embeddings.token_type.weight")),
      E("embeddings.LayerNorm.weight", { Cd }, "hidden_size", one("embeddings.ln.weight")),
      E("embeddings.LayerNorm.bias", { Cd }, "hidden_size", one("embeddings.ln.bias")),
    }
    if c.pooler then
      g[#g + 1] = E("pooler.dense.weight", { Cd, Cd }, "hidden_size", one("pooler.weight"))
      g[#g + 1] = E("pooler.dense.bias", { Cd }, "hidden_size", one("pooler.bias"))
    end
    local head = { top = true, optional = true }
    g[#g + 1] = E("cls.predictions.transform.dense.weight", { Cd, Cd }, "hidden_size", one("mlm.dense.weight"), head)
    g[#g + 1] = E("cls.predictions.transform.dense.bias", { Cd }, "hidden_size", one("mlm.dense.bias"), head)
    g[#g + 1] = E("cls.predictions.transform.LayerNorm.weight", { Cd }, "hidden_size", one("mlm.ln.weight"), head)
    g[#g + 1] = E("cls.predictions.transform.LayerNorm.bias", { Cd }, "hidden_size", one("mlm.ln.bias"), head)
    g[#g + 1] = E("cls.predictions.bias", { V }, "vocab_size", one("mlm.bias"), head)
    g[#g + 1] = E("cls.predictions.decoder.weight", { V, Cd }, "vocab_size, hidden_size", {},
                  { top = true, optional = true, tied = "embeddings.word_embeddings.weight" })
    g[#g + 1] = E("cls.predictions.decoder.bias", { V }, "vocab_size", {}, { top = true, optional = true, tied = "cls.predictions.bias" })
    return g
  end,
  layer = function(c, l, lo)
    return block_entries(c, "encoder.layer." .. l .. ".", "layer" .. lo .. ".", { q = "attention.self.query",
      k = "attention.self.key", v = "attention.self.value", o = "attention.output.dense", ln1 = "attention.output.LayerNorm",
      up = "intermediate.dense", down = "output.dense", ln2 = "output.LayerNorm" }, "intermediate_size")
  end,
}

layout.llama = {
  prefixes = { "model.", "" }, export_prefix = "model.",
  ignore = { "^layers%.%d+%.self_attn%.rotary_emb%.inv_freq$" },
  global = function(c)
    local Cd, V = c.d_model, c.vocab_size
    local g = {
      E("embed_tokens.weight", { V, Cd }, "vocab_size, hidden_size", one("embed_tokens.weight")),
      E("norm.weight", { Cd }, "hidden_size", one("norm.weight")),
    }
    return head_e(g, c, "embed_tokens.weight")
  end,
  layer = function(c, l, lo)
    local Cd, F = c.d_model, c.d_ff
    local HD = Cd / c.n_head
    local KV = (c.n_kv_head or c.n_head) * HD
    local h, o = "layers." .. l .. ".", "layers" .. lo .. "."
    return {
      E(h .. "self_attn.q_proj.weight", { Cd, Cd }, "hidden_size", one(o .. "attn.q_proj.weight")),
      E(h .. "self_attn.k_proj.weight", { KV, Cd }, "num_key_value_heads × head_dim, hidden_size", one(o .. "attn.k_proj.weight")),
      E(h .. "self_attn.v_proj.weight", { KV, Cd }, "num_key_value_heads × head_dim, hidden_size", one(o .. "attn.v_proj.weight")),
      E(h .. "self_attn.o_proj.weight", { Cd, Cd }, "hidden_size", one(o .. "attn.o_proj.weight")),
      E(h .. "mlp.gate_proj.weight", { F, Cd }, "intermediate_size, hidden_size", one(o .. "mlp.gate_proj.weight")),
      E(h .. "mlp.up_proj.weight", { F, Cd }, "intermediate_size, hidden_size", one(o .. "mlp.up_proj.weight")),
      E(h .. "mlp.down_proj.weight", { Cd, F }, "hidden_size, intermediate_size", one(o .. "mlp.down_proj.weight")),
      E(h .. "input_layernorm.weight", { Cd }, "hidden_size", one(o .. "ln1.weight")),
      E(h .. "post_attention_layernorm.weight", { Cd }, "hidden_size", one(o .. "ln2.weight")),
    }
  end,
}

layout.vit = {
  prefixes = { "vit.", "" }, export_prefix = "vit.",
  ignore = { "^pooler%.dense%." },
  global = function(c)
    local Cd, P, CH = c.d_model, c.patch_size, c.channels or 3
    local N = (c.image_size / P) ^ 2
    local head = { top = true, optional = true }
    return {
      E("embeddings.cls_token", { 1, 1, Cd }, "hidden_size", one("cls_token")),
      E("embeddings.position_embeddings", { 1, N + 1, Cd }, "(image_size / patch_size)² + 1, hidden_size", one("pos_embed")),
      E("embeddings.patch_embeddings.projection.weight", { Cd, CH, P, P }, "hidden_size, num_channels, patch_size", one("patch_embed.weight")),
      E("embeddings.patch_embeddings.projection.bias", { Cd }, "hidden_size", one("patch_embed.bias")),
      E("layernorm.weight", { Cd }, "hidden_size", one("norm.weight")),
      E("layernorm.bias", { Cd }, "hidden_size", one("norm.bias")),
      E("classifier.weight", { c.n_classes, Cd }, "id2label, hidden_size", one("head.weight"), head),
      E("classifier.bias", { c.n_classes }, "id2label", one("head.bias"), head),
    }
  end,
  layer = function(c, l, lo)
    return block_entries(c, "encoder.layer." .. l .. ".", "blocks" .. lo .. ".", { q = "attention.attention.query",
      k = "attention.attention.key", v = "attention.attention.value", o = "attention.output.dense", ln1 = "layernorm_before",
      up = "intermediate.dense", down = "output.dense", ln2 = "layernorm_after" }, "intermediate_size")
  end,
}
layout.mistral = layout.llama   -- MistralForCausalLM's names are LlamaForCausalLM's
-- the LLaMA-named decoders with the imported families' options (Qwen2, Qwen3, Gemma, Gemma 2):
-- LLaMA's tensors with head_dim (q (NH·HD, C), k/v (NKV·HD, C), o (C, NH·HD)), q/k/v biases
-- (qkv_bias), o bias (o_bias), q_norm/k_norm (HD) (qk_norm); norms names the norms of a layer
-- as { file name, the project's } in order; plus_one: the file holds w of a (1 + w) RMSNorm
local function llama_named(norms, plus_one)
  return function(c, l, lo)
    local Cd, F = c.d_model, c.d_ff
    local HD = (c.head_dim or 0) > 0 and c.head_dim or Cd / c.n_head
    local Q, KV = c.n_head * HD, (c.n_kv_head or c.n_head) * HD
    local h, o = "layers." .. l .. ".", "layers" .. lo .. "."
    local hd = (c.head_dim or 0) > 0 and "head_dim" or "hidden_size / num_attention_heads"
    local qw, kw = "num_attention_heads × " .. hd .. ", hidden_size", "num_key_value_heads × " .. hd .. ", hidden_size"
    local out = {
      E(h .. "self_attn.q_proj.weight", { Q, Cd }, qw, one(o .. "attn.q_proj.weight")),
      E(h .. "self_attn.k_proj.weight", { KV, Cd }, kw, one(o .. "attn.k_proj.weight")),
      E(h .. "self_attn.v_proj.weight", { KV, Cd }, kw, one(o .. "attn.v_proj.weight")),
      E(h .. "self_attn.o_proj.weight", { Cd, Q }, "hidden_size, num_attention_heads × " .. hd, one(o .. "attn.o_proj.weight")),
    }
    if c.qkv_bias then
      out[#out + 1] = E(h .. "self_attn.q_proj.bias", { Q }, "num_attention_heads × " .. hd, one(o .. "attn.q_proj.bias"))
      out[#out + 1] = E(h .. "self_attn.k_proj.bias", { KV }, "num_key_value_heads × " .. hd, one(o .. "attn.k_proj.bias"))
      out[#out + 1] = E(h .. "self_attn.v_proj.bias", { KV }, "num_key_value_heads × " .. hd, one(o .. "attn.v_proj.bias"))
    end
    if c.o_bias then out[#out + 1] = E(h .. "self_attn.o_proj.bias", { Cd }, "hidden_size", one(o .. "attn.o_proj.bias")) end
    if c.qk_norm then
      out[#out + 1] = E(h .. "self_attn.q_norm.weight", { HD }, hd, one(o .. "attn.q_norm.weight"))
      out[#out + 1] = E(h .. "self_attn.k_norm.weight", { HD }, hd, one(o .. "attn.k_norm.weight"))
    end
    out[#out + 1] = E(h .. "mlp.gate_proj.weight", { F, Cd }, "intermediate_size, hidden_size", one(o .. "mlp.gate_proj.weight"))
    out[#out + 1] = E(h .. "mlp.up_proj.weight", { F, Cd }, "intermediate_size, hidden_size", one(o .. "mlp.up_proj.weight"))
    out[#out + 1] = E(h .. "mlp.down_proj.weight", { Cd, F }, "hidden_size, intermediate_size", one(o .. "mlp.down_proj.weight"))
    for _, n in ipairs(norms) do
      out[#out + 1] = E(h .. n[1] .. ".weight", { Cd }, "hidden_size", one(o .. n[2] .. ".weight"), { plus_one = plus_one })
    end
    return out
  end
end
local LLAMA_NORMS = { { "input_layernorm", "ln1" }, { "post_attention_layernorm", "ln2" } }
local function llama_family(layer, plus_one)
  return {
    prefixes = { "model.", "" }, export_prefix = "model.",
    ignore = { "^layers%.%d+%.self_attn%.rotary_emb%.inv_freq$" },
    global = function(c)
      local g = layout.llama.global(c)
      if plus_one then g[2].plus_one = true end   -- norm.weight
      return g
    end,
    layer = layer,
  }
end
layout.qwen2 = llama_family(llama_named(LLAMA_NORMS))
layout.qwen3 = layout.qwen2
layout.gemma = llama_family(llama_named(LLAMA_NORMS, true), true)
layout.gemma2 = llama_family(llama_named({ { "input_layernorm", "ln1" }, { "post_attention_layernorm", "ln1_post" },
  { "pre_feedforward_layernorm", "ln2" }, { "post_feedforward_layernorm", "ln2_post" } }, true), true)

layout.phi3 = {
  prefixes = { "model.", "" }, export_prefix = "model.",
  ignore = { "^layers%.%d+%.self_attn%.rotary_emb%.inv_freq$" },
  global = layout.llama.global,
  layer = function(c, l, lo)
    local Cd, F = c.d_model, c.d_ff
    local KV = (c.n_kv_head or c.n_head) * (Cd / c.n_head)
    local h, o = "layers." .. l .. ".", "layers" .. lo .. "."
    return {
      E(h .. "self_attn.qkv_proj.weight", { Cd + 2 * KV, Cd }, "hidden_size + 2 × num_key_value_heads × head_dim, hidden_size",
        { { ours = o .. "attn.q_proj.weight", off = 0 }, { ours = o .. "attn.k_proj.weight", off = Cd * Cd },
          { ours = o .. "attn.v_proj.weight", off = Cd * Cd + KV * Cd } }),
      E(h .. "self_attn.o_proj.weight", { Cd, Cd }, "hidden_size", one(o .. "attn.o_proj.weight")),
      E(h .. "mlp.gate_up_proj.weight", { 2 * F, Cd }, "2 × intermediate_size, hidden_size",
        { { ours = o .. "mlp.gate_proj.weight", off = 0 }, { ours = o .. "mlp.up_proj.weight", off = F * Cd } }),
      E(h .. "mlp.down_proj.weight", { Cd, F }, "hidden_size, intermediate_size", one(o .. "mlp.down_proj.weight")),
      E(h .. "input_layernorm.weight", { Cd }, "hidden_size", one(o .. "ln1.weight")),
      E(h .. "post_attention_layernorm.weight", { Cd }, "hidden_size", one(o .. "ln2.weight")),
    }
  end,
}

-- a Linear of the file (weight (nout, nin), bias (nout) when bias) -> the project's module o
local function linear_e(out, h, o, nout, nin, why, bias)
  out[#out + 1] = E(h .. ".weight", { nout, nin }, why, one(o .. ".weight"))
  if bias then out[#out + 1] = E(h .. ".bias", { nout }, (why:gsub(",.*", "")), one(o .. ".bias")) end
end
-- a LayerNorm of the file (weight (n), bias (n) when bias) -> the project's norm o
local function norm_e(out, h, o, n, why, bias)
  out[#out + 1] = E(h .. ".weight", { n }, why, one(o .. ".weight"))
  if bias then out[#out + 1] = E(h .. ".bias", { n }, why, one(o .. ".bias")) end
end

-- Phi (modeling_phi.py): model.embed_tokens, model.layers.{l}.input_layernorm, self_attn.{q,k,v}_proj,
-- self_attn.dense, self_attn.{q,k}_layernorm (qk_layernorm), mlp.fc1, mlp.fc2 (all with biases),
-- model.final_layernorm, lm_head (weight and bias)
layout.phi = {
  prefixes = { "model.", "" }, export_prefix = "model.",
  ignore = { "^layers%.%d+%.self_attn%.rotary_emb%.inv_freq$", "^rotary_emb%.inv_freq$" },
  global = function(c)
    local Cd, V = c.d_model, c.vocab_size
    local g = { E("embed_tokens.weight", { V, Cd }, "vocab_size, hidden_size", one("embed_tokens.weight")) }
    norm_e(g, "final_layernorm", "norm", Cd, "hidden_size", true)
    g[#g + 1] = E("lm_head.weight", { V, Cd }, "vocab_size, hidden_size", one("lm_head.weight"), { top = true })
    g[#g + 1] = E("lm_head.bias", { V }, "vocab_size", one("lm_head.bias"), { top = true })
    return g
  end,
  layer = function(c, l, lo)
    local Cd, F, NH = c.d_model, c.d_ff, c.n_head
    local HD = Cd / NH
    local KV = (c.n_kv_head or NH) * HD
    local h, o = "layers." .. l .. ".", "layers" .. lo .. "."
    local out = {}
    linear_e(out, h .. "self_attn.q_proj", o .. "attn.q_proj", Cd, Cd, "hidden_size, hidden_size", true)
    linear_e(out, h .. "self_attn.k_proj", o .. "attn.k_proj", KV, Cd, "num_key_value_heads × head_dim, hidden_size", true)
    linear_e(out, h .. "self_attn.v_proj", o .. "attn.v_proj", KV, Cd, "num_key_value_heads × head_dim, hidden_size", true)
    linear_e(out, h .. "self_attn.dense", o .. "attn.o_proj", Cd, Cd, "hidden_size, hidden_size", true)
    if c.qk_norm then
      norm_e(out, h .. "self_attn.q_layernorm", o .. "attn.q_norm", HD, "hidden_size / num_attention_heads (qk_layernorm)", true)
      norm_e(out, h .. "self_attn.k_layernorm", o .. "attn.k_norm", HD, "hidden_size / num_attention_heads (qk_layernorm)", true)
    end
    linear_e(out, h .. "mlp.fc1", o .. "mlp.up_proj", F, Cd, "intermediate_size, hidden_size", true)
    linear_e(out, h .. "mlp.fc2", o .. "mlp.down_proj", Cd, F, "hidden_size, intermediate_size", true)
    norm_e(out, h .. "input_layernorm", o .. "ln1", Cd, "hidden_size", true)
    return out
  end,
}

-- Falcon (modeling_falcon.py): transformer.word_embeddings, transformer.h.{l}.{input_layernorm |
-- ln_attn, ln_mlp | input_layernorm, post_attention_layernorm}, self_attention.query_key_value,
-- self_attention.dense, mlp.dense_h_to_4h, mlp.dense_4h_to_h (biases when bias),
-- transformer.ln_f, lm_head (tied unless tie_word_embeddings is false).
-- query_key_value's rows, as FalconAttention._split_heads reads them: groups g = 0 … NKV−1 of
-- NH/NKV query heads, then one key head, then one value head (head_dim rows each). With
-- new_decoder_architecture that is its view (…, NKV, NH/NKV + 2, head_dim) (key and value
-- broadcast to the group's query heads: the model's grouped-query attention); with multi_query
-- (NKV = 1) the view (…, NH + 2, head_dim): every query head, then k, then v; otherwise
-- (NKV = NH) the view (…, NH, 3, head_dim): q, k, v of each head in turn. Each head's rows are
-- copied into the project's q, k or v (parts with dst; runs that stay contiguous merged).
local function falcon_qkv_parts(o, what, NH, NKV, HD, width)
  local parts, rep, n = {}, NH / NKV, HD * width
  local function put(ours, row, dst_row)
    local last = parts[#parts]
    if last and last.ours == ours and last.off + last.n == row * n and last.dst + last.n == dst_row * n then
      last.n = last.n + n
    else
      parts[#parts + 1] = { ours = ours, off = row * n, n = n, dst = dst_row * n }
    end
  end
  for g = 0, NKV - 1 do
    local first = g * (rep + 2)
    for j = 0, rep - 1 do put(o .. "attn.q_proj." .. what, first + j, g * rep + j) end
    put(o .. "attn.k_proj." .. what, first + rep, g)
    put(o .. "attn.v_proj." .. what, first + rep + 1, g)
  end
  return parts
end
local FALCON_NORMS = { separate = { { "ln_attn", "ln1" }, { "ln_mlp", "ln2" } }, shared = { { "input_layernorm", "ln1" } },
                       none = { { "input_layernorm", "ln1" }, { "post_attention_layernorm", "ln2" } } }
layout.falcon = {
  prefixes = { "transformer.", "" }, export_prefix = "transformer.",
  ignore = {},
  global = function(c)
    local Cd, V = c.d_model, c.vocab_size
    local g = { E("word_embeddings.weight", { V, Cd }, "vocab_size, hidden_size", one("embed_tokens.weight")) }
    norm_e(g, "ln_f", "norm", Cd, "hidden_size", true)
    return head_e(g, c, "word_embeddings.weight")
  end,
  layer = function(c, l, lo)
    local Cd, F, NH, NKV = c.d_model, c.d_ff, c.n_head, c.n_kv_head or c.n_head
    local HD = Cd / NH
    local h, o = "h." .. l .. ".", "layers" .. lo .. "."
    local rows, why = (NH + 2 * NKV) * HD, "(num_attention_heads + 2 × key-value heads (num_kv_heads, 1 with multi_query)) × head_dim"
    local out = { E(h .. "self_attention.query_key_value.weight", { rows, Cd }, why .. ", hidden_size", falcon_qkv_parts(o, "weight", NH, NKV, HD, Cd)) }
    if c.qkv_bias then out[2] = E(h .. "self_attention.query_key_value.bias", { rows }, why, falcon_qkv_parts(o, "bias", NH, NKV, HD, 1)) end
    linear_e(out, h .. "self_attention.dense", o .. "attn.o_proj", Cd, Cd, "hidden_size, hidden_size", c.o_bias)
    linear_e(out, h .. "mlp.dense_h_to_4h", o .. "mlp.up_proj", F, Cd, "ffn_hidden_size, hidden_size", c.mlp_bias)
    linear_e(out, h .. "mlp.dense_4h_to_h", o .. "mlp.down_proj", Cd, F, "hidden_size, ffn_hidden_size", c.mlp_bias)
    for _, n in ipairs(FALCON_NORMS[c.parallel]) do norm_e(out, h .. n[1], o .. n[2], Cd, "hidden_size", true) end
    return out
  end,
}

-- MPT (modeling_mpt.py): transformer.wte, transformer.blocks.{l}.{norm_1, attn.Wqkv, attn.out_proj,
-- norm_2, ffn.up_proj, ffn.down_proj}, transformer.norm_f (no biases); lm_head tied to wte.
-- Wqkv's rows are q | k | v (mixed_qkv.chunk(3, dim=2)).
layout.mpt = {
  prefixes = { "transformer.", "" }, export_prefix = "transformer.",
  ignore = {},
  global = function(c)
    local g = { E("wte.weight", { c.vocab_size, c.d_model }, "vocab_size, d_model", one("embed_tokens.weight")),
                E("norm_f.weight", { c.d_model }, "d_model", one("norm.weight")) }
    return head_e(g, c, "wte.weight")
  end,
  layer = function(c, l, lo)
    local Cd, F = c.d_model, c.d_ff
    local h, o = "blocks." .. l .. ".", "layers" .. lo .. "."
    local out = { E(h .. "attn.Wqkv.weight", { 3 * Cd, Cd }, "3 × d_model, d_model", { { ours = o .. "attn.q_proj.weight", off = 0 },
      { ours = o .. "attn.k_proj.weight", off = Cd * Cd }, { ours = o .. "attn.v_proj.weight", off = 2 * Cd * Cd } }) }
    linear_e(out, h .. "attn.out_proj", o .. "attn.o_proj", Cd, Cd, "d_model, d_model")
    linear_e(out, h .. "ffn.up_proj", o .. "mlp.up_proj", F, Cd, "4 × d_model, d_model")
    linear_e(out, h .. "ffn.down_proj", o .. "mlp.down_proj", Cd, F, "d_model, 4 × d_model")
    norm_e(out, h .. "norm_1", o .. "ln1", Cd, "d_model")
    norm_e(out, h .. "norm_2", o .. "ln2", Cd, "d_model")
    return out
  end,
}
M.layout = layout

-- every entry of a model config, layers in order: global first, then layer 0 .. L-1
-- (family: the directory's layout when it differs from the model's family, e.g. phi3's fused
-- tensors for a llama model)
function M.entries(cfg, family)
  local lay = layout[family or cfg.family]
  local out = {}
  for _, e in ipairs(lay.global(cfg)) do out[#out + 1] = e end
  for l = 0, cfg.n_layer - 1 do
    for _, e in ipairs(lay.layer(cfg, l, l)) do e.layer = l out[#out + 1] = e end
  end
  return out
end

-- ---------------------------------------------------------------- reading a directory
local Dir = {}
Dir.__index = Dir

local PICKLES = { "%.bin$", "%.pt$", "%.pth$", "%.ckpt$", "%.pkl$" }
local AUTO_CLASS = { gpt2 = "AutoModelForCausalLM", opt = "AutoModelForCausalLM", llama = "AutoModelForCausalLM", mistral = "AutoModelForCausalLM", phi3 = "AutoModelForCausalLM", phi = "AutoModelForCausalLM", falcon = "AutoModelForCausalLM", mpt = "AutoModelForCausalLM",
                     qwen2 = "AutoModelForCausalLM", qwen3 = "AutoModelForCausalLM", gemma = "AutoModelForCausalLM", gemma2 = "AutoModelForCausalLM",
                     bert = "AutoModelForMaskedLM", vit = "AutoModelForImageClassification" }

local shape_buf = ffi.new("int64_t[8]")
local dt_buf, nd_buf, nb_buf = ffi.new("int32_t[1]"), ffi.new("int32_t[1]"), ffi.new("int64_t[1]")

-- a shard file name from the index: a plain file name inside the directory
local function check_shard_name(dir, name)
  if type(name) ~= "string" or name == "" then fail(dir, "model.safetensors.index.json: a weight_map value is not a file name") end
  if name:find("/", 1, true) or name:find("\\", 1, true) or name == "." or name == ".." or name:sub(1, 1) == "." then
    fail(dir, "model.safetensors.index.json names shard '%s', which is outside the model directory (only plain file names are allowed)", name)
  end
  if not name:match("%.safetensors$") then fail(dir, "model.safetensors.index.json names shard '%s', which is not a .safetensors file", name) end
end

-- open(dir) -> Dir: config read and mapped, every shard opened and its header validated
function M.open(dir, opts)
  opts = opts or {}
  if type(dir) ~= "string" or dir == "" then error("hf.open: dir must be a directory path", 2) end
  dir = dir:gsub("/+$", "")
  if not is_dir(dir) then fail(dir, "no such directory") end
  local files = list_dir(dir)
  local hf = read_json(dir .. "/config.json", dir)
  local has = {}
  for _, f in ipairs(files) do has[f] = true end
  local family = hf and hf.model_type
  if not has["model.safetensors"] and not has["model.safetensors.index.json"] then
    local pick
    for _, f in ipairs(files) do for _, pat in ipairs(PICKLES) do if f:match(pat) then pick = pick or f end end end
    if pick then
      fail(dir, "%s is a PyTorch pickle: outlierlab does not read pickles (loading one runs arbitrary code). Convert the directory to safetensors once, where transformers is installed:\n" ..
        "  python3 -c \"from transformers import %s as A; A.from_pretrained('%s').save_pretrained('%s', safe_serialization=True)\"",
        pick, AUTO_CLASS[family] or "AutoModel", dir, dir)
    end
    fail(dir, "no model.safetensors or model.safetensors.index.json (a Hugging Face model directory holds config.json and the weights in safetensors)")
  end
  if not hf then fail(dir, "no config.json (a Hugging Face model directory holds config.json next to the weights)") end
  if type(family) ~= "string" then fail(dir, "config.json has no 'model_type'") end
  if not layout[family] then fail(dir, "config.json model_type '%s' is not supported (supported: %s)", family, table.concat(M.FAMILIES, ", ")) end
  local self = setmetatable({ dir = dir, hf = hf, family = family, files = {}, where = {}, names = {}, name = dir:match("([^/]+)$") }, Dir)
  local ok, err = pcall(function()
    local shards
    if has["model.safetensors"] then
      shards = { "model.safetensors" }
    else
      local idx = read_json(dir .. "/model.safetensors.index.json", dir)
      local wm = idx.weight_map
      if type(wm) ~= "table" then fail(dir, "model.safetensors.index.json has no 'weight_map' object") end
      shards = {}
      local seen = {}
      self.index = {}
      for name, file in pairs(wm) do
        check_shard_name(dir, file)
        self.index[name] = file
        if not seen[file] then seen[file] = true shards[#shards + 1] = file end
      end
      table.sort(shards)
      if #shards == 0 then fail(dir, "model.safetensors.index.json: weight_map is empty") end
      for _, s in ipairs(shards) do
        if not exists(dir .. "/" .. s) then fail(dir, "shard %s named by model.safetensors.index.json is missing", s) end
      end
    end
    for _, s in ipairs(shards) do
      if not is_file(dir .. "/" .. s) then fail(dir, "%s is not a regular file", s) end
      local f = C.ol_st_open(dir .. "/" .. s)
      if f == nil then engine_fail(dir) end
      f = ffi.gc(f, C.ol_st_close)
      self.files[#self.files + 1] = { f = f, name = s }
      for i = 0, C.ol_st_count(f) - 1 do
        local n = ffi.string(C.ol_st_name(f, i))
        if self.where[n] then fail(dir, "tensor '%s' is in two shards (%s and %s)", n, self.where[n].file, s) end
        if self.index and self.index[n] ~= s then
          if self.index[n] == nil then fail(dir, "tensor '%s' of shard %s is not in model.safetensors.index.json", n, s) end
          fail(dir, "tensor '%s' is in shard %s but model.safetensors.index.json says %s", n, s, self.index[n])
        end
        self.where[n] = { f = f, i = i, file = s }
        self.names[#self.names + 1] = n
      end
    end
    if self.index then
      local missing = {}
      for n in pairs(self.index) do if not self.where[n] then missing[#missing + 1] = n end end
      table.sort(missing)
      if missing[1] then fail(dir, "model.safetensors.index.json lists tensor '%s' in %s, but that shard does not hold it", missing[1], self.index[missing[1]]) end
    end
    table.sort(self.names)
    local cfg = from_hf[family](hf, dir)
    local lay = layout[family]
    -- the name prefix: the first of the family's prefixes whose first global tensor exists
    local probe = lay.global(cfg)[1].hf
    for _, p in ipairs(lay.prefixes) do
      if self.where[p .. probe] then self.prefix = p break end
    end
    if not self.prefix then
      fail(dir, "missing tensor '%s' (looked for it with the prefixes %s)", lay.prefixes[1] .. probe,
           table.concat((function() local o = {} for i, p in ipairs(lay.prefixes) do o[i] = "'" .. p .. "'" end return o end)(), ", "))
    end
    if family == "bert" and self:find(self.prefix .. "pooler.dense.weight") then cfg.pooler = true end
    -- sizes bounded by the files before anything is built: the layers config.json asks for
    -- must be in the files (counted, not allocated), then every tensor's shape and dtype
    local lkey = LAYER_KEY[family]
    for l = 0, cfg.n_layer - 1 do
      local first = lay.layer(cfg, l, l)[1]
      if not self:find(self:full(first)) then
        fail(dir, "missing tensor '%s': config.json '%s' = %s, but the files hold %d layers", self:full(first), lkey,
             show(cfg.n_layer), l)
      end
      if l > #self.names then break end
    end
    local used = {}
    self.pending = cfg
    self:resolve(M.entries(cfg, family), used)
    self:check_extra(used)
    self.pending = nil
    cfg.name = opts.name or self.name
    self.cfg = models.config(cfg, "hf " .. dir)
  end)
  if not ok then self:close() error(err, 0) end
  return self
end

-- full file name of an entry: the family prefix and the name; "top" entries (lm_head, cls.*,
-- classifier) sit outside the prefix, as in the task-head classes' files
function Dir:full(e)
  if type(e) == "string" then return self.prefix .. e end
  return e.top and e.hf or self.prefix .. e.hf
end

-- the file tensor of a full name (with the aliases of old BERT checkpoints): where, name or nil
function Dir:find(full)
  if self.where[full] then return self.where[full], full end
  local al = layout[self.family].aliases
  if al then
    for a, b in pairs(al) do
      if full:sub(-#a) == a then
        local alt = full:sub(1, -#a - 1) .. b
        if self.where[alt] then return self.where[alt], alt end
      end
    end
  end
  return nil
end

-- {dtype =, shape =, ptr =, nbytes =, name =} of a file tensor
function Dir:tensor(w, name)
  if C.ol_st_info(w.f, w.i, dt_buf, nd_buf, shape_buf) ~= 0 then ol.engine_error(2) end
  local shape = {}
  for d = 0, nd_buf[0] - 1 do shape[d + 1] = tonumber(shape_buf[d]) end
  local ptr = C.ol_st_data(w.f, w.i, nb_buf)
  if ptr == nil then ol.engine_error(2) end
  return { dtype = ffi.string(C.ol_st_dtype_name(dt_buf[0])), dt = dt_buf[0], shape = shape, ptr = ptr,
           nbytes = tonumber(nb_buf[0]), name = name, file = w.file }
end

function Dir:close()
  for _, f in ipairs(self.files) do ffi.gc(f.f, nil) C.ol_st_close(f.f) end
  self.files, self.where = {}, {}
end

-- fp32 size of the model's parameters (bytes) and of the files' tensors
function Dir:sizes()
  local fp32, file = 0, 0
  for _, n in ipairs(self.names) do
    local t = self:tensor(self.where[n], n)
    local numel = 1
    for _, s in ipairs(t.shape) do numel = numel * s end
    fp32, file = fp32 + 4 * numel, file + t.nbytes
  end
  return fp32, file
end

-- the entries of this directory's model, resolved against the files: checks presence, shape
-- and dtype of each (the first problem is the error); returns the list with .src set
function Dir:resolve(entries, used)
  local out = {}
  for _, e in ipairs(entries) do
    local w, full = self:find(self:full(e))
    if not w then
      if not e.optional then
        fail(self.dir, "missing tensor '%s' (expected shape %s from config.json %s)", self:full(e), shape_str(e.shape), e.why)
      end
    else
      local t = self:tensor(w, full)
      if shape_str(t.shape) ~= shape_str(e.shape) then
        fail(self.dir, "tensor '%s' in %s has shape %s, but config.json (%s) implies %s", full, t.file, shape_str(t.shape), e.why, shape_str(e.shape))
      end
      if not DTYPES[t.dtype] then
        fail(self.dir, "tensor '%s' in %s is %s; only F32, F16, BF16 and F64 weights are supported", full, t.file, t.dtype)
      end
      e.src = t
      if used then used[full] = true end
    end
    out[#out + 1] = e
  end
  return out
end

-- every resolved tensor must hold finite numbers: the first +Inf, -Inf or NaN is an error that
-- names the tensor, its file and the element (engine/io_hf.c scans the mapped bytes; the pages
-- are handed back after each tensor). Run before anything is built or computed.
local one_f32 = ffi.new("float[1]")
function Dir:check_finite(entries)
  for _, e in ipairs(entries) do
    local src = e.src
    if src then
      local numel = src.nbytes / ESIZE[src.dtype]
      local i = tonumber(C.ol_hf_first_nonfinite(src.ptr, src.dt, numel))
      if i < -1 then engine_fail(self.dir) end
      C.ol_hf_release(src.ptr, src.nbytes)
      if i >= 0 then
        C.ol_hf_to_f32(ffi.cast("const uint8_t *", src.ptr) + i * ESIZE[src.dtype], src.dt, 1, one_f32)
        local v = one_f32[0]
        local what = v ~= v and "NaN" or (v > 0 and "+Inf" or "-Inf")
        fail(self.dir, "tensor '%s' in %s holds %s at element %d of %s: a checkpoint with non-finite weights is refused (every analysis of it would be NaN)",
             src.name, src.file, what, i, shape_str(src.shape))
      end
    end
  end
end

local function ignorable(self, name)
  local rel = name:sub(1, #self.prefix) == self.prefix and name:sub(#self.prefix + 1) or name
  for _, pat in ipairs(layout[self.family].ignore) do if rel:match(pat) or name:match(pat) then return true end end
  return false
end

-- the first tensor of the files that no entry used (and that is not a known buffer or unused
-- head) is an error
function Dir:check_extra(used)
  for _, n in ipairs(self.names) do
    if not used[n] and not ignorable(self, n) then
      local c = self.cfg or self.pending
      fail(self.dir, "unexpected tensor '%s' in %s: not part of a %s model with this config.json ('%s' = %d layers)", n,
           self.where[n].file, self.family, LAYER_KEY[self.family], c.n_layer)
    end
  end
end

-- ---------------------------------------------------------------- converting into parameters
local function params_by_name(ctx)
  local out = {}
  for _, p in ipairs(ctx:params()) do out[ffi.string(p.name)] = p end
  return out
end
M.params_by_name = params_by_name

local function same_bytes(a, b)
  return a.dtype == b.dtype and a.nbytes == b.nbytes and ffi.C.memcmp(a.ptr, b.ptr, a.nbytes) == 0
end

-- convert resolved entries into the parameters (a name -> tensor table); filled[name] = true
-- for each one written. opts.release = true hands the pages back after each tensor.
function M.fill(self, entries, params, filled, opts)
  opts = opts or {}
  for _, e in ipairs(entries) do
    local src = e.src
    if e.tied then
      if src then
        local w, full = self:find(self.prefix .. e.tied)
        if not w then w, full = self:find(e.tied) end
        local other = w and self:tensor(w, full)
        if not other or not same_bytes(src, other) then
          fail(self.dir, "tensor '%s' differs from '%s' although the model ties them; an untied %s head is not supported", src.name, e.tied, self.family)
        end
      end
    elseif src then
      local es = ESIZE[src.dtype]
      for _, part in ipairs(e.parts) do
        local p = params[part.ours]
        if not p then
          -- a parameter the project's model does not have (bias-free GPT-2 export): must be 0
          fail(self.dir, "tensor '%s' maps to parameter '%s', which this model does not have", src.name, part.ours)
        end
        local rc
        if e.t then
          rc = C.ol_hf_to_f32_t(src.ptr, src.dt, e.shape[1], e.shape[2], part.col0, part.n, p.data)
        else
          rc = C.ol_hf_to_f32(ffi.cast("const uint8_t *", src.ptr) + part.off * es, src.dt, part.n or p.numel, p.data + (part.dst or 0))
        end
        if rc ~= 0 then ol.engine_error(2) end
        if e.plus_one then   -- Gemma's (1 + w) RMSNorm gain, in fp32 as HF's 1.0 + weight.float()
          for i = 0, tonumber(p.numel) - 1 do p.data[i] = 1 + p.data[i] end
        end
        filled[part.ours] = true
      end
      if opts.release then C.ol_hf_release(src.ptr, src.nbytes) end
    else
      for _, part in ipairs(e.parts) do
        local p = params[part.ours]
        if p then p:fill_(0) filled[part.ours] = true end
      end
    end
  end
end

-- info about what the import skipped: absent optional tensors (zeros in the model)
local function absent(entries)
  local out = {}
  for _, e in ipairs(entries) do
    if not e.src and e.optional and #e.parts > 0 then out[#out + 1] = e.hf end
  end
  return out
end

-- load(dir, opts) -> ctx, model, info: the whole model in memory (fp32), eval mode.
-- opts.name (model name, default the directory's), opts.seed. info = { dir, name, family,
-- cfg, hf (config.json), absent = {optional tensors not in the files: zeros}, fp32_bytes, file_bytes }
function M.load(dir, opts)
  opts = opts or {}
  local d = type(dir) == "table" and dir or M.open(dir, opts)
  local ok, a, b, c = pcall(function()
    local cfg = d.cfg
    -- names, shapes, dtypes and values checked before anything is built
    local used = {}
    local entries = d:resolve(M.entries(cfg, d.family), used)
    d:check_extra(used)
    d:check_finite(entries)
    local nparams = models.count_params(cfg)
    local ctx = ol.Context{ params = nparams + 64 * 1024 * (cfg.n_layer + 8), seed = opts.seed or 1 }
    local m = models.build(ctx, cfg)
    local params, filled = params_by_name(ctx), {}
    M.fill(d, entries, params, filled, { release = true })
    for name in pairs(params) do
      if not filled[name] then fail(d.dir, "parameter '%s' of the %s model has no tensor in the checkpoint (internal mapping error)", name, d.family) end
    end
    if m.eval then m:eval() end
    local fp32, file = d:sizes()
    return ctx, m, { dir = d.dir, name = cfg.name, family = d.family, cfg = cfg, hf = d.hf, absent = absent(entries),
                     fp32_bytes = fp32, file_bytes = file }
  end)
  if type(dir) ~= "table" then d:close() end
  if not ok then error(a, 0) end
  return a, b, c
end

-- ---------------------------------------------------------------- export
local function atomic_write(path, text)
  local tmp = path .. ".tmp." .. tostring(os.time()) .. tostring(math.random(1e9))
  local fh, err = io.open(tmp, "wb")
  if not fh then error("hf.export: cannot create " .. tostring(err), 0) end
  fh:write(text)
  fh:close()
  local ok, e = os.rename(tmp, path)
  if not ok then os.remove(tmp) error("hf.export: cannot rename to " .. path .. ": " .. tostring(e), 0) end
end

-- the (rows, cols) file tensor of an entry built from the parameters, as fp32 (ffi array)
local function gather(e, params)
  local n = 1
  for _, s in ipairs(e.shape) do n = n * s end
  local buf = ffi.new("float[?]", math.max(n, 1))
  if e.t then
    -- stack the parts (each (n_k, rows)) into (cols, rows), then transpose into (rows, cols)
    local rows, cols = e.shape[1], e.shape[2]
    local tmp = ffi.new("float[?]", n)
    for _, part in ipairs(e.parts) do
      local p = params[part.ours]
      if p then ffi.copy(tmp + part.col0 * rows, p.data, 4 * part.n * rows) end
    end
    if C.ol_hf_to_f32_t(tmp, C.OL_ST_F32, cols, rows, 0, rows, buf) ~= 0 then ol.engine_error(2) end
  else
    for _, part in ipairs(e.parts) do
      local p = params[part.ours]
      if p then ffi.copy(buf + part.off, p.data + (part.dst or 0), 4 * tonumber(part.n or p.numel)) end   -- absent (bias-free): stays 0
    end
  end
  return buf, n
end

-- export(dir, ctx, model, opts): write model as a Hugging Face directory: config.json and
-- model.safetensors, or shards of at most opts.shard_bytes (> 0) with model.safetensors.index.json.
-- opts.dtype = "F32" (default) | "F16" | "BF16"; opts.special = {bos =, eos =, pad =} token
-- ids for config.json; opts.prefix = false writes the names without the family prefix (as the
-- bare GPT2Model/LlamaModel/... would). Configs without a Hugging Face equivalent are an error.
function M.export(dir, ctx, model, opts)
  opts = opts or {}
  local cfg = model.cfg
  local fam = cfg.family
  local where = "export " .. dir
  if not layout[fam] then fail(where, "family '%s' cannot be exported", tostring(fam)) end
  local att = type(cfg.attention) == "table" and (cfg.attention.kind or "softmax") or cfg.attention
  if att ~= "softmax" then fail(where, "attention '%s' has no Hugging Face equivalent (only softmax models can be exported)", tostring(att)) end
  if fam == "llama" and models.families.llama.extended(cfg) then
    fail(where, "a llama model with the imported families' options (head_dim, biases, qk_norm, …: Qwen, Gemma, Phi-2, Falcon, MPT) is not exported (only LLaMA's own block)")
  end
  if (cfg.norm_variant or "plain") ~= "plain" or (cfg.residual_clip or 0) > 0 then
    fail(where, "norm_variant '%s' / residual_clip %g have no Hugging Face equivalent", tostring(cfg.norm_variant), cfg.residual_clip or 0)
  end
  if fam == "vit" and cfg.patch_ln then fail(where, "patch_ln (a LayerNorm after the patch embedding) has no Hugging Face ViT equivalent") end
  if fam ~= "llama" and not ACT_HF[cfg.act] then fail(where, "activation '%s' has no Hugging Face equivalent", tostring(cfg.act)) end
  local dtname = opts.dtype or "F32"
  if not TORCH_DTYPE[dtname] then fail(where, "dtype must be F32, F16 or BF16, got %s", tostring(dtname)) end
  local dt = DTYPES[dtname]
  os.execute("mkdir -p '" .. dir:gsub("'", "'\\''") .. "'")
  local lay = layout[fam]
  local prefix = opts.prefix == false and "" or lay.export_prefix
  local params = params_by_name(ctx)
  local tensors = {}
  for _, e in ipairs(M.entries(cfg)) do
    if #e.parts > 0 then
      local name = (e.top and "" or prefix) .. e.hf
      local buf, n = gather(e, params)
      local out = buf
      if dt ~= C.OL_ST_F32 then
        out = ffi.new("uint16_t[?]", math.max(n, 1))
        if C.ol_hf_from_f32(buf, n, dt, out) ~= 0 then ol.engine_error(2) end
      end
      tensors[#tensors + 1] = { name = name, shape = e.shape, data = out, nbytes = n * ESIZE[dtname] }
    end
  end
  -- shards in entry order, each at most shard_bytes (a larger tensor gets a shard of its own)
  local groups, cur, size = {}, {}, 0
  local limit = opts.shard_bytes or 0
  for _, t in ipairs(tensors) do
    if limit > 0 and #cur > 0 and size + t.nbytes > limit then groups[#groups + 1] = cur cur, size = {}, 0 end
    cur[#cur + 1] = t
    size = size + t.nbytes
  end
  if #cur > 0 then groups[#groups + 1] = cur end
  local weight_map, total = {}, 0
  local function save(path, list)
    local w = C.ol_st_writer_new()
    if w == nil then ol.engine_error(1) end
    w = ffi.gc(w, C.ol_st_writer_free)
    for _, t in ipairs(list) do
      local shp = ffi.new("int64_t[?]", #t.shape, t.shape)
      if C.ol_st_writer_add(w, t.name, dt, #t.shape, shp, t.data) ~= 0 then ol.engine_error(1) end
      total = total + t.nbytes
    end
    if C.ol_st_writer_set_metadata(w, "format", "pt") ~= 0 then ol.engine_error(1) end
    if C.ol_st_writer_save(w, path) ~= 0 then ol.engine_error(1) end
  end
  if limit > 0 and #groups > 1 then
    for i, g in ipairs(groups) do
      local fname = string.format("model-%05d-of-%05d.safetensors", i, #groups)
      save(dir .. "/" .. fname, g)
      for _, t in ipairs(g) do weight_map[t.name] = fname end
    end
    atomic_write(dir .. "/model.safetensors.index.json", json.encode({ metadata = { total_size = total }, weight_map = weight_map }) .. "\n")
    os.remove(dir .. "/model.safetensors")
  else
    save(dir .. "/model.safetensors", tensors)
    os.remove(dir .. "/model.safetensors.index.json")
  end
  local sp = opts.special or {}
  local conf = to_hf[fam](cfg, sp)
  conf.torch_dtype = TORCH_DTYPE[dtname]
  conf.outlierlab_name = cfg.name
  atomic_write(dir .. "/config.json", json.encode(conf) .. "\n")
  return { dir = dir, shards = #groups, bytes = total }
end

return M
