-- hf — Hugging Face model directories: import a pretrained checkpoint into the project's own
-- models, and export the project's models in the same layout (docs/reference/pretrained.md).
--
--   local hf = require "outlierlab.pretrained.hf"
--   local ctx, m, info = hf.load("models/gpt2")        -- config.json + model.safetensors (or shards)
--   m:forward({ ids = ... })                           -- the project's GPT-2, eval mode
--   hf.export("out/my-llama", ctx, m, { dtype = "BF16", shard_bytes = 2^30 })
--   local d = hf.open("models/llama-2-7b")             -- names, shapes, config; nothing converted
--   d.cfg (the project's model config), d.hf (config.json), d.family, d:close()
--
-- A directory holds config.json and either model.safetensors or model.safetensors.index.json
-- with its shards (model-0000i-of-0000n.safetensors). Tensors may be F32, F16, BF16 (or F64)
-- and are converted to fp32 by engine/io_hf.c straight from the file's memory map, whose pages
-- are handed back once converted. Families (config.json "model_type"), one file each under
-- pretrained/families/ with its config.json keys (from_hf), its tensor names (layout) and, where
-- exported, its config.json (to_hf): gpt2, opt, bert, vit, llama, mistral, phi3, qwen (qwen2,
-- qwen3), gemma (gemma, gemma2), phi, falcon, mpt; families/shared.lua holds the checks of
-- config.json's keys and the tensor-entry helpers they share. Adding a family: a file there and
-- its name in the list below (the families section).
-- Before anything is built, open() checks the config values (sizes 1 .. 2^31-1, heads dividing
-- the width, positive finite epsilons and rope_theta, each named by its config.json key), counts
-- the layers config.json asks for in the files, and resolves every tensor's shape and dtype;
-- load() and stream.open() refuse a tensor holding +-Inf or NaN (Dir:check_finite).
-- Every mismatch is an error that names the directory and the first tensor missing, extra or
-- mis-shaped (with the config key behind the expected shape), or the config key or family that
-- is not supported. PyTorch pickles (.bin, .pt) are refused, never unpickled: the message says
-- how to convert them.
local ol = require "outlierlab"
local json = require "outlierlab.util.json"
local models = require "outlierlab.models"
local ffi, C = ol.ffi, ol.C

local M = {}

pcall(ffi.cdef, "int memcmp(const void *a, const void *b, size_t n);")

local DTYPES = { F32 = C.OL_ST_F32, F16 = C.OL_ST_F16, BF16 = C.OL_ST_BF16, F64 = C.OL_ST_F64 }
local ESIZE = { F32 = 4, F16 = 2, BF16 = 2, F64 = 8 }
local TORCH_DTYPE = { F32 = "float32", F16 = "float16", BF16 = "bfloat16" }
M.FAMILIES = { "bert", "falcon", "gemma", "gemma2", "gpt2", "llama", "mistral", "mpt", "opt", "phi", "phi3", "qwen2", "qwen3", "vit" }

local S = require "outlierlab.pretrained.families.shared"
local fail, show = S.fail, S.show
local function shape_str(s) return "(" .. table.concat(s, ",") .. ")" end

-- the whole content of a file, or nil
local function read_file(path)
  local f = io.open(path, "rb")
  local s = f and f:read("*a")
  if f then f:close() end
  return s
end
M.read_file = read_file

-- the XXH64 of a file's whole content as 16 hex digits (engine/io_hf.c ol_hf_hash_file):
-- content-based cache keys for every file an analysis of an imported model reads
local hash_buf = ffi.new("uint64_t[1]")
function M.hash_file(path)
  if C.ol_hf_hash_file(path, hash_buf) ~= 0 then ol.engine_error(1) end
  local h = hash_buf[0]
  return bit.tohex(tonumber(h / 0x100000000ULL)) .. bit.tohex(tonumber(h % 0x100000000ULL))
end

local function read_json(path, what)
  local text = read_file(path)
  if not text then return nil end
  local ok, v = pcall(json.decode, text, path)
  if not ok then fail(what or path, "%s is not valid JSON: %s", path:match("([^/]+)$"), tostring(v):gsub("\n", " ")) end
  if type(v) ~= "table" or v[1] ~= nil then fail(what or path, "%s must hold a JSON object", path:match("([^/]+)$")) end
  return v
end

local function exists(path) local f = io.open(path, "rb") if f then f:close() return true end return false end
local function is_dir(path) return os.execute("test -d '" .. path:gsub("'", "'\\''") .. "'") == 0 end
local function is_file(path) return os.execute("test -f '" .. path:gsub("'", "'\\''") .. "'") == 0 end
M.is_dir, M.is_file = is_dir, is_file
-- an engine error (safetensors header, …) as one line without a Lua source position
local function engine_fail(where)
  local msg = ffi.string(C.ol_error())
  C.ol_clear_error()
  error("hf: " .. where .. ": " .. (msg ~= "" and msg or "engine call failed"), 0)
end
local list_dir = require("outlierlab.util.fs").list_dir

-- ---------------------------------------------------------------- the families
-- One file per family under pretrained/families/ (config.json's keys, the tensor names, the
-- export), beside families/shared.lua; FAMILIES lists them.
local ACT_HF = S.ACT_HF
local from_hf, to_hf, layout, LAYER_KEY, AUTO_CLASS = {}, {}, {}, {}, {}
for _, f in ipairs { "gpt2", "opt", "bert", "vit", "llama", "mistral", "phi3", "qwen", "gemma", "phi", "falcon", "mpt" } do
  local fam = require("outlierlab.pretrained.families." .. f)
  for k, v in pairs(fam.from_hf) do from_hf[k] = v end
  for k, v in pairs(fam.to_hf) do to_hf[k] = v end
  for k, v in pairs(fam.layout) do layout[k] = v end
  for k, v in pairs(fam.layer_key) do LAYER_KEY[k] = v end
  for k, v in pairs(fam.auto_class) do AUTO_CLASS[k] = v end
end
M.from_hf, M.to_hf = from_hf, to_hf
M.layout = layout

-- every entry of a model config, layers in order: global first, then layer 0 .. L-1
-- (family: the directory's layout when it differs from the model's family, e.g. phi3's fused
-- tensors for a llama model)
function M.entries(cfg, family)
  local lay = layout[family or cfg.family]
  local out = {}
  for _, e in ipairs(lay.global(cfg)) do out[#out + 1] = e end
  for l = 0, cfg.n_layer - 1 do
    for _, e in ipairs(lay.layer(cfg, l, l)) do e.layer = l out[#out + 1] = e end
  end
  return out
end

-- ---------------------------------------------------------------- reading a directory
local Dir = {}
Dir.__index = Dir

local PICKLES = { "%.bin$", "%.pt$", "%.pth$", "%.ckpt$", "%.pkl$" }
local shape_buf = ffi.new("int64_t[8]")
local dt_buf, nd_buf, nb_buf = ffi.new("int32_t[1]"), ffi.new("int32_t[1]"), ffi.new("int64_t[1]")

-- a shard file name from the index: a plain file name inside the directory
local function check_shard_name(dir, name)
  if type(name) ~= "string" or name == "" then fail(dir, "model.safetensors.index.json: a weight_map value is not a file name") end
  if name:find("/", 1, true) or name:find("\\", 1, true) or name == "." or name == ".." or name:sub(1, 1) == "." then
    fail(dir, "model.safetensors.index.json names shard '%s', which is outside the model directory (only plain file names are allowed)", name)
  end
  if not name:match("%.safetensors$") then fail(dir, "model.safetensors.index.json names shard '%s', which is not a .safetensors file", name) end
end

-- config.json's model_type, checked: a string naming a supported family (hf: config.json or nil)
function M.check_family(hf, dir)
  if not hf then fail(dir, "no config.json (a Hugging Face model directory holds config.json next to the weights)") end
  local family = hf.model_type
  if family == nil then fail(dir, "config.json has no 'model_type'") end
  if type(family) ~= "string" then fail(dir, "config.json 'model_type' must be a string, got %s", show(family)) end
  if not layout[family] then fail(dir, "config.json model_type '%s' is not supported (supported: %s)", family, table.concat(M.FAMILIES, ", ")) end
  return family
end

-- config.json's bos_token_id, the first token of every sequence an analysis reads when the
-- tokenizer files do not name one: a token id of the model, or null
local function check_bos(hf, dir, cfg)
  local v = hf.bos_token_id
  if v == nil or v == json.null or not cfg.vocab_size then return end
  if type(v) ~= "number" or v ~= math.floor(v) or v < 0 or v >= cfg.vocab_size then
    fail(dir, "config.json 'bos_token_id' = %s is not a token id of the model ('vocab_size' = %d)", show(v), cfg.vocab_size)
  end
end

-- config(dir) -> the project's model config of a directory's config.json, family: what open()
-- reads before the weights (every key checked; the tensors not looked at)
function M.config(dir)
  dir = dir:gsub("/+$", "")
  local hf = read_json(dir .. "/config.json", dir)
  local family = M.check_family(hf, dir)
  local cfg = from_hf[family](hf, dir)
  check_bos(hf, dir, cfg)
  cfg.name = dir:match("([^/]+)$")
  return models.config(cfg, "hf " .. dir), family
end

-- open(dir) -> Dir: config read and mapped, every shard opened and its header validated
function M.open(dir, opts)
  opts = opts or {}
  if type(dir) ~= "string" or dir == "" then error("hf.open: dir must be a directory path", 2) end
  dir = dir:gsub("/+$", "")
  if not is_dir(dir) then fail(dir, "no such directory") end
  local files = list_dir(dir)
  local hf = read_json(dir .. "/config.json", dir)
  local has = {}
  for _, f in ipairs(files) do has[f] = true end
  local family = hf and hf.model_type
  if not has["model.safetensors"] and not has["model.safetensors.index.json"] then
    local pick
    for _, f in ipairs(files) do for _, pat in ipairs(PICKLES) do if f:match(pat) then pick = pick or f end end end
    if pick then
      fail(dir, "%s is a PyTorch pickle: outlierlab does not read pickles (loading one runs arbitrary code). Convert the directory to safetensors once, where transformers is installed:\n" ..
        "  python3 -c \"from transformers import %s as A; A.from_pretrained('%s').save_pretrained('%s', safe_serialization=True)\"",
        pick, AUTO_CLASS[family] or "AutoModel", dir, dir)
    end
    fail(dir, "no model.safetensors or model.safetensors.index.json (a Hugging Face model directory holds config.json and the weights in safetensors)")
  end
  family = M.check_family(hf, dir)
  local self = setmetatable({ dir = dir, hf = hf, family = family, files = {}, where = {}, names = {}, name = dir:match("([^/]+)$") }, Dir)
  local ok, err = pcall(function()
    local shards
    if has["model.safetensors"] then
      shards = { "model.safetensors" }
    else
      local idx = read_json(dir .. "/model.safetensors.index.json", dir)
      local wm = idx.weight_map
      if wm == nil then fail(dir, "model.safetensors.index.json has no 'weight_map' object") end
      if type(wm) ~= "table" or wm[1] ~= nil then
        fail(dir, "model.safetensors.index.json 'weight_map' must be an object {tensor name: shard file}, got %s", type(wm) == "table" and "a list" or show(wm))
      end
      shards = {}
      local seen = {}
      self.index = {}
      for name, file in pairs(wm) do
        check_shard_name(dir, file)
        self.index[name] = file
        if not seen[file] then seen[file] = true shards[#shards + 1] = file end
      end
      table.sort(shards)
      if #shards == 0 then fail(dir, "model.safetensors.index.json: weight_map is empty") end
      for _, s in ipairs(shards) do
        if not exists(dir .. "/" .. s) then fail(dir, "shard %s named by model.safetensors.index.json is missing", s) end
      end
    end
    for _, s in ipairs(shards) do
      if not is_file(dir .. "/" .. s) then fail(dir, "%s is not a regular file", s) end
      local f = C.ol_st_open(dir .. "/" .. s)
      if f == nil then engine_fail(dir) end
      f = ffi.gc(f, C.ol_st_close)
      self.files[#self.files + 1] = { f = f, name = s }
      for i = 0, C.ol_st_count(f) - 1 do
        local n = ffi.string(C.ol_st_name(f, i))
        if self.where[n] then fail(dir, "tensor '%s' is in two shards (%s and %s)", n, self.where[n].file, s) end
        if self.index and self.index[n] ~= s then
          if self.index[n] == nil then fail(dir, "tensor '%s' of shard %s is not in model.safetensors.index.json", n, s) end
          fail(dir, "tensor '%s' is in shard %s but model.safetensors.index.json says %s", n, s, self.index[n])
        end
        self.where[n] = { f = f, i = i, file = s }
        self.names[#self.names + 1] = n
      end
    end
    if self.index then
      local missing = {}
      for n in pairs(self.index) do if not self.where[n] then missing[#missing + 1] = n end end
      table.sort(missing)
      if missing[1] then fail(dir, "model.safetensors.index.json lists tensor '%s' in %s, but that shard does not hold it", missing[1], self.index[missing[1]]) end
    end
    table.sort(self.names)
    local cfg = from_hf[family](hf, dir)
    check_bos(hf, dir, cfg)
    local lay = layout[family]
    -- the name prefix: the first of the family's prefixes whose first global tensor exists
    local probe = lay.global(cfg)[1].hf
    for _, p in ipairs(lay.prefixes) do
      if self.where[p .. probe] then self.prefix = p break end
    end
    if not self.prefix then
      fail(dir, "missing tensor '%s' (looked for it with the prefixes %s)", lay.prefixes[1] .. probe,
           table.concat((function() local o = {} for i, p in ipairs(lay.prefixes) do o[i] = "'" .. p .. "'" end return o end)(), ", "))
    end
    if family == "bert" and self:find(self.prefix .. "pooler.dense.weight") then cfg.pooler = true end
    -- sizes bounded by the files before anything is built: the layers config.json asks for
    -- must be in the files (counted, not allocated), then every tensor's shape and dtype
    local lkey = LAYER_KEY[family]
    for l = 0, cfg.n_layer - 1 do
      local first = lay.layer(cfg, l, l)[1]
      if not self:find(self:full(first)) then
        fail(dir, "missing tensor '%s': config.json '%s' = %s, but the files hold %d layers", self:full(first), lkey,
             show(cfg.n_layer), l)
      end
      if l > #self.names then break end
    end
    local used = {}
    self.pending = cfg
    self:resolve(M.entries(cfg, family), used)
    self:check_extra(used)
    self.pending = nil
    cfg.name = opts.name or self.name
    self.cfg = models.config(cfg, "hf " .. dir)
  end)
  if not ok then self:close() error(err, 0) end
  return self
end

-- full file name of an entry: the family prefix and the name; "top" entries (lm_head, cls.*,
-- classifier) sit outside the prefix, as in the task-head classes' files
function Dir:full(e)
  if type(e) == "string" then return self.prefix .. e end
  return e.top and e.hf or self.prefix .. e.hf
end

-- the file tensor of a full name (with the aliases of old BERT checkpoints): where, name or nil
function Dir:find(full)
  if self.where[full] then return self.where[full], full end
  local al = layout[self.family].aliases
  if al then
    for a, b in pairs(al) do
      if full:sub(-#a) == a then
        local alt = full:sub(1, -#a - 1) .. b
        if self.where[alt] then return self.where[alt], alt end
      end
    end
  end
  return nil
end

-- {dtype =, shape =, ptr =, nbytes =, name =} of a file tensor
function Dir:tensor(w, name)
  if C.ol_st_info(w.f, w.i, dt_buf, nd_buf, shape_buf) ~= 0 then ol.engine_error(2) end
  local shape = {}
  for d = 0, nd_buf[0] - 1 do shape[d + 1] = tonumber(shape_buf[d]) end
  local ptr = C.ol_st_data(w.f, w.i, nb_buf)
  if ptr == nil then ol.engine_error(2) end
  return { dtype = ffi.string(C.ol_st_dtype_name(dt_buf[0])), dt = dt_buf[0], shape = shape, ptr = ptr,
           nbytes = tonumber(nb_buf[0]), name = name, file = w.file }
end

function Dir:close()
  for _, f in ipairs(self.files) do ffi.gc(f.f, nil) C.ol_st_close(f.f) end
  self.files, self.where = {}, {}
end

-- fp32 size of the model's parameters (bytes) and of the files' tensors
function Dir:sizes()
  local fp32, file = 0, 0
  for _, n in ipairs(self.names) do
    local t = self:tensor(self.where[n], n)
    local numel = 1
    for _, s in ipairs(t.shape) do numel = numel * s end
    fp32, file = fp32 + 4 * numel, file + t.nbytes
  end
  return fp32, file
end

-- the entries of this directory's model, resolved against the files: checks presence, shape
-- and dtype of each (the first problem is the error); returns the list with .src set
function Dir:resolve(entries, used)
  local out = {}
  for _, e in ipairs(entries) do
    local w, full = self:find(self:full(e))
    if not w then
      if not e.optional then
        fail(self.dir, "missing tensor '%s' (expected shape %s from config.json %s)", self:full(e), shape_str(e.shape), e.why)
      end
    else
      local t = self:tensor(w, full)
      if shape_str(t.shape) ~= shape_str(e.shape) then
        fail(self.dir, "tensor '%s' in %s has shape %s, but config.json (%s) implies %s", full, t.file, shape_str(t.shape), e.why, shape_str(e.shape))
      end
      if not DTYPES[t.dtype] then
        fail(self.dir, "tensor '%s' in %s is %s; only F32, F16, BF16 and F64 weights are supported", full, t.file, t.dtype)
      end
      e.src = t
      if used then used[full] = true end
    end
    out[#out + 1] = e
  end
  return out
end

-- every resolved tensor must hold finite numbers: the first +Inf, -Inf or NaN is an error that
-- names the tensor, its file and the element (engine/io_hf.c scans the mapped bytes; the pages
-- are handed back after each tensor). Run before anything is built or computed.
local one_f32 = ffi.new("float[1]")
function Dir:check_finite(entries)
  for _, e in ipairs(entries) do
    local src = e.src
    if src then
      local numel = src.nbytes / ESIZE[src.dtype]
      local i = tonumber(C.ol_hf_first_nonfinite(src.ptr, src.dt, numel))
      if i < -1 then engine_fail(self.dir) end
      C.ol_hf_release(src.ptr, src.nbytes)
      if i >= 0 then
        C.ol_hf_to_f32(ffi.cast("const uint8_t *", src.ptr) + i * ESIZE[src.dtype], src.dt, 1, one_f32)
        local v = one_f32[0]
        local what = v ~= v and "NaN" or (v > 0 and "+Inf" or "-Inf")
        fail(self.dir, "tensor '%s' in %s holds %s at element %d of %s: a checkpoint with non-finite weights is refused (every analysis of it would be NaN)",
             src.name, src.file, what, i, shape_str(src.shape))
      end
    end
  end
end

local function ignorable(self, name)
  local rel = name:sub(1, #self.prefix) == self.prefix and name:sub(#self.prefix + 1) or name
  for _, pat in ipairs(layout[self.family].ignore) do if rel:match(pat) or name:match(pat) then return true end end
  return false
end

-- the first tensor of the files that no entry used (and that is not a known buffer or unused
-- head) is an error
function Dir:check_extra(used)
  for _, n in ipairs(self.names) do
    if not used[n] and not ignorable(self, n) then
      local c = self.cfg or self.pending
      fail(self.dir, "unexpected tensor '%s' in %s: not part of a %s model with this config.json ('%s' = %d layers)", n,
           self.where[n].file, self.family, LAYER_KEY[self.family], c.n_layer)
    end
  end
end

-- ---------------------------------------------------------------- converting into parameters
local function params_by_name(ctx)
  local out = {}
  for _, p in ipairs(ctx:params()) do out[ffi.string(p.name)] = p end
  return out
end
M.params_by_name = params_by_name

-- the families whose config.json may untie the head (tie_word_embeddings false)
local UNTIED = { gpt2 = true, llama = true, mistral = true, phi3 = true, qwen2 = true, qwen3 = true, falcon = true }

local function same_bytes(a, b)
  return a.dtype == b.dtype and a.nbytes == b.nbytes and ffi.C.memcmp(a.ptr, b.ptr, a.nbytes) == 0
end

-- convert resolved entries into the parameters (a name -> tensor table); filled[name] = true
-- for each one written. opts.release = true hands the pages back after each tensor.
function M.fill(self, entries, params, filled, opts)
  opts = opts or {}
  for _, e in ipairs(entries) do
    local src = e.src
    if e.tied then
      if src then
        local w, full = self:find(self.prefix .. e.tied)
        if not w then w, full = self:find(e.tied) end
        local other = w and self:tensor(w, full)
        if not other or not same_bytes(src, other) then
          local flag = self.hf.tie_word_embeddings == nil and "'tie_word_embeddings' is absent (true for " .. self.family .. ")"
                       or "'tie_word_embeddings' is " .. show(self.hf.tie_word_embeddings)
          fail(self.dir, "tensor '%s' differs from '%s', but config.json %s: the head is tied to the embedding. %s", src.name,
               full or e.tied, flag, UNTIED[self.family] and "If the checkpoint's head is its own, set \"tie_word_embeddings\": false in config.json"
               or "An untied head is not supported for " .. self.family .. " (transformers ties it too)")
        end
      end
    elseif src then
      local es = ESIZE[src.dtype]
      for _, part in ipairs(e.parts) do
        local p = params[part.ours]
        if not p then
          -- a parameter the project's model does not have (bias-free GPT-2 export): must be 0
          fail(self.dir, "tensor '%s' maps to parameter '%s', which this model does not have", src.name, part.ours)
        end
        local rc
        if e.t then
          rc = C.ol_hf_to_f32_t(src.ptr, src.dt, e.shape[1], e.shape[2], part.col0, part.n, p.data)
        else
          rc = C.ol_hf_to_f32(ffi.cast("const uint8_t *", src.ptr) + part.off * es, src.dt, part.n or p.numel, p.data + (part.dst or 0))
        end
        if rc ~= 0 then ol.engine_error(2) end
        if e.plus_one then   -- Gemma's (1 + w) RMSNorm gain, in fp32 as HF's 1.0 + weight.float()
          for i = 0, tonumber(p.numel) - 1 do p.data[i] = 1 + p.data[i] end
        end
        filled[part.ours] = true
      end
      if opts.release then C.ol_hf_release(src.ptr, src.nbytes) end
    else
      for _, part in ipairs(e.parts) do
        local p = params[part.ours]
        if p then p:fill_(0) filled[part.ours] = true end
      end
    end
  end
end

-- info about what the import skipped: absent optional tensors (zeros in the model)
local function absent(entries)
  local out = {}
  for _, e in ipairs(entries) do
    if not e.src and e.optional and #e.parts > 0 then out[#out + 1] = e.hf end
  end
  return out
end

-- load(dir, opts) -> ctx, model, info: the whole model in memory (fp32), eval mode.
-- opts.name (model name, default the directory's), opts.seed. info = { dir, name, family,
-- cfg, hf (config.json), absent = {optional tensors not in the files: zeros}, fp32_bytes, file_bytes }
function M.load(dir, opts)
  opts = opts or {}
  local d = type(dir) == "table" and dir or M.open(dir, opts)
  local ok, a, b, c = pcall(function()
    local cfg = d.cfg
    -- names, shapes, dtypes and values checked before anything is built
    local used = {}
    local entries = d:resolve(M.entries(cfg, d.family), used)
    d:check_extra(used)
    d:check_finite(entries)
    local nparams = models.count_params(cfg)
    local ctx = ol.Context{ params = nparams + 64 * 1024 * (cfg.n_layer + 8), seed = opts.seed or 1 }
    local m = models.build(ctx, cfg)
    local params, filled = params_by_name(ctx), {}
    M.fill(d, entries, params, filled, { release = true })
    for name in pairs(params) do
      if not filled[name] then fail(d.dir, "parameter '%s' of the %s model has no tensor in the checkpoint (internal mapping error)", name, d.family) end
    end
    if m.eval then m:eval() end
    local fp32, file = d:sizes()
    return ctx, m, { dir = d.dir, name = cfg.name, family = d.family, cfg = cfg, hf = d.hf, absent = absent(entries),
                     fp32_bytes = fp32, file_bytes = file }
  end)
  if type(dir) ~= "table" then d:close() end
  if not ok then error(a, 0) end
  return a, b, c
end

-- ---------------------------------------------------------------- export
local function atomic_write(path, text)
  local tmp = path .. ".tmp." .. tostring(os.time()) .. tostring(math.random(1e9))
  local fh, err = io.open(tmp, "wb")
  if not fh then error("hf.export: cannot create " .. tostring(err), 0) end
  fh:write(text)
  fh:close()
  local ok, e = os.rename(tmp, path)
  if not ok then os.remove(tmp) error("hf.export: cannot rename to " .. path .. ": " .. tostring(e), 0) end
end

-- the (rows, cols) file tensor of an entry built from the parameters, as fp32 (ffi array)
local function gather(e, params)
  local n = 1
  for _, s in ipairs(e.shape) do n = n * s end
  local buf = ffi.new("float[?]", math.max(n, 1))
  if e.t then
    -- stack the parts (each (n_k, rows)) into (cols, rows), then transpose into (rows, cols)
    local rows, cols = e.shape[1], e.shape[2]
    local tmp = ffi.new("float[?]", n)
    for _, part in ipairs(e.parts) do
      local p = params[part.ours]
      if p then ffi.copy(tmp + part.col0 * rows, p.data, 4 * part.n * rows) end
    end
    if C.ol_hf_to_f32_t(tmp, C.OL_ST_F32, cols, rows, 0, rows, buf) ~= 0 then ol.engine_error(2) end
  else
    for _, part in ipairs(e.parts) do
      local p = params[part.ours]
      if p then ffi.copy(buf + part.off, p.data + (part.dst or 0), 4 * tonumber(part.n or p.numel)) end   -- absent (bias-free): stays 0
    end
  end
  return buf, n
end

-- export(dir, ctx, model, opts): write model as a Hugging Face directory: config.json and
-- model.safetensors, or shards of at most opts.shard_bytes (> 0) with model.safetensors.index.json.
-- opts.dtype = "F32" (default) | "F16" | "BF16"; opts.special = {bos =, eos =, pad =} token
-- ids for config.json; opts.prefix = false writes the names without the family prefix (as the
-- bare GPT2Model/LlamaModel/... would). Configs without a Hugging Face equivalent are an error.
function M.export(dir, ctx, model, opts)
  opts = opts or {}
  local cfg = model.cfg
  local fam = cfg.family
  local where = "export " .. dir
  if not layout[fam] then fail(where, "family '%s' cannot be exported", tostring(fam)) end
  local att = type(cfg.attention) == "table" and (cfg.attention.kind or "softmax") or cfg.attention
  if att ~= "softmax" then fail(where, "attention '%s' has no Hugging Face equivalent (only softmax models can be exported)", tostring(att)) end
  if fam == "llama" and models.families.llama.extended(cfg) then
    fail(where, "a llama model with the imported families' options (head_dim, biases, qk_norm, …: Qwen, Gemma, Phi-2, Falcon, MPT) is not exported (only LLaMA's own block)")
  end
  if (cfg.norm_variant or "plain") ~= "plain" or (cfg.residual_clip or 0) > 0 then
    fail(where, "norm_variant '%s' / residual_clip %g have no Hugging Face equivalent", tostring(cfg.norm_variant), cfg.residual_clip or 0)
  end
  if fam == "vit" and cfg.patch_ln then fail(where, "patch_ln (a LayerNorm after the patch embedding) has no Hugging Face ViT equivalent") end
  if fam ~= "llama" and not ACT_HF[cfg.act] then fail(where, "activation '%s' has no Hugging Face equivalent", tostring(cfg.act)) end
  local dtname = opts.dtype or "F32"
  if not TORCH_DTYPE[dtname] then fail(where, "dtype must be F32, F16 or BF16, got %s", tostring(dtname)) end
  local dt = DTYPES[dtname]
  os.execute("mkdir -p '" .. dir:gsub("'", "'\\''") .. "'")
  local lay = layout[fam]
  local prefix = opts.prefix == false and "" or lay.export_prefix
  local params = params_by_name(ctx)
  local tensors = {}
  for _, e in ipairs(M.entries(cfg)) do
    if #e.parts > 0 then
      local name = (e.top and "" or prefix) .. e.hf
      local buf, n = gather(e, params)
      local out = buf
      if dt ~= C.OL_ST_F32 then
        out = ffi.new("uint16_t[?]", math.max(n, 1))
        if C.ol_hf_from_f32(buf, n, dt, out) ~= 0 then ol.engine_error(2) end
      end
      tensors[#tensors + 1] = { name = name, shape = e.shape, data = out, nbytes = n * ESIZE[dtname] }
    end
  end
  -- shards in entry order, each at most shard_bytes (a larger tensor gets a shard of its own)
  local groups, cur, size = {}, {}, 0
  local limit = opts.shard_bytes or 0
  for _, t in ipairs(tensors) do
    if limit > 0 and #cur > 0 and size + t.nbytes > limit then groups[#groups + 1] = cur cur, size = {}, 0 end
    cur[#cur + 1] = t
    size = size + t.nbytes
  end
  if #cur > 0 then groups[#groups + 1] = cur end
  local weight_map, total = {}, 0
  local function save(path, list)
    local w = C.ol_st_writer_new()
    if w == nil then ol.engine_error(1) end
    w = ffi.gc(w, C.ol_st_writer_free)
    for _, t in ipairs(list) do
      local shp = ffi.new("int64_t[?]", #t.shape, t.shape)
      if C.ol_st_writer_add(w, t.name, dt, #t.shape, shp, t.data) ~= 0 then ol.engine_error(1) end
      total = total + t.nbytes
    end
    if C.ol_st_writer_set_metadata(w, "format", "pt") ~= 0 then ol.engine_error(1) end
    if C.ol_st_writer_save(w, path) ~= 0 then ol.engine_error(1) end
  end
  if limit > 0 and #groups > 1 then
    for i, g in ipairs(groups) do
      local fname = string.format("model-%05d-of-%05d.safetensors", i, #groups)
      save(dir .. "/" .. fname, g)
      for _, t in ipairs(g) do weight_map[t.name] = fname end
    end
    atomic_write(dir .. "/model.safetensors.index.json", json.encode({ metadata = { total_size = total }, weight_map = weight_map }) .. "\n")
    os.remove(dir .. "/model.safetensors")
  else
    save(dir .. "/model.safetensors", tensors)
    os.remove(dir .. "/model.safetensors.index.json")
  end
  local sp = opts.special or {}
  local conf = to_hf[fam](cfg, sp)
  conf.torch_dtype = TORCH_DTYPE[dtname]
  conf.outlierlab_name = cfg.name
  atomic_write(dir .. "/config.json", json.encode(conf) .. "\n")
  return { dir = dir, shards = #groups, bytes = total }
end

return M
