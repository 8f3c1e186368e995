-- data/text — real text for pretrained models: any UTF-8 file, tokenized with the model's own
-- tokenizer (outlierlab.pretrained.tokenizers), cut into sequences with the model's conventions
-- (docs/reference/pretrained.md "Real text").
--
--   local text = require "outlierlab.data.text"
--   local c = text.corpus{ path = "kjv.txt", tokenizer = tk, max_tokens = 100000 }
--   c.tokens (int32 ffi array), c.n, c.vocab[id] (the token's text), c.special, c.category(id),
--   c.vocab_size, c.kind = "text", c.path
--   local b = text.batcher(c, { B = 4, T = 128, kind = "lm" | "mlm" })
--   local batch = b:next(ctx)          -- after ctx:reset(); b.step counts batches (settable)
--
-- Sequences are consecutive, non-overlapping pieces of the token stream from the start of the
-- file, so every sequence is real running text and the same file gives the same batches:
--   kind "lm"  (GPT-2, OPT, LLaMA): [BOS] + the next T−1 tokens; targets = the ids shifted by
--              one (the next token). BOS is the model's (GPT-2 <|endoftext|>, OPT </s>, LLaMA <s>);
--              a tokenizer without one gives T text tokens.
--   kind "mlm" (BERT): [CLS] + T−2 tokens + [SEP], token_type 0, pad_mask 1, targets −100
--              (nothing masked: the analyses look at the model reading plain text).
-- Only as much of the file is tokenized as the sequences need (max_tokens): the file is cut
-- after line breaks between two printable ASCII characters, where every supported tokenizer
-- splits anyway, so the tokens equal those of the whole text (tests/lua/test_tokenizer_long.lua).
local ffi = require "ffi"
local files = require "outlierlab.data.files"

local M = {}

local function read(path)
  local f, err = io.open(path, "rb")
  if not f then error("data.text: cannot open " .. tostring(err), 3) end
  local s, rerr = f:read("*a")
  f:close()
  if not s then error(string.format("data.text: cannot read %s: %s (a directory?)", path, tostring(rerr)), 3) end
  return s
end

-- corpus{path =, tokenizer =, max_tokens = nil (all), chunk = 65536 (bytes tokenized at once)}
-- -> corpus table (see above)
function M.corpus(o)
  if type(o) ~= "table" or type(o.path) ~= "string" then error("data.text.corpus: path (a text file) is required", 2) end
  local tk = o.tokenizer or error("data.text.corpus: tokenizer is required", 2)
  local s = read(o.path)
  if #s == 0 then error("data.text: " .. o.path .. " is empty", 2) end
  local at = files.utf8_error(ffi.cast("const uint8_t *", s), #s)
  if at >= 0 then error(string.format("data.text: %s: invalid UTF-8 at byte %d", o.path, at), 2) end
  local max = o.max_tokens or math.huge
  local chunk = o.chunk or 65536
  local ids = {}
  local pos, first = 1, true
  -- chunks end after a "\n" with a printable ASCII character on each side ("x\ny"): a token
  -- boundary for GPT-2's and LLaMA-3's regexes, SentencePiece words and WordPiece alike. Not
  -- "\n" before any non-space byte: before a non-breaking space (bytes C2 A0) or after another
  -- line break or a space, GPT-2's regex joins the "\n" to the whitespace around it
  -- (\s+(?!\S)), so a cut there changes the tokens. About 64 KB each; a tokenizer that has no
  -- such boundary (a SentencePiece vocabulary with tokens across "\n") reads the text whole.
  if tk.chunk_safe == false then chunk = math.huge end
  while pos <= #s and #ids < max do
    local stop = #s
    if #s - pos > chunk then
      local i = s:find("[!-~]\n[!-~]", pos + chunk)
      stop = i and i + 1 or #s
    end
    for _, id in ipairs(tk:encode(s:sub(pos, stop), { continuation = not first })) do ids[#ids + 1] = id end
    first = false
    pos = stop + 1
  end
  local n = math.min(#ids, max)
  if n == 0 then error("data.text: " .. o.path .. " gives no tokens", 2) end
  local buf = ffi.new("int32_t[?]", n)
  for i = 1, n do buf[i - 1] = ids[i] end
  local vocab = setmetatable({}, { __index = function(_, id) return tk:piece(id) end })
  return { tokens = buf, n = n, vocab = vocab, vocab_size = tk.vocab_size, special = tk.special, tokenizer = tk,
           category = function(id) return tk:category(id) end, kind = "text", path = o.path, complete = pos > #s }
end

-- how many text tokens one sequence of length T holds
function M.tokens_per_sequence(corpus, T, kind)
  if kind == "mlm" then return T - 2 end
  return corpus.special.bos and T - 1 or T
end

local Batcher = {}
Batcher.__index = Batcher

-- batcher(corpus, {B =, T =, kind = "lm"|"mlm", n = batches needed (checked now)})
function M.batcher(corpus, o)
  local kind = o.kind or "lm"
  local sp = corpus.special
  if kind == "mlm" and (not sp.cls or not sp.sep) then
    error("data.text: the tokenizer has no [CLS]/[SEP] tokens, needed for an encoder's sequences", 2)
  end
  local per = M.tokens_per_sequence(corpus, o.T, kind)
  if per < 1 then error(string.format("data.text: sequence length %d is too short", o.T), 2) end
  local self = setmetatable({ corpus = corpus, B = o.B, T = o.T, kind = kind, per = per, step = 0 }, Batcher)
  if o.n then
    local need = o.n * o.B * per
    if need > corpus.n then
      error(string.format("data.text: %s has %d tokens%s: %d sequences of %d tokens need %d (fewer batches, a shorter seq_len or a longer text)",
        corpus.path, corpus.n, corpus.complete and "" or " (as tokenized)", o.n * o.B, o.T, need), 2)
    end
  end
  return self
end
function Batcher:state() return { step = self.step } end
function Batcher:set_state(s) self.step = s.step end

function Batcher:next(ctx)
  local B, T, per = self.B, self.T, self.per
  local c, sp = self.corpus, self.corpus.special
  local first = self.step * B * per
  if first + B * per > c.n then
    error(string.format("data.text: %s: batch %d needs tokens up to %d, the text has %d", c.path, self.step, first + B * per, c.n), 2)
  end
  local ids = ctx:tensor({ B, T }, { dtype = "i32", name = "ids" })
  local tg = ctx:tensor({ B, T }, { dtype = "i32", name = "targets" })
  local tok = c.tokens
  for b = 0, B - 1 do
    local s = first + b * per
    local row = b * T
    if self.kind == "mlm" then
      ids.idata[row] = sp.cls
      for t = 1, T - 2 do ids.idata[row + t] = tok[s + t - 1] end
      ids.idata[row + T - 1] = sp.sep
      for t = 0, T - 1 do tg.idata[row + t] = -100 end
    else
      local off = sp.bos and 1 or 0
      if sp.bos then ids.idata[row] = sp.bos end
      for t = off, T - 1 do ids.idata[row + t] = tok[s + t - off] end
      for t = 0, T - 1 do
        local k = s + t + 1 - off
        tg.idata[row + t] = k < c.n and tok[k] or -100
      end
    end
  end
  self.step = self.step + 1
  local batch = { ids = ids, targets = tg }
  if self.kind == "mlm" then
    batch.token_type = ctx:tensor({ B, T }, { dtype = "i32", name = "token_type" }):fill_(0)
    batch.pad_mask = ctx:tensor({ B, T }, { dtype = "i32", name = "pad_mask" }):fill_(1)
  end
  return batch
end

return M
