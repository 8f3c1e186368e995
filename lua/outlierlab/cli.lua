-- cli — the command line of bin/outlierlab.
--   outlierlab run FILE.lua [--key=value ...]   run a script (an experiment file runs its stages)
--   outlierlab version
local M = {}

local usage = [[
usage: outlierlab run FILE.lua [--key=value ...]
       outlierlab list [--markdown]  experiments with their status (--markdown: the table of docs/EXPERIMENTS.md)
       outlierlab history MODEL_DIR  training curves of a cached model: history.nc and history.png
       outlierlab gallery [--out=DIR] results/index.html and index.md from every run's run.json
       outlierlab version
A script reads its settings with require("outlierlab.config").get{...}; --key=value overrides
them (nested keys with dots). An experiment file (one that returns a table with stages) is
run by the experiment runner: --profile=quick|default|paper selects its profile.]]

function M.main(argv)
  M.argv = argv   -- the full command line, for result files' history attribute
  local cmd = argv[1]
  if cmd == "list" then   -- experiments/*.lua with their status (make list)
    if argv[2] == "--markdown" then return require("outlierlab.experiment").print_markdown() end
    return require("outlierlab.experiment").print_list()
  end
  if cmd == "history" then return require("outlierlab.history").main(argv) end
  if cmd == "gallery" then return require("outlierlab.gallery").main(argv) end
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
  if not chunk then error("cannot load " .. file .. ": " .. tostring(err), 0) end
  -- the script sees its own arguments as ... and in the global arg (arg[0] = the file)
  local sarg = { [0] = file }
  for i, a in ipairs(rest) do sarg[i] = a end
  arg = sarg
  local result = chunk(unpack(positional))
  if type(result) == "table" and result.stages then
    -- a run stopped on purpose (e.g. checkpointed before a time limit) raises
    -- { exit_status =, message = }: say why and exit with that status, not a traceback
    local ok, e = pcall(require("outlierlab.experiment").run_file, result, file)
    if not ok then
      if type(e) == "table" and e.exit_status then
        if require("outlierlab.dist").world_rank() == 0 then io.stderr:write("outlierlab: ", tostring(e.message), "\n") end
        return e.exit_status
      end
      error(e, 0)
    end
  end
  local left = config.unconsumed()
  if #left > 0 then
    error("config: unknown key(s) for " .. file .. ": --" .. table.concat(left, ", --"), 0)
  end
  return type(result) == "number" and result or 0
end

return M
