-- data/bounds — the sizes a batch and a profile's settings must have, checked before anything
-- starts (the pre-flight checks of outlierlab.train.bounds that need no model and no trainer:
-- every batcher calls check_batch; train.bounds re-exports all of this).
local M = {}

-- ---------------------------------------------------------------- batch kinds
-- The least sequence length each kind of batch can be built from (what its batcher writes).
M.kinds = {
  lm = { min_T = 1, why = "an LM row is [BOS] and T - 1 tokens, its targets the next T tokens" },
  mlm = { min_T = 3, why = "an MLM row is [CLS], at least one token to mask, [SEP]" },
  image = { why = "a batch of images" },
}

function M.register_kind(name, def)
  if type(name) ~= "string" or type(def) ~= "table" then error("bounds.register_kind(name, {min_T =, why =})", 2) end
  M.kinds[name] = def
end

local function fail(msg) error("settings: " .. msg, 0) end

local function finite(x) return type(x) == "number" and x == x and x ~= math.huge and x ~= -math.huge end

local function int_at_least(v, lo, what, hint)
  if not finite(v) or v ~= math.floor(v) or v < lo then
    fail(string.format("%s = %s: must be an integer >= %d%s", what, tostring(v), lo, hint and (" (" .. hint .. ")") or ""))
  end
end

-- The settings of a profile (run.cfg), before any stage runs, by the names the experiments
-- share: batch, steps, seq_len, n_tokens, vocab_size, eval_batches and <x>_batch, <x>_steps,
-- <x>_T are integers >= 1; cooldown and eval_rows (and <x>_ of them) integers >= 0; lr and <x>_lr
-- are > 0 (min_lr >= 0); warmup and <x>_warmup are integers in [0, the matching steps]. Every
-- number must be finite.
local size_keys = { batch = true, steps = true, seq_len = true, n_tokens = true, vocab_size = true, eval_batches = true }
function M.check_profile(cfg)
  if type(cfg) ~= "table" then return end
  local keys = {}
  for k in pairs(cfg) do if type(k) == "string" then keys[#keys + 1] = k end end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local v = cfg[k]
    if type(v) == "number" then
      local opt = "--" .. k
      if not finite(v) then fail(string.format("%s = %s: must be a finite number", opt, tostring(v))) end
      if size_keys[k] or k:match("_batch$") or k:match("_steps$") or k:match("_T$") then
        int_at_least(v, 1, opt)
      elseif k == "cooldown" or k:match("_cooldown$") or k == "eval_rows" or k:match("_eval_rows$") then
        int_at_least(v, 0, opt)
      elseif k == "min_lr" then
        if v < 0 then fail(string.format("%s = %s: must be >= 0", opt, tostring(v))) end
      elseif k == "lr" or k:match("_lr$") then
        if not (v > 0) then fail(string.format("%s = %s: the learning rate must be > 0", opt, tostring(v))) end
      elseif k == "warmup" or k:match("_warmup$") then
        int_at_least(v, 0, opt)
        local steps = cfg[k:gsub("warmup$", "steps")]
        if type(steps) == "number" and v > steps then
          fail(string.format("%s = %d is more than --%s = %d (the run would end inside its warmup)", opt, v,
                             k:gsub("warmup$", "steps"), steps))
        end
      end
    end
  end
end

-- batch = { B =, T =, kind = } (T not needed for images)
function M.check_batch(b)
  if type(b) ~= "table" then fail("the batch settings must be a table { B =, T =, kind = }") end
  local kind = b.kind or "lm"
  local k = M.kinds[kind]
  if not k then
    local names = {}
    for n in pairs(M.kinds) do names[#names + 1] = n end
    table.sort(names)
    fail(string.format("unknown batch kind '%s'; known: %s (bounds.register_kind adds one)", tostring(kind), table.concat(names, ", ")))
  end
  int_at_least(b.B, 1, "batch size B", "rows per batch")
  if k.min_T then int_at_least(b.T, k.min_T, "sequence length T", k.why) end
end

-- data = { n_tokens = } of the generated corpus: both splits (90 % / 10 %) must hold a window
-- of T + 1 tokens (what data.batcher cuts)
function M.check_data(data, b)
  if type(data) ~= "table" or data.n_tokens == nil or not b.T then return end
  int_at_least(data.n_tokens, 1, "corpus size n_tokens")
  local n, T = data.n_tokens, b.T
  local cut = math.floor(n * 0.9)
  if cut - T - 1 <= 0 or n - T - 1 - cut <= 0 then
    fail(string.format("corpus size n_tokens = %d is too small for T = %d: the validation split (the last 10 %%, %d tokens) " ..
                       "needs more than T + 1 = %d", n, T, n - cut, T + 1))
  end
end

return M
