-- data/mix — the organism's task and a real text in one stream of LM rows: `--p_text=P` with
-- the organism's data (docs/reference/data.md, "The task mixed with real text"; docs/findings/organism.md, "Real
-- text"). A share P of the rows are windows of the King James Bible (outlierlab.data.words),
-- the rest the task's rows; the text's ids follow the task's (id V_task + k, <bos> shared),
-- so the model's vocabulary is V_task + V_text.
--
--   local mix = require "outlierlab.data.mix"
--   local c = mix.corpus(task, text, 0.5)    -- a data.organism task, a data.words corpus
--   c.vocab_size, c.vocab[id], c.category(id), c.special (the task's), c.kind = "mix"
--   local L = mix.LMLoader{ mix = c, B =, T =, seed =, split = "train" | "val", shard = }
--
-- Row g of the global batch at step s is a text row when U(stream + 8, s·B + g) < P: <bos> and
-- the T tokens of the text from a start drawn by U(stream + 9, s·B + g) in the split (the train
-- split is the text's first 90 %, the held-out split the rest), else the task's row of that
-- index (data.organism's LM rows). Every row is a function of (seed, split, step, row) only:
-- the same for any number of ranks, and a resumed run sees the same batches.
local ffi = require "ffi"
local ol = require "outlierlab"
local C = ol.C

local M = {}

function M.corpus(task, text, p_text)
  if type(p_text) ~= "number" or p_text <= 0 or p_text >= 1 then
    error("data.mix: p_text must be in (0, 1), got " .. tostring(p_text), 2)
  end
  local off, bos = task.vocab_size, task.special.bos
  if text.special.bos ~= bos then error("data.mix: the text's <bos> must be the task's", 2) end
  local toks = ffi.new("int32_t[?]", text.n)
  for i = 0, text.n - 1 do
    local k = text.tokens[i]
    toks[i] = k == bos and bos or off + k
  end
  local vocab = {}
  for id, s in pairs(task.vocab) do vocab[id] = s end
  for k, s in pairs(text.vocab) do if k ~= bos then vocab[off + k] = s end end
  local c = { kind = "mix", task = task, text = text, tokens = toks, n = text.n, p_text = p_text, offset = off,
              vocab_size = off + text.vocab_size, vocab = vocab, special = task.special }
  c.category = function(id)
    if id >= off then return text.category(id - off) end
    return task.category(id)
  end
  return c
end

local org = require "outlierlab.data.organism"
local Loader = { kind = "lm", min_T = 1 }
Loader.__index = Loader
Loader.state, Loader.set_state = org.loader_state, org.loader_set_state
function M.LMLoader(o)
  for k in pairs(o) do
    if not ({ mix = true, B = true, T = true, seed = true, split = true, shard = true })[k] then
      error("data.mix.LMLoader: unknown option '" .. tostring(k) .. "'", 2)
    end
  end
  local c = o.mix
  local self = setmetatable({ mix = c }, Loader)
  -- the organism loader's checks, streams (its task rows are the organism's rows of that index),
  -- sharding and row buffer
  org.loader_common(self, { task = c.task, B = o.B, T = o.T, seed = o.seed, split = o.split, shard = o.shard }, "data.mix.LMLoader")
  local cut = math.floor(c.n * 0.9)
  if self.split == "train" then self.lo, self.hi = 0, cut - self.T - 1 else self.lo, self.hi = cut, c.n - self.T - 1 end
  if self.hi <= self.lo then error(string.format("data.mix: text of %d tokens too small for T = %d", c.n, self.T), 2) end
  return self
end
function Loader:next(ctx)
  local c, T, stream, lo, span = self.mix, self.T, self.stream, self.lo, self.hi - self.lo
  return org.lm_batch(ctx, self, function(idx, buf)
    if C.ol_rand_uniform(stream + 8, idx) < c.p_text then
      local s = lo + math.floor(C.ol_rand_uniform(stream + 9, idx) * span)
      for t = 0, T - 1 do buf[t] = c.tokens[s + t] end
    else
      c.task.chain(stream, idx, T, buf)
    end
  end)
end

return M
