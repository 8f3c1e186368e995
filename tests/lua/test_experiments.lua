-- test_experiments — every experiments/<id>.lua in its quick profile, end to end, as a
-- subprocess (bin/outlierlab run experiments/<id>.lua --profile=quick --out=TMP --cache=TMP):
-- the NetCDF file holds the expected dims/variables with CF attributes, the PNG is a real
-- PNG of non-trivial size, summary.md states the claim and a verdict. Also: a rerun reuses
-- the cached model, a changed setting retrains, an unknown key is an error.
local t = require "outlierlab.tap"

local sh = t.sh
local slurp = t.slurp

local tmp = os.tmpname()
os.remove(tmp)
os.execute("mkdir -p " .. tmp)
local base = "bin/outlierlab run experiments/%s.lua --profile=quick --out=" .. tmp .. "/results --cache=" .. tmp .. "/cache"

-- what each figure's file must hold
local expect = {
  ["qt-fig1"] = { "int outlier_count_by_channel(layer, channel)", "int outlier_count_by_category(layer, category)",
                  "double delimiter_share(layer)" },
  ["qt-fig2"] = { "float attention_probs(query, key)", "float values(key, head_dim)", "float output(query, head_dim)" },
  ["so-fig3"] = { "float top_abs(layer, rank)", "float median_abs(layer)", "int outlier_tokens_by_category(category)",
                  "int outlier_count_by_channel(channel)" },
  ["so-fig6"] = { "int attention_outliers(layer)", "int attention_outliers_by_head(layer, head)",
                  "int attention_outliers_by_category(category)" },
  ["emergence"] = { "double max_inf_norm(variant, step)", "double avg_kurtosis(variant, step)" },
}

local ids = {}
for f in io.popen("ls experiments/*.lua"):lines() do ids[#ids + 1] = f:match("([^/]+)%.lua$") end
table.sort(ids)
t.ok(#ids >= 1, "experiments found: " .. table.concat(ids, ", "))
for _, id in ipairs(ids) do
  local out, ok = sh(string.format(base, id))
  t.ok(ok, id .. ": quick profile runs", out)
  local dir = tmp .. "/results/" .. id .. "/quick"
  local hdr, hok = sh("ncdump -h " .. dir .. "/" .. id .. ".nc")
  t.ok(hok, id .. ": NetCDF file readable by ncdump", hdr)
  t.ok(hdr:find(':Conventions = "CF-1.10, ACDD-1.3"', 1, true) and hdr:find(':experiment_id = "' .. id .. '"', 1, true)
       and hdr:find(':profile = "quick"', 1, true), id .. ": global attributes", hdr)
  for _, v in ipairs(expect[id] or {}) do t.ok(hdr:find(v, 1, true), id .. ": has " .. v, hdr) end
  local png = slurp(dir .. "/" .. id .. ".png") or ""
  t.ok(png:sub(1, 8) == "\137PNG\r\n\26\n" and #png > 20000, id .. ": PNG with magic bytes, " .. #png .. " bytes")
  t.ok((slurp(dir .. "/" .. id .. ".pdf") or ""):sub(1, 5) == "%PDF-", id .. ": PDF")
  local md = slurp(dir .. "/summary.md") or ""
  t.ok(md:find("## Claim", 1, true) and md:find("Verdict: **no verdict (quick profile", 1, true) and md:find("Profile: quick", 1, true),
       id .. ": summary.md with claim, profile and no verdict (quick profile)", md)
end

-- caching: a rerun reuses the model and the analysis; a changed setting retrains
local id = ids[1]
local out = sh(string.format(base, id))
t.ok(out:find("cached", 1, true) and not out:find(": training", 1, true), id .. ": rerun uses the cached model", out)
out = sh(string.format(base, id) .. " --seed=2")
t.ok(out:find(": training", 1, true), id .. ": a changed setting retrains", out)
local err, eok = sh(string.format(base, id) .. " --no_such_key=1")
t.ok(not eok and err:find("unknown key --no_such_key", 1, true), "unknown key is an error naming it", err)
err, eok = sh(string.format(base, id):gsub("quick", "nope"))
t.ok(not eok and err:find("unknown profile 'nope'", 1, true), "unknown profile is an error", err)

os.execute("rm -rf " .. tmp)
return t.done()
