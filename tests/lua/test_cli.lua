-- The command-line contract of bin/outlierlab (issue 2): `run FILE --key=value` overrides the
-- script's config; an unknown key is an error naming it and listing the valid keys; a value
-- of the wrong type is an error; an error prints one line (the traceback for Lua's own errors
-- or with --debug) and exits non-zero; `version`
-- works; a script runs without mpirun (MPI singleton). Also: the README's example is
-- examples/mlp.lua verbatim (docs/guides/write-a-script.md), and it runs and learns.
-- Each case runs the host as a subprocess on a small temporary script.
local t = require "tap"
local root = OUTLIERLAB_ROOT
local exe = root .. "/bin/outlierlab"

local tmpdir = os.tmpname()            -- a unique name; we use it as a directory
os.remove(tmpdir)
assert(os.execute("mkdir -p '" .. tmpdir .. "'") == 0 or true)

local function slurp(path)
  local f = io.open(path, "r")
  if not f then return "" end
  local s = f:read("*a")
  f:close()
  return s
end
local function spit(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- run `bin/outlierlab args...` with no stdin and a clean MPI environment (no mpirun);
-- returns exit code, stdout, stderr
local ncase = 0
local function host(args, env)
  ncase = ncase + 1
  local base = tmpdir .. "/case" .. ncase
  local cmd = string.format(
    "env -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_RANK -u PMIX_RANK %s %s %s </dev/null >%s.out 2>%s.err; echo $? >%s.rc",
    env or "", exe, args, base, base, base)
  os.execute(cmd)
  return tonumber(slurp(base .. ".rc")), slurp(base .. ".out"), slurp(base .. ".err")
end
local function script(name, text)
  local path = tmpdir .. "/" .. name
  spit(path, text)
  return path
end

-- ------------------------------------------------------------------ version
local rc, out, err = host("version")
t.is(rc, 0, "version exits 0")
t.ok(out:match("%d+%.%d+%.%d+"), "version prints a version number", "stdout: " .. out .. "\nstderr: " .. err)

-- ------------------------------------------------------------------ usage
rc, out, err = host("")
t.ok(rc ~= 0, "no command: non-zero exit", "rc " .. tostring(rc))
t.ok(err:find("usage: outlierlab run FILE.lua", 1, true), "no command: usage on stderr", err)
rc, out, err = host("frobnicate")
t.ok(rc ~= 0 and err:find("usage:", 1, true), "unknown command: usage and non-zero exit", err)

-- ------------------------------------------------------------------ config overrides
local cfg_script = script("cfg.lua", [[
local cfg = require("outlierlab.config").get{
  steps = 3, lr = 0.1, name = "base", flag = false, dims = { 1, 2 },
  model = { n_layer = 2, act = "gelu" } }
print(string.format("steps=%s lr=%s name=%s flag=%s dims=%s n_layer=%s act=%s",
  tostring(cfg.steps), tostring(cfg.lr), cfg.name, tostring(cfg.flag),
  table.concat(cfg.dims, ":"), tostring(cfg.model.n_layer), cfg.model.act))
print("types", type(cfg.steps), type(cfg.flag), type(cfg.dims[1]))
]])
rc, out, err = host("run " .. cfg_script)
t.is(rc, 0, "a script runs without mpirun (MPI singleton)")
t.ok(out:find("steps=3 lr=0.1 name=base flag=false dims=1:2 n_layer=2 act=gelu", 1, true),
     "without overrides the script's defaults hold", out .. err)

rc, out, err = host("run " .. cfg_script .. " --steps=7 --lr=2.5e-3 --name=xyz --flag=true --dims=4,5,6 --model.n_layer=4")
t.is(rc, 0, "overrides: exit 0")
t.ok(out:find("steps=7 lr=0.0025 name=xyz flag=true dims=4:5:6 n_layer=4 act=gelu", 1, true),
     "--key=value overrides numbers, strings, booleans, lists and nested keys", out .. err)
t.ok(out:find("types\tnumber\tboolean\tnumber", 1, true), "overridden values have the defaults' types", out)

rc, out, err = host("run " .. cfg_script .. " --flag")
t.ok(rc == 0 and out:find("flag=true", 1, true), "a bare --flag sets a boolean to true", out .. err)

-- unknown key: an error that names it and lists the valid keys
rc, out, err = host("run " .. cfg_script .. " --stepz=9")
t.ok(rc ~= 0, "unknown key: non-zero exit", "rc " .. tostring(rc))
t.ok(err:find("stepz", 1, true), "unknown key: the message names the key", err)
t.ok(err:find("steps", 1, true) and err:find("model.n_layer", 1, true) and err:find("lr", 1, true),
     "unknown key: the message lists the valid keys", err)
t.ok(not out:find("steps=", 1, true), "unknown key: the script does not run on", out)
t.ok(err:find("unknown key --stepz; did you mean --steps? valid keys: ", 1, true), "unknown key: the nearest valid key is suggested", err)
rc, out, err = host("run " .. cfg_script .. " --stpes=9")
t.ok(rc ~= 0 and err:find("did you mean --steps?", 1, true), "a transposition (--stpes) is one edit from --steps", err)
rc, out, err = host("run " .. cfg_script .. " --model.n_layr=9")
t.ok(rc ~= 0 and err:find("did you mean --model.n_layer?", 1, true), "a nested key is suggested whole", err)
rc, out, err = host("run " .. cfg_script .. " --banana=1")
t.ok(rc ~= 0 and err:find("unknown key --banana; valid keys: ", 1, true), "nothing near: no suggestion, the list only", err)

-- the nearest-name rule (outlierlab.config.nearest): at most 2 edits, fewer than half the word
local config = require "outlierlab.config"
t.is(config.distance("stpes", "steps"), 1, "distance: a transposition is one edit")
t.is(config.distance("", "abc"), 3, "distance: from the empty string")
t.is(config.distance("kitten", "sitting"), 3, "distance: kitten/sitting")
t.is(table.concat(config.nearest("defualt", { "quick", "default", "long", "paper" }), ","), "default", "defualt -> default")
t.is(table.concat(config.nearest("so-fg3", { "so-fig3", "so-fig4", "qt-fig3", "so-fig23" }), ","), "so-fig3", "so-fg3 -> so-fig3 only")
t.is(table.concat(config.nearest("so-fig2", { "so-fig1", "so-fig3", "so-fig24" }), ","), "so-fig1,so-fig24,so-fig3", "ties are all named")
t.is(#config.nearest("xy", { "lr", "n" }), 0, "a short word is not 'corrected' into another")
t.is(#config.nearest("zzzzzz", { "steps" }), 0, "nothing within 2 edits: nothing")

-- a mistyped profile and a mistyped experiment id name the nearest valid one
rc, out, err = host("run experiments/so-fig3.lua --profile=defualt")
t.ok(rc ~= 0 and err:find("unknown profile 'defualt'; did you mean default? valid: default, ", 1, true), "PROFILE=defualt: did you mean default?", err)
rc, out, err = host("run experiments/so-fig3.lua --profle=quick")
t.ok(rc ~= 0 and err:find("unknown key --profle; did you mean --profile?", 1, true), "the runner's own options are suggested too", err)
rc, out, err = host("run experiments/so-fg3.lua")
t.ok(rc ~= 0 and err:find("no experiment 'so-fg3' (no file experiments/so-fg3.lua); did you mean so-fig3? make list shows them all", 1, true),
     "an unknown experiment id: did you mean so-fig3?", err)
local mo, mok = t.sh("cd " .. OUTLIERLAB_ROOT .. " && make -s reproduce-so-fg3 PROFILE=quick")
t.ok(not mok and mo:find("did you mean so-fig3?", 1, true), "make reproduce-so-fg3: the same, not make's 'No rule to make target'", mo)

-- wrong types
rc, out, err = host("run " .. cfg_script .. " --steps=many")
t.ok(rc ~= 0 and err:find("--steps=many", 1, true) and err:find("number", 1, true),
     "a non-number for a number key is an error naming key, value and type", err)
rc, out, err = host("run " .. cfg_script .. " --flag=maybe")
t.ok(rc ~= 0 and err:find("flag", 1, true) and err:find("true or false", 1, true),
     "a non-boolean for a boolean key is an error", err)
rc, out, err = host("run " .. cfg_script .. " --dims=1,x")
t.ok(rc ~= 0 and err:find("dims", 1, true), "a list element of the wrong type is an error", err)
rc, out, err = host("run " .. cfg_script .. " --model=3")
t.ok(rc ~= 0 and err:find("model", 1, true), "a table-valued key cannot be overwritten by a scalar", err)

-- a key given to a script that reads no config is not silently dropped
local plain = script("plain.lua", 'print("plain ran")\n')
rc, out, err = host("run " .. plain .. " --steps=3")
t.ok(rc ~= 0 and err:find("steps", 1, true), "an override no config call used is an error naming it", out .. err)

-- ------------------------------------------------------------------ errors
local boom = script("boom.lua", [[
local function inner() error("boom: the inner function failed") end
local function outer() inner() end
outer()
]])
rc, out, err = host("run " .. boom)
t.ok(rc ~= nil and rc ~= 0, "a Lua error exits non-zero", "rc " .. tostring(rc))
t.ok(err:find("boom: the inner function failed", 1, true), "a Lua error prints its message", err)
t.ok(err:find("boom.lua:1: boom", 1, true) and not err:find("traceback", 1, true) and select(2, err:gsub("\n", "")) == 1,
     "an error the script raises is one line with its file and line, no traceback", err)
rc, out, err = host("run " .. boom .. " --debug")
t.ok(rc ~= 0 and err:find("stack traceback", 1, true) and err:find("inner", 1, true) and err:find("outer", 1, true),
     "--debug prints the traceback through the script's functions", err)
local bug = script("bug.lua", "local t = {}\nlocal function f() return t.x.y end\nf()\n")
rc, out, err = host("run " .. bug)
t.ok(rc ~= 0 and err:find("attempt to index", 1, true) and err:find("stack traceback", 1, true) and err:find("bug.lua:2", 1, true),
     "an internal error (Lua's own) keeps its traceback, naming the script's file and line", err)
local tbl = script("tbl.lua", "error({ code = 7 })\n")
rc, out, err = host("run " .. tbl)
t.ok(rc ~= 0 and err:find("code", 1, true) and err:find("7", 1, true) and not err:find("not a string", 1, true),
     "an error value that is not a string is printed, not '(error object is not a string)'", err)

local shape = script("shape.lua", [[
local ol = require "outlierlab"
local ctx = ol.Context()
local a, b = ctx:tensor({2, 3}):fill_(1), ctx:tensor({4, 5}):fill_(1)
local c = a:matmul(b)
]])
rc, out, err = host("run " .. shape)
t.ok(rc ~= 0 and err:find("(2,3)", 1, true) and err:find("(4,5)", 1, true) and err:find("matmul", 1, true),
     "an engine error reaches the command line with the op and the shapes", err)

local syntax = script("syntax.lua", "local x = = 1\n")
rc, out, err = host("run " .. syntax)
t.ok(rc ~= 0 and err:find("syntax.lua", 1, true), "a syntax error names the file", err)

rc, out, err = host("run " .. tmpdir .. "/does-not-exist.lua")
t.ok(rc ~= 0 and err:find("does-not-exist.lua", 1, true), "a missing file is an error naming it", err)

-- ------------------------------------------------------------------ script arguments and status
local args = script("args.lua", [[
local a, b = ...
print("pos", a, b, "arg0", arg[0] ~= nil)
return 3
]])
rc, out, err = host("run " .. args .. " one two")
t.ok(out:find("pos\tone\ttwo\targ0\ttrue", 1, true), "positional arguments reach the script as ...", out .. err)
t.is(rc, 3, "a script that returns a number sets the exit status")

-- ------------------------------------------------------------------ MPI singleton
local mpi = script("mpi.lua", [[
local ol = require "outlierlab"
local ctx = ol.Context()
local x = ctx:tensor({2, 2}):fill_(2)
print("singleton", x:sum():sum():item())
]])
rc, out, err = host("run " .. mpi)
t.ok(rc == 0 and out:find("singleton\t8", 1, true), "an engine script runs as one process without mpirun", out .. err)
rc, out, err = host("run " .. mpi, "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 1")
t.ok(rc == 0 and out:find("singleton\t8", 1, true), "the same script runs under mpirun -np 1", out .. err)

-- ------------------------------------------------------------------ the README example
local example = slurp(root .. "/examples/mlp.lua")
local readme = slurp(root .. "/docs/guides/write-a-script.md")
t.ok(#example > 0 and readme:find(example, 1, true), "docs/guides/write-a-script.md quotes examples/mlp.lua verbatim",
     "update the guide's example block from examples/mlp.lua")
rc, out, err = host("run " .. root .. "/examples/mlp.lua --steps=300")
local first, last = out:match("mse ([%d%.]+) %-> ([%d%.]+)")
first, last = tonumber(first), tonumber(last)
t.ok(rc == 0 and first and last, "the README example runs", out .. err)
t.ok(first and last and last < 0.01 and last < first / 20,
     "the README example learns: mse falls below 0.01 and by 20x in 300 steps", out)

os.execute("rm -rf '" .. tmpdir .. "'")
return t.done()
