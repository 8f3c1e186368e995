-- pretrained — an analysis experiment on a downloaded model instead of a trained one
-- (docs/reference/pretrained.md): `bin/outlierlab run experiments/so-fig3.lua --model=DIR --text=FILE`.
--
-- The runner (outlierlab.runner.run) calls attach() when --model is given; from then on
--   run:model(...)            returns the imported model's handle (nothing is trained)
--   recipes.load              gives the model: whole in memory, or streamed layer by layer
--                             (outlierlab.pretrained.stream) when its fp32 size exceeds half the memory
--                             available (--stream=yes|no overrides the choice)
--   experiment.corpus(d, run) gives the text file tokenized by the model's own tokenizer
--   experiment.probe_batches  cuts the text into sequences with the model's BOS or [CLS]/[SEP]
--   the summary               names the model and the text, and gives the paper's statement
--                             for that model where the paper has one (SO: GPT-2, LLaMA-2-7B;
--                             QT: BERT-base)
-- The results go to results/<id>/<model name>-<profile>/ (runner/report.results_dir); run.cfg's
-- vocab_size becomes the model's. The stage cache key holds the XXH64 of the whole content of
-- every file the analysis reads (config.json, the index and every shard, the tokenizer files,
-- the text), so a changed model, tokenizer or text is analysed again (docs/reference/pretrained.md "Cache").
local hf = require "outlierlab.pretrained.hf"

local M = {}

-- which model families each analysis experiment can read, and what it needs
M.EXPERIMENTS = {
  ["qt-fig1"] = { families = { bert = true, gpt2 = true, opt = true, llama = true }, text = true },
  ["qt-fig2"] = { families = { bert = true, gpt2 = true, opt = true, llama = true }, text = true },
  ["qt-fig3"] = { families = { vit = true }, text = false },
  ["so-fig1"] = { families = { gpt2 = true, opt = true, llama = true }, text = true },
  ["so-fig3"] = { families = { gpt2 = true, opt = true, llama = true, bert = true }, text = true },
  ["so-fig5"] = { families = { llama = true }, text = false, why = "the gate, up and down projections of a SwiGLU MLP",
                  needs = function(c) return c.mlp == "glu" end },   -- not Phi, Falcon, MPT: their MLP has no gate
  ["so-fig6"] = { families = { gpt2 = true, opt = true, llama = true, bert = true }, text = true },
  ["so-table1"] = { families = { gpt2 = true, opt = true, llama = true }, text = true },
  ["quant"] = { families = { gpt2 = true, opt = true, llama = true }, text = true,
                why = "the next-token loss of a decoder on the text" },
  -- the model report (outlierlab.report, make report): every measure of a decoder on a text
  ["report"] = { families = { gpt2 = true, opt = true, llama = true }, text = true,
                 why = "the outlier report of a decoder on a text" },
}

-- The paper's models, recognised by family and shape, and what the paper reports for each
-- experiment (the claims as the experiment files state them for that model).
local PAPER_MODELS = {
  { name = "GPT-2 (124M)", family = "gpt2", n_layer = 12, d_model = 768 },
  -- (not a Qwen1.5-7B, model_type qwen2 with LLaMA-2-7B's shape: q/k/v biases)
  -- (nor an MPT-7B: 32 layers of d 4096 too, with LayerNorm, a GELU MLP and ALiBi)
  { name = "LLaMA-2-7B", family = "llama", n_layer = 32, d_model = 4096, n_kv_head = 32, qkv_bias = false, qk_norm = false, embed_scale = 0,
    norm = "rmsnorm", mlp = "glu", parallel = "none", alibi = 0, rope_factor = 0 },
  { name = "BERT-base", family = "bert", n_layer = 12, d_model = 768 },
}
M.PAPER = {
  ["so-fig3"] = {
    ["LLaMA-2-7B"] = "LLaMA-2-7B (SO Fig. 3, τ = 1000): activation outliers in h from the shallow layers (layer 2) on, persisting through the middle layers and diminishing in the final layers; at the start token and weak-semantic tokens ('.', '\\n'); in a few fixed channels (1415, 2533)",
    ["GPT-2 (124M)"] = "GPT-2 (SO Fig. 11, default attention): top-1 |h| in the thousands from layer 2 on against a median below 1, vanishing in the last layer",
  },
  ["so-fig5"] = { ["LLaMA-2-7B"] = "LLaMA-2-7B (SO Fig. 5): weight outliers concentrated in W_down of the second layer and the last two layers" },
  ["so-fig6"] = { ["LLaMA-2-7B"] = "LLaMA-2-7B (SO Fig. 6): attention outliers in every layer, at the start token and weak-semantic tokens" },
  ["so-table1"] = { ["LLaMA-2-7B"] = "LLaMA-2-7B (SO Table 1): W_down ~ x_down 100 %, W_down ~ h 100 %, x_down ~ h 100 %, h ~ attention 95 %" },
  ["qt-fig1"] = { ["BERT-base"] = "BERT-base (QT Fig. 1): > 97 % of the 6σ outliers of layers 10 and 11's FFN output at delimiter tokens, in dims #180 and #720" },
  ["qt-fig2"] = { ["BERT-base"] = "BERT-base (QT Fig. 2): the head behind outlier dim #180/#720 attends mostly to [SEP] and '.', whose values are small" },
}

function M.paper_model(cfg)
  for _, p in ipairs(PAPER_MODELS) do
    local ok = true
    for k, v in pairs(p) do if k ~= "name" and cfg[k] ~= v then ok = false end end
    if ok then return p.name end
  end
  return nil
end

-- the files of a model directory that the tokenizer reads (outlierlab.tokenizers.load and
-- its special-token look-up), those that exist
M.TOKENIZER_FILES = { "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt", "vocab.txt" }

-- the cache key of the files an analysis reads: each file's name and the XXH64 of its whole
-- content (engine/io_hf.c), never its size or time, so a file changed in place with its size
-- and mtime kept (cp -p, rsync -a) or a changed copy elsewhere is analysed again
local function fingerprint(paths)
  local out = {}
  for _, p in ipairs(paths) do out[#out + 1] = p:match("([^/]+)$") .. " " .. hf.hash_file(p) end
  return table.concat(out, "; ")
end
M.fingerprint = fingerprint

-- open(path) -> a model's handle: a llama2.c checkpoint (a .bin file, or a directory holding
-- one and no config.json: pretrained/llama2c.lua) or a Hugging Face directory (hf.open)
function M.open(path, opts)
  local l2c = require "outlierlab.pretrained.llama2c"
  if l2c.detect(path) then return l2c.open(path, opts) end
  return hf.open(path, opts)
end

-- the tokenizer of an opened model (M.open): llama2.c's beside the checkpoint, or the
-- directory's tokenizer files (pretrained/tokenizers.lua)
function M.tokenizer(d)
  if d.kind == "llama2c" then return require("outlierlab.pretrained.llama2c").tokenizer(d) end
  return require("outlierlab.pretrained.tokenizers").load(d.dir)
end

local Pre = {}
Pre.__index = Pre

-- attach(exp, opts = {model =, text =, stream = "auto"|"yes"|"no"}, cfg) -> the run's
-- pretrained object; checks the experiment, the family, the text and the sequence length now
-- train_keys: the keys of the shared training profiles (runner/run.lua, from outlierlab.recipes)
function M.attach(exp, opts, cfg, train_keys)
  local id = exp.id
  local e = M.EXPERIMENTS[id]
  if not e then
    error(string.format("experiment %s: --model: this experiment trains its own models and does not analyse a pretrained one (analysis experiments: %s)",
      id, (function() local k = {} for n in pairs(M.EXPERIMENTS) do k[#k + 1] = n end table.sort(k) return table.concat(k, ", ") end)()), 0)
  end
  local d = M.open(opts.model)
  local cfg_m = d.cfg
  if not e.families[cfg_m.family] then
    d:close()
    local fams = {}
    for f in pairs(e.families) do fams[#fams + 1] = f end
    table.sort(fams)
    error(string.format("experiment %s: a %s model cannot be analysed here (%s: %s)", id, cfg_m.family,
      e.why or "families", table.concat(fams, ", ")), 0)
  end
  if e.needs and not e.needs(cfg_m) then
    d:close()
    error(string.format("experiment %s: a model of config.json model_type '%s' cannot be analysed here: the experiment needs %s", id,
      d.family, e.why), 0)
  end
  local self = setmetatable({ id = id, dir = d.dir, name = d.name, cfg = cfg_m, d = d, family = d.family, text = opts.text ~= "" and opts.text or nil,
                              stream = opts.stream or "auto", train_keys = train_keys }, Pre)
  local files = d.kind == "llama2c" and d:paths() or { d.dir .. "/config.json" }
  if d.index then files[#files + 1] = d.dir .. "/model.safetensors.index.json" end
  for _, f in ipairs(d.kind == "llama2c" and {} or d.files) do files[#files + 1] = d.dir .. "/" .. f.name end
  for _, f in ipairs(d.kind == "llama2c" and {} or M.TOKENIZER_FILES) do
    local h = io.open(d.dir .. "/" .. f, "rb")
    if h then h:close() files[#files + 1] = d.dir .. "/" .. f end
  end
  if cfg_m.family == "vit" then
    if self.text then d:close() error(string.format("experiment %s analyses images: --text does not apply to a ViT", id), 0) end
  else
    if not self.text then d:close() error(string.format("experiment %s: --model=%s needs --text=FILE (the text the model reads)", id, opts.model), 0) end
    if hf.is_dir(self.text) then d:close() error(string.format("experiment %s: --text=%s is a directory, not a text file", id, self.text), 0) end
    local fh, ferr = io.open(self.text, "rb")
    if not fh then d:close() error(string.format("experiment %s: --text=%s: cannot open %s", id, self.text, tostring(ferr)), 0) end
    fh:close()
    if not hf.is_file(self.text) then d:close() error(string.format("experiment %s: --text=%s is not a regular file", id, self.text), 0) end
    files[#files + 1] = self.text
    local T = cfg.seq_len
    if T and T > cfg_m.block_size then
      d:close()
      local why = "config.json"
      if d.family == "mistral" and d.hf.sliding_window == cfg_m.block_size then
        why = "config.json 'sliding_window': the engine's attention has no window, so a Mistral reads at most that many tokens"
      end
      error(string.format("experiment %s: seq_len %d exceeds the model's %d positions (%s); use --seq_len=%d or less", id, T,
        cfg_m.block_size, why, cfg_m.block_size), 0)
    end
    if cfg.vocab_size then cfg.vocab_size = cfg_m.vocab_size end
  end
  self.fingerprint = "model " .. self.name .. "; " .. fingerprint(files)
  return self
end

-- the handle run:model returns for an imported model
function Pre:handle()
  local fp32, file = self.d:sizes()
  return { pretrained = self, dir = self.dir, cached = true, hash = "pretrained",
           info = { imported = self.dir, params = require("outlierlab.models").count_params(self.cfg), fp32_bytes = fp32, file_bytes = file } }
end

-- the model: ctx, m (eval mode); streamed when it does not fit (see the file's head)
function Pre:load(log)
  local stream = require "outlierlab.pretrained.stream"
  local fp32 = self.d:sizes()
  local avail = stream.mem_available() or math.huge
  local want = self.stream == "yes" or (self.stream == "auto" and fp32 > avail / 2)
  if self.d.kind == "llama2c" then
    if self.stream == "yes" then
      error("--stream=yes: a llama2.c checkpoint is loaded whole; export it to a Hugging Face directory to stream it (llama2c.export_hf)", 0)
    end
    local ctx, m = require("outlierlab.pretrained.llama2c").load(self.d)
    self.model = m
    return ctx, m
  end
  if want and stream.FAMILIES[self.cfg.family] then
    self.model = stream.open(self.d, { log = log })
    self.model.ctx_owner = true
    return self.model.ctx, self.model
  end
  if want and self.stream == "yes" then
    error(string.format("--stream=yes: a %s model is not streamed (gpt2, opt, llama are)", self.cfg.family), 0)
  end
  local ctx, m = hf.load(self.d)
  self.model = m
  return ctx, m
end

-- the text corpus, tokenized by the model's tokenizer (as many tokens as n batches of B×T need)
function Pre:corpus(need)
  if self._corpus then return self._corpus end
  local text = require "outlierlab.data.text"
  local tk = M.tokenizer(self.d)
  self._corpus = text.corpus{ path = self.text, tokenizer = tk, max_tokens = need }
  -- every id the tokenizer gives must have a row in the model's embedding
  local c, V = self._corpus, self.cfg.vocab_size
  for i = 0, c.n - 1 do
    local id = c.tokens[i]
    if id >= V then
      error(string.format("experiment %s: %s gives token id %d (%q) at token %d of %s, but config.json 'vocab_size' = %d: the tokenizer does not belong to this model",
        self.id, (tk.file or self.dir):match("([^/]+)$") or tostring(tk.file), id, tostring(tk.id_to[id]), i, self.text, V), 0)
    end
  end
  return self._corpus
end

-- probe_batches for an imported model: the text cut into sequences; streamed models walk
-- their layers once for all batches
function M.probe_batches(ctx, m, P, corpus, spec, n)
  local text = require "outlierlab.data.text"
  -- an encoder reads [CLS] … [SEP]; a decoder [BOS] + text, whatever the trained recipe was
  local kind = m.cfg.family == "bert" and "mlm" or "lm"
  local ld = text.batcher(corpus, { B = spec.batch.B, T = spec.batch.T, kind = kind, n = n })
  if m.streamed then return m:probe(P, ld, n) end
  ctx:no_grad(function()
    for i = 0, n - 1 do
      ctx:reset()
      local batch = ld:next(ctx)
      batch.seq_offset = i * spec.batch.B
      P:forward(m, batch)
    end
  end)
  ctx:reset()
end

-- The settings an analysis of an imported model used: the profile's settings without those that
-- only train a model (train_keys: every key of the shared training profiles, which the runner
-- passes down from outlierlab.recipes, less seq_len, batch, eval_batches and seed), so the
-- Settings section of summary.md says what was run and lists no training setting, since nothing was
-- trained.
local ANALYSIS_KEYS = { seq_len = true, batch = true, eval_batches = true, seed = true }
function M.analysis_settings(cfg, train_keys)
  local train = train_keys or {}
  local out = {}
  for k, v in pairs(cfg) do if ANALYSIS_KEYS[k] or not train[k] then out[k] = v end end
  return out
end

-- the settings a run on this model used (summary.md's Settings line, run.json's settings)
function Pre:settings(cfg) return M.analysis_settings(cfg, self.train_keys) end

-- how a figure or a line names the model: "Mistral-7B-v0.1 (mistral, 7,241,732,096 parameters)"
-- (the family is config.json's model_type: a Mistral runs as the project's llama model)
function Pre:label()
  local models = require "outlierlab.models"
  return string.format("%s (%s, %s parameters)", self.name, self.family or self.cfg.family, models.commas(models.count_params(self.cfg)))
end

-- the summary of a run on an imported model: the model and text named, the paper's statement
-- for that model where the paper has one, and the Settings section (s.settings_note, s.settings)
function Pre:summary(run, s)
  local pm = M.paper_model(self.cfg)
  local mine = pm and M.PAPER[self.id] and M.PAPER[self.id][pm]
  local what = string.format("model %s (%s, %s parameters, %s)%s", self.name, self.family or self.cfg.family,
    require("outlierlab.models").commas(require("outlierlab.models").count_params(self.cfg)), self.dir,
    self.text and (", text " .. self.text) or ", synthetic images")
  local out = {}
  for k, v in pairs(s) do out[k] = v end
  if mine then out.paper = mine .. " [the paper's model; the experiment's general statement: " .. tostring(s.paper) .. "]"
  else out.paper = string.format("(no number in the paper for %s) %s", pm or ("this " .. (self.family or self.cfg.family) .. " model"), tostring(s.paper)) end
  out.reproduced = what .. ": " .. tostring(s.reproduced)
  out.settings_note = string.format("Imported model %s from %s, %s; nothing trained. The analysis settings:", self:label(), self.dir,
    self.text and ("text " .. self.text) or "synthetic images")
  out.settings = self:settings(run.cfg)
  out.notes = "Pretrained " .. what .. (self.model and self.model.streamed and " — run layer by layer from the memory-mapped checkpoint" or "") ..
    ".\n\n" .. (s.notes or "")
  return out
end

return M
