-- test_models_paper — the papers' model shapes: parameter counts from the formulas against
-- the known numbers of the published models, and the real GPT-2 124M built once (about
-- 500 MB of parameters; a few seconds) with its init and a small forward.
local ol = require "outlierlab"
local t = require "tap"
local models = require "outlierlab.models"
local now = require("outlierlab.util.progress").now

local function persistent_ids(ctx, B, T, fn)
  local x = ctx:tensor({ B, T }, { dtype = "i32", persistent = true })
  for b = 0, B - 1 do for i = 0, T - 1 do x.idata[b * T + i] = fn(b, i) end end
  return x
end

-- ---------------------------------------------------------------- parameter counts (formula)
do
  local known = {
    -- GPT-2 as SO trains it (nanoGPT bias=False, vocab padded to 50304, block 1024, tied)
    { "gpt2-124m", nil, 124373760 },
    -- the original GPT-2 small (vocab 50257, biases): Hugging Face's count
    { "gpt2-124m", { vocab_size = 50257, bias = true }, 124439808 },
    -- Hugging Face BertForMaskedLM (no pooler, MLM head with its own decoder bias)
    { "bert-base", nil, 109514298 },
    { "opt-125m", nil, 125239296 },
    { "vit-s16", nil, 22050664 },
    -- lit-gpt tiny_LLaMA_120M: 12L, d 768, 12 heads, 1 kv head, F 2048, V 32000, untied
    { "tinyllama-120m", nil, 121129728 },
  }
  for _, k in ipairs(known) do
    local n = models.count_params(models.preset(k[1], k[2]))
    t.is(n, k[3], string.format("parameter count of %s%s = %s", k[1], k[2] and " (vocab 50257, biases)" or "",
      models.commas(k[3])))
  end
  -- BertModel with pooler (no MLM head): the usual "BERT-base 110M" number
  local _, parts = models.count_params(models.preset("bert-base"))
  t.is(parts.embeddings + parts.layers + parts.pooler, 109482240, "BERT-base encoder + pooler = 109,482,240")
  t.is(models.count_params(models.preset("bert-base", { pooler = true })), 109514298 + 590592,
    "bert-base with pooler = MLM model + 590,592")
  t.is(models.count_params(models.preset("vit-s16", { patch_ln = true })), 22050664 + 768,
    "ViT-S/16 with the LayerNorm after the patch embedding adds 2·384")
end

t.diag(models.summary())

-- ---------------------------------------------------------------- the real GPT-2 124M, built once
do
  local ctx = ol.Context()
  local t0 = now()
  local m = models.build(ctx, "gpt2-124m")
  local dt = now() - t0
  t.is(m:num_params(), 124373760, "built gpt2-124m has 124,373,760 parameters")
  t.diag(m:describe() .. string.format(" (built in %.1f s)", dt))
  local n = 0
  for _ in pairs(ctx:params()) do n = n + 1 end
  t.is(n, 2 + 12 * 8 + 1, "gpt2-124m: wte, wpe, 8 tensors per block (q,k,v,o, up, down, 2 LN gains; no biases), ln_f; no lm_head (tied)")
  -- residual projections start with std 0.02/√(2L) (nanoGPT), other weights 0.02
  local function sample_std(p)
    local s, ss, N = 0, 0, tonumber(p.numel)
    for i = 0, N - 1 do s = s + p.data[i]; ss = ss + p.data[i] * p.data[i] end
    return math.sqrt(ss / N - (s / N) ^ 2)
  end
  t.near(sample_std(m.blocks[1].attn.o.weight), 0.02 / math.sqrt(24), 2e-4, "GPT-2 attention out-proj init std 0.02/√(2L)")
  t.near(sample_std(m.blocks[12].mlp.down.weight), 0.02 / math.sqrt(24), 2e-4, "GPT-2 MLP down-proj init std 0.02/√(2L)")
  t.near(sample_std(m.blocks[1].attn.q.weight), 0.02, 2e-4, "GPT-2 q-proj init std 0.02")
  -- a forward at a small batch works at full width
  local ids = persistent_ids(ctx, 1, 8, function(_, i) return i * 1000 end)
  local logits = ctx:no_grad(function() return m:forward({ ids = ids }, { train = false }) end)
  t.is(logits:shape_str(), "(1,8,50304)", "gpt2-124m logits (B,T,V)")
  ctx:reset()
  m, ctx = nil, nil
  collectgarbage()
end

return t.done()
