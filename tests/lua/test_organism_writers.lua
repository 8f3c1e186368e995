-- test_organism_writers — scripts/organism-writers.lua on a hand-made model directory: a quick
-- LLaMA whose layer-0 attention writes nothing (o_proj zero) and whose layer-0 neuron J has its
-- gate and up rows along <bos>'s embedding, so that at position 0 the normalised FFN input x̂ is
-- that embedding's direction and neuron J's product is known in closed form:
--   gate = up = 4·‖x̂‖, x_down = silu(gate)·up, with ‖x̂‖ = √C·rms(s·e)/√(rms(s·e)² + eps)
-- (s the recipe's factor on the token embedding, embed_scale).
-- The script must name neuron J at position 0, with cosines 1.00 and that x_down; and refuse a
-- missing --model, a directory without spec.json and a spec that is not a language model's;
-- analysis.writers refuses a model without a SwiGLU MLP.
local t = require "tap"
local ol = require "outlierlab"
local fs = require "outlierlab.util.fs"
local json = require "outlierlab.util.json"
local recipes = require "outlierlab.recipes"
local models = require "outlierlab.models"
local model_dir = dofile(ol.root .. "/tests/lua/lib/model_dir.lua")

local spec = recipes.llama_lm_spec(recipes.LLAMA_LM_PROFILES.quick)
local BOS, J = 1, 5
local g, want   -- neuron J's gate (= up) input and x_down at position 0, from the planted weights
local dir = os.tmpname()
os.remove(dir)
model_dir(spec, dir, function(W, cfg)
  local Cd = cfg.d_model
  -- layer 0's attention adds nothing: h at <bos> before the FFN is <bos>'s embedding e
  local o = W["layers0.attn.o_proj.weight"]
  for i = 0, tonumber(o.numel) - 1 do o.data[i] = 0 end
  local e, s2 = W["embed_tokens.weight"], 0
  for k = 0, Cd - 1 do s2 = s2 + e.data[BOS * Cd + k] ^ 2 end
  local en = math.sqrt(s2)
  for _, name in ipairs { "layers0.mlp.gate_proj.weight", "layers0.mlp.up_proj.weight" } do
    local w = W[name]
    for k = 0, Cd - 1 do w.data[J * Cd + k] = 4 * e.data[BOS * Cd + k] / en end
  end
  local es = cfg.embed_scale > 0 and cfg.embed_scale or 1   -- the recipe's factor on the embedding
  local rms2 = es * es * s2 / Cd
  local xn = math.sqrt(Cd) * math.sqrt(rms2) / math.sqrt(rms2 + cfg.norm_eps)   -- ‖x̂‖ (the RMSNorm gain is 1)
  g = 4 * xn
  want = g / (1 + math.exp(-g)) * g
end)

local function run(args)
  return io.popen("cd " .. OUTLIERLAB_ROOT .. " && bin/outlierlab run scripts/organism-writers.lua " .. args .. " 2>&1"):read("*a")
end
local out = run("--model=" .. dir .. " --batches=1")
t.ok(out:find("layer 1:", 1, true), "one report per layer (the quick model has 2)", out)
local l0 = out:match("layer 0:.-\n(  position 0:[^\n]*)")
t.ok(l0 ~= nil, "layer 0's position-0 line", out)
l0 = l0 or ""
t.is(tonumber(l0:match("neuron #(%d+)")), J, "position 0: the planted neuron is named")
t.is(l0:match("carries (%S+) of the write"), "1.00", "position 0: it carries the whole write")
t.is(l0:match("cos%(gate row, x̂%) ([%d%.%-]+)"), "1.00", "position 0: its gate row is along x̂")
t.is(l0:match("cos%(up row, x̂%) ([%d%.%-]+)"), "1.00", "position 0: its up row is along x̂")
local xd = tonumber(l0:match("x_down (%S+),"))
t.ok(xd and math.abs(xd - want) <= 0.05 + 1e-3 * want, string.format("position 0: x_down %s = silu(g)·g with g = 4‖x̂‖ = %.3f: %.1f",
     tostring(xd), g, want))
local ord = out:match("layer 0:.-\n  position 0:[^\n]*\n(  ordinary tokens:[^\n]*)") or ""
local ratio = tonumber(ord:match("%(position 0: × (%S+)%)"))
t.ok(ratio and ratio > 10, "ordinary tokens: the planted neuron's product there is far smaller (position 0 × " .. tostring(ratio) .. ")", ord)

-- errors: name the flag or the file
t.ok(run(""):find("--model=DIR", 1, true), "no --model: the error names the flag")
t.ok(run("--model=" .. dir .. "/none"):find(dir .. "/none/spec.json", 1, true), "no spec.json: the error names the file")
local bad = dir .. "/mlm"
fs.mkdir_p(bad)
local bspec = recipes.bert_mlm_spec(recipes.BERT_MLM_PROFILES.quick)
fs.write_atomic(bad .. "/spec.json", json.encode({ spec = bspec }) .. "\n")
t.ok(run("--model=" .. bad):find("not a language model's spec", 1, true), "an MLM spec: refused, naming why")

-- the module refuses a model without a SwiGLU MLP (GPT-2's GELU MLP), naming what it needs
do
  local writers = require "outlierlab.measure.writers"
  local gctx = ol.Context{ seed = 1 }
  local gm = models.build(gctx, models.preset("gpt2-quick", { vocab_size = 64 }))
  local ok, err = pcall(writers.measure, gctx, gm, function() error("not reached") end, 1)
  t.ok(not ok and tostring(err):find("LLaMA-family SwiGLU", 1, true), "writers.measure on GPT-2: refused, naming the SwiGLU MLP", tostring(err))
end

os.execute("rm -rf '" .. dir .. "'")
t.done()
