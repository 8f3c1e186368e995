-- test_pretrained_run_record — what a run on an imported model records about it (issue 52):
--   the summary names the model's own family, not the project's model it runs as ("this mistral
--   model", not "this llama model"), and run.json's settings are the analysis settings the
--   summary lists — none of the training recipe, since nothing was trained.
local t = require "tap"
local ol = require "outlierlab"
local json = require "outlierlab.util.json"
local tiny = dofile(ol.root .. "/tests/lua/lib/tiny_llama_dir.lua")

local root = os.tmpname()
os.remove(root)
os.execute("mkdir -p " .. root)
local function write(path, s) local f = assert(io.open(path, "wb")) f:write(s) f:close() end

-- a small Mistral: the project's llama exported, config.json's model_type changed (the same names)
local dir = tiny(root .. "/tiny-mistral", { config = function(c) c.model_type, c.architectures = "mistral", { "MistralForCausalLM" } end })
local lines = {}
for i = 1, 200 do lines[i] = "And it came to pass, in the " .. (100 + i) .. "th year, that they went." end
write(root .. "/text.txt", table.concat(lines, "\n"))

local out, ok = t.sh(string.format("bin/outlierlab run experiments/so-fig3.lua --profile=quick --model=%s --text=%s --out=%s/results --cache=%s/cache",
  dir, root .. "/text.txt", root, root))
t.ok(ok, "so-fig3 runs on the imported Mistral", out)
local rdir = root .. "/results/so-fig3/tiny-mistral-quick"
local summary = t.slurp(rdir .. "/summary.md") or ""
t.ok(summary:find("(no number in the paper for this mistral model)", 1, true) ~= nil,
  "the summary names the model's family (mistral), not the llama model it runs as", summary:match("[^\n]*no number[^\n]*"))
t.ok(not summary:find("this llama model", 1, true), "and never 'this llama model'")

local rec = json.decode(t.slurp(rdir .. "/run.json") or "{}")
-- summary.md's Settings table (runner/report) against run.json's settings, row by row
local rows, same = {}, true
for k, v in ((summary:match("\n## Settings\n(.-)\n## Run") or "")):gmatch("\n| ([^|\n]-) | ([^\n]-) |") do
  if k ~= "setting" and k ~= "---" then rows[k] = v end
end
local human = require("outlierlab.runner.report").human_value
local n = 0
for k, v in pairs(rec.settings or {}) do n = n + 1 same = same and rows[k] == human(v) end
for _ in pairs(rows) do n = n - 1 end
t.ok(rec.settings and same and n == 0, "run.json's settings are the analysis settings summary.md lists",
  string.format("run.json %s; summary %s", json.canonical(rec.settings or {}), json.canonical(rows)))
local train = {}
for k in pairs(require("outlierlab.runner.run").training_keys()) do
  if rec.settings and rec.settings[k] ~= nil and k ~= "seq_len" and k ~= "batch" and k ~= "eval_batches" and k ~= "seed" then train[#train + 1] = k end
end
table.sort(train)
t.is(table.concat(train, ", "), "", "run.json lists no training setting (nothing was trained)")
t.ok(rec.settings and rec.settings.seq_len ~= nil, "but the analysis' own settings (seq_len)")

os.execute("rm -rf " .. root)
return t.done()
