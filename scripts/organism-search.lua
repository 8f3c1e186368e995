-- scripts/organism-search.lua — the one-off harness behind the rows marked † in docs/findings/organism.md
-- ("The search"): one LLaMA organism trained on a data layout or recipe that is not an
-- experiment option, then measured the way the project measures (outlierlab.measure.phenomena
-- on 16 held-out batches of 16 sequences) plus what the search asked about: the norm of the
-- initial token's state against the ordinary tokens', what each layer writes at position 0 (the
-- norm of h_l − h_(l−1) there, against the ordinary tokens' median write, and the cosine of the
-- state with layer 0's), where each sequence's largest |h| sits,
-- the attention of every head on the first key and on <bos> wherever it is, what the last
-- layer's largest values at ordinary tokens do to the prediction (its entropy and loss with that
-- channel set to 0 before the final norm), and what the loss says when the initial token's
-- state is scaled (measure.recent.scale_state); for the LLaMA presets, every layer's FFN write
-- decomposed neuron by neuron (analysis.writers: which neuron writes the first token and which
-- the others).
--
--   bin/outlierlab run scripts/organism-search.lua --layout=packed --steps=3000 --seed=1
--
-- Layouts (the decoder organism's task, docs/reference/data.md, in every one):
--   bos       [<bos>, chain …] — the project's LM batches
--   packed    documents [<bos>, chain of U(doc_min, doc_max) tokens] one after another, each
--             window starting at a random place of its first document (nanoGPT's and LLaMA's
--             pre-training windows: <bos> anywhere, with the previous document before it)
--   prefix    k ~ U(0, prefix_max) tokens of an unrelated chain (not predicted), then <bos> and the
--             document: a <bos> that has a context
--   nobos     [chain …]: position 0 is an ordinary token
--   multibos  n_bos start tokens; the one at position 0 tells x_1's id mod n_bos (a first token
--             whose identity carries information, as in a window that starts anywhere)
--   text      [<bos>, T tokens of a real English text from a random place]: the King James Bible
--             of outlierlab.data.words (--data=kjv's text, docs/reference/data.md; --vocab_size=1024 and
--             --n_weak words weak); the last 5 % of the text is held out
--   mix       a share --p_text (0.5) of the sequences text rows (its --text_vocab ids after the
--             task's, <bos> shared), the rest bos rows of the task: idle heads and real words
--   delim     bos rows with a transparent delimiter: after an ordinary token, with probability
--             --p_ins (0.1) the next token is "." (one extra id, category delimiter), and the
--             token after "." is drawn from the bigram row of the token before it — a frequent
--             token whose own state says nothing but whose next token needs the context (as
--             after SO's weak tokens in text; copies and pointers count "." as a position)
-- p_bos0 > 0: that share of the sequences use the bos layout instead.
-- Recipe knobs beyond the experiments': B (the batch), beta1, eps (Adam's), alpha (the bigram rows' Dirichlet), n_head, d_model/d_ff, vocab_size;
-- preset=gpt2-quick trains the GPT-2 organism's shape instead (learned positions, LayerNorm,
-- GELU), bias=false without its linear and LayerNorm biases (SO's GPT-2, nanoGPT's bias=False);
-- tie=true ties the LLaMA organism's head to its token embedding (GPT-2's and many small LLMs' head);
-- embed_scale=F multiplies the LLaMA organism's token embedding by a fixed F (models' embed_scale).
-- Nothing here enters the model cache or the results: it prints its numbers.
local ffi = require "ffi"
local ol = require "outlierlab"
local cfg = require("outlierlab.config").get{
  steps = 3000, lr = 1e-2, wd = 0.1, beta1 = 0.9, beta2 = 0.99, eps = 1e-8, seed = 1, d_model = 64, d_ff = 256, n_layer = 4,
  n_head = 2, T = 64, B = 32, layout = "bos", doc_min = 16, doc_max = 96, p_bos0 = 0.0, prefix_max = 16, n_bos = 8,
  groups = 8, alpha = 0.1, p_trigger = 0.08, n_pointer = 3, p_pointer = 0.15, pointer_hops = 3, vocab_size = 128, n_triggers = 24,
  n_delim = 0, p_delim = 0.1, n_weak = 0, p_weak = 0.1, p_ins = 0.1, data_seed = 1, p_text = 0.5, text_vocab = 1024, threads = 0, measure_every = 0, tag = "",
  preset = "llama-organism", bias = true, tie = false, embed_scale = 0,
}
if cfg.threads > 0 then ol.set_num_threads(cfg.threads) end
local org = require "outlierlab.data.organism"
local models = require "outlierlab.models"
local train = require "outlierlab.train.loop"
local phenomena = require "outlierlab.measure.phenomena"
local probes = require "outlierlab.measure.probes"
local remedies = require "outlierlab.measure.recent"
local writers = require "outlierlab.measure.writers"
local quant = require "outlierlab.compress.rtn"

local task = org.task{ vocab_size = cfg.vocab_size, n_triggers = cfg.n_triggers, groups = cfg.groups, alpha = cfg.alpha,
  p_trigger = cfg.p_trigger, n_pointer = cfg.n_pointer, p_pointer = cfg.p_pointer, pointer_hops = cfg.pointer_hops,
  n_delim = cfg.n_delim, p_delim = cfg.p_delim, n_weak = cfg.n_weak, p_weak = cfg.p_weak, seed = cfg.data_seed }
local BOS, V = org.special.bos, cfg.vocab_size
local LAYOUTS = { bos = true, packed = true, prefix = true, nobos = true, multibos = true, text = true, mix = true, delim = true }
if not LAYOUTS[cfg.layout] then error("organism-search: --layout must be bos, packed, prefix, nobos, multibos, text, mix or delim, got " .. tostring(cfg.layout), 0) end
local MULTI = cfg.layout == "multibos"
local DELIM = cfg.layout == "delim" and V or nil   -- the transparent delimiter's id (one past the task's)
local function is_bos(id) return id == BOS or (MULTI and id >= V) end
-- the start tokens of multibos count as initial for the project's measurement, delim's "." a delimiter
local function category(id)
  if MULTI and id >= V then return "initial" end
  if id == DELIM then return "delimiter" end
  return task.category(id)
end

-- the text layout: the project's word-level King James Bible (outlierlab.data.words, --data=kjv);
-- its <bos> is the organism's id 1, its categories replace the task's
-- mix: a share p_text of the sequences are text (its ids after the task's: V + id, <bos> shared),
-- the rest the task's bos rows; the model's vocabulary is V + text_vocab
local text
if cfg.layout == "text" or cfg.layout == "mix" then
  local TV = cfg.layout == "mix" and cfg.text_vocab or V
  local c = require("outlierlab.data.words").corpus{ vocab_size = TV, n_weak = cfg.n_weak }
  local off = cfg.layout == "mix" and V or 0
  local toks = c.tokens
  category = c.category
  if off > 0 then   -- the project's mixture (outlierlab.data.mix): its ids and categories
    local mixed = require("outlierlab.data.mix").corpus(task, c, cfg.p_text)
    toks, category = mixed.tokens, mixed.category
  end
  text = { toks = toks, n = c.n, split = math.floor(c.n * 0.95), vocab = off + TV }
  assert(c.special.bos == BOS, "organism-search: the text's <bos> must be the organism's")
  print(string.format("text: %d tokens, %d distinct words and marks, %d kept (%.1f %% unknown)%s", c.n, c.n_distinct, TV - 7,
    100 * c.unknown_share, off > 0 and string.format("; %.0f %% of the sequences, ids after the task's %d", 100 * cfg.p_text, V) or ""))
end

-- ---------------------------------------------------------------- the layouts
-- the delim layout's chain: the task's rules (data/organism.lua's chain: back-copies after a
-- trigger, pointer hops; this task has no recall tokens) on the output positions, plus the
-- transparent "." after an ordinary token (probability p_ins), whose successor is drawn from
-- the row of the token before it; a copy or hop never lands on "." (a draw instead)
local function delim_chain(seed, index, n, dst)
  assert(task.n_recall == 0, "organism-search: --layout=delim has no recall tokens")
  local base = index * (n + 1)
  local group, ptr0, ord0 = task.group, task.ptr0, task.ord0
  for i = 0, n - 1 do
    local prev = i > 0 and dst[i - 1] or -1
    local u = ol.C.ol_rand_uniform(seed, base + i)
    local out
    if prev == DELIM then
      out = task.draw(dst[i - 2], u)
    else
      local g = prev >= 0 and group[prev] or 0
      if g > 0 and i - 1 - g >= 0 then
        out = dst[i - 1 - g]
      elseif prev >= ptr0 and prev < ord0 and i >= 2 and dst[i - 2] >= ord0 and dst[i - 2] ~= DELIM then
        local src = i - 2
        for _ = 1, 1 + (prev - ptr0) % task.pointer_hops do
          if src < 0 or dst[src] < ord0 or dst[src] == DELIM then src = -1; break end
          src = src - (1 + (dst[src] - ord0) % 3)
        end
        if src >= 0 then out = dst[src] end
      end
      if out == DELIM then out = nil end
      if not out then
        if prev >= ord0 and prev ~= DELIM and ol.C.ol_rand_uniform(seed + 31, base + i) < cfg.p_ins then out = DELIM
        else out = task.draw(prev, u) end
      end
    end
    dst[i] = out
  end
end
local Loader = {}
Loader.__index = Loader
local function loader(split, seed, B)
  return setmetatable({ step = 0, val = split ~= "train", B = B, T = cfg.T, stream = seed * 7919 + (split == "train" and 17 or 104729),
                        buf = ffi.new("int32_t[?]", 4096), doc = ffi.new("int32_t[?]", 4096),
                        out = ffi.new("int32_t[?]", cfg.T + 1) }, Loader)
end
function Loader:state() return { step = self.step } end
function Loader:set_state(s) self.step = s.step end
local U = function(s, i) return ol.C.ol_rand_uniform(s, i) end
-- n + 1 tokens of sequence `seq` into out; returns how many leading tokens are not predicted
function Loader:fill(seq, out, n)
  local L, buf = cfg.layout, self.buf
  if L == "text" or (L == "mix" and U(self.stream + 8, seq) < cfg.p_text) then
    local lo, hi = 0, text.split - n
    if self.val then lo, hi = text.split, text.n - n end
    local off = lo + math.floor(U(self.stream + 7, seq) * (hi - lo))
    out[0] = BOS
    for t = 1, n do out[t] = text.toks[off + t - 1] end
    return 0
  end
  if L == "delim" then
    out[0] = BOS
    delim_chain(self.stream, seq, n, buf)
    for t = 1, n do out[t] = buf[t - 1] end
  elseif L == "bos" or L == "mix" or (cfg.p_bos0 > 0 and U(self.stream + 5, seq) < cfg.p_bos0) then
    out[0] = BOS
    task.chain(self.stream, seq, n, buf)
    for t = 1, n do out[t] = buf[t - 1] end
  elseif L == "multibos" then
    task.chain(self.stream, seq, n, buf)
    out[0] = V + buf[0] % cfg.n_bos
    for t = 1, n do out[t] = buf[t - 1] end
  elseif L == "nobos" then
    task.chain(self.stream, seq, n + 1, buf)
    for t = 0, n do out[t] = buf[t] end
  elseif L == "prefix" then
    local k = math.floor(U(self.stream + 6, seq) * (cfg.prefix_max + 1))
    task.chain(self.stream + 23, seq, math.max(k, 1), buf)
    for t = 0, k - 1 do out[t] = buf[t] end
    out[k] = BOS
    task.chain(self.stream, seq, n - k, buf)
    for t = k + 1, n do out[t] = buf[t - k - 1] end
    return k
  else   -- packed
    local pos, d, off = 0, 0, -1
    while pos < n + 1 do
      local len = cfg.doc_min + math.floor(U(self.stream + 3, seq * 64 + d) * (cfg.doc_max - cfg.doc_min + 1))
      if off < 0 then off = math.floor(U(self.stream + 4, seq) * (len + 1)) end
      self.doc[0] = BOS
      task.chain(self.stream + 11, seq * 64 + d, len, buf)
      for t = 1, len do self.doc[t] = buf[t - 1] end
      for t = d == 0 and off or 0, len do if pos < n + 1 then out[pos] = self.doc[t]; pos = pos + 1 end end
      d = d + 1
    end
  end
  return 0
end
-- ids = out[0 .. T-1], targets = out[1 .. T] (a <bos> and the unpredicted prefix are not targets)
function Loader:next(ctx)
  local B, T, out = self.B, self.T, self.out
  local ids = ctx:tensor({ B, T }, { dtype = "i32", name = "ids" })
  local tg = ctx:tensor({ B, T }, { dtype = "i32", name = "targets" })
  for b = 0, B - 1 do
    local skip = self:fill(self.step * B + b, out, T)
    for t = 0, T - 1 do
      ids.idata[b * T + t] = out[t]
      tg.idata[b * T + t] = (is_bos(out[t + 1]) or t < skip) and -100 or out[t + 1]
    end
  end
  self.step = self.step + 1
  return { ids = ids, targets = tg }
end

local over = { vocab_size = text and text.vocab or V + (MULTI and cfg.n_bos or 0) + (DELIM and 1 or 0), block_size = cfg.T,
  n_layer = cfg.n_layer, n_head = cfg.n_head, d_model = cfg.d_model, d_ff = cfg.d_ff, seed = cfg.seed }
if cfg.preset:match("^gpt2") then over.bias = cfg.bias else over.n_kv_head = cfg.n_head; over.tie_embeddings = cfg.tie end
if cfg.embed_scale > 0 then over.embed_scale = cfg.embed_scale end   -- a fixed factor on the token embedding (llama)
local mcfg = models.preset(cfg.preset, over)
local ctx = ol.Context{ seed = cfg.seed }
local m = models.build(ctx, mcfg)

-- ---------------------------------------------------------------- measurement
local function median(t) table.sort(t) return t[math.floor(#t / 2) + 1] end
-- The last layer's ordinary tokens (positions 1 … T−1 that have a target): the largest |h| of
-- the token, the entropy (nats) and cross-entropy of the model's prediction there, and both
-- again with the token's largest channel set to 0 before the final norm — what the last
-- layer's own largest values do to the prediction (the final RMSNorm divides every channel by
-- the state's rms, so one large channel shrinks the others' logits: a flatter prediction).
-- entropy and cross-entropy (nats) of the logits z[off .. off+V−1] (a Lua table or the model's
-- float buffer) against target tgt
local function softmax_stats(z, off, V, tgt)
  local zmax = -math.huge
  for v = 0, V - 1 do if z[off + v] > zmax then zmax = z[off + v] end end
  local se, sez = 0, 0
  for v = 0, V - 1 do local d = z[off + v] - zmax; local e = math.exp(d); se = se + e; sez = sez + e * d end
  local lse = zmax + math.log(se)
  return lse - sez / se - zmax, lse - z[off + tgt]
end
local function head_eval(h, off, zero_c, tgt)
  local C, V = cfg.d_model, mcfg.vocab_size
  local g = m.norm.weight.data
  local W = (m.lm_head and m.lm_head.weight or m.embed_tokens.weight).data
  local s2 = 0
  for c = 0, C - 1 do
    local v = c == zero_c and 0 or h[off + c + 1]
    s2 = s2 + v * v
  end
  local r = 1 / math.sqrt(s2 / C + m.norm.eps)
  local x = {}
  for c = 0, C - 1 do x[c] = (c == zero_c and 0 or h[off + c + 1]) * r * g[c] end
  local z = {}
  for v = 0, V - 1 do
    local a = 0
    for c = 0, C - 1 do a = a + W[v * C + c] * x[c] end
    z[v] = a
  end
  return softmax_stats(z, 0, V, tgt)   -- entropy, cross-entropy
end
-- the task's kind of token (its labels T…, R…, P…, a…, w…); on text rows the text's category
local KINDS = { T = "trigger", R = "recall", P = "pointer", a = "ordinary", w = "weak" }
local TEXT_ROWS = cfg.layout == "text" or cfg.layout == "mix"
local function token_kind(id)
  if TEXT_ROWS then return category(id) end
  local label = task.vocab[id]
  return label and (KINDS[label:sub(1, 1)] or label) or "other"
end
-- head_eval recomputes the LLaMA organism's head (RMSNorm with a gain per channel, then the head)
local LAST_LINE = not cfg.preset:match("^gpt2")
local function last_layer_tokens(acc, h, batch, b)
  local C, T = cfg.d_model, cfg.T
  for t = 1, T - 1 do
    local tgt = batch.targets.idata[b * T + t]
    if tgt >= 0 then
      local off, top, tc = t * C, 0, 0
      for c = 0, C - 1 do local a = math.abs(h[off + c + 1]); if a > top then top, tc = a, c end end
      local H, ce = head_eval(h, off, -1, tgt)
      local H0, ce0 = head_eval(h, off, tc, tgt)
      acc[#acc + 1] = { top, H, ce, H0, ce0, tc, b * T + t, tgt, token_kind(batch.ids.idata[b * T + t]) }
    end
  end
end

-- the project's phenomena (initial = <bos> or a start token) plus the search's own columns
local function measure(nb, first)
  local L, C, T, NH = cfg.n_layer, cfg.d_model, cfg.T, cfg.n_head
  local ph = phenomena.new{ category = category, T = T, C = C, n_head = NH, causal = true }
  local extra = {}
  for l = 0, L - 1 do
    extra[l] = { norm0 = 0, normord = 0, at0 = 0, atbos = 0, n = 0, a0 = {}, abos = {}, na = 0, write0 = 0, writeord = 0,
                 cos0 = 0 }
  end
  -- each row's states (T × C, flat) after the previous layer and after layer 0 (the layers' writes)
  local prev_h, first_h = {}, {}
  -- the last layer's ordinary tokens: largest |h|, the prediction's entropy and loss, and both
  -- again with that token's largest channel set to 0 before the final norm (last_layer_tokens)
  local last = {}
  local va = loader("val", cfg.seed + 1, 16)
  va.step = first or 0
  ctx:no_grad(function()
    local P = probes.new{ on = function(name, l, x, batch)
      local e, ids = extra[l], batch.ids
      if name == "h" then
        local d = x.data
        for b = 0, x:size(0) - 1 do
          local nrm, top, tpos = {}, 0, 0
          for t = 0, T - 1 do
            local s2 = 0
            for c = 0, C - 1 do
              local v = d[(b * T + t) * C + c]
              s2 = s2 + v * v
              if math.abs(v) > top then top, tpos = math.abs(v), t end
            end
            nrm[t + 1] = math.sqrt(s2)
          end
          e.norm0 = e.norm0 + nrm[1]
          -- what this layer wrote at position 0 (‖h_l − h_(l−1)‖ there) and how far the state turned
          -- from layer 0's (cosine)
          local h = {}
          for i = 0, T * C - 1 do h[i + 1] = d[b * T * C + i] end
          if l > 0 and prev_h[b] then
            local p, wt = prev_h[b], {}   -- ‖h_l − h_(l−1)‖ at each position
            for t = 0, T - 1 do
              local w2 = 0
              for i = t * C + 1, (t + 1) * C do local dv = h[i] - p[i]; w2 = w2 + dv * dv end
              wt[t + 1] = math.sqrt(w2)
            end
            e.write0 = e.write0 + table.remove(wt, 1)
            e.writeord = e.writeord + median(wt)   -- the ordinary tokens': positions 1 … T−1
            local h0, dot, n1, n2 = first_h[b], 0, 0, 0
            for c = 1, C do dot, n1, n2 = dot + h[c] * h0[c], n1 + h[c] * h[c], n2 + h0[c] * h0[c] end
            e.cos0 = e.cos0 + dot / math.sqrt(n1 * n2)
          end
          if l == 0 then first_h[b] = h end
          if l == L - 1 and LAST_LINE then last_layer_tokens(last, h, batch, b) end
          prev_h[b] = h
          table.remove(nrm, 1)
          e.normord = e.normord + median(nrm)
          e.at0 = e.at0 + (tpos == 0 and 1 or 0)
          e.atbos = e.atbos + (is_bos(ids.idata[b * T + tpos]) and 1 or 0)
          e.n = e.n + 1
        end
      elseif name == "attn_probs" then
        local d = x.data
        for b = 0, x:size(0) - 1 do
          for h = 0, NH - 1 do
            local s0, sb = 0, 0
            for i = 0, T - 1 do
              local row = ((b * NH + h) * T + i) * T
              s0 = s0 + d[row]
              for j = 0, i do if is_bos(ids.idata[b * T + j]) then sb = sb + d[row + j] end end
            end
            e.a0[h + 1] = (e.a0[h + 1] or 0) + s0 / T
            e.abos[h + 1] = (e.abos[h + 1] or 0) + sb / T
          end
          e.na = e.na + 1
        end
      end
    end, points = { "h", "attn_probs" } }
    ph:attach(P)
    for _ = 1, nb do
      ctx:reset()
      local n0 = #last
      local logits = P:forward(m, va:next(ctx))
      -- the Lua head of last_layer_tokens against the model's own logits (its cross-entropy)
      local z, V = logits.data, mcfg.vocab_size
      for i = n0 + 1, #last do
        local _, ce = softmax_stats(z, last[i][7] * V, V, last[i][8])
        last.head_err = math.max(last.head_err or 0, math.abs(ce - last[i][3]))
      end
    end
  end)
  ctx:reset()
  return ph:result(), extra, last
end

local function report(step, loss)
  local r, e, toks = measure(16, 0)
  local L = cfg.n_layer
  local bosrate = 0
  for l = 0, L - 1 do for h = 1, cfg.n_head do if e[l].abos[h] / e[l].na > 0.3 then bosrate = bosrate + 1 end end end
  print(string.format("[%s] step %d loss %.4f | %s | sink rate on <bos> anywhere %.2f | kurtosis without the initial token %.1f",
    cfg.tag, step, loss or 0 / 0, phenomena.describe(r), bosrate / (L * cfg.n_head), r.avg_kurtosis_no_initial))
  for l = 0, L - 1 do
    local x, pl = e[l], r.per_layer[l]
    local hs = {}
    for h = 1, cfg.n_head do hs[h] = string.format("%.2f/%.2f", x.a0[h] / x.na, x.abos[h] / x.na) end
    print(string.format("  layer %d: top-1/median %.1f (at the initial token %.1f) | ‖h‖ position 0 %.0f, ordinary median %.0f (× %.1f) | top-1 at position 0 %.2f, at <bos> %.2f | kurtosis %.1f | heads on key 0 / on <bos> %s%s",
      l, pl.ratio, (pl.ratio_at or {}).initial or 0 / 0, x.norm0 / x.n, x.normord / x.n, x.norm0 / x.normord,
      x.at0 / x.n, x.atbos / x.n, pl.kurtosis, table.concat(hs, " "),
      l > 0 and string.format(" | written at position 0 ‖Δ‖ %.0f (%.3f of layer 0's ‖h‖ there; ordinary tokens' median ‖Δ‖ %.0f), cosine with layer 0's state %.4f",
        x.write0 / x.n, (x.write0 / x.n) / (e[0].norm0 / e[0].n), x.writeord / x.n, x.cos0 / x.n) or ""))
  end
  -- the last layer's largest values at ordinary tokens: the top 1 % of tokens by largest |h|
  -- against the rest, and what zeroing that channel does to their prediction
  if #toks > 0 then
    table.sort(toks, function(a, b) return a[1] > b[1] end)
    local n1 = math.max(1, math.floor(#toks / 100))
    local function means(i0, i1)
      local m_ = { 0, 0, 0, 0, 0 }
      for i = i0, i1 do for k = 1, 5 do m_[k] = m_[k] + toks[i][k] end end
      for k = 1, 5 do m_[k] = m_[k] / (i1 - i0 + 1) end
      return m_
    end
    local top, rest = means(1, n1), means(n1 + 1, #toks)
    local chans = {}
    local kinds = {}   -- the kinds of token the top 1 % are (trigger, pointer, ordinary, …)
    for i = 1, n1 do
      chans[toks[i][6]] = (chans[toks[i][6]] or 0) + 1
      kinds[toks[i][9]] = (kinds[toks[i][9]] or 0) + 1
    end
    local kl = {}
    for k, c in pairs(kinds) do kl[#kl + 1] = string.format("%s %.0f%%", k, 100 * c / n1) end
    table.sort(kl)
    local cl = {}
    for c, k in pairs(chans) do cl[#cl + 1] = { c, k } end
    table.sort(cl, function(a, b) return a[2] > b[2] end)
    local cs = {}
    for i = 1, math.min(3, #cl) do cs[i] = string.format("#%d %.0f%%", cl[i][1], 100 * cl[i][2] / n1) end
    -- Pearson correlation of log(largest |h|) with the entropy over all ordinary tokens
    local sx, sy, sxx, syy, sxy, n = 0, 0, 0, 0, 0, #toks
    for _, r in ipairs(toks) do
      local x, y = math.log(r[1]), r[2]
      sx, sy, sxx, syy, sxy = sx + x, sy + y, sxx + x * x, syy + y * y, sxy + x * y
    end
    local cov = sxy / n - (sx / n) * (sy / n)
    local corr = cov / math.sqrt((sxx / n - (sx / n) ^ 2) * (syy / n - (sy / n) ^ 2))
    print(string.format("  last layer, ordinary tokens (%d; top 1 %%: %d, largest |h| %.0f against %.0f; channels %s; tokens %s): entropy %.3f against %.3f, loss %.3f against %.3f; with the largest channel set to 0: entropy %.3f / %.3f, loss %.3f / %.3f; corr(log largest |h|, entropy) %.2f (the head recomputed within %.1e nats of the model's logits)",
      n, n1, top[1], rest[1], table.concat(cs, ", "), table.concat(kl, ", "), top[2], rest[2], top[3], rest[3], top[4], rest[4], top[5], rest[5], corr, toks.head_err or 0 / 0))
  end
  -- the dose-response of the initial token's state (measure.recent.scale_state)
  local bs = quant.batches(ctx, loader("val", cfg.seed + 1, 16), 8)
  for _, l in ipairs { 0, 1 } do
    local s = remedies.scale_state(ctx, m, bs, { layer = l })
    local parts = {}
    for j, sc in ipairs(s.scales) do parts[j] = string.format("×%g %+.4f", sc, s.delta[j]) end
    print(string.format("  Δ loss (of %.4f) with position 0's state after layer %d scaled: %s", s.loss, l, table.concat(parts, "  ")))
  end
  io.stdout:flush()
end

local tcfg = { steps = cfg.steps, lr = cfg.lr, warmup = 0, schedule = "constant", weight_decay = cfg.wd,
  betas = { cfg.beta1, cfg.beta2 }, eps = cfg.eps, clip = 1.0, progress = "off", eval_every = 0 }
local t0 = os.time()
local res = train.run{ ctx = ctx, model = m, loader = loader("train", cfg.seed, cfg.B), cfg = tcfg,
  on_step = function(step, rec)
    if cfg.measure_every > 0 and step % cfg.measure_every == 0 and step < cfg.steps then report(step, rec.loss) end
  end }
print(string.format("[%s] %s: %d steps of %d×%d in %d s; loss %.4f (task floor %.4f)", cfg.tag, cfg.layout, cfg.steps,
  cfg.B, cfg.T, os.time() - t0, res.losses[#res.losses], task.loss_floor))
report(cfg.steps, res.losses[#res.losses])
if LAST_LINE then   -- who writes each token's state, neuron by neuron (analysis.writers; LLaMA presets)
  local va = loader("val", cfg.seed + 1, 16)
  print(string.format("[%s] the FFN writes (8 held-out batches of 16):", cfg.tag))
  for _, line in ipairs(writers.lines(writers.measure(ctx, m, function() return va:next(ctx) end, 8))) do print(line) end
end
if cfg.layout == "mix" then   -- the same model on each kind of row alone
  for _, pt in ipairs { 1, 0 } do
    cfg.p_text = pt
    print(string.format("[%s] measured on %s only:", cfg.tag, pt == 1 and "text rows" or "task rows"))
    report(cfg.steps, res.losses[#res.losses])
  end
end
