-- data/organism — the model organism's data: a Bigram-Backcopy task (Guo et al. 2024,
-- "Active-Dormant Attention Heads") in which attention heads must learn to do nothing.
--
--   local org = require "outlierlab.data.organism"
--   local task = org.task{ vocab_size = 64, n_triggers = 8, groups = 1, alpha = 0.1, seed = 1 }
--   local tr = org.LMLoader{ task = task, B = 16, T = 128, seed = 1, shard = true }   -- decoders
--   local mlm = org.MLMLoader{ task = task, B = 16, T = 128, seed = 1 }               -- encoders
--   task.vocab[id], task.category(id), task.special.bos, task.loss_floor
--
-- A sequence (docs/reference/data.md, "The model organism"):
--   x_0 = <bos>; x_1 ~ P(· | <bos>);
--   x_{t+1} = x_{t-g}            when x_t is a trigger of group g (g = 1..groups) and t-g >= 1
--                                (back-copy: g = 1 copies the token just before the trigger)
--           ~ P(· | x_t)         otherwise (a bigram chain).
-- Each row of P is drawn once from a Dirichlet(alpha) over the chain tokens (alpha = 0.1: a
-- few likely successors per token), then two kinds of frequent, uninformative tokens are mixed
-- in: every row gives mass p_delim to the n_delim delimiters and p_weak to the n_weak weak
-- tokens, whose own rows are flat (Dirichlet(1)): after them the next token is hard to guess.
-- With p_trigger > 0 the triggers are not part of the Dirichlet draw: every row gives them the
-- fixed mass p_trigger (split evenly), so that about that share of the positions follow a
-- trigger; drawn with the rest (p_trigger = 0, Guo et al.'s task) a token whose likely
-- successor is a trigger falls into copy loops (a T a T ...) and triggers fill 40 % of a sequence.
-- A head that serves the copy is needed only right after a trigger; on every other token it
-- must add nothing to the residual stream: the no-op the papers tie outliers to.
--
-- Token ids: 0 [PAD], 1 <bos>, 2 [CLS], 3 [SEP], 4 [MASK], then the chain tokens: the
-- delimiters ("." "," ";" …), the weak tokens ("w0" …), the triggers ("T0" …), the ordinary
-- tokens ("a0" …). Categories for the plots: <bos>, [CLS] initial; [SEP] and the delimiters
-- delimiter; the weak tokens weak; everything else other.
--
-- Batches are functions of (task, loader seed, split, step, global row) only: the same for any
-- number of ranks, and a resumed run sees the same batches (state() / set_state()).
local ffi = require "ffi"
local ol = require "outlierlab"
local C = ol.C

local M = {}

M.SPECIALS = { "[PAD]", "<bos>", "[CLS]", "[SEP]", "[MASK]" }
M.special = { pad = 0, bos = 1, cls = 2, sep = 3, mask = 4 }
local FIRST = #M.SPECIALS
local DELIM_NAMES = { ".", ",", ";", ":", "!", "?", "\n", "-" }

M.defaults = { vocab_size = 64, n_triggers = 8, groups = 1, alpha = 0.1, p_trigger = 0, n_delim = 0, p_delim = 0.1,
               n_weak = 0, p_weak = 0.1, n_recall = 0, p_recall = 0.05, n_pointer = 0, p_pointer = 0.05,
               pointer_hops = 1, loop_free = false, seed = 1, sep_every = 0, segment_cls = false }

local function check_int(v, lo, hi, what)
  if type(v) ~= "number" or v ~= math.floor(v) or v < lo or (hi and v > hi) then
    error(string.format("data.organism: %s must be an integer in [%d, %s], got %s", what, lo,
      hi and tostring(hi) or "inf", tostring(v)), 4)
  end
  return v
end

-- ---------------------------------------------------------------- random numbers
-- standard normal from two counter-based uniforms (Box-Muller)
local function normal(seed, idx)
  local u1 = C.ol_rand_uniform(seed, 2 * idx)
  local u2 = C.ol_rand_uniform(seed, 2 * idx + 1)
  return math.sqrt(-2 * math.log(1 - u1)) * math.cos(2 * math.pi * u2)
end

-- Gamma(a, 1) (Marsaglia & Tsang 2000; for a < 1: Gamma(a+1)·U^(1/a)), a pure function of (seed, idx)
local function gamma(a, seed, idx)
  local boost = 1
  if a < 1 then
    boost = (1 - C.ol_rand_uniform(seed + 3, idx)) ^ (1 / a)
    a = a + 1
  end
  local d = a - 1 / 3
  local c = 1 / math.sqrt(9 * d)
  for k = 0, 10000 do
    local z = normal(seed, idx * 10007 + k)
    local v = (1 + c * z) ^ 3
    if v > 0 then
      local u = C.ol_rand_uniform(seed + 1, idx * 10007 + k)
      if math.log(1 - u) < 0.5 * z * z + d - d * v + d * math.log(v) then return d * v * boost end
    end
  end
  return d * boost   -- unreachable in practice (acceptance rate > 95 %)
end
M.gamma = gamma

-- ---------------------------------------------------------------- the task
-- task{vocab_size=, n_triggers=, groups=, alpha=, p_trigger=, n_delim=, p_delim=, n_weak=, p_weak=, seed=}
function M.task(o)
  o = o or {}
  for k in pairs(o) do
    if M.defaults[k] == nil then
      local valid = {}
      for n in pairs(M.defaults) do valid[#valid + 1] = n end
      table.sort(valid)
      error(string.format("data.organism: unknown option '%s'; valid: %s", tostring(k), table.concat(valid, ", ")), 2)
    end
  end
  local t = {}
  for k, v in pairs(M.defaults) do if o[k] == nil then t[k] = v else t[k] = o[k] end end
  local V = check_int(t.vocab_size, 16, 65536, "vocab_size")
  check_int(t.n_triggers, 0, V, "n_triggers")
  check_int(t.groups, 1, 64, "groups")
  check_int(t.n_delim, 0, #DELIM_NAMES, "n_delim")
  check_int(t.n_weak, 0, V, "n_weak")
  check_int(t.n_recall, 0, V, "n_recall")
  check_int(t.n_pointer, 0, V, "n_pointer")
  check_int(t.pointer_hops, 1, 8, "pointer_hops")
  if t.sep_every ~= 0 then check_int(t.sep_every, 3, 2 ^ 20, "sep_every (0 = one [SEP] at the end, else >= 3)") end
  if type(t.loop_free) ~= "boolean" then error("data.organism: loop_free must be true or false, got " .. tostring(t.loop_free), 2) end
  if type(t.segment_cls) ~= "boolean" then error("data.organism: segment_cls must be true or false, got " .. tostring(t.segment_cls), 2) end
  if t.segment_cls and t.sep_every == 0 then error("data.organism: segment_cls needs sep_every > 0 (the segments it opens)", 2) end
  check_int(t.seed, 0, 2 ^ 52, "seed")
  if type(t.alpha) ~= "number" or t.alpha <= 0 then error("data.organism: alpha must be > 0, got " .. tostring(t.alpha), 2) end
  for _, k in ipairs { "p_delim", "p_weak", "p_trigger", "p_recall", "p_pointer" } do
    if type(t[k]) ~= "number" or t[k] < 0 or t[k] >= 1 then error("data.organism: " .. k .. " must be in [0, 1), got " .. tostring(t[k]), 2) end
  end
  if t.p_delim * (t.n_delim > 0 and 1 or 0) + t.p_weak * (t.n_weak > 0 and 1 or 0) + t.p_trigger
     + t.p_recall * (t.n_recall > 0 and 1 or 0) + t.p_pointer * (t.n_pointer > 0 and 1 or 0) >= 0.9 then
    error("data.organism: p_delim + p_weak + p_trigger + p_recall + p_pointer must stay below 0.9", 2)
  end
  local n_chain = V - FIRST
  local n_ord = n_chain - t.n_delim - t.n_weak - t.n_triggers - t.n_recall - t.n_pointer
  if n_ord < 2 then
    error(string.format("data.organism: vocab_size %d leaves %d ordinary tokens after %d specials, %d delimiters, %d weak, %d triggers, %d recall and %d pointer tokens (need >= 2)",
      V, n_ord, FIRST, t.n_delim, t.n_weak, t.n_triggers, t.n_recall, t.n_pointer), 2)
  end
  t.n_chain, t.n_ordinary = n_chain, n_ord
  t.delim0 = FIRST
  t.weak0 = t.delim0 + t.n_delim
  t.trig0 = t.weak0 + t.n_weak
  t.rec0 = t.trig0 + t.n_triggers
  t.ptr0 = t.rec0 + t.n_recall
  t.ord0 = t.ptr0 + t.n_pointer
  t.special = M.special

  -- labels and categories
  local vocab, cat = {}, {}
  for i, s in ipairs(M.SPECIALS) do vocab[i - 1], cat[i - 1] = s, "other" end
  cat[M.special.bos], cat[M.special.cls], cat[M.special.sep] = "initial", "initial", "delimiter"
  for k = 0, t.n_delim - 1 do vocab[t.delim0 + k], cat[t.delim0 + k] = DELIM_NAMES[k + 1], "delimiter" end
  for k = 0, t.n_weak - 1 do vocab[t.weak0 + k], cat[t.weak0 + k] = "w" .. k, "weak" end
  for k = 0, t.n_triggers - 1 do vocab[t.trig0 + k], cat[t.trig0 + k] = "T" .. k, "other" end
  for k = 0, t.n_recall - 1 do vocab[t.rec0 + k], cat[t.rec0 + k] = "R" .. k, "other" end
  for k = 0, t.n_pointer - 1 do vocab[t.ptr0 + k], cat[t.ptr0 + k] = "P" .. k, "other" end
  for k = 0, n_ord - 1 do vocab[t.ord0 + k], cat[t.ord0 + k] = "a" .. k, "other" end
  t.vocab, t.cat = vocab, cat
  function t.category(id) return cat[id] or "other" end
  -- group of a trigger id (1..groups), or 0
  local group = ffi.new("int32_t[?]", V)
  for k = 0, t.n_triggers - 1 do group[t.trig0 + k] = k % t.groups + 1 end
  t.group = group

  -- transition rows over the chain tokens: row r = the successor distribution of token
  -- FIRST + r; row n_chain = the distribution of the first token after <bos>/[CLS].
  -- cdf[(r)·n_chain + j] (double), sampled by binary search.
  local nrows = n_chain + 1
  local cdf = ffi.new("double[?]", nrows * n_chain)
  local ent = ffi.new("double[?]", nrows)
  local p = {}
  for r = 0, nrows - 1 do
    local id = FIRST + r
    local flat = r < n_chain and id >= t.weak0 and id < t.trig0 or (r < n_chain and id >= t.delim0 and id < t.weak0)
    -- a recall token's first value: uniform over the ordinary tokens (later ones repeat it)
    local recall_row = r < n_chain and id >= t.rec0 and id < t.ord0
    local a = flat and 1.0 or t.alpha
    local s = 0
    for j = 0, n_chain - 1 do
      local jd = FIRST + j
      local g = 0
      local trig = jd >= t.trig0 and jd < t.rec0
      if recall_row then g = jd >= t.ord0 and 1 or 0
      elseif jd >= t.ord0 or (trig and t.p_trigger == 0) then g = gamma(a, t.seed * 7 + 11, r * n_chain + j) end
      p[j] = g
      s = s + g
    end
    local rest = 1
    if not recall_row then
      if t.n_delim > 0 then rest = rest - t.p_delim end
      if t.n_weak > 0 then rest = rest - t.p_weak end
      if t.n_recall > 0 then rest = rest - t.p_recall end
      if t.n_pointer > 0 then rest = rest - t.p_pointer end
    end
    local fixed_trig = t.p_trigger > 0 and t.n_triggers > 0 and not recall_row
    if fixed_trig then rest = rest - t.p_trigger end
    for j = 0, n_chain - 1 do
      local jd = FIRST + j
      if recall_row then p[j] = s > 0 and p[j] / s or 0
      elseif jd >= t.delim0 and jd < t.weak0 then p[j] = t.p_delim / t.n_delim
      elseif jd >= t.weak0 and jd < t.trig0 then p[j] = t.p_weak / t.n_weak
      elseif fixed_trig and jd >= t.trig0 and jd < t.rec0 then p[j] = t.p_trigger / t.n_triggers
      elseif jd >= t.rec0 and jd < t.ptr0 then p[j] = t.p_recall / t.n_recall
      elseif jd >= t.ptr0 and jd < t.ord0 then p[j] = t.p_pointer / t.n_pointer
      else p[j] = s > 0 and rest * p[j] / s or 0 end
    end
    local acc, h = 0, 0
    for j = 0, n_chain - 1 do
      acc = acc + p[j]
      cdf[r * n_chain + j] = acc
      if p[j] > 0 then h = h - p[j] * math.log(p[j]) end
    end
    cdf[r * n_chain + n_chain - 1] = 1
    ent[r] = h
  end
  t.cdf, t.entropy = cdf, ent

  -- one chain token after `prev` (a chain id, or -1 for the sequence start), for uniform u
  local START = n_chain
  local function draw(prev, u)
    local r = prev < 0 and START or prev - FIRST
    local lo, hi = r * n_chain, r * n_chain + n_chain - 1
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if cdf[mid] < u then lo = mid + 1 else hi = mid end
    end
    return FIRST + lo - r * n_chain
  end
  t.draw = draw

  -- Fill dst[0 .. n-1] with a chain of n tokens (no <bos>): the sequence stream (seed, index).
  -- Returns the summed entropy (nats) of the positions that are not copies, and their count,
  -- for the loss floor.
  -- Pointer rule: after a pointer token P at t whose previous token x_{t-1} is ordinary,
  -- x_{t+1} = x_{t-1-o} with o = 1 + (x_{t-1}'s ordinal among the ordinary tokens mod 3): a
  -- two-hop circuit (read x_{t-1}, then attend o places further back), needed only after P.
  -- With pointer_hops = H, P_k hops 1 + (k mod H) times (each hop from the token the last one
  -- reached, which must be ordinary): an h-hop pointer needs h + 1 attention layers in turn.
  -- Copy rule: after a trigger of group g, x_{t+1} = x_{t-g} (with loop_free, only when that
  -- source is not itself a trigger or recall token: otherwise a bigram draw, so that copies never
  -- chain into trigger loops). Recall rule: after a recall token R_k, x_{t+1} = the token that
  -- followed the previous R_k in the sequence (a bigram-free draw, uniform over the ordinary
  -- tokens, at its first occurrence): an induction circuit (a head that marks the token after
  -- each R_k, then a head that finds it), needed only at recall positions.
  local last = ffi.new("int32_t[?]", math.max(1, t.n_recall))
  local trig0, rec0, ptr0, ord0, loop_free = t.trig0, t.rec0, t.ptr0, t.ord0, t.loop_free
  local hops = t.pointer_hops
  -- the token a rule puts at position i of dst (from dst[0..i-1]), or nil for a bigram draw;
  -- last holds the recall state and is updated
  local function rule(dst, i)
    local prev = i > 0 and dst[i - 1] or -1
    local g = prev >= 0 and group[prev] or 0
    if g > 0 and i - 1 - g >= 0 then
      local src = dst[i - 1 - g]
      if not (loop_free and src >= trig0 and src < ord0) then return src end
    elseif prev >= rec0 and prev < ptr0 then
      local k = prev - rec0
      local s = last[k]
      last[k] = i - 1
      if s >= 0 then return dst[s + 1] end
    elseif prev >= ptr0 and prev < ord0 and i >= 2 and dst[i - 2] >= ord0 then
      -- pointer: the token before P points back o = 1 + (its ordinal mod 3) more places; P_k
      -- makes 1 + (k mod pointer_hops) such hops, each from the token the last one reached
      local src = i - 2
      for _ = 1, 1 + (prev - ptr0) % hops do
        if src < 0 or dst[src] < ord0 then src = -1; break end
        src = src - (1 + (dst[src] - ord0) % 3)
      end
      if src >= 0 and not (loop_free and dst[src] >= trig0 and dst[src] < ord0) then return dst[src] end
    end
    return nil
  end
  function t.chain(seed, index, n, dst)
    local base = index * (n + 1)
    local h, m = 0, 0
    for k = 0, t.n_recall - 1 do last[k] = -1 end
    for i = 0, n - 1 do
      local v = rule(dst, i)
      if v then dst[i] = v
      else
        local prev = i > 0 and dst[i - 1] or -1
        dst[i] = draw(prev, C.ol_rand_uniform(seed, base + i))
        h = h + ent[prev < 0 and START or prev - FIRST]
        m = m + 1
      end
    end
    return h, m
  end
  -- which positions of a sequence dst[0..n-1] a rule fixes (out[i] = 1: copy, recall, pointer)
  -- and which are bigram draws (0); an LM batch's targets row is such a sequence
  function t.ruled(dst, n, out)
    for k = 0, t.n_recall - 1 do last[k] = -1 end
    for i = 0, n - 1 do out[i] = rule(dst, i) and 1 or 0 end
    return out
  end

  -- loss floor of the LM task: the mean entropy of the next token over positions 1..T
  -- (copies cost 0), estimated from 256 sequences of 256 tokens
  do
    local buf = ffi.new("int32_t[?]", 256)
    local h = 0
    for i = 0, 255 do h = h + (t.chain(0x5eed, i, 256, buf)) end
    t.loss_floor = h / (256 * 256)
  end
  return t
end

-- ---------------------------------------------------------------- loaders
local function loader_common(self, o, what)
  for k in pairs(o) do
    if not ({ task = true, B = true, T = true, seed = true, split = true, shard = true, mask_prob = true })[k] then
      error(what .. ": unknown option '" .. tostring(k) .. "'", 3)
    end
  end
  if type(o.task) ~= "table" or not o.task.chain then error(what .. ": task must be a data.organism task", 3) end
  self.task = o.task
  self.B = check_int(o.B, 1, nil, "B")
  self.T = check_int(o.T, self.min_T, nil, "T (" .. what .. ")")
  self.seed = check_int(o.seed or 1, 0, 2 ^ 52, "seed")
  self.split = o.split or "train"
  if self.split ~= "train" and self.split ~= "val" then error(what .. ": split must be 'train' or 'val'", 3) end
  -- train and val draw from different streams; the task's transition matrix is shared
  self.stream = self.seed * 7919 + (self.split == "train" and 17 or 104729)
  self.step, self.first, self.rows = 0, 0, self.B
  if o.shard then self.first, self.rows = require("outlierlab.util.dist").shard(self.B) end
  self.buf = ffi.new("int32_t[?]", self.T + 1)
end
local function state(self) return { step = self.step } end
local function set_state(self, s)
  if type(s) ~= "table" or type(s.step) ~= "number" or s.step < 0 then error("data.organism loader: bad state", 2) end
  self.step = s.step
end
-- shared with data.mix's loader (the same checks, streams, sharding and resume state)
M.loader_common, M.loader_state, M.loader_set_state = loader_common, state, set_state

-- LM batches: ids = [<bos>, x_1 .. x_{T-1}], targets = [x_1 .. x_T]
local LM = { kind = "lm", min_T = 1 }
LM.__index = LM
LM.state, LM.set_state = state, set_state
function M.LMLoader(o)
  local self = setmetatable({}, LM)
  loader_common(self, o or {}, "data.organism.LMLoader")
  if (self.task.sep_every or 0) > 0 then
    error("data.organism.LMLoader: the task's sep_every (" .. self.task.sep_every .. ") lays out MLM rows; LM rows have no segments", 2)
  end
  return self
end
-- The LM batch of a loader (B, T, rows, first, step, buf) whose fill(idx, buf) writes the T
-- tokens after <bos> of global row idx = step·B + first + b: ids = [<bos>, x_1 .. x_{T-1}],
-- targets = [x_1 .. x_T]. Shared with data.mix's loader.
function M.lm_batch(ctx, self, fill)
  local B, T, rows = self.B, self.T, self.rows
  local ids = ctx:tensor({ rows, T }, { dtype = "i32", name = "ids" })
  local tg = ctx:tensor({ rows, T }, { dtype = "i32", name = "targets" })
  local buf, bos = self.buf, M.special.bos
  for b = 0, rows - 1 do
    fill(self.step * B + self.first + b, buf)
    local row_i, row_t = ids.idata + b * T, tg.idata + b * T
    row_i[0] = bos
    for t = 1, T - 1 do row_i[t] = buf[t - 1] end
    for t = 0, T - 1 do row_t[t] = buf[t] end
  end
  self.step = self.step + 1
  return { ids = ids, targets = tg }
end
function LM:next(ctx)
  local task, stream, T = self.task, self.stream, self.T
  return M.lm_batch(ctx, self, function(idx, buf) task.chain(stream, idx, T, buf) end)
end

-- MLM batches (BERT-style encoders): [CLS] x_1 .. x_{T-2} [SEP]; each chain position is a
-- prediction target with probability mask_prob (0.15): 80 % become [MASK], 10 % a random chain
-- token, 10 % stay (BERT §3.1); other targets are -100. token_type 0, pad_mask 1.
-- With the task's sep_every = S > 0 a row holds several segments, as BERT's sentence pairs
-- ([CLS] A [SEP] B [SEP]) do: a [SEP] closes a segment at every position p with (p + 1) % S == 0
-- and at T - 1, each segment is a chain of its own (chain index seq * n_segments + k), and
-- segment k (its [SEP] included) has token_type k % 2. segment_cls = true also opens every
-- later segment with a [CLS] (packed rows: [CLS] A [SEP] [CLS] B [SEP] ...). sep_every = 0: one
-- segment, the rows above (the same numbers as before the option existed).
local MLM = { kind = "mlm", min_T = 3 }
MLM.__index = MLM
MLM.state, MLM.set_state = state, set_state
function M.MLMLoader(o)
  local self = setmetatable({}, MLM)
  loader_common(self, o or {}, "data.organism.MLMLoader")
  self.mask_prob = o.mask_prob or 0.15
  if type(self.mask_prob) ~= "number" or self.mask_prob <= 0 or self.mask_prob > 1 then
    error("data.organism.MLMLoader: mask_prob must be in (0, 1]", 2)
  end
  return self
end
function MLM:next(ctx)
  local B, T, rows, task = self.B, self.T, self.rows, self.task
  local ids = ctx:tensor({ rows, T }, { dtype = "i32", name = "ids" })
  local tg = ctx:tensor({ rows, T }, { dtype = "i32", name = "targets" })
  local sp, buf = M.special, self.buf
  local n_chain, first = task.n_chain, FIRST
  -- one segment (sep_every 0) is the row's only [SEP] at T - 1 and chain index seq
  local S = (task.sep_every or 0) > 0 and task.sep_every or T
  local nseg = math.ceil(T / S)
  local tt = ctx:tensor({ rows, T }, { dtype = "i32", name = "token_type" }):fill_(0)
  for b = 0, rows - 1 do
    local g = self.first + b
    local seq = self.step * B + g
    local row_i, row_t = ids.idata + b * T, tg.idata + b * T
    row_i[0], row_t[0] = sp.cls, -100
    local k, start = 0, 1
    for p = 1, T - 1 do
      if (p + 1) % S == 0 or p == T - 1 then   -- [SEP] at p closes segment k: positions start .. p - 1
        local c = start
        if k > 0 and task.segment_cls and p - start >= 2 then row_i[start], row_t[start], c = sp.cls, -100, start + 1 end
        task.chain(self.stream, seq * nseg + k, p - c, buf)
        for t = c, p - 1 do row_i[t] = buf[t - c] end
        row_i[p], row_t[p] = sp.sep, -100
        if k % 2 == 1 then for t = start, p do tt.idata[b * T + t] = 1 end end
        k, start = k + 1, p + 1
      end
    end
    local ms = self.stream + 1
    for t = 1, T - 2 do
      local x = row_i[t]
      if x == sp.sep or x == sp.cls then goto continue end
      row_i[t], row_t[t] = x, -100
      local u = C.ol_rand_uniform(ms, seq * T + t)
      if u < self.mask_prob then
        row_t[t] = x
        local u2 = u / self.mask_prob
        if u2 < 0.8 then row_i[t] = sp.mask
        elseif u2 < 0.9 then row_i[t] = first + math.floor(C.ol_rand_uniform(ms + 1, seq * T + t) * n_chain) % n_chain end
      end
      ::continue::
    end
  end
  self.step = self.step + 1
  return { ids = ids, targets = tg, token_type = tt,
           pad_mask = ctx:tensor({ rows, T }, { dtype = "i32", name = "pad_mask" }):fill_(1) }
end

return M
