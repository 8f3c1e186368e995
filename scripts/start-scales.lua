-- scripts/start-scales.lua — where a model starts: the quantities at initialisation that decide
-- whether the papers' phenomena can form, for each paper model and each organism, so that a
-- shrunk model can be made to start where the paper's model starts (issue: scale-faithful organisms).
--
--   bin/outlierlab run scripts/start-scales.lua [--gain=rule|1|<number>] [--T=0] [--seed=1]
--                                               [--which=NAME] [--embed_scale=20 (LLaMA models)]
--
-- On random token ids (images: random pixels) at initialisation, one forward, it prints per model:
--   spread   sd of log(p·T_i) over every attention probability of every layer (T_i the keys query
--            i sees): how far the scores move the probabilities from uniform. p = 1/T_i gives 0.
--   spread0  the same in layer 0 alone.
--   write    rms of layer 0's attention and FFN writes (attn_out + ffn_out) over rms of the block
--            input at layer 0 (the embedding, or its LayerNorm in BERT): the residual stream's scale.
--   clip     the share of probabilities that QT's clipped softmax at γ·T = −3.2 (BERT's
--            γ = −0.025 at T = 128) lets through: p·T > 3.2 / (1 + 3.2/T). 0 means every
--            probability is clipped to zero and the clipped model gets no gradient.
--   max pT   the largest p·T_i.
-- --gain sets the models' init_gain (the block projections' initial weights × gain; not the
-- embeddings, norms or head); "rule" gives each organism models.width_gain, the width-translation
-- rule √(d_paper / d), which keeps d·std², and with it the sd of the attention scores, equal to
-- the paper model's (docs/reference/models.md, "Starting where the paper's model starts").
local ol = require "outlierlab"
local models = require "outlierlab.models"
local cfg = require("outlierlab.config").get{ gain = "1", T = 0, seed = 1, which = "all", embed_scale = 0.0 }

-- the paper model each organism is a shrunk copy of, and the sequence lengths they train at
local ROWS = {
  { "bert-base", 128 }, { "bert-organism", 64, "bert-base" },
  { "opt-125m", 512 },
  { "gpt2-124m", 256 },
  { "tinyllama-120m", 256 }, { "llama-organism", 64, "tinyllama-120m" },
  { "vit-s16", 0 }, { "vit-organism", 0, "vit-s16" },
}

local function measure(name, T, paper)
  local gain = cfg.gain == "rule" and (paper and models.width_gain(name) or 1) or tonumber(cfg.gain)
  if not gain then error("start-scales: --gain must be 'rule' or a number, got " .. tostring(cfg.gain), 0) end
  local mc = models.preset(name, { init_gain = gain, embed_scale = models.preset(name).family == "llama" and cfg.embed_scale or nil })
  local ctx = ol.Context{ seed = cfg.seed }
  local m = models.build(ctx, mc)
  local B = 2
  local batch
  ctx:reset()
  if mc.family == "vit" then
    local img = ctx:tensor({ B, mc.channels, mc.image_size, mc.image_size }):uniform_(0, 1, cfg.seed)
    batch = { images = img, labels = ctx:tensor({ B }, { dtype = "i32" }) }
    T = math.floor(mc.image_size / mc.patch_size) ^ 2 + 1
  else
    T = cfg.T > 0 and cfg.T or T
    local ids = ctx:tensor({ B, T }, { dtype = "i32" })
    local s = cfg.seed
    for i = 0, B * T - 1 do
      s = (s * 1103515245 + 12345) % 2147483648
      ids.idata[i] = 4 + s % (mc.vocab_size - 4)
    end
    batch = { ids = ids, targets = ids }
    if mc.family == "bert" then
      batch.token_type = ctx:tensor({ B, T }, { dtype = "i32" })
      local pm = ctx:tensor({ B, T }, { dtype = "i32" })
      for i = 0, B * T - 1 do pm.idata[i] = 1 end
      batch.pad_mask = pm
    end
  end
  local causal = mc.family ~= "bert" and mc.family ~= "vit"
  local n, s1, s2, n0, s10, s20, pass, maxpt = 0, 0, 0, 0, 0, 0, 0, 0
  local rms = {}
  local function sq(t)
    local a = 0
    for i = 0, tonumber(t.numel) - 1 do a = a + t.data[i] * t.data[i] end
    return a, tonumber(t.numel)
  end
  ctx:no_grad(function()
    m:forward(batch, { train = false, probe = function(pname, l, t)
      if pname == "attn_probs" then
        local Bb, NH, Tq, Tk = t:size(0), t:size(1), t:size(2), t:size(3)
        local thr = 3.2 / (1 + 3.2 / Tk)
        for b = 0, Bb - 1 do for h = 0, NH - 1 do for i = 0, Tq - 1 do
          local Ti = causal and (i + 1) or Tk
          local row = ((b * NH + h) * Tq + i) * Tk
          for j = 0, Ti - 1 do
            local pt = t.data[row + j] * Ti
            if pt > 0 then
              local x = math.log(pt)
              n, s1, s2 = n + 1, s1 + x, s2 + x * x
              if l == 0 then n0, s10, s20 = n0 + 1, s10 + x, s20 + x * x end
              if pt > thr then pass = pass + 1 end
              if pt > maxpt then maxpt = pt end
            end
          end
        end end end
      elseif l == 0 and (pname == "attn_in" or pname == "emb" or pname == "attn_out" or pname == "ffn_out") then
        local a, k = sq(t)
        rms[pname] = math.sqrt(a / k)
      end
    end })
  end)
  local sd = math.sqrt(math.max(0, s2 / n - (s1 / n) ^ 2))
  local sd0 = math.sqrt(math.max(0, s20 / n0 - (s10 / n0) ^ 2))
  local base = rms.emb or rms.attn_in   -- the residual stream entering layer 0
  local write = (rms.attn_out or 0) + (rms.ffn_out or 0)
  print(string.format("%-16s d %4d  T %4d  gain %5.2f  spread %.4f  spread0 %.4f  write %7.3f  clip %.2e  max pT %7.3f",
                      name, mc.d_model, T, gain, sd, sd0, base and write / base or 0 / 0, pass / n, maxpt))
  return { name = name, d = mc.d_model, gain = gain, spread = sd, spread0 = sd0, write = base and write / base, clip = pass / n }
end

for _, r in ipairs(ROWS) do
  if cfg.which == "all" or r[1]:find(cfg.which, 1, true) then measure(r[1], r[2], r[3]) end
end
