-- tap — Test Anything Protocol output for Lua test files, read by prove (make test). The test
-- harness, not part of the package: tests/exec.sh puts tests/lua/lib on package.path.
--   local t = require "tap"
--   t.ok(cond, "name"); t.is(got, want, "name"); t.near(got, want, tol, "name")
--   t.throws(fn, "pattern", "name"); t.skip("reason", "name"); t.done()
local M = { n = 0, failed = 0 }

local function report(ok, name, diag)
  M.n = M.n + 1
  io.write(ok and "ok " or "not ok ", M.n, " - ", (name or ""):gsub("\n", " "), "\n")
  if not ok then
    M.failed = M.failed + 1
    if diag then io.write("# ", tostring(diag):gsub("\n", "\n# "), "\n") end
  end
  io.flush()
  return ok
end

function M.ok(cond, name, diag) return report(not not cond, name, diag) end
function M.is(got, want, name)
  return report(got == want, name, string.format("got %s, want %s", tostring(got), tostring(want)))
end
-- |got - want| <= tol (absolute), with the numbers in the diagnostic
function M.near(got, want, tol, name)
  local ok = type(got) == "number" and math.abs(got - want) <= tol
  return report(ok, name, string.format("got %.9g, want %.9g (tol %g)", tonumber(got) or 0 / 0, want, tol))
end
-- fn must raise an error whose message contains pattern (plain text)
function M.throws(fn, pattern, name)
  local ok, err = pcall(fn)
  if ok then return report(false, name, "no error raised") end
  local msg = tostring(err)
  return report(msg:find(pattern, 1, true) ~= nil, name, "error was: " .. msg)
end
-- a check that cannot run here (a tool or data set missing): "ok N - name # SKIP reason", which
-- prove counts as skipped, not passed
function M.skip(reason, name)
  M.n = M.n + 1
  io.write("ok ", M.n, " - ", (name or ""):gsub("\n", " "), " # SKIP ", (tostring(reason):gsub("\n", " ")), "\n")
  io.flush()
  return true
end
function M.lives(fn, name)
  local ok, err = pcall(fn)
  return report(ok, name, err)
end
-- Run a shell command (stderr folded into stdout): returns its output, whether it exited 0,
-- and its exit status. For tests that run bin/outlierlab, mpirun or ncdump as subprocesses.
function M.sh(cmd)
  local p = io.popen("( " .. cmd .. " ) 2>&1; echo \"__exit=$?\"")
  local out = p:read("*a")
  p:close()
  local code = tonumber(out:match("__exit=(%d+)%s*$"))
  return (out:gsub("__exit=%d+%s*$", "")), code == 0, code
end

-- The whole content of a file, or nil (outlierlab.util.fs.read_file).
M.slurp = require("outlierlab.util.fs").read_file

function M.diag(msg) io.write("# ", tostring(msg):gsub("\n", "\n# "), "\n") end
function M.done()
  io.write("1..", M.n, "\n")
  io.flush()
  return M.failed == 0 and 0 or 1
end

return M
