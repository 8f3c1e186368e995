-- json — JSON for checkpoints and configs: a canonical encoder (sorted keys, numbers that
-- read back to the same double) so that the same state gives the same bytes, and Debian's
-- lua-cjson for decoding.
--   local json = require "outlierlab.util.json"
--   json.encode({b = 1, a = {0.1, 2}})  --> '{"a":[0.1,2],"b":1}'
--   json.decode('{"a":[1,2]}')          --> {a = {1, 2}}
-- Tables with keys 1..n only are arrays; an empty table is {} (an empty object). JSON null
-- decodes to nil inside objects.
local cjson = require("cjson").new()
cjson.decode_invalid_numbers(false)

local M = {}

local escapes = { ['"'] = '\\"', ['\\'] = '\\\\', ['\b'] = '\\b', ['\f'] = '\\f',
                  ['\n'] = '\\n', ['\r'] = '\\r', ['\t'] = '\\t' }
local function quote(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    return escapes[c] or string.format("\\u%04x", c:byte())
  end) .. '"'
end

local function num(x, path)
  if x ~= x or x == math.huge or x == -math.huge then
    error("json.encode: " .. path .. " is " .. tostring(x) .. " (not representable in JSON)", 0)
  end
  if x == math.floor(x) and math.abs(x) < 2 ^ 53 then return string.format("%d", x) end
  local s = string.format("%.15g", x)
  if tonumber(s) ~= x then s = string.format("%.17g", x) end
  return s
end

local function is_array(t)
  local n = #t
  local count = 0
  for k in pairs(t) do
    if type(k) ~= "number" or k < 1 or k > n or k ~= math.floor(k) then return false end
    count = count + 1
  end
  return count == n and n > 0
end

local function enc(v, out, path, seen)
  local tv = type(v)
  if tv == "string" then out[#out + 1] = quote(v)
  elseif tv == "number" then out[#out + 1] = num(v, path)
  elseif tv == "boolean" then out[#out + 1] = tostring(v)
  elseif v == nil or v == cjson.null then out[#out + 1] = "null"
  elseif tv == "table" then
    if seen[v] then error("json.encode: " .. path .. " contains a cycle", 0) end
    seen[v] = true
    if is_array(v) then
      out[#out + 1] = "["
      for i = 1, #v do
        if i > 1 then out[#out + 1] = "," end
        enc(v[i], out, path .. "[" .. i .. "]", seen)
      end
      out[#out + 1] = "]"
    else
      local keys = {}
      for k in pairs(v) do
        if type(k) ~= "string" and type(k) ~= "number" then
          error("json.encode: " .. path .. " has a key of type " .. type(k), 0)
        end
        keys[#keys + 1] = k
      end
      table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
      out[#out + 1] = "{"
      for i, k in ipairs(keys) do
        if i > 1 then out[#out + 1] = "," end
        out[#out + 1] = quote(tostring(k))
        out[#out + 1] = ":"
        enc(v[k], out, path .. "." .. tostring(k), seen)
      end
      out[#out + 1] = "}"
    end
    seen[v] = nil
  else
    error("json.encode: " .. path .. " is a " .. tv .. " (not representable in JSON)", 0)
  end
end

function M.encode(v)
  local out = {}
  enc(v, out, "value", {})
  return table.concat(out)
end

local function strip_null(v)
  if type(v) == "table" then
    for k, x in pairs(v) do
      if x == cjson.null then v[k] = nil else strip_null(x) end
    end
  end
  return v
end

-- decode(text, what): what names the source in the error message
function M.decode(text, what)
  local ok, v = pcall(cjson.decode, text)
  if not ok then error("json: cannot parse " .. (what or "text") .. ": " .. tostring(v), 2) end
  return strip_null(v)
end

M.null = cjson.null
-- Canonical JSON: sorted keys, %.17g numbers, so that the same table gives the same bytes
-- (used for the config attribute and for cache hashes). Strings are escaped by lua-cjson.
local cjson_default = require "cjson"
local function canon(v, out)
  local ty = type(v)
  if ty == "table" then
    local n = #v
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    if n > 0 and #keys == n then
      out[#out + 1] = "["
      for i = 1, n do
        if i > 1 then out[#out + 1] = "," end
        canon(v[i], out)
      end
      out[#out + 1] = "]"
    else
      for i, k in ipairs(keys) do keys[i] = tostring(k) end
      table.sort(keys)
      out[#out + 1] = "{"
      for i, k in ipairs(keys) do
        if i > 1 then out[#out + 1] = "," end
        out[#out + 1] = cjson_default.encode(k)
        out[#out + 1] = ":"
        local val = v[k]
        if val == nil then val = v[tonumber(k)] end
        canon(val, out)
      end
      out[#out + 1] = "}"
    end
  elseif ty == "number" then
    if v ~= v then out[#out + 1] = "NaN"
    elseif v == math.huge then out[#out + 1] = "Infinity"
    elseif v == -math.huge then out[#out + 1] = "-Infinity"
    elseif v == math.floor(v) and math.abs(v) < 2 ^ 53 then out[#out + 1] = string.format("%d", v)
    else out[#out + 1] = string.format("%.17g", v) end
  elseif ty == "string" then
    out[#out + 1] = cjson_default.encode(v)
  elseif ty == "boolean" then
    out[#out + 1] = tostring(v)
  elseif ty == "nil" then
    out[#out + 1] = "null"
  else
    out[#out + 1] = cjson_default.encode("<" .. ty .. ">")
  end
  return out
end
function M.canonical(v) return table.concat(canon(v, {})) end

return M
