-- report/html — index.html of a model report: summary.md rendered (the verdicts first), the
-- figures and the interactive views (figure.views, the gallery's: |h| with hover, the first
-- token's state, the sink map, the attention grid) beside their sections, links to report.nc,
-- summary.md and the views' exports. Nothing is loaded from outside the results folder. Every
-- piece of text is escaped (M.escape) before any markup is added, so a token string such as
-- "<script>" from the user's text shows as text; summary.md already writes control characters
-- and invalid UTF-8 as \xNN; the views' data blocks escape < > & (views.script_json).
local views = require "outlierlab.figure.views"

local M = {}

function M.escape(s)
  return (tostring(s):gsub("[&<>\"']", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&#39;" }))
end

-- the inline markup summary.md uses, on escaped text: `code`, **bold**
local function inline(s)
  s = M.escape(s)
  s = s:gsub("`([^`]*)`", "<code>%1</code>")
  s = s:gsub("%*%*(.-)%*%*", "<strong>%1</strong>")
  return s
end

local function cells(line)
  local out = {}
  local body = line:gsub("^%s*|", ""):gsub("|%s*$", "")
  for c in (body .. "|"):gmatch("([^|]*)|") do out[#out + 1] = c:match("^%s*(.-)%s*$") end
  return out
end

-- the subset of Markdown summary.md is written in: # and ## headings, "- " bullets, | tables |,
-- paragraphs
function M.markdown(md, after_heading)
  local out, list, table_rows = {}, false, nil
  local function close()
    if list then out[#out + 1] = "</ul>" list = false end
    if table_rows then
      local t = { "<div class=\"scroll\"><table>" }
      for i, r in ipairs(table_rows) do
        local tag = i == 1 and "th" or "td"
        local row = {}
        for _, c in ipairs(r) do row[#row + 1] = "<" .. tag .. ">" .. inline(c) .. "</" .. tag .. ">" end
        t[#t + 1] = "<tr>" .. table.concat(row) .. "</tr>"
      end
      t[#t + 1] = "</table></div>"
      out[#out + 1] = table.concat(t, "\n")
      table_rows = nil
    end
  end
  for line in (md .. "\n"):gmatch("(.-)\n") do
    local h1, h2 = line:match("^# (.*)$"), line:match("^## (.*)$")
    if h1 or h2 then
      close()
      out[#out + 1] = h1 and ("<h1>" .. inline(h1) .. "</h1>") or ("<h2>" .. inline(h2) .. "</h2>")
      if h2 and after_heading and after_heading[h2] then out[#out + 1] = after_heading[h2] end
    elseif line:match("^%- ") then
      if table_rows then close() end
      if not list then out[#out + 1] = "<ul>" list = true end
      out[#out + 1] = "<li>" .. inline(line:sub(3)) .. "</li>"
    elseif line:match("^%s*|") then
      if list then close() end
      if not line:match("^%s*|[%s%-|:]+$") then
        table_rows = table_rows or {}
        table_rows[#table_rows + 1] = cells(line)
      end
    elseif line:match("^%s*$") then
      close()
    else
      close()
      out[#out + 1] = "<p>" .. inline(line) .. "</p>"
    end
  end
  close()
  return table.concat(out, "\n")
end

local STYLE = [[
body { font-family: DejaVu Sans, sans-serif; max-width: 1150px; margin: 1em auto; padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.5em; border-bottom: 2px solid #444; }
h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #bbb; }
code { background: #f1f1f1; padding: 0 .25em; border-radius: 3px; white-space: pre-wrap; word-break: break-all; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: .85em; margin: .5em 0; }
th, td { border: 1px solid #ccc; padding: .2em .45em; text-align: left; vertical-align: top; }
th { background: #eee; }
figure { margin: .8em 0; }
figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: .85em; color: #555; }
.files { font-size: .9em; }
]]

-- the sections of summary.md that each view sits under
local VIEW_SECTION = {
  activations = "Massive activations per layer (Sun et al. 2024)", first_token = "Massive activations per layer (Sun et al. 2024)",
  sink_map = "Attention sinks (Gu et al. 2025)", attention_grid = "Attention sinks (Gu et al. 2025)",
}

-- page(src, r, data, cfg, v, figs = { {file =, title =}, ... }, md, o = { path =, assets = }) -> the
-- HTML text; r.views (a views record) gives the interactive views, o.path the page's path (a large
-- record goes into index-data/ beside it) and o.assets the charting library's folder
function M.page(src, r, data, cfg, v, figs, md, o)
  local fig_html = {}
  for _, f in ipairs(figs) do
    fig_html[f.file] = string.format('<figure><img src="%s" alt="%s"><figcaption>%s (<a href="%s">PDF</a>)</figcaption></figure>',
      M.escape(f.file), M.escape(f.title), M.escape(f.title), M.escape((f.file:gsub("%.png$", ".pdf"))))
  end
  -- each figure after the heading of its section
  local after = {
    ["Massive activations per layer (Sun et al. 2024)"] = fig_html["massive.png"],
    ["Attention sinks (Gu et al. 2025)"] = fig_html["sinks.png"],
    ["Super weights (Yu et al. 2024)"] = fig_html["superweights.png"],
    ["The three kinds of outliers (SO Table 1)"] = fig_html["outliers.png"],
    ["What the outliers cost"] = fig_html["cost.png"],
  }
  -- then the interactive views of the first held-out sequence under theirs
  local vs = r.views and o and views.default_views(r.views)
  local parts = vs and views.parts{ path = o.path, assets = o.assets, views = vs }
  local files = '<a href="report.nc">report.nc</a> (CF NetCDF, every number of this page) · <a href="summary.md">summary.md</a>'
  if parts then
    for i, vw in ipairs(vs) do
      local sec = VIEW_SECTION[vw.kind]
      after[sec] = (after[sec] or "") .. "\n" .. parts.sections[i]
    end
    files = files .. ' · the views\' record <a href="views/model.json">views/model.json</a>, its h as CF NetCDF ' ..
      '<a href="views/model.h.nc">views/model.h.nc</a>' ..
      (r.views.attn and ', its attention for CircuitsVis <a href="views/model.attention.json">views/model.attention.json</a>' or "")
  end
  return table.concat({
    "<!DOCTYPE html>",
    "<html lang=\"en\"><head><meta charset=\"utf-8\">",
    parts and views.csp("'self' file:") or "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src 'self'; style-src 'unsafe-inline'\">",
    "<title>" .. M.escape("Outlier report — " .. src.name) .. "</title>",
    "<style>" .. (parts and parts.css or "") .. STYLE .. "</style></head><body>",
    M.markdown(md, after),
    "<p class=\"files\">Files: " .. files .. "</p>",
    parts and parts.tail or "",
    "</body></html>", "",
  }, "\n")
end

return M
