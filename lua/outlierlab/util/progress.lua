-- progress — the training progress line and log, the wall clock, and the one rank-0 test.
--
--   local progress = require "outlierlab.util.progress"
--   local p = progress.new{ total = 1000, every = 10, mode = "auto" }
--   p:step{ step = 12, loss = 3.41, lr = 6e-4, gnorm = 0.8, tok_s = 12345, unit = "tok/s" }
--   p:note("eval step 12 | val loss 3.52 | ppl 33.8")   -- always on its own line
--   p:finish()
--
-- Modes: "tty"   one line rewritten in place with "\r" (step, loss, lr, grad norm, speed, ETA);
--        "plain" one log line every `every` steps (and at the first and the last step);
--        "off"   nothing;
--        "auto"  "tty" when stdout is a terminal (isatty(1) and TERM is not "dumb"), else "plain".
-- Under MPI only rank 0 prints (progress.is_rank0()).
local ffi = require "ffi"

local M = {}

-- Private names for libc functions (asm redirection), so that another module declaring
-- clock_gettime or isatty with its own types cannot clash with these declarations.
pcall(ffi.cdef, [[
int outlierlab_progress_clock_gettime(int clk, int64_t *ts) __asm__("clock_gettime");
int outlierlab_progress_isatty(int fd) __asm__("isatty");
]])

local ts = ffi.new("int64_t[2]")          -- struct timespec on LP64: { tv_sec, tv_nsec }
local CLOCK_MONOTONIC = 1

-- seconds on a monotonic clock (wall time, not CPU time)
function M.now()
  ffi.C.outlierlab_progress_clock_gettime(CLOCK_MONOTONIC, ts)
  return tonumber(ts[0]) + tonumber(ts[1]) * 1e-9
end

-- the rank of this process: the engine's MPI layer when it is built in, else the launcher's
-- environment (Open MPI, MPICH/PMI, PMIx, Slurm), else 0
function M.rank()
  local ok, ol = pcall(require, "outlierlab")
  if ok and ol and ol.C then
    for _, name in ipairs { "ol_dist_world_rank", "ol_dist_rank" } do
      local has, fn = pcall(function() return ol.C[name] end)
      if has and fn then return tonumber(fn()) end
    end
  end
  for _, var in ipairs { "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID" } do
    local v = tonumber(os.getenv(var) or "")
    if v then return v end
  end
  return 0
end

-- true on the rank that prints (rank 0, or a run without MPI)
function M.is_rank0() return M.rank() == 0 end

-- true when stdout is an interactive terminal
function M.stdout_is_tty()
  local term = os.getenv("TERM")
  if term == nil or term == "" or term == "dumb" then return false end
  local ok, r = pcall(function() return ffi.C.outlierlab_progress_isatty(1) end)
  return ok and r == 1
end

-- "1h02m", "3m04s", "12s"
function M.fmt_duration(s)
  if s ~= s or s == math.huge or s < 0 then return "?" end
  s = math.floor(s + 0.5)
  if s >= 3600 then return string.format("%dh%02dm", math.floor(s / 3600), math.floor(s % 3600 / 60)) end
  if s >= 60 then return string.format("%dm%02ds", math.floor(s / 60), s % 60) end
  return string.format("%ds", s)
end

-- 1234567 -> "1.23M"
function M.fmt_count(x)
  if x >= 1e9 then return string.format("%.2fG", x / 1e9) end
  if x >= 1e6 then return string.format("%.2fM", x / 1e6) end
  if x >= 1e3 then return string.format("%.1fk", x / 1e3) end
  return string.format("%.0f", x)
end

local Progress = {}
Progress.__index = Progress
M.Progress = Progress

-- progress.new{ total =, every = 10, mode = "auto"|"tty"|"plain"|"off", out = io.stdout,
--               start_step = 0 }
function M.new(opts)
  opts = opts or {}
  local mode = opts.mode or "auto"
  if mode ~= "auto" and mode ~= "tty" and mode ~= "plain" and mode ~= "off" then
    error("progress: mode must be auto, tty, plain or off, got " .. tostring(mode), 2)
  end
  if mode == "auto" then mode = M.stdout_is_tty() and "tty" or "plain" end
  if not M.is_rank0() then mode = "off" end
  return setmetatable({ mode = mode, total = opts.total or 0, every = math.max(1, opts.every or 10),
                        out = opts.out or io.stdout, t0 = M.now(),
                        start_step = opts.start_step or 0, live = false }, Progress)
end

-- the text of one progress line for record r (see the file header for its fields)
function Progress:format(r)
  local parts = { string.format("step %d/%d", r.step, self.total) }
  if r.loss then parts[#parts + 1] = string.format("loss %.4f", r.loss) end
  if r.lr then parts[#parts + 1] = string.format("lr %.2e", r.lr) end
  if r.gnorm then parts[#parts + 1] = string.format("gnorm %.3f", r.gnorm) end
  if r.tok_s then parts[#parts + 1] = M.fmt_count(r.tok_s) .. " " .. (r.unit or "tok/s") end
  if r.dt then parts[#parts + 1] = string.format("%.0f ms/step", r.dt * 1000) end
  local done = r.step - self.start_step
  if done > 0 and self.total > r.step then
    local per = (M.now() - self.t0) / done
    parts[#parts + 1] = "ETA " .. M.fmt_duration(per * (self.total - r.step))
  end
  return table.concat(parts, " | ")
end

function Progress:step(r)
  if self.mode == "off" then return end
  if self.mode == "tty" then
    self.out:write("\r", self:format(r), "\27[K")
    self.live = true
    self.out:flush()
  elseif r.step % self.every == 0 or r.step == self.start_step + 1 or r.step == self.total then
    self.out:write(self:format(r), "\n")
    self.out:flush()
  end
end

-- a message on its own line (evaluation results, checkpoints, resume)
function Progress:note(msg)
  if self.mode == "off" then return end
  if self.live then self.out:write("\r\27[K") self.live = false end
  self.out:write(msg, "\n")
  self.out:flush()
end

-- end the live line
function Progress:finish()
  if self.mode == "tty" and self.live then self.out:write("\n") self.live = false self.out:flush() end
end

return M
