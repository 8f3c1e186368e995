-- test_width_rule — the width-translation rule (models.width_gain, the models' init_gain): the
-- block projections' initial weights, and only they, are scaled; the rule's gains are the ones the
-- rule states; the spread of the attention scores at init follows d·std² (hand-computed case).
local t = require "tap"
local ol = require "outlierlab"
local models = require "outlierlab.models"
local ffi = require "ffi"

local function params(name, gain)
  local ctx = ol.Context{ seed = 3 }
  models.build(ctx, models.preset(name, { init_gain = gain }))
  local out = {}
  for _, p in ipairs(ctx:params()) do
    local v = {}
    for i = 0, math.min(tonumber(p.numel), 64) - 1 do v[#v + 1] = p.data[i] end
    out[ffi.string(p.name)] = v
  end
  return out
end

for _, name in ipairs({ "bert-quick", "llama-quick", "vit-quick", "opt-quick", "gpt2-quick" }) do
  local a, b = params(name, 1.0), params(name, 2.5)
  local scaled, kept, bad = 0, 0, {}
  for pname, va in pairs(a) do
    local proj = pname:match("%.attn%.[qkvo]_proj%.weight$") or pname:match("%.mlp%.[a-z]+_proj%.weight$")
    for i, x in ipairs(va) do
      local want = proj and tonumber(ffi.new("float", x * 2.5)) or x   -- the fp32 product
      if b[pname][i] ~= want then bad[#bad + 1] = pname break end
    end
    if proj then scaled = scaled + 1 else kept = kept + 1 end
  end
  t.ok(#bad == 0 and scaled >= 4 and kept >= 2,
       string.format("%s: init_gain 2.5 scales the %d block projections exactly and keeps the %d other parameters", name, scaled, kept),
       table.concat(bad, ", "))
end

t.near(models.width_gain("bert-organism"), math.sqrt(768 / 64), 1e-12, "width_gain: BERT organism √(768/64)")
t.near(models.width_gain("vit-organism"), math.sqrt(384 / 64), 1e-12, "width_gain: ViT organism √(384/64)")
t.is(models.width_gain("llama-organism"), 1.0, "width_gain: the TinyLlama init already scales with width (1)")
t.near(models.width_gain(models.preset("llama-organism", { init = "hf" })), math.sqrt(12), 1e-12,
       "width_gain: LLaMA with the fixed 0.02 init √(768/64)")
t.is(models.width_gain("bert-base"), 1.0, "width_gain: the paper model itself 1")
local ok, err = pcall(models.build, ol.Context{ seed = 1 }, models.preset("bert-quick", { init_gain = 0.0 }))
t.ok(not ok and tostring(err):match("init_gain must be > 0"), "init_gain 0 is an error naming the key", err)
t.ok(models.build(ol.Context{ seed = 1 }, models.preset("bert-quick", { init_gain = 2.0 })):describe():match("init × 2"),
     "describe() says the init gain")

-- d·std² decides the scores' spread: one head of BERT-quick's first layer at init has scores
-- q·k/√hd whose sd grows with the gain squared (q and k each × gain): measured on its probes
local function score_sd(gain)
  local ctx = ol.Context{ seed = 5 }
  local m = models.build(ctx, models.preset("bert-quick", { init_gain = gain, dropout = 0.0 }))
  ctx:reset()
  local B, T = 2, 32
  local ids, tt, pm = ctx:tensor({ B, T }, { dtype = "i32" }), ctx:tensor({ B, T }, { dtype = "i32" }), ctx:tensor({ B, T }, { dtype = "i32" })
  for i = 0, B * T - 1 do ids.idata[i] = 4 + (i * 37) % 200; pm.idata[i] = 1 end
  local s1, s2, n = 0, 0, 0
  ctx:no_grad(function()
    m:forward({ ids = ids, token_type = tt, pad_mask = pm, targets = ids }, { train = false, probe = function(pn, l, x)
      if pn == "attn_probs" and l == 0 then
        for i = 0, tonumber(x.numel) - 1 do
          local v = math.log(x.data[i] * T)
          s1, s2, n = s1 + v, s2 + v * v, n + 1
        end
      end
    end })
  end)
  return math.sqrt(s2 / n - (s1 / n) ^ 2)
end
local s1, s3 = score_sd(1.0), score_sd(3.0)
-- log(p·T) ≈ score − mean score for small scores, so its sd grows about 9× for gain 3
t.ok(s3 / s1 > 7 and s3 / s1 < 10, string.format("the sd of log(p·T) grows with gain² (gain 3: %.4f / %.4f = %.2f, about 9)", s3, s1, s3 / s1))

-- the profile-level switch: --scale_rule=paper keeps every spec as it was; width adds the gain
local recipes = require "outlierlab.recipes"
local papers = require "outlierlab.recipes.papers"
local run = require "outlierlab.runner.run"
t.is(recipes.init_gain({ preset = "bert-organism", scale_rule = "paper" }), nil, "scale_rule=paper: no init_gain in the spec")
t.near(recipes.init_gain({ preset = "bert-organism", scale_rule = "width" }), math.sqrt(12), 1e-12, "scale_rule=width: the BERT organism's gain")
t.is(recipes.init_gain({ preset = "llama-organism", scale_rule = "width" }), nil, "scale_rule=width: the LLaMA organism needs none (TinyLlama init)")
local okb, errb = pcall(recipes.init_gain, { preset = "bert-organism", scale_rule = "mup" })
t.ok(not okb and tostring(errb):match("scale_rule must be 'paper' or 'width'"), "an unknown rule is an error naming the key", errb)
local qp = papers.qt_profiles()
local function gain_of(rule, family)
  local c = {}
  for k, v in pairs(qp.default) do c[k] = v end
  c.scale_rule = rule
  return papers.qt_spec(c, family, papers.qt_attention(c, family, "clipped"), 1).model.overrides.init_gain
end
t.is(gain_of("paper", "bert"), nil, "QT's clipped BERT at scale_rule=paper: the spec of before")
t.near(gain_of("width", "bert") or 0, math.sqrt(12), 1e-12, "QT's clipped BERT at scale_rule=width: init × √12")
t.near(gain_of("width", "vit") or 0, math.sqrt(6), 1e-12, "QT's ViT at scale_rule=width: init × √6")
t.is(run.data_leaf{ scale_rule = "width" }, "width", "a width-rule run writes results/<id>/width-<profile>/")
t.is(run.data_leaf{ data = "kjv", scale_rule = "width" }, "kjv-width", "... and kjv-width-<profile> on the KJV")
t.is(run.data_leaf{ scale_rule = "paper" }, nil, "the papers' rule keeps <id>/<profile>")
t.is(run.data_leaf({ scale_rule = "width" }, "width"), nil, "a profile's own rule keeps <id>/<profile> (QT's width)")
t.is(run.data_leaf({ scale_rule = "paper" }, "width"), "paper", "--scale_rule=paper on QT's profile writes <id>/paper-<profile>/")
-- QT's experiments train under the width rule below the paper profile; the rest keep the papers' rule
do
  local function rule_of(id, prof) return dofile(OUTLIERLAB_ROOT .. "/experiments/" .. id .. ".lua").profiles[prof].scale_rule end
  for _, id in ipairs({ "qt-fig1", "qt-fig2", "qt-fig3", "qt-fig10", "qt-fig14", "qt-fig15", "qt-fig16", "qt-table1", "qt-table2" }) do
    t.is(rule_of(id, "default"), "width", id .. ": the default profile trains under the width rule")
    t.is(rule_of(id, "paper"), "paper", id .. ": the paper profile keeps the papers' rule (gain 1 at their widths)")
  end
  t.is(rule_of("so-fig3", "default"), "paper", "so-fig3 keeps the papers' rule")
end
return t.done()
