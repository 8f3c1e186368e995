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
-- Under MPI only rank 0 prints (progress.is_rank0()). In a sweep spread over groups of ranks
-- (runner/run's run:sweep), the leading rank of every other group relays its lines to rank 0
-- through a small file in the run directory (see "Sweeps under MPI" below), so rank 0 prints
-- the progress of every member, labelled with the member and the rank that trains it.
-- Quiet mode: --progress=off on the command line (runner/run) or OUTLIERLAB_PROGRESS=off in the
-- environment turns every progress line off (also plain or tty: that mode for every training).
local ffi = require "ffi"

local M = {}

-- Private names for libc functions (asm redirection), so that another module declaring
-- clock_gettime or isatty with its own types cannot clash with these declarations.
pcall(ffi.cdef, [[
int outlierlab_progress_clock_gettime(int clk, int64_t *ts) __asm__("clock_gettime");
int outlierlab_progress_isatty(int fd) __asm__("isatty");
int outlierlab_progress_poll(void *fds, unsigned long n, int timeout_ms) __asm__("poll");
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

-- sleep ms milliseconds
function M.sleep(ms) pcall(function() ffi.C.outlierlab_progress_poll(nil, 0, ms) end) end

-- the mode every training uses instead of its own (nil: each its own): "off" is the quiet mode
M.mode_override = nil
local function override()
  local m = M.mode_override
  if m == nil or m == "" then m = os.getenv("OUTLIERLAB_PROGRESS") end
  if m == nil or m == "" or m == "auto" then return nil end
  if m ~= "tty" and m ~= "plain" and m ~= "off" then
    error("progress: --progress / OUTLIERLAB_PROGRESS must be auto, tty, plain or off, got '" .. tostring(m) .. "'", 0)
  end
  return m
end
M.override = override
function M.quiet() return override() == "off" end

-- ---------------------------------------------------------------- sweeps under MPI
-- M.member: the label of the sweep member this process trains ("llama depth=8 [rank 1]"), put
-- before its progress lines; set by runner/run's run:sweep while the member runs.
-- M.relay: on the leading rank of a sweep group other than world rank 0, where its lines go:
--   { fh = file } appended line by line (flushed) for rank 0 to read, or { fh = nil }: the run
--   directory is not shared with rank 0 (another node's disk), the rank prints its own lines.
-- M.watch: on world rank 0, the relay files it reads: { files = { {path =, off =, done =} }, last = t }.
-- A relay file holds whole lines; "\1done ok" or "\1done failed" ends it (the rank finished its
-- members). Rank 0 reads the files between its own steps (at most every POLL_SECONDS) and, when
-- its own members are done, until every file has its end line (M.wait_relays), before the sweep's
-- collective: a rank that finishes early writes its end line and waits in the collective, so no
-- rank waits on a message that never comes.
M.member, M.relay, M.watch = nil, nil, nil
M.POLL_SECONDS = 0.5
local DONE = "\1done"
local live_line = nil   -- the Progress whose tty line is on screen (rank 0)

-- write one line where this rank's lines go (relay file, own stdout, or rank 0's stdout)
local function emit(line, out)
  local r = M.relay
  if r and r.fh then
    r.fh:write(line, "\n")
    r.fh:flush()
    return
  end
  out = out or io.stdout
  if live_line and live_line.live and live_line.out == out then out:write("\r\27[K") live_line.live = false end
  out:write(line, "\n")
  out:flush()
end

-- a line for rank 0's output from a relaying rank (run:log's messages go through here)
function M.relay_line(line) if M.relay then emit(line) end end

-- start relaying to path (a rank leading a sweep group, world rank > 0); path nil: print own lines
function M.start_relay(path)
  local fh = path and io.open(path, "ab") or nil
  M.relay = { fh = fh, path = path }
  return M.relay
end

-- end relaying: the end line rank 0 waits for
function M.end_relay(ok)
  local r = M.relay
  M.relay = nil
  if r and r.fh then
    r.fh:write(DONE, ok and " ok" or " failed", "\n")
    r.fh:close()
  end
end

-- rank 0: read the relay files at paths (missing ones count as not shared and are not waited for)
function M.start_watch(paths)
  local files = {}
  for i, p in ipairs(paths) do files[i] = { path = p, off = 0, done = false } end
  M.watch = { files = files, last = -math.huge }
  return M.watch
end

-- rank 0: print every complete new line of the relay files; returns true when every file ended.
-- force: read now (otherwise at most every POLL_SECONDS)
function M.poll(force, out)
  local w = M.watch
  if not w then return true end
  local t = M.now()
  if not force and t - w.last < M.POLL_SECONDS then
    for _, f in ipairs(w.files) do if not f.done then return false end end
    return true
  end
  w.last = t
  local all = true
  for _, f in ipairs(w.files) do
    if not f.done then
      local fh = io.open(f.path, "rb")
      if fh then
        fh:seek("set", f.off)
        local text = fh:read("*a") or ""
        fh:close()
        local upto = 0
        for line, e in text:gmatch("([^\n]*)\n()") do
          upto = e - 1
          if line:sub(1, #DONE) == DONE then f.done = true break end
          emit(line, out)
        end
        f.off = f.off + upto
      end
      all = all and f.done
    end
  end
  return all
end

-- rank 0: print the relayed lines until every relaying rank has ended (its members done)
function M.wait_relays(out)
  if not M.watch then return end
  while not M.poll(true, out) do M.sleep(200) end
  M.watch = nil
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
  mode = override() or mode
  if mode == "auto" then mode = M.stdout_is_tty() and "tty" or "plain" end
  -- a relaying rank writes plain lines (for rank 0 or its own stdout); other ranks print nothing
  if not M.is_rank0() then mode = (M.relay and mode ~= "off") and "relay" or "off" end
  return setmetatable({ mode = mode, total = opts.total or 0, every = math.max(1, opts.every or 10),
                        out = opts.out or io.stdout, t0 = M.now(),
                        start_step = opts.start_step or 0, live = false }, Progress)
end

-- the text of one progress line for record r (see the file header for its fields)
function Progress:format(r)
  local parts = { string.format("%sstep %d/%d", M.member and (M.member .. ": ") or "", r.step, self.total) }
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
  if M.watch then M.poll(false, self.out) end   -- rank 0 of a sweep: the other groups' lines
  if self.mode == "off" then return end
  if self.mode == "tty" then
    self.out:write("\r", self:format(r), "\27[K")
    self.live = true
    live_line = self
    self.out:flush()
  elseif r.step % self.every == 0 or r.step == self.start_step + 1 or r.step == self.total then
    if self.mode == "relay" then emit(self:format(r)) return end
    self.out:write(self:format(r), "\n")
    self.out:flush()
  end
end

-- a message on its own line (evaluation results, checkpoints, resume)
function Progress:note(msg)
  if self.mode == "off" then return end
  if M.member then msg = M.member .. ": " .. msg end
  if self.mode == "relay" then emit(msg) return end
  if self.live then self.out:write("\r\27[K") self.live = false end
  self.out:write(msg, "\n")
  self.out:flush()
end

-- end the live line
function Progress:finish()
  if self.mode == "tty" and self.live then self.out:write("\n") self.live = false self.out:flush() end
end

return M
