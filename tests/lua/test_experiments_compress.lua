-- The compression experiments (qt-table1, qt-table2, so-table3, so-fig11, so-fig12) in their
-- quick profile: the variables of each NetCDF file, the papers' numbers beside the
-- reproduced ones in summary.md, and shared models trained once (so-table3 after so-fig11).
-- (tests/lua/test_experiments.lua checks the generic parts for every experiment.)
local t = require "tap"
local sh = t.sh
local function slurp(path) return t.slurp(path) or "" end
local tmp = os.tmpname()
os.remove(tmp)
os.execute("mkdir -p " .. tmp)
local base = "OMP_NUM_THREADS=1 bin/outlierlab run experiments/%s.lua --profile=quick --out=" .. tmp .. "/results --cache=" .. tmp .. "/cache"
local expect = {
  ["so-fig11"] = { vars = { "double topk_abs(variant, layer, rank)", "double median_abs(variant, layer)", "double top1_over_median(variant)",
                            "double top1_over_median_per_seed(variant, seed)" },
                   md = { "(e) context-aware scaling", "sigmoid attention" } },
  ["so-table3"] = { vars = { "double ppl_fp(variant, seed)", "double ppl_absmax(variant, seed)", "double ppl_prune(variant, seed)",
                             "double paper_ppl(variant, quantity)", "double ratio_to_fp(variant, compression, seed)" },
                    md = { "93.44", "7235.68", "39.47" }, cached = 2 },
  ["so-fig12"] = { vars = { "double train_loss(variant, step)", "double early_loss(variant)", "double early_loss_per_seed(variant, seed)" },
                   md = { "first 20 %" }, cached = 6 },
  ["qt-table2"] = { vars = { "double fp_metric(family, variant, seed)", "double max_inf_norm(family, variant, seed)",
                             "double avg_kurtosis(family, variant, seed)", "double w8a8_metric(family, variant, seed)",
                             "double x_down_max_inf_norm(family, variant, seed)", "double x_down_kurtosis_mean(family, variant)" },
                    md = { "| BERT | vanilla | 4.49 |", "| OPT | gated attention | 15.55 |", "| ViT | clipped softmax | 80.89 |",
                           "| x_down: max inf norm | x_down: avg kurtosis |" } },
  ["qt-table1"] = { vars = { "double gamma_used(row)", "double w8a8_ppl(row, seed)", "double avg_kurtosis_mean(row)" },
                    md = { "| -0.03 |", "451" }, cached = 1 },
}
for _, id in ipairs({ "so-fig11", "so-table3", "so-fig12", "qt-table2", "qt-table1" }) do
  local out, ok = sh(string.format(base, id))
  t.ok(ok, id .. ": quick profile runs", out)
  local dir = tmp .. "/results/" .. id .. "/quick"
  local hdr = sh("ncdump -h " .. dir .. "/" .. id .. ".nc")
  for _, v in ipairs(expect[id].vars) do t.ok(hdr:find(v, 1, true), id .. ": NetCDF has " .. v, hdr) end
  local md = slurp(dir .. "/summary.md")
  for _, s in ipairs(expect[id].md) do t.ok(md:find(s, 1, true), id .. ": summary.md shows " .. s, md) end
  t.ok(md:find("Verdict: **no verdict (quick profile", 1, true), id .. ": quick profile: no verdict")
  local png = slurp(dir .. "/" .. id .. ".png")
  t.ok(png:sub(1, 8) == "\137PNG\r\n\26\n" and #png > 20000, id .. ": PNG, " .. #png .. " bytes")
  if expect[id].cached then
    local n = 0
    for _ in out:gmatch("model %x+: cached") do n = n + 1 end
    t.ok(n >= expect[id].cached, id .. ": reuses " .. expect[id].cached .. " model(s) trained by an earlier experiment (" .. n .. ")", out)
  end
end
-- the values of one variable of qt-table2's NetCDF file, in ncdump's order
local function values(name)
  local d = sh("ncdump -v " .. name .. " " .. tmp .. "/results/qt-table2/quick/qt-table2.nc")
  local body, xs = d:match("\n " .. name .. " =(.-);") or "", {}
  for x in body:gmatch("[%d%.e%+%-]+") do xs[#xs + 1] = tonumber(x) end
  return xs
end
-- the NetCDF values are the ones the summary reports: qt-table2 FP metric of BERT vanilla
local first = values("fp_metric")[1]
local md = slurp(tmp .. "/results/qt-table2/quick/summary.md")
local shown = tonumber(md:match("| BERT | vanilla | 4%.49 | ([%d%.e%+%-]+) |"))
t.ok(first and shown and math.abs(first - shown) <= 1e-3 * math.abs(first) + 0.05, "summary FP metric matches the NetCDF value",
     tostring(first) .. " vs " .. tostring(shown))
-- x_down's statistics: one finite positive value per (family, variant, seed), and not the
-- max inf norm of QT's hooked tensors (another tensor), which the parts table shows beside it
local xm, mi, xk = values("x_down_max_inf_norm"), values("max_inf_norm"), values("x_down_kurtosis")
local fine, differ = #xm == 9 and #xk == 9, false
for i = 1, #xm do
  if not (xm[i] > 0 and xm[i] < math.huge and xk[i] and xk[i] > 0) then fine = false end
  if mi[i] and math.abs(xm[i] - mi[i]) > 1e-6 * mi[i] then differ = true end
end
t.ok(fine, "qt-table2: x_down's max inf norm and kurtosis for each of the 9 models", table.concat(xm, " ") .. " / " .. table.concat(xk, " "))
t.ok(differ, "qt-table2: x_down's max inf norm is its own tensor's, not QT's hooked tensors'", table.concat(xm, " ") .. " / " .. table.concat(mi, " "))
os.execute("rm -rf '" .. tmp .. "'")
return t.done()
