-- dist — data parallelism and rank-aware helpers over engine/dist.c (Open MPI).
--
--   local dist = require "outlierlab.dist"
--   dist.rank(), dist.size()            -- in the current group (the world unless split)
--   dist.print0(...)                    -- only rank 0 of the world prints
--   dist.allreduce_grads(ctx)           -- one MPI_Allreduce over the flat gradient buffer, averaged
--   dist.check_params(ctx)              -- error if the parameters differ across ranks
--   dist.split(color)                   -- sweeps: join the group of ranks with this color
--   dist.shard(B)                       -- (first row, rows) of this rank's part of a global batch
--
-- Outside mpirun (or under plain luajit) everything behaves as one rank.
local ol = require "outlierlab"
local C = ol.C
local M = {}

function M.rank() return C.ol_dist_rank() end
function M.size() return C.ol_dist_size() end
function M.world_rank() return C.ol_dist_world_rank() end
function M.world_size() return C.ol_dist_world_size() end
function M.is_rank0() return C.ol_dist_world_rank() == 0 end
function M.wtime() return C.ol_dist_wtime() end
function M.barrier() C.ol_dist_barrier() end

function M.print0(...)
  if C.ol_dist_world_rank() == 0 then print(...) end
end
function M.write0(s)
  if C.ol_dist_world_rank() == 0 then io.write(s) io.flush() end
end

function M.allreduce_grads(ctx, average)
  ol.check_status(C.ol_dist_allreduce_grads(ctx.raw, average == false and 0 or 1))
end
function M.bcast_params(ctx, root) ol.check_status(C.ol_dist_bcast_params(ctx.raw, root or 0)) end
function M.check_params(ctx) ol.check_status(C.ol_dist_check_params(ctx.raw)) end
function M.checksum(ctx) return string.format("%016x", C.ol_params_checksum(ctx.raw)) end

local ops = { sum = 0, max = 1, min = 2 }
-- reduce a Lua array of numbers in place across ranks (doubles; exact for sums of integers)
function M.allreduce_list(list, op)
  local n = #list
  if n == 0 or M.size() == 1 then return list end
  local buf = ol.ffi.new("double[?]", n)
  for i = 1, n do buf[i - 1] = list[i] end
  ol.check_status(C.ol_dist_allreduce_f64(buf, n, ops[op or "sum"] or error("allreduce_list: op must be sum, max or min", 2)))
  for i = 1, n do list[i] = buf[i - 1] end
  return list
end
-- in-place on an ffi double* / float* / int64_t* buffer of n elements
function M.allreduce_f64(buf, n, op) ol.check_status(C.ol_dist_allreduce_f64(buf, n, ops[op or "sum"])) end
function M.allreduce_f32(buf, n, op) ol.check_status(C.ol_dist_allreduce_f32(buf, n, ops[op or "sum"])) end
function M.allreduce_i64(buf, n, op) ol.check_status(C.ol_dist_allreduce_i64(buf, n, ops[op or "sum"])) end
-- every rank's list (same length on all), concatenated in rank order
function M.allgather_list(list)
  local n, size = #list, M.size()
  if size == 1 then return { unpack(list) } end
  local inb, outb = ol.ffi.new("double[?]", math.max(n, 1)), ol.ffi.new("double[?]", math.max(n * size, 1))
  for i = 1, n do inb[i - 1] = list[i] end
  ol.check_status(C.ol_dist_allgather_f64(inb, n, outb))
  local out = {}
  for i = 1, n * size do out[i] = outb[i - 1] end
  return out
end

function M.split(color) ol.check_status(C.ol_dist_split(color)) end
function M.unsplit() C.ol_dist_unsplit() end

-- This rank's rows of a global batch of B rows: first row (0-based) and count.
-- B must be a multiple of the group size, so every rank does the same work.
function M.shard(B)
  local size, rank = M.size(), M.rank()
  if B % size ~= 0 then
    error(string.format("dist: global batch %d is not a multiple of the %d ranks", B, size), 2)
  end
  local per = B / size
  return rank * per, per
end

-- Stop the whole job after printing this rank's message.
function M.abort(msg, code)
  io.stderr:write(string.format("outlierlab: rank %d of %d: %s\n", M.world_rank(), M.world_size(), tostring(msg)))
  io.stderr:flush()
  C.ol_dist_abort(code or 1)
  error(msg, 0)
end

-- Checkpoint-before-timeout: watch SIGUSR1 (Slurm --signal=USR1@…); poll between steps.
M.SIGUSR1, M.SIGTERM = 10, 15
function M.watch_signal(sig) ol.check_status(C.ol_signal_watch(sig or M.SIGUSR1)) end
function M.signal_pending() return C.ol_dist_signal_pending() end

return M
