-- An experiment file under mpirun -np 2 against the same file on 1 rank (SO Fig. 3, quick):
--  * training: 2 ranks (data parallel, each half of every global batch) give the loss curve of
--    1 rank within 1e-5 relative (fp32 sums in another order);
--  * analysis: on the same trained model, 2 ranks taking turns over the batches and merging
--    their accumulators write the NetCDF numbers of 1 rank: every integer (counts, indices)
--    identical, every float within 2 float32 ulps (2.5e-7 relative; the double moment sums are
--    re-associated across ranks, which can flip the last bit of the stored float);
--  * sweeps: variants spread over groups of ranks give the 1-rank numbers.
local t = require "tap"
local root = OUTLIERLAB_ROOT
local run = t.sh
local tmp = os.tmpname()
os.remove(tmp)
os.execute("mkdir -p " .. tmp)
local env = "cd " .. root .. " && OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
local exp = "bin/outlierlab run experiments/so-fig3.lua --profile=quick"
local function dirs(tag) return string.format(" --out=%s/out-%s --cache=%s/cache-%s", tmp, tag, tmp, tag) end

local out1, ok1 = run(env .. exp .. dirs("one"))
t.ok(ok1, "1 rank ran", out1)
local out2, ok2 = run(env .. "mpirun --oversubscribe -np 2 " .. exp .. dirs("two"))
t.ok(ok2, "2 ranks trained and analysed", out2)
-- the 2-rank analysis of the model the 1-rank run trained (its model cache, no stage cache)
os.execute(string.format("mkdir -p %s/cache-shared && cp -r %s/cache-one/models %s/cache-shared/", tmp, tmp, tmp))
local out3, ok3 = run(env .. "mpirun --oversubscribe -np 2 " .. exp .. dirs("shared"))
t.ok(ok3 and out3:find("cached", 1, true), "2 ranks reuse the 1-rank model", out3)

local function losses(cache)
  local p = io.popen("cat " .. cache .. "/models/*/done.lua")
  local text = p:read("*a")
  p:close()
  local v = require("outlierlab.util.serialize").deserialize(text, "=done")
  return v and v.losses or {}
end
local l1, l2 = losses(tmp .. "/cache-one"), losses(tmp .. "/cache-two")
local worst = 0
for i = 1, #l1 do worst = math.max(worst, math.abs(l1[i] - (l2[i] or 0 / 0)) / math.abs(l1[i])) end
t.ok(#l1 > 5 and #l1 == #l2 and worst <= 1e-5, string.format("training loss curves agree within 1e-5 (worst %.2g over %d steps)", worst, #l1))

local function dump(tag)
  local p = io.popen(string.format("ncdump -p 9,17 %s/out-%s/so-fig3/quick/so-fig3.nc", tmp, tag))
  local s = p:read("*a")
  p:close()
  return s:match("\ndata:\n(.*)$") or ""
end
local d1, d3 = dump("one"), dump("shared")
local n1, n3 = {}, {}
for w in d1:gmatch("[%-%d%.eE%+]+") do if tonumber(w) then n1[#n1 + 1] = w end end
for w in d3:gmatch("[%-%d%.eE%+]+") do if tonumber(w) then n3[#n3 + 1] = w end end
t.ok(#n1 > 50 and #n1 == #n3, string.format("same number of stored values (%d vs %d)", #n1, #n3))
local ints_same, fworst = true, 0
for i = 1, math.min(#n1, #n3) do
  local a, b = n1[i], n3[i]
  if a:match("^%-?%d+$") and b:match("^%-?%d+$") then ints_same = ints_same and a == b
  else
    local x, y = tonumber(a), tonumber(b)
    local rel = x == y and 0 or math.abs(x - y) / math.max(math.abs(x), 1e-30)
    fworst = math.max(fworst, rel)
  end
end
t.ok(ints_same, "every integer in the NetCDF file is the same for 1 and 2 ranks")
t.ok(fworst <= 2.5e-7, string.format("every float within 2 float32 ulps (worst %.2g relative)", fworst))
local meta = io.popen(string.format("ncdump -h %s/out-shared/so-fig3/quick/so-fig3.nc", tmp)):read("*a")
t.ok(meta:find(":mpi_ranks = 2", 1, true), "the file records 2 MPI ranks", meta)

-- a sweep (SO Fig. 12: one model per attention variant) over 2 ranks: MPI_Comm_split makes 2
-- groups of one rank, each trains half of the variants; the stored numbers equal 1 rank's
-- bit for bit (every model is trained by one rank with one thread either way)
local sweep = "bin/outlierlab run experiments/so-fig12.lua --profile=quick"
local s1, oks1 = run(env .. sweep .. dirs("sweep1"))
local s2, oks2 = run(env .. "mpirun --oversubscribe -np 2 " .. sweep .. dirs("sweep2"))
t.ok(oks1 and oks2, "the sweep ran on 1 and on 2 ranks", s1 .. s2)
-- the data section of an experiment's NetCDF file in the run <tag> (id: so-fig12 unless given)
local function data(tag, id)
  id = id or "so-fig12"
  local p = io.popen(string.format("ncdump -p 9,17 %s/out-%s/%s/quick/%s.nc", tmp, tag, id, id))
  local x = p:read("*a")
  p:close()
  return x:match("\ndata:\n(.*)$") or "(no data)"
end
local a, b = data("sweep1"), data("sweep2")
t.ok(#a > 100 and a == b, "the swept variants' loss curves are identical on 1 and 2 ranks")

-- 4 ranks over 3 variants (emergence): groups {0,3}, {1}, {2}; the 2-rank group trains its
-- variant data parallel inside the sweep. Numbers equal 1 rank's within 1e-4 relative (fp32
-- sums in another order over a few training steps).
local em = "bin/outlierlab run experiments/emergence.lua --profile=quick"
local e1, oke1 = run(env .. em .. dirs("em1"))
local e4, oke4 = run(env .. "mpirun --oversubscribe -np 4 " .. em .. dirs("em4"))
t.ok(oke1 and oke4, "emergence ran on 1 and on 4 ranks", e1 .. e4)
local function nums(tag, id)
  local p = io.popen(string.format("ncdump -p 9,17 %s/out-%s/%s/quick/%s.nc", tmp, tag, id, id))
  local x = (p:read("*a"):match("\ndata:\n(.*)$")) or ""
  p:close()
  local out = {}
  for w in x:gmatch("[%-%d%.eE%+]+") do if tonumber(w) then out[#out + 1] = tonumber(w) end end
  return out
end
local m1, m4 = nums("em1", "emergence"), nums("em4", "emergence")
local ew = 0
for i = 1, #m1 do ew = math.max(ew, math.abs(m1[i] - (m4[i] or 1 / 0)) / math.max(math.abs(m1[i]), 1e-30)) end
t.ok(#m1 > 10 and #m1 == #m4 and ew <= 1e-4, string.format("a sweep with a 2-rank group matches 1 rank (worst %.2g relative)", ew))

-- a job array (make sbatch-<id> ARRAY=n): --sweep_index=i trains member i alone and exits 0;
-- the final run without it reuses every member's cached model and ends with the same numbers
local arr = sweep .. dirs("array")
local okall = true
for i = 0, 5 do
  local o, ok = run(env .. arr .. " --sweep_index=" .. i)
  okall = okall and ok and o:find("sweep member " .. i .. " of 6 done", 1, true) ~= nil
end
t.ok(okall, "each --sweep_index run trains one member and exits 0")
local fin, okf = run(env .. arr)
local _, ncached = fin:gsub("cached", "")
t.ok(okf and ncached >= 6, "the final run reuses the 6 cached models", fin)
t.ok(data("array") == a, "and stores the numbers of the single run")
local bad = run(env .. arr .. " --sweep_index=6")
t.ok(bad:find("--sweep_index=6 but the sweep has 6 members", 1, true), "an index past the sweep is refused", bad)
-- the compression tables train their members through run:sweep too (qt-table1: 3 members at
-- the quick profile): on 2 ranks each group trains its share, and the table is 1 rank's
local qt = "bin/outlierlab run experiments/qt-table1.lua --profile=quick"
local q1, okq1 = run(env .. qt .. dirs("qt1"))
local q2, okq2 = run(env .. "mpirun --oversubscribe -np 2 " .. qt .. dirs("qt2"))
local function qdata(tag) return data(tag, "qt-table1") end
local qmodels = 0
for _ in io.popen("ls -d " .. tmp .. "/cache-qt2/models/*/done.lua 2>/dev/null"):lines() do qmodels = qmodels + 1 end
t.ok(okq1 and okq2 and qmodels == 3 and #qdata("qt1") > 100 and qdata("qt1") == qdata("qt2"),
     "qt-table1 as an MPI sweep: 2 ranks train its 3 members and store 1 rank's numbers", q1 .. q2)
-- the analysis spreads too (remedies: one model per member of run:sweep): on 2 ranks, with the
-- 1-rank run's models, rank 1 analyses its share and the table is 1 rank's
local rem = "bin/outlierlab run experiments/remedies.lua --profile=quick"
local r1, okr1 = run(env .. rem .. dirs("rem1"))
os.execute(string.format("mkdir -p %s/cache-rem2 && cp -r %s/cache-rem1/models %s/cache-rem2/", tmp, tmp, tmp))
local r2, okr2 = run(env .. "mpirun --oversubscribe -np 2 " .. rem .. dirs("rem2"))
local analysed_by_1 = (r2:match("stage analyze(.*)$") or ""):find("%[rank 1%]: [%w_]+ +seed 1: loss") ~= nil
t.ok(okr1 and okr2 and not r2:find("stage train\n[^\n]*step", 1) and analysed_by_1,
     "remedies on 2 ranks: the 1-rank models reused, rank 1 analyses its share of them", r2)
t.ok(#data("rem1", "remedies") > 100 and data("rem1", "remedies") == data("rem2", "remedies"), "and the stored numbers are 1 rank's, bit for bit")
os.execute("rm -rf " .. tmp)
return t.done()
