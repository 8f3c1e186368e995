-- figure — one declaration per figure drives its NetCDF file, the data handed to gnuplot, the
-- panels drawn and the numbers its summary quotes (docs/reference/experiments.md, "Declaring a figure").
--
--   local figure = require "outlierlab.figure"
--   local FIG = figure.declare{
--     title = "Activation outliers in h",         -- may name scalar vars and attrs: "{=peak_layer}", "{@tau}"
--     dims = {                                    -- ordered; each becomes a coordinate variable
--       { "layer", long_name = "transformer layer (0-based)" },
--       { "category", long_name = "token category", labels = true },   -- categorical: string labels
--       { "rank", long_name = "rank among the largest |h|" },
--     },
--     vars = {                                    -- ordered; dims = {} is a scalar (a number the summary quotes)
--       { "top_abs", dims = { "layer", "rank" }, long_name = "k-th largest |h| per sequence, averaged", units = "1" },
--       { "outlier_tokens", dims = { "category" }, long_name = "outlier tokens by category", units = "1", type = "int" },
--       { "peak_ratio", dims = {}, long_name = "max over layers of top-1 / median", units = "1" },
--     },
--     panels = {                                  -- or function(data) -> list of panels
--       { kind = "line", x = "layer", y = { "top_abs" }, logy = true, title = "largest |h| per layer" },
--       { kind = "bars", x = "category", y = "outlier_tokens", title = "outlier tokens",
--         why_empty = "no outlier token at τ = {@tau}" },
--     },
--   }
--   -- the analysis returns plain data (cached by the runner):
--   return { coords = { layer = {0, 1}, category = {"initial", ...}, rank = 3 },   -- values, labels or a length
--            vars = { top_abs = {{...}, ...}, outlier_tokens = {...}, peak_ratio = 41.2 },
--            attrs = { tau = 100 } }                                               -- global attributes
--   stages = { ..., { "plot", figure.stage(FIG) } }
--   summary: local v = figure.values(FIG, run.out.analyze); v.peak_ratio, v.top_abs[3], v.top_abs(2, 1) ...
--            (an undeclared name is an error: every number a summary quotes is in the file)
--
-- NetCDF: every dim gets a coordinate variable; a categorical dim (labels) gets integer codes
-- 0..n-1 with CF flag_values / flag_meanings and its labels as a JSON list (attribute "labels").
-- Data may be nested or flat row-major lists; nil, NaN and false-y holes are undefined: NaN in a
-- double or float variable (double variables carry _FillValue = NaN), _FillValue -2147483647
-- in an int variable. A dim of length 0 is written with length 1 and every value on it undefined
-- (attribute "empty" = 1 on its coordinate).
--
-- Panels (plots/figure.gp draws them with plots/panels/<kind>.gp; the layout rows × cols follows
-- the number of panels):
--   line       x = dim, y = var or list of vars over x (one line each)      opts: logy, logx, err
--   bars       x = dim (labels on the axis), y = var or list (clustered)     opts: logy, err, values
--   histogram  x = dim whose coordinate values are bin centres, y = counts  opts: logx, logy
--   scatter    x = var, y = var (same dims, flattened to points)           opts: logx, logy
--   heatmap    z = var over {y dim, x dim}; marks = var of 0/1 flags over x (vertical lines, e.g.
--              delimiter or sink columns); opts: logcb, cblabel, symmetric (colour scale ±max|z|),
--              values = "%.1f" (each cell's value written in it, up to 150 cells)
--   rgb        z = var over {y dim, x dim, channel(3)} with values 0..255 (an image); circles = var
--              over a coarse grid {rows, cols} laid on the image: a circle on each cell > 0
--              (circles_title: its key; circles_none: the note when no cell is marked)
-- line and bars: a y var with one dim besides x gives a series per coordinate of that dim ("{dim}"
-- in the var's label names each); series = dim draws one line (or one bar of each cluster) per
-- coordinate of that dim, y then being one var over {series, x}; err = var (or list, parallel to
-- y) of standard deviations: error bars; values = "%.3g" writes each bar's value above it ("n/a"
-- where undefined).
-- same_y = true (line, bars): every panel of the declaration (each, at) gets the same y axis.
-- every panel: title, note (a second title line), xlabel, ylabel, each = dim or {dims} (one panel
-- per coordinate value; the vars are sliced there), at = {dim = index} (a fixed slice, 0-based),
-- why_empty (what an empty panel says: all its values undefined, or all zero with
-- zero_is_empty = true), x_labels = false (no tick labels from a categorical x dim). In title,
-- note and why_empty "{dim}" is the coordinate label of the slice, "{=var}" a scalar var's value
-- (or a var whose dims the panel's slice fixes) and "{@attr}" a global attribute.
-- Axes end at the data: a line's x axis spans the points where some series is defined, bars
-- start at zero (or the most negative bar), integer axes get integer tick steps, short log axes
-- 1-2-5 ticks, a constant heat map a colour scale from zero to its value; long category labels are
-- broken into lines or turned upright; an empty panel is a frame with its reason.
local results = require "outlierlab.figure.netcdf"
local plot = require "outlierlab.figure.gnuplot"
local json = require "cjson"

local M = {}

local KINDS = { line = true, bars = true, histogram = true, scatter = true, heatmap = true, rgb = true }
M.KINDS = KINDS
local INT_FILL = -2147483647
M.INT_FILL = INT_FILL

local Fig = {}
Fig.__index = Fig

local function fail(fig, msg, lvl) error("figure '" .. tostring(fig.title) .. "': " .. msg, lvl or 3) end

-- ---------------------------------------------------------------- declaration
function M.declare(d)
  if type(d) ~= "table" then error("figure.declare: a table is required", 2) end
  local self = setmetatable({ title = d.title or "", dims = {}, dim_order = {}, vars = {}, var_order = {},
                              panels = d.panels or {}, width = d.width, height = d.height }, Fig)
  if type(self.title) ~= "string" or self.title == "" then error("figure.declare: title is required", 2) end
  for i, dd in ipairs(d.dims or {}) do
    local name = dd[1] or dd.name
    if type(name) ~= "string" or not name:match("^[%a][%w_]*$") then fail(self, "dim " .. i .. " needs a name", 2) end
    if self.dims[name] then fail(self, "dim '" .. name .. "' declared twice", 2) end
    self.dims[name] = { name = name, long_name = dd.long_name or name, units = dd.units or "1", labels = dd.labels,
                        values = dd.values }
    self.dim_order[#self.dim_order + 1] = name
  end
  for i, vd in ipairs(d.vars or {}) do
    local name = vd[1] or vd.name
    if type(name) ~= "string" or not name:match("^[%a][%w_]*$") then fail(self, "var " .. i .. " needs a name", 2) end
    if self.vars[name] or self.dims[name] then fail(self, "var '" .. name .. "' declared twice or named like a dim", 2) end
    if type(vd.long_name) ~= "string" or vd.long_name == "" then fail(self, "var '" .. name .. "' needs long_name", 2) end
    if type(vd.units) ~= "string" or vd.units == "" then fail(self, "var '" .. name .. "' needs units (\"1\" for counts and ratios)", 2) end
    local ty = vd.type or "double"
    if ty ~= "double" and ty ~= "float" and ty ~= "int" then fail(self, "var '" .. name .. "': type must be double, float or int", 2) end
    for _, dn in ipairs(vd.dims or {}) do
      if not self.dims[dn] then fail(self, "var '" .. name .. "' uses undeclared dim '" .. tostring(dn) .. "'", 2) end
    end
    self.vars[name] = { name = name, dims = vd.dims or {}, long_name = vd.long_name, units = vd.units, type = ty,
                        label = vd.label, attrs = vd.attrs }
    self.var_order[#self.var_order + 1] = name
  end
  if type(self.panels) == "table" then self:check_panels(self.panels, 2) end
  return self
end

local function list_of(v) if v == nil then return {} end if type(v) == "table" then return v end return { v } end

function Fig:check_panels(panels, lvl)
  for i, p in ipairs(panels) do
    local where = "panel " .. i .. " (" .. tostring(p.kind) .. ")"
    if not KINDS[p.kind] then fail(self, where .. ": kind must be line, bars, histogram, scatter, heatmap or rgb", lvl + 1) end
    for _, d in ipairs(list_of(p.each)) do
      if not self.dims[d] then fail(self, where .. ": each names undeclared dim '" .. tostring(d) .. "'", lvl + 1) end
    end
    for d in pairs(p.at or {}) do
      if not self.dims[d] then fail(self, where .. ": at names undeclared dim '" .. tostring(d) .. "'", lvl + 1) end
    end
    local need = {}   -- a copy: the panel's own lists stay as declared
    for _, v in ipairs((p.kind == "heatmap" or p.kind == "rgb") and { p.z } or list_of(p.y)) do need[#need + 1] = v end
    if p.kind == "scatter" then need[#need + 1] = p.x end
    if #need == 0 or need[1] == nil then fail(self, where .. ": names no variable", lvl + 1) end
    for _, v in ipairs({ p.marks, p.circles }) do need[#need + 1] = v end
    for _, v in ipairs(list_of(p.err)) do need[#need + 1] = v end
    for _, v in ipairs(need) do
      if not self.vars[v] then fail(self, where .. ": undeclared var '" .. tostring(v) .. "'", lvl + 1) end
    end
    if (p.kind == "line" or p.kind == "bars" or p.kind == "histogram") and not self.dims[p.x] then
      fail(self, where .. ": x must be a declared dim", lvl + 1)
    end
    if p.series ~= nil then
      if p.kind ~= "line" and p.kind ~= "bars" then fail(self, where .. ": series is for line and bars panels", lvl + 1) end
      if not self.dims[p.series] then fail(self, where .. ": series names undeclared dim '" .. tostring(p.series) .. "'", lvl + 1) end
      if #list_of(p.y) ~= 1 or #list_of(p.err) > 1 then fail(self, where .. ": with series, y (and err) is one var", lvl + 1) end
    end
    if p.err ~= nil and #list_of(p.err) ~= #list_of(p.y) then fail(self, where .. ": err needs one var per y var", lvl + 1) end
  end
end
-- ---------------------------------------------------------------- data
local function flatten(v, out)
  if type(v) ~= "table" then out[#out + 1] = v return out end
  local n = 0
  for k in pairs(v) do if type(k) == "number" and k > n then n = k end end
  n = math.max(n, #v)
  for i = 1, n do
    local x = v[i]
    if type(x) == "table" then flatten(x, out) else out[#out + 1] = x end
  end
  return out
end

-- the coordinate of a dim from data: { n =, values = {numbers}, labels = {strings} or nil }
function Fig:coord(data, name)
  local dd = self.dims[name]
  local c = (data.coords or {})[name]
  if c == nil then c = dd.values or dd.labels end
  if type(c) == "number" then
    local values = {}
    for i = 1, c do values[i] = i - 1 end
    return { n = c, values = values }
  end
  if type(c) ~= "table" then fail(self, "data.coords." .. name .. " is missing (values, labels or a length)", 4) end
  local labels = dd.labels and true or false
  for i = 1, #c do if type(c[i]) == "string" then labels = true end end
  if labels then
    local values, lab = {}, {}
    for i = 1, #c do values[i], lab[i] = i - 1, tostring(c[i]) end
    return { n = #c, values = values, labels = lab }
  end
  return { n = #c, values = c }
end

-- shape and flat values of a var (NaN for undefined entries)
function Fig:var_data(data, name)
  local vd = self.vars[name]
  if not vd then fail(self, "undeclared var '" .. tostring(name) .. "'", 4) end
  local shape, count = {}, 1
  for i, dn in ipairs(vd.dims) do
    shape[i] = self:coord(data, dn).n
    count = count * shape[i]
  end
  local raw = (data.vars or {})[name]
  local flat
  if raw == nil then flat = {}
  elseif type(raw) == "table" then flat = flatten(raw, {})
  else flat = { raw } end
  if #flat > count then
    fail(self, string.format("var '%s': %d values for dims (%s) of %d elements", name, #flat, table.concat(vd.dims, ","), count), 4)
  end
  if raw ~= nil and #flat ~= count and count > 0 then
    fail(self, string.format("var '%s': %d values for dims (%s) of %d elements", name, #flat, table.concat(vd.dims, ","), count), 4)
  end
  local out = {}
  for i = 1, count do
    local v = flat[i]
    if type(v) == "boolean" then v = v and 1 or 0 end
    if type(v) ~= "number" then v = 0 / 0 end
    out[i] = v
  end
  return out, shape
end

-- The numbers a summary may quote: v.name is a scalar var's value, or the flat list of an
-- array var (v.name.shape) that can also be indexed by its dims, 1-based: v.name(i, j); an
-- undeclared name is an error.
local function index_call(vals, ...)
  local idx = { ... }
  local shape = vals.shape
  if #idx ~= #shape then error(string.format("figure.values: %d indices for %d dims", #idx, #shape), 2) end
  local k = 0
  for d = 1, #shape do
    local i = idx[d]
    if type(i) ~= "number" or i < 1 or i > shape[d] or i ~= math.floor(i) then
      error(string.format("figure.values: index %s of dim %d out of 1..%d", tostring(i), d, shape[d]), 2)
    end
    k = k * shape[d] + (i - 1)
  end
  return vals[k + 1]
end
function M.values(fig, data)
  return setmetatable({}, { __index = function(_, name)
    local vals, shape = fig:var_data(data, name)
    if #shape == 0 then return vals[1] end
    vals.shape = shape
    return setmetatable(vals, { __call = index_call })
  end })
end

-- ---------------------------------------------------------------- NetCDF
-- CF flag_meanings: words of letters, digits and _-.+@ (one per code)
local function flag_word(s, i)
  local w = s:gsub("%s", "_"):gsub("[^%w_%-%.%+@]", function(ch) return string.format("x%02X", ch:byte()) end)
  if w == "" then w = "code" .. (i - 1) end
  return w
end
M.flag_word = flag_word

function Fig:netcdf(nc, data)
  for _, dn in ipairs(self.dim_order) do
    local dd, c = self.dims[dn], self:coord(data, dn)
    local attrs = { long_name = dd.long_name, units = dd.units }
    local n, values = c.n, c.values
    if n == 0 then n, values, attrs.empty = 1, { 0 }, 1 end
    if c.labels then
      local words = {}
      for i, l in ipairs(c.labels) do words[i] = flag_word(l, i) end
      attrs.type = "int"
      attrs.flag_values = values
      attrs.flag_meanings = table.concat(words, " ")
      attrs.labels = json.encode(c.labels)
    end
    nc:dim(dn, n, values, attrs)
  end
  for _, vn in ipairs(self.var_order) do
    local vd = self.vars[vn]
    local vals = self:var_data(data, vn)
    local dims = vd.dims
    local count = 1
    for _, dn in ipairs(dims) do count = count * math.max(1, self:coord(data, dn).n) end
    if #vals < count then for i = #vals + 1, count do vals[i] = 0 / 0 end end   -- an empty dim written with length 1
    local attrs = { long_name = vd.long_name, units = vd.units, type = vd.type }
    for k, v in pairs(vd.attrs or {}) do attrs[k] = v end
    local undefined = false
    for i = 1, count do if vals[i] ~= vals[i] then undefined = true break end end
    if vd.type == "int" then
      if undefined then
        for i = 1, count do if vals[i] ~= vals[i] then vals[i] = INT_FILL end end
      end
      attrs._FillValue = INT_FILL
    elseif vd.type == "double" then
      attrs._FillValue = 0 / 0
    end
    nc:var(vn, dims, vals, attrs)
  end
  for k, v in pairs(data.attrs or {}) do nc:attr(k, v) end
end

-- ---------------------------------------------------------------- panels
-- expand `each` into one panel per coordinate index, `at` fixing further dims; returns the list
-- of { p =, at = {dim = index} }
function Fig:expand(panels, data)
  local out = {}
  for pi, p in ipairs(panels) do
    for d, i in pairs(p.at or {}) do
      local n = self:coord(data, d).n
      if type(i) ~= "number" or i < 0 or i >= n or i ~= math.floor(i) then
        fail(self, string.format("panel %d: at.%s = %s is not an index 0..%d", pi, d, tostring(i), n - 1), 4)
      end
    end
    local each = list_of(p.each)
    local function rec(k, at)
      if k > #each then
        local a = {}
        for d, i in pairs(p.at or {}) do a[d] = i end
        for d, i in pairs(at) do a[d] = i end
        out[#out + 1] = { p = p, at = a }
        return
      end
      local n = self:coord(data, each[k]).n
      for i = 0, n - 1 do at[each[k]] = i rec(k + 1, at) end
      at[each[k]] = nil
    end
    rec(1, {})
  end
  return out
end

local function fmt_num(v)
  if v ~= v then return "n/a" end
  if v == math.floor(v) and math.abs(v) < 1e15 then return string.format("%d", v) end
  return string.format("%.3g", v)
end

-- the label of coordinate index i of dim
function Fig:label(data, dn, i)
  local c = self:coord(data, dn)
  if c.labels then return c.labels[i + 1] end
  return fmt_num(c.values[i + 1])
end

-- "{dim}" -> the coordinate label at the slice, "{=var}" -> a scalar var (or a var at the slice),
-- "{@attr}" -> an attribute
function Fig:subst(data, s, at)
  if type(s) ~= "string" then return s end
  s = s:gsub("{=([%w_]+)}", function(vn)
    if not self.vars[vn] then fail(self, "'{=" .. vn .. "}' names an undeclared var", 5) end
    local vals = self:slice(data, vn, at)
    if #vals ~= 1 then fail(self, "'{=" .. vn .. "}' names a var that is not a scalar at this panel's slice", 5) end
    return fmt_num(vals[1])
  end)
  s = s:gsub("{@([%w_]+)}", function(an)
    local v = (data.attrs or {})[an]
    if v == nil then fail(self, "'{@" .. an .. "}' names no attribute of the data", 5) end
    return type(v) == "number" and fmt_num(v) or tostring(v)
  end)
  s = s:gsub("{([%w_]+)}", function(d) if at[d] then return self:label(data, d, at[d]) end end)
  return s
end

-- values of var sliced at `at` (dims fixed there), with the remaining dims' names and sizes
function Fig:slice(data, vn, at)
  local vd = self.vars[vn]
  local vals, shape = self:var_data(data, vn)
  local rest, rshape = {}, {}
  local strides = {}
  local s = 1
  for i = #shape, 1, -1 do strides[i] = s s = s * shape[i] end
  local base = 0
  for i, dn in ipairs(vd.dims) do
    if at[dn] then base = base + at[dn] * strides[i]
    else rest[#rest + 1] = i rshape[#rshape + 1] = shape[i] end
  end
  local out = {}
  local function rec(k, off)
    if k > #rest then out[#out + 1] = vals[off + 1] return end
    local i = rest[k]
    for j = 0, shape[i] - 1 do rec(k + 1, off + j * strides[i]) end
  end
  rec(1, base)
  local names = {}
  for k, i in ipairs(rest) do names[k] = vd.dims[i] end
  return out, names, rshape
end

local function all_undefined(vals, zero)
  for _, v in ipairs(vals) do
    if v == v and not (zero and v == 0) then return false end
  end
  return true
end
local function finite(v) return v == v and v ~= math.huge and v ~= -math.huge end

local function gq(s)   -- a gnuplot single-quoted string
  return "'" .. tostring(s or ""):gsub("\n", " "):gsub("'", "''") .. "'"
end

-- characters (not bytes) of a UTF-8 string
local function utf8_len(str) local _, n = str:gsub("[^\128-\191]", "") return n end

-- a label wider than w characters broken at spaces into lines of at most w (the data keep it on
-- one line); nil when a word alone is wider than w + 4 or more than 3 lines are needed
local function wrap(l, w)
  if utf8_len(l) <= w then return l end
  local lines, cur = {}, ""
  for word in l:gmatch("%S+") do
    if utf8_len(word) > w + 4 then return nil end
    if cur == "" then cur = word
    elseif utf8_len(cur) + 1 + utf8_len(word) <= w then cur = cur .. " " .. word
    else lines[#lines + 1] = cur cur = word end
  end
  lines[#lines + 1] = cur
  if #lines > 3 then return nil end
  return table.concat(lines, "\n")
end
-- the width of a label in characters (its longest line)
local function width(l)
  local w = 0
  for line in (l .. "\n"):gmatch("([^\n]*)\n") do w = math.max(w, utf8_len(line)) end
  return w
end

-- tick labels "('a' 0, 'b' 1, ...)" for a categorical axis, thinned to at most max_n labels
-- (every step-th: the second result; thinned() says so in the axis title); a label with a line
-- break becomes a double-quoted gnuplot string ("\n" is the break)
local function tics(labels, max_n)
  local n = #labels
  local step = math.max(1, math.ceil(n / (max_n or 40)))
  local parts = {}
  for i = 1, n, step do
    local l = labels[i]:gsub("%%", "%%%%")   -- an explicit tick label is a format: % would format the position
    -- a label with a line break or an apostrophe goes in double quotes: the tick command is itself
    -- a single-quoted string, and gnuplot cannot read a doubled quote ('') inside one ('''')
    local q = l:find("[\n']") and ('"' .. l:gsub("\\", "\\\\"):gsub('"', '\\"'):gsub("\n", "\\n") .. '"') or gq(l)
    parts[#parts + 1] = q .. " " .. (i - 1)
  end
  return "(" .. table.concat(parts, ", ") .. ")", step
end
-- an axis title that says its tick labels are thinned: "token (every 2nd labelled)"
local function thinned(label, step)
  if not step or step <= 1 then return label end
  local nth = step == 2 and "2nd" or step == 3 and "3rd" or (step .. "th")
  return (label and label ~= "" and (label .. " ") or "") .. "(every " .. nth .. " labelled)"
end
M.thinned = thinned

-- the tick step of an integer axis from lo to hi: 1, 2, 5, 10, 20, ... (at most ~10 ticks)
local function int_step(lo, hi)
  local raw = (hi - lo) / 10
  if not (raw > 1) then return 1 end
  local mag = 10 ^ math.floor(math.log10(raw))
  for _, m in ipairs({ 1, 2, 5, 10 }) do if m * mag >= raw then return m * mag end end
  return 10 * mag
end
M.int_step = int_step

-- tick marks of a log axis that spans less than three decades (gnuplot would mark only the
-- powers of ten, maybe none): 1, 2, 5 × 10^k, or every integer multiple for less than a factor 3
local function log_tics(lo, hi, axis)
  if not (lo > 0 and hi > lo) or hi / lo >= 1000 then return nil end
  local mult = hi / lo < 3 and { 1, 2, 3, 4, 5, 6, 7, 8, 9 } or { 1, 2, 5 }
  local out = {}
  for k = math.floor(math.log10(lo)), math.ceil(math.log10(hi)) do
    for _, m in ipairs(mult) do
      local v = m * 10 ^ k
      if v >= lo / 10 and v <= hi * 10 then out[#out + 1] = string.format("%g", v) end
    end
  end
  return "set " .. (axis or "y") .. "tics (" .. table.concat(out, ", ") .. ")"
end

-- the rows and columns of a layout for n panels: as square as possible, wider than tall
function M.layout(n)
  if n <= 0 then return 1, 1 end
  local cols = math.ceil(math.sqrt(n))
  if cols > 6 then cols = 6 end
  local rows = math.ceil(n / cols)
  return rows, cols
end

-- a heatmap axis: tick labels from a categorical coordinate, or from coordinate values that are
-- not 0..n-1 (the image is drawn over indices), else an integer tick step
local function heat_axis(c, p, which)
  local labels = c.labels
  if not labels then
    for i, v in ipairs(c.values) do
      if v ~= i - 1 then
        labels = {}
        for j, w in ipairs(c.values) do labels[j] = fmt_num(w) end
        break
      end
    end
  end
  if labels then
    if p[which .. "_labels"] == false then return nil, 0 end
    local many = #labels > 12
    local font = (c.labels and many) and " font ',7'" or ""
    local rot = (which == "x" and c.labels and many) and " rotate by 90 right" or ""
    local cmd, step = tics(labels, p.max_labels or 48)
    return "set " .. which .. "tics " .. cmd .. rot .. font, 0, step
  end
  return nil, int_step(0, c.n - 1)
end

-- the series of a line or bars panel: { name =, y = {...}, e = {...} or nil } over x's coordinate
function Fig:series_of(data, p, at, pi)
  local ys, es = list_of(p.y), list_of(p.err)
  local out = {}
  local function check(names, vn, want)
    local ok = #names == #want
    for i = 1, #want do ok = ok and names[i] == want[i] end
    if not ok then
      fail(self, string.format("panel %d: var '%s' sliced to dims (%s), needs exactly (%s)", pi, vn, table.concat(names, ","),
                               table.concat(want, ",")), 5)
    end
  end
  if p.series then
    local v, names, shape = self:slice(data, ys[1], at)
    local si = names[1] == p.series and 1 or 2
    check(names, ys[1], si == 1 and { p.series, p.x } or { p.x, p.series })
    local e
    if es[1] then
      local en
      e, en = self:slice(data, es[1], at)
      check(en, es[1], names)
    end
    local ns, nx = shape[si], shape[3 - si]
    for s = 1, ns do
      local y, ee = {}, e and {} or nil
      for j = 1, nx do
        local k = si == 1 and ((s - 1) * nx + j) or ((j - 1) * ns + s)
        y[j] = v[k]
        if ee then ee[j] = e[k] end
      end
      out[s] = { name = self:label(data, p.series, s - 1), y = y, e = ee }
    end
    return out
  end
  for k, vn in ipairs(ys) do
    local v, names, shape = self:slice(data, vn, at)
    local e, en
    if es[k] then e, en = self:slice(data, es[k], at) check(en, es[k], names) end
    if #names == 2 and (names[1] == p.x or names[2] == p.x) then
      -- one more dim than x: a series per coordinate of it ("{dim}" in the var's label names it)
      local xi = names[1] == p.x and 1 or 2
      local d, nd, nx = names[3 - xi], shape[3 - xi], shape[xi]
      for s = 1, nd do
        local y, ee = {}, e and {} or nil
        for j = 1, nx do
          local kk = xi == 2 and ((s - 1) * nx + j) or ((j - 1) * nd + s)
          y[j] = v[kk]
          if ee then ee[j] = e[kk] end
        end
        local sat = { [d] = s - 1 }
        for dd, i in pairs(at) do sat[dd] = i end
        out[#out + 1] = { name = self:subst(data, self.vars[vn].label or (vn .. " {" .. d .. "}"), sat), y = y, e = ee }
      end
    else
      check(names, vn, { p.x })
      out[#out + 1] = { name = self:subst(data, self.vars[vn].label or vn, at), y = v, e = e }
    end
  end
  return out
end

-- the data block and the settings of a line, bars or histogram panel (nil when it is empty)
-- the y extent of a panel's series (with their error bars): lo, hi (positive values only for a
-- log axis); nil when nothing is drawable
local function y_bounds(series, logy)
  local lo, hi = math.huge, -math.huge
  for _, s in ipairs(series) do
    for i, y in ipairs(s.y) do
      local e = s.e and s.e[i] or 0
      if not finite(e) then e = 0 end
      if finite(y) and not (logy and y <= 0) then
        lo, hi = math.min(lo, (logy and y - e <= 0) and y or y - e), math.max(hi, y + e)
      end
    end
  end
  if lo > hi then return nil end
  return lo, hi
end

-- shared = { lo, hi }: the y extent of every panel of a same_y declaration (the axes agree)
function Fig:plan_xy(data, p, at, pi, lines, shared)
  local xc = self:coord(data, p.x)
  local series = self:series_of(data, p, at, pi)
  local xs = xc.values
  local xlabels = p.x_labels ~= false and xc.labels or nil
  local any = false
  for _, s in ipairs(series) do if not all_undefined(s.y, p.zero_is_empty) then any = true end end
  if not any or #xs == 0 then return nil end
  local has_err = false
  for _, s in ipairs(series) do if s.e then has_err = true end end
  local vfmt = p.kind == "bars" and p.values or nil
  local cols = { p.x }
  for k, s in ipairs(series) do cols[1 + k] = s.name end
  if has_err then for _, s in ipairs(series) do cols[#cols + 1] = "sd " .. s.name end end
  -- y range: bars from zero (or the lowest bar), room for the error bars and the value labels
  local lo, hi = 0, 0
  local ymin_pos = math.huge
  for _, s in ipairs(series) do
    for i = 1, #xs do
      local y, e = s.y[i], s.e and s.e[i] or 0
      if not finite(e) then e = 0 end
      if finite(y) then
        lo, hi = math.min(lo, y - e), math.max(hi, y + e)
        if y > 0 then ymin_pos = math.min(ymin_pos, y) end
      end
    end
  end
  local pad = (hi - lo) * 0.02
  if vfmt then
    for _, s in ipairs(series) do cols[#cols + 1] = "y of the value of " .. s.name end
    for _, s in ipairs(series) do cols[#cols + 1] = "value of " .. s.name end
  end
  if xlabels then cols[#cols + 1] = "label" end
  local rows = {}
  for i = 1, #xs do
    local r = { xs[i] }
    for _, s in ipairs(series) do r[#r + 1] = s.y[i] end
    if has_err then for _, s in ipairs(series) do r[#r + 1] = s.e and s.e[i] or 0 / 0 end end
    if vfmt then
      for _, s in ipairs(series) do
        local y, e = s.y[i], s.e and s.e[i] or 0
        if not finite(e) then e = 0 end
        if not finite(y) then r[#r + 1] = p.logy and ymin_pos or 2 * pad
        elseif p.logy then r[#r + 1] = (y + e) * 1.15
        elseif y >= 0 then r[#r + 1] = y + e + (e > 0 and 2.5 or 1.5) * pad
        else r[#r + 1] = y - e - 3 * pad end
      end
      for _, s in ipairs(series) do
        local y = s.y[i]
        r[#r + 1] = finite(y) and string.format(vfmt, y) or "n/a"
      end
    end
    if xlabels then r[#r + 1] = xlabels[i] end
    rows[i] = r
  end
  -- x range: bars and histograms over every coordinate, lines over the points that are drawn
  local xmin, xmax, all_int = math.huge, -math.huge, not xlabels
  for i, x in ipairs(xs) do
    local drawn = p.kind ~= "line"
    if not drawn then
      for _, s in ipairs(series) do
        local y = s.y[i]
        if finite(y) and not (p.logy and y <= 0) then drawn = true end
      end
    end
    if drawn and finite(x) and not (p.logx and x <= 0) then xmin, xmax = math.min(xmin, x), math.max(xmax, x) end
    if x ~= math.floor(x) then all_int = false end
  end
  if xmin > xmax then return nil end   -- nothing drawable (e.g. only zeros on a log axis)
  if shared then   -- the extent of every panel of the declaration
    if p.kind == "bars" and not p.logy then lo, hi = math.min(0, shared[1]), math.max(0, shared[2])
    else lo, hi = shared[1], shared[2] end
    pad = (hi - lo) * 0.02
    if p.kind == "line" then   -- the lines' own offsets do not apply to a fixed range
      if p.logy then lo, hi = lo / (hi / lo) ^ 0.04, hi * (hi / lo) ^ 0.04 else lo, hi = lo - 2 * pad, hi + 2 * pad end
      lines[#lines + 1] = "yset = 1"
    end
  end
  if p.logy then
    local plo, phi = y_bounds(series, true)
    if shared then plo, phi = shared[1], shared[2] end
    local yt = plo and log_tics(plo, phi)
    if yt then lines[#lines + 1] = "ytics_cmd = " .. gq(yt) end
  elseif p.kind == "bars" then   -- headroom above the highest bar (and its value), below the lowest
    if hi > 0 then hi = hi + (vfmt and 8 or 2) * pad end
    if lo < 0 then lo = lo - (vfmt and 8 or 2) * pad end
  end
  -- counts: integer ticks on the y axis
  local int_y = not p.logy
  for _, s in ipairs(series) do
    for _, y in ipairs(s.y) do if finite(y) and y ~= math.floor(y) then int_y = false end end
    if s.e then int_y = false end
  end
  if int_y then lines[#lines + 1] = string.format("ystep = %.17g", int_step(math.min(0, lo), hi)) end
  local xstep = (all_int and not p.logx and p.kind ~= "histogram") and int_step(xmin, xmax) or 0
  lines[#lines + 1] = string.format("nseries = %d; npts = %d; has_err = %d; has_vals = %d; has_labels = %d; xmin = %.17g; xmax = %.17g; xstep = %.17g",
                                    #series, #xs, has_err and 1 or 0, vfmt and 1 or 0, xlabels and 1 or 0, xmin, xmax, xstep)
  -- a log axis of bars starts at the decade below the smallest bar (bars need a base)
  local ybase = ymin_pos < math.huge and 10 ^ math.floor(math.log10(ymin_pos)) or 1
  lines[#lines + 1] = string.format("ylo = %.17g; yhi = %.17g; ybase = %.17g", lo, hi > lo and hi or lo + 1, ybase)
  if xlabels then
    -- labels side by side when they fit (broken into lines), else rotated
    local w = math.floor(64 / #xlabels) - 1
    local wrapped, fits = {}, w >= 6
    for i, l in ipairs(xlabels) do
      wrapped[i] = fits and wrap(l, w) or nil
      if not wrapped[i] then fits = false end
    end
    if not fits then wrapped = xlabels end
    local long = 0
    for _, l in ipairs(wrapped) do long = math.max(long, width(l)) end
    local rot = fits and ((long > w or #xlabels >= 5) and " font ',8'" or "") or #xlabels > 16 and " rotate by 90 right font ',7'" or " rotate by 90 right font ',8'"
    local nl = 1
    for _, l in ipairs(wrapped) do local _, k = l:gsub("\n", "") nl = math.max(nl, k + 1) end
    local cmd, step = tics(wrapped, p.max_labels or 48)
    lines[#lines + 1] = "xtics_cmd = " .. gq("set xtics " .. cmd .. rot .. ((fits and nl > 1) and string.format("; set bmargin %d", 2 + 2 * nl) or ""))
    if step > 1 then lines[#lines + 1] = "pxlabel = " .. gq(thinned(self:subst(data, p.xlabel, at), step)) end
  elseif p.logx then
    local xt = log_tics(xmin, xmax, "x")
    if xt then lines[#lines + 1] = "xtics_cmd = " .. gq(xt) end
  end
  return { columns = cols, rows = rows }
end

-- Build the .dat blocks and the panel script of a figure: returns blocks, script text, the panel list
-- (each { kind =, title =, empty = reason or nil }).
function Fig:render_plan(data, panels)
  local blocks, body, plan = {}, {}, {}
  local expanded = self:expand(panels, data)
  local rows, cols = M.layout(#expanded)
  -- same_y: one y extent for all the panels of a declaration
  local shared = {}
  for pi, e in ipairs(expanded) do
    local p = e.p
    if p.same_y and (p.kind == "line" or p.kind == "bars") then
      local lo, hi = y_bounds(self:series_of(data, p, e.at, pi), p.logy)
      if lo then
        local b = shared[p] or { math.huge, -math.huge }
        shared[p] = { math.min(b[1], lo), math.max(b[2], hi) }
      end
    end
  end
  for pi, e in ipairs(expanded) do
    local p, at = e.p, e.at
    local title = self:subst(data, p.title or "", at)
    local note = self:subst(data, p.note or "", at)
    local lines = { string.format("ptitle = %s; pnote = %s; pxlabel = %s; pylabel = %s", gq(title), gq(note),
                                  gq(self:subst(data, p.xlabel, at)), gq(self:subst(data, p.ylabel, at))),
                    string.format("logx = %d; logy = %d; logcb = %d; symmetric = %d; cblabel = %s",
                                  p.logx and 1 or 0, p.logy and 1 or 0, p.logcb and 1 or 0, p.symmetric and 1 or 0, gq(p.cblabel)) }
    local blk, extra
    if p.kind == "heatmap" or p.kind == "rgb" then
      local z, names, shape = self:slice(data, p.z, at)
      local need = p.kind == "rgb" and 3 or 2
      if #names ~= need then fail(self, string.format("panel %d: var '%s' sliced to %d dims, %s needs %d", pi, p.z, #names, p.kind, need), 4) end
      if not (all_undefined(z, p.zero_is_empty) or shape[1] == 0 or shape[2] == 0) then
        local ny, nx = shape[1], shape[2]
        if p.kind == "heatmap" then
          local m = {}
          local zmin, zmax, zabs = math.huge, -math.huge, 0
          for i = 1, ny do
            local row = {}
            for j = 1, nx do
              local v = z[(i - 1) * nx + j]
              row[j] = v
              if finite(v) and not (p.logcb and v <= 0) then zmin, zmax, zabs = math.min(zmin, v), math.max(zmax, v), math.max(zabs, math.abs(v)) end
            end
            m[i] = row
          end
          if zmin > zmax then zmin, zmax = 0, 0 end
          blk = { matrix = m }
          lines[#lines + 1] = string.format("zmin = %.17g; zmax = %.17g; zabs = %.17g; cell_fmt = %s", zmin, zmax, zabs,
                                            gq((p.values and nx * ny <= 150) and p.values or ""))
          local xt, xstep, xthin = heat_axis(self:coord(data, names[2]), p, "x")
          local yt, ystep, ythin = heat_axis(self:coord(data, names[1]), p, "y")
          if (xthin or 1) > 1 or (ythin or 1) > 1 then
            lines[#lines + 1] = string.format("pxlabel = %s; pylabel = %s", gq(thinned(self:subst(data, p.xlabel, at), xthin)),
                                              gq(thinned(self:subst(data, p.ylabel, at), ythin)))
          end
          lines[#lines + 1] = string.format("nx = %d; ny = %d; xstep = %.17g; ystep = %.17g", nx, ny, xstep, ystep)
          if xt then lines[#lines + 1] = "xtics_cmd = " .. gq(xt) end
          if yt then lines[#lines + 1] = "ytics_cmd = " .. gq(yt) end
          if p.marks then
            local mk = self:slice(data, p.marks, at)
            local xs = {}
            for j, v in ipairs(mk) do if v == v and v ~= 0 then xs[#xs + 1] = tostring(j - 1) end end
            lines[#lines + 1] = "marks = " .. gq(table.concat(xs, " "))
          end
        else
          local rws = {}
          for i = 0, ny - 1 do
            for j = 0, nx - 1 do
              local b = (i * nx + j) * 3
              rws[#rws + 1] = { j, i, z[b + 1], z[b + 2], z[b + 3] }
            end
          end
          blk = { columns = { "x", "y", "r", "g", "b" }, rows = rws }
          lines[#lines + 1] = string.format("nx = %d; ny = %d; xstep = %.17g; ystep = %.17g", nx, ny, int_step(0, nx - 1), int_step(0, ny - 1))
          if p.circles then
            local cv, cn, cs = self:slice(data, p.circles, at)
            if #cn ~= 2 then fail(self, string.format("panel %d: circles var '%s' sliced to %d dims, needs 2", pi, p.circles, #cn), 4) end
            local pts = {}
            for i = 0, cs[1] - 1 do
              for j = 0, cs[2] - 1 do
                local v = cv[i * cs[2] + j + 1]
                if finite(v) and v > 0 then pts[#pts + 1] = { (j + 0.5) * nx / cs[2] - 0.5, (i + 0.5) * ny / cs[1] - 0.5 } end
              end
            end
            if #pts > 0 then
              extra = { columns = { "x", "y" }, rows = pts }
              lines[#lines + 1] = "circ_title = " .. gq(self:subst(data, p.circles_title or "marked", at))
            elseif p.circles_none then
              note = note ~= "" and (note .. "; " .. self:subst(data, p.circles_none, at)) or self:subst(data, p.circles_none, at)
              lines[#lines + 1] = "pnote = " .. gq(note)
            end
          end
        end
      end
    elseif p.kind == "scatter" then
      local xv = self:slice(data, p.x, at)
      local yv = self:slice(data, list_of(p.y)[1], at)
      if #xv ~= #yv then fail(self, string.format("panel %d: scatter vars '%s' and '%s' differ in size", pi, p.x, list_of(p.y)[1]), 4) end
      local pts = {}
      for i = 1, #xv do
        if finite(xv[i]) and finite(yv[i]) and not (p.logx and xv[i] <= 0) and not (p.logy and yv[i] <= 0) then pts[#pts + 1] = { xv[i], yv[i] } end
      end
      if #pts > 0 then
        blk = { columns = { self.vars[p.x].label or p.x, self.vars[list_of(p.y)[1]].label or list_of(p.y)[1] }, rows = pts }
      end
    else
      blk = self:plan_xy(data, p, at, pi, lines, shared[p])
    end
    local kind = p.kind
    if not blk then
      local why = self:subst(data, p.why_empty or "no data", at)
      lines[#lines + 1] = "empty_msg = " .. gq(why)
      kind = "empty"
      plan[#plan + 1] = { kind = p.kind, title = title, empty = why }
    else
      blocks[#blocks + 1] = blk
      lines[#lines + 1] = string.format("idx = %d", #blocks - 1)
      if extra then
        blocks[#blocks + 1] = extra
        lines[#lines + 1] = string.format("circ_idx = %d", #blocks - 1)
      end
      plan[#plan + 1] = { kind = p.kind, title = title, note = note ~= "" and note or nil }
    end
    body[#body + 1] = "# panel " .. pi .. "\n" ..
      "xtics_cmd = ''; ytics_cmd = ''; marks = ''; empty_msg = ''; xstep = 0; ystep = 0; circ_idx = -1; circ_title = ''; yset = 0\n" ..
      table.concat(lines, "\n") .. "\nload panels . '" .. kind .. ".gp'\n"
  end
  if #blocks == 0 then blocks[1] = { columns = { "x" }, rows = { { 0 / 0 } } } end   -- every panel empty
  local head = string.format("fig_title = %s\nrows = %d; cols = %d\nn_panels = %d\n", gq(self:subst(data, self.title, {})), rows, cols, #expanded)
  local script = head .. "if (stage == 2) {\n" .. table.concat(body, "") .. "}\n"
  return blocks, script, plan
end

-- write <dir>/<name>.dat, <name>.panels.gp and render <name>.png/.pdf with plots/figure.gp
function M.draw(dir, name, fig, data)
  if require("outlierlab.util.dist").world_rank() ~= 0 then return {}, {} end
  local panels = fig.panels
  if type(panels) == "function" then panels = panels(data) fig:check_panels(panels, 2) end
  local blocks, script, plan = fig:render_plan(data, panels)
  local dat = dir .. "/" .. name .. ".dat"
  plot.write_dat(dat, blocks)
  plot.write_atomic(dir .. "/" .. name .. ".panels.gp", script)
  local files = plot.render("figure", dat, dir .. "/" .. name)
  table.insert(files, 1, dat)
  table.insert(files, 2, dir .. "/" .. name .. ".panels.gp")
  return files, plan
end

-- the plot stage of an experiment: the NetCDF file and the figure from run.out.analyze
function M.stage(fig, from)
  return function(run)
    local data = run.out[from or "analyze"]
    local nc = run:netcdf()
    fig:netcdf(nc, data)
    nc:close()
    -- an imported model's figure names the model (outlierlab.pretrained)
    local f = run.pretrained and setmetatable({ title = fig.title .. " — " .. run.pretrained:label() }, { __index = fig }) or fig
    local files, plan = M.draw(run.dir, run.id, f, data)
    for _, f in ipairs(files) do run.files[#run.files + 1] = f end
    return { panels = plan }
  end
end

-- The stages of a figure experiment, in order: train, the analysis (cached: its result is what
-- the figure draws) and the plot of the declared figure (M.stage)
function M.stages(train, analyze, fig, extra)
  local st = { { "train", train }, { "analyze", analyze, cache = true }, { "plot", M.stage(fig) } }
  for _, e in ipairs(extra or {}) do st[#st + 1] = e end   -- e.g. the views stage (figure/views)
  return st
end

-- Write only the NetCDF file of a declaration (tests, tools): path, meta as results.new
function M.write_netcdf(path, fig, data, meta)
  local nc = results.new(path, meta or { title = fig.title, summary = fig.title })
  fig:netcdf(nc, data)
  return nc:close()
end

return M
