-- inspect — what the figures of single sequences need (QT Fig. 10–17, SO Fig. 1, 4, 7–10,
-- 23, 24, the blog's checks): the tensors of one held-out sequence copied out of the probes,
-- and the small computations the figures quote, each a plain function of Lua lists so that a
-- test can check it on a hand-made case (docs/reference/metrics.md, "Single-sequence figures").
--
--   local inspect = require "outlierlab.measure.inspect"
--   local cap = inspect.capture(ctx, m, corpus, spec, { points = {"attn_probs", "v"}, layers = {2, 3} })
--   local A = inspect.get(cap, "attn_probs", 3)        -- { data = flat row-major, shape = {NH, T, T} }
--   cap.ids, cap.cats, cap.labels                      -- the sequence's tokens, categories, labels
--
-- All indices are 0-based in the arguments that name positions, heads and channels.
local M = {}

-- ---------------------------------------------------------------- capture
-- Run the first held-out batch through the model with probes on `points` and copy sequence
-- `row` (default 0) of every reported tensor: a tensor (B, d1, d2, ...) becomes
-- { data = {d1·d2·… values}, shape = {d1, d2, …} }. o.layers = list of layers (nil: all);
-- o.heads = list of heads to keep of 4-D tensors (B, NH, T, X) (nil: all).
function M.capture(ctx, m, corpus, spec, o)
  local E = require "outlierlab.measure.batches"
  local probes = require "outlierlab.measure.probes"
  local row = o.row or 0
  local cap = { t = {}, ids = {}, cats = {}, labels = {} }
  local P = probes.new{ points = o.points, layers = o.layers }
  local seen_batch = false
  for _, pt in ipairs(o.points) do
    cap.t[pt] = {}
    P:attach(pt, function(t, layer, batch)
      if not seen_batch then
        seen_batch = true
        local T = batch.ids:size(1)
        for i = 0, T - 1 do
          local id = batch.ids.idata[row * T + i]
          cap.ids[i + 1] = id
          cap.cats[i + 1] = corpus.category(id)
          cap.labels[i + 1] = E.token_label(corpus, id)
        end
      end
      cap.t[pt][layer] = M.copy_row(t, row, t.ndim == 4 and o.heads or nil)
    end)
  end
  E.probe_batches(ctx, m, P, corpus, spec, 1)
  cap.T = #cap.ids
  return cap
end

-- sequence `row` of a tensor (B, ...) as a flat list; heads: keep only these of dim 1
function M.copy_row(t, row, heads)
  local shape = {}
  for d = 1, t.ndim - 1 do shape[d] = t:size(d) end
  local per = 1
  for _, s in ipairs(shape) do per = per * s end
  local data = {}
  local base = row * per
  if heads then
    local inner = per / shape[1]
    for k, h in ipairs(heads) do
      local off = base + h * inner
      for i = 0, inner - 1 do data[(k - 1) * inner + i + 1] = t.data[off + i] end
    end
    shape[1] = #heads
  else
    for i = 0, per - 1 do data[i + 1] = t.data[base + i] end
  end
  return { data = data, shape = shape }
end

function M.get(cap, point, layer)
  local x = cap.t[point] and cap.t[point][layer]
  if not x then
    error(string.format("inspect: the model reported no '%s' at layer %s", point, tostring(layer)), 2)
  end
  return x
end

-- the (n1 × n2) matrix at index i of the first dim of a 3-D capture, as a flat list
function M.plane(x, i)
  local n = x.shape[2] * x.shape[3]
  local out = {}
  for k = 1, n do out[k] = x.data[i * n + k] end
  return out
end

-- ---------------------------------------------------------------- attention maps
-- share of attention that queries of other categories put on keys of category cat:
-- mean over queries i with cats[i] ~= cat of Σ_{j: cats[j] = cat} A[i, j] (A flat T×T);
-- NaN when no query qualifies or no key is of that category
function M.category_share(A, T, cats, cat)
  local has = false
  for j = 1, T do if cats[j] == cat then has = true break end end
  if not has then return 0 / 0 end
  local s, n = 0, 0
  for i = 1, T do
    if cats[i] ~= cat then
      local r = 0
      for j = 1, T do if cats[j] == cat then r = r + A[(i - 1) * T + j] end end
      s, n = s + r, n + 1
    end
  end
  return n > 0 and s / n or 0 / 0
end

-- attention received by each key, averaged over the queries: Â_j / T (flat T×T)
function M.received(A, T)
  local out = {}
  for j = 1, T do
    local s = 0
    for i = 1, T do s = s + A[(i - 1) * T + j] end
    out[j] = s / T
  end
  return out
end

-- (T×T) · (T×HD) -> (T×HD), flat row-major
function M.matmul(A, V, n, k, p)
  local out = {}
  for i = 0, n - 1 do
    for c = 1, p do
      local s = 0
      for j = 0, k - 1 do s = s + A[i * k + j + 1] * V[j * p + c] end
      out[i * p + c] = s
    end
  end
  return out
end

-- L2 norm of every row of a flat (n × d) matrix
function M.row_norms(X, n, d)
  local out = {}
  for i = 0, n - 1 do
    local s = 0
    for c = 1, d do local v = X[i * d + c] s = s + v * v end
    out[i + 1] = math.sqrt(s)
  end
  return out
end

-- the value/key head that query head h reads under grouped-query attention (NKV <= NH)
function M.kv_head(h, NH, NKV) return math.floor(h * NKV / NH) end

-- The head that owns hidden dimension `dim` of the attention output: the head h whose slice
-- W_o[dim, h·HD:(h+1)·HD] has the largest L2 norm (QT §3). wo: a (C, NH·HD) weight tensor.
function M.owner_head(wo, dim, NH, HD)
  local best, head = -1, 0
  for h = 0, NH - 1 do
    local s = 0
    for j = 0, HD - 1 do local w = wo.data[dim * (NH * HD) + h * HD + j] s = s + w * w end
    if s > best then best, head = s, h end
  end
  return head, math.sqrt(best)
end

-- ---------------------------------------------------------------- the no-op's dynamic range (blog)
-- A query that puts share p on one key (the sink) and the rest on n − 1 keys needs a score gap
-- M with e^M / (e^M + n − 1) = p, i.e. M = log((n − 1)·p / (1 − p)) when the other n − 1
-- scores are equal. The measured gap is s_sink − mean_{j ≠ sink} s_j; by Jensen's inequality it
-- is >= the required M, with equality when the other scores are equal.
function M.required_gap(p, n)
  if n < 2 or not (p > 0 and p < 1) then return 0 / 0 end
  return math.log((n - 1) * p / (1 - p))
end
-- scores: list of the n visible scores of one query (1-based); sink: its 1-based index
function M.score_gap(scores, sink)
  local s, n = 0, 0
  for j, v in ipairs(scores) do if j ~= sink then s, n = s + v, n + 1 end end
  if n == 0 then return 0 / 0 end
  return scores[sink] - s / n
end
-- the softmax share of the sink from the scores (the check's p)
function M.softmax_share(scores, sink)
  local mx = -math.huge
  for _, v in ipairs(scores) do if v > mx then mx = v end end
  local z = 0
  for _, v in ipairs(scores) do z = z + math.exp(v - mx) end
  return math.exp(scores[sink] - mx) / z
end

-- ---------------------------------------------------------------- the hypersphere (blog)
-- ‖x̂‖ of one token after the norm without its gain: layernorm x̂ = (x − μ)/sqrt(var + eps),
-- rmsnorm x̂ = x/sqrt(mean x² + eps); both have ‖x̂‖ = √d·sqrt(v/(v + eps)) (v = var or mean x²)
function M.normalized(x, kind, eps)
  local d = #x
  local mu = 0
  if kind == "layernorm" then
    for i = 1, d do mu = mu + x[i] end
    mu = mu / d
  end
  local v = 0
  for i = 1, d do v = v + (x[i] - mu) ^ 2 end
  v = v / d
  local r = 1 / math.sqrt(v + (eps or 0))
  local out = {}
  for i = 1, d do out[i] = (x[i] - mu) * r end
  return out
end
function M.norm(x)
  local s = 0
  for i = 1, #x do s = s + x[i] * x[i] end
  return math.sqrt(s)
end

-- ---------------------------------------------------------------- subspaces (blog)
-- Eigen-decomposition of a symmetric n×n matrix (flat, row-major) by cyclic Jacobi rotations:
-- returns eigenvalues (descending) and the eigenvectors as columns of a flat n×n matrix.
function M.sym_eig(S, n)
  local a, v = {}, {}
  for i = 1, n * n do a[i] = S[i] end
  for i = 0, n - 1 do for j = 0, n - 1 do v[i * n + j + 1] = i == j and 1 or 0 end end
  local function A(i, j) return a[i * n + j + 1] end
  for _ = 1, 60 do
    local off = 0
    for i = 0, n - 1 do for j = i + 1, n - 1 do off = off + A(i, j) ^ 2 end end
    if off < 1e-22 then break end
    for p = 0, n - 2 do
      for q = p + 1, n - 1 do
        local apq = A(p, q)
        if math.abs(apq) > 1e-300 then
          local theta = (A(q, q) - A(p, p)) / (2 * apq)
          local t = (theta >= 0 and 1 or -1) / (math.abs(theta) + math.sqrt(theta * theta + 1))
          local c = 1 / math.sqrt(t * t + 1)
          local s = t * c
          for k = 0, n - 1 do   -- columns p, q of a
            local akp, akq = a[k * n + p + 1], a[k * n + q + 1]
            a[k * n + p + 1], a[k * n + q + 1] = c * akp - s * akq, s * akp + c * akq
          end
          for k = 0, n - 1 do   -- rows p, q of a
            local apk, aqk = a[p * n + k + 1], a[q * n + k + 1]
            a[p * n + k + 1], a[q * n + k + 1] = c * apk - s * aqk, s * apk + c * aqk
          end
          for k = 0, n - 1 do
            local vkp, vkq = v[k * n + p + 1], v[k * n + q + 1]
            v[k * n + p + 1], v[k * n + q + 1] = c * vkp - s * vkq, s * vkp + c * vkq
          end
        end
      end
    end
  end
  local idx = {}
  for i = 1, n do idx[i] = i end
  table.sort(idx, function(x, y) return A(x - 1, x - 1) > A(y - 1, y - 1) end)
  local vals, vecs = {}, {}
  for k, i in ipairs(idx) do
    vals[k] = A(i - 1, i - 1)
    for r = 0, n - 1 do vecs[r * n + k] = v[r * n + i] end
  end
  return vals, vecs
end

-- The top-r right singular vectors of W (m × d, flat; m small, e.g. a head's d_head rows):
-- from the eigenvectors u of W·Wᵀ, v = Wᵀu/σ. Returns a list of r vectors (each d long) and the
-- singular values.
function M.top_right_singular(W, m, d, r)
  local G = {}
  for i = 0, m - 1 do
    for j = 0, m - 1 do
      local s = 0
      for c = 1, d do s = s + W[i * d + c] * W[j * d + c] end
      G[i * m + j + 1] = s
    end
  end
  local vals, U = M.sym_eig(G, m)
  local vecs, sig = {}, {}
  for k = 1, math.min(r, m) do
    local sk = math.sqrt(math.max(vals[k], 0))
    sig[k] = sk
    local v = {}
    for c = 1, d do
      local s = 0
      for i = 0, m - 1 do s = s + W[i * d + c] * U[i * m + k] end
      v[c] = sk > 0 and s / sk or 0
    end
    vecs[k] = v
  end
  return vecs, sig
end

-- principal angles (degrees, ascending) between span(A) and span(B), lists of r orthonormal
-- vectors: the cosines are the singular values of AᵀB
function M.principal_angles(Av, Bv)
  local r = #Av
  local Mx = {}
  for i = 1, r do
    for j = 1, #Bv do
      local s = 0
      for c = 1, #Av[i] do s = s + Av[i][c] * Bv[j][c] end
      Mx[(i - 1) * #Bv + j] = s
    end
  end
  local MtM = {}
  local nb = #Bv
  for i = 1, r do
    for j = 1, r do
      local s = 0
      for k = 1, nb do s = s + Mx[(i - 1) * nb + k] * Mx[(j - 1) * nb + k] end
      MtM[(i - 1) * r + j] = s
    end
  end
  local vals = M.sym_eig(MtM, r)
  local out = {}
  for k = 1, r do
    local c = math.sqrt(math.max(0, math.min(1, vals[k])))
    out[k] = math.deg(math.acos(c))
  end
  return out
end

-- The chance level of principal_angles: the smallest principal angle (degrees) between two
-- uniformly random r-dimensional subspaces of R^d, for n independent pairs (each basis drawn
-- Gaussian and orthonormalised). The generator is the analysis's own (xorshift32 seeded by
-- seed, Box-Muller), so the list is the same on every machine. Checks with a closed form:
-- lines in R^2 are uniform on [0°, 90°]; lines in R^3 have a mean angle of 1 rad = 57.30°.
function M.chance_angles(d, r, n, seed)
  assert(r >= 1 and r <= d, "inspect.chance_angles: need 1 <= r <= d")
  local bit = require "bit"
  local st = bit.tobit(seed or 1)
  if st == 0 then st = 1 end
  local function u01()
    st = bit.bxor(st, bit.lshift(st, 13)); st = bit.bxor(st, bit.rshift(st, 17)); st = bit.bxor(st, bit.lshift(st, 5))
    return ((st % 4294967296) + 0.5) / 4294967296
  end
  local function gauss() return math.sqrt(-2 * math.log(u01())) * math.cos(2 * math.pi * u01()) end
  local function basis()
    local vs = {}
    for k = 1, r do
      local v = {}
      for c = 1, d do v[c] = gauss() end
      for j = 1, k - 1 do
        local dot = 0
        for c = 1, d do dot = dot + v[c] * vs[j][c] end
        for c = 1, d do v[c] = v[c] - dot * vs[j][c] end
      end
      local nv = M.norm(v)
      for c = 1, d do v[c] = v[c] / nv end
      vs[k] = v
    end
    return vs
  end
  local out = {}
  for i = 1, n do out[i] = M.principal_angles(basis(), basis())[1] end
  return out
end

-- rows [h·HD, (h+1)·HD) of a (NH·HD × C) projection weight tensor as a flat HD × C list
function M.head_rows(w, h, HD)
  local C = w:size(1)
  local out = {}
  for i = 0, HD - 1 do
    for c = 0, C - 1 do out[i * C + c + 1] = w.data[(h * HD + i) * C + c] end
  end
  return out
end

-- ---------------------------------------------------------------- weight outlier -> activation outlier (SO Fig. 7)
-- The FFN output of one token is out_j = Σ_c x_c·W[j, c] (W_down, C × F flat, no bias); the part
-- one input channel c brings to output j is x_c·W[j, c]. Returns that part and its share of out_j.
function M.channel_contribution(x, W, F, c, j)
  local out = 0
  for k = 1, F do out = out + x[k] * W[(j - 1) * F + k] end
  local part = x[c] * W[(j - 1) * F + c]
  return part, part / out, out
end

-- ---------------------------------------------------------------- Q/K alignment (SO Fig. 8)
-- Per head dimension d, the mean over queries i of q_i[d]·k_sink[d]/√HD (the sink's score split
-- by dimension), and the share of the total that the n largest dimensions carry.
-- q: flat T × HD (one head), ksink: HD values, queries: list of 1-based query rows to average.
function M.score_by_dim(q, ksink, HD, queries)
  local out = {}
  for d = 1, HD do out[d] = 0 end
  for _, i in ipairs(queries) do
    for d = 1, HD do out[d] = out[d] + q[(i - 1) * HD + d] * ksink[d] / math.sqrt(HD) end
  end
  for d = 1, HD do out[d] = out[d] / math.max(#queries, 1) end
  return out
end
function M.top_share(xs, n)
  local idx = {}
  for i = 1, #xs do idx[i] = i end
  table.sort(idx, function(a, b) return xs[a] > xs[b] end)
  local tot, top, dims = 0, 0, {}
  for _, v in ipairs(xs) do tot = tot + v end
  for k = 1, math.min(n, #idx) do top = top + xs[idx[k]] dims[k] = idx[k] - 1 end
  return tot ~= 0 and top / tot or 0 / 0, dims
end

-- ---------------------------------------------------------------- small statistics
function M.median(xs)
  local s = {}
  for _, v in ipairs(xs) do if v == v then s[#s + 1] = v end end
  table.sort(s)
  local n = #s
  if n == 0 then return 0 / 0 end
  return n % 2 == 1 and s[(n + 1) / 2] or 0.5 * (s[n / 2] + s[n / 2 + 1])
end
function M.mean(xs)
  local s, n = 0, 0
  for _, v in ipairs(xs) do if v == v then s, n = s + v, n + 1 end end
  return n > 0 and s / n or 0 / 0
end
-- argmax of |x| over a flat list: index (1-based) and value
function M.argmax_abs(xs)
  local best, bi = -1, 1
  for i, v in ipairs(xs) do if math.abs(v) > best then best, bi = math.abs(v), i end end
  return bi, xs[bi]
end
-- |x| elementwise
function M.abs(xs)
  local out = {}
  for i, v in ipairs(xs) do out[i] = math.abs(v) end
  return out
end

return M
