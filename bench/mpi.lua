-- Data-parallel throughput: the same global batch trained by 1 rank (1 thread) and by 2 ranks
-- (1 thread each) on this machine, tokens/s and the fraction of a step spent in the gradient
-- allreduce (one MPI_Allreduce over the flat gradient buffer). The ideal speedup is 2.0.
local root = OUTLIERLAB_ROOT
local env = "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
local worker = root .. "/bin/outlierlab run " .. root .. "/bench/workers/dp_step.lua"
local function run(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("*a")
  p:close()
  local r = {}
  r.ranks, r.tps, r.comm, r.step = out:match("ranks (%d+) tokens/s ([%d%.]+) comm_fraction ([%d%.]+) step_s ([%d%.]+)")
  if not r.tps then error("bench/mpi: worker failed:\n" .. out, 0) end
  return { ranks = tonumber(r.ranks), tps = tonumber(r.tps), comm = tonumber(r.comm), step = tonumber(r.step) }
end
print("== data parallelism: gpt2-mini (6 layers, d 384, T 256), global batch 8, 1 thread per rank ==")
local one = run(env .. worker)
local two = run(env .. "mpirun --oversubscribe --bind-to none -np 2 " .. worker)
-- the rank-invariant sum (train.run's cfg.shards): recursive doubling in a fixed order
local tree = run(env .. "mpirun --oversubscribe --bind-to none -np 2 " .. worker .. " --tree=true")
tree.label = "2 (tree)"
print(string.format("%-8s %12s %10s %14s", "ranks", "tokens/s", "step (s)", "allreduce %"))
for _, r in ipairs({ one, two, tree }) do
  print(string.format("%-8s %12.1f %10.3f %13.1f%%", r.label or tostring(r.ranks), r.tps, r.step, 100 * r.comm))
end
print(string.format("speedup 2 ranks / 1 rank: %.2f (ideal 2.00); with the rank-invariant tree sum: %.2f",
                    two.tps / one.tps, tree.tps / one.tps))
