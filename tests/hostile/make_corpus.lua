-- tests/hostile/make_corpus.lua — writes the hostile-input corpus of tests/hostile/cases.lua
-- into tests/hostile/safetensors/ and tests/hostile/tokens/, and of llama2c_cases.lua into
-- tests/hostile/llama2c/ (committed: the fuzzers' seeds too).
--   bin/outlierlab run tests/hostile/make_corpus.lua
local ol = require "outlierlab"
local dir = ol.root .. "/tests/hostile"
os.execute("mkdir -p '" .. dir .. "/safetensors' '" .. dir .. "/tokens'")
local n = 0
os.execute("mkdir -p '" .. dir .. "/llama2c'")
local all = dofile(dir .. "/cases.lua").cases
for _, c in ipairs(dofile(dir .. "/llama2c_cases.lua").cases) do all[#all + 1] = c end
for _, c in ipairs(all) do
  local f = assert(io.open(dir .. "/" .. c.file, "wb"))
  f:write(c.bytes)
  f:close()
  n = n + 1
end
print(string.format("wrote %d files under %s", n, dir))
