-- test_data — the synthetic corpus (determinism, grammar, Zipf-like frequencies, structure),
-- the LM and MLM loaders (shapes, sharding, resume, masking rates) and the ViT images.
local t = require "tap"
local ol = require "outlierlab"
local data = require "outlierlab.data"
local json = require "outlierlab.util.json"

local function same_tokens(a, b, n)
  for i = 0, n - 1 do if a.tokens[i] ~= b.tokens[i] then return false, i end end
  return true
end

-- ---------------------------------------------------------------- corpus
local V = 512
local t0 = os.clock()
local c = data.corpus { seed = 7, n_tokens = 400000, vocab_size = V }
local dt = os.clock() - t0
t.is(c.n, 400000, "n_tokens gives exactly that many tokens")
t.diag(string.format("generated %d tokens in %.3f s: %.2f M tokens/s (vocab %d, %d docs, %d sentences)",
                     c.n, dt, c.n / dt / 1e6, V, c.n_docs, c.n_sentences))
-- (speed is reported above, not asserted: speed belongs to make bench, not to a timed test)

local c2 = data.corpus { seed = 7, n_tokens = 400000, vocab_size = V }
t.ok(same_tokens(c, c2, c.n), "same seed -> same tokens")
local c3 = data.corpus { seed = 8, n_tokens = 400000, vocab_size = V }
t.ok(not same_tokens(c, c3, c.n), "another seed -> other tokens")
local small = data.corpus { seed = 7, n_tokens = 5000, vocab_size = V }
t.ok(same_tokens(small, c, 5000), "a shorter corpus is a prefix of a longer one (per-document streams)")

local sp = c.special
local tok = c.tokens
-- documents
do
  local nbos, bad_start = 0, 0
  for i = 0, c.n - 1 do if tok[i] == sp.bos then nbos = nbos + 1 end end
  for d = 0, c.n_docs - 1 do if tok[c.doc_start[d]] ~= sp.bos then bad_start = bad_start + 1 end end
  t.is(tok[0], sp.bos, "the corpus starts with BOS")
  t.is(bad_start, 0, "every document starts with BOS")
  t.is(nbos, c.n_docs, "BOS appears only at document starts")
  t.ok(c.n_docs > 100, "many documents", c.n_docs)
end
-- sentences, delimiters, specials
do
  local bad_end, bad_nl, specials, commas = 0, 0, 0, 0
  for s = 0, c.n_sentences - 1 do
    if tok[c.sent_start[s] + c.sent_len[s] - 1] ~= sp.period then bad_end = bad_end + 1 end
  end
  for i = 1, c.n - 2 do
    local x = tok[i]
    if x == sp.newline and (tok[i - 1] ~= sp.period or tok[i + 1] == sp.bos) then bad_nl = bad_nl + 1 end
    if x == sp.cls or x == sp.sep or x == sp.mask or x == sp.pad or x == sp.eos then specials = specials + 1 end
    if x == sp.comma then commas = commas + 1 end
  end
  t.is(bad_end, 0, "every sentence ends with '.'")
  t.is(bad_nl, 0, "newlines sit between paragraphs (after '.', never before BOS)")
  t.is(specials, 0, "no [CLS]/[SEP]/[MASK]/[PAD]/<eos> in the LM stream")
  t.ok(commas > c.n_sentences / 10, "commas are common", commas)
end

-- frequencies: Zipf-like, weak words and delimiters on top
do
  local f = data.frequencies(c)
  t.is(c.vocab[f[1].id], "the", "'the' is the most frequent token")
  local top = {}
  local weak_or_delim = 0
  for i = 1, 10 do
    top[i] = string.format("%q %d", c.vocab[f[i].id], f[i].count)
    local k = c.category(f[i].id)
    if k == "weak" or k == "delimiter" then weak_or_delim = weak_or_delim + 1 end
  end
  t.diag("top 10: " .. table.concat(top, ", "):gsub("\n", "n"))
  t.ok(weak_or_delim >= 6, "at least 6 of the 10 most frequent tokens are weak words or delimiters", weak_or_delim)
  -- rank-frequency slope (least squares of log f on log r over ranks 1..300)
  local sx, sy, sxx, sxy, m = 0, 0, 0, 0, math.min(300, #f)
  for r = 1, m do
    local x, y = math.log(r), math.log(f[r].count)
    sx, sy, sxx, sxy = sx + x, sy + y, sxx + x * x, sxy + x * y
  end
  local slope = (m * sxy - sx * sy) / (m * sxx - sx * sx)
  t.diag(string.format("rank-frequency slope over ranks 1..%d: %.2f (Zipf: -1)", m, slope))
  t.ok(slope < -0.7 and slope > -2.5, "rank-frequency slope is Zipf-like", slope)
  t.ok(#f > V * 0.8, "most of the vocabulary is used", #f)
end

-- vocabulary and categories
do
  local seen, dup, missing = {}, 0, 0
  for id = 0, V - 1 do
    local w = c.vocab[id]
    if type(w) ~= "string" or w == "" then missing = missing + 1 end
    if w and seen[w] then dup = dup + 1 end
    if w then seen[w] = true end
  end
  t.is(missing, 0, "every id has a label")
  t.is(dup, 0, "labels are unique")
  t.is(c.category(sp.bos), "initial", "BOS is initial")
  t.is(c.category(sp.cls), "initial", "[CLS] is initial")
  for _, k in ipairs { "sep", "period", "comma", "newline" } do t.is(c.category(sp[k]), "delimiter", k .. " is a delimiter") end
  t.is(c.category(9), "weak", "'" .. c.vocab[9] .. "' is weak")
  t.is(c.category(V - 1), "other", "a content word is other")
  local nweak = 0
  for id = 0, V - 1 do if c.category(id) == "weak" then nweak = nweak + 1 end end
  t.is(nweak, #data.WEAK_WORDS, "weak = the weak-word list")
end

-- structure: agreement and document-level repetition
do
  local wc = c.word_classes
  local n0, nn = wc.noun[1], wc.noun[2]
  local v0, nv = wc.verb[1], wc.verb[2]
  local function is_noun(x) return x >= n0 and x < n0 + nn end
  local function is_verb(x) return x >= v0 and x < v0 + nv end
  local function is_det(x) local w = c.vocab[x] return w == "the" or w == "a" or w == "an" or w == "this" or w == "his" or w == "her" or w == "their" end
  local function agrees(noun, verb) return (noun - n0) % 2 == (verb - v0) % 2 end
  local starts = { [sp.bos] = true, [sp.period] = true, [sp.newline] = true }
  -- sentence-initial "DET NOUN VERB": the verb agrees with the subject
  local n1, a1 = 0, 0
  -- sentence-initial "DET NOUN PREP DET NOUN2 VERB" with the nouns' numbers differing: the
  -- verb agrees with the head NOUN, not with the nearer NOUN2 (agreement across a phrase)
  local n2, a2 = 0, 0
  for i = 1, c.n - 6 do
    if starts[tok[i - 1]] and is_det(tok[i]) and is_noun(tok[i + 1]) then
      local head = tok[i + 1]
      if is_verb(tok[i + 2]) then n1 = n1 + 1 if agrees(head, tok[i + 2]) then a1 = a1 + 1 end end
      if c.category(tok[i + 2]) == "weak" and is_det(tok[i + 3]) and is_noun(tok[i + 4]) and is_verb(tok[i + 5])
         and (head - n0) % 2 ~= (tok[i + 4] - n0) % 2 then
        n2 = n2 + 1
        if agrees(head, tok[i + 5]) then a2 = a2 + 1 end
      end
    end
  end
  t.diag(string.format("agreement: %d sentence-initial subject-verb pairs, %d across an attractor PP", n1, n2))
  t.ok(n1 > 500 and a1 == n1, "subject-verb agreement (sentence-initial DET NOUN VERB)", a1 .. "/" .. n1)
  t.ok(n2 > 30 and a2 == n2, "agreement with the head across a prepositional phrase (attractor of the other number)", a2 .. "/" .. n2)
  -- content words repeat within a document more than across documents (topic, entities)
  local same_doc, cross_doc, ns, nc = 0, 0, 0, 0
  local name0, nname = wc.name[1], wc.name[2]
  local function content(x) return (x >= n0 and x < n0 + nn) or (x >= name0 and x < name0 + nname) end
  local docs = {}
  for d = 0, math.min(c.n_docs, 200) - 1 do
    local list = {}
    local e = d + 1 < c.n_docs and c.doc_start[d + 1] or c.n
    for i = c.doc_start[d], e - 1 do if content(tok[i]) then list[#list + 1] = tok[i] end end
    docs[#docs + 1] = list
  end
  for d = 1, #docs - 1 do
    local A, B = docs[d], docs[d + 1]
    for i = 1, #A do
      for j = i + 1, #A do ns = ns + 1 if A[i] == A[j] then same_doc = same_doc + 1 end end
      for j = 1, #B do nc = nc + 1 if A[i] == B[j] then cross_doc = cross_doc + 1 end end
    end
  end
  local ratio = (same_doc / ns) / (cross_doc / nc)
  t.diag(string.format("P(two nouns/names equal): same document %.4f, neighbouring documents %.4f (ratio %.2f)",
                       same_doc / ns, cross_doc / nc, ratio))
  t.ok(ratio > 1.5, "documents have long-range structure (topic words and entities repeat)", ratio)
end

t.throws(function() data.corpus { seed = 1 } end, "exactly one of n_docs and n_tokens", "corpus needs a size")
t.throws(function() data.corpus { seed = 1, n_docs = 3, vocab_size = 50 } end, "vocab_size must be", "too small a vocabulary is refused")
t.throws(function() data.corpus { seed = 1, n_docs = 3, vocab = 50 } end, "unknown option 'vocab'", "unknown option is refused")
do
  local cd = data.corpus { seed = 3, n_docs = 25, vocab_size = 256 }
  t.is(cd.n_docs, 25, "n_docs gives that many documents")
  t.is(cd.tokens[cd.n - 1], cd.special.period, "a corpus of whole documents ends with '.'")
end

-- ---------------------------------------------------------------- LM loader
local ctx = ol.Context { params = 1024, step_bytes = 2 ^ 24 }
local function rows(tensor) return tensor:tolist() end
local function batch_list(loader, k)
  local out = {}
  for s = 1, k do
    ctx:reset()
    local b = loader:next(ctx)
    out[s] = { ids = rows(b.ids), targets = rows(b.targets) }
  end
  return out
end
local function eq_list(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

do
  local B, T = 4, 16
  local L = data.LMLoader { tokens = c, B = B, T = T, seed = 11 }
  ctx:reset()
  local b = L:next(ctx)
  t.is(b.ids:shape_str(), "(4,16)", "ids (B,T)")
  t.is(b.targets:shape_str(), "(4,16)", "targets (B,T)")
  t.is(b.ids:dtype_name(), "i32", "ids are int32")
  local shift_ok = true
  for r = 0, B - 1 do for s = 0, T - 2 do if b.targets:get(r, s) ~= b.ids:get(r, s + 1) then shift_ok = false end end end
  t.ok(shift_ok, "targets are ids shifted by one")
  -- the window is in the corpus
  local start = L:window(0, 0)
  local in_corpus = true
  for s = 0, T - 1 do if b.ids:get(0, s) ~= tok[start + s] or b.targets:get(0, s) ~= tok[start + s + 1] then in_corpus = false end end
  t.ok(in_corpus, "row 0 is the corpus window at L:window(0, 0)")

  local a1 = batch_list(data.LMLoader { tokens = c, B = B, T = T, seed = 11 }, 3)
  local a2 = batch_list(data.LMLoader { tokens = c, B = B, T = T, seed = 11 }, 3)
  local a3 = batch_list(data.LMLoader { tokens = c, B = B, T = T, seed = 12 }, 3)
  t.ok(eq_list(a1[3].ids, a2[3].ids), "same seed -> same batches")
  t.ok(not eq_list(a1[3].ids, a3[3].ids), "another seed -> other batches")
  t.ok(not eq_list(a1[1].ids, a1[2].ids), "successive steps differ")

  -- sharding: rank 0 and rank 1 of world 2 together are the world-1 batch
  local whole = batch_list(data.LMLoader { tokens = c, B = B, T = T, seed = 11 }, 3)
  local r0 = batch_list(data.LMLoader { tokens = c, B = B, T = T, seed = 11, rank = 0, world = 2 }, 3)
  local r1 = batch_list(data.LMLoader { tokens = c, B = B, T = T, seed = 11, rank = 1, world = 2 }, 3)
  local shard_ok = true
  for s = 1, 3 do
    local joined = {}
    for _, x in ipairs(r0[s].ids) do joined[#joined + 1] = x end
    for _, x in ipairs(r1[s].ids) do joined[#joined + 1] = x end
    if #r0[s].ids ~= B / 2 * T or not eq_list(joined, whole[s].ids) then shard_ok = false end
  end
  t.ok(shard_ok, "world=2: rank 0 rows ++ rank 1 rows == the world=1 batch (3 steps)")
  t.throws(function() data.LMLoader { tokens = c, B = 3, T = T, world = 2, rank = 0 } end, "not a multiple of world", "B must divide by world")

  -- resume
  local La = data.LMLoader { tokens = c, B = B, T = T, seed = 11 }
  batch_list(La, 3)
  local st = json.decode(json.encode(La:state()))     -- as a checkpoint stores it
  local want = batch_list(La, 2)
  local Lb = data.LMLoader { tokens = c, B = B, T = T, seed = 11 }
  Lb:set_state(st)
  local got = batch_list(Lb, 2)
  t.ok(eq_list(got[1].ids, want[1].ids) and eq_list(got[2].targets, want[2].targets), "state/set_state: a resumed loader continues with the same batches")
  t.ok(eq_list(got[1].ids, whole[4] and whole[4].ids or batch_list(data.LMLoader { tokens = c, B = B, T = T, seed = 11 }, 4)[4].ids),
       "…which are the batches of step 4 and 5 of an uninterrupted run")
  t.throws(function() data.LMLoader { tokens = c, B = B, T = T, seed = 12 }:set_state(st) end, "saved seed = 11", "set_state refuses another seed")

  -- splits
  local cut = math.floor(c.n * 0.9)
  local Lt = data.LMLoader { tokens = c, B = 8, T = T, seed = 1 }
  local Lv = data.LMLoader { tokens = c, B = 8, T = T, seed = 1, split = "val" }
  local tr_ok, va_ok = true, true
  for s = 0, 50 do
    for g = 0, 7 do
      local a, v = Lt:window(s, g), Lv:window(s, g)
      if a < 0 or a + T + 1 > cut then tr_ok = false end
      if v < cut or v + T + 1 > c.n then va_ok = false end
    end
  end
  t.ok(tr_ok, "train windows lie in the first 90% of the tokens")
  t.ok(va_ok, "val windows lie in the last 10%")
  t.throws(function() data.LMLoader { tokens = small, B = 2, T = 600, split = "val" } end, "the val split has 500 tokens", "a split shorter than T+1 is refused with its size")
  t.throws(function() data.LMLoader { tokens = c, B = 2, T = 8, batch = 3 } end, "unknown option 'batch'", "unknown option")
end

-- ---------------------------------------------------------------- MLM loader
do
  local B, T = 8, 48
  local M = data.MLMLoader { corpus = c, B = B, T = T, seed = 5 }
  ctx:reset()
  local b = M:next(ctx)
  for _, k in ipairs { "ids", "token_type", "targets", "pad_mask" } do t.is(b[k]:shape_str(), "(8,48)", "MLM " .. k .. " (B,T)") end
  local struct_ok, why = true, ""
  local selected, real, as_mask, unchanged, nexts, rows_ = 0, 0, 0, 0, 0, 0
  local function check(bt)
    for r = 0, B - 1 do
      rows_ = rows_ + 1
      if bt.ids:get(r, 0) ~= sp.cls then struct_ok, why = false, "row " .. r .. " does not start with [CLS]" end
      local seps, last = {}, -1
      for q = 0, T - 1 do
        local id, pm, tt, tg = bt.ids:get(r, q), bt.pad_mask:get(r, q), bt.token_type:get(r, q), bt.targets:get(r, q)
        if id == sp.sep then seps[#seps + 1] = q end
        if pm == 1 then last = q end
        if pm == 0 and (id ~= sp.pad or tg ~= -100 or tt ~= 0) then struct_ok, why = false, "padding" end
        if (id == sp.cls or id == sp.sep) and tg ~= -100 then struct_ok, why = false, "special with a target" end
        if pm == 1 and id ~= sp.cls and id ~= sp.sep then
          real = real + 1
          if tg ~= -100 then
            selected = selected + 1
            if id == sp.mask then as_mask = as_mask + 1 elseif id == tg then unchanged = unchanged + 1 end
          end
        end
        local want_tt = (#seps >= 1 and (q > seps[1])) and pm == 1 and 1 or 0
        if tt ~= want_tt then struct_ok, why = false, "token_type at " .. q end
      end
      if #seps ~= 2 or seps[2] ~= last then struct_ok, why = false, "two [SEP], the last real token" end
      nexts = nexts + bt.is_next:get(r)
    end
  end
  check(b)
  for _ = 1, 60 do ctx:reset() check(M:next(ctx)) end
  t.ok(struct_ok, "[CLS] a [SEP] b [SEP] [PAD]..., token types, pad mask, no targets on specials", why)
  local p = selected / real
  t.diag(string.format("MLM: %d real tokens, %.3f selected, of those %.3f [MASK], %.3f unchanged, %.3f random; is_next %.2f",
                       real, p, as_mask / selected, unchanged / selected, 1 - (as_mask + unchanged) / selected, nexts / rows_))
  t.near(p, 0.15, 0.015, "15% of the real tokens are selected")
  t.near(as_mask / selected, 0.8, 0.04, "80% of the selected become [MASK]")
  t.near(unchanged / selected, 0.1, 0.04, "~10% stay unchanged (10% + random hits of the same id)")
  t.ok(nexts / rows_ > 0.3 and nexts / rows_ < 0.6, "about half of the pairs are next-sentence pairs", nexts / rows_)

  -- sharding and resume
  local function mlm_ids(loader, k)
    local out
    for _ = 1, k do ctx:reset() out = loader:next(ctx) end
    return out.ids:tolist(), out.targets:tolist()
  end
  local w1 = mlm_ids(data.MLMLoader { corpus = c, B = 4, T = 32, seed = 9 }, 2)
  local s0 = mlm_ids(data.MLMLoader { corpus = c, B = 4, T = 32, seed = 9, rank = 0, world = 2 }, 2)
  local s1 = mlm_ids(data.MLMLoader { corpus = c, B = 4, T = 32, seed = 9, rank = 1, world = 2 }, 2)
  for _, x in ipairs(s1) do s0[#s0 + 1] = x end
  t.ok(eq_list(s0, w1), "MLM world=2 shards join to the world=1 batch")
  local Ma = data.MLMLoader { corpus = c, B = 4, T = 32, seed = 9 }
  mlm_ids(Ma, 2)
  local st = Ma:state()
  local want_ids, want_tg = mlm_ids(Ma, 1)
  local Mb = data.MLMLoader { corpus = c, B = 4, T = 32, seed = 9 }
  Mb:set_state(st)
  local got_ids, got_tg = mlm_ids(Mb, 1)
  t.ok(eq_list(got_ids, want_ids) and eq_list(got_tg, want_tg), "MLM resume gives the same batch (ids and masking)")
end

-- ---------------------------------------------------------------- images
do
  local names = data.image_classes()
  t.is(#names, 8, "8 object classes")
  t.is(names[1] .. "," .. names[5], "disc,ring", "class names")
  local L = data.ImageLoader { n = 256, size = 32, classes = 8, seed = 3, B = 16, patch = 8 }
  ctx:reset()
  local b = L:next(ctx)
  t.is(b.images:shape_str(), "(16,3,32,32)", "images (B,3,H,W)")
  t.is(b.labels:shape_str(), "(16)", "labels (B)")
  t.is(b.patch_object:shape_str(), "(16,16)", "patch_object (B, (H/P)·(W/P))")
  local x1 = b.images:tolist()
  local L2 = data.ImageLoader { n = 256, size = 32, classes = 8, seed = 3, B = 16, patch = 8 }
  ctx:reset()
  local x2 = L2:next(ctx).images:tolist()
  ctx:reset()
  local b3 = data.ImageLoader { n = 256, size = 32, classes = 8, seed = 4, B = 16 }:next(ctx)
  local x3 = b3.images:tolist()
  t.ok(eq_list(x1, x2), "same seed -> same images")
  t.ok(not eq_list(x1, x3), "another seed -> other images")
  -- labels, value range, object geometry over many images
  local counts, lo, hi = {}, math.huge, -math.huge
  local border_obj, centre_empty, nimg = 0, 0, 0
  for _ = 1, 16 do
    ctx:reset()
    local bt = L:next(ctx)
    for r = 0, 15 do
      nimg = nimg + 1
      local y = bt.labels:get(r)
      counts[y] = (counts[y] or 0) + 1
      for p = 0, 15 do
        local py, px = math.floor(p / 4), p % 4
        local border = py == 0 or py == 3 or px == 0 or px == 3
        if border and bt.patch_object:get(r, p) == 1 then border_obj = border_obj + 1 end
      end
      local centre = bt.patch_frac:get(r, 5) + bt.patch_frac:get(r, 6) + bt.patch_frac:get(r, 9) + bt.patch_frac:get(r, 10)
      if centre == 0 then centre_empty = centre_empty + 1 end
    end
    for _, v in ipairs(bt.images:tolist()) do lo, hi = math.min(lo, v), math.max(hi, v) end
  end
  local ncls = 0
  for y, _ in pairs(counts) do if y >= 0 and y < 8 then ncls = ncls + 1 end end
  t.is(ncls, 8, "labels cover the 8 classes and stay in range")
  t.ok(lo >= -2 and hi <= 2 and hi - lo > 3, "pixels normalised to [-2, 2] ((x-0.5)/0.25)", lo .. " " .. hi)
  t.is(border_obj, 0, "no border patch is an object patch (the object is centred)")
  t.is(centre_empty, 0, "every object touches the four central patches")
  -- the object is visible: its pixels differ from the background's
  local img = data.image { seed = 1, index = 5, size = 32, class = 0, patch = 8 }
  local so, sb, no, nb = 0, 0, 0, 0
  for p = 0, 32 * 32 - 1 do
    local v = img.data[p] + img.data[1024 + p] + img.data[2048 + p]
    if img.mask[p] == 1 then so, no = so + v, no + 1 else sb, nb = sb + v, nb + 1 end
  end
  t.ok(no > 50 and math.abs(so / no - sb / nb) > 1.0, "object and background differ in colour", string.format("%.2f vs %.2f", so / no, sb / nb))
  local d0 = data.image { seed = 1, index = 5, size = 32, class = 0 }
  local d1 = data.image { seed = 1, index = 5, size = 32, class = 1 }
  local diff = 0
  for p = 0, 1023 do if d0.mask[p] ~= d1.mask[p] then diff = diff + 1 end end
  t.ok(diff > 20, "two classes give different shapes for the same seed and index", diff)
  -- sharding and resume
  ctx:reset()
  local whole = data.ImageLoader { n = 64, size = 16, classes = 4, B = 4, seed = 2 }:next(ctx).labels:tolist()
  ctx:reset()
  local h0 = data.ImageLoader { n = 64, size = 16, classes = 4, B = 4, seed = 2, rank = 0, world = 2 }:next(ctx).labels:tolist()
  local h1 = data.ImageLoader { n = 64, size = 16, classes = 4, B = 4, seed = 2, rank = 1, world = 2 }:next(ctx).labels:tolist()
  t.ok(eq_list({ h0[1], h0[2], h1[1], h1[2] }, whole), "image loader shards join to the world=1 batch")
  local Ia = data.ImageLoader { n = 64, size = 16, classes = 4, B = 4, seed = 2 }
  ctx:reset() Ia:next(ctx)
  local st = Ia:state()
  ctx:reset()
  local want = Ia:next(ctx).images:tolist()
  local Ib = data.ImageLoader { n = 64, size = 16, classes = 4, B = 4, seed = 2 }
  Ib:set_state(st)
  ctx:reset()
  t.ok(eq_list(Ib:next(ctx).images:tolist(), want), "image loader resume")
  t.throws(function() data.ImageLoader { n = 8, size = 30, B = 2, patch = 8 } end, "not a multiple of patch", "size must divide by patch")
  t.throws(function() data.ImageLoader { n = 8, size = 32, B = 2, classes = 9 } end, "only 8 shapes", "too many classes")
end

return t.done()
