-- test_determinism — the same seed gives bit-identical parameters after a few training steps:
-- in one process, across processes, across thread counts (OMP_NUM_THREADS 1, 2, 4: every
-- reduction in the engine has a fixed chunking and every sgemm runs as fixed single-threaded
-- work items, engine/blas.c), and across MPI rank counts (train.run's cfg.shards: 1 rank and
-- mpirun -np 2, when mpirun is installed).
-- The model: embedding → LayerNorm → Linear → GELU → dropout → Linear → cross_entropy,
-- with (B·T, hidden) = (128, 512) so the elementwise kernels cross OL_PAR_MIN and run
-- threaded, trained 4 AdamW steps with gradient clipping.
-- Child mode (OL_DET_CHILD=1): train once and print "checksum <hex>" for the parent.
local ol = require "outlierlab"
local nn = require "outlierlab.nn"
local optim = require "outlierlab.optim"
local ffi = require "ffi"

local V, C, H, BT = 64, 128, 512, 128

-- FNV-1a over the bytes of the flat parameter buffer, as 8 hex digits ×2 (two lanes)
local function checksum(ctx)
  local n = tonumber(ol.C.ol_params_numel(ctx.raw))
  local p = ffi.cast("const uint32_t *", ol.C.ol_params_data(ctx.raw))
  local h1, h2 = 0x811c9dc5, 0x01000193
  for i = 0, n - 1 do
    local w = p[i]
    h1 = bit.bxor(h1, w); h1 = bit.tobit(h1 * 16777619 % 4294967296)
    h2 = bit.bxor(h2, bit.rol(w, 13)); h2 = bit.tobit(h2 * 2246822519 % 4294967296)
  end
  return bit.tohex(h1) .. bit.tohex(h2), n
end

local function train(steps)
  local ctx = ol.Context{ params = 2^20, step_bytes = 2^26, seed = 99 }
  local emb = nn.Embedding(ctx, V, C, { name = "wte" })
  local ln = nn.LayerNorm(ctx, C, { name = "ln" })
  local fc = nn.Linear(ctx, C, H, { name = "fc" })
  local proj = nn.Linear(ctx, H, V, { name = "proj" })
  local drop = nn.Dropout(0.1, 3)
  local ids = ctx:tensor({ BT }, { dtype = "i32", persistent = true, name = "ids" })
  local tg = ctx:tensor({ BT }, { dtype = "i32", persistent = true, name = "targets" })
  for i = 0, BT - 1 do
    ids.idata[i] = math.floor(ol.C.ol_rand_uniform(1, i) * V)
    tg.idata[i] = (ids.idata[i] * 7 + 3) % V
  end
  local opt = optim.AdamW(ctx, { lr = 1e-2 })
  local losses = {}
  for step = 1, steps do
    ctx:reset(); ctx:zero_grad()
    local h = drop(fc(ln(emb(ids))):gelu())
    local loss = proj(h):cross_entropy(tg)
    losses[step] = loss:item()
    loss:backward()
    optim.clip_grad_norm(ctx, 1.0)
    opt:step()
  end
  return ctx, losses
end

if os.getenv("OL_DET_CHILD") == "1" then
  local ctx = train(4)
  print("threads " .. ol.num_threads() .. " checksum " .. checksum(ctx))
  return 0
end

local t = require "tap"
local ctx1, l1 = train(4)
local ctx2, l2 = train(4)
local n = tonumber(ol.C.ol_params_numel(ctx1.raw))
t.ok(n > 100000, "model has " .. n .. " parameter floats")
t.ok(l1[4] < l1[1], string.format("training moves the loss (%.4f -> %.4f)", l1[1], l1[4]))
pcall(ffi.cdef, "int memcmp(const void *a, const void *b, size_t n);")   -- may be declared already
local same = ffi.C.memcmp(ol.C.ol_params_data(ctx1.raw), ol.C.ol_params_data(ctx2.raw), n * 4) == 0
t.ok(same, "in-process, same seed and threads (" .. ol.num_threads() .. "): parameters bit-identical after 4 steps")
local mv = ffi.C.memcmp(ol.C.ol_adam_v_data(ctx1.raw), ol.C.ol_adam_v_data(ctx2.raw), n * 4) == 0
t.ok(mv, "in-process: AdamW second moments bit-identical")
local lsame = true
for i = 1, 4 do if l1[i] ~= l2[i] then lsame = false end end
t.ok(lsame, "in-process: the four losses are bit-identical")
local here = checksum(ctx1)

-- subprocesses with different thread counts
local function child(threads)
  local cmd = string.format("OL_DET_CHILD=1 OMP_NUM_THREADS=%d OPENBLAS_NUM_THREADS=%d '%s/bin/outlierlab' run '%s' 2>&1",
                            threads, threads, ol.root, arg and arg[0] or "tests/lua/test_determinism.lua")
  local f = io.popen(cmd)
  local out = f:read("*a")
  f:close()
  return out:match("checksum (%x+)"), out
end
local c1a, o1 = child(1)
local c1b = child(1)
local c2a, o2 = child(2)
local c2b = child(2)
local c4a, o4 = child(4)
t.ok(c1a ~= nil and c2a ~= nil and c4a ~= nil, "child processes report checksums", (o1 or "") .. (o2 or "") .. (o4 or ""))
t.ok(c1a == c1b, "two processes with OMP_NUM_THREADS=1: identical parameters (" .. tostring(c1a) .. ")")
t.ok(c2a == c2b, "two processes with OMP_NUM_THREADS=2: identical parameters (" .. tostring(c2a) .. ")")
if ol.num_threads() == 1 or ol.num_threads() == 2 then
  local same_proc = ol.num_threads() == 1 and c1a or c2a
  t.ok(here == same_proc, "in-process result equals the subprocess with the same thread count")
end
t.ok(c1a ~= nil and c1a == c2a, "OMP_NUM_THREADS=1 and =2 give bit-identical parameters (" .. tostring(c1a) .. " vs " ..
     tostring(c2a) .. ")")
t.ok(c1a ~= nil and c1a == c4a, "OMP_NUM_THREADS=1 and =4 give bit-identical parameters (" .. tostring(c1a) .. " vs " ..
     tostring(c4a) .. ")")

-- whole models through train.run (attention, RoPE, SwiGLU, RMSNorm / LayerNorm, GELU, tied
-- embeddings, clipping, BERT's dropout) with rank-invariant shards: threads 1, 2, 4 and 1 vs 2 MPI ranks
local det = ol.root .. "/tests/mpi/det_train.lua"
local function det_run(prefix, args)
  local f = io.popen(prefix .. " '" .. ol.root .. "/bin/outlierlab' run '" .. det .. "' " .. args .. " 2>&1")
  local out = f:read("*a")
  f:close()
  local loss, sum = out:match("loss (%S+) checksum (%x+)")
  return loss, sum, out
end
local mpi_env = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 "
local have_mpi = os.execute("command -v mpirun >/dev/null 2>&1") == 0
-- (bert: masked-LM targets in the first rows only, so the shards count differently and some
-- have no target: the count-weighted tree sum)
for _, family in ipairs { "llama", "gpt2", "bert" } do
  local args = "--family=" .. family .. " --shards=4"
  local l1, r1, o1 = det_run("OMP_NUM_THREADS=1", args)
  local _, r2 = det_run("OMP_NUM_THREADS=2", args)
  local _, r4 = det_run("OMP_NUM_THREADS=4", args)
  t.ok(r1 ~= nil, family .. "-tiny through train.run reports a checksum (loss " .. tostring(l1) .. ")", o1)
  t.ok(r1 ~= nil and r1 == r2 and r1 == r4, family .. "-tiny, train.run, shards 4: threads 1, 2, 4 give bit-identical parameters (" ..
       tostring(r1) .. ", " .. tostring(r2) .. ", " .. tostring(r4) .. ")")
  -- OMP_DYNAMIC=true: the host keeps the teams it asks for (engine/host/main.c; with dynamic teams
  -- a region of one thread let OpenBLAS start threads of its own inside a work item and wait
  -- for them forever on a loaded machine), so the run finishes with the same bits
  local _, rd, od = det_run("OMP_DYNAMIC=true OMP_NUM_THREADS=4 timeout 120", args)
  t.ok(rd ~= nil and rd == r1, family .. "-tiny, OMP_DYNAMIC=true with 4 threads: finishes with the same bits (" ..
       tostring(rd) .. ")", rd == nil and od or nil)
  if have_mpi then
    local _, m2, out = det_run(mpi_env .. "timeout 120 mpirun --oversubscribe -np 2", args)
    t.ok(r1 ~= nil and m2 == r1, family .. "-tiny, shards 4: mpirun -np 2 gives the same bits as 1 rank (" .. tostring(m2) ..
         " vs " .. tostring(r1) .. ")", out)
  else
    t.skip("mpirun is not installed", family .. ": mpirun -np 2 vs 1 rank")
  end
end

-- the organism's batch (B 32, T 64: 2,048 rows, one shard) puts every op of the step above the
-- engine's parallel threshold, so RMSNorm, SwiGLU, the heads, attention, the residual adds,
-- cross-entropy and AdamW run as items on the engine's threads (pool.c): threads 1, 2 and 4
-- give the same bits
for _, family in ipairs { "llama", "gpt2" } do
  local args = "--family=" .. family .. " --shards=1 --B=32 --T=64"
  local l1, r1, o1 = det_run("OMP_NUM_THREADS=1", args)
  local _, r2 = det_run("OMP_NUM_THREADS=2", args)
  local _, r4 = det_run("OMP_NUM_THREADS=4", args)
  t.ok(r1 ~= nil and r1 == r2 and r1 == r4, family .. "-tiny, B 32 × T 64 in one shard: threads 1, 2, 4 give bit-identical " ..
       "parameters (" .. tostring(r1) .. ", " .. tostring(r2) .. ", " .. tostring(r4) .. "; loss " .. tostring(l1) .. ")",
       r1 == nil and o1 or nil)
end

-- cfg.shards is checked: a power of two, not with accumulation
local train_mod = require "outlierlab.train.loop"
t.ok(not pcall(train_mod.config, { steps = 1, shards = 3 }), "train: cfg.shards = 3 (not a power of two) is an error")
t.ok(not pcall(train_mod.config, { steps = 1, shards = 2, accum = 2 }), "train: cfg.shards > 1 with accum > 1 is an error")
t.ok(pcall(train_mod.config, { steps = 1, shards = 4 }), "train: cfg.shards = 4 is accepted")

-- An experiment's --shards=4 reaches every model it trains: so-fig3's quick organism from
-- 1 rank × 2 threads and from mpirun -np 2 × 1 thread has the same tensor bytes (each run with
-- its own cache, so neither reuses the other's model); without --shards the two differ.
local function exp_tensors(prefix, args, id)
  local dir = os.tmpname(); os.remove(dir)
  local cmd = string.format("%s '%s/bin/outlierlab' run '%s/experiments/%s.lua' --profile=quick --progress=off " ..
                            "--cache='%s/cache' --out='%s/res' %s 2>&1", prefix, ol.root, ol.root, id or "so-fig3", dir, dir, args)
  local f = io.popen(cmd)
  local out = f:read("*a")
  f:close()
  -- every trained model's tensors, after the JSON header (which holds timings), in hash order
  local p = io.popen("ls '" .. dir .. "'/cache/models/*/model.safetensors 2>/dev/null | sort")
  local parts = {}
  for path in p:lines() do
    local b = t.slurp(path)
    if b then
      local n = 0
      for i = 8, 1, -1 do n = n * 256 + b:byte(i) end
      parts[#parts + 1] = path:match("models/([^/]+)/") .. "\n" .. b:sub(9 + n)
    end
  end
  p:close()
  os.execute("rm -rf '" .. dir .. "'")
  return #parts > 0 and table.concat(parts, "\n") or nil, out, #parts
end
if have_mpi then
  local one, o1 = exp_tensors("OMP_NUM_THREADS=2", "--shards=4")
  local two, o2 = exp_tensors(mpi_env .. "timeout 300 mpirun --oversubscribe -np 2", "--shards=4")
  t.ok(one ~= nil and #one > 0 and one == two, "so-fig3 quick, --shards=4: 1 rank × 2 threads and 2 ranks × 1 thread train " ..
       "the same tensors bit for bit", (one == nil and o1 or "") .. (two == nil and o2 or ""))
  local plain1 = exp_tensors("OMP_NUM_THREADS=2", "")
  local plain2 = exp_tensors(mpi_env .. "timeout 300 mpirun --oversubscribe -np 2", "")
  t.ok(plain1 ~= nil and plain2 ~= nil and plain1 ~= plain2,
       "without --shards, 2 ranks sum their gradients by MPI_Allreduce: different bits (what the switch is for)")
  -- --model_ranks=1 (make reproduce-all RANKS=2): every model on one rank, so mpirun gives the
  -- single-process bits — for a lone model (rank 0 trains it) and for a sweep (so-fig10's six
  -- members spread over the two ranks)
  local mr = mpi_env .. "timeout 300 mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS=1 -x OUTLIERLAB_MODEL_RANKS=1"
  local lone2, lo = exp_tensors(mr, "")
  t.ok(plain1 ~= nil and lone2 == plain1, "so-fig3 quick, OUTLIERLAB_MODEL_RANKS=1: mpirun -np 2 trains the single-process model bit for bit", lo)
  local sw1, so1, n1 = exp_tensors("OMP_NUM_THREADS=2", "", "so-fig10")
  local sw2, so2, n2 = exp_tensors(mpi_env .. "timeout 300 mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS=1", "--model_ranks=1", "so-fig10")
  t.ok(sw1 ~= nil and n1 >= 2 and n2 == n1 and sw2 == sw1,
       string.format("so-fig10 quick, --model_ranks=1: a sweep of %d models on 2 ranks gives the single-process hashes and bits", n1 or 0),
       (sw1 == nil and so1 or "") .. (sw2 ~= sw1 and so2 or ""))
else
  t.skip("mpirun is not installed", "so-fig3 --shards=4 on 1 and 2 ranks")
  t.skip("mpirun is not installed", "--model_ranks=1 on 2 ranks")
  t.skip("mpirun is not installed", "--model_ranks=1 sweep on 2 ranks")
end
local _, badm = exp_tensors("", "--model_ranks=2")
t.ok(badm:find("--model_ranks=2", 1, true) and badm:find("must be 0", 1, true), "--model_ranks=2: a clear error naming the option", badm)
local _, bad = exp_tensors("", "--shards=3")
t.ok(bad:find("--shards=3", 1, true) and bad:find("must be 0 (off) or a power of two", 1, true),
     "--shards=3 on a run: a clear error naming the option", bad)

-- Op by op, in-process, 1 vs 2 threads: forward output and input gradients. The engine's
-- own kernels (fixed-order reductions, threads over rows/columns) must be bit-identical;
-- the sgemm-based ops are reported.
local octx = ol.Context{ params = 2^20, step_bytes = 2^27 }
local function P(shape, seed, lo, hi)
  return octx:tensor(shape, { persistent = true, name = "in" }):uniform_(lo or -1, hi or 1, seed)
end
local function snapshot(y, inputs)
  local parts = { ffi.string(y.data, y.numel * 4) }
  for _, x in ipairs(inputs) do parts[#parts + 1] = ffi.string(x.grad, x.numel * 4) end
  return table.concat(parts)
end
local function run(threads, f, inputs)
  ol.set_num_threads(threads)
  octx:reset()
  for _, x in ipairs(inputs) do x:requires_grad_(true); x:zero_grad() end
  local y = f(unpack(inputs))
  local R = octx:tensor(y:size()):uniform_(-1, 1, 17)
  ;(y * R):sum_all():backward()
  local snap = snapshot(y, inputs)
  octx:reset()
  return snap
end
local big = { 256, 256 }       -- 65536 elements > OL_PAR_MIN: the threaded paths run
local ids = octx:tensor({ 256 }, { dtype = "i32", persistent = true, name = "ids" })
local tg = octx:tensor({ 256 }, { dtype = "i32", persistent = true, name = "tg" })
for i = 0, 255 do ids.idata[i] = i % 37; tg.idata[i] = (i * 5) % 256 end
local own = {
  { "layernorm+affine", function(x, w, b) return x:layernorm(w, b) end, { P(big, 1), P({ 256 }, 2), P({ 256 }, 3) } },
  { "rmsnorm", function(x, w) return x:rmsnorm(w) end, { P(big, 4), P({ 256 }, 5) } },
  { "softmax causal", function(x) return x:view({ 1, 256, 256 }):softmax(true) end, { P(big, 6) } },
  { "cross_entropy", function(x) return x:cross_entropy(tg) end, { P(big, 7) } },
  { "gelu", function(x) return x:gelu() end, { P(big, 8) } },
  { "add broadcast", function(x, r) return x + r end, { P(big, 9), P({ 256 }, 10) } },
  { "mul one-element", function(x, s) return x * s end, { P(big, 11), P({ 1 }, 12) } },
  { "sum", function(x) return x:sum() end, { P(big, 13) } },
  { "embedding", function(w) return ids:embedding(w) end, { P({ 37, 256 }, 14) } },
  { "transpose", function(x) return x:transpose(0, 1) end, { P(big, 15) } },
  { "dropout", function(x) return x:dropout(0.3, 5) end, { P(big, 16) } },
}
for _, c in ipairs(own) do
  t.ok(run(1, c[2], c[3]) == run(2, c[2], c[3]), c[1] .. ": forward and gradients bit-identical with 1 and 2 threads")
end
local blas = {
  { "matmul", function(a, b) return a:matmul(b) end, { P(big, 20), P(big, 21) } },
  { "linear+bias", function(x, w, b) return x:linear(w, b) end, { P(big, 22), P(big, 23), P({ 256 }, 24) } },
  -- a small output with a long inner dim: the product is cut into fixed K chunks
  { "matmul long K", function(a, b) return a:matmul(b, true, false) end, { P({ 2048, 64 }, 25), P({ 2048, 64 }, 26) } },
}
for _, c in ipairs(blas) do
  for _, th in ipairs { 2, 4 } do
    t.ok(run(1, c[2], c[3]) == run(th, c[2], c[3]), c[1] .. " (sgemm): bit-identical with 1 and " .. th .. " threads")
  end
end
ol.set_num_threads(0)
return t.done()
