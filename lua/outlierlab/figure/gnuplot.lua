-- plot — gnuplot figures from Lua tables: a text .dat file next to the results, then one
-- gnuplot script per figure (plots/<name>.gp) rendered to PNG (pngcairo) and PDF (pdfcairo).
--
--   local plot = require "outlierlab.figure.gnuplot"
--   plot.write_dat("results/x/fig.dat", {
--     { columns = { "layer", "top1", "median" }, rows = { {0, 12.5, 0.3}, {1, 40, 0.31} } },
--     { columns = { "category", "count" }, rows = { {"initial", 5}, {"delimiter", 2} } },
--   })
--   plot.render("so-fig3", "results/x/fig.dat", "results/x/so-fig3")  -- -> .png and .pdf
--
-- A .dat file holds one block per panel, separated by two blank lines (gnuplot `index n`);
-- each block starts with a header row of quoted column names (gnuplot `columnheader`).
-- Strings are quoted; numbers use %.9g (integers %d), so the same tables give the same
-- bytes, and the same .dat gives a byte-identical PNG (pngcairo, font "DejaVu Sans").
-- Each script takes its input and output paths: gnuplot -c plots/x.gp in.dat out.png
-- and picks the terminal from the output's extension (.png pngcairo, .pdf pdfcairo).
local ol = require "outlierlab"

local M = {}

local function fmt_value(v)
  local ty = type(v)
  if ty == "number" then
    if v ~= v then return "NaN" end
    if v == math.huge then return "Inf" end
    if v == -math.huge then return "-Inf" end
    if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return string.format("%d", v) end
    return string.format("%.9g", v)
  elseif ty == "boolean" then
    return v and "1" or "0"
  else
    -- a label: quoted, with quotes, backslashes and control characters made visible
    local s = tostring(v):gsub("\\", "\\\\"):gsub('"', "'"):gsub("\n", "\\\\n"):gsub("\t", "\\\\t")
    s = s:gsub("%c", "?")
    return '"' .. s .. '"'
  end
end
M.fmt_value = fmt_value

local write_atomic = require("outlierlab.util.fs").write_atomic   -- one implementation (util/fs)
M.write_atomic = write_atomic

-- write blocks (see above) to path; a block may also carry a `matrix` (list of rows of
-- numbers, written without header for `matrix with image`) instead of columns/rows.
function M.write_dat(path, blocks)
  if type(blocks) ~= "table" or #blocks == 0 then error("plot.write_dat(" .. path .. "): no blocks", 2) end
  local out = {}
  for b, blk in ipairs(blocks) do
    if b > 1 then out[#out + 1] = "\n\n" end
    if blk.comment then out[#out + 1] = "# " .. blk.comment:gsub("\n", " ") .. "\n" end
    if blk.matrix then
      for _, row in ipairs(blk.matrix) do
        local cells = {}
        for j, v in ipairs(row) do cells[j] = fmt_value(v) end
        out[#out + 1] = table.concat(cells, " ") .. "\n"
      end
    else
      local cols = blk.columns
      if type(cols) ~= "table" or #cols == 0 then
        error(string.format("plot.write_dat(%s): block %d has no columns", path, b), 2)
      end
      local hdr = {}
      for j, c in ipairs(cols) do hdr[j] = fmt_value(tostring(c)) end
      out[#out + 1] = table.concat(hdr, " ") .. "\n"
      if #(blk.rows or {}) == 0 then
        -- gnuplot cannot plot an empty block: one placeholder row (blk.empty_row, default all
        -- zeros) keeps the panel and the block indices valid
        local cells = {}
        for j = 1, #cols do cells[j] = fmt_value(blk.empty_row and blk.empty_row[j] or 0) end
        out[#out + 1] = table.concat(cells, " ") .. "\n"
      end
      for i, row in ipairs(blk.rows or {}) do
        if #row ~= #cols then
          error(string.format("plot.write_dat(%s): block %d row %d has %d cells for %d columns",
                              path, b, i, #row, #cols), 2)
        end
        local cells = {}
        for j, v in ipairs(row) do cells[j] = fmt_value(v) end
        out[#out + 1] = table.concat(cells, " ") .. "\n"
      end
    end
  end
  write_atomic(path, table.concat(out))
  return path
end

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- gnuplot -c plots/<script>.gp dat out for each format; writes to a temporary name with the
-- same extension, then renames. Returns the list of files written.
function M.render(script, dat, out_base, formats)
  local gp = script:find("/", 1, true) and script or (ol.root .. "/plots/" .. script .. ".gp")
  if not io.open(gp, "r") then error("plot.render: no gnuplot script " .. gp, 2) end
  if not io.open(dat, "r") then error("plot.render: no data file " .. dat .. " for " .. gp, 2) end
  local files = {}
  for _, ext in ipairs(formats or { "png", "pdf" }) do
    local final = out_base .. "." .. ext
    local dir, base = final:match("^(.*)/([^/]*)$")
    dir, base = dir or ".", base or final
    local tmp = dir .. "/.tmp-" .. base
    local cmd = string.format("LC_ALL=C.UTF-8 gnuplot -c %s %s %s 2>&1; echo \"__rc=$?\"", quote(gp), quote(dat), quote(tmp))
    local p = io.popen(cmd)
    local msg = p:read("*a")
    p:close()
    local rc = tonumber(msg:match("__rc=(%d+)%s*$"))
    msg = msg:gsub("__rc=%d+%s*$", "")
    local ok = rc == 0
    local f = io.open(tmp, "rb")
    local size = f and f:seek("end") or 0
    if f then f:close() end
    if not ok or size == 0 then
      os.remove(tmp)
      error(string.format("plot.render: gnuplot failed for %s on %s:\n%s", gp, dat, msg), 2)
    end
    local rok, rerr = os.rename(tmp, final)
    if not rok then error("plot.render: cannot rename " .. tmp .. ": " .. tostring(rerr), 2) end
    files[#files + 1] = final
  end
  return files
end

-- write <dir>/<name>.dat and render <dir>/<name>.png and .pdf with plots/<script>.gp
function M.figure(dir, name, script, blocks)
  if require("outlierlab.util.dist").world_rank() ~= 0 then return {} end   -- rank 0 alone writes files
  local dat = dir .. "/" .. name .. ".dat"
  M.write_dat(dat, blocks)
  local files = M.render(script, dat, dir .. "/" .. name)
  table.insert(files, 1, dat)
  return files
end

return M
