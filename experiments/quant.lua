-- Post-training quantisation of one model — the 4-bit era's settings of
-- outlierlab.compress.rtn on one model: the LLaMA-style decoder organism of so-fig3 (trained,
-- or loaded from the cache: the same model), or an imported Hugging Face model with
-- --model=DIR --text=FILE (docs/reference/pretrained.md; GPT-2, OPT and the llama family).
--
-- Method (QuaRot, Ashkboos et al. 2024; SmoothQuant, Xiao et al. 2023; docs/reference/compression.md):
-- on eval_batches held-out batches (an imported model: the first sequences of the text; the
-- organism: its validation split), the token-weighted mean next-token loss in full precision,
-- after the Walsh–Hadamard rotation alone (exact in full precision: the loss must not move
-- beyond fp32 rounding), and after round-to-nearest W8A8, W4A8, W4A4 (weights per output
-- channel, activations per token with dynamic ranges, symmetric, on the input and weight of every
-- linear layer of the blocks; heads, embeddings, attention scores and probabilities in full
-- precision), W4A4 after the rotation, and W4A4 after SmoothQuant (α = 0.5, per-channel maxima
-- from n_calib calibration batches: the organism's training split, or the text's sequences after
-- the evaluated ones). The rotation needs the llama family's RMSNorm pre-norm blocks: for a
-- GPT-2 or OPT model those settings are reported as not applicable, with the reason.
local figure = require "outlierlab.figure"
local quant = require "outlierlab.compress.rtn"
local text = require "outlierlab.data.text"
local recipes = require "outlierlab.recipes"

-- this experiment analyses imported decoders too (--model=DIR --text=FILE; outlierlab.pretrained's
-- list of analysis experiments: the next-token loss on a text needs no masking)

local model_spec = recipes.llama_lm_spec   -- so-fig3's decoder: one trained model

-- the rotation alone (no bits: nothing quantised), then the leaderboard's settings, the formats and the KV cache
local ROTATION = { name = "hadamard", label = "Hadamard rotation alone", hadamard = true }
local SETTINGS = { ROTATION }
for _, list in ipairs({ quant.SETTINGS, quant.FORMAT_SETTINGS, quant.KV_SETTINGS }) do
  for _, s in ipairs(list) do SETTINGS[#SETTINGS + 1] = s end
end
-- the verdict's margins: the rotation alone moves the loss by at most EXACT (relative, fp32
-- rounding with room to spare); plain W4A4 must cost at least MIN_COST nats for the rotation to
-- have something to recover; "recovers most of it" = W4A4 + Hadamard costs at most HALF of it
local EXACT, MIN_COST, HALF = 1e-4, 0.05, 0.5

local FIG = figure.declare{
  title = "Post-training quantisation of one model: held-out loss per setting",
  dims = {
    { "setting", long_name = "evaluation: full precision, the rotation alone, or a post-training quantisation setting", labels = true },
  },
  vars = {
    { "loss", dims = { "setting" }, long_name = "held-out next-token cross entropy, token-weighted mean (fill value where the setting does not apply)", units = "nat" },
    { "perplexity", dims = { "setting" }, long_name = "held-out perplexity, exp(loss) (fill value where the setting does not apply)", units = "1" },
    { "loss_increase", dims = { "setting" }, long_name = "held-out loss minus the full-precision loss (fill value where the setting does not apply)", units = "nat" },
    { "applicable", dims = { "setting" }, long_name = "1 when the setting applies to the model, 0 when it does not (the rotation needs the llama family's RMSNorm pre-norm blocks)", units = "1", type = "int" },
    { "n_tokens", dims = {}, long_name = "held-out tokens evaluated (targets)", units = "1", type = "int" },
    { "n_calib", dims = {}, long_name = "calibration batches of SmoothQuant", units = "1", type = "int" },
  },
  panels = {
    { kind = "bars", x = "setting", y = "perplexity", values = "%.4g", title = "held-out perplexity",
      ylabel = "perplexity", note = "{=n_tokens} tokens; n/a: not applicable" },
    { kind = "bars", x = "setting", y = "loss_increase", values = "%.3g", title = "loss increase over full precision",
      ylabel = "loss − FP loss (nats)", note = "RTN: per-channel weights, per-token activations" },
  },
}

local function train(run) return recipes.fit(run, model_spec(run.cfg)) end

-- the held-out and calibration batches: an imported model reads the text (the first eval_batches
-- batches evaluated, the next n_calib calibrate), the organism its validation and training splits
local function batches(run, ctx, L)
  local cfg = run.cfg
  if run.pretrained then
    local need = (cfg.eval_batches + cfg.n_calib) * cfg.batch * cfg.seq_len + 16
    local corpus = run.pretrained:corpus(need)
    local ld = text.batcher(corpus, { B = cfg.batch, T = cfg.seq_len, kind = "lm", n = cfg.eval_batches + cfg.n_calib })
    local val = quant.batches(ctx, ld, cfg.eval_batches)
    return val, quant.batches(ctx, ld, cfg.n_calib)
  end
  return quant.batches(ctx, L.val(), cfg.eval_batches), quant.batches(ctx, L.calib(), cfg.n_calib)
end

local function analyze(run)
  local cfg = run.cfg
  local ctx, m, L = recipes.load(model_spec(cfg), run.out.train)
  if m.streamed then
    error("experiment quant: the model is run layer by layer (--stream, or its fp32 weights exceed half the available memory); " ..
      "quantisation changes its weights in memory and needs the whole model: --stream=no on a machine with enough memory", 0)
  end
  local val, calib = batches(run, ctx, L)
  local r = quant.run(ctx, m, val, { calib = calib, settings = SETTINGS, log = function(fmt, ...) run:log(fmt, ...) end })
  local fp = r.fp.loss
  local loss, ppl, inc, ok, labels, na = { fp }, { math.exp(fp) }, { 0 }, { 1 }, { "full precision" }, {}
  for _, s in ipairs(r.settings) do
    local x = s.applicable and s.loss or 0 / 0
    loss[#loss + 1], ppl[#ppl + 1], inc[#inc + 1] = x, math.exp(x), x - fp
    ok[#ok + 1], labels[#labels + 1] = s.applicable and 1 or 0, s.label
    if not s.applicable then na[#na + 1] = { who = "this model", label = s.label, reason = s.reason } end
    run:log("%-24s %s", s.label, s.applicable and string.format("loss %.5f (%+.5f), perplexity %.4g", x, x - fp, math.exp(x)) or "not applicable")
  end
  return { coords = { setting = labels },
           vars = { loss = loss, perplexity = ppl, loss_increase = inc, applicable = ok, n_tokens = r.fp.ntokens, n_calib = cfg.n_calib },
           attrs = { not_applicable = quant.not_applicable_lines(na),
                     model = run.pretrained and run.pretrained:label() or ("the LLaMA-style organism (" .. cfg.preset .. ", so-fig3's model)") } }
end

-- the settings' indices in the NetCDF file (1 = full precision)
local AT = { fp = 1 }
for i, s in ipairs(SETTINGS) do AT[s.name] = i + 1 end

local function summary(run)
  local a = run.out.analyze
  local v = figure.values(FIG, a)
  local function inc(name) return v.loss_increase[AT[name]] end
  local rows = { "| setting | loss (nats) | perplexity | loss − FP loss |", "|---|---|---|---|" }
  local parts = {}
  for i = 1, #SETTINGS + 1 do
    local label = a.coords.setting[i]
    if v.applicable[i] == 1 then
      rows[#rows + 1] = string.format("| %s | %.5f | %.4g | %s |", label, v.loss[i], v.perplexity[i], i == 1 and "—" or string.format("%+.5f", v.loss_increase[i]))
      if i > 1 then parts[#parts + 1] = string.format("%s %+.4f", label, v.loss_increase[i]) end
    else
      rows[#rows + 1] = string.format("| %s | not applicable | not applicable | not applicable |", label)
      parts[#parts + 1] = label .. " not applicable"
    end
  end
  -- the verdict (QuaRot's claim on this model), with its margins
  local holds, check
  local rotates = v.applicable[AT.hadamard] == 1
  local c4, cH = inc("w4a4"), rotates and inc("w4a4_hadamard") or nil
  if not rotates then
    check = "the rotation does not apply to this model (see above): nothing to test"
  else
    local drift = math.abs(inc("hadamard"))
    local exact = drift <= EXACT * math.max(1, math.abs(v.loss[1]))
    if not exact then
      holds, check = false, string.format("the rotation alone moved the loss by %.3g nats (allowed: %.0e × max(1, FP loss)): it is not exact", drift, EXACT)
    elseif c4 < MIN_COST then
      check = string.format("the rotation alone moved the loss by %.2g nats (exact); plain W4A4 costs %+.4f nats, less than %.2f: nothing for the rotation to recover (inconclusive)", drift, c4, MIN_COST)
    else
      if cH <= HALF * c4 then holds = true elseif cH > c4 then holds = false end
      check = string.format("the rotation alone moved the loss by %.2g nats (exact); W4A4 costs %+.4f nats, W4A4 + Hadamard %+.4f (%.0f %% of it; holds at ≤ %.0f %%, does not hold above 100 %%)",
        drift, c4, cH, 100 * cH / c4, 100 * HALF)
    end
  end
  return {
    paper = "QuaRot (Ashkboos et al. 2024): the Hadamard rotation is exact in full precision and spreads the outlier channels, so that W4A4 with round-to-nearest keeps most of the quality plain W4A4 loses; SmoothQuant (Xiao et al. 2023): W8A8 keeps FP quality",
    reproduced = string.format("FP loss %.4f (perplexity %.4g); loss increase: %s", v.loss[1], v.perplexity[1], table.concat(parts, ", ")),
    holds = holds,
    notes = table.concat({
      "Model: " .. a.attrs.model .. ". Held-out: " .. v.n_tokens .. " tokens; SmoothQuant calibrated on " .. v.n_calib .. " batch(es). " .. quant.method_text(v.n_calib, "the head and the embedding"),
      "", table.concat(rows, "\n"), "",
      a.attrs.not_applicable, "",
      "Check: " .. check .. ".",
      "",
      string.format("Criterion: the claim holds when the rotation alone leaves the loss unchanged (|Δ| ≤ %.0e × max(1, FP loss): fp32 rounding) and W4A4 + Hadamard costs at most %.0f %% of plain W4A4's loss increase, plain W4A4 costing at least %.2f nats; it does not hold when the rotation is not exact or W4A4 + Hadamard costs more than plain W4A4; otherwise (or without the rotation) it is inconclusive. One model: no seed spread.",
        EXACT, 100 * HALF, MIN_COST),
    }, "\n"),
  }
end

return {
  id = "quant",
  title = "Post-training quantisation of one model: RTN W8A8/W4A8/W4A4, SmoothQuant, Hadamard rotation",
  source = { paper = "QuaRot (Ashkboos et al. 2024), SmoothQuant (Xiao et al. 2023)", figure = "baselines on one model (or --model=DIR)",
             claim = "A Walsh–Hadamard rotation of the residual stream is exact in full precision, and W4A4 round-to-nearest after it keeps most of the quality that plain W4A4 loses." },
  -- so-fig3's profiles (one trained model), with SmoothQuant's calibration batches (long: default's)
  profiles = recipes.profiles_with(recipes.LLAMA_LM_PROFILES, { quick = { n_calib = 1 }, default = { n_calib = 4 }, paper = { n_calib = 16 } }),
  stages = figure.stages(train, analyze, FIG),
  summary = summary,
}
