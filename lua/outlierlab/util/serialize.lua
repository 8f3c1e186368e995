-- serialize — plain data (numbers incl. NaN/inf, strings, booleans, tables with any keys) to
-- Lua source and back: an exact round trip (numbers as %.17g), unlike JSON with sparse numeric
-- keys, and canonical (keys sorted), so equal data gives equal text. Functions and cdata are
-- not data and come back as nil. Used for cache files and to move analysis state between MPI
-- ranks.
--   local s = require("outlierlab.util.serialize")
--   local text = s.serialize(v)          -- "return {...}\n"
--   local v2 = s.deserialize(text, "@file")   -- nil, err on a malformed text
local M = {}

local function ser(v, out)
  local ty = type(v)
  if ty == "number" then
    if v ~= v then out[#out + 1] = "0/0"
    elseif v == math.huge then out[#out + 1] = "math.huge"
    elseif v == -math.huge then out[#out + 1] = "-math.huge"
    else out[#out + 1] = string.format("%.17g", v) end
  elseif ty == "string" then out[#out + 1] = string.format("%q", v)
  elseif ty == "boolean" then out[#out + 1] = tostring(v)
  elseif ty == "table" then
    out[#out + 1] = "{"
    local n = #v
    for i = 1, n do ser(v[i], out); out[#out + 1] = "," end
    local keys = {}
    for k in pairs(v) do
      if not (type(k) == "number" and k >= 1 and k <= n and k == math.floor(k)) then keys[#keys + 1] = k end
    end
    table.sort(keys, function(a, b)
      if type(a) == type(b) then return a < b end
      return type(a) == "number"
    end)
    for _, k in ipairs(keys) do
      out[#out + 1] = "["; ser(k, out); out[#out + 1] = "]="; ser(v[k], out); out[#out + 1] = ","
    end
    out[#out + 1] = "}"
  else
    out[#out + 1] = "nil"   -- functions, cdata: not data
  end
  return out
end

function M.serialize(v) return "return " .. table.concat(ser(v, {})) .. "\n" end

function M.deserialize(text, what)
  local chunk, err = loadstring(text, what)
  if not chunk then return nil, err end
  setfenv(chunk, { math = math })
  local ok, v = pcall(chunk)
  if not ok then return nil, v end
  return v
end

return M
