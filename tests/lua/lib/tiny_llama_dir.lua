-- tests/lua/lib/tiny_llama_dir.lua — a small Hugging Face LLaMA directory for the tests of the
-- pretrained path: the llama-quick preset (one key-value head) with its initial weights,
-- exported by hf.export (bos 1, eos 2), and unless opts.tokenizer == false a byte-fallback BPE
-- tokenizer.json (<unk>, <s>, </s>, then the bytes) with tokenizer_config.json naming <s>.
--   local tiny = dofile(ol.root .. "/tests/lua/lib/tiny_llama_dir.lua")
--   tiny(dir, { tie_embeddings = false, config = function(c) c.model_type = "mistral" end })
local ol = require "outlierlab"
local hf = require "outlierlab.pretrained.hf"
local json = require "outlierlab.util.json"
local models = require "outlierlab.models"
local fs = require "outlierlab.util.fs"

return function(dir, opts)
  opts = opts or {}
  local ctx = ol.Context{ params = 2 * 1024 * 1024, seed = 3 }
  local m = models.build(ctx, models.preset("llama-quick", { n_kv_head = 1, tie_embeddings = opts.tie_embeddings }))
  hf.export(dir, ctx, m, { special = { bos = 1, eos = 2 } })
  if opts.config then
    local c = json.decode(fs.read_file(dir .. "/config.json"))
    opts.config(c)
    fs.write_atomic(dir .. "/config.json", json.encode(c))
  end
  if opts.tokenizer ~= false then
    local vocab = { ["<unk>"] = 0, ["<s>"] = 1, ["</s>"] = 2 }
    for b = 0, 252 do vocab[string.format("<0x%02X>", b)] = 3 + b end
    fs.write_atomic(dir .. "/tokenizer.json", json.encode({ model = { type = "BPE", byte_fallback = true, vocab = vocab, merges = {} },
      normalizer = { type = "Sequence", normalizers = { { type = "Prepend", prepend = "▁" },
                                                        { type = "Replace", pattern = { String = " " }, content = "▁" } } } }))
    fs.write_atomic(dir .. "/tokenizer_config.json", json.encode({ bos_token = "<s>" }))
  end
  return dir
end
