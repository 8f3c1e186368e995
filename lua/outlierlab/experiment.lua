-- experiment — the runner behind `bin/outlierlab run experiments/<id>.lua --profile=quick`.
--
-- An experiment file returns a table (docs/EXPERIMENTS.md):
--   { id = "qt-fig1", title = "...",
--     source = { paper = "QT", figure = "Fig. 1", claim = "..." },
--     profiles = { quick = {...}, default = {...}, paper = {...} },   -- settings, seed included
--     stages = { { "train", train }, { "analyze", analyze, cache = true }, { "plot", plot } },
--     summary = function(run) return { paper =, reproduced =, holds = true|false|nil, notes = } end }
-- (stages may also be a map { train = fn, analyze = fn, plot = fn }: run in that order, analyze cached).
--
-- The runner picks the profile (--profile=, default "default"), applies --key=value overrides
-- to it (an unknown key is an error listing the valid ones: outlierlab.config), then calls
-- each stage as fn(run) with
--   run.id, run.profile, run.cfg (the settings), run.seed, run.dir (results/<id>/<profile>/, M.results_dir),
--   run.out[stage] (what earlier stages returned), run.file, run.exp,
--   run:model(spec, trainer)   -- trained-model cache, see below
--   run:netcdf(name?)          -- outlierlab.results file <run.dir>/<name or id>.nc, meta filled in
--   run:figure(name, script, blocks) -- .dat + PNG + PDF in run.dir (outlierlab.plot)
--   run:log(fmt, ...)
-- and finally writes <run.dir>/summary.md from exp.summary(run), run.json (what the results
-- gallery reads: claim, verdict, profile, seconds, files) and history/<hash>.{nc,png}, the
-- training history of each model the run used (outlierlab.history).
--
-- Caching (cache root: --cache= or $OUTLIERLAB_CACHE, default <root>/cache):
--   run:model(spec, trainer): spec is every setting that determines the trained weights
--   (model config, data, training recipe, seed). Its hash together with the engine version,
--   the content hash of the engine and package code (M.code_hash) and of the files outside
--   the package the training runs through (M.extra_sources: the trainer's file, user attention
--   variants) names cache/models/<hash>/. When <hash>/done.lua exists the model is reused (figures that
--   share a model train it once); otherwise trainer(dir, ckpt_path) runs: it trains with
--   train.run{ckpt = ckpt_path}, which resumes from the checkpoint an interrupted run left,
--   and returns a table of training facts (losses...), stored in done.lua.
--   A stage marked cache = true stores its return value in cache/stages/<id>/<stage>-<hash>.lua,
--   hash of (settings, engine version, code hash, experiment file text, the hashes of the models
--   the run used): a rerun with the same inputs skips it, a changed setting, file or model
--   recomputes it. --retrain trains every model of the run anew; --reanalyze recomputes the
--   cached stages.
-- Results root: --out= or $OUTLIERLAB_RESULTS, default <root>/results.
local ol = require "outlierlab"
local config = require "outlierlab.config"
local results = require "outlierlab.results"
local plot = require "outlierlab.plot"
local progress = require "outlierlab.progress"
local ffi = require "ffi"

local M = {}

-- exit status of a run stopped by the batch system's signal after its checkpoint was written
-- (the Slurm script requeues on it; outlierlab.slurm)
M.REQUEUE_STATUS = 75

-- ---------------------------------------------------------------- small helpers

-- FNV-1a 64-bit of a string, as 16 hex digits (cache keys; not cryptographic)
function M.hash(s)
  local h = ffi.new("uint64_t", 0xcbf29ce484222325ULL)
  local prime = 0x100000001b3ULL
  for i = 1, #s do
    h = bit.bxor(h, s:byte(i)) * prime
  end
  local hi = tonumber(bit.rshift(h, 32))
  local lo = tonumber(bit.band(h, 0xffffffffULL))
  return string.format("%08x%08x", hi, lo)
end

local serialize = require "outlierlab.serialize"
local dist = require "outlierlab.dist"
M.serialize, M.deserialize = serialize.serialize, serialize.deserialize

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end
M.read_file = read_file

-- mkdir -p; a directory that cannot be created is an error naming it and the reason
local function mkdir(path) require("outlierlab.fs").mkdir_p(path) end
M.mkdir = mkdir

local function load_data(path)
  local s = read_file(path)
  if not s then return nil end
  return M.deserialize(s, "@" .. path)
end
local function save_data(path, v) plot.write_atomic(path, M.serialize(v)) end

-- ---------------------------------------------------------------- what a cached result depends on
-- A cached model or stage is reused only when everything that shaped it is unchanged: its
-- settings, the engine version, and the text of the code it ran through. The code is hashed
-- by content: engine/*.c, engine/*.h, engine/host/*.c and lua/outlierlab/**/*.lua, except the
-- files listed here, which only write, draw, list or print results and cannot change a
-- number that is cached. Computed once per process (docs/EXPERIMENTS.md, "Caching").
M.CODE_EXCLUDE = { ["plot.lua"] = true, ["results.lua"] = true, ["slurm.lua"] = true, ["gallery.lua"] = true,
                   ["history.lua"] = true, ["tap.lua"] = true, ["progress.lua"] = true, ["cli.lua"] = true,
                   ["figure.lua"] = true }
-- Modules that only analyse or import trained models (never on the training path): they are
-- left out of the trained-model hash (editing a figure's analysis does not retrain its model)
-- but are part of the cached-stage hash (the analysis is recomputed).
M.ANALYSIS_ONLY = { ["inspect.lua"] = true, ["overview.lua"] = true, ["seeds.lua"] = true, ["compress.lua"] = true,
                    ["pretrained.lua"] = true, ["hf.lua"] = true, ["tokenizers.lua"] = true, ["stream.lua"] = true,
                    ["quant.lua"] = true }

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- the hashed source files under root, sorted, as paths relative to root; what = "model" (the
-- default: the code a training runs through) or "stage" (also the analysis-only modules)
function M.code_files(root, what)
  root = root or ol.root
  local p = io.popen("cd " .. quote(root) .. " && find engine -maxdepth 2 \\( -name '*.c' -o -name '*.h' \\) " ..
                     "2>/dev/null; cd " .. quote(root) .. " && find lua/outlierlab -name '*.lua' 2>/dev/null")
  local out = {}
  for f in p:lines() do
    local base, top = f:match("([^/]+)$"), f:match("^lua/outlierlab/[^/]+$") ~= nil
    local skip = top and (M.CODE_EXCLUDE[base] or (what ~= "stage" and M.ANALYSIS_ONLY[base]))
    if not skip then out[#out + 1] = f end
  end
  p:close()
  table.sort(out)
  return out
end

-- content hash of the code under root (memoised per root and what)
local code_hashes = {}
function M.code_hash(root, what)
  root = root or ol.root
  local key = root .. "\0" .. (what or "model")
  if not code_hashes[key] then
    local parts = {}
    for _, f in ipairs(M.code_files(root, what)) do parts[#parts + 1] = f .. "\0" .. M.hash(read_file(root .. "/" .. f) or "") end
    code_hashes[key] = M.hash(table.concat(parts, "\n"))
  end
  return code_hashes[key]
end

-- Source outside the package that a model's training runs through: the file that defines the
-- trainer function (an experiment file with its own training loop), and the file of every
-- attention variant registered from outside the package (attention.register in a user file)
-- whose name appears in the spec. Returns { [path] = content hash } (chunks loaded from a
-- string are hashed by their text). Returns a sorted list of "file-name:content-hash".
function M.extra_sources(spec, trainer)
  local pkg = ol.root .. "/lua/outlierlab/"
  local set = {}
  local function add_fn(fn)
    if type(fn) ~= "function" then return end
    local src = debug.getinfo(fn, "S").source or ""
    if src:sub(1, 1) == "@" then
      local path = src:sub(2)
      if path:sub(1, #pkg) ~= pkg and not path:match("^lua/outlierlab/") then
        set[path:match("([^/]+)$") .. ":" .. M.hash(read_file(path) or "")] = true
      end
    elseif src ~= "=[C]" then
      set["(string):" .. M.hash(src)] = true
    end
  end
  add_fn(trainer)
  local att = package.loaded["outlierlab.attention"]
  local reg = type(att) == "table" and att.registry or {}
  local seen = {}
  local function walk(v)
    if type(v) == "string" and reg[v] then
      for _, f in pairs(reg[v]) do add_fn(f) end
    elseif type(v) == "table" and not seen[v] then
      seen[v] = true
      for _, x in pairs(v) do walk(x) end
    end
  end
  walk(spec)
  local out = {}
  for k in pairs(set) do out[#out + 1] = k end
  table.sort(out)
  return out
end

-- ---------------------------------------------------------------- the run object
local Run = {}
Run.__index = Run

function Run:log(fmt, ...)
  if progress.is_rank0() then
    io.stdout:write(string.format("[%s] ", self.id), string.format(fmt, ...), "\n")
    io.stdout:flush()
  end
end

-- trained-model cache: returns { dir =, ckpt =, info = trainer's table, cached = bool }
function Run:model(spec, trainer)
  if self.count_sweep then error({ sweep_size = 0 }, 0) end   -- M.sweep_size: a model before any sweep
  if type(spec) ~= "table" then error("run:model: spec must be a table of the settings that determine the model", 2) end
  if type(trainer) ~= "function" then error("run:model: trainer must be a function(dir, ckpt)", 2) end
  local key = results.canonical_json({ spec = spec, engine = ol.version(), code = M.code_hash(),
                                       sources = M.extra_sources(spec, trainer) })
  local hash = M.hash(key)
  local dir = self.cache_root .. "/models/" .. hash
  local ckpt = dir .. "/model.safetensors"
  self.model_hashes = self.model_hashes or {}
  self.model_hashes[hash] = dir
  M.active_cache_root = self.cache_root   -- where the trainer's corpus file goes (M.corpus)
  -- --retrain: this run trains the model anew (once per process), whatever the cache holds
  if self.retrain and not (self.retrained or {})[hash] and dist.rank() == 0 then
    os.execute("find " .. quote(dir) .. " -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf {} + 2>/dev/null")
  end
  if self.retrain then
    self.retrained = self.retrained or {}
    self.retrained[hash] = true
    if dist.size() > 1 then dist.barrier() end
  end
  -- Under MPI the ranks of a group train one model together (data parallel): rank 0 of the
  -- group alone takes the cache lock and decides "cached" or "train"; the others follow.
  local lead = dist.rank() == 0
  local decision = lead and self:_claim(dir, hash) or nil
  if dist.size() > 1 then decision = dist.allgather_string(decision or "")[1] end
  if decision == "cached" then
    self:log("model %s: cached (%s)", hash, dir)
    return { dir = dir, ckpt = ckpt, info = load_data(dir .. "/done.lua"), cached = true, hash = hash }
  end
  if lead then plot.write_atomic(dir .. "/spec.json", key .. "\n") end
  local resumed = read_file(ckpt) ~= nil
  self:log("model %s: %s", hash, resumed and "resuming from its checkpoint" or "training")
  local t0 = progress.now()
  local ok, info = pcall(trainer, dir, ckpt)
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
  info.train_seconds = (info.train_seconds or 0) + (progress.now() - t0)
  info.resumed = resumed
  if lead then save_data(dir .. "/done.lua", info) end
  unlock()
  if dist.size() > 1 then dist.barrier() end   -- done.lua is there before any rank reads it
  return { dir = dir, ckpt = ckpt, info = info, cached = false, hash = hash }
end

-- The cache lock of one model (run by one process): "cached" when the model is done,
-- "train" when this process now holds the lock. One trainer per model: an flock'd file
-- <dir>/.lock (outlierlab.fs: the kernel drops it when its process dies, kill -9 included;
-- an older version's lock directory is taken over when stale); a second run of the same spec
-- waits and then reuses the finished model. A lock that cannot be created is an error naming
-- the path. The holder removes the temporaries a killed writer left in the model directory.
function Run:_claim(dir, hash)
  local fs = require "outlierlab.fs"
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

-- Sweeps: run fn(item, i) for every item of a list (variants, seeds, γ values) and return
-- the list of results, the same on every rank. Under MPI the ranks split into
-- min(#items, ranks) groups (MPI_Comm_split); group g runs items g+1, g+1+G, …, data
-- parallel inside the group; results travel to every rank. fn's result must be plain data
-- (outlierlab.serialize); a model trained inside fn is in the shared cache for everyone.
--
-- Job arrays (make sbatch-<id> ARRAY=n): --sweep_index=i runs member i (0-based) of the
-- experiment's first sweep, then stops (exit 0); a final run without --sweep_index finds every
-- member's model in the cache and goes on to the analysis and the figures.
function Run:sweep(items, fn)
  if self.count_sweep then error({ sweep_size = #items }, 0) end   -- M.sweep_size
  if self.sweep_index and self.sweep_index >= 0 then
    local i = self.sweep_index + 1
    if i > #items or i ~= math.floor(i) then
      error(string.format("experiment %s: --sweep_index=%s but the sweep has %d members (0..%d)", self.id,
        tostring(self.sweep_index), #items, #items - 1), 0)
    end
    fn(items[i], i)
    error({ exit_status = 0, message = string.format("%s: sweep member %d of %d done; run without --sweep_index " ..
      "(after every member) to analyse and plot from the cached models", self.id, i - 1, #items) }, 0)
  end
  local world = dist.world_size()
  if world == 1 or #items <= 1 then
    local out = {}
    for i, it in ipairs(items) do out[i] = fn(it, i) end
    return out
  end
  local G = math.min(#items, world)
  local g = dist.world_rank() % G
  dist.split(g)
  local mine = {}
  local ok, err = pcall(function()
    for i = g + 1, #items, G do mine[i] = fn(items[i], i) end
  end)
  dist.unsplit()
  if not ok then error(err, 0) end
  local out = {}
  local lead = dist.world_rank() < G   -- world ranks 0..G-1 are the groups' rank 0
  for _, text in ipairs(dist.allgather_string(lead and M.serialize(mine) or M.serialize({}))) do
    for i, v in pairs(M.deserialize(text, "=sweep") or {}) do out[i] = v end
  end
  return out
end

-- an imported model (--model=DIR, outlierlab.pretrained) stands in for every trained one
local train_or_cache = Run.model
function Run:model(spec, trainer)
  if self.pretrained then return self.pretrained:handle() end
  return train_or_cache(self, spec, trainer)
end

function Run:meta()
  return { title = self.exp.title, id = self.id, profile = self.profile, seed = self.seed,
           config = { experiment = self.id, profile = self.profile, settings = self.cfg },
           summary = self.exp.source.claim and (self.exp.source.paper .. " " .. self.exp.source.figure ..
             ": " .. self.exp.source.claim) or self.exp.title,
           references = self.exp.source.paper .. " " .. (self.exp.source.figure or "") }
end

-- a results file in results/<id>/; the caller adds dims/vars and closes it
function Run:netcdf(name)
  local path = self.dir .. "/" .. (name or self.id) .. ".nc"
  self.files[#self.files + 1] = path
  return results.new(path, self:meta())
end

-- .dat + .png + .pdf in results/<id>/
function Run:figure(name, script, blocks)
  local files = plot.figure(self.dir, name, script or name, blocks)
  for _, f in ipairs(files) do self.files[#self.files + 1] = f end
  return files
end

-- ---------------------------------------------------------------- validation
local function validate(exp, file)
  local function fail(msg) error("experiment " .. file .. ": " .. msg, 0) end
  if type(exp.id) ~= "string" or not exp.id:match("^[%w%-_]+$") then fail("id must be a string of letters, digits, - and _") end
  if type(exp.title) ~= "string" then fail("title is required") end
  if type(exp.source) ~= "table" or type(exp.source.paper) ~= "string" or type(exp.source.claim) ~= "string" then
    fail("source = {paper =, figure =, claim =} is required")
  end
  exp.source.figure = exp.source.figure or ""
  if type(exp.profiles) ~= "table" or type(exp.profiles.default) ~= "table" then
    fail("profiles must hold at least a default profile")
  end
  -- stages: ordered list of {name, fn, cache=} or a map train/analyze/plot
  local list = {}
  if #exp.stages > 0 then
    for i, s in ipairs(exp.stages) do
      local name, fn = s[1] or s.name, s[2] or s.fn
      if type(name) ~= "string" or type(fn) ~= "function" then fail("stage " .. i .. " must be {name, function}") end
      list[#list + 1] = { name = name, fn = fn, cache = s.cache == true }
    end
  else
    local order = { "train", "analyze", "plot" }
    local seen = {}
    for _, n in ipairs(order) do
      if exp.stages[n] then list[#list + 1] = { name = n, fn = exp.stages[n], cache = n == "analyze" }; seen[n] = true end
    end
    local rest = {}
    for n in pairs(exp.stages) do if not seen[n] then rest[#rest + 1] = n end end
    table.sort(rest)
    for _, n in ipairs(rest) do list[#list + 1] = { name = n, fn = exp.stages[n], cache = false } end
  end
  if #list == 0 then fail("stages is empty") end
  if exp.summary ~= nil and type(exp.summary) ~= "function" then fail("summary must be a function(run)") end
  return list
end

-- ---------------------------------------------------------------- summary.md
-- The quick profile is a smoke test (seconds of training): its summaries give the numbers but
-- no verdict (M.NO_VERDICT), whatever the experiment's criterion says.
M.NO_VERDICT = "no verdict (quick profile: a smoke test)"
local function verdict_word(s)
  if s.no_verdict then return M.NO_VERDICT end
  return s.holds == true and "holds" or s.holds == false and "does not hold" or "inconclusive"
end
M.verdict_word = verdict_word
local function verdict(s)
  if s.no_verdict then return "**" .. M.NO_VERDICT .. "**" end
  local h = s.holds
  if h == true then return "the claim **holds** at this scale" end
  if h == false then return "the claim **does not hold** at this scale" end
  return "the claim is **inconclusive** at this scale"
end

local function write_summary(run, s, timings)
  local src = run.exp.source
  local lines = {
    "# " .. run.id .. " — " .. run.exp.title, "",
    "Source: " .. src.paper .. (src.figure ~= "" and (", " .. src.figure) or ""), "",
    "## Claim", "", src.claim, "",
    "## Result", "",
    "- Paper: " .. tostring(s.paper or "(no number given)"),
    "- Reproduced (" .. run.profile .. " profile): " .. tostring(s.reproduced or "(none)"),
    "- Verdict: " .. verdict(s) .. ".",
  }
  if s.notes and s.notes ~= "" then
    lines[#lines + 1] = ""
    lines[#lines + 1] = s.notes
  end
  lines[#lines + 1] = ""
  lines[#lines + 1] = "## Run"
  lines[#lines + 1] = ""
  lines[#lines + 1] = "- Profile: " .. run.profile .. ", seed " .. tostring(run.seed)
  lines[#lines + 1] = "- Settings: `" .. results.canonical_json(run.cfg) .. "`"
  lines[#lines + 1] = "- Engine: " .. ol.version() .. ", git commit " .. results.git_commit()
  lines[#lines + 1] = "- Command: `" .. results.command_line() .. "`"
  local parts = {}
  for _, t in ipairs(timings) do
    parts[#parts + 1] = string.format("%s %.1f s%s", t.name, t.seconds, t.cached and " (cached)" or "")
  end
  lines[#lines + 1] = "- Stages: " .. table.concat(parts, ", ")
  local files = {}
  for _, f in ipairs(run.files) do
    local base = f:match("([^/]+)$")
    if not base:match("%.dat$") then files[#files + 1] = "`" .. base .. "`" end
  end
  lines[#lines + 1] = "- Files: " .. table.concat(files, ", ")
  plot.write_atomic(run.dir .. "/summary.md", table.concat(lines, "\n") .. "\n")
end

-- ---------------------------------------------------------------- results directory, run.json
-- Where a run's files go: <results root>/<id>/<profile>/, so that runs of different profiles
-- never overwrite each other; a run on an imported model (o.model = its name or directory)
-- goes to <results root>/<id>/<model name>-<profile>/.
function M.results_dir(root, id, o)
  o = o or {}
  local leaf = o.profile or "default"
  if o.model and o.model ~= "" then
    local name = tostring(o.model):gsub("/+$", ""):match("([^/]+)$") or "model"
    leaf = name:gsub("[^%w%-_%.]", "_") .. "-" .. leaf
  end
  return root .. "/" .. id .. "/" .. leaf
end

-- the hashes of the models this run used (trained or cached), the same list on every rank
-- (sweep groups each saw their own members)
local function model_list(run)
  local mine = {}
  for h in pairs(run.model_hashes or {}) do mine[#mine + 1] = h end
  if dist.world_size() > 1 then
    local set = {}
    for _, text in ipairs(dist.allgather_string(table.concat(mine, " "))) do
      for h in text:gmatch("%x+") do set[h] = true end
    end
    mine = {}
    for h in pairs(set) do mine[#mine + 1] = h end
  end
  table.sort(mine)
  return mine
end

-- each model's training history (outlierlab.history), written next to the cached model when
-- missing and copied to <run dir>/history/<hash>.{nc,png} (rank 0)
local function copy_histories(run, hashes)
  local history = require "outlierlab.history"
  run.histories = {}
  for _, h in ipairs(hashes) do   -- every rank's models (model_list): sweep groups trained some of them
    local dir = run.cache_root .. "/models/" .. h
    if not read_file(dir .. "/history.nc") then
      local ok, err = pcall(history.write, dir, nil, { id = run.id, profile = run.profile, seed = run.seed,
                                                       config = { model_hash = h } })
      if not ok then run:log("model %s: no training history (%s)", h, tostring(err)) end
    end
    for _, ext in ipairs({ "nc", "png" }) do
      local text = read_file(dir .. "/history." .. ext)
      if text then
        local dst = run.dir .. "/history/" .. h .. "." .. ext
        plot.write_atomic(dst, text)
        run.files[#run.files + 1] = dst
        run.histories[#run.histories + 1] = "history/" .. h .. "." .. ext
      end
    end
  end
end

-- run.json: what the results gallery (outlierlab.gallery) reads about one run
local function write_run_json(run, s, timings, seconds, models)
  local src = run.exp.source
  local files = {}
  for _, f in ipairs(run.files) do
    local rel = f:sub(1, #run.dir + 1) == run.dir .. "/" and f:sub(#run.dir + 2) or f
    files[#files + 1] = rel
  end
  files[#files + 1] = "summary.md"
  local stages = {}
  for i, t in ipairs(timings) do stages[i] = { name = t.name, seconds = t.seconds, cached = t.cached } end
  local rec = {
    id = run.id, title = run.exp.title, paper = src.paper, figure = src.figure, claim = src.claim,
    profile = run.profile, seed = run.seed, settings = run.cfg,
    paper_result = s.paper and tostring(s.paper) or nil, reproduced = s.reproduced and tostring(s.reproduced) or nil,
    verdict = verdict_word(s), criterion_met = s.criterion_met,
    seconds = seconds, stages = stages, files = files, models = models,
    histories = run.histories, engine = ol.version(), git_commit = results.git_commit(),
    date = results.timestamp(), mpi_ranks = results.mpi_ranks(), command = results.command_line(),
  }
  plot.write_atomic(run.dir .. "/run.json", results.canonical_json(rec) .. "\n")
end

-- The number of members of an experiment's first sweep in a profile, without training
-- anything: the stages run until the first run:sweep (its size) or run:model outside a sweep
-- (0: no sweep). args: a list of "--key=value" settings applied to the profile. Used to
-- refuse a Slurm job array larger than the sweep (outlierlab.slurm, make sbatch-<id> ARRAY=).
function M.sweep_size(exp, file, profile, args)
  local stages = validate(exp, file)
  local prof = exp.profiles[profile]
  if type(prof) ~= "table" then error(string.format("experiment %s: unknown profile '%s'", file, tostring(profile)), 0) end
  local saved = config.overrides
  config.overrides = {}
  for _, a in ipairs(args or {}) do
    local k, v = a:match("^%-%-([%w_%.%-]+)=(.*)$")
    if k then config.overrides[k] = v end
  end
  local ok, cfg = pcall(config.get, prof, { strict = false })
  config.overrides = saved
  if not ok then error(cfg, 0) end
  local run = setmetatable({ id = exp.id, exp = exp, file = file, profile = profile, cfg = cfg, seed = cfg.seed or 0,
                             count_sweep = true, out = {}, files = {} }, Run)
  -- nothing is trained here: the size and memory checks of a training belong to the machine
  -- that trains (a cluster node), not to the one that counts
  local check_run = M.check_run
  M.check_run = function() end
  for _, st in ipairs(stages) do
    local sok, v = pcall(st.fn, run)
    if not sok then
      M.check_run = check_run
      if type(v) == "table" and v.sweep_size then return v.sweep_size end
      error(v, 0)
    end
    run.out[st.name] = v
  end
  M.check_run = check_run
  return 0
end

-- ---------------------------------------------------------------- entry point
function M.run_file(exp, file)
  local stages = validate(exp, file)
  -- Slurm's --signal=B:USR1@… reaches the ranks shortly before the time limit: training then
  -- checkpoints at the next step and the run exits with REQUEUE_STATUS (outlierlab.slurm)
  dist.watch_signal(dist.SIGUSR1)
  local root = ol.root
  local opts = config.get({ profile = "default", sweep_index = -1, retrain = false, reanalyze = false,
                            model = "", text = "", stream = "auto",   -- a pretrained model (outlierlab.pretrained)
                            out = os.getenv("OUTLIERLAB_RESULTS") or (root .. "/results"),
                            cache = os.getenv("OUTLIERLAB_CACHE") or (root .. "/cache") }, { strict = false })
  local prof = exp.profiles[opts.profile]
  if type(prof) ~= "table" then
    local names = {}
    for k in pairs(exp.profiles) do names[#names + 1] = k end
    table.sort(names)
    error(string.format("experiment %s: unknown profile '%s'; valid: %s", file, opts.profile, table.concat(names, ", ")), 0)
  end
  local cfg = config.get(prof, { ignore = { profile = true, out = true, cache = true, sweep_index = true,
                                            retrain = true, reanalyze = true, model = true, text = true, stream = true } })
  M.check_profile(cfg)   -- sizes and learning rates of the settings, before any stage (outlierlab.bounds)
  if opts.text ~= "" and opts.model == "" then error("experiment " .. file .. ": --text=FILE needs --model=DIR (the model that reads it)", 0) end
  local pretrained = opts.model ~= "" and require("outlierlab.pretrained").attach(exp, opts, cfg) or nil

  local run = setmetatable({
    id = exp.id, exp = exp, file = file, profile = opts.profile, cfg = cfg, seed = cfg.seed or 0,
    dir = M.results_dir(opts.out, exp.id, { profile = opts.profile, model = pretrained and pretrained.name }),
    results_root = opts.out, cache_root = opts.cache, pretrained = pretrained,
    sweep_index = opts.sweep_index, retrain = opts.retrain, reanalyze = opts.reanalyze,
    out = {}, files = {},
  }, Run)
  mkdir(run.dir)
  local ftext = read_file(file) or ""
  local t_all = progress.now()
  local timings = {}
  run:log("%s (%s %s), profile %s", exp.title, exp.source.paper, exp.source.figure, run.profile)
  for _, st in ipairs(stages) do
    local t0 = progress.now()
    local cached = false
    local cpath
    if st.cache then
      -- the models the earlier stages trained or loaded are part of the key: a retrained
      -- model (new code) gives a new analysis
      local h = M.hash(results.canonical_json({ cfg = cfg, profile = run.profile, engine = ol.version(),
                                                code = M.code_hash(nil, "stage"), file = ftext, stage = st.name,
                                                models = model_list(run),
                                                pretrained = pretrained and pretrained.fingerprint }))
      cpath = run.cache_root .. "/stages/" .. exp.id .. "/" .. st.name .. "-" .. h .. ".lua"
      local v = not run.reanalyze and load_data(cpath) or nil
      if v ~= nil then run.out[st.name] = v; cached = true end
    end
    if not cached then
      run:log("stage %s", st.name)
      local v = st.fn(run)
      run.out[st.name] = v
      if st.cache and v ~= nil and progress.is_rank0() then
        mkdir(cpath:match("^(.*)/"))
        save_data(cpath, v)
      end
    else
      run:log("stage %s: cached", st.name)
    end
    timings[#timings + 1] = { name = st.name, seconds = progress.now() - t0, cached = cached }
  end
  local s = exp.summary and exp.summary(run) or {}
  if pretrained then s = pretrained:summary(run, s) end
  if run.profile == "quick" and not pretrained then
    s.criterion_met, s.holds, s.no_verdict = s.holds, nil, true
  end
  local models = model_list(run)   -- a collective under MPI: every rank calls it
  if progress.is_rank0() then
    copy_histories(run, models)
    write_summary(run, s, timings)
    write_run_json(run, s, timings, progress.now() - t_all, models)
  end
  run:log("done in %.1f s: %s/summary.md — %s", progress.now() - t_all, run.dir,
          s.no_verdict and M.NO_VERDICT or ("claim " .. verdict_word(s)))
  if s.reproduced then run:log("reproduced: %s", s.reproduced) end
  return run
end


-- ---------------------------------------------------------------- shared recipes
-- What several experiment files do the same way: build the generated corpus, cut it into
-- batches, train a model through the cache, load it back, run probes over held-out batches.

-- data.corpus{seed, n_tokens, vocab_size}, memoised per settings (the generated corpus of
-- outlierlab.data: tokens, vocab, special ids, category(id)). From CORPUS_FILE_TOKENS tokens on
-- (the paper profiles) the corpus is written once to cache/corpora/ and memory-mapped
-- (outlierlab.data.corpus_file): the ranks share one copy instead of generating one each.
M.CORPUS_FILE_TOKENS = 2 ^ 25
local corpora = {}
function M.corpus(d, run)
  if run and run.pretrained then   -- the text file in the model's tokens (outlierlab.pretrained)
    local c = run.cfg
    return run.pretrained:corpus(c.eval_batches and c.batch and c.seq_len and c.eval_batches * c.batch * c.seq_len + 16)
  end
  local key = results.canonical_json(d)
  if not corpora[key] and d.kind == "organism" then
    corpora[key] = M.organism_task(d)
  end
  if not corpora[key] then
    if (d.n_tokens or 0) >= M.CORPUS_FILE_TOKENS then
      -- paper scale: generated once into a token file under the cache, mapped by every rank
      local root = run and run.cache_root or M.active_cache_root or os.getenv("OUTLIERLAB_CACHE") or (ol.root .. "/cache")
      corpora[key] = require("outlierlab.data.corpus_file").corpus(d, root, function(fmt, ...)
        if progress.is_rank0() then io.stdout:write(string.format(fmt, ...), "\n") io.stdout:flush() end
      end)
    else
      local data = require "outlierlab.data"
      corpora[key] = data.corpus{ seed = d.seed, n_tokens = d.n_tokens, vocab_size = d.vocab_size }
    end
  end
  return corpora[key]
end

-- Batches cut from the corpus token stream, deterministic in (seed, step):
--   kind "lm"  (decoders): ids = [BOS, t_s .. t_{s+T-2}], targets = ids shifted by one
--   kind "mlm" (BERT): ids = [CLS, t_s .. t_{s+T-3}, SEP]; 15 % of the inner positions are
--              prediction targets, of which 80 % become [MASK], 10 % a random id, 10 % stay
--              (BERT §3.1); token_type 0, pad_mask 1.
-- split "train" draws starts from the first 90 % of the stream, "val" from the last 10 %.
local Batcher = {}
Batcher.__index = Batcher
-- Size and recipe bounds, central for every batcher and trainer (outlierlab.bounds):
-- check_sizes{B =, T =, kind =} (lm: T >= 1, mlm: T >= 3, B >= 1), check_run(spec) also the
-- data size and the training recipe (steps >= 1, lr > 0, warmup <= steps, ...), check_memory(spec)
-- the estimated memory of training against what the machine has.
local bounds = require "outlierlab.bounds"
M.check_sizes, M.check_run, M.check_memory = bounds.check_batch, bounds.check_run, bounds.check_memory
M.check_profile = bounds.check_profile
function M.batcher(corpus, o)
  M.check_sizes(o)   -- B >= 1 and the least T of the kind, before any row is written
  if corpus.kind == "organism" then return M.organism_batcher(corpus, o) end
  local self = setmetatable({ corpus = corpus, B = o.B, T = o.T, kind = o.kind or "lm", seed = o.seed or 1,
                              split = o.split or "train", step = 0, first = 0, rows = o.B }, Batcher)
  -- data parallel: this rank builds rows [first, first + rows) of every global batch of B rows
  -- (each row is a function of (seed, step, row) only, so the global batch is the same for
  -- any number of ranks)
  if o.shard then self.first, self.rows = dist.shard(o.B) end
  local n = corpus.n
  local cut = math.floor(n * 0.9)
  if self.split == "train" then self.lo, self.hi = 0, cut - self.T - 1
  else self.lo, self.hi = cut, n - self.T - 1 end
  if self.hi <= self.lo then
    error(string.format("batcher: corpus of %d tokens too small for T = %d (%s split)", n, self.T, self.split), 2)
  end
  return self
end
function Batcher:state() return { step = self.step } end
function Batcher:set_state(s) self.step = s.step end
function Batcher:next(ctx)
  local C = ol.C
  local B, T, sp = self.B, self.T, self.corpus.special
  local tok = self.corpus.tokens
  local rows, first = self.rows, self.first
  local ids = ctx:tensor({ rows, T }, { dtype = "i32", name = "ids" })
  local tg = ctx:tensor({ rows, T }, { dtype = "i32", name = "targets" })
  local seed = self.seed * 7919 + (self.split == "train" and 0 or 104729)
  local span = self.hi - self.lo
  local V = self.corpus.vocab_size or #self.corpus.vocab + 1
  for b = 0, rows - 1 do
    local gb = first + b   -- the row's index in the global batch
    local r = (self.step * B + gb) * 64
    local s = self.lo + math.floor(C.ol_rand_uniform(seed, r) * span)
    if self.kind == "lm" then
      ids.idata[b * T] = sp.bos
      for t = 1, T - 1 do ids.idata[b * T + t] = tok[s + t - 1] end
      for t = 0, T - 1 do tg.idata[b * T + t] = tok[s + t] end
    else
      ids.idata[b * T] = sp.cls
      for t = 1, T - 2 do ids.idata[b * T + t] = tok[s + t - 1] end
      ids.idata[b * T + T - 1] = sp.sep
      for t = 0, T - 1 do tg.idata[b * T + t] = -100 end
      for t = 1, T - 2 do
        local u = C.ol_rand_uniform(seed + 1, (self.step * B + gb) * T + t)
        if u < 0.15 then
          local orig = ids.idata[b * T + t]
          tg.idata[b * T + t] = orig
          local u2 = u / 0.15
          if u2 < 0.8 then ids.idata[b * T + t] = sp.mask
          elseif u2 < 0.9 then
            ids.idata[b * T + t] = math.floor(C.ol_rand_uniform(seed + 2, (self.step * B + gb) * T + t) * V) % V
          end
        end
      end
    end
  end
  self.step = self.step + 1
  local batch = { ids = ids, targets = tg }
  if self.kind == "mlm" then
    batch.token_type = ctx:tensor({ rows, T }, { dtype = "i32", name = "token_type" }):fill_(0)
    batch.pad_mask = ctx:tensor({ rows, T }, { dtype = "i32", name = "pad_mask" }):fill_(1)
  end
  return batch
end

-- The model organism's data (outlierlab.data.organism, docs/DATA.md): a spec's data =
-- { kind = "organism", vocab_size =, n_triggers =, groups =, alpha =, p_trigger =, n_delim =, p_delim =,
-- n_weak =, p_weak =, seed = } instead of the corpus' { seed =, n_tokens =, vocab_size = }.
-- The task stands in for a corpus everywhere: vocab, special, category, vocab_size; its
-- batches are generated, never cut from a stream (kind "lm" or "mlm").
function M.organism_task(d)
  local org = require "outlierlab.data.organism"
  local o = {}
  for k, v in pairs(d) do if k ~= "kind" then o[k] = v end end
  local task = org.task(o)
  task.kind = "organism"
  return task
end
function M.organism_batcher(task, o)
  local org = require "outlierlab.data.organism"
  local L = (o.kind or "lm") == "mlm" and org.MLMLoader or org.LMLoader
  return L{ task = task, B = o.B, T = o.T, seed = o.seed or 1, split = o.split or "train", shard = o.shard }
end

-- The data settings of a spec from a profile: cfg.data = "organism" (the default profiles)
-- or "corpus" (the generated text corpus; the paper profiles).
function M.data_spec(cfg)
  if cfg.data == "organism" then
    return { kind = "organism", vocab_size = cfg.vocab_size, n_triggers = cfg.n_triggers, groups = cfg.groups,
             alpha = cfg.alpha, p_trigger = cfg.p_trigger, n_delim = cfg.n_delim, p_delim = cfg.p_delim,
             n_weak = cfg.n_weak, p_weak = cfg.p_weak, seed = cfg.data_seed }
  end
  return { seed = cfg.data_seed, n_tokens = cfg.n_tokens, vocab_size = cfg.vocab_size }
end

-- ---------------------------------------------------------------- shared models
-- Figures that analyse the same trained model take its settings from here, so that they
-- hash to the same cached model and cannot drift apart.

-- Every shared profile carries the settings of both data sources, so that --data=corpus or
-- --data=organism switches a profile's data from the command line: the organism task
-- (data.organism: vocab_size, n_triggers, groups, alpha, p_trigger, n_delim, p_delim, n_weak, p_weak) and
-- the generated corpus (n_tokens, vocab_size). data_seed seeds either.
local ORGANISM_TASK = { vocab_size = 128, n_triggers = 24, groups = 6, alpha = 0.1, p_trigger = 0.12, n_delim = 0,
                        p_delim = 0.1, n_weak = 0, p_weak = 0.1, data_seed = 1 }
local function with_task(t, task)
  local o = config.deep_copy(ORGANISM_TASK)
  for k, v in pairs(task or {}) do o[k] = v end
  for k, v in pairs(t) do o[k] = v end
  return o
end
M.ORGANISM_TASK = ORGANISM_TASK

-- The training recipe of a shared profile: warmup, then the schedule (cosine to lr/10, linear to
-- 0, or constant), AdamW with β = (0.9, beta2), decoupled weight decay on >= 2-D parameters,
-- clip 1. The default profiles (the model organism, docs/ORGANISM.md) train at a constant high
-- learning rate with weight decay; the paper profiles keep the papers' recipes.
local function recipe(cfg, o)
  return { steps = cfg.steps, lr = cfg.lr, warmup = cfg.warmup, schedule = cfg.schedule or o.schedule,
           min_lr = (cfg.schedule or o.schedule) == "linear" and 0 or nil,
           weight_decay = cfg.weight_decay or o.weight_decay, betas = { 0.9, cfg.beta2 or o.beta2 },
           eps = o.eps, clip = 1.0,
           -- the remedies' optimizers (docs/TRAINING.md); absent = AdamW, and the spec (and its
           -- hash) stays what it was before these keys existed
           optimizer = cfg.optimizer, optimizer_opts = cfg.optimizer_opts }
end
M.recipe = recipe
local function overrides(cfg, base)
  local ov = base or {}
  if cfg.n_layer then ov.n_layer = cfg.n_layer end   -- the organism map's depth knob
  if cfg.norm_gain then ov.norm_gain = cfg.norm_gain end   -- single-scale RMSNorm (llama)
  if cfg.embed_proj then ov.embed_proj = true end           -- Park et al.'s orthogonal projections (llama)
  return ov
end

-- QT's BERT pre-training recipe (docs/EXPERIMENTS.md, paper-scale settings: AdamW β (0.9, 0.999),
-- ε 1e-6, wd 0.01, linear decay to 0, clip 1) with MLM batches (qt-fig1, qt-fig2, qt-fig10-13 ...)
function M.bert_mlm_spec(cfg)
  return {
    model = { preset = cfg.preset, overrides = overrides(cfg, { dropout = cfg.dropout }) },
    data = M.data_spec(cfg),
    batch = { B = cfg.batch, T = cfg.seq_len, kind = "mlm" },
    train = recipe(cfg, { schedule = "linear", weight_decay = 0.01, beta2 = 0.999, eps = 1e-6 }),
    seed = cfg.seed,
  }
end
M.BERT_MLM_PROFILES = {
  quick = with_task({ preset = "bert-quick", data = "organism", n_tokens = 40000, seq_len = 32, batch = 8,
            steps = 20, lr = 3e-3, warmup = 2, schedule = "constant", weight_decay = 0.1, beta2 = 0.99,
            dropout = 0.0, eval_batches = 2, seed = 1 }, { vocab_size = 64, n_triggers = 8, groups = 2 }),
  default = with_task({ preset = "bert-organism", data = "organism", n_tokens = 1000000, seq_len = 64, batch = 32,
              steps = 2500, lr = 3e-3, warmup = 200, schedule = "constant", weight_decay = 0.1, beta2 = 0.99,
              dropout = 0.0, eval_batches = 16, seed = 1 }),
  long = with_task({ preset = "bert-organism", data = "organism", n_tokens = 1000000, seq_len = 64, batch = 32,
              steps = 10000, lr = 3e-3, warmup = 200, schedule = "constant", weight_decay = 0.1, beta2 = 0.99,
              dropout = 0.0, eval_batches = 16, seed = 1 }),
  paper = with_task({ preset = "bert-base", data = "corpus", n_tokens = 100000000, vocab_size = 30522, seq_len = 128,
            batch = 256, steps = 1000000, lr = 1e-4, warmup = 10000, schedule = "linear", weight_decay = 0.01,
            beta2 = 0.999, dropout = 0.1, eval_batches = 64, seed = 1 }),
}

-- SO's nanoGPT recipe (AdamW β (0.9, 0.95), wd 0.1, warmup + cosine, clip 1) for the
-- LLaMA-style decoder on LM batches (so-fig3, so-fig6, so-fig5, so-table1, ...)
function M.llama_lm_spec(cfg)
  return {
    model = { preset = cfg.preset, overrides = overrides(cfg) },
    data = M.data_spec(cfg),
    batch = { B = cfg.batch, T = cfg.seq_len, kind = "lm" },
    train = recipe(cfg, { schedule = "cosine", weight_decay = 0.1, beta2 = 0.95 }),
    seed = cfg.seed,
  }
end
M.LLAMA_LM_PROFILES = {
  quick = with_task({ preset = "llama-quick", data = "organism", n_tokens = 40000, seq_len = 32, batch = 8,
            steps = 20, lr = 1e-2, warmup = 0, schedule = "constant", weight_decay = 0.1, beta2 = 0.99,
            eval_batches = 2, seed = 1 }, { vocab_size = 64, n_triggers = 8, groups = 2 }),
  default = with_task({ preset = "llama-organism", data = "organism", n_tokens = 1000000, seq_len = 128, batch = 16,
              steps = 3000, lr = 1e-2, warmup = 0, schedule = "constant", weight_decay = 0.1, beta2 = 0.99,
              eval_batches = 16, seed = 1 }),
  long = with_task({ preset = "llama-organism", data = "organism", n_tokens = 1000000, seq_len = 128, batch = 16,
              steps = 12000, lr = 1e-2, warmup = 0, schedule = "constant", weight_decay = 0.1, beta2 = 0.99,
              eval_batches = 16, seed = 1 }),
  paper = with_task({ preset = "tinyllama-120m", data = "corpus", n_tokens = 100000000, vocab_size = 32000,
            seq_len = 1024, batch = 480, steps = 50000, lr = 6e-4, warmup = 2000, schedule = "cosine",
            weight_decay = 0.1, beta2 = 0.95, eval_batches = 64, seed = 1 }),
}

-- base profiles with each profile's extra settings added: profiles_with(base, {quick = {tau = 10}, ...})
-- (the long profile takes the default profile's extras unless it has its own)
function M.profiles_with(base, extra)
  local out = {}
  for name, p in pairs(base) do
    local q = config.deep_copy(p)
    for k, v in pairs(extra[name] or (name == "long" and extra.default) or {}) do q[k] = v end
    out[name] = q
  end
  return out
end

-- the model config of a spec: preset + overrides, vocab_size and block_size from the data
local function model_cfg(spec)
  local models = require "outlierlab.models"
  local o = {}
  for k, v in pairs(spec.model.overrides or {}) do o[k] = v end
  o.vocab_size = spec.data.vocab_size
  o.block_size = spec.batch.T
  o.seed = spec.seed
  return models.preset(spec.model.preset, o)
end
M.model_cfg = model_cfg

-- Train (or reuse) the model of spec = { model = {preset =, overrides = {}}, data = {seed =,
-- n_tokens =, vocab_size =}, batch = {B =, T =, kind = "lm"|"mlm"}, train = {steps =, lr =,
-- ...outlierlab.train keys}, seed = }. Returns run:model's handle (dir, ckpt, info with the
-- training losses).
function M.train_model(run, spec)
  M.check_run(spec)   -- sizes and recipe, before the cache lock (outlierlab.bounds)
  return run:model(spec, function(dir, ckpt)
    M.check_memory(spec)   -- training this model must fit in memory
    local models = require "outlierlab.models"
    local train = require "outlierlab.train"
    local corpus = M.corpus(spec.data)
    local ctx = ol.Context{ seed = spec.seed }
    local m = models.build(ctx, model_cfg(spec))
    local tr = M.batcher(corpus, { B = spec.batch.B, T = spec.batch.T, kind = spec.batch.kind, seed = spec.seed,
                                   shard = true })
    local va = M.batcher(corpus, { B = spec.batch.B, T = spec.batch.T, kind = spec.batch.kind, seed = spec.seed, split = "val" })
    local tcfg = {}
    for k, v in pairs(spec.train) do tcfg[k] = v end
    tcfg.progress = tcfg.progress or "plain"
    tcfg.log_every = tcfg.log_every or math.max(1, math.floor(spec.train.steps / 10))
    run:log("%s, %d steps of %d×%d tokens", m:describe(), spec.train.steps, spec.batch.B, spec.batch.T)
    -- every model records its sinks, drains, massive activations and kurtosis as it trains
    local track = M.tracker(spec, dir, function() return M.measure_phenomena(ctx, m, corpus, spec) end)
    local res = train.run{ ctx = ctx, model = m, loader = tr, val_loader = va, cfg = tcfg, ckpt = ckpt,
                           on_step = track.on_step }
    local val = res.val[#res.val]
    -- the per-step curves go into the model's training history (outlierlab.history)
    return { losses = res.losses, lrs = res.lrs, gnorms = res.gnorms, val = res.val,
             val_loss = val and val.loss or nil, steps = res.step,
             stopped_by_signal = res.stopped_by_signal, curve = track.curve,
             params = m:num_params(), describe = m:describe() }
  end)
end

-- Phenomena during training (outlierlab.phenomena): at step 0 and every steps/TRACK_POINTS
-- steps, one held-out batch (at most 16 rows) of the model's validation stream is run with the
-- probes on; curve[i] = { step, loss, sink_share, value_ratio, sink_layer, sink_head,
-- sink_category, massive_ratio, massive_layer, massive_category, max_ratio, max_inf_norm,
-- avg_kurtosis, max_kurtosis } (max_inf_norm: the per-sequence max |h| averaged over sequences,
-- largest over layers; kurtosis Pearson, of the layer outputs h). The curve is saved beside the checkpoint (track.lua, atomically) so that a
-- resumed run keeps the points measured before the kill. The measurement runs without
-- gradients after the optimizer step and changes nothing the next step uses.
M.TRACK_POINTS = 20
function M.measure_phenomena(ctx, m, corpus, spec, B)
  local phenomena = require "outlierlab.phenomena"
  local probes = require "outlierlab.probes"
  local ph = phenomena.new{ category = corpus.category, T = spec.batch.T, C = m.cfg.d_model, n_head = m.cfg.n_head,
                            causal = spec.batch.kind == "lm" }
  local va = M.batcher(corpus, { B = math.min(B or 16, spec.batch.B), T = spec.batch.T, kind = spec.batch.kind,
                                 seed = spec.seed + 1, split = "val" })
  ctx:no_grad(function()
    ctx:reset()
    local P = probes.new{}
    ph:attach(P)
    P:forward(m, va:next(ctx))
  end)
  ctx:reset()
  return ph:result()
end
local function curve_point(step, loss, r)
  local inf = 0 / 0   -- QT's max inf norm of the layer outputs: per-sequence max |h| averaged, max over layers
  for _, l in ipairs(r.layers) do
    local v = r.per_layer[l].top1
    if v == v and not (v <= inf) then inf = v end
  end
  return { step = step, loss = loss, sink_share = r.sink.share, value_ratio = r.sink.value_ratio, max_inf_norm = inf,
           sink_layer = r.sink.layer, sink_head = r.sink.head, sink_category = r.sink.category,
           massive_ratio = r.massive.ratio, massive_layer = r.massive.layer, massive_category = r.massive.category,
           max_ratio = r.max_ratio.ratio, avg_kurtosis = r.avg_kurtosis, max_kurtosis = r.max_kurtosis }
end
M.curve_point = curve_point
function M.tracker(spec, dir, measure_fn)
  local path = dir .. "/track.lua"
  local steps = spec.train.steps
  local every = math.max(1, math.floor(steps / M.TRACK_POINTS))
  local tr = { curve = load_data(path) or {} }
  local function save()
    if dist.rank() == 0 then plot.write_atomic(path, M.serialize(tr.curve)) end
  end
  local function measure(step, loss)
    local c = tr.curve
    if #c > 0 and c[#c].step >= step then return end
    c[#c + 1] = curve_point(step, loss, measure_fn())
    save()
  end
  if #tr.curve == 0 then measure(0, 0 / 0) end
  function tr.on_step(step, rec)
    if step % every == 0 or step == steps then measure(step, rec.loss) end
  end
  return tr
end

-- a fresh context with the trained model loaded from the cache (eval mode)
function M.load_model(spec, handle)
  if handle.pretrained then return handle.pretrained:load(function(...) io.write("[stream] ", string.format(...), "\n") io.flush() end) end
  local models = require "outlierlab.models"
  local checkpoint = require "outlierlab.checkpoint"
  local ctx = ol.Context{ seed = spec.seed }
  local m = models.build(ctx, model_cfg(spec))
  checkpoint.load(handle.ckpt, ctx)
  if m.eval then m:eval() end
  return ctx, m
end

-- run fn(batch) over n held-out batches with the probe P attached (no gradients)
function M.probe_batches(ctx, m, P, corpus, spec, n)
  if corpus.kind == "text" then return require("outlierlab.pretrained").probe_batches(ctx, m, P, corpus, spec, n) end
  local va = M.batcher(corpus, { B = spec.batch.B, T = spec.batch.T, kind = spec.batch.kind,
                                 seed = spec.seed + 1, split = "val" })
  -- Under MPI with mergeable accumulators the ranks take turns (batch i on rank i mod size)
  -- and merge at the end; otherwise every rank sees every batch (still correct, no speedup).
  local spread = dist.size() > 1 and P:distributable()
  local size, rank = dist.size(), dist.rank()
  ctx:no_grad(function()
    for i = 0, n - 1 do
      ctx:reset()
      if spread and i % size ~= rank then
        va.step = va.step + 1   -- another rank's batch
      else
        local batch = va:next(ctx)
        batch.seq_offset = i * spec.batch.B   -- global index of its first sequence
        P:forward(m, batch)
      end
    end
  end)
  ctx:reset()
  if spread then P:merge_ranks() end
end

-- for l, blk in M.blocks(m): every block of a model with its weights (l 1-based); a streamed
-- model (outlierlab.stream) loads each layer in turn
function M.blocks(m)
  if m.streamed then return m:blocks() end
  return ipairs(m.blocks or m.layers)
end

-- a readable label for a token id
function M.token_label(corpus, id)
  local s = corpus.vocab[id]
  if s == nil then return "#" .. tostring(id) end
  if s == "\n" then return "\\n" end
  return s
end

-- ---------------------------------------------------------------- listing (make list)
-- every experiments/*.lua: id, title, source, profiles and the profiles that have results
-- (results/<id>/<dir>/summary.md, see M.results_dir)
function M.list(dir, results_root)
  dir = dir or (ol.root .. "/experiments")
  results_root = results_root or os.getenv("OUTLIERLAB_RESULTS") or (ol.root .. "/results")
  local p = io.popen("ls '" .. dir .. "'/*.lua 2>/dev/null")
  local out = {}
  for f in p:lines() do
    local chunk = loadfile(f)
    local ok, exp = pcall(chunk or error)
    if ok and type(exp) == "table" and exp.id then
      local ran = {}
      local q = io.popen("ls -d " .. quote(results_root .. "/" .. exp.id) .. "/*/summary.md 2>/dev/null")
      for md in q:lines() do ran[#ran + 1] = md:match("([^/]+)/summary%.md$") end
      q:close()
      table.sort(ran)
      local profiles = {}
      for name in pairs(exp.profiles or {}) do profiles[#profiles + 1] = name end
      local order = { quick = 1, default = 2, paper = 3 }
      table.sort(profiles, function(x, y)
        local a, b = order[x] or 9, order[y] or 9
        if a ~= b then return a < b end
        return x < y
      end)
      out[#out + 1] = { id = exp.id, title = exp.title, file = f, source = exp.source or {}, profiles = profiles,
                        results = ran, has_results = #ran > 0 }
    end
  end
  p:close()
  return out
end

-- The figures and tables of the sources that are not experiment files: schematics and formula
-- tables without data, and figures that need an imported pretrained model (run with --model).
M.OTHER_FIGURES = {
  { paper = "QT (Bondarenko et al. 2023)", figure = "Fig. 4", kind = "schematic",
    what = "the attention layer of BERT with the places outliers arise: a diagram, no data (docs/ATTENTION.md)" },
  { paper = "SO (An et al. 2025)", figure = "Fig. 2", kind = "schematic",
    what = "where systematic outliers sit in an LLM: a diagram, no data (so-fig1 shows the data)" },
  { paper = "SO (An et al. 2025)", figure = "Table 2", kind = "formulas",
    what = "the attention variants (a)-(e): formulas, implemented in lua/outlierlab/attention.lua (docs/ATTENTION.md)" },
  { paper = "SO (An et al. 2025)", figure = "Fig. 13–22", kind = "pretrained only",
    what = "other model families and fine-tuned models (Phi-2, Mistral-7B, LLaMA2-13B, LLaMA3-8B, OPT-6.7B, MPT-7B, Falcon-7B, chat/instruct): so-fig1 with --model=DIR --text=FILE (docs/PRETRAINED.md)" },
}

function M.print_list()
  local list = M.list()
  local w = 4
  for _, e in ipairs(list) do w = math.max(w, #e.id) end
  for _, e in ipairs(list) do
    io.write(string.format("%-" .. w .. "s  %-24s  %s\n", e.id,
      e.has_results and ("results: " .. table.concat(e.results, ",")) or "no results", e.title))
  end
  io.write("\nNot experiment files:\n")
  for _, o in ipairs(M.OTHER_FIGURES) do
    io.write(string.format("  %s %s [%s]: %s\n", o.paper:match("^(%S+)"), o.figure, o.kind, o.what))
  end
  return 0
end

-- the experiments table of docs/EXPERIMENTS.md (bin/outlierlab list --markdown); a test
-- checks that the document holds exactly this text, so the list cannot drift
function M.markdown_table(list)
  list = list or M.list()
  local function cell(s) return (tostring(s or ""):gsub("|", "\\|"):gsub("\n", " ")) end
  local lines = { "| id | paper, figure | title | profiles |", "|---|---|---|---|" }
  for _, e in ipairs(list) do
    local src = e.source.paper .. ((e.source.figure or "") ~= "" and (" " .. e.source.figure) or "")
    lines[#lines + 1] = string.format("| [%s](../experiments/%s.lua) | %s | %s | %s |", e.id, e.id, cell(src),
                                      cell(e.title), table.concat(e.profiles, ", "))
  end
  for _, o in ipairs(M.OTHER_FIGURES) do
    lines[#lines + 1] = string.format("| (%s) | %s | %s | — |", o.kind, cell(o.paper .. " " .. o.figure), cell(o.what))
  end
  return table.concat(lines, "\n") .. "\n"
end

function M.print_markdown()
  io.write(M.markdown_table())
  return 0
end

return M
