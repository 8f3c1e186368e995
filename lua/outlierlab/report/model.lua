-- report/model — the model a report reads and the text it reads, whatever the model's origin:
--   a Hugging Face directory (config.json: outlierlab.pretrained), streamed layer by layer when
--     its fp32 weights exceed half the available memory (or --stream=yes);
--   a llama2.c checkpoint (a .bin file; outlierlab.pretrained.llama2c) with its tokenizer.bin;
--   a model of the cache (cache/models/<hash>: spec.json + model.safetensors), read on the
--     held-out split of the data it was trained on (the organism's task, the corpus or the KJV).
-- The default text of an imported model is the King James Bible (Debian's bible-kjv,
-- outlierlab.data.words) when the model's tokenizer fits it (at most MAX_UNK of its tokens unknown).
--
--   local src = require("outlierlab.report.model").open(path, { text =, seq_len =, batch =, batches =, stream =, cache = })
--   src.name, src.label, src.kind ("hf" | "llama2c" | "cache"), src.ctx, src.m, src.streamed,
--   src.corpus (vocab, category), src.T, src.B, src.n, src.text_label
--   src:probe(P)           -- the n held-out batches through the probes P (one pass)
--   src:loss_batches()     -- the same batches, persistent, for the loss passes (nil when streamed)
--   src:weight(l)          -- layer l's down projection weight (the streamed block's during its pass)
--   src:blocks()           -- for l, blk in src:blocks() (l 1-based)
local fs = require "outlierlab.util.fs"
local json = require "outlierlab.util.json"
local E = require "outlierlab.measure.batches"
local quant = require "outlierlab.compress.rtn"

local M = {}
M.MAX_UNK = 0.05
M.BATCH, M.SEQ_LEN = 4, 128   -- an imported model's batches: 4 sequences of (at most) 128 tokens

local Src = {}
Src.__index = Src

local function is_dir(p) return os.execute("test -d '" .. p:gsub("'", "'\\''") .. "'") == 0 end
local function is_file(p) return os.execute("test -f '" .. p:gsub("'", "'\\''") .. "'") == 0 end

-- the KJV as a file under the cache (written once, atomically): data/text reads files
local function kjv_file(cache)
  local path = cache .. "/texts/kjv.txt"
  if not is_file(path) then
    fs.mkdir_p(cache .. "/texts", "report: the default text's folder")
    fs.write_atomic(path, require("outlierlab.data.words").text("kjv"))
  end
  return path
end

-- the share of the corpus' tokens that are the tokenizer's unknown token
local function unk_share(corpus)
  local unk = corpus.special and corpus.special.unk
  if not unk then return 0 end
  local n = 0
  for i = 0, corpus.n - 1 do if corpus.tokens[i] == unk then n = n + 1 end end
  return n / math.max(corpus.n, 1)
end

local function open_cache(path, o)
  local recipes = require "outlierlab.recipes"
  local batcher = require "outlierlab.data.batcher"
  local text = fs.read_file(path .. "/spec.json")
  if not text then error("report: " .. path .. " has no spec.json: not a model directory of the cache", 0) end
  local ok, v = pcall(json.decode, text, path .. "/spec.json")
  if not ok or type(v) ~= "table" or type(v.spec) ~= "table" then error("report: " .. path .. "/spec.json holds no spec", 0) end
  if not is_file(path .. "/model.safetensors") then error("report: " .. path .. " has no model.safetensors (not trained yet?)", 0) end
  if o.text and o.text ~= "" then
    error("report: " .. path .. " is a model of the cache: it is read on the held-out split of its own data (its tokens are not a text's); leave TEXT out", 0)
  end
  local spec = v.spec
  if spec.batch.kind ~= "lm" then error("report: " .. path .. " is not a decoder (batch kind " .. tostring(spec.batch.kind) .. "): the report reads decoders", 0) end
  batcher.active_cache_root = o.cache
  local ctx, m, loaders = recipes.load(spec, { ckpt = path .. "/model.safetensors" })
  if o.seq_len and o.seq_len > 0 then
    if o.seq_len > m.cfg.block_size then
      error(string.format("report: seq_len %d exceeds the model's %d positions (%s)", o.seq_len, m.cfg.block_size, path), 0)
    end
    spec.batch.T = o.seq_len
  end
  if o.batch and o.batch > 0 then spec.batch.B = o.batch end
  local corpus = batcher.corpus(spec.data)
  local hash = path:gsub("/+$", ""):match("([^/]+)$")
  local self = setmetatable({ kind = "cache", dir = path, name = "cache-" .. hash, ctx = ctx, m = m, spec = spec, corpus = corpus,
                              T = spec.batch.T, B = spec.batch.B, n = o.batches, loaders = loaders }, Src)
  self.label = string.format("%s (model %s of the cache: %s, %s parameters)", self.name, hash, spec.model.preset,
    require("outlierlab.models").commas(m:num_params()))
  self.text_label = string.format("the held-out split of its training data (%s, seed %d)", spec.data.kind or "?", spec.seed + 1)
  return self
end

local function open_hf(path, o)
  local pretrained = require "outlierlab.pretrained"
  local textfile, default = o.text, false
  if not textfile or textfile == "" then textfile, default = kjv_file(o.cache), true end
  local pre = pretrained.attach({ id = "report" }, { model = path, text = textfile, stream = o.stream or "auto" }, { seq_len = o.seq_len })
  local B, T, n = (o.batch or 0) > 0 and o.batch or M.BATCH, o.seq_len or math.min(M.SEQ_LEN, pre.cfg.block_size), o.batches
  local ctx, m = pre:load(function(fmt, ...) io.write("[report] ", string.format(fmt, ...), "\n") io.flush() end)
  local corpus = pre:corpus(n * B * T + 16)
  if default and unk_share(corpus) > M.MAX_UNK then
    error(string.format("report: %s's tokenizer does not fit the King James text (%.0f %% unknown tokens): give TEXT=FILE", path, 100 * unk_share(corpus)), 0)
  end
  local self = setmetatable({ kind = "hf", dir = path, name = pre.name, label = pre:label(), pre = pre, ctx = ctx, m = m,
                              streamed = m.streamed or false, corpus = corpus, T = T, B = B, n = n,
                              spec = { batch = { B = B, T = T, kind = "lm" } } }, Src)
  self.text_label = default and "the King James Bible (Debian's bible-kjv), from Genesis 1:1" or textfile
  return self
end

-- a llama2.c checkpoint (a .bin, or a directory holding one and its tokenizer.bin): imported
-- by outlierlab.pretrained (pretrained/llama2c.lua), read as a Hugging Face directory is
local function open_llama2c(path, o)
  local self = open_hf(path, o)
  self.kind = "llama2c"
  return self
end

function M.open(path, o)
  if type(path) ~= "string" or path == "" then error("report: MODEL is required (a Hugging Face directory, a llama2.c .bin or cache/models/<hash>)", 0) end
  path = path:gsub("/+$", "")
  if require("outlierlab.pretrained.llama2c").detect(path) then return open_llama2c(path, o) end
  if is_dir(path) then
    if is_file(path .. "/spec.json") then return open_cache(path, o) end
    if is_file(path .. "/config.json") then return open_hf(path, o) end
    error("report: " .. path .. " is a directory without config.json (Hugging Face) or spec.json (the cache)", 0)
  end
  error("report: " .. path .. ": no such model (a Hugging Face directory, a llama2.c .bin or cache/models/<hash>)", 0)
end

function Src:probe(P)
  E.probe_batches(self.ctx, self.m, P, self.corpus, self.spec, self.n)
end

function Src:loss_batches()
  if self.streamed then return nil end
  if self._lb then return self._lb end
  if self.kind == "cache" then
    self._lb = quant.batches(self.ctx, self.loaders.val(), self.n)
  else
    local text = require "outlierlab.data.text"
    self._lb = quant.batches(self.ctx, text.batcher(self.corpus, { B = self.B, T = self.T, kind = "lm", n = self.n }), self.n)
  end
  return self._lb
end

function Src:weight(l)
  if self.streamed then return self.m.block.mlp.down.weight end
  return self.m.blocks[l + 1].mlp.down.weight
end

function Src:blocks() return E.blocks(self.m) end

function Src:token(id) return E.token_label(self.corpus, id) end

function Src:close()
  if self.m and self.m.close then self.m:close() end
end

return M
