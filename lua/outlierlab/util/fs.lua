-- fs — the file-system operations the runner needs with exact errors, through libc (FFI):
-- directories created with the path and the reason in the message, a lock file for one
-- writer at a time, and the removal of temporaries left by killed writers.
--
--   local fs = require "outlierlab.util.fs"
--   fs.mkdir_p("results/x/quick")           -- error: "cannot create directory results/x: Permission denied"
--   local lk = fs.lock("cache/models/h/.lock", { wait = function(owner) ... end })  -- nil = held elsewhere
--   lk:release()
--   fs.remove_stale_temporaries("cache/models/h")     -- "<file>.tmp.<pid>[.<rank>]" of dead processes
--   fs.list_dir("results/x/default/history")           -- the names in a directory, sorted ({} if none)
--   fs.mtime("cache/models/h/ckpt.safetensors")        -- its modification time (epoch seconds), nil if none
--
-- The lock is flock(2) on a file: the kernel holds it for the process and drops it when the
-- process ends, however it ends (kill -9 included), so there is no stale lock to detect and
-- no window between creating the lock and naming its owner. The file holds the owner's pid
-- and host for messages only. A lock directory of older versions (".lock/" with a "pid"
-- file) is taken over when its pid is dead, or when it has no pid after a grace period
-- (5 s: the window it covers is a few milliseconds; $OUTLIERLAB_LOCK_GRACE seconds if set).
local ffi = require "ffi"

local M = {}

-- Private names (asm redirection) so that no other module's declarations of these libc
-- functions can clash with ours.
pcall(ffi.cdef, [[
int outlierlab_fs_mkdir(const char *path, unsigned int mode) __asm__("mkdir");
int outlierlab_fs_open(const char *path, int flags, ...) __asm__("open");
int outlierlab_fs_close(int fd) __asm__("close");
int outlierlab_fs_flock(int fd, int op) __asm__("flock");
int outlierlab_fs_ftruncate(int fd, int64_t len) __asm__("ftruncate");
int64_t outlierlab_fs_write(int fd, const char *buf, size_t n) __asm__("write");
int64_t outlierlab_fs_readlink(const char *path, char *buf, size_t n) __asm__("readlink");
int outlierlab_fs_kill(int pid, int sig) __asm__("kill");
int outlierlab_fs_getpid(void) __asm__("getpid");
int outlierlab_fs_gethostname(char *name, size_t n) __asm__("gethostname");
char *outlierlab_fs_strerror(int errnum) __asm__("strerror");
]])
local C = ffi.C

-- Linux values (x86-64 and aarch64 share them)
local O_RDWR, O_CREAT, O_CLOEXEC = 2, 64, 524288
local LOCK_EX, LOCK_NB, LOCK_UN = 2, 4, 8
local EEXIST, EINTR, EWOULDBLOCK, ESRCH = 17, 4, 11, 3

local function strerror(e) return ffi.string(C.outlierlab_fs_strerror(e)) end
M.strerror = strerror

function M.pid() return C.outlierlab_fs_getpid() end

function M.hostname()
  local buf = ffi.new("char[256]")
  if C.outlierlab_fs_gethostname(buf, 255) ~= 0 then return "?" end
  return ffi.string(buf)
end

-- is a process with this pid alive on this machine? (EPERM: alive, another user's)
function M.alive(pid)
  pid = tonumber(pid)
  if not pid or pid <= 0 or pid ~= math.floor(pid) then return false end
  if C.outlierlab_fs_kill(pid, 0) == 0 then return true end
  return ffi.errno() ~= ESRCH
end

local function is_dir(path)
  local f = io.open(path .. "/.", "rb")
  if f then f:close() return true end
  return false
end
M.is_dir = is_dir

-- mkdir -p with the failing directory and the system's reason in the error
function M.mkdir_p(path, what)
  if type(path) ~= "string" or path == "" then error((what and (what .. ": ") or "") .. "empty directory path", 2) end
  local prefix = path:sub(1, 1) == "/" and "/" or ""
  local cur = prefix
  for part in path:gmatch("[^/]+") do
    cur = (cur == "" or cur == "/") and (cur .. part) or (cur .. "/" .. part)
    if part ~= "." and part ~= ".." and C.outlierlab_fs_mkdir(cur, tonumber("755", 8)) ~= 0 then
      local e = ffi.errno()
      if e ~= EEXIST or not is_dir(cur) then
        local why = e == EEXIST and "a file of that name exists" or strerror(e)
        error(string.format("%scannot create directory %s: %s", what and (what .. ": ") or "", cur, why), 0)
      end
    end
  end
  return path
end

-- ---------------------------------------------------------------- lock files
local Lock = {}
Lock.__index = Lock

function Lock:release()
  if self.fd and self.fd >= 0 then
    C.outlierlab_fs_flock(self.fd, LOCK_UN)
    C.outlierlab_fs_close(self.fd)
  end
  self.fd = nil
end

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- when path was last modified, in seconds since the epoch (nil if it does not exist)
function M.mtime(path)
  local p = io.popen("stat -c %Y -- '" .. path:gsub("'", "'\\''") .. "' 2>/dev/null")
  local m = p:read("*n")
  p:close()
  return m
end

-- seconds since path was last modified (nil if it does not exist)
local function age(path)
  local m = M.mtime(path)
  return m and os.time() - m
end

-- A lock directory of an older version: taken over (removed) when its owner is dead, or has
-- no pid after `grace` seconds (a kill between mkdir and writing the pid). Returns true when
-- removed, or false and the owner's pid (or nil).
local function old_lock_dir(path, grace)
  local pid = tonumber(read_file(path .. "/pid") or "")
  local stale
  if pid then stale = not M.alive(pid)
  else stale = (age(path) or 0) >= grace end
  if stale then os.execute("rm -rf '" .. path:gsub("'", "'\\''") .. "'") return true end
  return false, pid
end

-- Try once to take the lock at path. Returns the lock, or nil and the owner's description
-- ("pid 123 on host"), or raises an error when the lock cannot be created at all.
function M.try_lock(path, opts)
  opts = opts or {}
  local grace = opts.grace or tonumber(os.getenv("OUTLIERLAB_LOCK_GRACE") or "") or 5
  for _ = 1, 5 do   -- retries after taking over an old lock, or when the file was replaced
    if is_dir(path) then
      local removed, pid = old_lock_dir(path, grace)
      if not removed then
        return nil, pid and ("pid " .. pid .. " (a lock directory of an older version)")
          or ("a lock directory without a pid (taken over " .. grace .. " s after it was made)")
      end
    else
      local fd = C.outlierlab_fs_open(path, O_RDWR + O_CREAT + O_CLOEXEC, ffi.cast("int", tonumber("644", 8)))
      if fd < 0 then
        local e = ffi.errno()
        if e ~= EINTR then error(string.format("cannot create the lock file %s: %s", path, strerror(e)), 0) end
      else
        local r = C.outlierlab_fs_flock(fd, LOCK_EX + LOCK_NB)
        local e = ffi.errno()
        if r == 0 then
          -- the holder before us may have removed the name after we opened it: then this lock
          -- is on a file nobody else can see; start again on the current one
          local buf = ffi.new("char[4096]")
          local n = C.outlierlab_fs_readlink("/proc/self/fd/" .. fd, buf, 4095)
          local target = n > 0 and ffi.string(buf, n) or ""
          if target:match(" %(deleted%)$") then
            C.outlierlab_fs_close(fd)
          else
            local who = string.format("%d %s\n", M.pid(), M.hostname())
            C.outlierlab_fs_ftruncate(fd, 0)
            C.outlierlab_fs_write(fd, who, #who)
            return setmetatable({ fd = fd, path = path }, Lock)
          end
        else
          C.outlierlab_fs_close(fd)
          if e ~= EWOULDBLOCK and e ~= EINTR then
            error(string.format("cannot lock %s: %s (the file system does not support flock; put the cache on a local disk)",
                                path, strerror(e)), 0)
          end
          if e == EWOULDBLOCK then
            local pid, host = (read_file(path) or ""):match("^(%d+) (%S+)")
            return nil, pid and ("pid " .. pid .. " on " .. host) or "another process"
          end
        end
      end
    end
  end
  return nil, "another process"
end

-- Take the lock, waiting while another process holds it: opts.poll seconds between tries
-- (default 1), opts.on_wait(owner) called before the first wait, opts.until_fn() -> true stops
-- waiting (returns nil: e.g. the model was finished meanwhile).
function M.lock(path, opts)
  opts = opts or {}
  local waited = false
  while true do
    local lk, owner = M.try_lock(path, opts)
    if lk then return lk end
    if not waited and opts.on_wait then opts.on_wait(owner) end
    waited = true
    os.execute("sleep " .. (opts.poll or 1))
    if opts.until_fn and opts.until_fn() then return nil end
  end
end

-- the names in dir (hidden ones too, not "." and ".."), sorted; {} when dir is not a directory
function M.list_dir(dir)
  local out = {}
  if not is_dir(dir) then return out end
  local p = io.popen("ls -1A -- '" .. dir:gsub("'", "'\\''") .. "' 2>/dev/null")
  for name in p:lines() do out[#out + 1] = name end
  p:close()
  table.sort(out)
  return out
end

-- ---------------------------------------------------------------- temporaries
-- The atomic writers (engine/io_safetensors.c, io_tokens.c, io_netcdf.c, plot.write_atomic)
-- write "<file>.tmp.<pid>" or "<file>.tmp.<pid>.<rank>" and rename it; a writer killed
-- midway leaves it behind. Removes those in dir whose process is gone (all of them with
-- opts.all, for a directory this process holds the lock of). Returns the names removed.
function M.remove_stale_temporaries(dir, opts)
  opts = opts or {}
  local removed = {}
  local me = M.pid()
  for _, name in ipairs(M.list_dir(dir)) do
    local pid = name:match("%.tmp%.(%d+)$") or name:match("%.tmp%.(%d+)%.%d+$")
    pid = tonumber(pid)
    if pid and pid ~= me and (opts.all or not M.alive(pid)) then
      if os.remove(dir .. "/" .. name) then removed[#removed + 1] = name end
    end
  end
  return removed
end

-- ---------------------------------------------------------------- file helpers of the package
-- One implementation for every module: read_file (nil when absent), write_atomic (temporary +
-- rename), mkdir (mkdir -p) and the FNV-1a content hash of cache keys.
M.read_file = read_file
M.mkdir = M.mkdir_p

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

-- write text to path through a temporary and a rename, so that readers never see half a file;
-- the temporary name is unique per process and MPI rank, so that processes writing the same
-- file at once (ranks of a group, concurrent runs) never rename each other's half-written file
local self_pid = ((io.open("/proc/self/stat") or { read = function() return "0" end }):read("*l") or "0"):match("^(%d+)") or "0"
-- A writer killed midway leaves its temporary: the next write into the same directory removes
-- those of processes that no longer run (M.remove_stale_temporaries).
function M.write_atomic(path, text)
  local dir = path:match("^(.*)/[^/]*$")
  if dir and dir ~= "" then
    M.mkdir_p(dir)
    M.remove_stale_temporaries(dir)
  end
  local okd, dist = pcall(require, "outlierlab.util.dist")
  local tmp = path .. ".tmp." .. self_pid .. "." .. (okd and dist.world_rank() or 0)
  local f, err = io.open(tmp, "wb")
  if not f then error("plot: cannot write " .. tmp .. ": " .. tostring(err), 3) end
  f:write(text)
  f:close()
  local ok, rerr = os.rename(tmp, path)
  if not ok then error("plot: cannot rename " .. tmp .. " to " .. path .. ": " .. tostring(rerr), 3) end
end

return M
