-- data/corpus — the synthetic text corpus (grammar in docs/reference/data.md).
--
-- A stand-in for web text that keeps what the outlier papers point at: every document starts
-- with a BOS token (the "initial" token that attention sinks on), sentences end in "." and
-- contain ",", paragraphs are separated by "\n" (the delimiters of QT §3), frequent
-- weak-semantic words ("the", "of", "and", ...), Zipfian content words, and structure a
-- model must learn across positions: a topic per document biasing the choice of words,
-- named entities repeated within a document, and subject-verb number agreement across
-- prepositional phrases and relative clauses.
--
-- Every document d is generated from its own random stream (seed, d), so the corpus of n
-- tokens is a prefix of the corpus of 2n tokens, and the same seed gives the same tokens.
local ffi = require "ffi"
local ol = require "outlierlab"
local C = ol.C

local M = {}

-- ---------------------------------------------------------------- vocabulary
M.SPECIALS = { "[PAD]", "<bos>", "<eos>", "[CLS]", "[SEP]", "[MASK]", ".", ",", "\n" }
local PAD, BOS, EOS, CLS, SEP, MASK, PERIOD, COMMA, NEWLINE = 0, 1, 2, 3, 4, 5, 6, 7, 8
M.special = { pad = PAD, bos = BOS, eos = EOS, cls = CLS, sep = SEP, mask = MASK,
              period = PERIOD, comma = COMMA, newline = NEWLINE }
-- weak-semantic (function) words, most frequent English function words first
M.WEAK = { "the", "of", "and", "a", "to", "in", "is", "was", "that", "it", "for", "on", "with",
           "as", "by", "at", "from", "his", "her", "this", "but", "or", "an", "are", "were",
           "which", "their", "not", "be", "had" }
local FIRST_WORD = #M.SPECIALS             -- id of "the"
local W = {}
for i, w in ipairs(M.WEAK) do W[w] = FIRST_WORD + i - 1 end

local ONSETS = { "b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "st", "tr", "gr", "pl", "sh" }
local VOWELS = { "a", "e", "i", "o", "u", "ai", "ou", "ea" }
-- a pronounceable stem, different for every k (bijective base-160 digits)
local function stem(k, nsyl)
  local parts = {}
  for _ = 1, nsyl do
    local s = k % (#ONSETS * #VOWELS)
    k = math.floor(k / (#ONSETS * #VOWELS))
    parts[#parts + 1] = ONSETS[s % #ONSETS + 1] .. VOWELS[math.floor(s / #ONSETS) + 1]
  end
  return table.concat(parts)
end

-- Build the vocabulary of a given size: ids 0-8 specials, 9-38 weak words, then names,
-- nouns (singular and plural id per lemma), verbs (3rd person singular and plural id),
-- adjectives, adverbs. Depends on vocab_size only.
local vocab_cache = {}
function M.vocabulary(V)
  if vocab_cache[V] then return vocab_cache[V] end
  if type(V) ~= "number" or V ~= math.floor(V) or V < 128 or V > 65536 then
    error("data.corpus: vocab_size must be an integer in [128, 65536], got " .. tostring(V), 3)
  end
  local R = V - FIRST_WORD - #M.WEAK
  local n_name = math.max(4, math.floor(R * 0.06))
  local n_noun = math.floor(R * 0.36 / 2)
  local n_verb = math.floor(R * 0.30 / 2)
  local n_adj = math.floor(R * 0.18)
  local n_adv = R - n_name - 2 * n_noun - 2 * n_verb - n_adj
  local v = { size = V, words = {}, cat = {} }
  local words = v.words
  for i, s in ipairs(M.SPECIALS) do words[i - 1] = s end
  for i, s in ipairs(M.WEAK) do words[FIRST_WORD + i - 1] = s end
  local id = FIRST_WORD + #M.WEAK
  local function block(n, make)
    local first = id
    for k = 0, n - 1 do make(k, id) end
    return first
  end
  v.name0 = block(n_name, function(k) local s = stem(k + 7, 2) words[id] = s:sub(1, 1):upper() .. s:sub(2) .. "o" id = id + 1 end)
  v.noun0 = block(n_noun, function(k) local s = stem(k, 1 + (k >= 40 and 1 or 0)) .. "n" words[id] = s words[id + 1] = s .. "s" id = id + 2 end)
  v.verb0 = block(n_verb, function(k) local s = stem(k + 3, 1 + (k >= 30 and 1 or 0)) .. "r" words[id] = s .. "es" words[id + 1] = s id = id + 2 end)
  v.adj0 = block(n_adj, function(k) words[id] = stem(k + 11, 1 + (k >= 30 and 1 or 0)) .. "ic" id = id + 1 end)
  v.adv0 = block(n_adv, function(k) words[id] = stem(k + 19, 2) .. "ly" id = id + 1 end)
  assert(id == V, "vocabulary size")
  v.n_name, v.n_noun, v.n_verb, v.n_adj, v.n_adv = n_name, n_noun, n_verb, n_adj, n_adv
  for i = 0, V - 1 do v.cat[i] = "other" end
  v.cat[BOS], v.cat[CLS] = "initial", "initial"
  for _, d in ipairs { SEP, PERIOD, COMMA, NEWLINE, EOS } do v.cat[d] = "delimiter" end
  for i = FIRST_WORD, FIRST_WORD + #M.WEAK - 1 do v.cat[i] = "weak" end
  vocab_cache[V] = v
  return v
end

-- ---------------------------------------------------------------- Zipf samplers
-- A sampler over n items with p(k) ∝ 1/(k+1)^s, restricted to the items of one topic when
-- members is given: cdf (double) and ids (int32) arrays, sampled by binary search.
local function zipf_table(n, s, members)
  local list = members or {}
  if not members then for k = 0, n - 1 do list[#list + 1] = k end end
  local m = #list
  local cdf, ids = ffi.new("double[?]", m), ffi.new("int32_t[?]", m)
  local acc = 0
  for i = 1, m do
    acc = acc + 1 / (list[i] + 1) ^ s
    cdf[i - 1] = acc
    ids[i - 1] = list[i]
  end
  for i = 0, m - 1 do cdf[i] = cdf[i] / acc end
  cdf[m - 1] = 1
  return { cdf = cdf, ids = ids, n = m }
end

local function zipf_draw(z, u)
  local cdf = z.cdf
  local lo, hi = 0, z.n - 1
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if cdf[mid] < u then lo = mid + 1 else hi = mid end
  end
  return z.ids[lo]
end

M.N_TOPICS = 8
M.ZIPF_S = 1.1
-- lemma k of a class belongs to topic (hash of k) mod N_TOPICS
local function topic_of(class_salt, k)
  return math.floor(C.ol_rand_uniform(class_salt, k) * M.N_TOPICS)
end

local sampler_cache = {}
local function samplers(v)
  if sampler_cache[v.size] then return sampler_cache[v.size] end
  local S = {}
  for ci, class in ipairs { "noun", "verb", "adj", "adv" } do
    local n = v["n_" .. class]
    local per = {}
    for t = 0, M.N_TOPICS - 1 do per[t] = {} end
    for k = 0, n - 1 do local t = topic_of(977 + ci, k) table.insert(per[t], k) end
    S[class] = { all = zipf_table(n, M.ZIPF_S), topic = {} }
    for t = 0, M.N_TOPICS - 1 do
      if #per[t] == 0 then per[t] = { 0 } end
      S[class].topic[t] = zipf_table(n, M.ZIPF_S, per[t])
    end
  end
  S.name = zipf_table(v.n_name, 0.8)
  sampler_cache[v.size] = S
  return S
end

-- ---------------------------------------------------------------- generator
-- Generates documents into a growing int32 buffer. Returns the corpus table.
function M.generate(opts)
  opts = opts or {}
  local known = { seed = true, n_docs = true, n_tokens = true, vocab_size = true, topic_bias = true, first_doc = true }
  for k in pairs(opts) do
    if not known[k] then error("data.corpus: unknown option '" .. tostring(k) .. "'", 3) end
  end
  local seed = opts.seed or 1234
  local V = opts.vocab_size or 1024
  local n_docs, n_tokens = opts.n_docs, opts.n_tokens
  if (n_docs == nil) == (n_tokens == nil) then error("data.corpus: give exactly one of n_docs and n_tokens", 3) end
  local limit = n_docs or n_tokens
  if type(limit) ~= "number" or limit < 1 or limit ~= math.floor(limit) then
    error("data.corpus: " .. (n_docs and "n_docs" or "n_tokens") .. " must be a positive integer", 3)
  end
  if type(seed) ~= "number" or seed < 0 or seed ~= math.floor(seed) or seed >= 2 ^ 53 then
    error("data.corpus: seed must be a non-negative integer", 3)
  end
  local topic_bias = opts.topic_bias or 0.6
  local v = M.vocabulary(V)
  local S = samplers(v)
  local noun0, verb0, adj0, adv0, name0 = v.noun0, v.verb0, v.adj0, v.adv0, v.name0

  local cap = n_tokens and (n_tokens + 4096) or math.max(4096, n_docs * 200)
  local buf = ffi.new("int32_t[?]", cap)
  local n = 0
  local scap = math.floor(cap / 8) + 64
  local s_start, s_len, s_doc = ffi.new("int32_t[?]", scap), ffi.new("int32_t[?]", scap), ffi.new("int32_t[?]", scap)
  local ns = 0
  local dcap = 1024
  local d_start = ffi.new("int32_t[?]", dcap)

  -- random stream of the current document
  local rseed, rk = 0, 0
  local function u()
    rk = rk + 1
    return C.ol_rand_uniform(rseed, rk)
  end
  local function emit(id)
    if n == cap then
      local ncap = cap * 2
      local nb = ffi.new("int32_t[?]", ncap)
      ffi.copy(nb, buf, n * 4)
      buf, cap = nb, ncap
    end
    buf[n] = id
    n = n + 1
  end

  local topic, ents, n_ents = 0, { 0, 0, 0 }, 0
  -- content word of a class: from the document's topic with probability topic_bias
  local function content(class)
    local s = S[class]
    local z = u() < topic_bias and s.topic[topic] or s.all
    return zipf_draw(z, u())
  end
  local function noun(plural) return noun0 + 2 * content("noun") + (plural and 1 or 0) end
  local function verb(plural) return verb0 + 2 * content("verb") + (plural and 1 or 0) end

  -- DET [ADJ] NOUN for a given number
  local function det_noun(plural)
    local r = u()
    if plural then
      if r < 0.62 then emit(W.the) elseif r < 0.77 then emit(W.their) elseif r < 0.82 then emit(W.this) end  -- else bare plural
    else
      if r < 0.55 then emit(W.the) elseif r < 0.72 then emit(W.a) elseif r < 0.75 then emit(W.an)
      elseif r < 0.83 then emit(W.this) elseif r < 0.9 then emit(W.his) elseif r < 0.95 then emit(W.her)
      else emit(W.their) end
    end
    if u() < 0.35 then emit(adj0 + content("adj")) end
    emit(noun(plural))
  end
  local PREPS = { W["of"], W["of"], W["of"], W["in"], W["to"], W["for"], W["on"], W["with"], W["by"], W["at"], W["from"] }
  local function pp()
    emit(PREPS[math.floor(u() * #PREPS) + 1])
    det_noun(u() < 0.3)
  end
  -- a noun phrase; returns its number (true = plural) and whether it has a head noun
  local function np(subject)
    local r = u()
    if r < (subject and 0.25 or 0.08) then    -- one of the document's named entities
      emit(ents[math.floor(u() * n_ents) + 1])
      return false, false
    elseif r < (subject and 0.31 or 0.14) then
      emit(W.it)
      return false, false
    end
    local plural = u() < 0.35
    det_noun(plural)
    if u() < 0.3 then pp() end            -- the head's number is carried across the PP
    return plural, true
  end
  local function vp(plural)
    local r = u()
    if r < 0.2 then                       -- copula: is/are/was/were [not] ADJ
      local past = u() < 0.4
      if past then emit(plural and W.were or W.was) else emit(plural and W.are or W.is) end
      if u() < 0.1 then emit(W["not"]) end
      emit(adj0 + content("adj"))
    elseif r < 0.75 then                  -- transitive: VERB NP
      emit(verb(plural))
      np(false)
    else                                  -- intransitive: VERB [ADV]
      emit(verb(plural))
      if u() < 0.4 then emit(adv0 + content("adv")) end
    end
    if u() < 0.25 then pp() end
  end
  local function clause()
    local plural, has_noun = np(true)
    if has_noun and u() < 0.15 then                    -- relative clause: that/which VERB NP (agrees with the head)
      emit(u() < 0.6 and W.that or W.which)
      emit(verb(plural))
      np(false)
    end
    vp(plural)
  end
  local CONJ = { W["and"], W["and"], W["and"], W["but"], W["but"], W["or"] }
  local function sentence()
    local start = n
    if u() < 0.12 then                    -- fronted PP: "in the X ,"
      pp()
      emit(COMMA)
    end
    clause()
    while u() < 0.3 do                    -- coordination: ", and" clause
      emit(COMMA)
      emit(CONJ[math.floor(u() * #CONJ) + 1])
      clause()
    end
    emit(PERIOD)
    if ns == scap then
      local ncap = scap * 2
      local a, b, c = ffi.new("int32_t[?]", ncap), ffi.new("int32_t[?]", ncap), ffi.new("int32_t[?]", ncap)
      ffi.copy(a, s_start, ns * 4) ffi.copy(b, s_len, ns * 4) ffi.copy(c, s_doc, ns * 4)
      s_start, s_len, s_doc, scap = a, b, c, ncap
    end
    s_start[ns], s_len[ns] = start, n - start
    ns = ns + 1
  end

  -- first_doc: start at document first_doc of the stream (documents are independent, so
  -- concatenated slices of documents give the same stream: outlierlab.data.corpus_file)
  local first_doc = opts.first_doc or 0
  local d = first_doc
  while true do
    if n_docs and d >= first_doc + n_docs then break end
    if n_tokens and n >= n_tokens then break end
    rseed = math.floor(C.ol_rand_uniform(seed, d) * 2 ^ 53)
    rk = 0
    topic = math.floor(u() * M.N_TOPICS)
    n_ents = 2 + math.floor(u() * 2)
    for i = 1, n_ents do ents[i] = name0 + zipf_draw(S.name, u()) end
    if d - first_doc == dcap then
      local nd = ffi.new("int32_t[?]", dcap * 2)
      ffi.copy(nd, d_start, dcap * 4)
      d_start, dcap = nd, dcap * 2
    end
    d_start[d - first_doc] = n
    local ns0 = ns
    emit(BOS)
    local n_par = 1 + math.floor(u() * 4)
    for p = 1, n_par do
      if p > 1 then emit(NEWLINE) end
      local n_sent = 2 + math.floor(u() * 5)
      for _ = 1, n_sent do sentence() end
    end
    for i = ns0, ns - 1 do s_doc[i] = d - first_doc end
    d = d + 1
  end
  d = d - first_doc
  if n_tokens then
    n = n_tokens
    while ns > 0 and s_start[ns - 1] + s_len[ns - 1] > n do ns = ns - 1 end   -- drop cut sentences
    while d > 0 and d_start[d - 1] >= n do d = d - 1 end
  end

  local corpus = {
    tokens = buf, n = n, seed = seed, vocab_size = V,
    vocab = v.words, special = M.special,
    n_docs = d, doc_start = d_start,
    n_sentences = ns, sent_start = s_start, sent_len = s_len, sent_doc = s_doc,
    kind = "synthetic",
  }
  local cat = v.cat
  corpus.category = function(id) return cat[id] end
  corpus.categories = cat
  corpus.word_classes = { name = { v.name0, v.n_name }, noun = { v.noun0, 2 * v.n_noun }, verb = { v.verb0, 2 * v.n_verb },
                          adj = { v.adj0, v.n_adj }, adv = { v.adv0, v.n_adv } }
  return corpus
end

return M
