-- test_netcdf — the NetCDF writer (engine/io_netcdf.c through lua/outlierlab/figure/netcdf.lua):
-- CF/ACDD attributes read back with ncdump, data round-trip, atomic write, clear errors,
-- SOURCE_DATE_EPOCH honoured, and (when Debian's python3-xarray is installed) an
-- independent read with xarray that must raise no warnings.
local t = require "tap"
local results = require "outlierlab.figure.netcdf"

local sh = t.sh

local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir)
local path = dir .. "/run.nc"

local cfg = { model = { n_layer = 2, d_model = 8 }, steps = 3, name = "a \"quoted\" name" }
local R = results.new(path, { title = "test file", summary = "a tiny result file for the test",
                              id = "unit-test", profile = "quick", seed = 42, config = cfg,
                              command = "bin/outlierlab run tests/lua/test_netcdf.lua" })
R:dim("layer", 2, { 2, 3 }, { long_name = "transformer layer (0-based)" })
R:dim("channel", 3)
R:dim("step", 2, { 0.5, 10 }, { long_name = "training step", units = "1" })
R:var("count", { "layer", "channel" }, { { 1, 2, 3 }, { 4, 5, 6 } },
      { long_name = "outlier count", units = "1", type = "int" })
R:var("value", { "layer" }, { 0.25, -1.5 }, { long_name = "some value", units = "1", type = "double",
                                            comment = "exact in binary" })
R:var("loss", { "step" }, { 2.5, 1.25 }, { long_name = "training loss", units = "nat" })
R:var("scalar", {}, 7, { long_name = "a scalar", units = "1" })

t.throws(function() R:var("bad", { "layer" }, { 1 }, { long_name = "x", units = "1" }) end,
         "1 values for dims (layer) of 2 elements", "wrong element count is an error naming the var")
t.throws(function() R:var("bad2", { "nope" }, { 1 }, { long_name = "x", units = "1" }) end,
         "unknown dimension 'nope'", "unknown dim is an error")
t.throws(function() R:var("bad3", { "layer" }, { 1, 2 }, { long_name = "x" }) end,
         "units is required", "missing units is an error")
t.throws(function() R:var("bad4", { "layer" }, { 1.5, 2 }, { long_name = "x", units = "1", type = "int" }) end,
         "is not a 32-bit integer", "non-integer in an int var is an error")
t.throws(function() results.new(dir .. "/x.nc", { title = "t" }) end, "meta.summary is required",
         "summary is required")

t.ok(R:close() == path, "close returns the path")
t.ok(io.open(path, "rb") ~= nil, "file exists under its final name")
local leftovers = sh("ls " .. dir)
t.ok(not leftovers:find("tmp", 1, true), "no temporary file left behind", leftovers)
t.throws(function() R:close() end, "already closed", "closing twice is an error")

local hdr, ok = sh("ncdump -h " .. path)
t.ok(ok, "ncdump -h reads the file", hdr)
for _, want in ipairs({ ':Conventions = "CF-1.10, ACDD-1.3"', ':title = "test file"',
                        ':summary = "a tiny result file for the test"', ':experiment_id = "unit-test"',
                        ':profile = "quick"', ":seed = 42", ":mpi_ranks = 1", ':source = "outlierlab ',
                        ':blas_core = "' .. results.machine().blas_core .. '"', ":cpu = ", ":threads = ",
                        ":history = ", "bin/outlierlab run tests/lua/test_netcdf.lua", ":date_created = ",
                        "int layer(layer)", "int channel(channel)", "double step(step)",
                        "int count(layer, channel)", "float loss(step)", "double value(layer)",
                        'count:long_name = "outlier count"', 'loss:units = "nat"',
                        'value:comment = "exact in binary"', "float scalar" }) do
  t.ok(hdr:find(want, 1, true), "header has " .. want, hdr)
end
t.ok(hdr:find(':date_created = "%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ"'), "date_created is ISO 8601 UTC")
t.ok(hdr:find('"model":{"d_model":8,"n_layer":2}', 1, true) or hdr:find('\\"model\\":{\\"d_model\\":8,\\"n_layer\\":2}', 1, true),
     "config stored as canonical JSON (sorted keys)", hdr)

-- ACDD recommended attributes: present and non-empty in every file
for _, name in ipairs({ "license", "creator_name", "institution", "project", "processing_level" }) do
  t.ok(hdr:find(":" .. name .. ' = "[^"]+"'), "ACDD attribute " .. name, hdr)
end
t.ok(hdr:find(':project = "outlierlab', 1, true), "project names outlierlab")

local fmt = sh("ncdump -hs " .. path)
t.ok(fmt:find('_Format = "netCDF-4"', 1, true), "NetCDF-4 format", fmt)
t.ok(fmt:find("count:_DeflateLevel = 4", 1, true), "deflate on", fmt)

local body = sh("ncdump -v count,value,layer " .. path)
t.ok(body:find("count =%s+1, 2, 3,%s+4, 5, 6"), "int data round-trip (row-major)", body)
t.ok(body:find("value = 0.25, %-1.5"), "double data round-trip", body)
t.ok(body:find("layer = 2, 3"), "coordinate values", body)

-- canonical JSON is stable and sorted
t.is(require("outlierlab.util.json").canonical({ b = 1, a = { 1, 2.5, "x" }, c = true }), '{"a":[1,2.5,"x"],"b":1,"c":true}',
     "canonical_json sorts keys and keeps lists")

-- SOURCE_DATE_EPOCH: a child process writing the same file twice gives identical bytes
local script = dir .. "/w.lua"
local f = io.open(script, "w")
f:write([[
local results = require "outlierlab.figure.netcdf"
local R = results.new(arg[1], { title = "t", summary = "s", id = "x", config = { a = 1 }, command = "cmd" })
R:dim("layer", 2)
R:var("v", { "layer" }, { 1, 2 }, { long_name = "v", units = "1" })
R:close()
]])
f:close()
local env = "SOURCE_DATE_EPOCH=1700000000 "
sh(env .. "bin/outlierlab run " .. script .. " " .. dir .. "/a.nc")
local out2 = sh(env .. "bin/outlierlab run " .. script .. " " .. dir .. "/b.nc")
local h1 = sh("ncdump -h " .. dir .. "/a.nc")
t.ok(h1:find('date_created = "2023-11-14T22:13:20Z"', 1, true), "SOURCE_DATE_EPOCH sets date_created", h1 .. out2)
local d1 = sh("ncdump " .. dir .. "/a.nc | tail -n +2")
local d2 = sh("ncdump " .. dir .. "/b.nc | tail -n +2")
t.ok(d1 == d2 and #d1 > 100, "same inputs + SOURCE_DATE_EPOCH give the same content")
-- the site sets its institution and license through the environment
sh("OUTLIERLAB_INSTITUTION='Test Lab' OUTLIERLAB_LICENSE=CC-BY-4.0 bin/outlierlab run " .. script .. " " .. dir .. "/c.nc")
local h3 = sh("ncdump -h " .. dir .. "/c.nc")
t.ok(h3:find(':institution = "Test Lab"', 1, true) and h3:find(':license = "CC-BY-4.0"', 1, true),
     "OUTLIERLAB_INSTITUTION and OUTLIERLAB_LICENSE set the ACDD attributes", h3)

-- independent reader: xarray (Debian's python3-xarray, /usr/bin/python3), warnings as errors
local py = "/usr/bin/python3"
local _, have = sh(py .. " -c 'import xarray, netCDF4'")
if have then
  local code = [[
import sys, warnings
warnings.simplefilter("error")
import xarray as xr
ds = xr.open_dataset(sys.argv[1])
assert ds["count"].dims == ("layer", "channel"), ds["count"].dims
assert int(ds["count"].sel(layer=3, channel=2)) == 6
assert ds.attrs["Conventions"] == "CF-1.10, ACDD-1.3"
for a in ("license", "creator_name", "institution", "project", "processing_level"):
    assert ds.attrs.get(a), a
for v in ds.variables:
    assert "long_name" in ds[v].attrs and "units" in ds[v].attrs, v
print("xarray ok")
]]
  local pf = io.open(dir .. "/check.py", "w")
  pf:write(code)
  pf:close()
  local out, pok = sh(py .. " " .. dir .. "/check.py " .. path)
  t.ok(pok and out:find("xarray ok", 1, true), "xarray opens the file without warnings", out)
else
  t.skip("python3-xarray not installed")
end

os.execute("rm -rf " .. dir)
return t.done()
