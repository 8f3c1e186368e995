-- test_stream — models run layer by layer from their memory-mapped checkpoint
-- (outlierlab.pretrained.stream) give the same statistics as the whole model in memory: for GPT-2, OPT
-- (post-LN with project_in/out) and LLaMA (GQA, untied head) checkpoints written in BF16 and
-- sharded, the probes' accumulators (layer outputs, x_down, attention, the final norm) are
-- equal, and the streamed blocks hold the in-memory model's weights. The memory claim (peak RSS
-- well below the fp32 size of a multi-GB model) is measured by bench/analysis.lua, not here.
local t = require "tap"
local ol = require "outlierlab"
local hf = require "outlierlab.pretrained.hf"
local stream = require "outlierlab.pretrained.stream"
local models = require "outlierlab.models"
local analysis = require "outlierlab.measure.metrics"
local probes = require "outlierlab.measure.probes"
local serialize = require "outlierlab.util.serialize"
local batches = require "outlierlab.measure.batches"
local ffi = ol.ffi

local root = os.tmpname()
os.remove(root)
os.execute("mkdir -p " .. root)

-- a loader of deterministic token batches
local function loader(V, B, T)
  return { step = 0, next = function(self, ctx)
    local ids = ctx:tensor({ B, T }, { dtype = "i32", name = "ids" })
    for i = 0, B * T - 1 do ids.idata[i] = (self.step * 7919 + i * 131 + 7) % V end
    self.step = self.step + 1
    return { ids = ids }
  end }
end
local function attach(P, cfg, T)
  local sig = { T = T, C = cfg.d_model, V = cfg.vocab_size, topk = 3,
                rule = analysis.rule{ kind = "tau_mean", tau = 3, scope = "sequence" }, category = function() return "other" end }
  return { h = P:attach("h", analysis.LayerStats(sig)),
           ln_f = P:attach("ln_f", analysis.LayerStats(sig)),
           x = P:attach("x_down", analysis.LayerStats{ T = T, C = cfg.d_ff, topk = 2, rule = analysis.QT_6SIGMA }),
           a = P:attach("attn_probs", analysis.LayerAttn{ T = T, NH = cfg.n_head, rule = "tau_mean", tau = 2, frac = 0.1 }) }
end
local function results(acc)
  local out = {}
  for k, v in pairs(acc) do out[k] = v:result() end
  return serialize.serialize(out)
end

local cases = {
  { "llama", models.preset("llama-quick", { n_head = 4, n_kv_head = 2, d_model = 64, n_layer = 3 }) },
  { "gpt2", models.preset("gpt2-quick", { bias = true }) },
  { "opt", models.preset("opt-quick", { dropout = 0.0, d_embed = 32, ln_before = false }) },
}
for ci, case in ipairs(cases) do
  local label, cfg = case[1], case[2]
  local ctx = ol.Context{ params = 4 * 1024 * 1024, seed = ci }
  local m = models.build(ctx, cfg)
  for i, p in ipairs(ctx:params()) do p:normal_(0, 0.2, 100 * ci + i) end
  local dir = root .. "/" .. label
  hf.export(dir, ctx, m, { dtype = "BF16", shard_bytes = 30000 })
  local B, T, n = 2, 16, 3
  -- in memory
  local c1, m1 = hf.load(dir)
  local P1 = probes.new{}
  local acc1 = attach(P1, m1.cfg, T)
  c1:no_grad(function()
    local ld = loader(cfg.vocab_size, B, T)
    for i = 1, n do c1:reset() local b = ld:next(c1) b.seq_offset = (i - 1) * B P1:forward(m1, b) end
  end)
  -- streamed
  local logs = {}
  local sm = stream.open(dir, { log = function(...) logs[#logs + 1] = string.format(...) end })
  local P2 = probes.new{}
  local acc2 = attach(P2, sm.cfg, T)
  local run = sm:probe(P2, loader(cfg.vocab_size, B, T), n)
  local r1, r2 = results(acc1), results(acc2)
  t.ok(r1 == r2 and #r1 > 1000, string.format("%s: streamed statistics (h, x_down, attention, ln_f over %d layers) equal the in-memory ones", label, cfg.n_layer),
       r1 == r2 and "" or (r1:sub(1, 300) .. "\n---\n" .. r2:sub(1, 300)))
  t.ok(#logs == cfg.n_layer and logs[#logs]:find("ETA", 1, true) and run.tokens == n * B * T,
       label .. ": progress per layer with tokens/s and ETA: " .. tostring(logs[#logs]))
  -- the weights of each streamed block are the in-memory model's
  local same = true
  for l, blk in batches.blocks(sm) do
    local w1, w2 = m1.blocks[l].mlp.down.weight, blk.mlp.down.weight
    if ffi.C.memcmp(w1.data, w2.data, 4 * tonumber(w1.numel)) ~= 0 then same = false end
  end
  t.ok(same, label .. ": batches.blocks(streamed model) gives every layer's weights")
  sm:close()
end

t.throws(function() stream.open(root .. "/nothing") end, "no such directory", "stream.open of a missing directory")
do   -- BERT is loaded whole, not streamed
  local ctx = ol.Context{ params = 1024 * 1024 }
  local m = models.build(ctx, models.preset("bert-quick", { dropout = 0.0 }))
  hf.export(root .. "/bert", ctx, m)
  t.throws(function() stream.open(root .. "/bert") end, "is not streamed", "a BERT directory is not streamed")
end
local cur, peak = stream.rss()
t.ok(cur and peak and peak >= cur and cur > 1e6, string.format("rss(): %.0f MB now, %.0f MB peak", (cur or 0) / 2 ^ 20, (peak or 0) / 2 ^ 20))

os.execute("rm -rf " .. root)
return t.done()
