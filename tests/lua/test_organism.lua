-- test_organism — the model organism's data (outlierlab.data.organism: the Bigram-Backcopy
-- task, LM and MLM batches, flat-background images) and the phenomena metrics (sink share,
-- value drain, top-1/median at a token category, kurtosis) on hand-computed cases.
local t = require "tap"
local ol = require "outlierlab"
local org = require "outlierlab.data.organism"
local phenomena = require "outlierlab.measure.phenomena"
local probes = require "outlierlab.measure.probes"
local ffi = require "ffi"

local ctx = ol.Context{ seed = 1 }

-- ---------------------------------------------------------------- the task
local task = org.task{ vocab_size = 64, n_triggers = 8, groups = 2, n_delim = 2, n_weak = 3, seed = 3 }
t.is(task.vocab[task.special.bos], "<bos>", "id 1 is <bos>")
t.is(task.category(task.special.bos), "initial", "<bos> is initial")
t.is(task.category(task.special.cls), "initial", "[CLS] is initial")
t.is(task.category(task.special.sep), "delimiter", "[SEP] is a delimiter")
t.is(task.category(task.delim0), "delimiter", "the first chain token is a delimiter")
t.is(task.category(task.weak0), "weak", "weak tokens are weak-semantic")
t.is(task.category(task.trig0), "other", "triggers are 'other'")
t.is(task.n_ordinary, 64 - 5 - 2 - 3 - 8, "ordinary tokens are what is left")
-- rows are distributions
do
  local bad = 0
  for r = 0, task.n_chain do
    local prev = -1
    for j = 0, task.n_chain - 1 do
      local c = task.cdf[r * task.n_chain + j]
      if c < prev - 1e-12 then bad = bad + 1 end
      prev = c
    end
    if math.abs(prev - 1) > 1e-9 then bad = bad + 1 end
  end
  t.is(bad, 0, "every transition row is a cumulative distribution ending at 1")
end
-- delimiters and weak tokens get exactly their mass in every row
do
  local r = task.ord0 - 5 + 3      -- the row of some ordinary token
  local d = task.cdf[r * task.n_chain + 1]                         -- two delimiters
  t.near(d, 0.1, 1e-12, "p_delim = 0.1 of every row goes to the delimiters")
  local w = task.cdf[r * task.n_chain + 4] - d                     -- three weak tokens
  t.near(w, 0.1, 1e-12, "p_weak = 0.1 of every row goes to the weak tokens")
end

-- sequences obey the back-copy rule
local loader = org.LMLoader{ task = task, B = 8, T = 200, seed = 5 }
local b = loader:next(ctx)
do
  local ok_bos, copies, wrong, nonchain = 0, 0, 0, 0
  for r = 0, 7 do
    local ids, tg = b.ids.idata + r * 200, b.targets.idata + r * 200
    if ids[0] == task.special.bos then ok_bos = ok_bos + 1 end
    for t_ = 1, 199 do
      if ids[t_] < task.delim0 then nonchain = nonchain + 1 end
      if ids[t_] ~= tg[t_ - 1] then wrong = wrong + 1 end    -- targets are the ids shifted by one
    end
    -- full sequence x_0 .. x_T
    local x = {}
    for t_ = 0, 199 do x[t_] = ids[t_] end
    x[200] = tg[199]
    for t_ = 1, 199 do
      local g = task.group[x[t_]]
      if g > 0 and t_ - g >= 1 then
        copies = copies + 1
        if x[t_ + 1] ~= x[t_ - g] then wrong = wrong + 1 end
      end
    end
  end
  t.is(ok_bos, 8, "every LM row starts with <bos>")
  t.is(nonchain, 0, "only chain tokens follow <bos>")
  t.ok(copies > 50, "triggers occur (" .. copies .. " copies in 8 rows)")
  t.is(wrong, 0, "after a trigger of group g the next token is the one g places before the trigger")
end
-- determinism, resume and sharding
do
  local l1 = org.LMLoader{ task = task, B = 4, T = 32, seed = 9 }
  local l2 = org.LMLoader{ task = task, B = 4, T = 32, seed = 9 }
  l1:next(ctx)
  local s = l1:state()
  local x1 = l1:next(ctx)
  l2:set_state(s)
  local x2 = l2:next(ctx)
  local same = true
  for i = 0, 4 * 32 - 1 do if x1.ids.idata[i] ~= x2.ids.idata[i] then same = false end end
  t.ok(same, "set_state(state()) gives the same next batch")
  local v = org.LMLoader{ task = task, B = 4, T = 32, seed = 9, split = "val" }
  local x3 = v:next(ctx)
  local differ = false
  for i = 0, 4 * 32 - 1 do if x3.ids.idata[i] ~= x1.ids.idata[i] then differ = true end end
  t.ok(differ, "the validation split draws other sequences")
end
t.ok(task.loss_floor > 0.5 and task.loss_floor < math.log(task.n_chain), "loss floor between 0.5 and log(chain tokens)",
  task.loss_floor)
t.throws(function() org.task{ vocab_size = 16, n_triggers = 12 } end, "ordinary tokens", "too few ordinary tokens is an error")
t.throws(function() org.task{ nope = 1 } end, "unknown option 'nope'", "unknown option is an error")
t.throws(function() org.LMLoader{ task = task, B = 0, T = 8 } end, "B must be an integer", "B = 0 is refused")
t.throws(function() org.MLMLoader{ task = task, B = 1, T = 2 } end, "T (data.organism.MLMLoader)", "MLM needs T >= 3")

-- MLM frame
do
  local m = org.MLMLoader{ task = task, B = 16, T = 64, seed = 2 }
  local mb = m:next(ctx)
  local frame, targets, masked, outside = 0, 0, 0, 0
  for r = 0, 15 do
    local ids, tg = mb.ids.idata + r * 64, mb.targets.idata + r * 64
    if ids[0] == task.special.cls and ids[63] == task.special.sep then frame = frame + 1 end
    if tg[0] ~= -100 or tg[63] ~= -100 then outside = outside + 1 end
    for t_ = 1, 62 do
      if tg[t_] ~= -100 then
        targets = targets + 1
        if ids[t_] == task.special.mask then masked = masked + 1 end
      end
    end
  end
  t.is(frame, 16, "every MLM row is [CLS] ... [SEP]")
  t.is(outside, 0, "[CLS] and [SEP] are never targets")
  local rate = targets / (16 * 62)
  t.ok(rate > 0.09 and rate < 0.21, "about 15 % of the chain positions are targets", rate)
  t.ok(masked / targets > 0.65 and masked / targets < 0.92, "about 80 % of the targets are [MASK]", masked / targets)
end

-- MLM rows of several segments (sep_every: BERT's [CLS] A [SEP] B [SEP] layout)
do
  t.throws(function() org.task{ vocab_size = 128, sep_every = 2 } end, "sep_every", "sep_every = 2 leaves no room for a segment")
  local base = { vocab_size = 128, n_triggers = 24, groups = 6, n_delim = 3, p_delim = 0.15 }
  local seg = {}
  for k, v in pairs(base) do seg[k] = v end
  seg.sep_every = 24
  local ts = org.task(seg)
  local plain = org.MLMLoader{ task = org.task(base), B = 8, T = 64, seed = 3 }:next(ctx)
  local zero = {}
  for k, v in pairs(base) do zero[k] = v end
  zero.sep_every = 0
  local pz = org.MLMLoader{ task = org.task(zero), B = 8, T = 64, seed = 3 }:next(ctx)
  local same = true
  for i = 0, 8 * 64 - 1 do
    if plain.ids.idata[i] ~= pz.ids.idata[i] or plain.targets.idata[i] ~= pz.targets.idata[i] or pz.token_type.idata[i] ~= 0 then same = false end
  end
  t.ok(same, "sep_every = 0 gives the one-segment rows, token_type 0")
  local mb = org.MLMLoader{ task = ts, B = 8, T = 64, seed = 3 }:next(ctx)
  local sp = ts.special
  local layout, types, sep_targets, inner_sep = true, true, 0, 0
  for r = 0, 7 do
    local ids, tg, tt = mb.ids.idata + r * 64, mb.targets.idata + r * 64, mb.token_type.idata + r * 64
    for p = 0, 63 do
      local want = p == 0 and sp.cls or ((p == 23 or p == 47 or p == 63) and sp.sep or nil)
      if want and ids[p] ~= want then layout = false end
      if not want and (ids[p] == sp.sep or ids[p] == sp.cls) then inner_sep = inner_sep + 1 end
      if want and tg[p] ~= -100 then sep_targets = sep_targets + 1 end
      -- segment 0: [CLS] .. 23, segment 1: 24 .. 47 (type 1), segment 2: 48 .. 63
      local want_type = (p >= 24 and p <= 47) and 1 or 0
      if tt[p] ~= want_type then types = false end
    end
  end
  t.ok(layout, "[CLS] at 0 and a [SEP] at 23, 47 and 63 in every row")
  t.is(inner_sep, 0, "no other [CLS] or [SEP] in the rows")
  t.is(sep_targets, 0, "[CLS] and the [SEP]s are never targets")
  t.ok(types, "token_type alternates by segment: 0, 1, 0")
  -- each segment is a chain of its own: segment 1 is chain seq * 3 + 1, unmasked where not a target
  local buf = ffi.new("int32_t[?]", 65)
  ts.chain(3 * 7919 + 17, 2 * 3 + 1, 23, buf)   -- row 2 of the first train batch, segment 1: positions 24 .. 46
  local agree = true
  for p = 24, 46 do
    local id, tg = mb.ids.idata[2 * 64 + p], mb.targets.idata[2 * 64 + p]
    local x = tg ~= -100 and tg or id
    if x ~= buf[p - 24] then agree = false end
  end
  t.ok(agree, "a segment's tokens are its own chain (chain index seq * n_segments + k)")
  -- segment_cls: packed rows, [CLS] A [SEP] [CLS] B [SEP] ...
  t.throws(function() org.task{ vocab_size = 128, segment_cls = 1 } end, "segment_cls must be true or false", "segment_cls is a boolean")
  t.throws(function() org.task{ vocab_size = 128, segment_cls = true } end, "segment_cls needs sep_every", "segment_cls without segments is an error")
  seg.segment_cls = true
  local tp = org.task(seg)
  local pb = org.MLMLoader{ task = tp, B = 8, T = 64, seed = 3 }:next(ctx)
  local packed, p_targets, p_types = true, 0, true
  for r = 0, 7 do
    local ids, tg, tt = pb.ids.idata + r * 64, pb.targets.idata + r * 64, pb.token_type.idata + r * 64
    for p = 0, 63 do
      local want = (p == 0 or p == 24 or p == 48) and sp.cls or ((p == 23 or p == 47 or p == 63) and sp.sep or nil)
      if (want and ids[p] ~= want) or (not want and (ids[p] == sp.sep or ids[p] == sp.cls)) then packed = false end
      if want and tg[p] ~= -100 then p_targets = p_targets + 1 end
      if tt[p] ~= ((p >= 24 and p <= 47) and 1 or 0) then p_types = false end
    end
  end
  t.ok(packed, "segment_cls: [CLS] at 0, 24, 48 and [SEP] at 23, 47, 63, nowhere else")
  t.is(p_targets, 0, "segment_cls: no [CLS] or [SEP] is a target")
  t.ok(p_types, "segment_cls: token_type 0, 1, 0 by segment, its [CLS] included")
  ts.chain(3 * 7919 + 17, 2 * 3 + 1, 22, buf)   -- row 2, segment 1 after its [CLS]: positions 25 .. 46
  agree = true
  for p = 25, 46 do
    local id, tg = pb.ids.idata[2 * 64 + p], pb.targets.idata[2 * 64 + p]
    if (tg ~= -100 and tg or id) ~= buf[p - 25] then agree = false end
  end
  t.ok(agree, "segment_cls: a later segment's chain starts after its [CLS]")
  t.throws(function() org.LMLoader{ task = ts, B = 2, T = 16 } end, "LM rows have no segments", "sep_every with LM rows is an error")
  local batcher = require "outlierlab.data.batcher"
  t.throws(function() batcher.data_spec{ data = "corpus", sep_every = 24, data_seed = 1, n_tokens = 10, vocab_size = 64 } end,
    "--sep_every=24 needs the organism's data", "sep_every with the text corpus is an error")
  t.throws(function() batcher.data_spec{ data = "corpus", sep_every = 0, segment_cls = true, data_seed = 1, n_tokens = 10, vocab_size = 64 } end,
    "--segment_cls needs the organism's data", "segment_cls with the text corpus is an error")
  local d = batcher.data_spec{ data = "organism", sep_every = 0, vocab_size = 128, n_triggers = 24, groups = 6, alpha = 0.1,
    p_trigger = 0.12, n_delim = 0, p_delim = 0.1, n_weak = 0, p_weak = 0.1, data_seed = 1 }
  t.is(d.sep_every, nil, "sep_every = 0 stays out of the data spec (older models keep their hash)")
  t.is(d.segment_cls, nil, "segment_cls unset stays out of the data spec")
end

-- ---------------------------------------------------------------- flat images
do
  local data = require "outlierlab.data"
  local img = data.image{ seed = 1, index = 3, size = 32, class = 1, style = "flat", patch = 4 }
  local bg, n = {}, 0
  local obj = 0
  for p = 0, 32 * 32 - 1 do
    if img.mask[p] == 0 then n = n + 1; bg[#bg + 1] = img.data[p] else obj = obj + 1 end
  end
  local lo, hi = math.huge, -math.huge
  for _, v in ipairs(bg) do lo, hi = math.min(lo, v), math.max(hi, v) end
  t.ok(hi - lo < 0.05, "a flat background is one colour (range of channel 0 over the background)", hi - lo)
  t.ok(obj > 0 and obj < 0.2 * 1024, "the flat style's object is small", obj)
  t.throws(function() data.image{ style = "wavy" } end, "style must be 'textured' or 'flat'", "unknown style is an error")
end

-- loop-free copies and recall tokens: a copy never repeats a trigger or recall token (a bigram
-- draw instead), and after a recall token R_k comes the token that followed the previous R_k
do
  local rt = org.task{ vocab_size = 64, n_triggers = 8, groups = 4, p_trigger = 0.15, n_recall = 2, p_recall = 0.1,
                       loop_free = true, seed = 3 }
  t.is(rt.category(rt.rec0), "other", "recall tokens are 'other'")
  t.is(rt.vocab[rt.rec0], "R0", "recall tokens are named R0, R1 ...")
  local ld = org.LMLoader{ task = rt, B = 8, T = 256, seed = 2 }
  local bb = ld:next(ctx)
  local copies, skipped, recalls, firsts, wrong, trig_copies = 0, 0, 0, 0, 0, 0
  local is_special = function(id) return id >= rt.trig0 and id < rt.ord0 end
  for r = 0, 7 do
    local x = {}
    for t_ = 0, 255 do x[t_] = bb.ids.idata[r * 256 + t_] end
    x[256] = bb.targets.idata[r * 256 + 255]
    local last, ntrig = {}, 0
    for t_ = 1, 256 do if rt.group[x[t_]] > 0 then ntrig = ntrig + 1 end end
    trig_copies = math.max(trig_copies, ntrig / 256)
    for t_ = 1, 255 do
      local g = rt.group[x[t_]]
      if g > 0 and t_ - g >= 1 then
        if is_special(x[t_ - g]) then
          skipped = skipped + 1
        else
          copies = copies + 1
          if x[t_ + 1] ~= x[t_ - g] then wrong = wrong + 1 end
        end
      elseif x[t_] >= rt.rec0 and x[t_] < rt.ord0 then
        local s_ = last[x[t_]]
        if s_ then
          recalls = recalls + 1
          if x[t_ + 1] ~= x[s_ + 1] then wrong = wrong + 1 end
        else
          firsts = firsts + 1
          if x[t_ + 1] < rt.ord0 then wrong = wrong + 1 end   -- a first value is an ordinary token
        end
        last[x[t_]] = t_
      end
    end
  end
  t.ok(copies > 100 and recalls > 20 and firsts > 0, string.format("copies (%d), recalls (%d) and first occurrences (%d) occur", copies, recalls, firsts))
  t.ok(skipped > 0, "some copy sources are triggers or recall tokens (skipped: a bigram draw)", skipped)
  t.is(wrong, 0, "every copy and recall follows its rule")
  t.ok(trig_copies < 0.25, "loop_free: no copy loops (the largest trigger share of a row stays near p_trigger)", trig_copies)
  t.ok(rt.loss_floor > 0.5, "the loss floor counts the recalled positions as free", rt.loss_floor)
  local ok = pcall(org.task, { loop_free = "yes" })
  t.ok(not ok, "loop_free must be a boolean")
end

-- pointer tokens: after P at t with an ordinary x_{t-1}, x_{t+1} = x_{t-1-o}, o = 1 + (ordinal mod 3)
do
  local pt = org.task{ vocab_size = 64, n_triggers = 4, groups = 2, p_trigger = 0.1, n_pointer = 2, p_pointer = 0.1,
                       loop_free = true, seed = 4 }
  t.is(pt.vocab[pt.ptr0], "P0", "pointer tokens are named P0, P1 ...")
  local ld = org.LMLoader{ task = pt, B = 8, T = 256, seed = 3 }
  local bb = ld:next(ctx)
  local n, wrong = 0, 0
  for r = 0, 7 do
    local x = {}
    for t_ = 0, 255 do x[t_] = bb.ids.idata[r * 256 + t_] end
    x[256] = bb.targets.idata[r * 256 + 255]
    for t_ = 2, 255 do
      if x[t_] >= pt.ptr0 and x[t_] < pt.ord0 and x[t_ - 1] >= pt.ord0 then
        local src = t_ - 1 - (1 + (x[t_ - 1] - pt.ord0) % 3)
        if src >= 1 and not (x[src] >= pt.trig0 and x[src] < pt.ord0) then
          n = n + 1
          if x[t_ + 1] ~= x[src] then wrong = wrong + 1 end
        end
      end
    end
  end
  t.ok(n > 20, "pointer hops occur", n)
  t.is(wrong, 0, "after P the token o places before the previous token, o = 1 + (its ordinal mod 3)")
  -- two hops (P1 with pointer_hops = 2): from x_{t-1} back o1, then from there back o2
  local p2 = org.task{ vocab_size = 64, n_triggers = 4, groups = 2, p_trigger = 0.1, n_pointer = 2, p_pointer = 0.2,
                       pointer_hops = 2, loop_free = true, seed = 4 }
  local b2 = org.LMLoader{ task = p2, B = 8, T = 256, seed = 3 }:next(ctx)
  local n2, w2 = 0, 0
  for r = 0, 7 do
    local x = {}
    for t_ = 0, 255 do x[t_] = b2.ids.idata[r * 256 + t_] end
    x[256] = b2.targets.idata[r * 256 + 255]
    for t_ = 2, 255 do
      if x[t_] == p2.ptr0 + 1 and x[t_ - 1] >= p2.ord0 then
        local a = t_ - 1 - (1 + (x[t_ - 1] - p2.ord0) % 3)
        if a >= 1 and x[a] >= p2.ord0 then
          local src = a - (1 + (x[a] - p2.ord0) % 3)
          if src >= 1 and not (x[src] >= p2.trig0 and x[src] < p2.ord0) then
            n2 = n2 + 1
            if x[t_ + 1] ~= x[src] then w2 = w2 + 1 end
          end
        end
      end
    end
  end
  t.ok(n2 > 10, "two-hop pointers occur", n2)
  t.is(w2, 0, "a two-hop pointer lands where both hops lead")
end

-- ---------------------------------------------------------------- phenomena, hand-computed
-- One sequence [<bos>, a, b] (initial, other, other), one head, causal attention
--   A = [[1, 0, 0], [0.8, 0.2, 0], [0.6, 0.2, 0.2]]
-- sink share on initial keys = mean over the two non-initial queries of A[i, 0] = (0.8 + 0.6) / 2
-- values ‖v‖ = 1 at <bos>, 2 and 4 elsewhere: value ratio 1 / median(2, 4) = 1/3
-- h (one layer, C = 2): rows (100, 0), (1, -2), (3, 1): per-sequence top-1 100, median of the
-- six |h| = (1 + 1) / 2 ... sorted 0 1 1 2 3 100 -> (1 + 2) / 2 = 1.5
do
  local cat = { [1] = "initial" }
  local ph = phenomena.new{ category = function(id) return cat[id] or "other" end, T = 3, C = 2, n_head = 1, causal = true }
  local ids = ctx:tensor({ 1, 3 }, { dtype = "i32" })
  ids.idata[0], ids.idata[1], ids.idata[2] = 1, 10, 11
  local batch = { ids = ids }
  local A = ctx:tensor({ 1, 1, 3, 3 })
  local a = { 1, 0, 0, 0.8, 0.2, 0, 0.6, 0.2, 0.2 }
  for i = 1, 9 do A.data[i - 1] = a[i] end
  local v = ctx:tensor({ 1, 1, 3, 2 })
  local vv = { 1, 0, 0, 2, 4, 0 }
  for i = 1, 6 do v.data[i - 1] = vv[i] end
  local h = ctx:tensor({ 1, 3, 2 })
  local hh = { 100, 0, 1, -2, 3, 1 }
  for i = 1, 6 do h.data[i - 1] = hh[i] end
  ph:probe_v(v, 0, batch)      -- the models report v before the attention weights
  ph:probe_attn(A, 0, batch)
  ph:probe_h(h, 0, batch)
  local r = ph:result()
  t.near(r.heads[0][0].share.initial, 0.7, 1e-6, "sink share on <bos> = (0.8 + 0.6) / 2")
  t.near(r.heads[0][0].value_ratio.initial, 1 / 3, 1e-6, "value drain ratio = 1 / median(2, 4)")
  t.near(r.heads[0][0].mass.other, 0.2, 1e-6,
    "mass on 'other' keys: only query 2 sees one besides itself (key 1, weight 0.2); key 2 is in query 1's future")
  t.is(r.sink.layer, 0, "the strongest sink head is found")
  t.is(r.sink.category, "initial", "... on the initial token")
  t.near(r.per_layer[0].median, 1.5, 1e-6, "median |h| over the sequence")
  t.near(r.per_layer[0].ratio, 100 / 1.5, 1e-4, "top-1/median |h|")
  t.near(r.per_layer[0].ratio_at.initial, 100 / 1.5, 1e-4, "top-1/median at the initial token")
  t.near(r.per_layer[0].ratio_at.other, 3 / 1.5, 1e-6, "top-1/median over the other tokens")
  t.is(r.per_layer[0].top1_category.initial, 1, "the sequence's top-1 sits at the initial token")
  -- kurtosis of the six values, Pearson with the unbiased variance (docs/reference/metrics.md)
  local xs, mu = hh, 0
  for _, x in ipairs(xs) do mu = mu + x / 6 end
  local m2, m4 = 0, 0
  for _, x in ipairs(xs) do m2 = m2 + (x - mu) ^ 2; m4 = m4 + (x - mu) ^ 4 end
  local k = (m4 / 6) / (m2 / 5) ^ 2
  t.near(r.per_layer[0].kurtosis, k, 1e-6 * k, "kurtosis of h matches the hand computation")
  t.near(r.massive.ratio, 100 / 1.5, 1e-4, "massive: the largest ratio at a sink category")
  -- without the initial token: the four values 1, -2, 3, 1
  local ys, nu = { 1, -2, 3, 1 }, 0.75
  local n2, n4 = 0, 0
  for _, y in ipairs(ys) do n2 = n2 + (y - nu) ^ 2; n4 = n4 + (y - nu) ^ 4 end
  local kn = (n4 / 4) / (n2 / 3) ^ 2
  t.near(r.per_layer[0].kurtosis_no_initial, kn, 1e-9 * kn, "kurtosis without the initial token, by hand", kn)
  t.near(r.avg_kurtosis_no_initial, kn, 1e-9 * kn, "... averaged over the one layer")
  t.near(r.per_layer[0].top1_at.initial, 100, 1e-9, "top-1 |h| at the initial token")
  t.near(r.per_layer[0].initial_top_share, 1, 1e-12, "one-hot share of <bos>'s state (100, 0): 1")
  t.near(r.massive.initial_top_share, 1, 1e-12, "... reported with the massive activation's layer")
  -- Gu et al.'s alpha on the first key: every query, (1 + 0.8 + 0.6) / 3 = 0.8 > 0.3: a sink
  t.near(r.heads[0][0].alpha_first, 0.8, 1e-6, "alpha(first key) = mean of A[i, 0] over all queries")
  t.is(r.sink_heads, 1, "the head is a sink (alpha > 0.3)")
  t.near(r.sink_rate, 1, 1e-12, "sink rate 1 of 1 heads")
  t.near(r.sink_rate_value_ratio, 1 / 3, 1e-6, "the sink heads' value ratio")
end

-- one-hot share of the initial token's state, two sequences [<bos>, a] with C = 4:
-- <bos> = (3, 4, 0, 0): top-1 16/25 = 0.64, top-3 1; <bos> = (1, 1, 1, 1): 1/4 and 3/4; the means
-- over sequences 0.445 and 0.875 (the other tokens do not count: a = (100, 0, 0, 0) in both)
do
  local ph = phenomena.new{ category = function(id) return id == 1 and "initial" or "other" end, T = 2, C = 4, n_head = 1, causal = true }
  local ids = ctx:tensor({ 2, 2 }, { dtype = "i32" })
  ids.idata[0], ids.idata[1], ids.idata[2], ids.idata[3] = 1, 10, 1, 10
  local h = ctx:tensor({ 2, 2, 4 })
  local hh = { 3, 4, 0, 0, 100, 0, 0, 0, 1, 1, 1, 1, 100, 0, 0, 0 }
  for i = 1, 16 do h.data[i - 1] = hh[i] end
  ph:probe_h(h, 0, { ids = ids })
  local r = ph:result()
  t.near(r.per_layer[0].initial_top_share, (0.64 + 0.25) / 2, 1e-12, "one-hot share of <bos>, averaged over sequences, by hand")
  t.near(r.per_layer[0].initial_top3_share, (1 + 0.75) / 2, 1e-12, "top-3 share of <bos>, by hand")
end

-- sink rate over two heads: alpha = (1 + 0.5 + 0.3 + 0.2) / 4 = 0.5 (a sink) and
-- (1 + 0 + 0 + 0) / 4 = 0.25 (not one, although the first query's whole attention is on key 0)
do
  local ph = phenomena.new{ category = function(id) return id == 1 and "initial" or "other" end, T = 4, C = 1, n_head = 2, causal = true }
  local ids = ctx:tensor({ 1, 4 }, { dtype = "i32" })
  ids.idata[0], ids.idata[1], ids.idata[2], ids.idata[3] = 1, 10, 11, 12
  local A = ctx:tensor({ 1, 2, 4, 4 })
  local a = { 1, 0, 0, 0,  0.5, 0.5, 0, 0,  0.3, 0.3, 0.4, 0,  0.2, 0.2, 0.2, 0.4,
              1, 0, 0, 0,  0, 1, 0, 0,  0, 0.5, 0.5, 0,  0, 0, 0.5, 0.5 }
  for i = 1, 32 do A.data[i - 1] = a[i] end
  ph:probe_attn(A, 0, { ids = ids })
  local r = ph:result()
  t.near(r.heads[0][0].alpha_first, 0.5, 1e-6, "head 0: alpha = 0.5")
  t.near(r.heads[0][1].alpha_first, 0.25, 1e-6, "head 1: alpha = 0.25")
  t.near(r.sink_rate, 0.5, 1e-12, "sink rate: 1 of 2 heads above eps = 0.3")
end

-- one sink token against the mass on a category: query 2 of [<bos>, '.', ',', a] puts 0.4 on
-- each delimiter; share = the largest weight on ONE delimiter, mass = the sum
do
  local cat = { [1] = "initial", [6] = "delimiter", [7] = "delimiter" }
  local ph = phenomena.new{ category = function(id) return cat[id] or "other" end, T = 4, C = 1, n_head = 1, causal = true }
  local ids = ctx:tensor({ 1, 4 }, { dtype = "i32" })
  ids.idata[0], ids.idata[1], ids.idata[2], ids.idata[3] = 1, 6, 7, 10
  local A = ctx:tensor({ 1, 1, 4, 4 })
  local a = { 1, 0, 0, 0,  0.5, 0.5, 0, 0,  0.2, 0.4, 0.4, 0,  0.1, 0.4, 0.4, 0.1 }
  for i = 1, 16 do A.data[i - 1] = a[i] end
  ph:probe_attn(A, 0, { ids = ids })
  local r = ph:result()
  -- queries that see a delimiter other than themselves (causal): 2 (key 1) and 3 (keys 1, 2);
  -- query 1 is the only delimiter it sees; query 0 sees none.
  -- query 2: max 0.4, mass 0.4; query 3: max 0.4, mass 0.8
  t.near(r.heads[0][0].share.delimiter, 0.4, 1e-6, "share: the largest weight on one delimiter key")
  t.near(r.heads[0][0].mass.delimiter, 0.6, 1e-6, "mass: the summed weight on the delimiter keys")
end

-- phenomena through a model's probes (every point reported, every head measured)
do
  local models = require "outlierlab.models"
  local m = models.build(ctx, { family = "llama", vocab_size = 64, block_size = 16, n_layer = 2, n_head = 2,
                                n_kv_head = 1, d_model = 16, d_ff = 32 })
  local ph = phenomena.new{ category = task.category, T = 16, C = 16, n_head = 2 }
  local P = probes.new{}
  ph:attach(P)
  ctx:no_grad(function()
    ctx:reset()
    P:forward(m, org.LMLoader{ task = task, B = 2, T = 16, seed = 1, split = "val" }:next(ctx))
  end)
  local r = ph:result()
  t.is(#r.layers, 2, "both layers measured")
  t.ok(r.heads[1][1].value_ratio.initial == r.heads[1][1].value_ratio.initial, "grouped-query heads map to their kv head")
  t.ok(r.sink.share > 0 and r.sink.share <= 1, "an untrained model's sink share is a probability", r.sink.share)
  t.ok(phenomena.describe(r):find("sink L", 1, true) ~= nil, "describe() names the sink head")
end

return t.done()
