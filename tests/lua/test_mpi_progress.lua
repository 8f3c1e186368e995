-- Progress of every member of a sweep under `mpirun -np 2` (issue 23): rank 0 prints the lines of
-- the members rank 1 trains (util/progress relays them through a file in the run directory),
-- also while rank 0's own members are cached and it has nothing of its own to print.
--   * tests/mpi/sweep_progress.lua: 4 tiny decoders, one per seed; member i goes to the group of
--     rank (i - 1) % 2, so seeds 1 and 3 are rank 0's, seeds 2 and 4 rank 1's;
--   * seeds 1 and 3 are trained first on one rank, then the 4 members run on 2 ranks: rank 0's
--     members are cached, rank 1 trains; rank 0's own output (mpirun --output-filename keeps each
--     rank's stdout apart) holds every member's label, rank 1's steps with loss, tok/s and ETA, and
--     rank 1's own output holds nothing (one copy of every line);
--   * a run where both ranks train prints both ranks' steps on rank 0; --progress=off (the quiet
--     mode) prints no step line and still finishes; the relay directory is removed afterwards;
--   * a Slurm array task (--sweep_index=i, one member per task) prints its member's lines itself.
local t = require "tap"
local root = OUTLIERLAB_ROOT
local tmp = os.tmpname()
os.remove(tmp)
os.execute("mkdir -p " .. tmp)
local env = "cd " .. root .. " && OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
local exp = "bin/outlierlab run tests/mpi/sweep_progress.lua --profile=quick"
local function dirs(tag, cache) return string.format(" --out=%s/out-%s --cache=%s/cache-%s", tmp, tag, tmp, cache or tag) end
local function mpi(tag, args)
  local of = tmp .. "/of-" .. tag
  local out, ok = t.sh(env .. "timeout 300 mpirun --oversubscribe -np 2 --output-filename " .. of .. " " .. exp .. args)
  return out, ok, t.slurp(of .. "/1/rank.0/stdout") or "", t.slurp(of .. "/1/rank.1/stdout") or ""
end
local function count(s, pat)
  local n = 0
  for _ in s:gmatch(pat) do n = n + 1 end
  return n
end

-- 0. the relay in one process: only whole lines are printed, the end line stops the wait
do
  local progress = require "outlierlab.util.progress"
  local path = tmp .. "/relay.txt"
  local f = io.open(path, "wb")
  f:write("first line\nhalf a li")
  f:close()
  local sink = { text = "" }
  function sink:write(...) for _, s in ipairs { ... } do self.text = self.text .. s end end
  function sink:flush() end
  progress.start_watch({ path, tmp .. "/never-written.txt" })
  t.is(progress.poll(true, sink), false, "relay: not ended yet")
  t.is(sink.text, "first line\n", "relay: a whole line is printed, half a line waits")
  progress.watch.files[2].done = true   -- (a rank that ended)
  f = io.open(path, "ab")
  f:write("ne\n\1done ok\n")
  f:close()
  progress.wait_relays(sink)
  t.is(sink.text, "first line\nhalf a line\n", "relay: the rest of the line, then the end")
  t.is(progress.watch, nil, "relay: the watch ends")
end

-- 1. rank 0's members (seeds 1, 3) cached beforehand on one rank
local out1, ok1 = t.sh(env .. exp .. " --seeds=1,3" .. dirs("one", "a"))
t.ok(ok1 and out1:find("tiny seed=3: step 24/24", 1, true), "seeds 1 and 3 trained on one rank, lines labelled with the member", out1)

local out, ok, r0, r1 = mpi("cached", dirs("two", "a"))
t.ok(ok, "the sweep ran on 2 ranks", out)
t.ok(r0:find("sweep of 4 members over 2 groups of ranks (rank 0: tiny seed=1, tiny seed=3; rank 1: tiny seed=2, tiny seed=4)", 1, true),
     "rank 0 says which rank trains which member", r0)
t.ok(r0:find("tiny seed=1 %[rank 0%]: model %x+: cached") and r0:find("tiny seed=3 %[rank 0%]: model %x+: cached"),
     "rank 0 says its members are cached", r0)
for _, s in ipairs { 2, 4 } do
  local label = "tiny seed=" .. s .. " %[rank 1%]: "
  t.ok(r0:find(label .. "model %x+: training"), "rank 0 prints that rank 1 trains seed " .. s, r0)
  t.ok(r0:find(label .. "step 1/24 | loss [%d.]+ | lr [^|]+| gnorm [^|]+| [%d.]+k? tok/s | %d+ ms/step | ETA %d+s"),
       "rank 0 prints rank 1's first step of seed " .. s .. " (loss, tok/s, ETA)", r0)
  t.is(count(r0, label .. "step %d+/24 "), 13, "rank 0 prints every logged step of seed " .. s .. " (1, 2, 4, ..., 24)")
  t.ok(r0:find(label .. "eval step 24 | val loss"), "and its evaluation", r0)
end
t.is(r1, "", "rank 1 prints nothing itself: every line once, on rank 0")
local order = r0:find("tiny seed=4 [rank 1]: step 24/24", 1, true)
local done = r0:find("[sweep-progress] done in", 1, true)
t.ok(order and done and order < done, "rank 1's last step comes before the end of the run", r0)
t.ok(not io.open(tmp .. "/out-two/sweep-progress/quick/.progress/."), "the relay directory is removed after the sweep")

-- 2. both ranks train: rank 0 prints its own steps and rank 1's
out, ok, r0, r1 = mpi("both", dirs("both"))
t.ok(ok, "the sweep ran on 2 ranks with nothing cached", out)
for _, s in ipairs { 1, 2, 3, 4 } do
  local label = string.format("tiny seed=%d %%[rank %d%%]: step 24/24", s, (s - 1) % 2)
  t.ok(r0:find(label), "rank 0 prints the last step of seed " .. s, r0)
end
t.is(r1, "", "rank 1 prints nothing itself")

-- 3. quiet mode: no step line, the run still finishes (its relay ends are still awaited)
out, ok, r0, r1 = mpi("quiet", dirs("quiet") .. " --progress=off")
t.ok(ok and r0:find("[sweep-progress] done in", 1, true), "--progress=off: the sweep finishes", out)
t.is(count(r0, "step %d+/24"), 0, "--progress=off: no step line")
t.ok(r0:find("tiny seed=2 %[rank 1%]: model %x+: training"), "--progress=off: the run's messages stay", r0)
local q, qok = t.sh(env .. "OUTLIERLAB_PROGRESS=off " .. exp .. " --seeds=5" .. dirs("quiet1"))
t.ok(qok and count(q, "step %d+/24") == 0, "OUTLIERLAB_PROGRESS=off: no step line on one rank", q)
local b, bok = t.sh(env .. exp .. " --progress=loud --seeds=5" .. dirs("bad"))
t.ok(not bok and b:find("must be auto, tty, plain or off", 1, true), "a bad --progress value is refused", b)

-- 4. a Slurm array task (--sweep_index=i) prints its own member's lines, labelled, in its log
local a, aok = t.sh(env .. exp .. " --sweep_index=1" .. dirs("array"))
t.ok(aok and a:find("tiny seed=2: step 24/24", 1, true) and a:find("sweep member 1 of 4 done", 1, true),
     "--sweep_index=1: the task trains seed 2 and prints its labelled lines", a)

os.execute("rm -rf " .. tmp)
return t.done()
