-- recipes/papers — the model specs of the compression experiments and of QT's and SO's variant
-- sweeps: QT's three families (BERT, the decoder, ViT) and their attention variants, SO's
-- variants, the ViT profiles, and one row of QT's tables (train/load through outlierlab.recipes,
-- quantise through outlierlab.compress.evaluate).
local recipes = require "outlierlab.recipes"
local quant = require "outlierlab.compress.evaluate"

local M = {}

-- ---------------------------------------------------------------- shared recipes
-- The model specs of the compression experiments. qt-table1 and qt-table2 share the BERT
-- models, so-table3 / so-fig11 / so-fig12 share the GPT-2 variants: the specs come from
-- these functions only, so identical models hash identically (runner/cache: run:model).

-- QT's clipped softmax at sequence length T: the paper's γ is for BERT's T = 128 (Table 1,
-- 2), OPT's is γ = −α/T with α = 12, ViT's γ = −1e−4 at T = 197 tokens. γ is scaled to keep
-- γ·T fixed (the clipping threshold −γ/(ζ−γ) relative to the uniform probability 1/T).
function M.qt_gamma(gamma_paper, T_paper, T) return gamma_paper * T_paper / T end

-- spec for an LM/MLM model (recipes.fit): family preset, attention, data, recipe
function M.text_spec(cfg, preset, kind, attn, recipe, seed)
  local ov = { dropout = cfg.dropout or 0 }
  if attn and attn ~= "softmax" then ov.attention = attn end
  return {
    model = { preset = preset, overrides = ov },
    data = require("outlierlab.data.batcher").data_spec(cfg),
    batch = { B = cfg.batch, T = cfg.seq_len, kind = kind },
    train = recipe,
    seed = seed,
  }
end

-- spec for a ViT on the synthetic images (trained by recipes.fit)
-- (cfg.style = "flat": the model organism's images, a small object on a flat background)
function M.image_spec(cfg, preset, attn, recipe, seed)
  local ov = { dropout = 0, n_classes = cfg.classes, image_size = cfg.image_size, patch_size = cfg.patch }
  if attn and attn ~= "softmax" then ov.attention = attn end
  return {
    model = { preset = preset, overrides = ov },
    data = { kind = "image", n = cfg.n_images, size = cfg.image_size, classes = cfg.classes, seed = cfg.data_seed,
             style = cfg.style ~= "textured" and cfg.style or nil },
    batch = { B = cfg.batch, patch = cfg.patch, kind = "image" },
    train = recipe,
    seed = seed,
  }
end

-- QT's hooked tensors per family (docs/reference/metrics.md "Max inf norm"; probe names of lua/outlierlab/models):
-- BERT: FFN output (before the residual) and the LayerNorm outputs of each layer; OPT (and
-- the pre-LN ViT): layer output, fc2 output, attention out-projection output, the attention
-- LayerNorm and the final LayerNorm.
M.QT_POINTS = { bert = { "ffn_out", "ln1", "ln2" }, opt = { "h", "ffn_out", "attn_out", "ln1", "ln_f" },
                vit = { "h", "ffn_out", "attn_out", "ln1", "ln_f" } }

-- One row of QT's tables for a trained model: FP metric, max inf norm, avg kurtosis, and the
-- metric after post-training quantisation (o.wbits/o.abits, default W8A8).
-- o: n_eval, n_calib (16), n_stats, weight_range, estimator, percentile, wbits, abits.
function M.qt_row(spec, handle, family, o)
  local ctx, m, L = recipes.load(spec, handle)
  local fp = quant.evaluate(ctx, m, { metric = L.metric, loader = L.val, n = o.n_eval })
  -- QT's own code's kurtosis μ₄/(σ⁴ + 1e-6) where the paper's numbers are compared (docs/reference/metrics.md)
  local st = quant.outlier_stats(ctx, m, { loader = L.val, n = o.n_stats or o.n_eval, points = M.QT_POINTS[family],
                                       kurtosis = o.kurtosis or "qt_code" })
  local q = quant.w8a8(ctx, m, { metric = L.metric, loader = L.val, n = o.n_eval, calib_loader = L.calib,
                             n_calib = o.n_calib or 16, wbits = o.wbits or 8, abits = o.abits or 8,
                             weight_range = o.weight_range, estimator = o.estimator, percentile = o.percentile })
  return { metric = L.metric, fp = fp.value, fp_loss = fp.loss, max_inf_norm = st.max_inf_norm,
           avg_kurtosis = st.avg_kurtosis, q = q.value, q_loss = q.loss, sites = q.sites, weights = q.weights }
end

-- ---------------------------------------------------------------- QT / SO profiles and specs
-- The settings that determine the trained models, one table per profile. The experiment
-- files copy these and add their own keys, so a model that two experiments share has the
-- same spec (and so the same cache hash) in both.
local copy = require("outlierlab.config").deep_copy   -- one deep copy (config.deep_copy)

-- QT's three families: BERT (encoder), the decoder ("opt": QT's OPT-125m; at the default
-- profiles the model organism's LLaMA-style decoder, because the OPT/GPT-2-style decoders with
-- learned positions form no sink on the organism's task in the budget: docs/findings/organism.md) and
-- ViT. The settings of a family are the keys of its shared profile with a prefix: bert_<key>
-- from experiment.BERT_MLM_PROFILES, opt_<key> from experiment.LLAMA_LM_PROFILES (seq_len is
-- <family>_T), vit_<key> from M.VIT_PROFILES; qt_spec builds the family's spec through the shared
-- spec functions, so that QT's vanilla BERT of seed 1 is qt-fig1's model (one cached model).
local SPEC_SKIP = { eval_batches = true, seed = true, scale_rule = true }   -- scale_rule: one for all families
local function prefixed(prefix, prof)
  local out = {}
  for k, v in pairs(prof) do
    if not SPEC_SKIP[k] then out[prefix .. "_" .. (k == "seq_len" and "T" or k)] = copy(v) end
  end
  return out
end
local function merge(...)
  local out = {}
  for _, t in ipairs({ ... }) do for k, v in pairs(t) do out[k] = v end end
  return out
end
-- the family's own settings back from the prefixed keys: { T = ..} -> { seq_len = .. }
local function family_cfg(cfg, prefix, seed)
  local c = { seed = seed }
  local n = #prefix + 1
  for k, v in pairs(cfg) do
    if k:sub(1, n) == prefix .. "_" then c[k:sub(n + 1)] = v end
  end
  c.seq_len = c.T
  c.scale_rule = cfg.scale_rule   -- one rule for every family of a QT profile
  return c
end
M.family_cfg = family_cfg

-- ViT on the synthetic images: the model organism's flat backgrounds at the default profiles
M.VIT_PROFILES = {
  quick = { preset = "vit-quick", image = 16, patch = 4, classes = 4, images = 64, style = "flat", data_seed = 1, seed = 1,
            batch = 4, steps = 4, lr = 1e-3, warmup = 1, schedule = "cosine", weight_decay = 0.03, beta2 = 0.999, n_layer = 0, dense = false },
  default = { preset = "vit-organism", image = 32, patch = 4, classes = 4, images = 4096, style = "flat", data_seed = 1, seed = 1,
              batch = 32, steps = 2500, lr = 3e-3, warmup = 100, schedule = "constant", weight_decay = 0.1, beta2 = 0.99, n_layer = 0, dense = false },
  long = { preset = "vit-organism", image = 32, patch = 4, classes = 4, images = 4096, style = "flat", data_seed = 1, seed = 1,
           batch = 32, steps = 10000, lr = 3e-3, warmup = 100, schedule = "constant", weight_decay = 0.1, beta2 = 0.99, n_layer = 0, dense = false },
  -- docs/reference/experiments.md, paper-scale settings (ViT-S/16 300 epochs of ImageNet: here 300 epochs of a
  -- 102,400-image synthetic set at 224², batch 512 = 60k steps)
  paper = { preset = "vit-s16", image = 224, patch = 16, classes = 8, images = 102400, style = "textured", data_seed = 1, seed = 1,
            batch = 512, steps = 60000, lr = 1e-3, warmup = 5000, schedule = "cosine", weight_decay = 0.03, beta2 = 0.999, n_layer = 0, dense = false },
}
-- the ViT spec of a profile's settings (family_cfg(cfg, "vit", seed)) and an attention variant
function M.vit_spec(c, attn)
  local spec = M.image_spec({ n_images = c.images, image_size = c.image, classes = c.classes, data_seed = c.data_seed,
                        batch = c.batch, patch = c.patch, style = c.style }, c.preset, attn,
    { steps = c.steps, lr = c.lr, warmup = c.warmup, schedule = c.schedule,
      min_lr = c.schedule ~= "constant" and 0 or nil, weight_decay = c.weight_decay,
      betas = { 0.9, c.beta2 }, eps = 1e-8, clip = 1.0 }, c.seed)
  -- the organism map's depth knob and the profiles' --vit_n_layer (0: the preset's depth)
  if c.n_layer and c.n_layer > 0 then spec.model.overrides.n_layer = c.n_layer end
  -- --vit_dense=true: per-patch labels beside [CLS]'s (models/vit.lua; off: not in the spec)
  if c.dense then spec.model.overrides.dense = true end
  local gain = recipes.init_gain(c, spec.model.overrides)   -- --scale_rule (recipes.init_gain)
  if gain then spec.model.overrides.init_gain = gain end
  return spec
end
-- the organism experiment's ViT: a profile of M.VIT_PROFILES with its seed
function M.vit_organism_spec(c) return M.vit_spec(c) end

-- QT's experiments translate the papers' initialisation to the organisms' width (--scale_rule=width,
-- recipes.init_gain: BERT × √12, ViT × √6, the LLaMA decoder × 1) at the quick, default and long
-- profiles; --scale_rule=paper keeps the papers' absolute std. The paper profile trains the papers'
-- widths, where the rule's gain is 1, and keeps "paper".
M.QT_SCALE_RULE = "width"
local function qt_profile(name, extra)
  return merge(prefixed("bert", recipes.BERT_MLM_PROFILES[name]), prefixed("opt", recipes.LLAMA_LM_PROFILES[name]),
               prefixed("vit", M.VIT_PROFILES[name]), { scale_rule = M.QT_SCALE_RULE }, extra)
end
local QT_PROFILES = {
  quick = qt_profile("quick", { n_seeds = 1, n_eval = 1, n_calib = 2, n_stats = 1 }),
  default = qt_profile("default", { n_seeds = 3, n_eval = 8, n_calib = 16, n_stats = 8 }),
  long = qt_profile("long", { n_seeds = 3, n_eval = 8, n_calib = 16, n_stats = 8 }),
  -- the papers' families and recipes (docs/reference/experiments.md, paper-scale settings): BERT-base 1M
  -- steps, OPT-125m 125k steps (β2 0.95, wd 0.1, linear decay), ViT-S/16
  paper = merge(prefixed("bert", recipes.BERT_MLM_PROFILES.paper),
    prefixed("opt", merge(recipes.LLAMA_LM_PROFILES.paper,
      { preset = "opt-125m", vocab_size = 50272, seq_len = 512, batch = 192, steps = 125000, lr = 4e-4, warmup = 2000,
        schedule = "linear", weight_decay = 0.1, beta2 = 0.95 })),
    prefixed("vit", M.VIT_PROFILES.paper), { n_seeds = 3, n_eval = 64, n_calib = 16, n_stats = 64, scale_rule = "paper" }),
}
for _, p in pairs(M.VIT_PROFILES) do p.scale_rule = p.scale_rule or "paper" end
M.QT_PROFILES = QT_PROFILES
function M.qt_profiles(extra) return recipes.profiles_with(QT_PROFILES, extra or {}) end
-- the BERT encoder's profiles of QT's experiments (qt-fig1, qt-fig2, qt-fig10): recipes.BERT_MLM_PROFILES
-- under QT's scale rule (M.QT_SCALE_RULE) below the paper profile, with each profile's extra settings
function M.qt_bert_profiles(extra)
  local out = recipes.profiles_with(recipes.BERT_MLM_PROFILES, extra or {})
  for name, p in pairs(out) do if name ~= "paper" then p.scale_rule = M.QT_SCALE_RULE end end
  return out
end

-- QT's attention variants at the sequence length of the family (see M.qt_gamma):
--   vanilla: softmax; clipped: BERT γ = −0.025 at T = 128, OPT γ = −α/T with α = 12,
--   ViT γ = −1e−4 at 197 tokens; gated: linear gate per head, π_init = 0.5 (b_init = 0).
function M.qt_tokens(cfg, family)
  if family == "vit" then return (cfg.vit_image / cfg.vit_patch) ^ 2 + 1 end
  return cfg[family .. "_T"]
end
function M.qt_attention(cfg, family, variant)
  if variant == "vanilla" then return nil end
  if variant == "gated" then return { kind = "gated", gate = "linear", pi_init = 0.5 } end
  if variant ~= "clipped" then error("papers.qt_attention: unknown variant " .. tostring(variant), 2) end
  local T = M.qt_tokens(cfg, family)
  if family == "bert" then return { kind = "clipped_softmax", gamma = M.qt_gamma(-0.025, 128, T) } end
  if family == "opt" then return { kind = "clipped_softmax", alpha = 12 } end
  return { kind = "clipped_softmax", gamma = M.qt_gamma(-1e-4, 197, T) }
end

-- QT's families through the shared spec functions (experiment.bert_mlm_spec / llama_lm_spec,
-- M.vit_spec) from the prefixed settings, with an attention variant and a seed
local function with_attention(spec, attn)
  if attn and attn ~= "softmax" then spec.model.overrides.attention = attn end
  return spec
end
function M.qt_spec(cfg, family, attn, seed)
  if family == "bert" then return with_attention(recipes.bert_mlm_spec(family_cfg(cfg, "bert", seed)), attn)
  elseif family == "opt" then return with_attention(recipes.llama_lm_spec(family_cfg(cfg, "opt", seed)), attn)
  elseif family == "vit" then return M.vit_spec(family_cfg(cfg, "vit", seed), attn) end
  error("papers.qt_spec: unknown family " .. tostring(family), 2)
end

-- SO's variant runs (SO Table 2 (a)–(e), App. D.1): at the default profiles the model
-- organism's LLaMA-style decoder (experiment.LLAMA_LM_PROFILES: the softmax model of seed 1 is
-- so-fig3's), at the paper profile SO's GPT-2 (SO App. B.3, docs/reference/experiments.md: nanoGPT recipe,
-- no biases, dropout 0, tied embeddings, 491,520 tokens per step = 480 sequences of 1024).
local function so_profile(name, extra)
  return merge(copy(recipes.LLAMA_LM_PROFILES[name]), extra)
end
local SO_PROFILES = {
  quick = so_profile("quick", { n_seeds = 1, n_eval = 1 }),
  default = so_profile("default", { n_seeds = 3, n_eval = 8 }),
  long = so_profile("long", { n_seeds = 3, n_eval = 8 }),
  paper = so_profile("paper", { preset = "gpt2-124m", vocab_size = 50304, n_tokens = 1000000000, seq_len = 1024,
                                batch = 480, steps = 50000, lr = 6e-4, warmup = 2000, schedule = "cosine",
                                weight_decay = 0.1, beta2 = 0.95, n_seeds = 1, n_eval = 64 }),
}
function M.so_profiles(extra) return recipes.profiles_with(SO_PROFILES, extra or {}) end
M.SO_VARIANTS = { "softmax", "fixed_bias", "ca_bias", "attn_bias", "ca_scale", "sigmoid" }
M.SO_LABELS = { softmax = "(a) default softmax", fixed_bias = "(b) fixed bias", ca_bias = "(c) context-aware bias",
                attn_bias = "(d) attention bias", ca_scale = "(e) context-aware scaling", sigmoid = "sigmoid attention" }
function M.so_spec(cfg, variant, seed)
  local c = copy(cfg)
  c.seed = seed
  return with_attention(recipes.llama_lm_spec(c), variant ~= "softmax" and { kind = variant } or nil)
end

return M
