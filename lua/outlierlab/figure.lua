-- figure — one declaration per figure drives its NetCDF file, the data handed to gnuplot, the
-- panels drawn and the numbers its summary quotes (docs/EXPERIMENTS.md, "Declaring a figure").
--
--   local figure = require "outlierlab.figure"
--   local FIG = figure.declare{
--     title = "Activation outliers in h",
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
--         why_empty = "no outlier token at this τ" },
--     },
--   }
--   -- the analysis returns plain data (cached by the runner):
--   return { coords = { layer = {0, 1}, category = {"initial", ...}, rank = 3 },   -- values, labels or a length
--            vars = { top_abs = {{...}, ...}, outlier_tokens = {...}, peak_ratio = 41.2 },
--            attrs = { tau = 100 } }                                               -- global attributes
--   stages = { ..., { "plot", figure.stage(FIG) } }
--   summary: local v = figure.values(FIG, run.out.analyze); v.peak_ratio, v.top_abs[3] ...
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
--   line       x = dim, y = var or list of vars over x (one line each)      opts: logy, logx, points
--   bars       x = dim (labels on the axis), y = var or list (clustered)     opts: logy
--   histogram  x = dim whose coordinate values are bin centres, y = counts  opts: logx, logy
--   scatter    x = var, y = var (same dims, flattened to points)           opts: logx, logy
--   heatmap    z = var over {y dim, x dim}; marks = var of 0/1 flags over x (vertical lines, e.g.
--              delimiter or sink columns); opts: logcb, cblabel, symmetric (colour scale ±max|z|)
--   rgb        z = var over {y dim, x dim, channel(3)} with values 0..255 (an image)
-- every panel: title, xlabel, ylabel, each = dim or {dims} (one panel per coordinate value; the
-- vars are sliced there; "{dim}" in title and why_empty is replaced by the coordinate label),
-- why_empty (what an empty panel says: all its values undefined, or all zero with
-- zero_is_empty = true), x_labels = false (no tick labels from a categorical x dim).
-- Axes end at the data (autoscale fix); an empty panel is a frame with its reason in it.
local results = require "outlierlab.results"
local plot = require "outlierlab.plot"
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
    local need = (p.kind == "heatmap" or p.kind == "rgb") and { p.z } or list_of(p.y)
    if p.kind == "scatter" then need[#need + 1] = p.x end
    if p.marks then need[#need + 1] = p.marks end
    if #need == 0 or need[1] == nil then fail(self, where .. ": names no variable", lvl + 1) end
    for _, v in ipairs(need) do
      if not self.vars[v] then fail(self, where .. ": undeclared var '" .. tostring(v) .. "'", lvl + 1) end
    end
    if (p.kind == "line" or p.kind == "bars" or p.kind == "histogram") and not self.dims[p.x] then
      fail(self, where .. ": x must be a declared dim", lvl + 1)
    end
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
-- array var (v.name.shape); an undeclared name is an error.
function M.values(fig, data)
  return setmetatable({}, { __index = function(_, name)
    local vals, shape = fig:var_data(data, name)
    if #shape == 0 then return vals[1] end
    vals.shape = shape
    return vals
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
-- expand `each` into one panel per coordinate index; returns list of { p =, at = {dim = index} }
function Fig:expand(panels, data)
  local out = {}
  for _, p in ipairs(panels) do
    local each = list_of(p.each)
    local function rec(k, at)
      if k > #each then
        local a = {}
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

-- the label of coordinate index i of dim
function Fig:label(data, dn, i)
  local c = self:coord(data, dn)
  if c.labels then return c.labels[i + 1] end
  local v = c.values[i + 1]
  return v == math.floor(v) and string.format("%d", v) or string.format("%g", v)
end

local function subst(fig, data, s, at)
  if type(s) ~= "string" then return s end
  return (s:gsub("{([%w_]+)}", function(d) if at[d] then return fig:label(data, d, at[d]) end end))
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

local function gq(s)   -- a gnuplot single-quoted string
  return "'" .. tostring(s or ""):gsub("\n", " "):gsub("'", "''") .. "'"
end

-- tick labels "('a' 0, 'b' 1, ...)" for a categorical axis, thinned to at most max_n labels
local function tics(labels, max_n)
  local n = #labels
  local step = math.max(1, math.ceil(n / (max_n or 40)))
  local parts = {}
  for i = 1, n, step do
    parts[#parts + 1] = gq(labels[i]) .. " " .. (i - 1)
  end
  return "(" .. table.concat(parts, ", ") .. ")"
end

-- the rows and columns of a layout for n panels: as square as possible, wider than tall
function M.layout(n)
  if n <= 0 then return 1, 1 end
  local cols = math.ceil(math.sqrt(n))
  if cols > 6 then cols = 6 end
  local rows = math.ceil(n / cols)
  return rows, cols
end

-- Build the .dat blocks and the panel script of a figure: returns blocks, script text, the panel list
-- (each { kind =, title =, empty = reason or nil }).
function Fig:render_plan(data, panels)
  local blocks, body, plan = {}, {}, {}
  local expanded = self:expand(panels, data)
  local rows, cols = M.layout(#expanded)
  for pi, e in ipairs(expanded) do
    local p, at = e.p, e.at
    local title = subst(self, data, p.title or "", at)
    local lines = { string.format("ptitle = %s; pxlabel = %s; pylabel = %s", gq(title), gq(subst(self, data, p.xlabel, at)),
                                  gq(subst(self, data, p.ylabel, at))),
                    string.format("logx = %d; logy = %d; logcb = %d; points = %d; symmetric = %d; cblabel = %s",
                                  p.logx and 1 or 0, p.logy and 1 or 0, p.logcb and 1 or 0, p.points and 1 or 0,
                                  p.symmetric and 1 or 0, gq(p.cblabel)) }
    local empty
    local blk
    local xt = ""
    if p.kind == "heatmap" or p.kind == "rgb" then
      local z, names, shape = self:slice(data, p.z, at)
      local need = p.kind == "rgb" and 3 or 2
      if #names ~= need then fail(self, string.format("panel %d: var '%s' sliced to %d dims, heatmap needs %d", pi, p.z, #names, need), 4) end
      if all_undefined(z, p.zero_is_empty) or shape[1] == 0 or shape[2] == 0 then empty = true
      else
        local ny, nx = shape[1], shape[2]
        if p.kind == "heatmap" then
          local m = {}
          for i = 1, ny do
            local row = {}
            for j = 1, nx do row[j] = z[(i - 1) * nx + j] end
            m[i] = row
          end
          blk = { matrix = m }
        else
          local rows_ = {}
          for i = 0, ny - 1 do
            for j = 0, nx - 1 do
              local b = (i * nx + j) * 3
              rows_[#rows_ + 1] = { j, i, z[b + 1], z[b + 2], z[b + 3] }
            end
          end
          blk = { columns = { "x", "y", "r", "g", "b" }, rows = rows_ }
        end
        local xc, yc = self:coord(data, names[2]), self:coord(data, names[1])
        lines[#lines + 1] = string.format("nx = %d; ny = %d; int_x = %d; int_y = %d", nx, ny, (not xc.labels and nx <= 40) and 1 or 0,
                                          (not yc.labels and ny <= 40) and 1 or 0)
        if xc.labels and p.x_labels ~= false then lines[#lines + 1] = "xtics_cmd = " .. gq("set xtics " .. tics(xc.labels, p.max_labels or 48) .. " rotate by 90 right font ',7'") end
        if yc.labels and p.y_labels ~= false then lines[#lines + 1] = "ytics_cmd = " .. gq("set ytics " .. tics(yc.labels, p.max_labels or 48) .. " font ',7'") end
        if p.marks then
          local mk = self:slice(data, p.marks, at)
          local xs = {}
          for j, v in ipairs(mk) do if v == v and v ~= 0 then xs[#xs + 1] = tostring(j - 1) end end
          lines[#lines + 1] = "marks = " .. gq(table.concat(xs, " "))
        end
      end
    else
      local ys = list_of(p.y)
      local cols_ = {}
      local xs, xnames, xlabels
      local series = {}
      if p.kind == "scatter" then
        local xv, n1 = self:slice(data, p.x, at)
        local yv = self:slice(data, ys[1], at)
        xs = xv
        series[1] = yv
        cols_ = { self.vars[p.x].label or p.x, self.vars[ys[1]].label or ys[1] }
        xnames = n1
      else
        local xc = self:coord(data, p.x)
        xs = xc.values
        xlabels = p.x_labels ~= false and xc.labels or nil
        cols_[1] = p.x
        for k, vn in ipairs(ys) do
          local v, names = self:slice(data, vn, at)
          if #names ~= 1 or names[1] ~= p.x then
            fail(self, string.format("panel %d: var '%s' sliced to dims (%s), needs exactly (%s)", pi, vn, table.concat(names, ","), p.x), 4)
          end
          series[k] = v
          cols_[#cols_ + 1] = subst(self, data, self.vars[vn].label or vn, at)
        end
      end
      local any = false
      for _, s in ipairs(series) do if not all_undefined(s, p.zero_is_empty) then any = true end end
      if not any or #xs == 0 then empty = true
      else
        if xlabels then cols_[#cols_ + 1] = "label" end
        local rows_ = {}
        for i = 1, #xs do
          local r = { xs[i] }
          for _, s in ipairs(series) do r[#r + 1] = s[i] end
          if xlabels then r[#r + 1] = xlabels[i] end
          rows_[i] = r
        end
        blk = { columns = cols_, rows = rows_ }
        local xmin, xmax, int_x = math.huge, -math.huge, not xlabels and #xs <= 40
        for _, x in ipairs(xs) do
          if x == x then xmin, xmax = math.min(xmin, x), math.max(xmax, x) end
          if x ~= math.floor(x) then int_x = false end
        end
        lines[#lines + 1] = string.format("nseries = %d; has_labels = %d; xmin = %.17g; xmax = %.17g; int_x = %d",
                                          #series, xlabels and 1 or 0, xmin, xmax, (int_x and p.kind ~= "scatter") and 1 or 0)
        if xlabels then xt = "xtics_cmd = " .. gq("set xtics " .. tics(xlabels, p.max_labels or 32) .. (#xlabels > 8 and " rotate by 45 right" or "")) end
      end
      local _ = xnames
    end
    if xt ~= "" then lines[#lines + 1] = xt end
    local kind = p.kind
    if empty then
      local why = subst(self, data, p.why_empty or "no data", at)
      lines[#lines + 1] = "empty_msg = " .. gq(why)
      kind = "empty"
      plan[#plan + 1] = { kind = p.kind, title = title, empty = why }
    else
      blocks[#blocks + 1] = blk
      lines[#lines + 1] = string.format("idx = %d", #blocks - 1)
      plan[#plan + 1] = { kind = p.kind, title = title }
    end
    body[#body + 1] = "# panel " .. pi .. "\n" ..
      "xtics_cmd = ''; ytics_cmd = ''; marks = ''; empty_msg = ''; int_x = 0; int_y = 0\n" .. table.concat(lines, "\n") ..
      "\nload panels . '" .. kind .. ".gp'\n"
  end
  if #blocks == 0 then blocks[1] = { columns = { "x" }, rows = { { 0 / 0 } } } end   -- every panel empty
  local head = string.format("fig_title = %s\nrows = %d; cols = %d\nn_panels = %d\n", gq(self.title), rows, cols, #expanded)
  local script = head .. "if (stage == 2) {\n" .. table.concat(body, "") .. "}\n"
  return blocks, script, plan
end

-- write <dir>/<name>.dat, <name>.panels.gp and render <name>.png/.pdf with plots/figure.gp
function M.draw(dir, name, fig, data)
  if require("outlierlab.dist").world_rank() ~= 0 then return {}, {} end
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
    local files, plan = M.draw(run.dir, run.id, fig, data)
    for _, f in ipairs(files) do run.files[#run.files + 1] = f end
    return { panels = plan }
  end
end

-- Write only the NetCDF file of a declaration (tests, tools): path, meta as results.new
function M.write_netcdf(path, fig, data, meta)
  local nc = results.new(path, meta or { title = fig.title, summary = fig.title })
  fig:netcdf(nc, data)
  return nc:close()
end

return M
