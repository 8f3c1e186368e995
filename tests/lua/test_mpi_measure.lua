-- Distributed analysis: 2 ranks taking disjoint sequences and merging their accumulators
-- (dist.allmerge) give the numbers of 1 rank: counts, maxima and top-k records exactly;
-- moments, kurtosis and averages (double sums re-associated across ranks) within 1e-12
-- relative.
local t = require "tap"
local root = OUTLIERLAB_ROOT
local run = t.sh
local env = "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
local exe = root .. "/bin/outlierlab run " .. root .. "/tests/mpi/dist_analysis.lua"
local one, ok1 = run(env .. exe)
local two, ok2 = run(env .. "mpirun --oversubscribe -np 2 " .. exe)
t.ok(ok1, "1 rank ran", one)
t.ok(ok2, "2 ranks ran", two)
local function lines(s) local l = {} for x in s:gmatch("[^\n]+") do if not x:match("^exit%-status") then l[#l + 1] = x end end return l end
local l1, l2 = lines(one), lines(two)
t.ok(#l1 > 4 and #l1 == #l2, "same number of result lines", #l1 .. " vs " .. #l2)
local exact, worst = true, 0
for i = 1, math.min(#l1, #l2) do
  local a, b = {}, {}
  for w in l1[i]:gmatch("%S+") do a[#a + 1] = w end
  for w in l2[i]:gmatch("%S+") do b[#b + 1] = w end
  for j = 1, math.max(#a, #b) do
    local x, y = tonumber(a[j]), tonumber(b[j])
    if x and y then
      if a[j]:match("^%-?%d+$") then exact = exact and x == y   -- counts, indices
      else
        local rel = math.abs(x - y) / math.max(math.abs(x), 1e-300)
        if l1[i]:match("^top") then exact = exact and x == y end   -- top-k records are exact
        if rel > worst then worst = rel end
      end
    elseif a[j] ~= b[j] then exact = false end
  end
end
t.ok(exact, "counts, maxima and top-k records identical for 1 and 2 ranks", "1 rank:\n" .. one .. "\n2 ranks:\n" .. two)
t.ok(worst <= 1e-12, string.format("moments and averages within 1e-12 relative (worst %.3g)", worst))
return t.done()
