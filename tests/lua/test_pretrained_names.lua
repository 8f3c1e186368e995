-- test_pretrained_names — what an analysis of an imported model writes says which model it is
-- and what was run (issue 22, defect 8): the figure's title names the model; summary.md's
-- Settings line gives the model, the text and the analysis settings, and no training settings
-- (data = organism, steps, lr …) since nothing was trained.
local t = require "tap"
local ol = require "outlierlab"
local hf = require "outlierlab.pretrained.hf"
local json = require "outlierlab.util.json"
local models = require "outlierlab.models"

local root = os.tmpname()
os.remove(root)
os.execute("mkdir -p " .. root)
local function write(path, s) local f = assert(io.open(path, "wb")) f:write(s) f:close() end

local ctx = ol.Context{ params = 2 * 1024 * 1024, seed = 3 }
local m = models.build(ctx, models.preset("llama-quick", { n_kv_head = 1 }))
local dir = root .. "/my-llama-7b"
hf.export(dir, ctx, m, { special = { bos = 1, eos = 2 } })
local vocab = { ["<unk>"] = 0, ["<s>"] = 1, ["</s>"] = 2 }
for b = 0, 252 do vocab[string.format("<0x%02X>", b)] = 3 + b end
write(dir .. "/tokenizer.json", json.encode({ model = { type = "BPE", byte_fallback = true, vocab = vocab, merges = {} },
  normalizer = { type = "Sequence", normalizers = { { type = "Prepend", prepend = "▁" }, { type = "Replace", pattern = { String = " " }, content = "▁" } } } }))
write(dir .. "/tokenizer_config.json", json.encode({ bos_token = "<s>" }))
local lines = {}
for i = 1, 300 do lines[i] = "And it came to pass, in the " .. i .. "th year, that they went." end
write(root .. "/text.txt", table.concat(lines, "\n"))

for _, id in ipairs { "so-fig3", "so-fig6" } do
  local out, ok = t.sh(string.format("bin/outlierlab run experiments/%s.lua --profile=quick --model=%s --text=%s --out=%s/results --cache=%s/cache",
    id, dir, root .. "/text.txt", root, root))
  t.ok(ok, id .. " runs on the imported model", out)
  local rd = root .. "/results/" .. id .. "/my-llama-7b-quick/"
  local gp = t.slurp(rd .. id .. ".panels.gp") or ""
  local title = gp:match("fig_title = ([^\n]*)") or ""
  t.ok(title:find("my-llama-7b", 1, true), id .. ": the figure's title names the model", title)
  local summary = t.slurp(rd .. "summary.md") or ""
  local settings = summary:match("\n## Settings\n\n(.-)\n## Run") or ""
  t.ok(settings:find("my-llama-7b", 1, true) and settings:find("text.txt", 1, true) and settings:find("nothing trained", 1, true),
       id .. ": the Settings section names the model and the text and says nothing was trained", settings)
  local bad
  for _, k in ipairs { "data", "steps", "lr", "preset", "warmup", "n_tokens", "organism" } do
    if settings:find("| " .. k .. " |", 1, true) then bad = k break end
  end
  t.ok(not bad and settings:find("| seq_len | 32 |", 1, true) and settings:find("| eval_batches | 2 |", 1, true),
       id .. ": the Settings table lists the analysis settings and no training setting", (bad or "") .. " in " .. settings)
end

if os.getenv("KEEP") then print("# kept " .. root) else os.execute("rm -rf " .. root) end
return t.done()
