-- quant — 4-bit-era post-training quantisation (docs/reference/compression.md, "RTN, SmoothQuant and
-- Hadamard rotation"): round-to-nearest W8A8 / W4A8 / W4A4 on every linear layer (weights per
-- output channel or per tensor, activations per token or per tensor, symmetric, dynamic),
-- SmoothQuant's migration, and a QuaRot-style Walsh–Hadamard rotation — kernels in
-- engine/quant.c (and ol_absmax_quant_ for weights).
--
--   local quant = require "outlierlab.compress.rtn"
--   local h = quant.apply(ctx, model, { wbits = 4, abits = 4, w_per_channel = true, a_per_token = true,
--                                       clip = 1, smooth = false | α, hadamard = false | true,
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
--   3. online: x_down ← x_down·H before down_proj and W_down ← W_down·H (H the block Hadamard on
--      d_ff), so that every linear input is rotated.
-- In full precision the logits are unchanged up to fp32 rounding (tested).
local ol = require "outlierlab"
local nn = require "outlierlab.nn"
local compress = require "outlierlab.compress.fakequant"
local quantisation = require "outlierlab.compress.evaluate"
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

function M.rotate_inplace(ctx, model)
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
    "first applies a QuaRot-style Walsh–Hadamard rotation (exact in full precision), W4A4 + SmoothQuant first migrates " ..
    "activation scale to the weights (α = 0.5, maxima from " .. n_calib .. " calibration batch(es))."
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

return M
