-- test_figure_tick_labels — a categorical axis with more labels than fit is thinned to every n-th
-- label, and its title says so (issue 52: so-fig1's token axes labelled every second token of 64
-- without saying so): "token (every 2nd labelled)"; an axis that shows every label says nothing.
local t = require "tap"
local figure = require "outlierlab.figure"

local function heat(n)
  local F = figure.declare{ title = "x", dims = { { "position", labels = true }, { "channel" } },
    vars = { { "h", dims = { "position", "channel" }, long_name = "|h|", units = "1" } },
    panels = { { kind = "heatmap", z = "h", xlabel = "channel", ylabel = "token" } } }
  local labels, z = {}, {}
  for i = 1, n do labels[i] = "tok" .. i z[i] = { i, 2 * i, 3 * i } end
  local _, script = F:render_plan({ coords = { position = labels, channel = 3 }, vars = { h = z } }, F.panels)
  return script
end
local s64 = heat(64)
t.ok(s64:find("pylabel = 'token (every 2nd labelled)'", 1, true), "64 tokens: the token axis says every 2nd is labelled", s64)
t.ok(s64:find("''tok1'' 0, ''tok3'' 2", 1, true) and not s64:find("''tok2'' 1", 1, true), "and labels tokens 1, 3, 5, …")
t.ok(not s64:find("pxlabel = 'channel (every", 1, true), "the unlabelled channel axis says nothing")
local s40 = heat(40)
t.ok(not s40:find("labelled)", 1, true) and s40:find("''tok2'' 1", 1, true), "40 tokens: every one labelled, no note")
t.ok(heat(150):find("pylabel = 'token (every 4th labelled)'", 1, true), "150 tokens: every 4th")
t.is(figure.thinned("key", 3), "key (every 3rd labelled)", "thinned: 3rd")

-- bars with many categories: the x axis says so too
local B = figure.declare{ title = "b", dims = { { "setting", labels = true } }, vars = { { "v", dims = { "setting" }, long_name = "v", units = "1" } },
  panels = { { kind = "bars", x = "setting", y = "v", xlabel = "setting" } } }
local names, vals = {}, {}
for i = 1, 100 do names[i] = "s" .. i vals[i] = i end
local _, sb = B:render_plan({ coords = { setting = names }, vars = { v = vals } }, B.panels)
t.ok(sb:find("pxlabel = 'setting (every 3rd labelled)'", 1, true), "100 bars: every 3rd labelled, said on the x axis", sb:match("xtics_cmd[^\n]*"))
return t.done()
