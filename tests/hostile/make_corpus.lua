-- tests/hostile/make_corpus.lua — writes the hostile-input corpus of tests/hostile/cases.lua
-- into tests/hostile/safetensors/ and tests/hostile/tokens/ (committed: the fuzzers' seeds too).
--   bin/outlierlab run tests/hostile/make_corpus.lua
local ol = require "outlierlab"
local dir = ol.root .. "/tests/hostile"
os.execute("mkdir -p '" .. dir .. "/safetensors' '" .. dir .. "/tokens'")
local n = 0
for _, c in ipairs(dofile(dir .. "/cases.lua").cases) do
  local f = assert(io.open(dir .. "/" .. c.file, "wb"))
  f:write(c.bytes)
  f:close()
  n = n + 1
end
print(string.format("wrote %d files under %s", n, dir))
