-- config — a script's settings: defaults in the script, `--key=value` on the command line.
-- An unknown key, or a value that does not parse as the default's type, is an error that
-- names the key, suggests the nearest valid ones and lists them all (as nanoGPT's configurator
-- does): "unknown key --stpes; did you mean --steps? valid keys: …".
--
--   local cfg = require("outlierlab.config").get{ steps = 100, lr = 1e-3, model = { n_layer = 2 } }
--   -- bin/outlierlab run train.lua --steps=500 --model.n_layer=4
local M = {}

M.overrides = {}      -- key -> raw string, set by the CLI
M.consumed = {}       -- key -> true once a config call used it

-- parse "--a.b=value" arguments into M.overrides; returns the remaining positional args
function M.set_args(list)
  local rest = {}
  for _, a in ipairs(list) do
    local k, v = a:match("^%-%-([%w_%.%-]+)=(.*)$")
    if k then
      M.overrides[k] = v
    elseif a:match("^%-%-[%w_%.%-]+$") then
      M.overrides[a:sub(3)] = "true"
    else
      rest[#rest + 1] = a
    end
  end
  return rest
end

M.known = {}          -- key -> true for every key a config call offered (the suggestions' pool)

-- The edit distance of two strings with adjacent transpositions (Damerau–Levenshtein, optimal
-- string alignment): "stpes" is 1 from "steps", "defualt" 1 from "default", "so-fg3" 1 from "so-fig3".
function M.distance(a, b)
  local n, m = #a, #b
  local d = {}
  for i = 0, n do d[i] = { [0] = i } end
  for j = 0, m do d[0][j] = j end
  for i = 1, n do
    local ai = a:byte(i)
    for j = 1, m do
      local bj = b:byte(j)
      local v = math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (ai == bj and 0 or 1))
      if i > 1 and j > 1 and ai == b:byte(j - 1) and a:byte(i - 1) == bj then v = math.min(v, d[i - 2][j - 2] + 1) end
      d[i][j] = v
    end
  end
  return d[n][m]
end

-- The candidates nearest to word, sorted: those at the smallest distance when it is at most 2
-- and less than half the word (so a two-letter typo is not "corrected" into another word),
-- or {}.
function M.nearest(word, candidates)
  word = tostring(word)
  local best, out = math.huge, {}
  for _, c in ipairs(candidates) do
    local dist = M.distance(word, c)
    if dist < best then best, out = dist, { c } elseif dist == best then out[#out + 1] = c end
  end
  if best > 2 or best * 2 >= math.max(#word, 2) then return {} end
  table.sort(out)
  return out
end

-- the joint between an error's subject and what follows: "; did you mean PREFIXx? " (or
-- "PREFIXx or PREFIXy") when something is near, else "; "
function M.did_you_mean(word, candidates, prefix)
  local near = M.nearest(word, candidates)
  if #near == 0 then return "; " end
  for i, c in ipairs(near) do near[i] = (prefix or "") .. c end
  return "; did you mean " .. table.concat(near, " or ") .. "? "
end

local function keys_of(t, prefix, out)
  for k, v in pairs(t) do
    local full = prefix and (prefix .. "." .. k) or k
    if type(v) == "table" and next(v) ~= nil and #v == 0 then keys_of(v, full, out) else out[#out + 1] = full end
  end
  return out
end

local function parse_as(key, raw, default)
  local ty = type(default)
  if ty == "number" then
    local n = tonumber(raw)
    if not n then error(string.format("config: --%s=%s: expected a number", key, raw), 0) end
    if n ~= n or n == math.huge or n == -math.huge then
      error(string.format("config: --%s=%s: expected a finite number", key, raw), 0)
    end
    return n
  elseif ty == "boolean" then
    if raw == "true" or raw == "1" then return true end
    if raw == "false" or raw == "0" then return false end
    error(string.format("config: --%s=%s: expected true or false", key, raw), 0)
  elseif ty == "string" then
    return raw
  elseif ty == "table" then   -- a list: comma-separated, element type from the first default element
    local out = {}
    for item in raw:gmatch("[^,]+") do
      out[#out + 1] = default[1] ~= nil and parse_as(key, item, default[1]) or item
    end
    return out
  end
  error(string.format("config: --%s cannot be set from the command line (its default is a %s)", key, ty), 0)
end

local function deep_copy(t)
  if type(t) ~= "table" then return t end
  local o = {}
  for k, v in pairs(t) do o[k] = deep_copy(v) end
  return o
end
M.deep_copy = deep_copy

-- Merge the command-line overrides into a copy of defaults. prefix limits which overrides
-- apply (e.g. only keys under "train."), nil takes them all. strict: an override that
-- names no key of defaults is an error. opts.overrides: these key -> raw string settings
-- instead of the command line's (and none is marked consumed).
function M.get(defaults, opts)
  opts = opts or {}
  local cfg = deep_copy(defaults)
  local valid = keys_of(defaults, nil, {})
  table.sort(valid)
  local set = {}
  for _, k in ipairs(valid) do set[k], M.known[k] = true, true end
  for key, raw in pairs(opts.overrides or M.overrides) do
    if set[key] then
      local node, parts = cfg, {}
      for p in key:gmatch("[^%.]+") do parts[#parts + 1] = p end
      local dnode = defaults
      for i = 1, #parts - 1 do node = node[parts[i]]; dnode = dnode[parts[i]] end
      node[parts[#parts]] = parse_as(key, raw, dnode[parts[#parts]])
      if not opts.overrides then M.consumed[key] = true end
    elseif opts.strict ~= false and not (opts.ignore and opts.ignore[key]) then
      -- the keys the caller handles elsewhere (opts.ignore: the runner's --profile, --out, …) are
      -- valid too, so they may be suggested
      local pool = { unpack(valid) }
      for k in pairs(opts.ignore or {}) do pool[#pool + 1] = k end
      error(string.format("config: unknown key --%s%svalid keys: %s", key, M.did_you_mean(key, pool, "--"),
                          table.concat(valid, ", ")), 0)
    end
  end
  return cfg
end

-- the keys of set for which keep(key) is true (every key without keep), sorted
local function sorted_keys(set, keep)
  local out = {}
  for k in pairs(set) do if not keep or keep(k) then out[#out + 1] = k end end
  table.sort(out)
  return out
end

-- every key the config calls so far offered
function M.known_keys() return sorted_keys(M.known) end

-- keys given on the command line that no config call used
function M.unconsumed() return sorted_keys(M.overrides, function(k) return not M.consumed[k] end) end

return M
