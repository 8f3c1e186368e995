-- data — everything the models train on; nothing is downloaded (docs/reference/data.md).
--
--   local data = require "outlierlab.data"
--   local c  = data.corpus{ seed = 1, n_tokens = 1e6, vocab_size = 1024 }   -- synthetic text
--   c.tokens (int32 ffi array), c.n, c.vocab[id], c.special.bos, c.category(id)
--   local tr = data.LMLoader{ tokens = c, B = 8, T = 128, seed = 1 }        -- GPT/OPT/LLaMA
--   local mlm = data.MLMLoader{ corpus = c, B = 8, T = 128, seed = 1 }      -- BERT
--   local img = data.ImageLoader{ n = 4096, size = 32, classes = 4, B = 16, patch = 8 }  -- ViT
--   local tf = data.open_tokens("fineweb_train_000001.bin")                 -- nanoGPT / llm.c files
--   local bc = data.byte_corpus{ "my.txt" }                                 -- bring your own text
--
-- Parts: data/corpus.lua (generator), data/loaders.lua (LM and MLM batches), data/files.lua
-- (token files, byte-level tokenizer, vocabulary files), data/images.lua (ViT images).
local corpus = require "outlierlab.data.corpus"
local loaders = require "outlierlab.data.loaders"
local files = require "outlierlab.data.files"
local images = require "outlierlab.data.images"

local M = {}

-- data.corpus{seed=, n_docs=|n_tokens=, vocab_size=1024, topic_bias=0.6} -> corpus table:
-- {tokens = int32 array, n, vocab = {[id] = string}, vocab_size, special = {bos, eos, pad,
--  cls, sep, mask, period, comma, newline}, category = fn(id) -> "initial"|"delimiter"|
--  "weak"|"other", n_docs, doc_start, n_sentences, sent_start, sent_len, sent_doc}
function M.corpus(opts) return corpus.generate(opts) end
M.vocabulary = corpus.vocabulary
M.WEAK_WORDS = corpus.WEAK

M.LMLoader = loaders.LMLoader
M.MLMLoader = loaders.MLMLoader
M.sentences = loaders.sentences
M.ImageLoader = images.ImageLoader
M.image = images.image
M.image_classes = images.class_names

M.open_tokens = files.open_tokens
M.write_tokens = files.write_tokens
M.byte_corpus = files.byte_corpus
M.save_vocab = files.save_vocab
M.load_vocab = files.load_vocab

-- token frequencies of a corpus: list of {id=, count=} sorted by count (ties by id)
function M.frequencies(c)
  local counts = {}
  local tok = c.tokens
  for i = 0, c.n - 1 do local x = tok[i] counts[x] = (counts[x] or 0) + 1 end
  local list = {}
  for id, n in pairs(counts) do list[#list + 1] = { id = id, count = n } end
  table.sort(list, function(a, b) if a.count ~= b.count then return a.count > b.count end return a.id < b.id end)
  return list
end

return M
