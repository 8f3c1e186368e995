-- quant — 4-bit-era post-training quantisation (docs/COMPRESSION.md, "RTN, SmoothQuant and
-- Hadamard rotation"): round-to-nearest W8A8 / W4A8 / W4A4 on every linear layer (weights per
-- output channel or per tensor, activations per token or per tensor, symmetric, dynamic),
-- SmoothQuant's migration, and a QuaRot-style Walsh–Hadamard rotation — kernels in
-- engine/quant.c (and ol_absmax_quant_ for weights).
--
--   local quant = require "outlierlab.analysis.quant"
--   local h = quant.apply(ctx, model, { wbits = 4, abits = 4, w_per_channel = true, a_per_token = true,
--                                       clip = 1, smooth = false | α, hadamard = false | true,
--                                       calib = { batch, ... } (for smooth) })
--   local loss = quant.evaluate(ctx, model, batches)      -- token-weighted mean loss, eval mode
--   h:restore()                                           -- weights and forwards as before
--   quant.compare(ctx, model, batches, { calib =, settings = { {name=, ...opts}, ... } })
--       -> { fp = loss, [name] = loss, ... } (restores after each)
--   quant.rotate(ctx, model) -> h   -- the rotation alone (exact in full precision); h:restore()
--
-- What is quantised: the input and the weight of every linear layer (nn.Linear) except the head
-- and the embedding (KEEP_FP); attention scores and probabilities stay in full precision
-- (QuaRot's setting without KV-cache quantisation). bits ≥ 16 or false: not quantised.
--
-- Rotation (QuaRot, Ashkboos et al. 2024), LLaMA family (RMSNorm, pre-norm) only:
--   1. fold every RMSNorm gain into the linears that read its output (W ← W·diag(g), g ← 1;
--      also the attention variants' own weights that read the normalised x: gated_sdpa,
--      ca_scale, gated all_heads_linear);
--   2. rotate the residual stream by Q = block Walsh–Hadamard on C: E ← E·Q (embedding),
--      W ← W·Q for every linear reading the stream (q, k, v, gate, up, lm_head, the variants'
--      gate weights), W ← Qᵀ·W for every linear writing it (o_proj, down_proj); RMSNorm without a
--      gain commutes with Q (rms(xQ) = rms(x));
--   3. online: x_down ← x_down·H before down_proj and W_down ← W_down·H (H the block Hadamard on
--      d_ff), so that every linear input is rotated.
-- In full precision the logits are unchanged up to fp32 rounding (tested).
local ol = require "outlierlab"
local nn = require "outlierlab.nn"
local compress = require "outlierlab.analysis.compress"
local ffi = ol.ffi
local C = ol.C

local M = {}
M.KEEP_FP = { "^lm_head%.", "^head%.", "^wte%.", "^embed_tokens%.", "^embeddings%.word%.", "^embed_proj%.", "^head_proj%." }

local function walk(model, pred)
  local out, seen = {}, {}
  local function go(t, depth)
    if seen[t] or depth > 10 then return end
    seen[t] = true
    if pred(t) then out[#out + 1] = t return end
    for k, v in pairs(t) do
      if type(v) == "table" and k ~= "ctx" and k ~= "cfg" and k ~= "_pre" then go(v, depth + 1) end
    end
  end
  go(model, 0)
  return out
end

local function keep(name, pats)
  for _, p in ipairs(pats) do if name:match(p) then return true end end
  return false
end

-- every linear module to quantise, sorted by its weight's name: { {mod =, name =}, ... }
function M.linears(model, pats)
  local out = {}
  for _, m in ipairs(walk(model, function(t) return getmetatable(t) == nn.Linear end)) do
    local name = ffi.string(m.weight.name)
    if not keep(name, pats or M.KEEP_FP) then out[#out + 1] = { mod = m, name = name } end
  end
  table.sort(out, function(a, b) return a.name < b.name end)
  return out
end

-- input transforms of a linear module, applied in order before its own forward
local function add_pre(mod, fn)
  if not rawget(mod, "_pre") then
    mod._pre = {}
    mod.forward = function(self, x)
      for _, f in ipairs(self._pre) do x = f(x) end
      return nn.Linear.forward(self, x)
    end
  end
  mod._pre[#mod._pre + 1] = fn
end
local function clear_pre(model)
  for _, m in ipairs(walk(model, function(t) return getmetatable(t) == nn.Linear end)) do
    m._pre, m.forward = nil, nil
  end
end

local function check(rc) if rc ~= 0 then ol.engine_error(2) end end

local function handle(ctx, model, snap)
  return { restore = function()
    compress.restore(ctx, snap)
    clear_pre(model)
  end }
end

-- ---------------------------------------------------------------- rotation
local function gain_vector(norm, Cd)
  local w = norm.weight
  local g = ffi.new("float[?]", Cd)
  for j = 0, Cd - 1 do g[j] = w.numel == 1 and w.data[0] or w.data[j] end
  return g
end

-- the attention variant's weights that read the normalised block input x (shape (·, C))
local function variant_readers(A)
  if not A or not A.kind then return {} end
  if A.kind == "gated_sdpa" or (A.kind == "gated" and A.spec.gate == "all_heads_linear") then return { A.p.gw } end
  if A.kind == "ca_scale" then return { A.p.sw } end
  if A.kind == "gated" then
    error("quant.rotate: attention 'gated' with gate = " .. tostring(A.spec.gate) ..
      " reads per-head slices of x and is not rotation-invariant (use all_heads_linear or gated_sdpa)", 3)
  end
  return {}
end

function M.rotate_inplace(ctx, model)
  local cfg = model.cfg or {}
  if cfg.family ~= "llama" then
    error("quant.rotate: the Hadamard rotation needs RMSNorm pre-norm blocks (the llama family); got " ..
      tostring(cfg.family), 2)
  end
  local Cd = cfg.d_model
  local R = function(w, dim) check(C.ol_hadamard_(w, dim, 0)) end
  -- W ← W·diag(g) for any finite gain (trained gains can be negative or zero; ol_scale_cols_ is
  -- SmoothQuant's and wants positive scales)
  local function fold(norm, ws)
    local g = gain_vector(norm, Cd)
    for _, w in ipairs(ws) do
      local rows, d = tonumber(w.numel) / Cd, w.data
      for r = 0, rows - 1 do
        local base = r * Cd
        for j = 0, Cd - 1 do d[base + j] = d[base + j] * g[j] end
      end
    end
    norm.weight:fill_(1)
  end
  if not model.lm_head and not model.head_proj then
    local g = gain_vector(model.norm, Cd)
    for j = 0, Cd - 1 do
      if g[j] ~= 1 then error("quant.rotate: a tied head cannot take the final norm's gain; untie the embeddings", 2) end
    end
  end
  for _, blk in ipairs(model.blocks) do
    local at, mlp = blk.attn, blk.mlp
    local readers1 = { at.q.weight, at.k.weight, at.v.weight }
    for _, w in ipairs(variant_readers(at.attn)) do readers1[#readers1 + 1] = w end
    fold(blk.ln1, readers1)
    local readers2 = { mlp.up.weight }
    if mlp.gate then readers2[#readers2 + 1] = mlp.gate.weight end
    fold(blk.ln2, readers2)
    for _, w in ipairs(readers1) do R(w, 1) end
    for _, w in ipairs(readers2) do R(w, 1) end
    R(at.o.weight, 0)
    R(mlp.down.weight, 0)
    -- online Hadamard on d_ff before down_proj
    R(mlp.down.weight, 1)
    add_pre(mlp.down, function(x) return ol.check_ptr(C.ol_hadamard(x, 0)) end)
  end
  -- the final norm's reader: head_proj (Park et al.'s projection) or the head
  local reader = model.head_proj or model.lm_head
  if reader then fold(model.norm, { reader.weight }) ; R(reader.weight, 1) end
  -- the stream's first writer: embed_proj (rows of its output) or the embedding itself
  if model.embed_proj then R(model.embed_proj.weight, 0) else R(model.embed_tokens.weight, 1) end
end

function M.rotate(ctx, model)
  local snap = compress.snapshot(ctx)
  M.rotate_inplace(ctx, model)
  return handle(ctx, model, snap)
end

-- ---------------------------------------------------------------- evaluation
-- token-weighted mean loss over batches (list of batch tables), evaluation mode, no tape
function M.evaluate(ctx, model, batches)
  local sum, n = 0, 0
  for _, b in ipairs(batches) do
    ctx:reset()
    local loss, info = ctx:no_grad(function() return model:loss(b, { train = false }) end)
    local k = info and info.ntokens or 1
    sum, n = sum + loss:item() * k, n + k
  end
  ctx:reset()
  return n > 0 and sum / n or 0
end

local function on(bits) return bits and bits < 16 end

function M.apply(ctx, model, o)
  o = o or {}
  local snap = compress.snapshot(ctx)
  local ok, err = pcall(function()
    if o.hadamard then M.rotate_inplace(ctx, model) end
    local lins = M.linears(model, o.keep)
    if o.smooth then
      local alpha = o.smooth == true and 0.5 or o.smooth
      if type(alpha) ~= "number" or alpha < 0 or alpha > 1 then error("quant: smooth must be true or α in [0, 1]", 0) end
      if not o.calib or #o.calib == 0 then error("quant: smooth needs calib batches", 0) end
      local maxes = {}
      for i, l in ipairs(lins) do
        local mx = ffi.new("float[?]", l.mod.nin)
        maxes[i] = mx
        add_pre(l.mod, function(x) check(C.ol_absmax_cols(x, mx)) return x end)
      end
      M.evaluate(ctx, model, o.calib)
      for i, l in ipairs(lins) do
        table.remove(l.mod._pre)           -- the recorder
        local s = ffi.new("float[?]", l.mod.nin)
        check(C.ol_smooth_scales(maxes[i], l.mod.weight, alpha, s))
        check(C.ol_scale_cols_(l.mod.weight, s, 0))
        local inv = ctx:tensor({ l.mod.nin }, { persistent = true })
        for j = 0, l.mod.nin - 1 do inv.data[j] = 1 / s[j] end
        add_pre(l.mod, function(x) return x * inv end)
      end
    end
    for _, l in ipairs(lins) do
      if on(o.wbits) then check(C.ol_absmax_quant_(l.mod.weight, o.wbits, o.w_per_channel == false and 0 or 1)) end
      if on(o.abits) then
        local bits, per_tok, clip = o.abits, o.a_per_token == false and 0 or 1, o.clip or 1
        add_pre(l.mod, function(x) return ol.check_ptr(C.ol_quant_tokens(x, bits, per_tok, clip)) end)
      end
    end
  end)
  local h = handle(ctx, model, snap)
  if not ok then h.restore() error(err, 2) end
  h.linears = M.linears(model, o.keep)
  return h
end

-- the FP loss and the loss of each setting ({name =, wbits =, abits =, ...}), restoring after each
function M.compare(ctx, model, batches, o)
  local res = { fp = M.evaluate(ctx, model, batches) }
  for _, s in ipairs(o.settings or M.SETTINGS) do
    local opts = {}
    for k, v in pairs(s) do opts[k] = v end
    opts.calib = o.calib
    local h = M.apply(ctx, model, opts)
    res[s.name] = M.evaluate(ctx, model, batches)
    h.restore()
  end
  return res
end

-- the leaderboard's settings (issue 21)
M.SETTINGS = {
  { name = "w8a8", wbits = 8, abits = 8 },
  { name = "w4a8", wbits = 4, abits = 8 },
  { name = "w4a4", wbits = 4, abits = 4 },
  { name = "w4a4_hadamard", wbits = 4, abits = 4, hadamard = true },
  { name = "w4a4_smooth", wbits = 4, abits = 4, smooth = 0.5 },
}

return M
