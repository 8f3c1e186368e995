-- test_train_families — the issue's must-show: every model family trains in its `quick`
-- preset through train.run on the project's own synthetic data, and its validation loss
-- falls below a stated bound (a few seconds each, one thread).
--
-- Bounds (150 AdamW steps, lr 3e-3, warmup 10, B = 8 (16 images), T = 32, 256-token corpus):
--   decoders (gpt2, opt, llama): validation loss < 3.7 nats (ppl < 40); at init it is
--     ln 256 = 5.55; measured 3.31–3.40.
--   bert (MLM, masked tokens only): < 4.7; measured 4.37 (the masked-token loss of a
--     2-layer model this early stays above the decoders').
--   vit (4 classes, 16×16 images, 4×4 patches): validation loss < 1.1 (chance ln 4 = 1.386)
--     and top-1 > 45 % (chance 25 %); measured 0.875 and 66 %.
local t = require "tap"
local ol = require "outlierlab"
local models = require "outlierlab.models"
local data = require "outlierlab.data"
local train = require "outlierlab.train.loop"
local progress = require "outlierlab.util.progress"

-- one thread: these models are tiny (threads only add barrier waits) and the numbers
-- below were measured with one thread (results are reproducible per thread count)
ol.set_num_threads(1)

local STEPS = 150
local corpus = data.corpus { seed = 1, n_tokens = 200000, vocab_size = 256 }

local cases = {
  { fam = "gpt2", bound = 3.7 }, { fam = "opt", bound = 3.7 }, { fam = "llama", bound = 3.7 },
  { fam = "bert", bound = 4.7 }, { fam = "vit", bound = 1.1, acc = 0.45 },
}

for _, c in ipairs(cases) do
  local fam = c.fam
  local ctx = ol.Context { seed = 1 }
  local mc = models.preset(fam .. "-quick", fam ~= "vit" and { vocab_size = corpus.vocab_size } or nil)
  local m = models.build(ctx, mc)
  local tr, va
  if fam == "bert" then
    tr = data.MLMLoader { corpus = corpus, B = 8, T = 32, seed = 1 }
    va = data.MLMLoader { corpus = corpus, B = 8, T = 32, seed = 2, split = "val" }
  elseif fam == "vit" then
    tr = data.ImageLoader { n = 512, size = 16, classes = 4, B = 16, seed = 1 }
    va = data.ImageLoader { n = 512, size = 16, classes = 4, B = 16, seed = 1, split = "val" }
  else
    tr = data.LMLoader { tokens = corpus, B = 8, T = 32, seed = 1 }
    va = data.LMLoader { tokens = corpus, B = 8, T = 32, seed = 2, split = "val" }
  end
  local t0 = progress.now()
  local ok, res = pcall(train.run, { ctx = ctx, model = m, loader = tr, val_loader = va,
                                     cfg = { steps = STEPS, lr = 3e-3, warmup = 10, eval_every = 50,
                                             eval_batches = 4, progress = "off" } })
  if not ok then
    t.ok(false, fam .. "-quick trains", res)
  else
    local v0, v = res.val[1], res.val[#res.val]
    t.diag(string.format("%s-quick: %d params, train loss %.3f -> %.3f, val loss %.3f -> %.3f%s in %.1f s",
                         fam, m:num_params(), res.losses[1], res.losses[STEPS], v0.loss, v.loss,
                         v.acc and string.format(", top-1 %.0f%%", 100 * v.acc) or string.format(", ppl %.1f", v.ppl),
                         progress.now() - t0))
    t.is(#res.val, 3, fam .. ": evaluated at steps 50, 100 and 150")
    t.ok(res.losses[1] > c.bound + 0.25, fam .. ": the first training loss is well above the bound",
         string.format("%.3f vs bound %.2f", res.losses[1], c.bound))
    t.ok(v.loss < c.bound, string.format("%s-quick: validation loss after %d steps < %.2f", fam, STEPS, c.bound),
         string.format("val loss %.4f", v.loss))
    if fam == "vit" then
      t.ok(v.acc and v.acc > c.acc, string.format("vit-quick: top-1 accuracy > %.0f%% (chance 25%%)", 100 * c.acc),
           tostring(v.acc))
    elseif fam == "bert" then
      t.ok(v.mlm_loss == v.loss and v.ntokens < 4 * 8 * 32 and v.ntokens > 0,
           "bert: the validation loss counts masked tokens only", tostring(v.ntokens))
    else
      t.near(v.ppl, math.exp(v.loss), 1e-9, fam .. ": perplexity = exp(validation loss)")
    end
  end
end

return t.done()
