-- test_experiments — every experiments/<id>.lua in its quick profile, end to end, as a
-- subprocess (bin/outlierlab run experiments/<id>.lua --profile=quick --out=TMP --cache=TMP):
-- the NetCDF file holds the expected dims/variables with CF attributes, the PNG is a real
-- PNG of non-trivial size, summary.md states the claim and a verdict. Also: a rerun reuses
-- the cached model, a changed setting retrains, an unknown key is an error.
local t = require "tap"

local sh = t.sh
local slurp = t.slurp

local tmp = os.tmpname()
os.remove(tmp)
os.execute("mkdir -p " .. tmp)
local base = "bin/outlierlab run experiments/%s.lua --profile=quick --out=" .. tmp .. "/results --cache=" .. tmp .. "/cache"

-- what each figure's file must hold (categorical coordinates carry their labels as CF flags)
local expect = {
  ["qt-fig1"] = { "int outlier_count_by_channel(layer, channel)", "int outlier_count_by_category(layer, category)",
                  "double delimiter_share(layer)", "double max_abs_sigma(layer)", "int n_tokens ;",
                  'category:flag_meanings = "initial delimiter weak other" ;' },
  ["qt-fig2"] = { "double attention_probs(query, key)", "double values(key, head_dim)", "double output(query, head_dim)",
                  "int outlier_head ;", "double value_norm_delimiter ;" },
  ["qt-fig3"] = { "int outlier_count(patch_row, patch_col)", "double attention_enrichment(head)", "int example_image(y, x, channel)",
                  'patch_set:flag_meanings = "background border_ring" ;', "int total_outlier_elements ;" },
  ["so-fig3"] = { "double top_abs(layer, rank)", "double median_abs(layer)", "int outlier_tokens_by_category(category)",
                  "int outlier_count_by_channel(channel)", "double initial_weak_share ;", "int outlier_tokens_loose(layer)",
                  "int outlier_count_by_channel_loose(channel)", "double initial_weak_share_loose ;" },
  ["so-fig5"] = { "double extremal_ratio(layer, module)", "double down_column_ratio(layer, ff_column)",
                  'module:flag_meanings = "q k v o gate up down" ;' },
  ["so-fig6"] = { "int attention_outliers(layer)", "int attention_outliers_by_head(layer, head)",
                  "int attention_outliers_by_category(category)", "double initial_weak_share ;" },
  ["so-table1"] = { "double consistency(row)", "double chance_level(row)", "int h_outlier_tokens(tau)", "double overlap_h_attention(tau)" },
  ["emergence"] = { "double max_inf_norm(variant, step)", "double avg_kurtosis(variant, step)",
                    "double max_inf_norm_per_seed(variant, seed, step)", "int n_seeds ;" },
  -- the 4-bit era's settings beside the papers' columns (outlierlab.compress.rtn)
  ["qt-table2"] = { "double quant_metric(family, variant, quant_setting, seed)", "double quant_metric_mean(family, variant, quant_setting)",
                    "double quant_degradation(family, variant, quant_setting, seed)", "double quant_degradation_sd(family, variant, quant_setting)",
                    "int quant_applicable(family, variant, quant_setting)",
                    'quant_setting:flag_meanings = "W8A8 W4A8 W4A4 W4A4_+_Hadamard W4A4_+_SmoothQuant" ;' },
  ["so-table3"] = { "double quant_ppl(variant, quant_setting, seed)", "double quant_ppl_mean(variant, quant_setting)",
                    "double quant_ratio_to_fp(variant, quant_setting, seed)", "double quant_ratio_sd(variant, quant_setting)",
                    "int quant_applicable(variant, quant_setting)" },
  ["quant"] = { "double loss(setting)", "double perplexity(setting)", "double loss_increase(setting)", "int applicable(setting)",
                "int n_tokens ;", 'setting:flag_meanings = "full_precision Hadamard_rotation_alone W8A8 W4A8 W4A4 W4A4_+_Hadamard W4A4_+_SmoothQuant W8A8_FP8_E4M3 W8A8_FP8_E5M2 W4A4_MXFP4 W4A4_NVFP4 KV4 KV4x2C_first_token_kept KV2 KV2x2C_first_token_kept KV2x2C_largest_token_kept" ;' },
}
-- what each summary must say
local expect_md = {
  ["qt-table2"] = { "### 4-bit era, not in the paper", "| model | attention | FP | W8A8 | W4A8 | W4A4 | W4A4 + Hadamard | W4A4 + SmoothQuant |",
                    "| BERT | vanilla |", "| not applicable |", "W4A4 + Hadamard is not applicable to BERT vanilla",
                    "W4A4 + Hadamard is not applicable to OPT gated attention", "Practical claim (W8A8 alone)" },
  ["so-table3"] = { "### 4-bit era, not in the paper", "| GPT-2 (e) context-aware scaling |", "Every setting applies to every model of this run." },
  ["quant"] = { "| Hadamard rotation alone |", "| W4A4 + SmoothQuant |", "Criterion:" },
}
-- a share of zero outliers is undefined (fill value), and the summary says there are none
local undefined_without = {
  ["qt-fig1"] = { count = "outlier_count", share = "delimiter_share" },
  ["so-fig3"] = { count = "total_outlier_tokens", share = "initial_weak_share", none = "no outlier token", never = { "most in #", "0 % initial" } },
  ["so-fig6"] = { count = "total_outliers", share = "initial_weak_share", none = "no attention outlier key", never = { "0 % initial" } },
}
-- the figures whose summaries say undefined numbers in words
local declared = {}
for _, id in ipairs({ "qt-fig1", "qt-fig2", "qt-fig3", "qt-table1", "qt-table2", "so-fig3", "so-fig5", "so-fig6", "so-fig11",
                      "so-fig12", "so-table1", "so-table3", "emergence", "quant" }) do declared[id] = true end
-- the comparisons between variants state the seed rule (outlierlab.judge.seeds) in their summary
local seeded = { ["qt-table1"] = true, ["qt-table2"] = true, ["so-fig11"] = true, ["so-fig12"] = true, ["so-table3"] = true,
                 ["emergence"] = true }
local function values_of(file, var)
  local d = sh("ncdump -v " .. var .. " " .. file)
  return (d:match("\n " .. var .. " = ([^;]*);") or ""):gsub("%s", "")
end

-- the same with 17 significant digits (fill values as "_")
local function values_of_p(file, var)
  local d = sh("ncdump -p 9,17 -v " .. var .. " " .. file)
  return (d:match("\n " .. var .. " =%s*([^;]*);") or ""):gsub("%s", "")
end

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
  for _, v in ipairs(expect_md[id] or {}) do t.ok((slurp(dir .. "/summary.md") or ""):find(v, 1, true), id .. ": summary.md says " .. v) end
  local png = slurp(dir .. "/" .. id .. ".png") or ""
  t.ok(png:sub(1, 8) == "\137PNG\r\n\26\n" and #png > 20000, id .. ": PNG with magic bytes, " .. #png .. " bytes")
  t.ok((slurp(dir .. "/" .. id .. ".pdf") or ""):sub(1, 5) == "%PDF-", id .. ": PDF")
  local md = slurp(dir .. "/summary.md") or ""
  t.ok(md:find("## Claim", 1, true) and md:find("Verdict: **no verdict (quick profile", 1, true) and md:find("Profile: quick", 1, true),
       id .. ": summary.md with claim, profile and no verdict (quick profile)", md)
  if declared[id] then
    t.ok(not md:find("%f[%a]nan%f[%A]"), id .. ": summary.md quotes no nan (an undefined number is said in words)", md)
  end
  if seeded[id] then
    t.ok(md:find("sd_a + sd_b", 1, true) and md:find("seed(s)", 1, true), id .. ": the summary states the seed rule and the seed count", md)
  end
  local u = undefined_without[id]
  if u then
    local nc = dir .. "/" .. id .. ".nc"
    local counts, shares = values_of(nc, u.count), values_of(nc, u.share)
    if not counts:find("[1-9]") then
      t.ok(shares:match("^[_,]+$") ~= nil, id .. ": without outliers " .. u.share .. " is undefined (" .. shares .. ")")
      if u.none then t.ok(md:find(u.none, 1, true), id .. ": the summary says there is none", md) end
      for _, w in ipairs(u.never or {}) do t.ok(not md:find(w, 1, true), id .. ": the summary does not say '" .. w .. "'", md) end
    else
      t.ok(shares:find("%d") ~= nil, id .. ": with outliers " .. u.share .. " is defined (" .. shares .. ")")
    end
  end
end

-- so-fig3's second threshold τ/10 finds every token the first finds, in every layer (and, on the
-- quick model, some where τ finds none: the panels are not empty)
do
  local nc = tmp .. "/results/so-fig3/quick/so-fig3.nc"
  local strict, loose = {}, {}
  for n in values_of(nc, "outlier_tokens"):gmatch("%d+") do strict[#strict + 1] = tonumber(n) end
  for n in values_of(nc, "outlier_tokens_loose"):gmatch("%d+") do loose[#loose + 1] = tonumber(n) end
  local ok, any = #strict == #loose and #loose > 0, false
  for i = 1, #loose do ok = ok and loose[i] >= strict[i]; any = any or loose[i] > 0 end
  t.ok(ok and any, "so-fig3: tokens above τ/10 ⊇ tokens above τ in every layer (" .. table.concat(strict, ",") .. " / " .. table.concat(loose, ",") .. ")")
end

-- the 4-bit era's settings in qt-table2 and so-table3: where they apply, on the paper columns'
-- held-out batches (the harness's FP = fp_metric: metric − degradation for BERT and OPT,
-- metric + degradation for the ViT), the rotation not applicable to BERT, the ViT and QT's
-- per-head gate (fill values), applicable to the decoder organism's other variants
do
  local function numbers(file, var)
    local out = {}
    for x in values_of_p(file, var):gmatch("[^,]+") do out[#out + 1] = tonumber(x) or false end
    return out
  end
  local nc = tmp .. "/results/qt-table2/quick/qt-table2.nc"
  -- (family, variant, quant_setting, seed) with 3 families, 3 variants, 5 settings, 1 seed (quick)
  local app, qm, qd, fp = numbers(nc, "quant_applicable"), numbers(nc, "quant_metric"), numbers(nc, "quant_degradation"), numbers(nc, "fp_metric")
  local H = 4
  local want_app, same_fp, fill_ok = true, true, true
  for fi = 1, 3 do
    for vi = 1, 3 do
      for si = 1, 5 do
        local k = ((fi - 1) * 3 + vi - 1) * 5 + si
        local applies = not (si == H and (fi ~= 2 or vi == 3))   -- OPT = the llama organism; QT's gate blocks the rotation
        want_app = want_app and app[k] == (applies and 1 or 0)
        fill_ok = fill_ok and ((qm[k] == false) == not applies) and ((qd[k] == false) == not applies)
        if applies and qm[k] and qd[k] then
          local f = fi == 3 and qm[k] + qd[k] or qm[k] - qd[k]
          local ref = fp[(fi - 1) * 3 + vi]
          same_fp = same_fp and ref and math.abs(f - ref) <= 1e-9 * math.max(1, math.abs(ref))
        end
      end
    end
  end
  t.ok(#app == 45 and want_app, "qt-table2: W4A4 + Hadamard applies to the decoder organism's vanilla and clipped models only", table.concat(app, ","))
  t.ok(fill_ok, "qt-table2: fill values exactly where a setting does not apply")
  t.ok(same_fp, "qt-table2: the settings were measured against the paper columns' FP metric (same held-out batches)")
  local sapp = numbers(tmp .. "/results/so-table3/quick/so-table3.nc", "quant_applicable")
  local all = #sapp == 10
  for _, x in ipairs(sapp) do all = all and x == 1 end
  t.ok(all, "so-table3: every setting, the rotation too, applies to the softmax and context-aware scaling organisms", table.concat(sapp, ","))
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

-- qt-table2 --families: one column of the table (the decoder's models are cached from above)
do
  local q = string.format(base, "qt-table2") .. " --families=opt --out=" .. tmp .. "/fam"
  local o, ok = sh(q)
  local md = slurp(tmp .. "/fam/qt-table2/quick/summary.md") or ""
  local hdr = sh("ncdump -h " .. tmp .. "/fam/qt-table2/quick/qt-table2.nc")
  t.ok(ok and md:find("Families run: OPT (--families)", 1, true) and md:find("| OPT | vanilla |", 1, true)
       and not md:find("| BERT |", 1, true) and md:find("Practical claim (W8A8 alone)", 1, true),
       "qt-table2 --families=opt: the decoder's rows alone, the practical claim stated", o .. md)
  t.ok(hdr:find("family = 1 ;", 1, true), "qt-table2 --families=opt: one family in the NetCDF file", hdr)
  local e, eok2 = sh(string.format(base, "qt-table2") .. " --families=gpt9")
  t.ok(not eok2 and e:find("unknown family 'gpt9'", 1, true), "qt-table2: an unknown family is an error naming it", e)
end

os.execute("rm -rf " .. tmp)
return t.done()
