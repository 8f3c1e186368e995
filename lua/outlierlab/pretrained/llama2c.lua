-- llama2c — llama2.c's checkpoints (karpathy/llama2.c: run.c, export.py) as the project's LLaMA
-- (docs/reference/pretrained.md "llama2.c checkpoints"):
--
--   local l2c = require "outlierlab.pretrained.llama2c"
--   local d = l2c.open("models/stories260K")         -- a .bin file, or a directory holding one
--   local ctx, m, info = l2c.load(d)                  -- the project's llama model, eval mode
--   local tk = l2c.tokenizer(d)                       -- tokenizer.bin (run.c's encode)
--   l2c.export_hf(d, "out/stories260K-hf")            -- config.json, model.safetensors, tokenizer.json
--
-- engine/io_llama2c.c reads the file (versions 0, 1 and 2; every header field checked, the size
-- exact). The model: dim → d_model, hidden_dim → d_ff, n_kv_heads → n_kv_head (grouped-query
-- attention), seq_len → block_size, RMSNorm eps 1e-5 and RoPE base 10000 (run.c's constants),
-- the classifier tied to the embedding when the file says so. llama2.c rotates the pairs
-- (2i, 2i+1) of each head (interleaved RoPE); the engine rotates (i, i + head_size/2)
-- (rotate-half, as Hugging Face's LLaMA): the rows of wq and wk are permuted per head, row 2i to
-- i and 2i+1 to i + head_size/2 (as transformers' convert_llama_weights_to_hf.py). q·k is
-- unchanged by the same permutation of q's and k's dims, so the logits are llama2.c's.
-- The tokenizer sits beside the checkpoint: tok<vocab_size>.bin (llama2.c's name for a custom
-- one), else tokenizer.bin.
local ol = require "outlierlab"
local models = require "outlierlab.models"
local ffi, C = ol.ffi, ol.C

local M = {}

local function fail(where, fmt, ...) error("llama2c: " .. where .. ": " .. string.format(fmt, ...), 0) end
local function engine_fail()
  local msg = ffi.string(C.ol_error())
  C.ol_clear_error()
  error(msg ~= "" and msg or "llama2c: engine call failed", 0)
end
local function is_dir(p) return os.execute("test -d '" .. p:gsub("'", "'\\''") .. "'") == 0 end
local function is_file(p) return os.execute("test -f '" .. p:gsub("'", "'\\''") .. "'") == 0 end
local function tokenizer_name(f) return f == "tokenizer.bin" or f:match("^tok%d+%.bin$") ~= nil end

-- is path a llama2.c checkpoint, or a directory holding one (and no config.json)?
function M.detect(path)
  if type(path) ~= "string" or path == "" then return false end
  path = path:gsub("/+$", "")
  if is_file(path) then return path:match("%.bin$") ~= nil and not tokenizer_name(path:match("([^/]+)$")) end
  if not is_dir(path) or is_file(path .. "/config.json") then return false end
  for _, f in ipairs(require("outlierlab.util.fs").list_dir(path)) do
    if f:match("%.bin$") and not tokenizer_name(f) then return true end
  end
  return false
end

local Dir = {}
Dir.__index = Dir
M.Dir = Dir

local HDR = ffi.new("int32_t[10]")

-- open(path, opts) -> Dir: the header read and checked; .cfg (the project's model config),
-- .family "llama2.c", .dir, .file, .path, .tokenizer (path or nil), .version, .name
function M.open(path, opts)
  opts = opts or {}
  if type(path) ~= "string" or path == "" then error("llama2c.open: path must be a .bin file or a directory", 2) end
  path = path:gsub("/+$", "")
  local dir, file
  if is_dir(path) then
    local bins = {}
    for _, f in ipairs(require("outlierlab.util.fs").list_dir(path)) do
      if f:match("%.bin$") and not tokenizer_name(f) then bins[#bins + 1] = f end
    end
    table.sort(bins)
    if #bins == 0 then fail(path, "no llama2.c checkpoint (.bin other than tokenizer.bin or tok<N>.bin) in the directory") end
    if #bins > 1 then fail(path, "%d checkpoints in the directory (%s): name the file, --model=%s/%s", #bins, table.concat(bins, ", "), path, bins[1]) end
    dir, file = path, bins[1]
  else
    dir, file = path:match("^(.*)/([^/]+)$")
    if not dir then dir, file = ".", path end
    if dir == "" then dir = "/" end
  end
  local full = dir .. "/" .. file
  local f = C.ol_l2c_open(full)
  if f == nil then engine_fail() end
  f = ffi.gc(f, C.ol_l2c_close)
  C.ol_l2c_header(f, HDR)
  local h = {}
  for i = 0, 9 do h[i] = HDR[i] end
  local name = opts.name or file:gsub("%.bin$", "")
  local cfg = { family = "llama", name = name, vocab_size = h[6], block_size = h[7], n_layer = h[3], n_head = h[4], n_kv_head = h[5],
                d_model = h[1], d_ff = h[2], norm_eps = 1e-5, rope_base = 10000.0, tie_embeddings = h[8] == 1, init = "hf", dropout = 0.0 }
  local self = setmetatable({ kind = "llama2c", f = f, dir = dir, file = file, path = full, name = name, family = "llama2.c", hf = {},
                              version = h[0], group_size = h[9], files = { { name = file } } }, Dir)
  self.cfg = models.config(cfg, "llama2c " .. full)
  for _, t in ipairs { "tok" .. h[6] .. ".bin", "tokenizer.bin" } do
    if is_file(dir .. "/" .. t) then self.tokenizer_file = dir .. "/" .. t break end
  end
  if self.tokenizer_file then self.files[2] = { name = self.tokenizer_file:match("([^/]+)$") } end
  return self
end

function Dir:close()
  if self.f then ffi.gc(self.f, nil) C.ol_l2c_close(self.f) self.f = nil end
end

-- fp32 bytes of the model's parameters, and the checkpoint's bytes
function Dir:sizes()
  local fh = io.open(self.path, "rb")
  local n = fh and fh:seek("end") or 0
  if fh then fh:close() end
  return 4 * models.count_params(self.cfg), n
end

-- the paths an analysis reads (the cache key's fingerprint)
function Dir:paths()
  local out = {}
  for _, f in ipairs(self.files) do out[#out + 1] = self.dir .. "/" .. f.name end
  return out
end

-- rows of a (heads × hs, cols) matrix from llama2.c's interleaved pairs to rotate-half:
-- dst row h·hs + i ← src row h·hs + 2i, dst row h·hs + hs/2 + i ← src row h·hs + 2i + 1
local function to_rotate_half(src, dst, heads, hs, cols)
  local half = hs / 2
  for h = 0, heads - 1 do
    for i = 0, half - 1 do
      ffi.copy(dst + (h * hs + i) * cols, src + (h * hs + 2 * i) * cols, 4 * cols)
      ffi.copy(dst + (h * hs + half + i) * cols, src + (h * hs + 2 * i + 1) * cols, 4 * cols)
    end
  end
end
M.to_rotate_half = to_rotate_half

-- load(d or path, opts) -> ctx, model (eval mode), info
function M.load(d, opts)
  opts = opts or {}
  local own = type(d) ~= "table"
  if own then d = M.open(d, opts) end
  local ok, a, b, c = pcall(function()
    local cfg = d.cfg
    local ctx = ol.Context{ params = models.count_params(cfg) + 64 * 1024 * (cfg.n_layer + 8), seed = opts.seed or 1 }
    local m = models.build(ctx, cfg)
    local P = {}
    for _, p in ipairs(ctx:params()) do P[ffi.string(p.name)] = p end
    local function read(which, layer, p)
      if tonumber(C.ol_l2c_numel(d.f, which)) ~= tonumber(p.numel) then
        fail(d.path, "%s has %d values, the model's %s %d (internal mapping error)", ffi.string(C.ol_l2c_tensor_name(which)),
             tonumber(C.ol_l2c_numel(d.f, which)), ffi.string(p.name), tonumber(p.numel))
      end
      if C.ol_l2c_read(d.f, which, layer, p.data) ~= 0 then engine_fail() end
    end
    local hs = cfg.d_model / cfg.n_head
    local tmp = ffi.new("float[?]", cfg.d_model * cfg.d_model)
    local function read_rope(which, layer, p, heads)
      if C.ol_l2c_read(d.f, which, layer, tmp) ~= 0 then engine_fail() end
      to_rotate_half(tmp, p.data, heads, hs, cfg.d_model)
    end
    read(C.OL_L2C_TOK, 0, P["embed_tokens.weight"])
    read(C.OL_L2C_RMS_FINAL, 0, P["norm.weight"])
    if not cfg.tie_embeddings then read(C.OL_L2C_WCLS, 0, P["lm_head.weight"]) end
    for l = 0, cfg.n_layer - 1 do
      local o = "layers" .. l .. "."
      read(C.OL_L2C_RMS_ATT, l, P[o .. "ln1.weight"])
      read_rope(C.OL_L2C_WQ, l, P[o .. "attn.q_proj.weight"], cfg.n_head)
      read_rope(C.OL_L2C_WK, l, P[o .. "attn.k_proj.weight"], cfg.n_kv_head)
      read(C.OL_L2C_WV, l, P[o .. "attn.v_proj.weight"])
      read(C.OL_L2C_WO, l, P[o .. "attn.o_proj.weight"])
      read(C.OL_L2C_RMS_FFN, l, P[o .. "ln2.weight"])
      read(C.OL_L2C_W1, l, P[o .. "mlp.gate_proj.weight"])
      read(C.OL_L2C_W3, l, P[o .. "mlp.up_proj.weight"])
      read(C.OL_L2C_W2, l, P[o .. "mlp.down_proj.weight"])
    end
    if m.eval then m:eval() end
    local fp32, file = d:sizes()
    return ctx, m, { dir = d.dir, path = d.path, name = cfg.name, family = d.family, cfg = cfg, version = d.version,
                     absent = {}, fp32_bytes = fp32, file_bytes = file }
  end)
  if own then d:close() end
  if not ok then error(a, 0) end
  return a, b, c
end

-- the tokenizer beside the checkpoint (tokenizers.llama2c), or an error naming where it looked
function M.tokenizer(d, path)
  path = path or d.tokenizer_file
  if not path then
    fail(d.path, "no tokenizer beside the checkpoint (looked for %s/tok%d.bin and %s/tokenizer.bin)", d.dir, d.cfg.vocab_size, d.dir)
  end
  return M.read_tokenizer(path, d.cfg.vocab_size)
end

-- tokenizer.bin with exactly vocab_size pieces (<= 0: as many as the file holds)
function M.read_tokenizer(path, vocab_size)
  local t = C.ol_l2c_tok_open(path, vocab_size or 0)
  if t == nil then engine_fail() end
  local pieces, scores = {}, {}
  local len, sc = ffi.new("int32_t[1]"), ffi.new("float[1]")
  for i = 0, C.ol_l2c_tok_count(t) - 1 do
    local p = C.ol_l2c_tok_piece(t, i, len, sc)
    pieces[i], scores[i] = ffi.string(p, len[0]), sc[0]
  end
  local max_len = C.ol_l2c_tok_max_len(t)
  C.ol_l2c_tok_close(t)
  local tk = require("outlierlab.pretrained.tokenizers").llama2c(pieces, scores, { where = path })
  tk.file, tk.max_token_length = path, max_len
  return tk
end

-- ---------------------------------------------------------------- export to Hugging Face
-- A tokenizer.json that Hugging Face's LLaMA tokenizer (and tokenizers.from_json) reads as the
-- same tokenizer: pieces with " " as "▁", BPE with byte fallback, and as merges every split of
-- every piece into two pieces, ranked by the merged piece's score (highest first; then by id,
-- then by the left part's length: run.c merges the best-scoring pair, the leftmost on a tie).
function M.hf_tokenizer_json(tk)
  local json = require "outlierlab.util.json"
  local vocab, list = {}, {}
  for id = 0, tk.vocab_size - 1 do
    local s = tk.id_to[id]
    if id == 1 or id == 2 then s = id == 1 and "<s>" or "</s>" end
    s = s:gsub(" ", "▁")
    if vocab[s] == nil then vocab[s] = id end
  end
  local chars = require("outlierlab.pretrained.tokenizers").chars
  for id = 3, tk.vocab_size - 1 do
    local s = tk.id_to[id]
    if tk.vocab[s] == id and not s:match("^<0x%x%x>$") then
      local cs = chars(s)
      for k = 1, #cs - 1 do
        local a, b = table.concat(cs, "", 1, k), table.concat(cs, "", k + 1)
        if tk.vocab[a] and tk.vocab[b] and tk.vocab[a] > 2 and tk.vocab[b] > 2 then
          list[#list + 1] = { score = tk.scores[id], id = id, k = k, m = a:gsub(" ", "▁") .. " " .. b:gsub(" ", "▁") }
        end
      end
    end
  end
  table.sort(list, function(x, y)
    if x.score ~= y.score then return x.score > y.score end
    if x.id ~= y.id then return x.id < y.id end
    return x.k < y.k
  end)
  local merges = {}
  for i, x in ipairs(list) do merges[i] = x.m end
  local added = {}
  for id, s in pairs { [0] = "<unk>", "<s>", "</s>" } do
    added[#added + 1] = { id = id, content = s, special = true, single_word = false, lstrip = false, rstrip = false, normalized = false }
  end
  table.sort(added, function(x, y) return x.id < y.id end)
  return json.encode({
    version = "1.0", added_tokens = added,
    normalizer = { type = "Sequence", normalizers = { { type = "Prepend", prepend = "▁" },
                                                      { type = "Replace", pattern = { String = " " }, content = "▁" } } },
    pre_tokenizer = json.null,
    decoder = { type = "Sequence", decoders = { { type = "Replace", pattern = { String = "▁" }, content = " " }, { type = "ByteFallback" },
                                                 { type = "Fuse" }, { type = "Strip", content = " ", start = 1, stop = 0 } } },
    model = { type = "BPE", dropout = json.null, unk_token = "<unk>", continuing_subword_prefix = json.null, end_of_word_suffix = json.null,
              fuse_unk = true, byte_fallback = true, ignore_merges = false, vocab = vocab, merges = merges } }) .. "\n"
end

local function atomic_write(path, text)
  local tmp = path .. ".tmp." .. tostring(os.time()) .. tostring(math.random(1e9))
  local fh, err = io.open(tmp, "wb")
  if not fh then error("llama2c.export_hf: cannot create " .. tostring(err), 0) end
  fh:write(text)
  fh:close()
  local ok, e = os.rename(tmp, path)
  if not ok then os.remove(tmp) error("llama2c.export_hf: cannot rename to " .. path .. ": " .. tostring(e), 0) end
end

-- export_hf(d or path, outdir, opts) -> {dir, shards, bytes}: the checkpoint as a Hugging Face
-- LLaMA directory (the weights in rotate-half layout, bos 1, eos 2), plus tokenizer.json and
-- tokenizer_config.json when the checkpoint has its tokenizer. opts as hf.export's.
function M.export_hf(d, outdir, opts)
  opts = opts or {}
  local own = type(d) ~= "table"
  if own then d = M.open(d) end
  local ok, res = pcall(function()
    local ctx, m = M.load(d)
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    o.special = { bos = 1, eos = 2 }
    local r = require("outlierlab.pretrained.hf").export(outdir, ctx, m, o)
    if d.tokenizer_file then
      local tk = M.tokenizer(d)
      atomic_write(outdir .. "/tokenizer.json", M.hf_tokenizer_json(tk))
      atomic_write(outdir .. "/tokenizer_config.json", require("outlierlab.util.json").encode({
        tokenizer_class = "LlamaTokenizerFast", bos_token = "<s>", eos_token = "</s>", unk_token = "<unk>",
        add_bos_token = true, add_eos_token = false, model_max_length = d.cfg.block_size, legacy = true }) .. "\n")
    end
    return r
  end)
  if own then d:close() end
  if not ok then error(res, 0) end
  return res
end

return M
