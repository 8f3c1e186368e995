-- attention_example — how to add an attention variant in Lua, without touching C
-- (load it with dofile(ol.root .. "/examples/attention_example.lua"); tests/lua/test_attention_example.lua).
--
-- "softmax_temp": softmax attention with a learned temperature per head,
--     out_h = softmax(τ_h · q·kᵀ/√HD) · V_h,   τ_h = exp(θ_h),  θ (NH) initialised to log(tau_init)
-- Written from engine ops only, so autograd, the optimizer (θ is an engine parameter in the
-- flat buffer, named "<name>.log_tau") and checkpoints handle it like any built-in variant.
-- Use it in a model config as  attention = { kind = "softmax_temp", tau_init = 1 }.
--
-- The recipe (docs/reference/attention.md, "Adding a variant"):
--   1. attention.register(name, { params = {key = default}, validate = fn(spec), new = fn(ctx, spec, dims) })
--      params lists every key the spec may set (default `false` = optional); unknown keys and
--      unknown kinds are rejected with the list of valid ones before new() runs.
--   2. new() creates parameters with ctx:param(dims.name .. ".<what>", shape) and returns an
--      object with :forward(q, k, v, x, opts) -> (B,NH,T,HD) and :parameters().
--   3. forward honours opts.causal and opts.pad_mask, and calls opts.probe("attn_probs", p)
--      when opts.probe is set. In training forwards models pass opts.dropout_seed; a variant
--      with attention-probability dropout drops its weights with it (p:dropout(rate, seed)),
--      as the built-ins do with their spec key dropout.
-- This plain-op version keeps the (B,NH,T,T) probabilities for the backward pass; a variant
-- that needs to train at long T should move its elementwise transform into engine/attention.c.
local attention = require "outlierlab.nn.attention"

attention.register("softmax_temp", {
  params = { tau_init = 1, dropout = 0 },
  validate = function(spec)
    if type(spec.tau_init) ~= "number" or not (spec.tau_init > 0) then
      error("tau_init must be a positive number, got " .. tostring(spec.tau_init), 0)
    end
    if type(spec.dropout) ~= "number" or not (spec.dropout >= 0 and spec.dropout < 1) then
      error("dropout must be in [0, 1), got " .. tostring(spec.dropout), 0)
    end
  end,
  new = function(ctx, spec, dims)
    local NH = dims.n_head
    local name = (dims.name or "attn") .. ".log_tau"
    local self = { spec = spec, dims = dims }
    self.log_tau = ctx:param(name, { NH }):fill_(math.log(spec.tau_init))

    function self:parameters() return { self.log_tau } end

    function self:forward(q, k, v, x, opts)
      opts = opts or {}
      local s = attention.scores(q, k, opts.pad_mask)           -- (B,NH,T,Tk), padding at -1e30
      -- τ_h·s: move heads to the last dim so the (NH) vector broadcasts, then move them back
      local tau = self.log_tau:exp()
      s = (s:transpose(1, 3) * tau):transpose(1, 3)
      local p = s:softmax(opts.causal)
      if opts.probe then opts.probe("attn_probs", p) end
      if opts.dropout_seed and spec.dropout > 0 then p = p:dropout(spec.dropout, opts.dropout_seed) end
      return p:matmul(v)
    end
    return self
  end,
})

return attention.registry.softmax_temp
