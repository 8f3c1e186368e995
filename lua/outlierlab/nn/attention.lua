-- attention — the attention variants of the papers, chosen by name in a model config:
--   attention = { kind = "clipped_softmax", gamma = -0.025 }
--
-- Interface used by every model (lua/outlierlab/models/*):
--   local A = attention.new(ctx, spec, { d_model =, n_head =, name = "h3.attn" [, reference = true] })
--       creates the variant's own parameters (gates, sink key/value, scaling weights …) as
--       engine parameters named under dims.name (e.g. "h3.attn.gate.weight").
--   local out = A:forward(q, k, v, x, { causal = true|false, pad_mask = ids_mask or nil,
--                                        probe = nil | function(name, tensor),
--                                        dropout_seed = nil | seed })
--       q, k, v: (B, NH, T, HD); x: the attention block's input (B, T, C) (the tensor fed to
--       the Q/K/V projections); pad_mask: int32 (B, T), 1 = real token, 0 = padding (keys hidden).
--       Returns the per-head output (B, NH, T, HD) before the output projection.
--       With probe set, the variant reports "attn_probs" (B, NH, T, Tk) — the weights that
--       multiply V — and, where it has them, "gates" (B, NH, T), "scale" (B, NH, T) and
--       "sink_probs" (B, NH, T) (the weight of the learned sink / context-aware bias value).
--       dropout_seed (training only; models pass a function of (model seed, step, layer)):
--       with the spec's dropout p > 0 the weights that multiply V are dropped with that seed
--       (attention-probability dropout); without it (evaluation) nothing is dropped.
--   A:parameters() -> list of the variant's parameters.
--
-- Built-in kinds (formulas: docs/reference/attention.md, engine/attention.c):
--   softmax, clipped_softmax, softmax1, sigmoid (and its forms sigmoid_logn, sigmoid_nobias),
--   fixed_bias, ca_bias, attn_bias, sink_logit, softpick  — one fused C op (ol_attention) each;
--   gated, ca_scale and gated_sdpa (headwise) — fused softmax attention times a per-token,
--   per-head factor built from engine ops (ol_head_scale applies it); gated_sdpa elementwise —
--   fused softmax attention times σ(x·Wᵀ) per token and channel (engine ops).
-- Every built-in also has a reference implementation from plain engine ops (the slow,
-- obvious version that materialises the T×T probabilities): M.reference[kind], used by the
-- tests and by dims.reference = true (the memory benchmark's baseline).
--
-- Every built-in takes dropout = p (default 0). New variants:
--   attention.register(name, { params = {key = default, ...}, new = fn }) —
-- see examples/attention_example.lua and docs/reference/attention.md.
local ol = require "outlierlab"
local bit = require "bit"
local ffi = ol.ffi
local C = ol.C
local P = ol.check_ptr
local M = { registry = {}, reference = {} }

-- register(name, { params = {key = default, ...}, new = function(ctx, spec, dims) -> object })
-- A parameter whose default is `false` is optional (unset unless the spec gives it).
function M.register(name, def)
  if type(name) ~= "string" or name == "" then error("attention.register: name must be a non-empty string", 2) end
  if type(def) ~= "table" or type(def.new) ~= "function" then
    error("attention.register '" .. name .. "': def must be a table with a new(ctx, spec, dims) function", 2)
  end
  def.name = name
  M.registry[name] = def
  return def
end

function M.kinds()
  local out = {}
  for k in pairs(M.registry) do out[#out + 1] = k end
  table.sort(out)
  return out
end

-- Validate a spec against its kind: unknown kind or parameter -> error listing the valid ones.
function M.check_spec(spec)
  if type(spec) == "string" then spec = { kind = spec } end
  spec = spec or { kind = "softmax" }
  local kind = spec.kind or "softmax"
  local def = M.registry[kind]
  if not def then
    error(string.format("attention: unknown kind '%s'; valid kinds: %s", tostring(kind), table.concat(M.kinds(), ", ")), 3)
  end
  local full = { kind = kind }
  for k, v in pairs(def.params or {}) do full[k] = v end
  for k, v in pairs(spec) do
    if k ~= "kind" then
      if (def.params or {})[k] == nil then
        local valid = {}
        for p in pairs(def.params or {}) do valid[#valid + 1] = p end
        table.sort(valid)
        error(string.format("attention: kind '%s' takes no parameter '%s'; valid: %s", kind, k,
          #valid > 0 and table.concat(valid, ", ") or "(none)"), 3)
      end
      full[k] = v
    end
  end
  if def.validate then
    local ok, err = pcall(def.validate, full)
    if not ok then error("attention: kind '" .. kind .. "': " .. tostring(err):gsub("^.-:%d+: ", ""), 3) end
  end
  return full, def
end

function M.new(ctx, spec, dims)
  local full, def = M.check_spec(spec)
  dims = dims or {}
  if type(dims.d_model) ~= "number" or type(dims.n_head) ~= "number" or dims.d_model % dims.n_head ~= 0 then
    error(string.format("attention.new: dims need d_model and n_head with d_model a multiple of n_head (got %s, %s)",
      tostring(dims.d_model), tostring(dims.n_head)), 2)
  end
  return def.new(ctx, full, dims)
end

-- ---------------------------------------------------------------- plain-op helpers
-- scores s = q·kᵀ/√HD (B, NH, T, Tk), with padding keys pushed to -1e30 when pad_mask is given.
-- Masks are added with the activation hook suspended: they are not activations, and a
-- quantiser (outlierlab.compress.evaluate, W8A8) must see the scores, not the -1e30 of masked keys.
local function add_mask(s, bias) return ol.without_hook(function() return s + bias end) end
M.add_mask = add_mask
function M.scores(q, k, pad_mask)
  local hd = q:size(-1)
  local s = q:matmul(k, false, true):scale(1 / math.sqrt(hd))
  if pad_mask then s = add_mask(s, M.pad_bias(s, pad_mask)) end
  return s
end

-- additive (B, NH, Tq, Tk) bias: 0 for real keys, -1e30 for padding
function M.pad_bias(s, pad_mask)
  local B, Tq, Tk, NH = s:size(0), s:size(2), s:size(3), s:size(1)
  local bias = P(C.ol_tensor_new(s.ctx, C.OL_F32, 4, ffi.new("int64_t[4]", B, NH, Tq, Tk), "pad_bias"))
  for b = 0, B - 1 do
    for h = 0, NH - 1 do
      for i = 0, Tq - 1 do
        local base = ((b * NH + h) * Tq + i) * Tk
        for j = 0, Tk - 1 do bias.data[base + j] = pad_mask.idata[b * Tk + j] ~= 0 and 0 or -1e30 end
      end
    end
  end
  return bias
end

-- additive (Tq, Tk) causal bias: -1e30 where j > i + Tk - Tq (broadcasts over B, NH)
function M.causal_bias(s)
  local Tq, Tk = s:size(-2), s:size(-1)
  local bias = P(C.ol_tensor_new(s.ctx, C.OL_F32, 2, ffi.new("int64_t[2]", Tq, Tk), "causal_bias"))
  for i = 0, Tq - 1 do
    for j = 0, Tk - 1 do bias.data[i * Tk + j] = j > i + Tk - Tq and -1e30 or 0 end
  end
  return bias
end

-- masked scores from plain ops: s + causal bias + pad bias
function M.masked_scores(q, k, opts)
  local s = M.scores(q, k, opts.pad_mask)
  if opts.causal then s = add_mask(s, M.causal_bias(s)) end
  return s
end

-- q (B,NH,T,HD), kp (NH,HD) -> s′ = q·k′/√HD as (B,NH,T,1), from plain ops
function M.sink_scores(q, kp)
  local B, NH, T, HD = q:size(0), q:size(1), q:size(2), q:size(3)
  local s = q:transpose(0, 1):view({ NH, B * T, HD }):matmul(kp:view({ NH, HD, 1 }))
  return s:view({ NH, B, T, 1 }):transpose(0, 1):scale(1 / math.sqrt(HD))
end

-- p (B,NH,T,1), vp (NH,HD) -> p·v′ as (B,NH,T,HD), from plain ops
function M.sink_values(p, vp)
  local B, NH, T, HD = p:size(0), p:size(1), p:size(2), vp:size(1)
  local o = p:transpose(0, 1):view({ NH, B * T, 1 }):matmul(vp:view({ NH, 1, HD }))
  return o:view({ NH, B, T, HD }):transpose(0, 1)
end

-- y (B,NH,T,HD) times g (B,T,NH) per token and head, fused (engine op)
function M.head_scale(y, g) return P(C.ol_head_scale(y, g)) end

-- the same from plain ops: a batch of 1×1 by 1×HD products
function M.head_scale_reference(y, g)
  local B, NH, T, HD = y:size(0), y:size(1), y:size(2), y:size(3)
  local gg = g:transpose(1, 2):view({ B * NH * T, 1, 1 })
  return gg:matmul(y:view({ B * NH * T, 1, HD })):view({ B, NH, T, HD })
end

local function zeros(ctx_raw, shape)
  local n, s = ol.to_shape(shape)
  local t = P(C.ol_tensor_new(ctx_raw, C.OL_F32, n, s, "zeros"))
  return t:fill_(0)
end

-- ---------------------------------------------------------------- reference variants (plain ops)
-- Each takes (A, q, k, v, opts) with A the attention object (A.p holds its parameters, A.spec
-- its spec) and returns (out, probs, sink_probs): the slow, obvious form of each formula.
-- probs and sink_probs are the weights before dropout; A:drop / A:drop_sink apply the
-- attention-probability dropout (the engine's dropout op on the (B,NH,T,Tk) weights and on
-- the (B,NH,T,1) sink weights) to what multiplies V.
local R = M.reference

function R.softmax(A, q, k, v, opts)
  local p = M.masked_scores(q, k, opts):softmax()
  return A:drop(p, opts):matmul(v), p
end

-- clip((ζ−γ)·softmax(s) + γ, 0, 1)·V with clip(c, 0, 1) = relu(c) − relu(c − 1)
function R.clipped_softmax(A, q, k, v, opts)
  local gamma, zeta = A:clip_params(k:size(2))
  local c = M.masked_scores(q, k, opts):softmax():affine(zeta - gamma, gamma)
  local w = c:relu() - (c - 1):relu()
  return A:drop(w, opts):matmul(v), w
end

-- e^{s_i}/(1 + Σ_j e^{s_j}): a softmax over [s, 0] without its last column
function R.softmax1(A, q, k, v, opts)
  local s = M.masked_scores(q, k, opts)
  local z = zeros(s.ctx, { s:size(0), s:size(1), s:size(2), 1 })
  local p = ol.cat({ s, z }, 3):softmax():narrow(3, 0, s:size(3))
  return A:drop(p, opts):matmul(v), p
end

-- σ(s + b + b_h): the learned per-head offset b_h (NH) is added with heads moved to the last dim
function R.sigmoid(A, q, k, v, opts)
  local s = M.masked_scores(q, k, opts) + A:sigmoid_bias(k:size(2))
  if A.p.sbias then s = (s:transpose(1, 3) + A.p.sbias):transpose(1, 3) end
  local p = s:sigmoid()
  return A:drop(p, opts):matmul(v), p
end

-- softmax over [s, s_h] without its last column: s_h (NH) enters with heads moved to the last dim
function R.sink_logit(A, q, k, v, opts)
  local s = M.masked_scores(q, k, opts)
  local z = zeros(s.ctx, { s:size(0), s:size(1), s:size(2), 1 })
  z = (z:transpose(1, 3) + A.p.sink):transpose(1, 3)
  local e = ol.cat({ s, z }, 3):softmax()
  local p = e:narrow(3, 0, s:size(3))
  return A:drop(p, opts):matmul(v), p, e:narrow(3, s:size(3), 1)
end

-- ReLU(e^{s−m} − e^{−m}) / (Σ|e^{s−m} − e^{−m}| + ε), m = max(0, max_visible s) per row, taken
-- as a constant (the official code's stable form; the engine treats m the same way). m and
-- c = e^{−m} are constants built here entry by entry; masked entries get e = 0 and c = 0.
function R.softpick(A, q, k, v, opts)
  local s = M.masked_scores(q, k, opts)
  local B, NH, Tq, Tk = s:size(0), s:size(1), s:size(2), s:size(3)
  local Mt = zeros(s.ctx, { B, NH, Tq, Tk })
  local Ct = zeros(s.ctx, { B, NH, Tq, Tk })
  for r = 0, B * NH * Tq - 1 do
    local m = 0
    for j = 0, Tk - 1 do
      local x = s.data[r * Tk + j]
      if x > -1e29 and x > m then m = x end
    end
    for j = 0, Tk - 1 do
      Mt.data[r * Tk + j] = m
      Ct.data[r * Tk + j] = s.data[r * Tk + j] > -1e29 and math.exp(-m) or 0
    end
  end
  local u = (s - Mt):exp() - Ct
  local inv = 1 / (u:abs():sum() + A.spec.eps)                           -- (B,NH,Tq)
  local p = inv:view({ B * NH * Tq, 1, 1 }):matmul(u:relu():view({ B * NH * Tq, 1, Tk })):view({ B, NH, Tq, Tk })
  return A:drop(p, opts):matmul(v), p
end

function R.fixed_bias(A, q, k, v, opts)
  local p = M.masked_scores(q, k, opts):softmax()
  return (A:drop(p, opts):matmul(v):transpose(1, 2) + A.p.v):transpose(1, 2), p
end

function R.ca_bias(A, q, k, v, opts)
  local s = M.masked_scores(q, k, opts)
  local p = s:softmax()
  local pp = ol.cat({ s, M.sink_scores(q, A.p.k) }, 3):softmax():narrow(3, s:size(3), 1)
  return A:drop(p, opts):matmul(v) + M.sink_values(A:drop_sink(pp, opts), A.p.v), p, pp
end

function R.attn_bias(A, q, k, v, opts)
  local s = M.masked_scores(q, k, opts)
  local e = ol.cat({ s, M.sink_scores(q, A.p.k) }, 3):softmax()
  local p, pp = e:narrow(3, 0, s:size(3)), e:narrow(3, s:size(3), 1)
  return A:drop(p, opts):matmul(v) + M.sink_values(A:drop_sink(pp, opts), A.p.v), p, pp
end

-- ---------------------------------------------------------------- built-in variants
local KIND = { softmax = C.OL_ATTN_SOFTMAX, clipped_softmax = C.OL_ATTN_CLIPPED, softmax1 = C.OL_ATTN_SOFTMAX1,
               sigmoid = C.OL_ATTN_SIGMOID, fixed_bias = C.OL_ATTN_FIXED_BIAS, ca_bias = C.OL_ATTN_CA_BIAS,
               attn_bias = C.OL_ATTN_ATTN_BIAS, sink_logit = C.OL_ATTN_SINK_LOGIT, softpick = C.OL_ATTN_SOFTPICK }

local Attn = {}
Attn.__index = Attn
M.Attn = Attn

function Attn:parameters() return self.plist end

-- (γ, ζ) for key length T: with alpha, γ = −α/max_len when max_len is set (QT's code: the
-- configured maximum sequence length), else γ = −α/T (QT §4.1, OPT), and ζ = 1; otherwise
-- the spec's γ and ζ
function Attn:clip_params(T)
  local s = self.spec
  if s.alpha then return -s.alpha / (s.max_len or T), 1 end
  return s.gamma or -0.025, s.zeta
end
-- b = −log T unless the spec sets bias (SO App. D.1); learn_bias adds a learned b_h (A.p.sbias).
-- sigmoid_logn: b = −log n, n the configured context length (Ramapuram et al.); sigmoid_nobias:
-- b = 0 (Gu et al.'s sigmoid attention without normalisation)
function Attn:sigmoid_bias(T)
  if self.spec.bias then return self.spec.bias end
  if self.kind == "sigmoid_nobias" then return 0 end
  if self.kind == "sigmoid_logn" then return -math.log(self.spec.n or self.dims.block_size or T) end
  return -math.log(T)
end

-- attention-probability dropout: p when training (opts.dropout_seed given) and the spec asks
-- for it, else 0
function Attn:dropout_p(opts)
  local p = self.spec.dropout or 0
  if p > 0 and opts.dropout_seed then return p end
  return 0
end
local SINK_SALT = 0x9E3779B97F4A7C15ULL   -- engine/attention.c: the sink weight's stream is seed ^ SINK_SALT
function Attn:drop(w, opts)
  local p = self:dropout_p(opts)
  return p > 0 and w:dropout(p, opts.dropout_seed) or w
end
function Attn:drop_sink(w, opts)
  local p = self:dropout_p(opts)
  return p > 0 and w:dropout(p, bit.bxor(ffi.cast("uint64_t", opts.dropout_seed), SINK_SALT)) or w
end

function Attn:new_param(suffix, shape, init, value)
  local p = self.ctx:param(self.name .. "." .. suffix, shape)
  if init == "normal" then p:normal_(0, value, self.ctx:next_seed())
  elseif init == "fill" then p:fill_(value) end
  self.plist[#self.plist + 1] = p
  return p
end

-- a probe is set and wants the point (opts.probe_wants(name), when given, can decline: the
-- probabilities are a second B·NH·T² pass)
local function wanted(opts, name)
  return opts.probe ~= nil and (opts.probe_wants == nil or opts.probe_wants(name))
end

-- the fused core: out (B,NH,T,HD) and, when probing, the probabilities
function Attn:core(q, k, v, opts)
  local cfg, T = self.cfg, k:size(2)
  cfg.causal = opts.causal and 1 or 0
  if self.base == "clipped_softmax" then cfg.gamma, cfg.zeta = self:clip_params(T) end
  if self.base == "sigmoid" then cfg.sigmoid_bias = self:sigmoid_bias(T) end
  local p = self:dropout_p(opts)
  cfg.dropout, cfg.dropout_seed = p, p > 0 and opts.dropout_seed or 0
  local kp, vp = self.p.k, self.p.v
  local out = P(C.ol_attention(q, k, v, kp, vp, opts.pad_mask, cfg))
  if wanted(opts, "attn_probs") or wanted(opts, "sink_probs") then
    local pr = P(C.ol_attention_probs(q, k, kp, opts.pad_mask, cfg, self.sinkbuf))
    opts.probe("attn_probs", pr)
    if self.sinkbuf[0] ~= nil then opts.probe("sink_probs", self.sinkbuf[0]) end
  end
  return out
end

function Attn:forward(q, k, v, x, opts)
  opts = opts or {}
  local out
  if self.use_reference then
    local probs, sink
    out, probs, sink = R[self.base](self, q, k, v, opts)
    if opts.probe then
      opts.probe("attn_probs", probs)
      if sink then opts.probe("sink_probs", sink:view({ sink:size(0), sink:size(1), sink:size(2) })) end
    end
  else
    out = self:core(q, k, v, opts)
  end
  if self.elementwise then   -- gated_sdpa elementwise: out ⊙ g, g (B,NH,T,HD)
    if not x then error("attention '" .. self.kind .. "': forward needs x, the attention block's input (B,T,C)", 2) end
    local g = self:elementwise(x)
    if wanted(opts, "gates") then opts.probe("gates", g:mean()) end
    return out * g
  end
  if self.factor then
    if not x then error("attention '" .. self.kind .. "': forward needs x, the attention block's input (B,T,C)", 2) end
    local g = self:factor(x)                 -- (B,T,NH)
    if wanted(opts, self.factor_name) then opts.probe(self.factor_name, g:transpose(1, 2)) end
    if self.factor_scale ~= 1 then g = g:scale(self.factor_scale) end
    out = self.use_reference and M.head_scale_reference(out, g) or M.head_scale(out, g)
  end
  return out
end

local function new_attn(ctx, spec, dims, base)
  local self = setmetatable({ ctx = ctx, spec = spec, kind = spec.kind, base = base, dims = dims,
                              name = dims.name or "attn", NH = dims.n_head, C = dims.d_model,
                              HD = dims.d_model / dims.n_head, use_reference = dims.reference and true or false,
                              p = {}, plist = {}, factor_scale = 1 }, Attn)
  self.cfg = ffi.new("ol_attn_cfg")
  self.cfg.kind = KIND[base]
  self.cfg.gamma, self.cfg.zeta, self.cfg.sigmoid_bias = 0, 1, 0
  self.cfg.softpick_eps = spec.eps or 0
  self.sinkbuf = ffi.new("ol_tensor *[1]")
  return self
end

local function num(v, what, cond, msg)
  if type(v) ~= "number" or v ~= v or not cond(v) then error(what .. " must be " .. msg .. ", got " .. tostring(v), 0) end
end

-- every built-in takes dropout = p: attention-probability dropout while training
local function dropout_ok(s) num(s.dropout, "dropout", function(x) return x >= 0 and x < 1 end, "in [0, 1)") end

local function builtin(name, def)
  def.params = def.params or {}
  def.params.dropout = 0
  local validate = def.validate
  def.validate = function(s)
    dropout_ok(s)
    if validate then validate(s) end
  end
  def.new = def.new or function(ctx, spec, dims)
    local self = new_attn(ctx, spec, dims, name)
    if def.init then def.init(self, spec) end
    return self
  end
  M.register(name, def)
end

builtin("softmax", { params = {} })

builtin("clipped_softmax", {
  params = { gamma = false, zeta = 1, alpha = false, max_len = false },
  validate = function(s)
    if s.gamma and s.alpha then error("give gamma or alpha (gamma = -alpha/T), not both", 0) end
    if s.gamma then num(s.gamma, "gamma", function(x) return x <= 0 end, "<= 0") end
    num(s.zeta, "zeta", function(x) return x >= 1 end, ">= 1")
    if s.alpha then num(s.alpha, "alpha", function(x) return x >= 0 end, ">= 0") end
    if s.max_len then
      if not s.alpha then error("max_len sets gamma = -alpha/max_len: give alpha with it", 0) end
      num(s.max_len, "max_len", function(x) return x >= 1 and x == math.floor(x) end, "a positive integer")
    end
  end,
})

builtin("softmax1", { params = {} })

builtin("sigmoid", {
  params = { bias = false, learn_bias = false },
  validate = function(s)
    if s.bias then num(s.bias, "bias", function(x) return x > -math.huge and x < math.huge end, "finite") end
    if type(s.learn_bias) ~= "boolean" then error("learn_bias must be true or false, got " .. tostring(s.learn_bias), 0) end
  end,
  -- learn_bias: σ(s + b + b_h) with b_h (NH) learned, starting at 0 (so at init the variant
  -- equals the fixed-bias one)
  init = function(self, s)
    if s.learn_bias then
      self.p.sbias = self:new_param("sigmoid_bias", { self.NH }, "fill", 0)
      self.cfg.sigmoid_bias_h = self.p.sbias
    end
  end,
})

-- the two other forms of sigmoid attention: the fused sigmoid kind with its bias chosen
-- (Attn:sigmoid_bias). sigmoid_logn: b = −log n with n the configured context length (the
-- model's block_size, or `n`), constant whatever the current length (Ramapuram et al. 2025);
-- sigmoid_nobias: σ(s), no bias (Gu et al. 2025)
local function sigmoid_form(name, params, validate)
  builtin(name, {
    params = params,
    validate = validate,
    new = function(ctx, spec, dims) return new_attn(ctx, spec, dims, "sigmoid") end,
  })
end
sigmoid_form("sigmoid_logn", { n = false }, function(s)
  if s.n then num(s.n, "n", function(x) return x >= 1 end, ">= 1") end
end)
sigmoid_form("sigmoid_nobias", {})

-- learned sink logit per head (gpt-oss): softmax over [s, s_h], the sink column dropped;
-- s_h (NH) starts at `init` (0: softmax1 at init)
builtin("sink_logit", {
  params = { init = 0 },
  validate = function(s) num(s.init, "init", function(x) return x > -math.huge and x < math.huge end, "finite") end,
  init = function(self, s)
    self.p.sink = self:new_param("sink_logit", { self.NH }, "fill", s.init)
    self.cfg.sink_logit = self.p.sink
  end,
})

-- softpick (Zuhri, Fuadi, Aji 2025): ReLU(e^s − 1)/(Σ|e^s − 1| + eps), eps = 1e-8 as in their code
builtin("softpick", {
  params = { eps = 1e-8 },
  validate = function(s) num(s.eps, "eps", function(x) return x >= 0 and x < math.huge end, "finite and >= 0") end,
})

builtin("fixed_bias", {
  params = {},
  init = function(self) self.p.v = self:new_param("v_bias", { self.NH, self.HD }, "fill", 0) end,
})

local function std_ok(s) num(s.init_std, "init_std", function(x) return x >= 0 end, ">= 0") end

builtin("ca_bias", {
  params = { init_std = 0.02 },
  validate = std_ok,
  init = function(self, s)
    self.p.k = self:new_param("ca_bias.k", { self.NH, self.HD }, "normal", s.init_std)
    self.p.v = self:new_param("ca_bias.v", { self.NH, self.HD }, "normal", s.init_std)
  end,
})

builtin("attn_bias", {
  params = { init_std = 0.02 },
  validate = std_ok,
  init = function(self, s)
    self.p.k = self:new_param("sink.k", { self.NH, self.HD }, "normal", s.init_std)
    self.p.v = self:new_param("sink.v", { self.NH, self.HD }, "normal", s.init_std)
  end,
})

-- ---------------------------------------------------------------- gated attention (QT §4.2)
-- out_h = sigmoid(G_h(x))·softmax(s_h)·V_h per token; gate logits (B,T,NH) from x (B,T,C):
--   linear            head h reads x[..., h·HD:(h+1)·HD]: Σ_c x_c·W[h,c] + b[h]      W (NH,HD)
--   mlp               per head Linear(HD→n_hid) → ReLU → Linear(n_hid→1)   W1 (NH,n_hid,HD) …
--   all_heads_linear  x·Wᵀ + b over the whole x                              W (NH,C)
-- The last bias starts at logit(π_init) so every gate starts open with probability π_init.
local gate_logits = {
  linear = function(self, x)
    local B, T = x:size(0), x:size(1)
    return (x:view({ B, T, self.NH, self.HD }) * self.p.gw):sum() + self.p.gb
  end,
  mlp = function(self, x)
    local B, T = x:size(0), x:size(1)
    local xh = x:view({ B * T, self.NH, self.HD }):transpose(0, 1)            -- (NH, BT, HD)
    local h1 = xh:matmul(self.p.w1, false, true):transpose(0, 1)              -- (BT, NH, n_hid)
    h1 = (h1 + self.p.b1):relu()
    return ((h1 * self.p.w2):sum() + self.p.gb):view({ B, T, self.NH })
  end,
  all_heads_linear = function(self, x) return x:linear(self.p.gw, self.p.gb) end,
}

builtin("gated", {
  params = { gate = "linear", pi_init = 0.5, n_hid = 4, init_std = 0.02, gate_scale = 1 },
  validate = function(s)
    if not gate_logits[s.gate] then
      error("gate must be one of all_heads_linear, linear, mlp; got '" .. tostring(s.gate) .. "'", 0)
    end
    num(s.pi_init, "pi_init", function(x) return x > 0 and x < 1 end, "in (0, 1)")
    num(s.n_hid, "n_hid", function(x) return x >= 1 and x == math.floor(x) end, "a positive integer")
    if s.gate_scale ~= "inv_pi_init" then
      num(s.gate_scale, "gate_scale", function(x) return x > 0 and x < math.huge end, "a number > 0 or \"inv_pi_init\"")
    end
    std_ok(s)
  end,
  new = function(ctx, spec, dims)
    local self = new_attn(ctx, spec, dims, "softmax")
    local NH, HD, std = self.NH, self.HD, spec.init_std
    local b0 = math.log(spec.pi_init / (1 - spec.pi_init))
    if spec.gate == "linear" then
      self.p.gw = self:new_param("gate.weight", { NH, HD }, "normal", std)
      self.p.gb = self:new_param("gate.bias", { NH }, "fill", b0)
    elseif spec.gate == "mlp" then
      self.p.w1 = self:new_param("gate.fc1.weight", { NH, spec.n_hid, HD }, "normal", std)
      self.p.b1 = self:new_param("gate.fc1.bias", { NH, spec.n_hid }, "fill", 0)
      self.p.w2 = self:new_param("gate.fc2.weight", { NH, spec.n_hid }, "normal", std)
      self.p.gb = self:new_param("gate.fc2.bias", { NH }, "fill", b0)
    else
      self.p.gw = self:new_param("gate.weight", { NH, self.C }, "normal", std)
      self.p.gb = self:new_param("gate.bias", { NH }, "fill", b0)
    end
    self.factor_name = "gates"
    self.factor = function(s, x) return gate_logits[spec.gate](s, x):sigmoid() end
    -- out = c·sigmoid(G(x))·softmax(s)·V; QT's fine-tuning code uses c = 1/π_init, so that the
    -- gated output starts at the scale of the ungated one
    self.factor_scale = spec.gate_scale == "inv_pi_init" and 1 / spec.pi_init or spec.gate_scale
    return self
  end,
})

-- ---------------------------------------------------------------- context-aware scaling (SO (e))
-- out = S_c(x)·softmax(s)·V, S_c(x)_{t,h} = 2·sigmoid(W_s x_t + b_s)_h; W_s (NH,C) ~ N(0, 0.02²),
-- b_s = 0, so S_c ≈ 1 at init.
builtin("ca_scale", {
  params = { init_std = 0.02 },
  validate = std_ok,
  new = function(ctx, spec, dims)
    local self = new_attn(ctx, spec, dims, "softmax")
    self.p.sw = self:new_param("scale.weight", { self.NH, self.C }, "normal", spec.init_std)
    self.p.sb = self:new_param("scale.bias", { self.NH }, "fill", 0)
    self.factor_name = "scale"
    self.factor = function(s, x) return x:linear(s.p.sw, s.p.sb):sigmoid():scale(2) end
    return self
  end,
})

-- ---------------------------------------------------------------- gated attention after SDPA (Qiu et al. 2025)
-- Y′ = Y ⊙ σ(x·W_θᵀ), x the block input after the pre-norm (the tensor that feeds q/k/v), Y each
-- head's attention output before concatenation and o_proj (position G1); no bias, W_θ ~ N(0,
-- init_std²) (their code takes the gate logits from a widened q_proj, without bias).
--   headwise     W_θ (NH, C): one gate per head and token            (ol_head_scale)
--   elementwise  W_θ (NH·HD, C): one gate per channel of every head   (an elementwise product)
builtin("gated_sdpa", {
  params = { form = "headwise", init_std = 0.02 },
  validate = function(s)
    if s.form ~= "headwise" and s.form ~= "elementwise" then
      error("form must be headwise or elementwise; got '" .. tostring(s.form) .. "'", 0)
    end
    std_ok(s)
  end,
  new = function(ctx, spec, dims)
    local self = new_attn(ctx, spec, dims, "softmax")
    local NH, HD = self.NH, self.HD
    if spec.form == "headwise" then
      self.p.gw = self:new_param("gate.weight", { NH, self.C }, "normal", spec.init_std)
      self.factor_name = "gates"
      self.factor = function(s, x) return x:linear(s.p.gw):sigmoid() end
    else
      self.p.gw = self:new_param("gate.weight", { NH * HD, self.C }, "normal", spec.init_std)
      self.elementwise = function(s, x)
        local B, T = x:size(0), x:size(1)
        return x:linear(s.p.gw):sigmoid():view({ B, T, NH, HD }):transpose(1, 2)
      end
    end
    return self
  end,
})

return M
