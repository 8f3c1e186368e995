-- test_hf_refusal_messages — refusals of a Hugging Face directory that used to say something
-- other than what is wrong (issue 52): each now names the file and the key at fault.
--   model_type 5                        (was: "has no 'model_type'")
--   tie_word_embeddings true, a different lm_head   (was: "an untied llama head is not supported")
--   a Unigram tokenizer.json            (was: "'model.vocab' must be an object")
--   a list weight_map                   (was: an error about the first tensor)
--   bos_token_id beyond vocab_size      (was: an embedding error in the forward, naming neither)
local t = require "tap"
local ol = require "outlierlab"
local hf = require "outlierlab.pretrained.hf"
local tokenizers = require "outlierlab.pretrained.tokenizers"
local json = require "outlierlab.util.json"
local tiny = dofile(ol.root .. "/tests/lua/lib/tiny_llama_dir.lua")

local root = os.tmpname()
os.remove(root)
os.execute("mkdir -p " .. root)
local function write(path, s) local f = assert(io.open(path, "wb")) f:write(s) f:close() end
local function edit_config(dir, fn)
  local c = json.decode(t.slurp(dir .. "/config.json"))
  fn(c)
  write(dir .. "/config.json", json.encode(c))
end

local base = tiny(root .. "/untied", { tie_embeddings = false, tokenizer = false })
local function copy(name) local d = root .. "/" .. name os.execute("cp -r " .. base .. " " .. d) return d end
t.lives(function() hf.open(base):close() end, "the untied LLaMA directory opens")

local d = copy("model_type_number")
edit_config(d, function(c) c.model_type = 5 end)
t.throws(function() hf.open(d) end, d .. ": config.json 'model_type' must be a string, got 5", "model_type 5: must be a string")
t.throws(function() hf.config(d) end, "'model_type' must be a string, got 5", "hf.config says the same")

d = copy("tied_flag")
edit_config(d, function(c) c.tie_word_embeddings = true end)
t.throws(function() hf.load(d) end,
  "tensor 'lm_head.weight' differs from 'model.embed_tokens.weight', but config.json 'tie_word_embeddings' is true: the head is tied to the embedding. If the checkpoint's head is its own, set \"tie_word_embeddings\": false in config.json",
  "tie_word_embeddings true with a different lm_head: the flag named, and how to untie")

d = copy("unigram")
write(d .. "/tokenizer.json", json.encode { model = { type = "Unigram", unk_id = 0, vocab = { { "<unk>", 0 }, { "▁a", -1.5 } } } })
t.throws(function() tokenizers.load(d) end, d .. "/tokenizer.json: model type 'Unigram' is not supported (BPE, WordPiece)",
  "a Unigram tokenizer.json: the model type named")

d = copy("list_weight_map")
os.execute("mv " .. d .. "/model.safetensors " .. d .. "/model-00001-of-00001.safetensors")
write(d .. "/model.safetensors.index.json", json.encode { metadata = {}, weight_map = { "model-00001-of-00001.safetensors" } })
t.throws(function() hf.open(d) end, "model.safetensors.index.json 'weight_map' must be an object {tensor name: shard file}, got a list",
  "a list weight_map: must be an object")
write(d .. "/model.safetensors.index.json", json.encode { metadata = {}, weight_map = "model-00001-of-00001.safetensors" })
t.throws(function() hf.open(d) end, "'weight_map' must be an object {tensor name: shard file}, got \"model-00001-of-00001.safetensors\"",
  "a string weight_map: the same")

d = copy("bos_beyond")
edit_config(d, function(c) c.bos_token_id = 70000 end)
t.throws(function() hf.open(d) end, d .. ": config.json 'bos_token_id' = 70000 is not a token id of the model ('vocab_size' = 256)",
  "bos_token_id beyond vocab_size: refused at import, naming file and key")
edit_config(d, function(c) c.bos_token_id = -1 end)
t.throws(function() hf.open(d) end, "'bos_token_id' = -1 is not a token id", "a negative bos_token_id too")
edit_config(d, function(c) c.bos_token_id = json.null end)
t.lives(function() hf.open(d):close() end, "bos_token_id null is accepted")

os.execute("rm -rf " .. root)
return t.done()
