-- test_quant_hf — experiments/quant.lua end to end on generated Hugging Face directories
-- (--model=DIR --text=FILE; docs/reference/compression.md, docs/reference/pretrained.md):
--   * a LLaMA directory (random weights, norm gains away from 1, untied head): the run writes
--     results/quant/<model>-quick/, every setting's loss finite; the rotation alone leaves the
--     loss where it was to fp32 rounding; and, recomputed here on the same text batches, the
--     experiment's FP and W4A4 + Hadamard losses are the harness's, W4A4 + Hadamard = W4A4's
--     machinery applied after quant.rotate (bit for bit), the rotation changed the weights, and
--     bits ≥ 16 change nothing;
--   * a GPT-2 directory: the rotation and W4A4 + Hadamard are not applicable (said in words, with
--     the reason; fill values in the NetCDF file), the other settings run;
--   * refused with a clear message: a BERT directory (no next-token loss on a text), a streamed
--     model (quantisation needs the whole model in memory).
-- No ordering of the settings' losses is asserted (W8A8 below W4A4 and the like are likely, not
-- guaranteed: rounding noise can lower a loss); only what holds by construction is.
local t = require "tap"
local ol = require "outlierlab"
local ffi = require "ffi"
local hf = require "outlierlab.pretrained.hf"
local json = require "outlierlab.util.json"
local models = require "outlierlab.models"
local quant = require "outlierlab.compress.rtn"
local tokenizers = require "outlierlab.pretrained.tokenizers"
local text = require "outlierlab.data.text"

local root = os.tmpname()
os.remove(root)
os.execute("mkdir -p " .. root)
local function write(path, s) local f = assert(io.open(path, "wb")) f:write(s) f:close() end

-- a model of the preset with deterministic random weights (gains 1 ± 0.5), written as a
-- Hugging Face directory with a byte-fallback BPE tokenizer (<s> = 1)
local tiny_hf = dofile(ol.root .. "/tests/lua/lib/tiny_hf.lua")
local function make(name, preset, over) return tiny_hf(root .. "/" .. name, preset, over) end
local lines = {}
for i = 1, 300 do lines[i] = "And it came to pass, in the " .. i .. "th year, that they went." end
local textfile = root .. "/text.txt"
write(textfile, table.concat(lines, "\n"))

local function run(dir, extra)
  return t.sh(string.format("bin/outlierlab run experiments/quant.lua --profile=quick --model=%s --text=%s --out=%s/results --cache=%s/cache%s",
    dir, textfile, root, root, extra or ""))
end
-- the values of a NetCDF variable (nil where a fill value)
local function nc_values(file, var)
  local d = t.sh("ncdump -p 9,17 -v " .. var .. " " .. file)
  local body = d:match("\n " .. var .. " = ([^;]*);") or ""
  local out = {}
  for x in body:gmatch("[^,%s]+") do out[#out + 1] = tonumber(x) or false end
  return out
end

-- ---------------------------------------------------------------- LLaMA
local dir = make("tiny-llama", "llama-quick", { tie_embeddings = false, n_kv_head = 1 })
local out, ok = run(dir)
local rd = root .. "/results/quant/tiny-llama-quick/"
local md = t.slurp(rd .. "summary.md") or ""
t.ok(ok and md:find("model tiny-llama (llama", 1, true) and md:find("nothing trained", 1, true),
  "quant --model=DIR --text=FILE runs on a LLaMA directory, nothing trained, the summary names the model", out .. md)
t.ok(not out:find("stage train\n[quant] model", 1, true), "no training")
local nc = rd .. "quant.nc"
local loss, ok_ = nc_values(nc, "loss"), nc_values(nc, "applicable")
local labels = json.decode((t.sh("ncdump -h " .. nc):match('setting:labels = "(.-)" ;') or "[]"):gsub('\\"', '"'))
-- FP, the rotation alone, the leaderboard's five settings, the formats and the KV cache
local N = 2 + #quant.SETTINGS + #quant.FORMAT_SETTINGS + #quant.KV_SETTINGS
t.is(#loss, N, N .. " evaluations: FP, the rotation alone, the five settings, the formats and the KV cache", table.concat(labels, ", "))
local at = {}
for i, l in ipairs(labels) do at[l] = i end
local finite = #loss == N
for i, x in ipairs(loss) do finite = finite and x and x == x and math.abs(x) < math.huge and ok_[i] == 1 end
t.ok(finite, "every setting applies to the LLaMA model and gives a finite loss", json.encode(loss))
local fp, rot = loss[1], loss[at["Hadamard rotation alone"]]
t.ok(fp and rot and math.abs(rot - fp) <= 1e-5 * math.abs(fp),
  "the rotation alone leaves the loss unchanged to fp32 rounding", string.format("%.9g vs %.9g", rot or 0, fp or 0))
t.ok(md:find("| W4A4 + Hadamard |", 1, true) and not md:find("%f[%a]nan%f[%A]"), "the summary's table has every setting and no nan", md)

-- the same text batches here, the harness in this process
do
  local ctx, m = hf.load(dir)
  local cfg = { batch = 8, seq_len = 32, eval_batches = 2, n_calib = 1 }   -- quant.lua's quick profile
  local corpus = text.corpus{ path = textfile, tokenizer = tokenizers.load(dir),
                              max_tokens = (cfg.eval_batches + cfg.n_calib) * cfg.batch * cfg.seq_len + 16 }
  local ld = text.batcher(corpus, { B = cfg.batch, T = cfg.seq_len, kind = "lm", n = cfg.eval_batches + cfg.n_calib })
  local val = quant.batches(ctx, ld, cfg.eval_batches)
  local calib = quant.batches(ctx, ld, cfg.n_calib)
  local l_fp = quant.evaluate(ctx, m, val)
  t.ok(math.abs(l_fp - fp) <= 1e-12 * math.abs(fp), "the experiment's FP loss is the harness's on the text's first batches",
    string.format("%.17g vs %.17g", l_fp, fp))
  local h = quant.apply(ctx, m, { wbits = 4, abits = 4, hadamard = true, calib = calib })
  local l_h = quant.evaluate(ctx, m, val)
  h.restore()
  t.ok(math.abs(l_h - loss[at["W4A4 + Hadamard"]]) <= 1e-12 * math.abs(l_h), "the experiment's W4A4 + Hadamard loss is the harness's",
    string.format("%.17g vs %.17g", l_h, loss[at["W4A4 + Hadamard"]]))
  local w0 = {}
  for i = 0, 63 do w0[i] = m.embed_tokens.weight.data[i] end
  local r = quant.rotate(ctx, m)
  local moved = false
  for i = 0, 63 do moved = moved or m.embed_tokens.weight.data[i] ~= w0[i] end
  t.ok(moved, "quant.rotate changes the weights (the embedding rotated)")
  t.ok(math.abs(quant.evaluate(ctx, m, val) - l_fp) <= 1e-5 * math.abs(l_fp), "after quant.rotate the FP loss is unchanged to fp32 rounding")
  local h2 = quant.apply(ctx, m, { wbits = 4, abits = 4 })
  local l_rw = quant.evaluate(ctx, m, val)
  h2.restore()
  r.restore()
  t.is(l_rw, l_h, "W4A4 + Hadamard = W4A4's machinery applied after the exact rotation (quant.rotate, then W4A4), bit for bit")
  t.is(quant.evaluate(ctx, m, val), l_fp, "restored: the FP loss bit for bit")
  local h16 = quant.apply(ctx, m, { wbits = 16, abits = 16 })
  t.is(quant.evaluate(ctx, m, val), l_fp, "bits ≥ 16 quantise nothing: the FP loss bit for bit")
  h16.restore()
end

-- ---------------------------------------------------------------- GPT-2: the rotation does not apply
do
  local gdir = make("tiny-gpt2", "gpt2-quick", {})
  local o, gok = run(gdir)
  local grd = root .. "/results/quant/tiny-gpt2-quick/"
  local gmd = t.slurp(grd .. "summary.md") or ""
  t.ok(gok and gmd:find("| W4A4 + Hadamard | not applicable |", 1, true) and gmd:find("| Hadamard rotation alone | not applicable |", 1, true)
       and gmd:find("GPT-2's blocks are pre-LN with LayerNorm", 1, true) and not gmd:find("%f[%a]nan%f[%A]"),
    "gpt2: the rotation and W4A4 + Hadamard are 'not applicable' in words, with the reason, no nan", o .. gmd)
  t.ok(gmd:find("Verdict: the claim is **inconclusive**", 1, true), "gpt2: without the rotation the claim is not tested (inconclusive)", gmd)
  local gl, ga = nc_values(grd .. "quant.nc", "loss"), nc_values(grd .. "quant.nc", "applicable")
  t.ok(#gl == N and gl[2] == false and gl[6] == false and ga[2] == 0 and ga[6] == 0 and ga[5] == 1 and ga[N] == 1,
    "gpt2: fill values where the setting does not apply, applicable = 0 there", json.encode(gl) .. " " .. json.encode(ga))
  local fin = true
  for i, x in ipairs(gl) do if ga[i] == 1 then fin = fin and x and math.abs(x) < math.huge end end
  t.ok(fin, "gpt2: the other settings give finite losses")
end

-- ---------------------------------------------------------------- refused
do
  local ctx = ol.Context{ params = 2 * 1024 * 1024, seed = 7 }
  local bdir = root .. "/tiny-bert"
  hf.export(bdir, ctx, models.build(ctx, models.preset("bert-quick", {})))
  local o, bok = run(bdir)
  t.ok(not bok and o:find("a bert model cannot be analysed here", 1, true) and o:find("next-token loss", 1, true),
    "a BERT directory is refused, naming why", o)
  local so, sok = run(dir, " --stream=yes --reanalyze")
  t.ok(not sok and so:find("--stream=no", 1, true) and so:find("experiment quant", 1, true), "a streamed model is refused, naming --stream", so)
end

os.execute("rm -rf " .. root)
return t.done()
