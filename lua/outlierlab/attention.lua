-- attention — the attention variants, chosen by name in a model config:
--   attention = { kind = "clipped_softmax", gamma = -0.025 }
--
-- Interface used by every model (lua/outlierlab/models/*):
--   local A = attention.new(ctx, spec, { d_model =, n_head =, name = "h3.attn" })
--       creates the variant's own parameters (gates, sink key/value, scaling weights …)
--   local out = A:forward(q, k, v, x, { causal = true|false, pad_mask = ids_mask or nil,
--                                        probe = nil | function(name, tensor) })
--       q, k, v: (B, NH, T, HD); x: the attention block's input (B, T, C) (the tensor fed to
--       the Q/K/V projections); pad_mask: int32 (B, T), 1 = real token, 0 = padding (keys hidden).
--       Returns the per-head output (B, NH, T, HD) before the output projection.
--       With probe set, the variant reports "attn_probs" (B, NH, T, Tk) and, where it has
--       them, "gates" (B, NH, T) and "scale" (B, NH, T).
--
-- This file currently holds vanilla softmax written from engine ops (the slow, obvious
-- reference); the fused variants register themselves here too.
local ol = require "outlierlab"
local M = { registry = {} }

-- register(name, { params = {key = default, ...}, new = function(ctx, spec, dims) -> object })
function M.register(name, def)
  def.name = name
  M.registry[name] = def
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
  return full, def
end

function M.new(ctx, spec, dims)
  local full, def = M.check_spec(spec)
  return def.new(ctx, full, dims)
end

-- scores s = q·kᵀ/√HD (B, NH, T, Tk), with padding keys pushed to -1e30 when pad_mask is given
function M.scores(q, k, pad_mask)
  local hd = q:size(-1)
  local s = q:matmul(k, false, true):scale(1 / math.sqrt(hd))
  if pad_mask then s = s + M.pad_bias(s, pad_mask) end
  return s
end

-- additive (B, 1, 1, Tk)-broadcastable bias: 0 for real keys, -1e30 for padding
function M.pad_bias(s, pad_mask)
  local B, Tq, Tk, NH = s:size(0), s:size(2), s:size(3), s:size(1)
  local ctx_raw = s.ctx
  local bias = ol.C.ol_tensor_new(ctx_raw, ol.C.OL_F32, 4, ol.ffi.new("int64_t[4]", B, NH, Tq, Tk), "pad_bias")
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

-- vanilla softmax attention from engine ops
M.register("softmax", {
  params = {},
  new = function(ctx, spec, dims)
    local obj = { spec = spec, dims = dims }
    function obj:forward(q, k, v, x, opts)
      opts = opts or {}
      local p = M.scores(q, k, opts.pad_mask):softmax(opts.causal)
      if opts.probe then opts.probe("attn_probs", p) end
      return p:matmul(v)
    end
    function obj:parameters() return {} end
    return obj
  end,
})

return M
