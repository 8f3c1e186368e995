-- formats — fake quantisation to FP8 (E4M3, E5M2), MXFP4 and NVFP4, and the KV-cache quantiser
-- with the first tokens kept (engine/formats.c; docs/reference/compression.md, "FP8, MXFP4 and
-- NVFP4"). Definitions: OCP OFP8 rev. 1.0 (E4M3 max 448, E5M2 max 57344), OCP Microscaling v1.0
-- §6.3 (MXFP4: blocks of 32, scale 2^(floor(log2 amax) − 2), E2M1 elements), NVIDIA's NVFP4
-- (blocks of 16, E4M3 scale of amax/6 over a per-tensor FP32 scale amax/(6·448)). Round to
-- nearest even, saturating, subnormals on their grid, NaN kept.
--
--   local formats = require "outlierlab.compress.formats"
--   formats.round(x, "e4m3")            -> the nearest E4M3 value of a number
--   formats.quantize(x, fmt [, scaling]) -> a new tensor; fmt "e4m3" | "e5m2" | "e2m1" (scaled per
--       row of the last dim by default, scaling = "row" | "tensor" | "none") or "mxfp4" | "nvfp4"
--   formats.quantize_(w, fmt [, scaling]) -- in place (weights: a row = an output channel)
--   formats.kv(x, { bits = 4, per_channel = true, keep = 1, top = 0 }) -> x (B, T, D) as the KV cache
--       holds it; keep: the first tokens kept in full precision, top: further tokens kept, those with
--       the largest max|x|
local ol = require "outlierlab"
local C = ol.C

local M = {}
M.ELEMENT = { e4m3 = C.OL_FMT_E4M3, e5m2 = C.OL_FMT_E5M2, e2m1 = C.OL_FMT_E2M1 }
M.BLOCK = { mxfp4 = C.OL_MXFP4, nvfp4 = C.OL_NVFP4 }
M.MAX = { e4m3 = 448, e5m2 = 57344, e2m1 = 6 }
local SCALING = { none = 0, tensor = 1, row = 2 }

-- "int" or one of the names above; anything else is an error naming the key
function M.check(fmt, key)
  if fmt == nil or fmt == "int" or M.ELEMENT[fmt] or M.BLOCK[fmt] then return fmt end
  error(string.format("quant: %s = %q is not a format (int, e4m3, e5m2, e2m1, mxfp4, nvfp4)", key or "format", tostring(fmt)), 0)
end

function M.round(x, fmt)
  local f = M.ELEMENT[fmt] or error("formats.round: unknown element format " .. tostring(fmt), 2)
  return C.ol_fp_round(x, f)
end

local function scaling_of(s)
  local v = SCALING[s or "row"]
  if not v then error("formats: scaling must be none, tensor or row, got " .. tostring(s), 3) end
  return v
end

function M.quantize(x, fmt, scaling)
  if M.BLOCK[fmt] then return ol.check_ptr(C.ol_quant_mx(x, M.BLOCK[fmt])) end
  local f = M.ELEMENT[fmt] or error("formats.quantize: unknown format " .. tostring(fmt), 2)
  return ol.check_ptr(C.ol_quant_fp(x, f, scaling_of(scaling)))
end

function M.quantize_(w, fmt, scaling)
  if M.BLOCK[fmt] then return ol.check_status(C.ol_quant_mx_(w, M.BLOCK[fmt])) end
  local f = M.ELEMENT[fmt] or error("formats.quantize_: unknown format " .. tostring(fmt), 2)
  return ol.check_status(C.ol_quant_fp_(w, f, scaling_of(scaling)))
end

function M.kv(x, o)
  o = o or {}
  return ol.check_ptr(C.ol_quant_kv(x, o.bits or 4, o.per_channel == false and 0 or 1, o.keep or 0, o.top or 0))
end

return M
