-- quant — 4-bit-era post-training quantisation (docs/reference/compression.md, "RTN, SmoothQuant and
-- Hadamard rotation"): round-to-nearest W8A8 / W4A8 / W4A4 on every linear layer (weights per
-- output channel or per tensor, activations per token or per tensor, symmetric, dynamic),
-- SmoothQuant's migration, and a QuaRot-style Walsh–Hadamard rotation — kernels in
-- engine/quant.c (and ol_absmax_quant_ for weights).
--
--   local quant = require "outlierlab.compress.rtn"
--   local h = quant.apply(ctx, model, { wbits = 4, abits = 4, w_per_channel = true, a_per_token = true,
--                                       clip = 1, smooth = false | α, smooth_scope = "norm" | "per_linear",
--                                       hadamard = false | true | "down_only",
--                                       wfmt / afmt = "int" (wbits / abits) | "e4m3" | "e5m2" | "mxfp4" | "nvfp4",
--                                       kv_bits = false | b, kv_keep = 0 (first tokens kept in the KV cache),
--                                       kv_top = 0 (the tokens with the largest entries kept),
--                                       calib = { batch, ... } (for smooth) })
--   local loss = quant.evaluate(ctx, model, batches)      -- token-weighted mean loss, eval mode
--   h:restore()                                           -- weights and forwards as before
--   quant.compare(ctx, model, batches, { calib =, settings = { {name=, ...opts}, ... } })
--       -> { fp = loss, [name] = loss, ... } (restores after each)
--   quant.rotate(ctx, model) -> h   -- the rotation alone (exact in full precision); h:restore()
--   quant.batches(ctx, loader, n) -> n batches of a loader copied into persistent tensors
--   quant.blocker(model, setting) -> nil, or why the setting does not apply to this model
--   quant.run(ctx, model, batches, { calib =, settings = quant.SETTINGS, log = fn(fmt, ...) })
--       -> { fp = { loss, ntokens, accuracy }, settings = { {name =, label =, applicable = bool,
--            reason =, loss =, accuracy =}, ... }, by_name = {name -> the same} }
--       the one loop over the settings that remedies, qt-table2, so-table3 and quant use
--
-- quant.evaluate's second result: { loss, ntokens, accuracy } — accuracy (top-1, in percent) when
-- the batches are a classifier's (batch.labels and logits (B, K): the ViT), else nil; the loss is
-- the model's own (next-token cross entropy for the decoders, masked-token cross entropy for BERT,
-- the label cross entropy for the ViT), token-weighted over the batches.
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
--   3. online: x ← x·H before down_proj (H on d_ff) and before o_proj (H on n_head·d_head), and
--      W ← W·H for both, so that every linear input is rotated (hadamard = "down_only": o_proj's
--      input unrotated, the project's variant before issue 50).
-- SmoothQuant (Xiao et al. 2023): one scale per norm shared by its readers (q/k/v, gate/up),
-- o_proj and down_proj unsmoothed (M.smooth_inplace; smooth_scope = "per_linear": the old variant).
-- In full precision the logits are unchanged up to fp32 rounding (tested).
local ol = require "outlierlab"
local nn = require "outlierlab.nn"
local compress = require "outlierlab.compress.fakequant"
local quantisation = require "outlierlab.compress.evaluate"
local formats = require "outlierlab.compress.formats"
local ffi = ol.ffi
local C = ol.C

local M = {}
-- kept in full precision: the heads (LM head, the ViT's classifier, BERT's MLM dense layer and
-- the unused pooler), the embeddings (token, the ViT's patch embedding) and the projections
-- around the blocks (Park et al.'s, OPT-350m's project_in/out)
M.KEEP_FP = { "^lm_head%.", "^head%.", "^wte%.", "^embed_tokens%.", "^embeddings%.word%.", "^embed_proj%.", "^head_proj%.",
              "^patch_embed%.", "^mlm%.", "^pooler%.", "^project_in%.", "^project_out%." }

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

-- input transforms of a linear module, applied in order before its own forward, and output
-- transforms after it (the KV cache: k_proj's and v_proj's outputs)
local function hook(mod)
  if not rawget(mod, "_pre") then
    mod._pre, mod._post = {}, {}
    mod.forward = function(self, x)
      for _, f in ipairs(self._pre) do x = f(x) end
      local y = nn.Linear.forward(self, x)
      for _, f in ipairs(self._post) do y = f(y) end
      return y
    end
  end
end
local function add_pre(mod, fn) hook(mod) mod._pre[#mod._pre + 1] = fn end
local function add_post(mod, fn) hook(mod) mod._post[#mod._post + 1] = fn end
local function clear_pre(model)
  for _, m in ipairs(walk(model, function(t) return getmetatable(t) == nn.Linear end)) do
    m._pre, m._post, m.forward = nil, nil, nil
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
  return {}   -- (QT's per-head gate: M.rotation_blocker refuses it)
end

-- Why the rotation cannot be applied to this model (nil when it can). It needs the llama family's
-- pre-norm RMSNorm blocks in sequence, every reader of the normalised x rotation-invariant and no
-- bias on a linear that writes the residual stream.
local FAMILY_WHY = {
  bert = "BERT is post-LN (a LayerNorm after each residual sum)",
  vit = "the ViT's blocks are pre-LN with LayerNorm",
  gpt2 = "GPT-2's blocks are pre-LN with LayerNorm",
  opt = "OPT's blocks are pre-LN with LayerNorm",
}
function M.rotation_blocker(model)
  local cfg = model.cfg or {}
  if cfg.family ~= "llama" then
    return string.format("the Hadamard rotation needs the llama family's RMSNorm pre-norm blocks; %s, and a LayerNorm's " ..
      "mean subtraction and bias do not commute with the rotation (folding them away, as SliceGPT does, is not implemented)",
      FAMILY_WHY[cfg.family] or ("this is a " .. tostring(cfg.family) .. " model"))
  end
  if cfg.norm == "layernorm" then return "the Hadamard rotation needs RMSNorm; this llama-family model uses LayerNorm (norm = \"layernorm\")" end
  if (cfg.norm_variant or "plain") ~= "plain" or (cfg.residual_clip or 0) > 0 then   -- nn/norms.lua
    return "the Hadamard rotation does not commute with channel-by-channel operations on the residual stream (norm_variant '" ..
      tostring(cfg.norm_variant) .. "': λ₁ before the norm, GatedNorm's gate, DyT's tanh; residual_clip " .. tostring(cfg.residual_clip or 0) .. ")"
  end
  if cfg.post_norms then return "the Hadamard rotation does not commute with the norms after the attention and the MLP (post_norms, Gemma 2's sandwich norms)" end
  if cfg.parallel and cfg.parallel ~= "none" then return "the Hadamard rotation is implemented for sequential blocks only (parallel = \"" .. tostring(cfg.parallel) .. "\")" end
  if cfg.o_bias or cfg.mlp_bias then return "the Hadamard rotation of a bias on o_proj or down_proj (a writer of the residual stream) is not implemented" end
  for _, blk in ipairs(model.blocks or {}) do
    local A = blk.attn and blk.attn.attn
    if A and A.kind == "gated" and not (A.spec and A.spec.gate == "all_heads_linear") then
      return "attention 'gated' with gate = " .. tostring(A.spec and A.spec.gate) ..
        " (QT's gate) reads per-head slices of x and is not rotation-invariant (use all_heads_linear or gated_sdpa)"
    end
  end
  if not model.lm_head and not model.head_proj and model.norm then
    local w = model.norm.weight
    for j = 0, tonumber(w.numel) - 1 do
      if w.data[j] ~= 1 then return "a tied head cannot take the final norm's gain; untie the embeddings" end
    end
  end
  return nil
end

-- why a setting ({hadamard =, ...}) does not apply to this model, or nil
function M.blocker(model, setting)
  if setting.hadamard then return M.rotation_blocker(model) end
  return nil
end

-- mode: true (QuaRot: online rotations before down_proj and o_proj) or "down_only"
function M.rotate_inplace(ctx, model, mode)
  if mode ~= nil and mode ~= true and mode ~= "down_only" then
    error("quant.rotate: hadamard must be true or \"down_only\", got " .. tostring(mode), 2)
  end
  local why = M.rotation_blocker(model)
  if why then error("quant.rotate: " .. why, 2) end
  local cfg = model.cfg
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
    -- online Hadamards on the inputs that are not the stream: d_ff before down_proj and the
    -- heads' concatenated output before o_proj (QuaRot's Fig. 4 / §4: H_heads ⊗ H_dhead, which
    -- for Sylvester matrices is the full H on n_head·d_head; fusing the d_head factor into W_v
    -- only matters for a quantised V cache). o_proj's input stays unrotated with "down_only"
    -- (the project's rotation before issue 50).
    R(mlp.down.weight, 1)
    add_pre(mlp.down, function(x) return ol.check_ptr(C.ol_hadamard(x, 0)) end)
    if mode ~= "down_only" then
      R(at.o.weight, 1)
      add_pre(at.o, function(x) return ol.check_ptr(C.ol_hadamard(x, 0)) end)
    end
  end
  -- the final norm's reader: head_proj (Park et al.'s projection) or the head
  local reader = model.head_proj or model.lm_head
  if reader then fold(model.norm, { reader.weight }) ; R(reader.weight, 1) end
  -- the stream's first writer: embed_proj (rows of its output) or the embedding itself
  if model.embed_proj then R(model.embed_proj.weight, 0) else R(model.embed_tokens.weight, 1) end
end

function M.rotate(ctx, model, mode)
  local snap = compress.snapshot(ctx)
  M.rotate_inplace(ctx, model, mode)
  return handle(ctx, model, snap)
end

-- ---------------------------------------------------------------- evaluation
-- token-weighted mean loss over batches (list of batch tables), evaluation mode, no tape; the
-- second result { loss =, ntokens =, accuracy = } has the top-1 accuracy in percent when the
-- model is a classifier (logits (B, K) and batch.labels; quantisation.count_top1, the first
-- maximum wins a tie), else accuracy = nil
function M.evaluate(ctx, model, batches)
  local sum, n, correct, total = 0, 0, 0, 0
  for _, b in ipairs(batches) do
    ctx:reset()
    local loss, info = ctx:no_grad(function() return model:loss(b, { train = false }) end)
    local k = info and info.ntokens or 1
    sum, n = sum + loss:item() * k, n + k
    local lg, lab = info and info.logits, b.labels
    if lg and lab and lg.ndim == 2 and lab.ndim == 1 and lab:size(0) == lg:size(0) then
      local c, k = quantisation.count_top1(lg, lab)
      correct, total = correct + c, total + k
    end
  end
  ctx:reset()
  local mean = n > 0 and sum / n or 0
  return mean, { loss = mean, ntokens = n, accuracy = total > 0 and 100 * correct / total or nil }
end

-- n batches of a loader (loader:next(ctx)) copied into persistent tensors, so that the
-- evaluations, which reset the step arena between batches, can read them again and again
function M.batches(ctx, loader, n)
  local out = {}
  for i = 1, n do
    ctx:reset()
    local b = loader:next(ctx)
    local p = {}
    for k, t in pairs(b) do
      if type(t) == "cdata" then
        local dims = {}
        for d = 0, t.ndim - 1 do dims[#dims + 1] = tonumber(t.shape[d]) end
        p[k] = ctx:tensor(dims, { dtype = t.dtype == C.OL_I32 and "i32" or "f32", persistent = true }):copy_(t)
      else p[k] = t end
    end
    out[i] = p
  end
  ctx:reset()
  return out
end

-- ---------------------------------------------------------------- SmoothQuant
-- SmoothQuant (Xiao et al. 2023, Eq. 4 and their smooth.py): one scale per norm, shared by the
-- linears that read that norm's output (q, k, v from the attention norm; gate and up, or fc1, from
-- the MLP's norm), with max|W_j| over all of them:
--   s_j = max(max|X_j|^α / max(max_{i, linear}|W_ij|, 1e-5)^(1−α), 1e-5)
-- Their code folds 1/s into the norm's gain; here X' = X·diag(s)⁻¹ is applied online on the norm's
-- output before each reader (the same X' up to fp32 rounding, and valid where the norm's output
-- also feeds something else: BERT's post-LN residual, the attention variants' gates). Linears
-- that do not read a norm's output (o_proj, down_proj, fc2) are not smoothed. The readers are
-- found by tensor identity while calibrating, so every family and norm placement is covered; a
-- new norm module joins by its class in M.NORM_CLASSES or a field is_norm = true.
-- scope "per_linear" (the project's SmoothQuant before issue 50): every linear, o_proj and
-- down_proj included, its own scale from its own weight.
-- The rescalers of nn/norms.lua: PreAffine returns its inner norm's output (found as that norm);
-- GatedNorm's output y ⊙ g and DyT's γ ⊙ tanh(α·x) + β are what the block's linears read, and 1/s
-- folds into them exactly (DyT: γ and β; GatedNorm: the inner norm's gain, with s into gate_down's
-- columns), so each is the norm of its readers; GatedNorm's own gate_down is then not smoothed.
local norms = require "outlierlab.nn.norms"
M.NORM_CLASSES = { [nn.RMSNorm] = true, [nn.LayerNorm] = true, [norms.GatedNorm] = true, [norms.DyT] = true }
local function addr(x) return tonumber(ffi.cast("intptr_t", ffi.cast("const void *", x))) end

-- calibrate: per linear, max|X_j| over the calib batches (maxes[i]) and the norm module whose
-- output it reads (source[i], false when none); one batch at a time so that addresses are fresh
function M.smooth_calibrate(ctx, model, lins, calib)
  local norms = walk(model, function(t) return M.NORM_CLASSES[getmetatable(t)] or rawget(t, "is_norm") == true end)
  local made, prev = {}, {}
  for k, nm in ipairs(norms) do
    local f = nm.forward
    prev[k] = rawget(nm, "forward") or false
    nm.forward = function(self, x)
      local y = f(self, x)
      made[addr(y)] = self
      return y
    end
  end
  local maxes, source = {}, {}
  for i, l in ipairs(lins) do
    local mx = ffi.new("float[?]", l.mod.nin)
    maxes[i] = mx
    add_pre(l.mod, function(x)
      local nm = made[addr(x)] or false
      if source[i] == nil then source[i] = nm
      elseif source[i] ~= nm then error("quant: smooth: " .. l.name .. " reads a different tensor from one batch to the next", 0) end
      check(C.ol_absmax_cols(x, mx))
      return x
    end)
  end
  local ok, err = pcall(function()
    for _, b in ipairs(calib) do
      for k in pairs(made) do made[k] = nil end
      M.evaluate(ctx, model, { b })
    end
  end)
  for k, nm in ipairs(norms) do nm.forward = prev[k] or nil end
  for _, l in ipairs(lins) do table.remove(l.mod._pre) end   -- the recorders
  if not ok then error(err, 0) end
  return maxes, source
end

-- the shared scales of one group of linears reading the same input: s (a float[nin])
function M.smooth_scales(xmax, weights, alpha)
  local n = tonumber(weights[1].shape[1])
  local s = ffi.new("float[?]", n)
  for j = 0, n - 1 do
    local wm = 0
    for _, w in ipairs(weights) do
      local rows, d = tonumber(w.shape[0]), w.data
      for r = 0, rows - 1 do wm = math.max(wm, math.abs(d[r * n + j])) end
    end
    s[j] = math.max(xmax[j] ^ alpha / math.max(wm, 1e-5) ^ (1 - alpha), 1e-5)
  end
  return s
end

function M.smooth_inplace(ctx, model, lins, o)
  local alpha = o.smooth == true and 0.5 or o.smooth
  if type(alpha) ~= "number" or alpha < 0 or alpha > 1 then error("quant: smooth must be true or α in [0, 1]", 0) end
  if not o.calib or #o.calib == 0 then error("quant: smooth needs calib batches", 0) end
  local scope = o.smooth_scope or "norm"
  if scope ~= "norm" and scope ~= "per_linear" then error("quant: smooth_scope must be \"norm\" or \"per_linear\", got " .. tostring(scope), 0) end
  local maxes, source = M.smooth_calibrate(ctx, model, lins, o.calib)
  local function migrate(group, s)
    local nin = group[1].mod.nin
    local inv = ctx:tensor({ nin }, { persistent = true })
    for j = 0, nin - 1 do inv.data[j] = 1 / s[j] end
    for _, l in ipairs(group) do
      check(C.ol_scale_cols_(l.mod.weight, s, 0))
      add_pre(l.mod, function(x) return x * inv end)
    end
  end
  if scope == "per_linear" then
    for i, l in ipairs(lins) do
      local s = ffi.new("float[?]", l.mod.nin)
      check(C.ol_smooth_scales(maxes[i], l.mod.weight, alpha, s))
      migrate({ l }, s)
    end
    return
  end
  local groups, order = {}, {}
  for i, l in ipairs(lins) do
    local nm = source[i]
    if nm then
      if not groups[nm] then groups[nm] = { lins = {}, xmax = maxes[i] } order[#order + 1] = nm end
      local g = groups[nm]
      g.lins[#g.lins + 1] = l
      for j = 0, l.mod.nin - 1 do g.xmax[j] = math.max(g.xmax[j], maxes[i][j]) end
    end
  end
  if #order == 0 then
    error("quant: SmoothQuant found no linear reading a norm's output (norms are the modules of quant.NORM_CLASSES " ..
      "or with is_norm = true); smooth_scope = \"per_linear\" smooths every linear on its own", 0)
  end
  for _, nm in ipairs(order) do
    local g, ws = groups[nm], {}
    for k, l in ipairs(g.lins) do ws[k] = l.mod.weight end
    migrate(g.lins, M.smooth_scales(g.xmax, ws, alpha))
  end
end

-- ---------------------------------------------------------------- KV cache
-- The KV cache (KVQuant, Hooper et al. 2024; IntactKV, Liu et al. 2024): k_proj's output (the
-- keys before RoPE, as KVQuant quantises them) per channel over each sequence's tokens, v_proj's
-- output per token, symmetric RTN with kv_bits; the first kv_keep tokens of each sequence stay in
-- full precision and do not enter the key scales (the attention sink's key is the largest), and so
-- do the kv_top further tokens of each sequence with the largest max|k| (resp. max|v|): the outlier
-- tokens wherever they are (this organism's massive activations are not at the first token).
-- Every attention layer's k_proj / v_proj is found by name (also those kept by o.keep).
function M.kv_linears(model)
  local ks, vs = {}, {}
  for _, l in ipairs(M.linears(model, {})) do
    if l.name:match("k_proj%.weight$") then ks[#ks + 1] = l.mod end
    if l.name:match("v_proj%.weight$") then vs[#vs + 1] = l.mod end
  end
  return ks, vs
end
function M.quantize_kv(model, o)
  local keep, top = o.kv_keep or 0, o.kv_top or 0
  for key, v in pairs({ kv_keep = keep, kv_top = top }) do
    if type(v) ~= "number" or v < 0 or v % 1 ~= 0 then error("quant: " .. key .. " must be a whole number of tokens, got " .. tostring(v), 0) end
  end
  local ks, vs = M.kv_linears(model)
  if #ks == 0 then error("quant: kv_bits: no k_proj/v_proj linear in this model", 0) end
  local bits = o.kv_bits
  for _, m in ipairs(ks) do add_post(m, function(y) return formats.kv(y, { bits = bits, per_channel = true, keep = keep, top = top }) end) end
  for _, m in ipairs(vs) do add_post(m, function(y) return formats.kv(y, { bits = bits, per_channel = false, keep = keep, top = top }) end) end
end

local function on(bits) return bits and bits < 16 end

function M.apply(ctx, model, o)
  o = o or {}
  local snap = compress.snapshot(ctx)
  local ok, err = pcall(function()
    if o.hadamard then M.rotate_inplace(ctx, model, o.hadamard) end
    local lins = M.linears(model, o.keep)
    if o.smooth then M.smooth_inplace(ctx, model, lins, o) end
    local wf, af = formats.check(o.wfmt, "wfmt") or "int", formats.check(o.afmt, "afmt") or "int"
    for _, l in ipairs(lins) do
      if wf ~= "int" then formats.quantize_(l.mod.weight, wf, o.w_per_channel == false and "tensor" or "row")
      elseif on(o.wbits) then check(C.ol_absmax_quant_(l.mod.weight, o.wbits, o.w_per_channel == false and 0 or 1)) end
      if af ~= "int" then
        local scaling = o.a_per_token == false and "tensor" or "row"
        add_pre(l.mod, function(x) return formats.quantize(x, af, scaling) end)
      elseif on(o.abits) then
        local bits, per_tok, clip = o.abits, o.a_per_token == false and 0 or 1, o.clip or 1
        add_pre(l.mod, function(x) return ol.check_ptr(C.ol_quant_tokens(x, bits, per_tok, clip)) end)
      end
    end
    if on(o.kv_bits) then M.quantize_kv(model, o) end
  end)
  local h = handle(ctx, model, snap)
  if not ok then h.restore() error(err, 2) end
  h.linears = M.linears(model, o.keep)
  return h
end

-- The settings over one model (the one loop of remedies, qt-table2, so-table3 and quant): the FP
-- evaluation, then each setting applied, evaluated on the same batches and restored. A setting that
-- does not apply to the model (M.blocker: the rotation outside the llama family or with QT's
-- per-head gate) is reported as { applicable = false, reason = } and not run; any other error is
-- raised. o.calib: the calibration batches (SmoothQuant); o.settings (default M.SETTINGS);
-- o.log(fmt, ...) is told about each setting that does not apply.
-- -> { fp = { loss, ntokens, accuracy }, settings = { {name, label, applicable, reason, loss,
--      ntokens, accuracy}, ... }, by_name = { [name] = the same } }
function M.run(ctx, model, batches, o)
  o = o or {}
  local _, fp = M.evaluate(ctx, model, batches)
  local res = { fp = fp, settings = {}, by_name = {} }
  for _, s in ipairs(o.settings or M.SETTINGS) do
    local r = { name = s.name, label = s.label or s.name }
    local why = M.blocker(model, s)
    if why then
      r.applicable, r.reason = false, why
      if o.log then o.log("%s: not applicable (%s)", r.label, why) end
    else
      local opts = {}
      for k, v in pairs(s) do opts[k] = v end
      opts.calib = o.calib
      local h = M.apply(ctx, model, opts)
      local ok, loss, info = pcall(M.evaluate, ctx, model, batches)
      h.restore()
      if not ok then error(loss, 0) end
      r.applicable, r.loss, r.ntokens, r.accuracy = true, loss, info.ntokens, info.accuracy
    end
    res.settings[#res.settings + 1] = r
    res.by_name[s.name] = r
  end
  return res
end

-- the FP loss and the loss of each setting ({name =, wbits =, abits =, ...}), restoring after each;
-- a setting that does not apply (M.blocker) gives NaN
function M.compare(ctx, model, batches, o)
  local r = M.run(ctx, model, batches, o or {})
  local res = { fp = r.fp.loss }
  for _, s in ipairs(r.settings) do res[s.name] = s.applicable and s.loss or 0 / 0 end
  return res
end

-- ---------------------------------------------------------------- the harness in the tables
-- The settings on a trained model's held-out data, in the metric of its table:
--   loaders = { val = fn() -> loader, calib = fn() -> loader } (outlierlab.recipes' load);
--   o = { n_eval =, n_calib =, metric = "ppl" (exp of the loss) | "acc" (top-1 %) | "loss", log = }
-- -> { fp = value, values = { [name] = value (NaN where not applicable) }, applicable = { [name] = bool },
--      reason = { [name] = why not }, run = M.run's result }
function M.measure(ctx, model, loaders, o)
  local val = M.batches(ctx, loaders.val(), o.n_eval or 8)
  local calib = M.batches(ctx, loaders.calib(), o.n_calib or 4)
  local r = M.run(ctx, model, val, { calib = calib, log = o.log })
  local metric = o.metric or "ppl"
  local function value(x)
    if metric == "acc" then return x.accuracy or error("quant.measure: metric 'acc' needs a classifier (logits (B, K), batch.labels)", 0) end
    if metric == "ppl" then return math.exp(x.loss) end
    if metric == "loss" then return x.loss end
    error("quant.measure: metric must be ppl, acc or loss, got " .. tostring(metric), 0)
  end
  local out = { fp = value(r.fp), values = {}, applicable = {}, reason = {}, run = r }
  for _, x in ipairs(r.settings) do
    out.values[x.name] = x.applicable and value(x) or 0 / 0
    out.applicable[x.name], out.reason[x.name] = x.applicable, x.reason
  end
  return out
end

-- One table cell over seeds: ms = the M.measure results of one model, seed by seed; change(fp, q)
-- the per-seed change against FP (a difference or a ratio). -> per setting i (M.SETTINGS order):
-- value[i][seed], mean[i], sd[i], change[i][seed], change_mean[i], change_sd[i], applicable[i]
-- (1 / 0: a setting applies to every seed's model or to none).
function M.over_seeds(ms, change)
  local seeds = require "outlierlab.judge.seeds"
  local c = { value = {}, mean = {}, sd = {}, change = {}, change_mean = {}, change_sd = {}, applicable = {} }
  for i, s in ipairs(M.SETTINGS) do
    local xs, ds, ok = {}, {}, true
    for k, m in ipairs(ms) do
      xs[k] = m.values[s.name]
      ds[k] = change(m.fp, xs[k])
      ok = ok and m.applicable[s.name]
    end
    c.value[i], c.change[i], c.applicable[i] = xs, ds, ok and 1 or 0
    c.mean[i], c.sd[i] = seeds.stats(xs)
    c.change_mean[i], c.change_sd[i] = seeds.stats(ds)
  end
  return c
end

-- one line for a log: "FP 31.9, W8A8 31.9, ..., W4A4 + Hadamard n/a" from M.measure's result
function M.describe(m, fmt)
  fmt = fmt or "%.4g"
  local parts = { "FP " .. string.format(fmt, m.fp) }
  for _, s in ipairs(M.SETTINGS) do
    local x = m.values[s.name]
    parts[#parts + 1] = s.label .. " " .. (m.applicable[s.name] and string.format(fmt, x) or "n/a")
  end
  return table.concat(parts, ", ")
end

-- a summary's words for one cell: "not applicable", "undefined" (a non-finite value) or mean ± sd
function M.cell_text(mean, sd, n, applicable, fmt)
  if applicable == 0 or applicable == false then return "not applicable" end
  if mean ~= mean or mean == math.huge or mean == -math.huge then return "undefined (non-finite)" end
  return require("outlierlab.judge.seeds").pm_of(mean, sd, n, fmt)
end

-- The Markdown table of the settings in a summary (qt-table2, so-table3):
--   o.head = the leading columns' names; o.rows = { { cells = {leading cells}, cell = function(si) ->
--     { mean =, sd =, applicable = 1|0, change_mean =, change_sd =, change = {per seed} } }, ... };
--   o.n = seeds; o.fmt (the metric), o.change_fmt and o.change_prefix (its change against FP);
--   o.ref = the row whose changes the others are compared with by the seed rule, o.words = { below,
--   above, within } (e.g. "smaller than vanilla's")
-- -> the table's lines joined by "\n"
function M.summary_table(o)
  local seeds = require "outlierlab.judge.seeds"
  local head = {}
  for i, h in ipairs(o.head) do head[i] = h end
  for _, st in ipairs(M.SETTINGS) do head[#head + 1] = st.label end
  local lines = { "| " .. table.concat(head, " | ") .. " |", "|" .. string.rep("---|", #head) }
  for ri, row in ipairs(o.rows) do
    local cells = {}
    for i, c in ipairs(row.cells) do cells[i] = c end
    for si = 1, #M.SETTINGS do
      local x = row.cell(si)
      local text = M.cell_text(x.mean, x.sd, o.n, x.applicable, o.fmt)
      if x.applicable == 1 and x.change_mean == x.change_mean then
        local mark = ""
        if o.ref and ri ~= o.ref then
          local c = seeds.compare(x.change, o.rows[o.ref].cell(si).change)
          mark = c.sign == -1 and ", " .. o.words[1] or c.sign == 1 and ", " .. o.words[2] or c.sign == 0 and ", " .. o.words[3] or ""
        end
        text = text .. " (" .. (o.change_prefix or "") .. seeds.pm_of(x.change_mean, x.change_sd, o.n, o.change_fmt) .. mark .. ")"
      end
      cells[#cells + 1] = text
    end
    lines[#lines + 1] = "| " .. table.concat(cells, " | ") .. " |"
  end
  return table.concat(lines, "\n")
end

-- what the settings are, for a summary's "4-bit era" paragraph; kept: what stays in full precision
function M.method_text(n_calib, kept)
  return "The project's 4-bit-era post-training quantisation (outlierlab.compress.rtn, docs/reference/compression.md): round to nearest, " ..
    "symmetric, weights per output channel and activations per token with dynamic ranges, on the input and weight of every " ..
    "linear layer of the blocks (" .. kept .. ", attention scores and probabilities in full precision); W4A4 + Hadamard " ..
    "first applies QuaRot's Walsh–Hadamard rotation (the residual stream, and online before o_proj and down_proj; exact in full " ..
    "precision), W4A4 + SmoothQuant first migrates activation scale to the weights with one scale per norm shared by its " ..
    "readers (q/k/v, gate/up; o_proj and down_proj unsmoothed; α = 0.5, maxima from " .. n_calib .. " calibration batch(es))."
end

-- Why settings do not apply, one line per (setting, reason): entries = { {who =, label =, reason =} }
-- -> "- W4A4 + Hadamard is not applicable to BERT vanilla, BERT clipped softmax: <reason>." lines joined
-- by "\n", or a sentence saying that every setting applies
function M.not_applicable_lines(entries)
  local order, by = {}, {}
  for _, e in ipairs(entries) do
    local k = e.label .. "\0" .. e.reason
    if not by[k] then by[k] = { label = e.label, reason = e.reason, who = {} } order[#order + 1] = k end
    table.insert(by[k].who, e.who)
  end
  if #order == 0 then return "Every setting applies to every model of this run." end
  local lines = {}
  for _, k in ipairs(order) do
    local g = by[k]
    lines[#lines + 1] = string.format("- %s is not applicable to %s: %s.", g.label, table.concat(g.who, ", "), g.reason)
  end
  return table.concat(lines, "\n")
end

-- the leaderboard's settings (experiments/remedies.lua); label: how the tables name them
M.SETTINGS = {
  { name = "w8a8", label = "W8A8", wbits = 8, abits = 8 },
  { name = "w4a8", label = "W4A8", wbits = 4, abits = 8 },
  { name = "w4a4", label = "W4A4", wbits = 4, abits = 4 },
  { name = "w4a4_hadamard", label = "W4A4 + Hadamard", wbits = 4, abits = 4, hadamard = true },
  { name = "w4a4_smooth", label = "W4A4 + SmoothQuant", wbits = 4, abits = 4, smooth = 0.5 },
}
-- the floating-point formats (compress/formats.lua): weights per output channel and activations per
-- token for FP8 (an FP32 scale amax/max each), blocks along the input dim for MXFP4 / NVFP4
M.FORMAT_SETTINGS = {
  { name = "w8a8_e4m3", label = "W8A8 FP8 E4M3", wfmt = "e4m3", afmt = "e4m3" },
  { name = "w8a8_e5m2", label = "W8A8 FP8 E5M2", wfmt = "e5m2", afmt = "e5m2" },
  { name = "w4a4_mxfp4", label = "W4A4 MXFP4", wfmt = "mxfp4", afmt = "mxfp4" },
  { name = "w4a4_nvfp4", label = "W4A4 NVFP4", wfmt = "nvfp4", afmt = "nvfp4" },
}
-- the KV cache alone (weights and activations in full precision): INT4 and INT2, without and
-- with the first token (the attention sink of a causal decoder) kept in full precision
M.KV_SETTINGS = {
  { name = "kv4", label = "KV4", kv_bits = 4 },
  { name = "kv4_keep1", label = "KV4, first token kept", kv_bits = 4, kv_keep = 1 },
  { name = "kv2", label = "KV2", kv_bits = 2 },
  { name = "kv2_keep1", label = "KV2, first token kept", kv_bits = 2, kv_keep = 1 },
  { name = "kv2_top1", label = "KV2, largest token kept", kv_bits = 2, kv_top = 1 },
}
-- everything the leaderboard (experiments/remedies.lua) measures: SETTINGS first (their indices
-- unchanged), then the formats and the KV cache
M.LEADERBOARD = {}
for _, list in ipairs({ M.SETTINGS, M.FORMAT_SETTINGS, M.KV_SETTINGS }) do
  for _, s in ipairs(list) do M.LEADERBOARD[#M.LEADERBOARD + 1] = s end
end

return M
