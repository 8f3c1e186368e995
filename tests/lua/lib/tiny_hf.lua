-- tests/lua/lib/tiny_hf.lua — a small Hugging Face directory for the tests that read one: a model
-- of the preset with deterministic random weights (norm gains 1 ± 0.5, the rest 0.1 × (−1, 1)),
-- exported by outlierlab.pretrained.hf, and a SentencePiece-style BPE tokenizer with byte
-- fallback (<unk> 0, <s> 1, </s> 2, the bytes 3..255); extra pieces and merges may be added.
--   local tiny_hf = dofile(ol.root .. "/tests/lua/lib/tiny_hf.lua")
--   tiny_hf(dir, "llama-quick", { tie_embeddings = false }, { vocab = { ["▁a"] = 260 }, merges = { "▁ a" } })
local ol = require "outlierlab"
local ffi = require "ffi"
local json = require "outlierlab.util.json"
local models = require "outlierlab.models"
local hf = require "outlierlab.pretrained.hf"
local R = dofile(ol.root .. "/tests/lua/lib/hf_reference.lua")   -- R.rand: deterministic values in (-1, 1)

local function write(path, s) local f = assert(io.open(path, "wb")) f:write(s) f:close() end

return function(dir, preset, over, extra)
  extra = extra or {}
  local ctx = ol.Context{ params = 2 * 1024 * 1024, seed = 7 }
  local m = models.build(ctx, models.preset(preset, over))
  local k = 0
  for _, p in ipairs(ctx:params()) do
    local gain = ffi.string(p.name):find("ln") or ffi.string(p.name):find("norm")
    for i = 0, tonumber(p.numel) - 1 do
      k = k + 1
      p.data[i] = gain and (1 + 0.5 * R.rand(k)) or 0.1 * R.rand(k)
    end
  end
  hf.export(dir, ctx, m, { special = { bos = 1, eos = 2 } })
  local vocab = { ["<unk>"] = 0, ["<s>"] = 1, ["</s>"] = 2 }
  for b = 0, 252 do vocab[string.format("<0x%02X>", b)] = 3 + b end
  for piece, id in pairs(extra.vocab or {}) do vocab[piece] = id end
  write(dir .. "/tokenizer.json", json.encode({ model = { type = "BPE", byte_fallback = true, vocab = vocab, merges = extra.merges or {} },
    normalizer = { type = "Sequence", normalizers = { { type = "Prepend", prepend = "▁" }, { type = "Replace", pattern = { String = " " }, content = "▁" } } } }))
  write(dir .. "/tokenizer_config.json", json.encode({ bos_token = "<s>", eos_token = "</s>" }))
  return dir
end
