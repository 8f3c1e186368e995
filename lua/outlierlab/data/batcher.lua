-- data/batcher — the generated corpus or organism task of a spec (memoised) and the one batcher
-- of its batches: LM and MLM rows cut from the corpus stream, the organism's generated batches,
-- and the synthetic images of the ViT specs (image_loader).
local ol = require "outlierlab"
local dist = require "outlierlab.util.dist"
local progress = require "outlierlab.util.progress"
local json = require "outlierlab.util.json"
local bounds = require "outlierlab.data.bounds"

local M = {}


-- data.corpus{seed, n_tokens, vocab_size}, memoised per settings (the generated corpus of
-- outlierlab.data: tokens, vocab, special ids, category(id)). From CORPUS_FILE_TOKENS tokens on
-- (the paper profiles) the corpus is written once to cache/corpora/ and memory-mapped
-- (outlierlab.data.corpus_file): the ranks share one copy instead of generating one each.
M.CORPUS_FILE_TOKENS = 2 ^ 25
local corpora = {}
function M.corpus(d, run)
  if run and run.pretrained then   -- the text file in the model's tokens (outlierlab.pretrained)
    local c = run.cfg
    return run.pretrained:corpus(c.eval_batches and c.batch and c.seq_len and c.eval_batches * c.batch * c.seq_len + 16)
  end
  local key = json.canonical(d)
  if not corpora[key] and d.kind == "organism" then
    corpora[key] = M.organism_task(d)
  end
  if not corpora[key] and d.kind == "mix" then   -- the task and the text in one stream (outlierlab.data.mix)
    corpora[key] = require("outlierlab.data.mix").corpus(M.corpus(d.task), M.corpus(d.text), d.p_text)
  end
  if not corpora[key] and d.kind == "words" then   -- a real text, word by word (outlierlab.data.words)
    local words = require "outlierlab.data.words"
    local have = words.digest(d.source)
    if d.text_hash and d.text_hash ~= have then
      error(string.format("data: the %s text on this machine (hash %s) is not the one of the spec (%s): another edition of its package",
        d.source, have, d.text_hash), 0)
    end
    corpora[key] = words.corpus{ source = d.source, vocab_size = d.vocab_size, n_weak = d.n_weak }
  end
  if not corpora[key] then
    if (d.n_tokens or 0) >= M.CORPUS_FILE_TOKENS then
      -- paper scale: generated once into a token file under the cache, mapped by every rank
      local root = run and run.cache_root or os.getenv("OUTLIERLAB_CACHE") or (ol.root .. "/cache")
      corpora[key] = require("outlierlab.data.corpus_file").corpus(d, root, function(fmt, ...)
        if progress.is_rank0() then io.stdout:write(string.format(fmt, ...), "\n") io.stdout:flush() end
      end)
    else
      local data = require "outlierlab.data"
      corpora[key] = data.corpus{ seed = d.seed, n_tokens = d.n_tokens, vocab_size = d.vocab_size }
    end
  end
  return corpora[key]
end

-- Batches cut from the corpus token stream, deterministic in (seed, step):
--   kind "lm"  (decoders): ids = [BOS, t_s .. t_{s+T-2}], targets = ids shifted by one
--   kind "mlm" (BERT): ids = [CLS, t_s .. t_{s+T-3}, SEP]; 15 % of the inner positions are
--              prediction targets, of which 80 % become [MASK], 10 % a random id, 10 % stay
--              (BERT §3.1); token_type 0, pad_mask 1.
-- split "train" draws starts from the first 90 % of the stream, "val" from the last 10 %.
local Batcher = {}
Batcher.__index = Batcher
-- Size bounds, central for every batcher (outlierlab.data.bounds): check_batch{B =, T =, kind =}
-- (lm: T >= 1, mlm: T >= 3, B >= 1)
function M.batcher(corpus, o)
  if corpus.kind == "image" then return M.image_batcher(corpus, o) end
  bounds.check_batch(o)   -- B >= 1 and the least T of the kind, before any row is written
  if corpus.kind == "organism" then return M.organism_batcher(corpus, o) end
  if corpus.kind == "mix" then
    if (o.kind or "lm") ~= "lm" then
      error("batcher: --p_text mixes the text into LM rows (the decoders); an encoder's MLM rows take --data=kjv instead", 2)
    end
    return require("outlierlab.data.mix").LMLoader{ mix = corpus, B = o.B, T = o.T, seed = o.seed or 1,
                                                     split = o.split or "train", shard = o.shard }
  end
  local self = setmetatable({ corpus = corpus, B = o.B, T = o.T, kind = o.kind or "lm", seed = o.seed or 1,
                              split = o.split or "train", step = 0, first = 0, rows = o.B }, Batcher)
  -- data parallel: this rank builds rows [first, first + rows) of every global batch of B rows
  -- (each row is a function of (seed, step, row) only, so the global batch is the same for
  -- any number of ranks)
  if o.shard then self.first, self.rows = dist.shard(o.B) end
  local n = corpus.n
  local cut = math.floor(n * 0.9)
  if self.split == "train" then self.lo, self.hi = 0, cut - self.T - 1
  else self.lo, self.hi = cut, n - self.T - 1 end
  if self.hi <= self.lo then
    error(string.format("batcher: corpus of %d tokens too small for T = %d (%s split)", n, self.T, self.split), 2)
  end
  return self
end
function Batcher:state() return { step = self.step } end
function Batcher:set_state(s) self.step = s.step end
function Batcher:next(ctx)
  local C = ol.C
  local B, T, sp = self.B, self.T, self.corpus.special
  local tok = self.corpus.tokens
  local rows, first = self.rows, self.first
  local ids = ctx:tensor({ rows, T }, { dtype = "i32", name = "ids" })
  local tg = ctx:tensor({ rows, T }, { dtype = "i32", name = "targets" })
  local seed = self.seed * 7919 + (self.split == "train" and 0 or 104729)
  local span = self.hi - self.lo
  local V = self.corpus.vocab_size or #self.corpus.vocab + 1
  for b = 0, rows - 1 do
    local gb = first + b   -- the row's index in the global batch
    local r = (self.step * B + gb) * 64
    local s = self.lo + math.floor(C.ol_rand_uniform(seed, r) * span)
    if self.kind == "lm" then
      ids.idata[b * T] = sp.bos
      for t = 1, T - 1 do ids.idata[b * T + t] = tok[s + t - 1] end
      for t = 0, T - 1 do tg.idata[b * T + t] = tok[s + t] end
    else
      ids.idata[b * T] = sp.cls
      for t = 1, T - 2 do ids.idata[b * T + t] = tok[s + t - 1] end
      ids.idata[b * T + T - 1] = sp.sep
      for t = 0, T - 1 do tg.idata[b * T + t] = -100 end
      for t = 1, T - 2 do
        local u = C.ol_rand_uniform(seed + 1, (self.step * B + gb) * T + t)
        if u < 0.15 then
          local orig = ids.idata[b * T + t]
          tg.idata[b * T + t] = orig
          local u2 = u / 0.15
          if u2 < 0.8 then ids.idata[b * T + t] = sp.mask
          elseif u2 < 0.9 then
            ids.idata[b * T + t] = math.floor(C.ol_rand_uniform(seed + 2, (self.step * B + gb) * T + t) * V) % V
          end
        end
      end
    end
  end
  self.step = self.step + 1
  local batch = { ids = ids, targets = tg }
  if self.kind == "mlm" then
    batch.token_type = ctx:tensor({ rows, T }, { dtype = "i32", name = "token_type" }):fill_(0)
    batch.pad_mask = ctx:tensor({ rows, T }, { dtype = "i32", name = "pad_mask" }):fill_(1)
  end
  return batch
end

-- The model organism's data (outlierlab.data.organism, docs/reference/data.md): a spec's data =
-- { kind = "organism", vocab_size =, n_triggers =, groups =, alpha =, p_trigger =, n_delim =, p_delim =,
-- n_weak =, p_weak =, seed = } instead of the corpus' { seed =, n_tokens =, vocab_size = }.
-- The task stands in for a corpus everywhere: vocab, special, category, vocab_size; its
-- batches are generated, never cut from a stream (kind "lm" or "mlm").
function M.organism_task(d)
  local org = require "outlierlab.data.organism"
  local o = {}
  for k, v in pairs(d) do if k ~= "kind" then o[k] = v end end
  local task = org.task(o)
  task.kind = "organism"
  return task
end
function M.organism_batcher(task, o)
  local org = require "outlierlab.data.organism"
  local L = (o.kind or "lm") == "mlm" and org.MLMLoader or org.LMLoader
  return L{ task = task, B = o.B, T = o.T, seed = o.seed or 1, split = o.split or "train", shard = o.shard }
end

-- The data settings of a spec from a profile: cfg.data = "organism" (the default profiles),
-- "corpus" (the generated text corpus; the paper profiles) or "kjv" (a real text, word by word);
-- the organism with p_text > 0 mixes the text into its LM rows (kind "mix").
function M.data_spec(cfg)
  if cfg.data == "organism" then
    local d = { kind = "organism", vocab_size = cfg.vocab_size, n_triggers = cfg.n_triggers, groups = cfg.groups,
                alpha = cfg.alpha, p_trigger = cfg.p_trigger, n_delim = cfg.n_delim, p_delim = cfg.p_delim,
                n_weak = cfg.n_weak, p_weak = cfg.p_weak, seed = cfg.data_seed }
    -- the recall tokens and loop-free copies enter the spec only when used (older specs keep their hash)
    if (cfg.n_recall or 0) > 0 then d.n_recall, d.p_recall = cfg.n_recall, cfg.p_recall end
    if (cfg.n_pointer or 0) > 0 then d.n_pointer, d.p_pointer, d.pointer_hops = cfg.n_pointer, cfg.p_pointer, cfg.pointer_hops end
    if cfg.loop_free then d.loop_free = true end
    -- BERT's segment layout (a [SEP] every sep_every positions; MLM rows only)
    if (cfg.sep_every or 0) > 0 then d.sep_every = cfg.sep_every end
    if cfg.segment_cls then d.segment_cls = true end
    -- --p_text=P: a share P of the rows are King James text (outlierlab.data.mix; LM rows only)
    if (cfg.p_text or 0) > 0 then
      local text = M.data_spec{ data = "kjv", vocab_size = 1024 }
      return { kind = "mix", p_text = cfg.p_text, task = d, text = text, vocab_size = d.vocab_size + text.vocab_size }
    end
    return d
  end
  if (cfg.p_text or 0) > 0 then
    error(string.format("settings: --p_text=%s mixes the text into the organism's task (--data=organism), not --data=%s",
      tostring(cfg.p_text), tostring(cfg.data)), 0)
  end
  if (cfg.sep_every or 0) > 0 or cfg.segment_cls then
    error(string.format("settings: --sep_every=%s%s needs the organism's data (--data=organism), not --data=%s",
      tostring(cfg.sep_every), cfg.segment_cls and " --segment_cls" or "", tostring(cfg.data)), 0)
  end
  -- a real English text, word by word (outlierlab.data.words): the King James Bible with its
  -- vocab_size − 7 most frequent words and marks (--vocab_size=1024 keeps 90 % of the words)
  if cfg.data == "kjv" then
    if (cfg.vocab_size or 0) < 256 then
      error(string.format("settings: --data=kjv needs --vocab_size of at least 256 (1024 keeps 90 %% of the words; got %s)",
        tostring(cfg.vocab_size)), 0)
    end
    return { kind = "words", source = "kjv", vocab_size = cfg.vocab_size, n_weak = 16,
             text_hash = require("outlierlab.data.words").digest("kjv") }
  end
  if cfg.data ~= "corpus" then
    error("settings: --data must be organism, corpus or kjv, got " .. tostring(cfg.data), 0)
  end
  return { seed = cfg.data_seed, n_tokens = cfg.n_tokens, vocab_size = cfg.vocab_size }
end

-- The synthetic images of an image spec's data d = { kind = "image", n =, size =, classes =,
-- seed =, style = } (outlierlab.data.images): M.batcher(d, { B =, patch =, split =, shard = })
-- comes here; shard = true: under MPI this rank takes its rows of every global batch (data parallel)
function M.image_batcher(d, o)
  bounds.check_batch{ B = o.B, kind = "image" }
  local data = require "outlierlab.data"
  return data.ImageLoader{ n = d.n, size = d.size, classes = d.classes, seed = d.seed, B = o.B,
                           split = o.split or "train", rank = o.shard and dist.rank() or 0, world = o.shard and dist.size() or 1,
                           style = d.style, patch = o.patch }
end
-- rows of a held-out (evaluation, analysis, calibration) batch of a spec: spec.batch.eval_B when
-- the recipe measures on batches of other rows than it trains on (a profile's eval_rows), else its B
function M.eval_B(spec) return spec.batch.eval_B or spec.batch.B end
-- the image batches of a spec: split "train" or "val", shard as above
function M.image_loader(spec, split, shard)
  return M.batcher(spec.data, { B = spec.batch.B, patch = spec.batch.patch, split = split, shard = shard })
end

return M
