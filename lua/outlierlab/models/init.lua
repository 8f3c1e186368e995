-- models — the five model families of the papers, built from engine ops, and their presets.
--
--   local models = require "outlierlab.models"
--   local cfg = models.preset("gpt2-124m", { attention = { kind = "ca_scale" } })
--   local m = models.build(ctx, cfg)          -- cfg.family = gpt2 | opt | bert | llama | vit
--   local logits = m:forward(batch, { probe = fn(name, layer, tensor) or nil, train = true })
--   local loss, info = m:loss(batch)          -- info.ntokens, info.logits
--   print(m:describe())                       -- "gpt2-124m (gpt2): 124,373,760 parameters, ..."
--
-- Families (one file each, reading like the paper): gpt2.lua (SO), opt.lua (QT),
-- bert.lua (QT), llama.lua (SO App. D.2), vit.lua (QT). Shared blocks: common.lua.
-- Presets: the papers' shapes (bert-base, opt-125m, gpt2-124m, vit-s16, tinyllama-120m) and
-- reduced shapes that train on this machine: <family>-tiny (minutes), <family>-quick
-- (seconds), gpt2-mini (6 layers, d 384, T 256: the benchmark shape). docs/reference/models.md has the
-- tables, parameter counts and probe points.
local M = {}

M.families = {
  gpt2 = require "outlierlab.models.gpt2",
  opt = require "outlierlab.models.opt",
  bert = require "outlierlab.models.bert",
  llama = require "outlierlab.models.llama",
  vit = require "outlierlab.models.vit",
}

-- Every key a family's config has, with the paper-scale default. An override must name one
-- of these keys and keep its type (attention: a kind name or a {kind=, ...} table).
local defaults = {
  gpt2 = { family = "gpt2", name = "gpt2", vocab_size = 50304, block_size = 1024, n_layer = 12, n_head = 12,
           d_model = 768, d_ff = 3072, bias = false, dropout = 0.0, tie_embeddings = true, norm_eps = 1e-5,
           act = "gelu_tanh", attention = "softmax", seed = 1234, init_gain = 1.0 },
  opt = { family = "opt", name = "opt", vocab_size = 50272, block_size = 2048, n_layer = 12, n_head = 12,
          d_model = 768, d_ff = 3072, bias = true, dropout = 0.1, norm_eps = 1e-5, act = "relu",
          attention = "softmax", seed = 1234, init_gain = 1.0, d_embed = 0, ln_before = true },
  bert = { family = "bert", name = "bert", vocab_size = 30522, block_size = 512, type_vocab_size = 2,
           n_layer = 12, n_head = 12, d_model = 768, d_ff = 3072, dropout = 0.1, norm_eps = 1e-12,
           act = "gelu_erf", pooler = false, attention = "softmax", rope_base = 0.0, seed = 1234, init_gain = 1.0 },
  llama = { family = "llama", name = "llama", vocab_size = 32000, block_size = 2048, n_layer = 12, n_head = 12,
            n_kv_head = 1, d_model = 768, d_ff = 2048, norm_eps = 1e-5, rope_base = 10000.0,
            tie_embeddings = false, init = "tinyllama", dropout = 0.0, attention = "softmax", seed = 1234, init_gain = 1.0,
            norm_gain = "channel",     -- "single": one scalar RMSNorm gain (Park et al. 2025)
            embed_proj = false,        -- true: orthogonal C×C projections after the embedding and before the head (Park et al.)
            -- the other decoders imported from Hugging Face (models/llama.lua's head; all off here):
            head_dim = 0, qkv_bias = false, o_bias = false, qk_norm = false, norm = "rmsnorm", norm_bias = true,
            mlp = "glu", act = "silu", mlp_bias = false, parallel = "none", post_norms = false, rotary_dim = 0,
            attn_scale = 0.0, attn_softcap = 0.0, window = 0, window_every = 1, alibi = 0.0, embed_scale = 0.0,
            logit_softcap = 0.0, head_bias = false,
            -- LLaMA-3.1's rope_scaling "llama3" (factor 0: plain RoPE) and MPT's clip_qkv (0: none)
            rope_factor = 0.0, rope_low_freq_factor = 0.0, rope_high_freq_factor = 0.0, rope_original_max_pos = 0,
            clip_qkv = 0.0 },
  vit = { family = "vit", name = "vit", image_size = 224, patch_size = 16, channels = 3, n_classes = 1000,
          n_layer = 12, n_head = 6, d_model = 384, d_ff = 1536, norm_eps = 1e-6, act = "gelu_erf",
          patch_ln = false, dropout = 0.0, attention = "softmax", seed = 1234, init_gain = 1.0,
          dense = false },             -- true: per-patch labels beside [CLS]'s (models/vit.lua; the organism map)
}
-- the norm variants and residual clipping (nn/norms.lua), the same keys in every family, all off
for _, d in pairs(defaults) do
  for k, v in pairs(require("outlierlab.nn.norms").CONFIG_DEFAULTS) do d[k] = v end
end
M.defaults = defaults

-- name -> family and the keys that differ from the family defaults
local presets = {
  -- the papers' shapes (docs/reference/experiments.md, "Paper-scale settings")
  ["gpt2-124m"] = { family = "gpt2" },
  ["opt-125m"] = { family = "opt" },
  ["bert-base"] = { family = "bert", block_size = 512 },
  ["vit-s16"] = { family = "vit" },
  ["tinyllama-120m"] = { family = "llama" },
  -- reduced shapes: tiny trains in minutes, quick in seconds (vocab_size follows the corpus)
  ["gpt2-mini"] = { family = "gpt2", vocab_size = 4096, block_size = 256, n_layer = 6, n_head = 6, d_model = 384, d_ff = 1536 },
  ["gpt2-tiny"] = { family = "gpt2", vocab_size = 1024, block_size = 128, n_layer = 4, n_head = 4, d_model = 128, d_ff = 512 },
  ["gpt2-quick"] = { family = "gpt2", vocab_size = 256, block_size = 32, n_layer = 2, n_head = 2, d_model = 64, d_ff = 256 },
  ["opt-tiny"] = { family = "opt", vocab_size = 1024, block_size = 128, n_layer = 4, n_head = 4, d_model = 128, d_ff = 512 },
  ["opt-quick"] = { family = "opt", vocab_size = 256, block_size = 32, n_layer = 2, n_head = 2, d_model = 64, d_ff = 256 },
  ["bert-tiny"] = { family = "bert", vocab_size = 1024, block_size = 128, n_layer = 4, n_head = 4, d_model = 128, d_ff = 512 },
  ["bert-quick"] = { family = "bert", vocab_size = 256, block_size = 32, n_layer = 2, n_head = 2, d_model = 64, d_ff = 256 },
  ["llama-tiny"] = { family = "llama", vocab_size = 1024, block_size = 128, n_layer = 4, n_head = 4, n_kv_head = 2,
                     d_model = 128, d_ff = 352 },
  ["llama-quick"] = { family = "llama", vocab_size = 256, block_size = 32, n_layer = 2, n_head = 2, n_kv_head = 1,
                      d_model = 64, d_ff = 176 },
  ["vit-tiny"] = { family = "vit", image_size = 32, patch_size = 4, n_classes = 10, n_layer = 4, n_head = 4,
                   d_model = 128, d_ff = 512 },
  -- the model organism (docs/findings/organism.md): small enough to train in minutes, deep enough that
  -- its no-op heads need a sink in the middle layers
  ["llama-organism"] = { family = "llama", vocab_size = 128, block_size = 128, n_layer = 4, n_head = 2, n_kv_head = 2,
                         d_model = 64, d_ff = 256 },
  ["bert-organism"] = { family = "bert", vocab_size = 128, block_size = 128, n_layer = 4, n_head = 2, d_model = 64, d_ff = 256,
                        rope_base = 10000.0 },
  ["vit-organism"] = { family = "vit", image_size = 32, patch_size = 4, n_classes = 4, n_layer = 4, n_head = 2,
                       d_model = 64, d_ff = 256 },
  ["vit-quick"] = { family = "vit", image_size = 16, patch_size = 4, n_classes = 4, n_layer = 2, n_head = 2,
                    d_model = 64, d_ff = 256 },
}
M.preset_table = presets

local copy = require("outlierlab.config").deep_copy   -- one deep copy (config.deep_copy)

local function sorted_keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end

-- names of every preset, sorted
function M.presets() return sorted_keys(presets) end

-- Complete and check a config: family defaults under cfg; an unknown key or a value of the
-- wrong type is an error naming the key (and listing the valid ones).
function M.config(cfg, what)
  what = what or "models"
  if type(cfg) ~= "table" then error(what .. ": config must be a table or a preset name", 3) end
  local fam = cfg.family
  local base = defaults[fam]
  if not base then
    error(string.format("%s: unknown family '%s'; valid: %s", what, tostring(fam), table.concat(sorted_keys(defaults), ", ")), 3)
  end
  local out = copy(base)
  for k, v in pairs(cfg) do
    local d = base[k]
    if d == nil then
      error(string.format("%s: unknown key '%s' for family %s; valid keys: %s", what, tostring(k), fam,
        table.concat(sorted_keys(base), ", ")), 3)
    end
    if k == "attention" then
      if type(v) ~= "string" and type(v) ~= "table" then
        error(string.format("%s: attention must be a kind name or a {kind=...} table, got %s", what, type(v)), 3)
      end
    elseif type(v) ~= type(d) then
      error(string.format("%s: key '%s' must be a %s, got %s (%s)", what, k, type(d), type(v), tostring(v)), 3)
    end
    out[k] = copy(v)
  end
  for _, k in ipairs({ "n_layer", "n_head", "d_model", "d_ff" }) do
    if out[k] < 1 or out[k] ~= math.floor(out[k]) then error(string.format("%s: %s must be a positive integer, got %s", what, k, tostring(out[k])), 3) end
  end
  if out.d_model % out.n_head ~= 0 and not ((out.head_dim or 0) > 0) then
    error(string.format("%s: d_model %d is not a multiple of n_head %d", what, out.d_model, out.n_head), 3)
  end
  if out.n_kv_head and (out.n_kv_head < 1 or out.n_head % out.n_kv_head ~= 0) then
    error(string.format("%s: n_head %d is not a multiple of n_kv_head %d", what, out.n_head, out.n_kv_head), 3)
  end
  if out.dropout < 0 or out.dropout >= 1 then error(string.format("%s: dropout %g not in [0, 1)", what, out.dropout), 3) end
  require("outlierlab.nn.norms").check(out, what)
  if fam == "llama" then M.families.llama.check(out, what) end
  return out
end

-- preset(name, overrides) -> a complete config table
function M.preset(name, overrides)
  local p = presets[name]
  if not p then
    error(string.format("models.preset: unknown preset '%s'; valid: %s", tostring(name), table.concat(M.presets(), ", ")), 2)
  end
  local cfg = copy(p)
  cfg.name = name
  for k, v in pairs(overrides or {}) do
    if k == "family" and v ~= p.family then
      error(string.format("models.preset: '%s' is a %s preset; family cannot be overridden", name, p.family), 2)
    end
    cfg[k] = copy(v)
  end
  return M.config(cfg, "models.preset " .. name)
end

-- Parameter count from the config alone (formula, no allocation).
function M.count_params(cfg)
  if type(cfg) == "string" then cfg = M.preset(cfg) end
  cfg = M.config(cfg)
  return M.families[cfg.family].count(cfg)
end

local function commas(n)
  local s = tostring(math.floor(n))
  local out = s:reverse():gsub("(%d%d%d)", "%1,"):reverse()
  return (out:gsub("^,", ""))
end
M.commas = commas

-- One line per preset with its family, shape and parameter count (formula):
--   bin/outlierlab run <(echo 'print(require("outlierlab.models").summary())')
function M.summary()
  local lines = {}
  for _, name in ipairs(M.presets()) do
    local c = M.preset(name)
    local shape = string.format("%2dL d%-4d %2dH F%-4d", c.n_layer, c.d_model, c.n_head, c.d_ff)
    if c.family == "vit" then shape = shape .. string.format(" %dpx/%d K%d", c.image_size, c.patch_size, c.n_classes)
    else shape = shape .. string.format(" V%d T%d", c.vocab_size, c.block_size) end
    lines[#lines + 1] = string.format("%-15s %-6s %13s  %s", name, c.family, commas(M.count_params(c)), shape)
  end
  return table.concat(lines, "\n")
end

-- The width-translation rule (docs/reference/models.md, "Starting where the paper's model starts"):
-- the attention scores' spread at initialisation grows with d·std² (q and k are sums over d inputs
-- of std-sized weights), so a model shrunk from the paper's width d_paper to d with the paper's
-- absolute std = 0.02 starts with nearly uniform attention (BERT: sd of log(p·T) 0.021 at d 64
-- against 0.22 at d 768; scripts/start-scales.lua). Keeping d·std² multiplies the block
-- projections' initial weights by √(d_paper / d). Families whose init already scales with width
-- (LLaMA's TinyLlama init, std = √(2/(5d))) get 1. The embeddings keep their std: the ratio of a
-- block's writes to the embedding then stays the paper model's too.
local PAPER_WIDTH = { bert = 768, opt = 768, gpt2 = 768, vit = 384, llama = 768 }
function M.width_gain(cfg)
  if type(cfg) == "string" then cfg = M.preset(cfg) end
  if cfg.family == "llama" and cfg.init ~= "hf" then return 1.0 end
  return math.sqrt(PAPER_WIDTH[cfg.family] / cfg.d_model)
end

-- the block projections init_gain scales: attention q/k/v/o and the MLP's up/gate/down weights
local function is_block_projection(name)
  return name:match("%.attn%.[qkvo]_proj%.weight$") or name:match("%.mlp%.[a-z]+_proj%.weight$")
end

-- build(ctx, cfg | preset name) -> model
function M.build(ctx, cfg)
  if type(cfg) == "string" then cfg = M.preset(cfg) end
  cfg = M.config(cfg, "models.build")
  local m = M.families[cfg.family].build(ctx, cfg)
  if cfg.init_gain ~= 1 then
    if not (cfg.init_gain > 0) then error(string.format("models.build: init_gain must be > 0, got %s", tostring(cfg.init_gain)), 2) end
    local ffi = require "ffi"
    for _, p in ipairs(m:parameters()) do
      if is_block_projection(ffi.string(p.name)) then
        for i = 0, tonumber(p.numel) - 1 do p.data[i] = p.data[i] * cfg.init_gain end
      end
    end
  end
  function m:describe()
    local c = self.cfg
    local shape = string.format("%dL d%d %dH F%d", c.n_layer, c.d_model, c.n_head, c.d_ff)
    if c.family == "vit" then
      shape = shape .. string.format(" %dpx/%d %d classes", c.image_size, c.patch_size, c.n_classes)
    else
      shape = shape .. string.format(" V%d T%d", c.vocab_size, c.block_size)
      if (c.embed_scale or 0) > 0 then shape = shape .. string.format(", token embedding × %g", c.embed_scale) end
    end
    if c.init_gain ~= 1 then shape = shape .. string.format(", block projections' init × %.3g", c.init_gain) end
    local att = type(c.attention) == "table" and (c.attention.kind or "softmax") or c.attention
    return string.format("%s (%s): %s parameters, %s, attention %s", c.name, c.family, commas(self:num_params()), shape, att)
  end
  return m
end

-- The model config of a trained-model spec ({ model = {preset =, overrides =}, data =, batch =,
-- seed = }; outlierlab.recipes): the preset with the overrides, the vocabulary size of the data
-- and the block size of the batch (text), and the seed. The one conversion of a spec (the
-- recipes, the memory bounds and the pretrained streaming all call it).
function M.spec_cfg(spec)
  local o = {}
  for k, v in pairs(spec.model.overrides or {}) do o[k] = v end
  if spec.batch.kind ~= "image" then
    o.vocab_size = spec.data and spec.data.vocab_size or o.vocab_size
    o.block_size = spec.batch.T
  end
  o.seed = spec.seed
  return M.preset(spec.model.preset, o)
end

return M
