-- pretrained/families/shared — what the family files (pretrained/families/*.lua) share: the
-- checks of config.json's keys, each named in its message, and the entries of the tensor tables
-- (pretrained/hf.lua reads them). A family file gives from_hf (config.json -> the project's
-- config), to_hf (the reverse, where the family is exported), layout (the tensor names),
-- layer_key (config.json's number of layers) and auto_class (the transformers class that
-- converts a pickle), each keyed by config.json's model_type.
local json = require "outlierlab.util.json"

local S = {}

local function fail(where, fmt, ...) error("hf: " .. where .. ": " .. string.format(fmt, ...), 0) end

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

S.fail, S.show, S.key, S.int, S.size, S.positive, S.heads, S.must, S.act = fail, show, key, int, size, positive, heads, must, act
S.sub, S.rope_scaling, S.E, S.one, S.block_entries, S.head_e, S.linear_e, S.norm_e = sub, rope_scaling, E, one, block_entries, head_e, linear_e, norm_e
S.ACT, S.ACT_HF, S.MAX_INT = ACT, ACT_HF, MAX_INT
return S
