-- cli — the command line of bin/outlierlab.
--   outlierlab run FILE.lua [--key=value ...]   run a script (an experiment file runs its stages)
--   outlierlab list | history | gallery | report | version   (the usage text below)
local M = {}

local usage = [[
usage: outlierlab run FILE.lua [--key=value ...] [--debug]
       outlierlab list [--markdown]  experiments with their status (--markdown: the table of docs/reference/experiments.md)
       outlierlab history MODEL_DIR  training curves of a cached model: history.nc and history.png
       outlierlab gallery [--out=DIR] results/index.html and index.md from every run's run.json
       outlierlab report MODEL [--text=FILE] [--key=value ...]  the outlier report of one model:
                                     results/report/<model>/ (report.nc, summary.md, figures, index.html)
       outlierlab version
A script reads its settings with require("outlierlab.config").get{...}; --key=value overrides
them (nested keys with dots). An experiment file (one that returns a table with stages) is
run by the experiment runner: --profile=quick|default|long|paper selects its profile.
An error prints one line; --debug adds the Lua traceback.]]

-- ---------------------------------------------------------------- error messages
-- A user error (a bad key, value, path or file) is one line: "outlierlab: <message>", without
-- the position inside the package that raised it. An internal error (Lua's own: "attempt to
-- index a nil value", "bad argument #1", ...) keeps its traceback, which names the script's
-- file and line; --debug keeps the traceback for every error. engine/host/main.c calls
-- format_error from its message handler, while the failing stack is still there.
local internal_patterns = {
  "attempt to ", "bad argument #", "stack overflow", "not enough memory", "table index is ",
  "invalid key to 'next'", "'for' initial value", "'for' limit", "'for' step", "loop or previous error",
  "module '[^']*' not found", "cannot convert ", "invalid C type", "error in error handling",
  "wrong number of arguments", "cannot resume ", "string length overflow", "invalid value %(",
}
M.debug = false
local formatted = {}   -- error string -> its final text (formatted where it was raised)

local function is_internal(msg)
  for _, p in ipairs(internal_patterns) do if msg:find(p) then return true end end
  return false
end

-- the text of any error value: strings as they are, a table's message field, else its value
local function value_text(e)
  if type(e) == "string" then return e end
  if type(e) == "table" and e.message ~= nil then return tostring(e.message) end
  if type(e) == "table" then
    local ok, s = pcall(function() return require("outlierlab.util.serialize").serialize(e) end)
    if ok and type(s) == "string" then return "error value " .. (s:gsub("^return ", ""):gsub("%s+$", "")) end
  end
  return "error value " .. tostring(e) .. " (a " .. type(e) .. ")"
end

function M.format_error(e)
  if type(e) == "string" and formatted[e] then return formatted[e] end
  local msg = value_text(e)
  local internal = type(e) ~= "string" and type(e) ~= "table" or is_internal(msg)
  local text
  if M.debug or internal then
    text = debug.traceback(msg, 3)
  else
    -- drop "…/lua/outlierlab/x.lua:12: " prefixes: the package's own position helps no user
    local pkg = (OUTLIERLAB_ROOT or "") .. "/lua/outlierlab/"
    local prev
    repeat
      prev = msg
      local pos = msg:match("^(%S-%.lua:%d+: )")
      if pos and (pos:sub(1, #pkg) == pkg or pos:match("^lua/outlierlab/")) then msg = msg:sub(#pos + 1) end
    until msg == prev
    text = msg
  end
  if type(e) == "string" then formatted[e] = text end
  return text
end

function M.main(argv)
  M.argv = argv   -- the full command line, for result files' history attribute
  require("outlierlab.config").argv = argv   -- where the layers below read it (figure/netcdf)
  for i = #argv, 1, -1 do
    if argv[i] == "--debug" then M.debug = true table.remove(argv, i) end
  end
  local cmd = argv[1]
  if cmd == "list" then   -- experiments/*.lua with their status (make list)
    if argv[2] == "--markdown" then return require("outlierlab.runner.catalogue").print_markdown() end
    return require("outlierlab.runner.catalogue").print_list()
  end
  if cmd == "history" then return require("outlierlab.runner.history").main(argv) end
  if cmd == "gallery" then return require("outlierlab.runner.gallery").main(argv) end
  if cmd == "report" then return require("outlierlab.report").main(argv) end
  if cmd == "version" then
    print(require("outlierlab").version())
    return 0
  end
  if cmd ~= "run" or not argv[2] then
    io.stderr:write(usage, "\n")
    return 2
  end
  local file = argv[2]
  local config = require "outlierlab.config"
  local rest = {}
  for i = 3, #argv do rest[#rest + 1] = argv[i] end
  local positional = config.set_args(rest)
  local chunk, err = loadfile(file)
  if not chunk then
    -- a mistyped experiment (make reproduce-so-fg3): name the nearest ones
    local dir, id = file:match("^(.-)/?([^/]+)%.lua$")
    local fs = require "outlierlab.util.fs"
    if not fs.read_file(file) and dir and dir:match("experiments$") then
      local ids = {}
      for _, name in ipairs(fs.list_dir(dir)) do
        ids[#ids + 1] = name:match("^(.+)%.lua$")
      end
      error(string.format("no experiment '%s' (no file %s)%smake list shows them all", id, file,
                          config.did_you_mean(id, ids)), 0)
    end
    error("cannot load " .. file .. ": " .. tostring(err), 0)
  end
  -- the script sees its own arguments as ... and in the global arg (arg[0] = the file)
  local sarg = { [0] = file }
  for i, a in ipairs(rest) do sarg[i] = a end
  arg = sarg
  local result = chunk(unpack(positional))
  if type(result) == "table" and result.stages then
    -- a run stopped on purpose (e.g. checkpointed before a time limit) raises
    -- { exit_status =, message = }: say why and exit with that status, not a traceback
    -- (xpcall: the message is formatted where it was raised, with that traceback)
    local ok, e = xpcall(require("outlierlab.runner.run").run_file, function(e)
      if not (type(e) == "table" and e.exit_status) then M.format_error(e) end
      return e
    end, result, file)
    if not ok then
      if type(e) == "table" and e.exit_status then
        if require("outlierlab.util.dist").world_rank() == 0 then io.stderr:write("outlierlab: ", tostring(e.message), "\n") end
        return e.exit_status
      end
      error(e, 0)
    end
  end
  local left = config.unconsumed()
  if #left > 0 then
    local known = config.known_keys()
    for i, k in ipairs(left) do
      local near = config.nearest(k, known)
      left[i] = "--" .. k .. (#near > 0 and (" (did you mean --" .. table.concat(near, " or --") .. "?)") or "")
    end
    error("config: unknown key(s) for " .. file .. ": " .. table.concat(left, ", ") ..
          (#known > 0 and ("; valid keys: " .. table.concat(known, ", ")) or ""), 0)
  end
  return type(result) == "number" and result or 0
end

return M
