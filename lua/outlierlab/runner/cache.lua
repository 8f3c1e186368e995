-- runner/cache — the trained-model cache of the runner (run:model) and what its keys hash.
--
-- Caching (cache root: --cache= or $OUTLIERLAB_CACHE, default <root>/cache):
--   run:model(spec, trainer): spec is every setting that determines the trained weights
--   (model config, data, training recipe, seed). Its hash together with the engine version,
--   the content hash of the code the weights are computed through (M.code_hash: by folder, below)
--   and of the files outside
--   the package the training runs through (M.extra_sources: the trainer's file, user attention
--   variants) names cache/models/<hash>/. When <hash>/done.lua exists the model is reused (figures that
--   share a model train it once); otherwise trainer(dir, ckpt_path) runs: it trains with
--   train.run{ckpt = ckpt_path}, which resumes from the checkpoint an interrupted run left,
--   and returns a table of training facts (losses...), stored in done.lua.
--   A stage marked cache = true stores its return value in cache/stages/<id>/<stage>-<hash>.lua
--   (and the seconds it took in <that file>.seconds, which summary.md and run.json report when reused),
--   hash of (settings, engine version, code hash, experiment file text, the hashes of the models
--   the run used): a rerun with the same inputs skips it, a changed setting, file or model
--   recomputes it. --retrain trains every model of the run anew; --reanalyze recomputes the
--   cached stages.
local ol = require "outlierlab"
local fs = require "outlierlab.util.fs"
local serialize = require "outlierlab.util.serialize"
local json = require "outlierlab.util.json"
local dist = require "outlierlab.util.dist"
local progress = require "outlierlab.util.progress"
local lend = require "outlierlab.runner.lend"
local results = require "outlierlab.figure.netcdf"
local sources = require "outlierlab.util.sources"

local M = {}

-- exit status of a run stopped by the batch system's signal after its checkpoint was written
-- (the Slurm script requeues on it; outlierlab.runner.slurm)
M.REQUEUE_STATUS = 75

local read_file = fs.read_file
local function load_data(path)
  local s = read_file(path)
  if not s then return nil end
  return serialize.deserialize(s, "@" .. path)
end
local function save_data(path, v) fs.write_atomic(path, serialize.serialize(v)) end
M.load_data, M.save_data = load_data, save_data

-- the spec a model directory of the cache was trained from (its spec.json, the key M.model
-- writes): spec, path; or nil and a message naming the file (missing, not JSON, or without a spec)
function M.read_spec(dir)
  local path = dir .. "/spec.json"
  local text = read_file(path)
  if not text then return nil, "no " .. path .. " (not a model directory of the cache)" end
  local ok, v = pcall(json.decode, text, path)
  if not ok then return nil, tostring(v) end
  if type(v) ~= "table" or type(v.spec) ~= "table" then return nil, path .. " holds no spec" end
  return v.spec, path
end

-- ---------------------------------------------------------------- what a cached result depends on
-- A cached model or stage is reused only when everything that shaped it is unchanged: its
-- settings, the engine version, and the text of the code it ran through, hashed by content.
--
-- A trained model ("model", M.model_key): the Lua its training runs through, found as the
-- require closure of the trainer's file and of the attention variants the spec names
-- (util/sources: every module they require, inside the package or not, by module name, so the
-- key does not depend on the checkout's path), and the engine's numerics: engine/*.c and *.h
-- except the files that only write results or serve the analysis (ENGINE_NOT_TRAINING). The
-- closure stops at the tracker's measuring module (MODEL_STOP, recipes/track.lua): the curve
-- a model's training measures has a key of its own, curve_code in done.lua, which the readers
-- of a cached curve compare with the current code (recipes/track.lua fresh; --refresh_curves
-- retrains the models whose curve is stale).
--
-- A cached stage ("stage", M.code_hash(root, "stage")): by folder, the whole engine except
-- io_netcdf.c and the Lua of nn/ models/ data/ train/ recipes/ util/ (less util/progress.lua,
-- which prints), measure/ judge/ compress/ pretrained/ and figure/overview.lua; the stage key
-- also holds the experiment file's text and the hashes of the models the run used.
-- Never hashed for a stage: runner/, figure/ (declarations, NetCDF, gnuplot), cli.lua,
-- config.lua, engine/host/ and the docs. Computed once per process.
M.ENGINE_NOT_TRAINING = { ["io_netcdf.c"] = true, ["io_hf.c"] = true, ["compress.c"] = true, ["analysis.c"] = true,
                          ["quant.c"] = true, ["analysis_extra.c"] = true }   -- post-training quantisation and the remedies' metrics
M.MODEL_STOP = { ["outlierlab.recipes.track"] = true }
M.STAGE_LUA = { "lua/outlierlab/init.lua", "lua/outlierlab/optim.lua", "lua/outlierlab/nn/", "lua/outlierlab/models/",
                "lua/outlierlab/data/", "lua/outlierlab/train/", "lua/outlierlab/recipes/", "lua/outlierlab/util/",
                "lua/outlierlab/measure/", "lua/outlierlab/judge/", "lua/outlierlab/compress/", "lua/outlierlab/pretrained/",
                "lua/outlierlab/figure/overview.lua" }
M.STAGE_LUA_NOT = { "lua/outlierlab/util/progress.lua" }

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local function under(f, list)
  for _, p in ipairs(list) do if f == p or (p:sub(-1) == "/" and f:sub(1, #p) == p) then return true end end
  return false
end

-- the source files a cached stage is keyed by under root, sorted, as paths relative to root
function M.code_files(root)
  root = root or ol.root
  local out = {}
  for _, f in ipairs(sources.engine_files(root, { ["io_netcdf.c"] = true })) do out[#out + 1] = f.name end
  local p = io.popen("cd " .. quote(root) .. " && find lua/outlierlab -name '*.lua' 2>/dev/null")
  for f in p:lines() do
    if under(f, M.STAGE_LUA) and not under(f, M.STAGE_LUA_NOT) then out[#out + 1] = f end
  end
  p:close()
  table.sort(out)
  return out
end

-- content hash of the code a cached stage is keyed by (memoised per root)
local code_hashes = {}
function M.code_hash(root)
  root = root or ol.root
  if not code_hashes[root] then
    local parts = {}
    for _, f in ipairs(M.code_files(root)) do parts[#parts + 1] = f .. "\0" .. fs.hash(read_file(root .. "/" .. f) or "") end
    code_hashes[root] = fs.hash(table.concat(parts, "\n"))
  end
  return code_hashes[root]
end

-- The entry points of a model's training: the file that defines the trainer function, and the
-- file of every attention variant registered (attention.register) whose name appears in the
-- spec. Returns a list of util/sources roots ({ file = path }, or { name =, text = } for a
-- chunk loaded from a string).
function M.training_roots(spec, trainer)
  local roots, seen = {}, {}
  local function add_fn(fn)
    if type(fn) ~= "function" then return end
    local src = debug.getinfo(fn, "S").source or ""
    if seen[src] then return end
    seen[src] = true
    if src:sub(1, 1) == "@" then roots[#roots + 1] = { file = src:sub(2) }
    elseif src ~= "=[C]" then roots[#roots + 1] = { name = "(string)", text = src } end
  end
  add_fn(trainer)
  local att = package.loaded["outlierlab.nn.attention"]
  local reg = type(att) == "table" and att.registry or {}
  local walked = {}
  local function walk(v)
    if type(v) == "string" and reg[v] then
      for _, f in pairs(reg[v]) do add_fn(f) end
    elseif type(v) == "table" and not walked[v] then
      walked[v] = true
      for _, x in pairs(v) do walk(x) end
    end
  end
  walk(spec)
  return roots
end

-- the code of a model's training: the sorted "name:content-hash" lines of its Lua closure and
-- of the engine files it computes through (what M.model_key hashes, and done.lua records)
function M.training_code(spec, trainer)
  local files, strings = {}, {}
  for _, r in ipairs(M.training_roots(spec, trainer)) do
    if r.file then files[#files + 1] = r else strings[#strings + 1] = "(string):" .. fs.hash(r.text) end
  end
  local lines = sources.manifest(sources.closure{ roots = files, stop = M.MODEL_STOP })
  for _, l in ipairs(sources.manifest(sources.engine_files(nil, M.ENGINE_NOT_TRAINING))) do lines[#lines + 1] = l end
  for _, l in ipairs(strings) do lines[#lines + 1] = l end
  table.sort(lines)
  return lines
end

-- the key of a trained model: its spec, the engine version and the hash of its training code
-- (returns the key and the code's lines)
function M.model_key(spec, trainer)
  local code = M.training_code(spec, trainer)
  return json.canonical({ spec = spec, engine = ol.version(), code = fs.hash(table.concat(code, "\n")) }), code
end

-- The check of the key after a training: the modules (found on package.path) that the training
-- loaded for the first time and that neither the model's key nor the tracker's key covers — a
-- require the static closure cannot see (a computed module name). Returns a sorted list.
function M.unkeyed(before, code)
  local covered = {}
  for _, l in ipairs(code) do covered[l:match("^(.*):")] = true end
  local stops = {}
  for m in pairs(M.MODEL_STOP) do stops[#stops + 1] = m end
  for _, f in ipairs(sources.closure{ roots = stops }) do covered[f.name] = true end
  local out = {}
  for name in pairs(package.loaded) do
    if not before[name] and type(name) == "string" and not covered[name] and package.searchpath(name, package.path) then
      out[#out + 1] = name
    end
  end
  table.sort(out)
  return out
end

-- is the tracked curve of the cached model in dir stale (measured by other code than this
-- tree's, recipes/track.lua)?
function M.curve_stale(dir)
  local info = load_data(dir .. "/done.lua")
  return info ~= nil and not require("outlierlab.recipes.track").fresh(info)
end

-- ---------------------------------------------------------------- the cache object
-- cache.Cache{ root = DIR, retrain = bool, refresh_curves = bool, model_ranks = 0|1, log =
-- function(fmt, ...) }: the trained models under DIR/models. cache:get_or_train(spec, trainer)
-- returns the model of spec, trained by trainer(dir, ckpt, o) when the cache does not hold it
-- (M.model below); cache.model_hashes lists the models it handed out.
local Cache = {}
Cache.__index = Cache
function M.Cache(o)
  if type(o) ~= "table" or type(o.root) ~= "string" then error("cache.Cache: root (the cache directory) is required", 2) end
  return setmetatable({ cache_root = o.root, retrain = o.retrain, refresh_curves = o.refresh_curves,
                        model_ranks = o.model_ranks, model_hashes = {},
                        log_fn = o.log or function(fmt, ...) io.write(string.format(fmt, ...), "\n") end }, Cache)
end
function Cache:log(fmt, ...) self.log_fn(fmt, ...) end
function Cache:get_or_train(spec, trainer) return M.model(self, spec, trainer) end

-- the model of spec from cache self, trained when missing: returns { dir =, ckpt =, info = the
-- trainer's table, cached = bool, hash =, cache_root = } (recipes.load reads its corpus under
-- cache_root)
function M.model(self, spec, trainer)
  if type(spec) ~= "table" then error("run:model: spec must be a table of the settings that determine the model", 2) end
  if type(trainer) ~= "function" then error("run:model: trainer must be a function(dir, ckpt, o)", 2) end
  local key, code = M.model_key(spec, trainer)
  local hash = fs.hash(key)
  local dir = self.cache_root .. "/models/" .. hash
  local ckpt = dir .. "/model.safetensors"
  self.model_hashes[hash] = dir
  -- --retrain: this run trains the model anew (once per process), whatever the cache holds;
  -- --refresh_curves: the same for a model whose tracked curve is stale (recipes/track.lua)
  local renew = self.retrain or (self.refresh_curves and M.curve_stale(dir))
  if renew and not (self.retrained or {})[hash] and dist.rank() == 0 then
    if not self.retrain then self:log("model %s: its tracked curve is stale; retraining (--refresh_curves)", hash) end
    os.execute("find " .. quote(dir) .. " -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf {} + 2>/dev/null")
  end
  if renew then
    self.retrained = self.retrained or {}
    self.retrained[hash] = true
    if dist.size() > 1 then dist.barrier() end
  end
  -- --model_ranks=1 (run.lua) with several ranks here: rank 0 alone finds or trains the model
  -- (in a communicator of its own: the single-process bits), the others wait and read it
  if self.model_ranks == 1 and dist.size() > 1 then
    local first = dist.rank() == 0
    dist.split(first and 0 or 1)
    local ok, res = true, nil
    if first then ok, res = pcall(M.model, self, spec, trainer) end
    dist.unsplit()
    -- the others wait asleep (an MPI collective polls at 100 % of a core, which the training
    -- rank's threads or another job could use) and lend it their threads (runner/lend), then
    -- all meet in the collective below
    if not first then lend.idle(true) end
    dist.quiet_barrier()
    lend.idle(false)
    -- rank 0's error reaches every rank as serialised data (a message, or the runner's
    -- { exit_status =, message = } of a requeue)
    local err = not ok and (type(res) == "table" and { exit_status = res.exit_status, message = res.message } or tostring(res))
    local failure = dist.allgather_string(ok and "" or serialize.serialize({ err = err }))[1]
    if first then
      if not ok then error(res, 0) end
      return res
    end
    if failure ~= "" then error(serialize.deserialize(failure, "=model_ranks").err, 0) end
    return { dir = dir, ckpt = ckpt, info = load_data(dir .. "/done.lua"), cached = true, hash = hash, cache_root = self.cache_root }
  end
  -- Under MPI the ranks of a group train one model together (data parallel): rank 0 of the
  -- group alone takes the cache lock and decides "cached" or "train"; the others follow.
  local lead = dist.rank() == 0
  local decision = lead and M.claim(self, dir, hash) or nil
  if dist.size() > 1 then decision = dist.allgather_string(decision or "")[1] end
  if decision == "cached" then
    self:log("model %s: cached (%s)", hash, dir)
    return { dir = dir, ckpt = ckpt, info = load_data(dir .. "/done.lua"), cached = true, hash = hash, cache_root = self.cache_root }
  end
  -- spec.json: the key; code.txt: the files its code hash covers, one "name:content-hash" a line
  if lead then
    fs.write_atomic(dir .. "/spec.json", key .. "\n")
    fs.write_atomic(dir .. "/code.txt", table.concat(code, "\n") .. "\n")
  end
  local resumed = read_file(ckpt) ~= nil
  self:log("model %s: %s", hash, resumed and "resuming from its checkpoint" or "training")
  -- the training time the checkpoint holds (train_clock.lua: when the interrupted run started and
  -- what came before it; the checkpoint's mtime: how far it got), so that a resumed model's
  -- train_seconds is its whole training, not its last run's
  local clock_before = 0
  if lead then
    local c = resumed and load_data(dir .. "/train_clock.lua")
    if c and tonumber(c.start) then
      local m = fs.mtime(ckpt)
      clock_before = (tonumber(c.before) or 0) + (m and math.max(0, m - c.start) or 0)
    end
    save_data(dir .. "/train_clock.lua", { start = os.time(), before = clock_before })
  end
  local t0 = progress.now()
  local before = {}
  for name in pairs(package.loaded) do before[name] = true end
  -- the trainer's options: where a paper-scale corpus file goes, and the run's log
  -- (on_step: threads lent by idle ranks join at the first step and every lend.POLL steps)
  local ok, info = pcall(trainer, dir, ckpt, { cache_root = self.cache_root, log = function(...) self:log(...) end,
                                               on_step = lend.on_step })
  -- the lock is released only after done.lua is written (a waiting run then finds the model
  -- done), or now when there will be no done.lua
  local function unlock()
    if lead and self._locks and self._locks[dir] then self._locks[dir]:release(); self._locks[dir] = nil end
  end
  if not ok or type(info) ~= "table" or info.stopped_by_signal then unlock() end
  if not ok then error(info, 0) end
  if type(info) ~= "table" then error("run:model: the trainer must return a table (training facts)", 2) end
  if info.stopped_by_signal then
    -- the batch system's time limit is near: the checkpoint is written, nothing is "done"
    error({ exit_status = M.REQUEUE_STATUS, message = string.format(
      "model %s: stopped by a signal at step %s with its checkpoint saved; run again to resume", hash,
      tostring(info.stopped_by_signal)) }, 0)
  end
  local unkeyed = M.unkeyed(before, code)
  if #unkeyed > 0 then
    self:log("model %s: WARNING its training loaded modules its cache key does not cover (a computed require?): %s",
             hash, table.concat(unkeyed, ", "))
    info.unkeyed_modules = unkeyed
  end
  info.train_seconds = (info.train_seconds or 0) + clock_before + (progress.now() - t0)
  info.resumed = resumed
  -- where it was trained: bit for bit the same on any thread or rank count, not on any CPU
  info.machine = results.machine()
  info.machine.ranks = dist.size()
  if lead then save_data(dir .. "/done.lua", info) end
  unlock()
  if dist.size() > 1 then dist.barrier() end   -- done.lua is there before any rank reads it
  return { dir = dir, ckpt = ckpt, info = info, cached = false, hash = hash, cache_root = self.cache_root }
end

-- The cache lock of one model (run by one process): "cached" when the model is done,
-- "train" when this process now holds the lock. One trainer per model: an flock'd file
-- <dir>/.lock (outlierlab.util.fs: the kernel drops it when its process dies, kill -9 included;
-- an older version's lock directory is taken over when stale); a second run of the same spec
-- waits and then reuses the finished model. A lock that cannot be created is an error naming
-- the path. The holder removes the temporaries a killed writer left in the model directory.
function M.claim(self, dir, hash)
  if load_data(dir .. "/done.lua") then return "cached" end
  fs.mkdir_p(dir, "model cache (--cache=" .. tostring(self.cache_root) .. ")")
  self._locks = self._locks or {}
  if self._locks[dir] then self._locks[dir]:release() end
  local lk = fs.lock(dir .. "/.lock", {
    on_wait = function(owner) self:log("model %s: locked by %s; waiting", hash, owner) end,
    until_fn = function() return load_data(dir .. "/done.lua") ~= nil end,
  })
  if not lk then return "cached" end
  self._locks[dir] = lk
  if load_data(dir .. "/done.lua") then lk:release() return "cached" end
  fs.remove_stale_temporaries(dir, { all = true })
  return "train"
end

return M
