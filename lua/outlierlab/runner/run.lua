-- runner/run — the runner behind `bin/outlierlab run experiments/<id>.lua --profile=quick`.
--
-- An experiment file returns a table (docs/reference/experiments.md):
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
--   run.id, run.profile, run.cfg (the settings), run.seed, run.dir (results/<id>/<profile>/, runner/report.results_dir),
--   run.out[stage] (what earlier stages returned), run.file, run.exp,
--   run:model(spec, trainer)   -- trained-model cache, see below
--   run:netcdf(name?)          -- outlierlab.figure.netcdf file <run.dir>/<name or id>.nc, meta filled in
--   run:figure(name, script, blocks) -- .dat + PNG + PDF in run.dir (outlierlab.figure.gnuplot)
--   run:log(fmt, ...)
-- and finally writes <run.dir>/summary.md from exp.summary(run), run.json (what the results
-- gallery reads: claim, verdict, profile, seconds, files) and history/<hash>.{nc,png}, the
-- training history of each model the run used (outlierlab.runner.history).
--
-- Caching (cache root: --cache= or $OUTLIERLAB_CACHE, default <root>/cache):
--   run:model(spec, trainer): spec is every setting that determines the trained weights
--   (model config, data, training recipe, seed). Its hash together with the engine version,
--   the content hash of the code the weights are computed through (runner/cache.model_key: the require
--   closure of the trainer's file and of the attention variants the spec names, and the engine)
--   names cache/models/<hash>/. When <hash>/done.lua exists the model is reused (figures that
--   share a model train it once); otherwise trainer(dir, ckpt_path) runs: it trains with
--   train.run{ckpt = ckpt_path}, which resumes from the checkpoint an interrupted run left,
--   and returns a table of training facts (losses...), stored in done.lua.
--   A stage marked cache = true stores its return value in cache/stages/<id>/<stage>-<hash>.lua
--   (and the seconds it took in <that file>.seconds, which summary.md and run.json report when reused),
--   hash of (settings, engine version, code hash, experiment file text, the hashes of the models
--   the run used): a rerun with the same inputs skips it, a changed setting, file or model
--   recomputes it. --retrain trains every model of the run anew; --refresh_curves those whose
--   tracked curve is stale (recipes/track.lua); --reanalyze recomputes the cached stages.
-- Results root: --out= or $OUTLIERLAB_RESULTS, default <root>/results.
local ol = require "outlierlab"
local config = require "outlierlab.config"
local results = require "outlierlab.figure.netcdf"
local plot = require "outlierlab.figure.gnuplot"
local progress = require "outlierlab.util.progress"
local ffi = require "ffi"
local cache = require "outlierlab.runner.cache"
local canonical_json = require("outlierlab.util.json").canonical

local M = {}

-- the keys of the shared training profiles (recipe, generated data, organism task): what an
-- analysis of an imported model does not use (outlierlab.pretrained's Settings line)
function M.training_keys()
  local recipes = require "outlierlab.recipes"
  local keys = {}
  for k in pairs(recipes.ORGANISM_TASK) do keys[k] = true end
  for _, set in ipairs { recipes.LLAMA_LM_PROFILES, recipes.BERT_MLM_PROFILES } do
    for _, prof in pairs(set) do for k in pairs(prof) do keys[k] = true end end
  end
  return keys
end

-- exit status of a run stopped by the batch system's signal after its checkpoint was written
-- (the Slurm script requeues on it; outlierlab.runner.slurm)
local serialize = require "outlierlab.util.serialize"
local dist = require "outlierlab.util.dist"
local lend = require "outlierlab.runner.lend"
local fs = require "outlierlab.util.fs"
local report = require "outlierlab.runner.report"
local bounds = require "outlierlab.train.bounds"
local read_file, mkdir = fs.read_file, fs.mkdir_p
local load_data, save_data = cache.load_data, cache.save_data
local verdict_word, model_list, copy_histories = report.verdict_word, report.model_list, report.copy_histories
local write_summary, write_run_json = report.write_summary, report.write_run_json
-- the results' name of a run on real text: "kjv" (--data=kjv), "mix50" (--p_text=0.5), else nil;
-- a run under another scale rule than its profile's own (profile_rule) adds the rule's name:
-- "width" (--scale_rule=width on a profile of the papers' rule), "paper" (the reverse, e.g. QT's)
function M.data_leaf(cfg, profile_rule)
  local leaf
  if cfg.data == "kjv" then leaf = "kjv" end
  if (cfg.p_text or 0) > 0 then leaf = string.format("mix%g", cfg.p_text * 100) end
  -- a run under another rule than its profile's keeps its own folder
  local rule = cfg.scale_rule
  if rule and rule ~= (profile_rule or "paper") then leaf = leaf and (leaf .. "-" .. rule) or rule end
  return leaf
end

-- ---------------------------------------------------------------- the run object
local Run = {}
Run.__index = Run

-- a message of the run, printed by rank 0; a rank leading a sweep group relays its messages to
-- rank 0 (util/progress), labelled with the member it trains
function Run:log(fmt, ...)
  local msg = string.format(fmt, ...)
  if progress.member then msg = progress.member .. ": " .. msg end
  local line = string.format("[%s] ", self.id) .. msg
  if progress.is_rank0() then
    io.stdout:write(line, "\n")
    io.stdout:flush()
  elseif progress.relay then
    progress.relay_line(line)
  end
end

-- the label of sweep member i of n in progress lines: its label or name field, else its
-- fields "k=v" (sorted), else its value, else "member i/n"
function M.member_label(item, i, n)
  if type(item) == "table" then
    if type(item.label) == "string" then return item.label end
    if type(item.name) == "string" then return item.name end
    local keys = {}
    for k, v in pairs(item) do
      if type(k) == "string" and (type(v) == "string" or type(v) == "number" or type(v) == "boolean") then keys[#keys + 1] = k end
    end
    table.sort(keys)
    local parts = {}
    for _, k in ipairs(keys) do parts[#parts + 1] = k .. "=" .. tostring(item[k]) end
    if #parts > 0 and #parts <= 4 then return table.concat(parts, " ") end
  elseif type(item) == "string" or type(item) == "number" then
    return tostring(item)
  end
  return string.format("member %d/%d", i, n)
end

-- Before the sweep's split (a collective of every rank): the relay of progress lines from the
-- leading rank of every group but the first to world rank 0 (util/progress). Rank 0 names a
-- fresh directory <run dir>/.progress/<token>/ and writes a file there; a leading rank relays
-- through <dir>/rank-<r>.txt when it sees that file (the run directory is shared with rank 0),
-- and prints its own lines otherwise; rank 0 reads the files of the ranks that see it.
-- Returns the directory (rank 0 removes it after the sweep) or nil.
local function start_relays(run, G)
  local wr = dist.world_rank()
  if not run.dir or progress.member then return nil end   -- a sweep inside a sweep member: no relay
  local token = string.format("%x-%x-%d", os.time(), math.floor(progress.now() * 1e6) % 0x7fffffff, fs.pid())
  token = dist.allgather_string(wr == 0 and token or "")[1]
  local dir = run.dir .. "/.progress/" .. token
  if wr == 0 then
    mkdir(dir)
    fs.write_atomic(dir .. "/rank0", "rank 0 reads the rank-<r>.txt files of this directory\n")
  end
  dist.barrier()
  local sees = wr > 0 and wr < G and read_file(dir .. "/rank0") ~= nil
  local seen = dist.allgather_list({ sees and 1 or 0 })
  if wr == 0 then
    local paths = {}
    for r = 1, G - 1 do
      if seen[r + 1] == 1 then paths[#paths + 1] = string.format("%s/rank-%d.txt", dir, r) end
    end
    progress.start_watch(paths)
  elseif wr < G then
    progress.start_relay(sees and string.format("%s/rank-%d.txt", dir, wr) or nil)
  end
  return dir
end



-- Sweeps: run fn(item, i) for every item of a list (variants, seeds, γ values) and return
-- the list of results, the same on every rank. Under MPI the ranks split into
-- min(#items, ranks) groups (MPI_Comm_split); group g runs items g+1, g+1+G, …, data
-- parallel inside the group; results travel to every rank. fn's result must be plain data
-- (outlierlab.util.serialize); a model trained inside fn is in the shared cache for everyone.
--
-- Job arrays (make sbatch-<id> ARRAY=n): --sweep_index=i runs member i (0-based) of the
-- experiment's first sweep, then stops (exit 0); a final run without --sweep_index finds every
-- member's model in the cache and goes on to the analysis and the figures.
function Run:sweep(items, fn)
  if self.count_sweep then coroutine.yield(#items) end   -- M.sweep_size: the count, and nothing runs
  if self.sweep_index and self.sweep_index >= 0 then
    local i = self.sweep_index + 1
    if i > #items or i ~= math.floor(i) then
      error(string.format("experiment %s: --sweep_index=%s but the sweep has %d members (0..%d)", self.id,
        tostring(self.sweep_index), #items, #items - 1), 0)
    end
    progress.member = M.member_label(items[i], i, #items)
    fn(items[i], i)
    progress.member = nil
    error({ exit_status = 0, message = string.format("%s: sweep member %d of %d done; run without --sweep_index " ..
      "(after every member) to analyse and plot from the cached models", self.id, i - 1, #items) }, 0)
  end
  local world = dist.world_size()
  if world == 1 or #items <= 1 then
    local out = {}
    local outer = progress.member
    for i, it in ipairs(items) do
      -- (no pcall: an error keeps its traceback; the label is left set only on the way out)
      progress.member = outer or (#items > 1 and M.member_label(it, i, #items) or nil)
      out[i] = fn(it, i)
      progress.member = outer
    end
    return out
  end
  -- --model_ranks=1: one rank per group (ranks beyond the members idle), so that every member
  -- trains alone on its rank: the single-process bits on any rank count
  local G = self.model_ranks == 1 and world or math.min(#items, world)
  local wr = dist.world_rank()
  local g = wr % G
  local relay_dir = start_relays(self, G)
  if wr == 0 and not progress.member then
    local per = {}
    for r = 0, G - 1 do
      local names = {}
      for i = r + 1, #items, G do names[#names + 1] = M.member_label(items[i], i, #items) end
      per[#per + 1] = string.format("rank %d: %s", r, table.concat(names, ", "))
    end
    self:log("sweep of %d members over %d groups of ranks (%s)", #items, G, table.concat(per, "; "))
  end
  dist.split(g)
  local mine = {}
  local ok, err = pcall(function()
    for i = g + 1, #items, G do
      progress.member = string.format("%s [rank %d]", M.member_label(items[i], i, #items), wr)
      mine[i] = fn(items[i], i)
    end
  end)
  progress.member = nil
  if relay_dir and wr > 0 then progress.end_relay(ok) end
  dist.unsplit()
  if not ok then error(err, 0) end
  -- rank 0 prints the other groups' lines until each has ended, then the collective below
  if relay_dir and wr == 0 then
    progress.wait_relays()
    os.execute("rm -rf '" .. relay_dir:gsub("'", "'\\''") .. "'")
    os.remove(self.dir .. "/.progress")   -- only when empty
  end
  -- a rank whose members are done waits here asleep (not in the allgather's busy poll, which
  -- would take a core from the ranks still training), and lends its threads to them (runner/lend)
  lend.idle(true)
  dist.quiet_barrier()
  lend.idle(false)
  local out = {}
  local lead = wr < G   -- world ranks 0..G-1 are the groups' rank 0
  for _, text in ipairs(dist.allgather_string(lead and serialize.serialize(mine) or serialize.serialize({}))) do
    for i, v in pairs(serialize.deserialize(text, "=sweep") or {}) do out[i] = v end
  end
  return out
end

-- spec.train with key = value added when the spec does not set key itself: in place (a new
-- train table: a shared profile table stays untouched), because the trainer closure reads this
-- very spec; a run option that changes the weights so enters the model's spec and cache key
local function set_train_key(spec, key, value)
  if type(spec.train) ~= "table" or spec.train[key] ~= nil then return end
  local tr = {}
  for k, v in pairs(spec.train) do tr[k] = v end
  tr[key] = value
  spec.train = tr
end

-- The model of spec: from the run's cache, trained by trainer(dir, ckpt, o) when missing
-- (runner/cache.lua, Cache:get_or_train). An imported model (--model=DIR, outlierlab.pretrained)
-- stands in for every trained one; counting a sweep (M.sweep_size) stops here.
function Run:model(spec, trainer)
  if self.count_sweep then coroutine.yield(0) end   -- a model before any sweep: no sweep
  if self.pretrained then return self.pretrained:handle() end
  -- --shards=S: rank-invariant data parallelism (train.run's cfg.shards) for every model the
  -- run trains. A spec that sets its own shards keeps them; S = 0 (the default) leaves the spec
  -- untouched.
  if (self.shards or 0) > 0 and type(spec.train) == "table" and spec.train.shards == nil then
    if (spec.train.accum or 1) > 1 then
      error(string.format("--shards=%d: this model trains with gradient accumulation (accum = %d), which shards do not support",
                          self.shards, spec.train.accum), 0)
    end
    set_train_key(spec, "shards", self.shards)
  end
  -- --flush_subnormals: every model the run trains does so with flush-to-zero (train.run's
  -- cfg.flush_subnormals, docs/reference/training.md "Subnormals")
  if self.flush_subnormals then set_train_key(spec, "flush_subnormals", true) end
  return self.cache:get_or_train(spec, trainer)
end

function Run:meta()
  return { title = self.exp.title, id = self.id, profile = self.profile, seed = self.seed,
           config = { experiment = self.id, profile = self.profile, settings = self.cfg,
                      shards = (self.shards or 0) > 0 and self.shards or nil,
                      flush_subnormals = self.flush_subnormals or nil },
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


-- the error for a profile the experiment does not have, with the nearest ones (PROFILE=defualt)
function M.unknown_profile(exp, file, profile)
  local names = {}
  for k in pairs(exp.profiles) do names[#names + 1] = k end
  table.sort(names)
  return string.format("experiment %s: unknown profile '%s'%svalid: %s", file, tostring(profile),
                       config.did_you_mean(tostring(profile), names), table.concat(names, ", "))
end

-- The number of members of an experiment's first sweep in a profile, without training
-- anything: the stages run until the first run:sweep (its size) or run:model outside a sweep
-- (0: no sweep). args: a list of "--key=value" settings applied to the profile. Used to
-- refuse a Slurm job array larger than the sweep (outlierlab.runner.slurm, make sbatch-<id> ARRAY=).
function M.sweep_size(exp, file, profile, args)
  local stages = validate(exp, file)
  local prof = exp.profiles[profile]
  if type(prof) ~= "table" then error(M.unknown_profile(exp, file, profile), 0) end
  local overrides = {}
  for _, a in ipairs(args or {}) do
    local k, v = a:match("^%-%-([%w_%.%-]+)=(.*)$")
    if k then overrides[k] = v end
  end
  local cfg = config.get(prof, { strict = false, overrides = overrides })
  local run = setmetatable({ id = exp.id, exp = exp, file = file, profile = profile, cfg = cfg, seed = cfg.seed or 0,
                             count_sweep = true, out = {}, files = {} }, Run)
  -- The stages run in a coroutine: the first run:sweep yields its size (run:model outside a
  -- sweep yields 0) and nothing after it runs. Nothing is trained here: recipes.fit skips the
  -- size and memory checks of a counting run (they belong to the machine that trains).
  local co = coroutine.create(function()
    for _, st in ipairs(stages) do run.out[st.name] = st.fn(run) end
    return 0
  end)
  local ok, n = coroutine.resume(co)
  if not ok then error(n, 0) end
  return n
end

-- ---------------------------------------------------------------- entry point
function M.run_file(exp, file)
  local stages = validate(exp, file)
  -- Slurm's --signal=B:USR1@… reaches the ranks shortly before the time limit: training then
  -- checkpoints at the next step and the run exits with REQUEUE_STATUS (outlierlab.runner.slurm)
  dist.watch_signal(dist.SIGUSR1)
  local root = ol.root
  local opts = config.get({ profile = "default", sweep_index = -1, retrain = false, reanalyze = false,
                            refresh_curves = false,   -- retrain the models whose tracked curve is stale (runner/cache)
                            progress = "",   -- auto | tty | plain | off (quiet): every training's progress lines
                            shards = tonumber(os.getenv("OUTLIERLAB_SHARDS") or "") or 0,   -- rank invariance (Run:model)
                            flush_subnormals = os.getenv("OUTLIERLAB_FLUSH_SUBNORMALS") == "1",   -- flush-to-zero (Run:model)
                            -- --model_ranks=1: every model trains on one rank alone (sweep members spread over
                            -- the ranks, a lone model on rank 0), so that mpirun gives a run's single-process bits
                            model_ranks = tonumber(os.getenv("OUTLIERLAB_MODEL_RANKS") or "") or 0,
                            model = "", text = "", stream = "auto",   -- a pretrained model (outlierlab.pretrained)
                            out = os.getenv("OUTLIERLAB_RESULTS") or (root .. "/results"),
                            cache = os.getenv("OUTLIERLAB_CACHE") or (root .. "/cache") }, { strict = false })
  local prof = exp.profiles[opts.profile]
  if type(prof) ~= "table" then error(M.unknown_profile(exp, file, opts.profile), 0) end
  local cfg = config.get(prof, { ignore = { profile = true, out = true, cache = true, sweep_index = true,
                                            retrain = true, reanalyze = true, refresh_curves = true, model = true, text = true, stream = true,
                                            progress = true, shards = true, model_ranks = true, flush_subnormals = true } })
  local S = opts.shards
  -- train.run's own rule for cfg.shards (0 or a power of two), reported as the option
  if not pcall(require("outlierlab.train.loop").config, { steps = 1, shards = S }) then
    error(string.format("experiment %s: --shards=%s (or OUTLIERLAB_SHARDS): must be 0 (off) or a power of two", file, tostring(S)), 0)
  end
  if opts.model_ranks ~= 0 and opts.model_ranks ~= 1 then
    error(string.format("experiment %s: --model_ranks=%s (or OUTLIERLAB_MODEL_RANKS): must be 0 (the ranks of a group " ..
                        "train a model together) or 1 (every model on one rank)", file, tostring(opts.model_ranks)), 0)
  end
  if opts.progress ~= "" then progress.mode_override = opts.progress end
  progress.override()   -- a bad --progress / OUTLIERLAB_PROGRESS value is an error now, not at the first step
  require("outlierlab.data.bounds").check_profile(cfg)   -- sizes and learning rates of the settings, before any stage
  if opts.text ~= "" and opts.model == "" then error("experiment " .. file .. ": --text=FILE needs --model=DIR (the model that reads it)", 0) end
  local pretrained = opts.model ~= "" and require("outlierlab.pretrained").attach(exp, opts, cfg, M.training_keys()) or nil

  local run = setmetatable({
    id = exp.id, exp = exp, file = file, profile = opts.profile, cfg = cfg, seed = cfg.seed or 0,
    dir = report.results_dir(opts.out, exp.id, { profile = opts.profile, model = pretrained and pretrained.name,
                                            data = not pretrained and M.data_leaf(cfg, prof.scale_rule) or nil }),
    results_root = opts.out, cache_root = opts.cache, pretrained = pretrained,
    sweep_index = opts.sweep_index, retrain = opts.retrain, reanalyze = opts.reanalyze, refresh_curves = opts.refresh_curves,
    shards = opts.shards, model_ranks = opts.model_ranks, flush_subnormals = opts.flush_subnormals, out = {}, files = {},
  }, Run)
  run.cache = cache.Cache{ root = opts.cache, retrain = opts.retrain, refresh_curves = opts.refresh_curves,
                           model_ranks = opts.model_ranks, log = function(...) run:log(...) end }
  run.model_hashes = run.cache.model_hashes   -- the models the run used (report.lua)
  mkdir(run.dir)
  lend.setup(run.dir)   -- idle ranks lend their threads to the training ones (RANKS=N)
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
      local h = fs.hash(canonical_json({ cfg = cfg, profile = run.profile, engine = ol.version(),
                                                code = cache.code_hash(), file = ftext, stage = st.name,
                                                models = model_list(run),
                                                pretrained = pretrained and pretrained.fingerprint }))
      cpath = run.cache_root .. "/stages/" .. exp.id .. "/" .. st.name .. "-" .. h .. ".lua"
      local v = not run.reanalyze and load_data(cpath) or nil
      if v ~= nil then run.out[st.name] = v; cached = true end
    end
    local computed   -- a cached stage: the seconds it took when it was computed (<entry>.seconds)
    if not cached then
      run:log("stage %s", st.name)
      local v = st.fn(run)
      run.out[st.name] = v
      if st.cache and v ~= nil and progress.is_rank0() then
        mkdir(cpath:match("^(.*)/"))
        save_data(cpath, v)
        fs.write_atomic(cpath .. ".seconds", string.format("%.3f\n", progress.now() - t0))
      end
    else
      computed = tonumber((read_file(cpath .. ".seconds") or ""):match("[%d.]+") or "")
      run:log("stage %s: cached%s", st.name, computed and string.format(" (computed in %.1f s)", computed) or "")
    end
    timings[#timings + 1] = { name = st.name, seconds = progress.now() - t0, cached = cached, computed_seconds = computed }
  end
  local s = exp.summary and exp.summary(run) or {}
  if pretrained then s = pretrained:summary(run, s) end
  if run.profile == "quick" and not pretrained then
    s.criterion_met, s.holds, s.no_verdict = s.holds, nil, true
  end
  local models = model_list(run)   -- a collective under MPI: every rank calls it
  if progress.is_rank0() then
    copy_histories(run, models)
    local mts = report.models_train_seconds(run, models)   -- the models' training, read once for both
    write_summary(run, s, timings, models, mts)
    write_run_json(run, s, timings, progress.now() - t_all, models, mts)
  end
  run:log("done in %.1f s: %s/summary.md — %s", progress.now() - t_all, run.dir,
          s.no_verdict and report.NO_VERDICT or ("claim " .. verdict_word(s)))
  if s.reproduced then run:log("reproduced: %s", s.reproduced) end
  return run
end


return M
