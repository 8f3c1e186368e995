-- dist — data parallelism and rank-aware helpers over engine/dist.c (Open MPI).
--
--   local dist = require "outlierlab.util.dist"
--   dist.rank(), dist.size()            -- in the current group (the world unless split)
--   dist.print0(...)                    -- only rank 0 of the world prints
--   dist.allreduce_grads(ctx)           -- one MPI_Allreduce over the flat gradient buffer, averaged
--   dist.check_params(ctx)              -- error if the parameters differ across ranks
--   dist.split(color)                   -- sweeps: join the group of ranks with this color
--   dist.quiet_barrier()                -- a barrier that waits asleep (long waits)
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
-- a barrier whose waiting rank sleeps (poll_ms between tests, default 20) instead of polling at
-- 100 % of a core: for waits of seconds to minutes (a sweep's ranks that finished early)
function M.quiet_barrier(poll_ms) ol.check_status(C.ol_dist_quiet_barrier(poll_ms or 20)) end

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

-- every rank's string, in rank order
function M.allgather_string(str)
  local size = M.size()
  if size == 1 then return { str } end
  local n = #str
  local mine, counts = ol.ffi.new("int64_t[1]", n), ol.ffi.new("int64_t[?]", size)
  ol.check_status(C.ol_dist_allgather_i64(mine, 1, counts))
  local total = 0
  for r = 0, size - 1 do total = total + tonumber(counts[r]) end
  local out = ol.ffi.new("char[?]", math.max(total, 1))
  ol.check_status(C.ol_dist_allgatherv_bytes(str, n, counts, out))
  local list, off = {}, 0
  for r = 0, size - 1 do
    local c = tonumber(counts[r])
    list[r + 1] = ol.ffi.string(out + off, c)
    off = off + c
  end
  return list
end

-- ---------------------------------------------------------------- merging analysis state
local serialize = require "outlierlab.util.serialize"
local function deser(text)
  local v, err = serialize.deserialize(text, "=dist")
  if v == nil then error("dist: cannot read another rank's state: " .. tostring(err), 2) end
  return v
end

-- Merge an analysis accumulator across the ranks of the current group, in place, so every
-- rank ends with the state of one accumulator that saw every rank's sequences:
--   analysis.Stats: the flat state is gathered and merged in rank order (counts and maxima
--     exact, top-k exact, double sums re-associated: equal to one rank within 1e-12 relative);
--   LayerStats / LayerAttn (.stats per layer): each layer merged (the union of layers);
--   other objects with :merge (AttnStats, …): their Lua state is gathered and merged.
function M.allmerge(acc)
  if M.size() == 1 then return acc end
  if acc.raw ~= nil and acc.data and acc.clone_empty then
    local n = acc:size()
    local all = ol.ffi.new("double[?]", n * M.size())
    ol.check_status(C.ol_dist_allgather_f64(acc:data(), n, all))
    local total = acc:clone_empty()
    for r = 0, M.size() - 1 do
      local part = acc:clone_empty()
      ol.ffi.copy(part:data(), all + r * n, n * 8)
      total:merge(part)
    end
    ol.ffi.copy(acc:data(), total:data(), n * 8)
    return acc
  end
  if type(acc.stats) == "table" and acc.get then
    local mine = {}
    for l in pairs(acc.stats) do mine[#mine + 1] = l end
    local union = {}
    for _, s in ipairs(M.allgather_string(serialize.serialize(mine))) do
      for _, l in ipairs(deser(s)) do union[l] = true end
    end
    local layers = {}
    for l in pairs(union) do layers[#layers + 1] = l end
    table.sort(layers)
    for _, l in ipairs(layers) do M.allmerge(acc:get(l)) end
    return acc
  end
  if acc.merge then
    local mt = getmetatable(acc)
    local function has_fn(v)
      if type(v) == "function" or type(v) == "cdata" then return true end
      if type(v) == "table" then for _, x in pairs(v) do if has_fn(x) then return true end end end
      return false
    end
    local parts = M.allgather_string(serialize.serialize(acc))
    local total
    for r, s in ipairs(parts) do
      local st = setmetatable(deser(s), mt)
      for k, v in pairs(acc) do   -- fields holding functions (a category map, options) stay local
        if has_fn(v) then st[k] = v end
      end
      if r == 1 then total = st else total:merge(st) end
    end
    for k, v in pairs(total) do if not has_fn(acc[k]) then acc[k] = v end end
    return acc
  end
  error("dist.allmerge: don't know how to merge " .. tostring(acc), 2)
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
function M.clear_signal() C.ol_signal_clear() end

return M
