-- bench/peer/engine.lua — the engine's side of `make bench-peer`: training tokens/s of the
-- shapes bench/peer/torch_peer.py trains in PyTorch eager right after (gpt2-124m B 1 × T 1024,
-- gpt2-tiny B 32 × T 64, llama-organism at its default profile's batch × T 64), written with
-- each model's config to build/bench/peer.json. A step is what train.run does (forward,
-- backward, clip, AdamW) on random tokens; median over the timed steps after two warm-up steps.
-- Also the share of the step inside the matmul/linear products: the step's rate with nothing but
-- its products (at their measured speed, every other op free) bounds what work outside them can give.
--   bin/outlierlab run bench/peer/engine.lua [--steps=10] [--big_steps=3] [--out=build/bench/peer.json]
local ol = require "outlierlab"
local models = require "outlierlab.models"
local train = require "outlierlab.train.loop"
local json = require "outlierlab.util.json"
local C = ol.C
local cfg = require("outlierlab.config").get { steps = 10, big_steps = 3, out = "build/bench/peer.json", which = "all" }
local recipes = require "outlierlab.recipes"

local function median(xs)
  table.sort(xs)
  local n = #xs
  return n % 2 == 1 and xs[(n + 1) / 2] or 0.5 * (xs[n / 2] + xs[n / 2 + 1])
end

local function run(name, mc, B, T, steps)
  local ctx = ol.Context { seed = 1 }
  local m = models.build(ctx, mc)
  local l = { pos = 0 }
  function l:next(c)
    local ids = c:tensor({ B, T }, { dtype = "i32", name = "ids" })
    local tg = c:tensor({ B, T }, { dtype = "i32", name = "targets" })
    for i = 0, B * T - 1 do
      ids.idata[i] = math.floor(C.ol_rand_uniform(7, self.pos * 2) * mc.vocab_size)
      tg.idata[i] = math.floor(C.ol_rand_uniform(7, self.pos * 2 + 1) * mc.vocab_size)
      self.pos = self.pos + 1
    end
    return { ids = ids, targets = tg }
  end
  local times = {}
  train.run { ctx = ctx, model = m, loader = l, cfg = { steps = steps + 2, lr = 1e-4, progress = "off" },
              on_step = function(step) if step == 2 then C.ol_profile_reset() C.ol_profile_enable(1) end end,
              log = function(r) if r.kind == "step" and r.step > 2 then times[#times + 1] = r.dt end end }
  C.ol_profile_enable(0)
  local dt = median(times)
  local total = 0
  for _, t in ipairs(times) do total = total + t end
  -- the products' share of the timed steps (ol_profile: wall time inside the matmul/linear
  -- products): at that share the step can be at most 1/share times faster by work outside them
  local share = C.ol_profile_seconds(0) / total
  print(string.format("engine   %-16s B=%-3d T=%-5d %9.0f tok/s (%.4f s/step, threads %d); products %.0f%% of the step",
                      name, B, T, B * T / dt, dt, ol.num_threads(), 100 * share))
  local c = {}
  for k, v in pairs(mc) do c[k] = v end
  return { name = name, cfg = c, B = B, T = T, steps = steps, engine_tok_s = B * T / dt, products_share = share }
end

local out = {}
local function want(w) return cfg.which == "all" or cfg.which == w end
if want("llama") then
  local p = recipes.LLAMA_LM_PROFILES.default
  out[#out + 1] = run("llama-organism", models.spec_cfg(recipes.llama_lm_spec(p)), p.batch, p.seq_len, cfg.steps)
end
if want("tiny") then out[#out + 1] = run("gpt2-tiny", models.preset("gpt2-tiny", { block_size = 64 }), 32, 64, cfg.steps) end
if want("big") then
  out[#out + 1] = run("gpt2-124m", models.preset("gpt2-124m", { block_size = 1024 }), 1, 1024, cfg.big_steps)
end
os.execute("mkdir -p \"$(dirname '" .. cfg.out .. "')\"")
local f = assert(io.open(cfg.out, "w"))
-- blas_core: the OpenBLAS kernel set the engine ran with, which the peer then uses too (torch_peer.py)
f:write(json.encode({ threads = ol.num_threads(), blas_core = require("outlierlab.figure.netcdf").machine().blas_core, shapes = out }))
f:close()
