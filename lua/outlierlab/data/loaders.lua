-- data/loaders — batches of step tensors for the models (batch layouts in docs/reference/interfaces.md).
--
--   local tr = data.LMLoader{ tokens = corpus, B = 8, T = 64, seed = 1 }    -- decoders
--   local b = tr:next(ctx)        -- after ctx:reset(): {ids = i32 (B,T), targets = i32 (B,T)}
--   local mlm = data.MLMLoader{ corpus = corpus, B = 8, T = 64, seed = 1 }  -- BERT
--   local s = tr:state() ... tr:set_state(s)  -- resume: the next batch is the same again
--
-- Determinism: batch `step` row g (g = 0..B-1 of the GLOBAL batch) is a function of (seed,
-- split, step, g) only. With world > 1, rank r receives rows [r·B/world, (r+1)·B/world) of
-- that global batch, so the union over ranks equals the world = 1 batch.
local ffi = require "ffi"
local ol = require "outlierlab"
local C = ol.C

local M = {}

local function check_int(opts, key, lo, what)
  local v = opts[key]
  if type(v) ~= "number" or v ~= math.floor(v) or v < lo then
    error(string.format("%s: %s must be an integer >= %d, got %s", what, key, lo, tostring(v)), 4)
  end
  return v
end

local function check_known(opts, known, what)
  for k in pairs(opts) do
    if not known[k] then error(what .. ": unknown option '" .. tostring(k) .. "'", 4) end
  end
end

-- the least T of an MLM pair row: [CLS] a [SEP] b [SEP] (the central bounds, outlierlab.train.bounds)
require("outlierlab.data.bounds").register_kind("mlm_pairs", { min_T = 5, why = "an MLM pair row is [CLS] a [SEP] b [SEP]" })

-- common options: B (global batch), T, seed, split, val_fraction, rank, world
local function common(self, opts, what)
  self.B = check_int(opts, "B", 1, what)
  self.T = check_int(opts, "T", 1, what)
  local ok, err = pcall(require("outlierlab.data.bounds").check_batch,
                        { B = self.B, T = self.T, kind = self.kind == "mlm" and "mlm_pairs" or self.kind })
  if not ok then error(what .. ": " .. tostring(err), 3) end
  self.seed = opts.seed or 1234
  if type(self.seed) ~= "number" or self.seed < 0 or self.seed ~= math.floor(self.seed) or self.seed >= 2 ^ 53 then
    error(what .. ": seed must be a non-negative integer", 3)
  end
  self.split = opts.split or "train"
  if self.split ~= "train" and self.split ~= "val" then error(what .. ": split must be 'train' or 'val', got " .. tostring(self.split), 3) end
  self.val_fraction = opts.val_fraction or 0.1
  if type(self.val_fraction) ~= "number" or self.val_fraction < 0 or self.val_fraction >= 1 then
    error(what .. ": val_fraction must be in [0, 1)", 3)
  end
  self.rank, self.world = opts.rank or 0, opts.world or 1
  if type(self.world) ~= "number" or self.world < 1 or self.world ~= math.floor(self.world) then error(what .. ": world must be a positive integer", 3) end
  if type(self.rank) ~= "number" or self.rank < 0 or self.rank >= self.world or self.rank ~= math.floor(self.rank) then
    error(what .. ": rank must be an integer in [0, world)", 3)
  end
  if self.B % self.world ~= 0 then
    error(string.format("%s: the global batch B = %d is not a multiple of world = %d", what, self.B, self.world), 3)
  end
  self.Bl = self.B / self.world
  self.row0 = self.rank * self.Bl
  -- the split's own stream: train and val never share random numbers
  self.stream = math.floor(C.ol_rand_uniform(self.seed, self.split == "train" and 0x7121 or 0x7a1) * 2 ^ 53)
  self.step = 0
end

local function state(self)
  return { kind = self.kind, step = self.step, seed = self.seed, B = self.B, T = self.T, split = self.split }
end
local function set_state(self, s)
  if type(s) ~= "table" then error(self.kind .. " loader: set_state expects a table", 3) end
  for _, k in ipairs { "kind", "seed", "B", "T", "split" } do
    if s[k] ~= nil and s[k] ~= self[k] then
      error(string.format("%s loader: set_state: saved %s = %s but this loader has %s", self.kind, k, tostring(s[k]), tostring(self[k])), 3)
    end
  end
  if type(s.step) ~= "number" or s.step < 0 or s.step ~= math.floor(s.step) then
    error(self.kind .. " loader: set_state: step must be an integer >= 0", 3)
  end
  self.step = s.step
end

-- ---------------------------------------------------------------- token sources
-- A source copies tokens [start, start+n) into an int32 pointer.
local function make_source(tokens, n, what)
  if type(tokens) == "table" and tokens.kind == "token_file" then
    local tf = tokens
    return { n = tf.n, copy = function(start, len, dst) tf:copy(start, len, dst) end, keep = tf }
  elseif type(tokens) == "table" and tokens.tokens ~= nil then
    local ptr = tokens.tokens
    local tn = n or tokens.n
    if tn > tokens.n then error(what .. ": n = " .. tn .. " exceeds the corpus' " .. tokens.n .. " tokens", 4) end
    return { n = tn, copy = function(start, len, dst) ffi.copy(dst, ptr + start, len * 4) end, keep = tokens }
  elseif type(tokens) == "cdata" then
    if type(n) ~= "number" then error(what .. ": an int32 pointer as tokens needs n", 4) end
    local ptr = ffi.cast("const int32_t *", tokens)
    return { n = n, copy = function(start, len, dst) ffi.copy(dst, ptr + start, len * 4) end, keep = tokens }
  end
  error(what .. ": tokens must be a corpus table, a token file (data.open_tokens) or an int32 pointer", 4)
end

-- ---------------------------------------------------------------- LM loader
local LMLoader = {}
LMLoader.__index = LMLoader
M.LMLoaderClass = LMLoader

-- data.LMLoader{tokens=, n=, B=, T=, seed=, split=, val_fraction=, rank=, world=}
-- Random windows of T+1 tokens from the split (train: the first 1-val_fraction of the
-- tokens, val: the rest): ids = window[0..T), targets = window[1..T].
function M.LMLoader(opts)
  local what = "data.LMLoader"
  check_known(opts or {}, { tokens = true, n = true, B = true, T = true, seed = true, split = true,
                            val_fraction = true, rank = true, world = true }, what)
  local self = setmetatable({ kind = "lm" }, LMLoader)
  common(self, opts, what)
  self.src = make_source(opts.tokens, opts.n, what)
  local N = self.src.n
  local cut = math.floor(N * (1 - self.val_fraction))
  if self.split == "train" then self.lo, self.hi = 0, cut else self.lo, self.hi = cut, N end
  local len = self.hi - self.lo
  if len < self.T + 1 then
    error(string.format("%s: the %s split has %d tokens, fewer than T+1 = %d (of %d tokens, val_fraction %g)",
                        what, self.split, len, self.T + 1, N, self.val_fraction), 2)
  end
  self.nwin = len - self.T          -- window starts lo .. hi-T-1
  self.buf = ffi.new("int32_t[?]", self.T + 1)
  return self
end

-- start of global row g of a step's batch
function LMLoader:window(step, g)
  return self.lo + math.floor(C.ol_rand_uniform(self.stream, step * self.B + g) * self.nwin)
end

function LMLoader:next(ctx)
  local B, T = self.Bl, self.T
  local ids = ctx:tensor({ B, T }, { dtype = "i32", name = "ids" })
  local tg = ctx:tensor({ B, T }, { dtype = "i32", name = "targets" })
  local buf = self.buf
  for r = 0, B - 1 do
    self.src.copy(self:window(self.step, self.row0 + r), T + 1, buf)
    ffi.copy(ids.idata + r * T, buf, T * 4)
    ffi.copy(tg.idata + r * T, buf + 1, T * 4)
  end
  self.step = self.step + 1
  return { ids = ids, targets = tg }
end
LMLoader.state, LMLoader.set_state = state, set_state
function LMLoader:reset() self.step = 0 end

-- ---------------------------------------------------------------- MLM loader
-- Sentences of a corpus: the synthetic corpus records them; otherwise a sentence is a run
-- of tokens ending in the period (or cut by BOS / newline / the document end).
local function sentences(c)
  if c.n_sentences then return c.n_sentences, c.sent_start, c.sent_len, c.sent_doc end
  if c._sent then return unpack(c._sent) end
  local sp = c.special
  local st, ln, dc = {}, {}, {}
  local ns, start, doc = 0, nil, -1
  local tok = c.tokens
  for i = 0, c.n - 1 do
    local x = tok[i]
    if x == sp.bos then
      if start and i > start then ns = ns + 1 st[ns], ln[ns], dc[ns] = start, i - start, doc end
      start, doc = nil, doc + 1
    elseif x == sp.newline then
      if start and i > start then ns = ns + 1 st[ns], ln[ns], dc[ns] = start, i - start, doc end
      start = nil
    else
      if not start then start = i end
      if x == sp.period then ns = ns + 1 st[ns], ln[ns], dc[ns] = start, i + 1 - start, doc start = nil end
    end
  end
  if start then ns = ns + 1 st[ns], ln[ns], dc[ns] = start, c.n - start, doc end
  local a, b, d = ffi.new("int32_t[?]", ns + 1), ffi.new("int32_t[?]", ns + 1), ffi.new("int32_t[?]", ns + 1)
  for i = 1, ns do a[i - 1], b[i - 1], d[i - 1] = st[i], ln[i], dc[i] end
  c._sent = { ns, a, b, d }
  return ns, a, b, d
end
M.sentences = sentences

local MLMLoader = {}
MLMLoader.__index = MLMLoader
M.MLMLoaderClass = MLMLoader

-- data.MLMLoader{corpus=, B=, T=, seed=, split=, val_fraction=, rank=, world=, mask_prob=0.15,
--                next_prob=0.5}
-- Each row: [CLS] a [SEP] b [SEP] [PAD]...; a is a random sentence of the split, b the
-- sentence after it in the same document with probability next_prob (is_next = 1), else a
-- random sentence (is_next = 0). The longer of a, b is cut from its end until the pair
-- fits T. Of the real tokens (not [CLS]/[SEP]/[PAD]), each is selected with probability
-- mask_prob; a selected token becomes [MASK] (80%), a random ordinary token (10%) or stays
-- (10%), and its target is the original id; every other target is -100 (BERT, Devlin et
-- al. 2019, §3.1). token_type is 0 up to the first [SEP], 1 after; pad_mask 1 = real.
function M.MLMLoader(opts)
  local what = "data.MLMLoader"
  check_known(opts or {}, { corpus = true, B = true, T = true, seed = true, split = true, val_fraction = true,
                            rank = true, world = true, mask_prob = true, next_prob = true }, what)
  local self = setmetatable({ kind = "mlm" }, MLMLoader)
  common(self, opts, what)
  local c = opts.corpus
  if type(c) ~= "table" or c.tokens == nil or type(c.special) ~= "table" then
    error(what .. ": corpus must be a corpus table (data.corpus or data.byte_corpus)", 2)
  end
  local sp = c.special
  for _, k in ipairs { "cls", "sep", "pad", "mask" } do
    if type(sp[k]) ~= "number" then error(what .. ": the corpus has no special token '" .. k .. "'", 2) end
  end
  self.c, self.sp = c, sp
  self.mask_prob = opts.mask_prob or 0.15
  self.next_prob = opts.next_prob or 0.5
  local ns, st, ln, dc = sentences(c)
  self.st, self.ln, self.dc = st, ln, dc
  local cut = math.floor(ns * (1 - self.val_fraction))
  if self.split == "train" then self.lo, self.hi = 0, cut else self.lo, self.hi = cut, ns end
  if self.hi - self.lo < 2 then
    error(string.format("%s: the %s split has %d sentences, need at least 2", what, self.split, self.hi - self.lo), 2)
  end
  -- ordinary ids (for the random replacement): every id but the specials
  local excl = {}
  for _, k in ipairs { "pad", "bos", "eos", "cls", "sep", "mask" } do if sp[k] then excl[sp[k]] = true end end
  local ord = {}
  for id = 0, c.vocab_size - 1 do if not excl[id] then ord[#ord + 1] = id end end
  self.ordinary = ffi.new("int32_t[?]", #ord)
  for i, id in ipairs(ord) do self.ordinary[i - 1] = id end
  self.n_ordinary = #ord
  return self
end

function MLMLoader:next(ctx)
  local B, T = self.Bl, self.T
  local ids = ctx:tensor({ B, T }, { dtype = "i32", name = "ids" })
  local tt = ctx:tensor({ B, T }, { dtype = "i32", name = "token_type" })
  local tg = ctx:tensor({ B, T }, { dtype = "i32", name = "targets" })
  local pm = ctx:tensor({ B, T }, { dtype = "i32", name = "pad_mask" })
  local nx = ctx:tensor({ B }, { dtype = "i32", name = "is_next" })
  local sp, tok = self.sp, self.c.tokens
  local st, ln, dc = self.st, self.ln, self.dc
  local lo, count = self.lo, self.hi - self.lo
  local stream = self.stream
  for r = 0, B - 1 do
    local g = self.row0 + r
    -- counters: 4 for the pair, 2 per position for masking
    local base = (self.step * self.B + g) * (2 * T + 4)
    local i = lo + math.floor(C.ol_rand_uniform(stream, base) * (count - 1))
    local j, is_next
    if C.ol_rand_uniform(stream, base + 1) < self.next_prob and dc[i + 1] == dc[i] and i + 1 < lo + count then
      j, is_next = i + 1, 1
    else
      j = lo + math.floor(C.ol_rand_uniform(stream, base + 2) * count)
      if dc[j] == dc[i] then j = lo + (j - lo + math.floor(count / 2)) % count end  -- another document
      is_next = 0
    end
    local la, lb = ln[i], ln[j]
    while la + lb > T - 3 do
      if la >= lb then la = la - 1 else lb = lb - 1 end
    end
    local o = r * T
    local p = 0
    local function put(id, typ)
      ids.idata[o + p], tt.idata[o + p], pm.idata[o + p], tg.idata[o + p] = id, typ, 1, -100
      p = p + 1
    end
    put(sp.cls, 0)
    for k = 0, la - 1 do put(tok[st[i] + k], 0) end
    put(sp.sep, 0)
    for k = 0, lb - 1 do put(tok[st[j] + k], 1) end
    put(sp.sep, 1)
    for q = p, T - 1 do ids.idata[o + q], tt.idata[o + q], pm.idata[o + q], tg.idata[o + q] = sp.pad, 0, 0, -100 end
    -- masking of the real tokens
    for q = 1, p - 2 do
      local id = ids.idata[o + q]
      if id ~= sp.sep and C.ol_rand_uniform(stream, base + 4 + 2 * q) < self.mask_prob then
        tg.idata[o + q] = id
        local v = C.ol_rand_uniform(stream, base + 5 + 2 * q)
        if v < 0.8 then ids.idata[o + q] = sp.mask
        elseif v < 0.9 then ids.idata[o + q] = self.ordinary[math.floor((v - 0.8) * 10 * self.n_ordinary)]
        end
      end
    end
    nx.idata[r] = is_next
  end
  self.step = self.step + 1
  return { ids = ids, token_type = tt, targets = tg, pad_mask = pm, is_next = nx }
end
MLMLoader.state, MLMLoader.set_state = state, set_state
function MLMLoader:reset() self.step = 0 end

return M
