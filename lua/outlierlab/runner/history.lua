-- history — a trained model's training curves, one command away (as TensorBoard's scalars are):
-- a NetCDF file and a gnuplot figure next to the cached model.
--
--   bin/outlierlab history cache/models/<hash>     -> <hash>/history.nc, history.png, history.pdf
--   make history MODEL=cache/models/<hash>
--   require("outlierlab.runner.history").write(dir, info)  -- what the experiment runner calls after training
--   require("outlierlab.runner.history").ensure(dir, meta) -- write it unless an up-to-date one is there
--
-- The curves come from what the trainer recorded: the training loss, learning rate and gradient
-- norm of every step (train.run's res.losses / lrs / gnorms, also kept in the checkpoint's
-- metadata, so a model trained before its history was written still has one), the validation
-- loss of every evaluation, and the phenomena measured during training where the trainer
-- records them (info.curve: recipes' tracker, every steps/20 on one held-out batch, the points of
-- outlierlab.judge.thresholds; or the model directory's curve.lua: { {step =, max_inf_norm =,
-- avg_kurtosis =}, ... }, as experiments/emergence.lua does).
--
-- history.nc (CF + ACDD global attributes of outlierlab.figure.netcdf):
--   loss(step), learning_rate(step), grad_norm(step)               every training step
--   val_loss(eval)              with coordinate eval = the step of each evaluation
--   max_inf_norm(probe), avg_kurtosis(probe), and where recorded sink_share(probe),
--   sink_value_ratio(probe), massive_ratio(probe), max_kurtosis(probe), sink_rate(probe)
--                               with coordinate probe = the step of each measurement
--   attributes threshold_* (judge/thresholds), final_window_from (the first step of the final
--   measurement: the last 10 % of the tracked steps) and final_* (its means)
-- The figure (plots/history.gp), 3 × 2 panels: loss (training and validation; a constant
-- learning rate is a note in this panel), gradient norm (log scale; a learning rate that changes
-- on the right axis), and the four phenomena over the steps, each with its threshold drawn
-- (judge/thresholds, the numbers of the recipe map's verdict) and the final window shaded:
-- sink share (and Gu et al.'s sink rate when the curve has it) >= 0.8, the sink's value ratio
-- <= 0.2, the massive-activation ratio at the sink token >= 100, average kurtosis >= 30 (with
-- the max inf norm on the right axis). Panels a trainer did not record say "not recorded". Runs of
-- more than 4,000 steps are thinned for the figure (every k-th step); the NetCDF file keeps all.
local results = require "outlierlab.figure.netcdf"
local plot = require "outlierlab.figure.gnuplot"
local serialize = require "outlierlab.util.serialize"

local thresholds = require "outlierlab.judge.thresholds"
local tracked = require "outlierlab.recipes.track"

local M = {}
M.FIGURE_POINTS = 4000
-- the version of the figure's contents: a history written by an older version is rewritten by
-- ensure() (the runner's copies in results/<id>/<profile>/history/)
M.VERSION = 2

local fs = require "outlierlab.util.fs"
local read_file = fs.read_file

local function num(v) return type(v) == "number" and v or 0 / 0 end

-- the curves of a model directory: info (done.lua's table, or nil) first, then the checkpoint's
-- metadata for whatever info lacks. Returns { steps = n, loss =, lr =, gnorm =, val = {{step, loss}},
-- curve = {{step, max_inf_norm, avg_kurtosis}}, source = "..." }.
function M.collect(dir, info)
  info = info or serialize.deserialize(read_file(dir .. "/done.lua") or "return nil", "@" .. dir .. "/done.lua") or {}
  local h = { loss = info.losses, lr = info.lrs, gnorm = info.gnorms, val = info.val, curve = info.curve }
  local sources = { "done.lua" }
  if not (h.loss and h.lr and h.gnorm) or not h.val then
    local ckpt = dir .. "/model.safetensors"
    if read_file(ckpt) then
      local ok, meta = pcall(require("outlierlab.train.checkpoint").inspect, ckpt)
      local extra = ok and type(meta.meta) == "table" and meta.meta.extra or {}
      h.loss = h.loss or extra.losses
      h.lr = h.lr or extra.lrs
      h.gnorm = h.gnorm or extra.gnorms
      h.val = h.val or extra.val
      sources[#sources + 1] = "model.safetensors metadata"
    end
  end
  if not h.curve then
    local c = read_file(dir .. "/curve.lua")
    if c then h.curve = serialize.deserialize(c, "@" .. dir .. "/curve.lua"); sources[#sources + 1] = "curve.lua" end
  end
  h.loss, h.lr, h.gnorm, h.val, h.curve = h.loss or {}, h.lr or {}, h.gnorm or {}, h.val or {}, h.curve or {}
  h.steps = math.max(#h.loss, #h.lr, #h.gnorm)
  h.source = table.concat(sources, ", ")
  -- a curve measured by other code than this tree's is drawn, but marked (recipes/track.lua)
  local fresh, why = tracked.fresh(info, dir:match("([^/]+)/*$"))
  if not fresh and #h.curve > 0 then h.stale = why end
  return h
end

-- write <dir>/history.nc and the figure <dir>/history.{dat,png,pdf}; meta = { title =, id =,
-- profile =, seed =, config = } for the NetCDF attributes. Returns the list of files written.
-- A model without any recorded curve gives an error naming its directory.
function M.write(dir, info, meta)
  meta = meta or {}
  local h = M.collect(dir, info)
  if h.steps == 0 and #h.curve == 0 then
    error("history: " .. dir .. " has no recorded training curve (no losses in done.lua, no checkpoint metadata, no curve.lua)", 0)
  end
  local hash = dir:match("([^/]+)/*$") or "model"
  local nc = results.new(dir .. "/history.nc", {
    title = "Training history of model " .. hash,
    summary = "Training loss, learning rate and gradient norm per step, validation loss per evaluation and "
      .. "outlier metrics measured during training, of the cached model " .. hash .. " (from " .. h.source .. ").",
    id = meta.id or hash, profile = meta.profile, seed = meta.seed, config = meta.config or {},
    references = meta.references, keywords = "training history, loss curve, learning rate, gradient norm",
  })
  nc:attr("model_hash", hash)
  if h.stale then nc:attr("curve_stale", h.stale) end
  local files = {}
  local steps = {}
  for s = 1, h.steps do steps[s] = s end
  local rows = {}
  if h.steps > 0 then
    local loss, lr, gn = {}, {}, {}
    for s = 1, h.steps do loss[s], lr[s], gn[s] = num(h.loss[s]), num(h.lr[s]), num(h.gnorm[s]) end
    nc:dim("step", h.steps, steps, { long_name = "training step (1-based, after the optimizer update)" })
    nc:var("loss", { "step" }, loss, { long_name = "training loss (mean cross-entropy over the global batch)", units = "1", type = "double" })
    nc:var("learning_rate", { "step" }, lr, { long_name = "learning rate of the step (schedule value)", units = "1", type = "double" })
    nc:var("grad_norm", { "step" }, gn, { long_name = "global L2 norm of the gradient before clipping", units = "1", type = "double" })
    local stride = math.max(1, math.ceil(h.steps / M.FIGURE_POINTS))
    for s = 1, h.steps, stride do rows[#rows + 1] = { s, loss[s], lr[s], gn[s] } end
    if (h.steps - 1) % stride ~= 0 then rows[#rows + 1] = { h.steps, loss[h.steps], lr[h.steps], gn[h.steps] } end
  end
  local vrows = {}
  if #h.val > 0 then
    local vs, vl = {}, {}
    for i, r in ipairs(h.val) do vs[i], vl[i] = r.step or 0, num(r.loss); vrows[i] = { vs[i], vl[i] } end
    nc:dim("eval", #vs, vs, { long_name = "training step of the evaluation" })
    nc:var("val_loss", { "eval" }, vl, { long_name = "validation loss (held-out batches)", units = "1", type = "double" })
  end
  local crows = {}
  local has = {}
  local CK = { "max_inf_norm", "avg_kurtosis", "sink_share", "value_ratio", "massive_ratio", "sink_rate", "max_kurtosis" }
  local j = thresholds.judge(h.curve)
  if #h.curve > 0 then
    local cs, cols = {}, {}
    for _, k in ipairs(CK) do cols[k] = {} end
    for i, r in ipairs(h.curve) do
      cs[i] = r.step or 0
      local row = { cs[i] }
      for _, k in ipairs(CK) do
        local v = num(r[k])
        cols[k][i] = v
        if v == v then has[k] = true end
        row[#row + 1] = v
      end
      crows[i] = row
    end
    nc:dim("probe", #cs, cs, { long_name = "training step of the outlier measurement (0 = initialisation)" })
    nc:var("max_inf_norm", { "probe" }, cols.max_inf_norm, { long_name = "max inf norm over the hooked tensors (docs/reference/metrics.md)", units = "1", type = "double" })
    nc:var("avg_kurtosis", { "probe" }, cols.avg_kurtosis, { long_name = "average kurtosis over the hooked tensors (docs/reference/metrics.md)", units = "1", type = "double" })
    local more = {
      { "sink_share", "sink_share", "largest sink share of any head (attention of other tokens on the sink tokens)" },
      { "value_ratio", "sink_value_ratio", "value norm at the sink over the median value norm, for the head with the largest sink share" },
      { "massive_ratio", "massive_ratio", "top-1 |h| at a sink token over the median |h|, per sequence averaged, in the layer where it is largest" },
      { "max_kurtosis", "max_kurtosis", "largest kurtosis of a layer output h" },
      { "sink_rate", "sink_rate", "Gu et al.'s sink rate: share of heads whose attention on the first key exceeds epsilon" },
    }
    for _, v in ipairs(more) do
      if has[v[1]] then nc:var(v[2], { "probe" }, cols[v[1]], { long_name = v[3], units = "1", type = "double" }) end
    end
    for k, v in pairs(thresholds.THRESHOLDS) do nc:attr("threshold_" .. k, v) end
    nc:attr("final_window_from", j.window.from)
    for _, k in ipairs { "sink_share", "value_ratio", "massive_ratio", "avg_kurtosis", "sink_rate" } do
      if j.final[k] then nc:attr("final_" .. k, j.final[k]) end
    end
  end
  files[#files + 1] = nc:close()
  local nan = { 0 / 0, 0 / 0, 0 / 0, 0 / 0 }
  -- a learning rate that never changes is a note in the loss panel, not a panel
  local lr_min, lr_max = math.huge, -math.huge
  for _, r in ipairs(rows) do
    if r[3] == r[3] then lr_min, lr_max = math.min(lr_min, r[3]), math.max(lr_max, r[3]) end
  end
  local lr_varies = #rows > 0 and lr_max > lr_min
  local T, F = thresholds.THRESHOLDS, j.final
  -- the log-scale ranges of the phenomena panels: the positive values of the curve and the
  -- threshold, with room above for the key
  local function range(keys, thr, top)
    local lo, hi = thr or math.huge, thr or -math.huge
    for _, r in ipairs(h.curve) do
      for _, k in ipairs(keys) do
        local v = r[k]
        if type(v) == "number" and v > 0 and v < math.huge then lo, hi = math.min(lo, v), math.max(hi, v) end
      end
    end
    if lo == math.huge then lo, hi = 1, 10 end
    return lo / 1.5, hi * top
  end
  local vlo, vhi = range({ "value_ratio" }, T.value_ratio, 3)
  local mlo, mhi = range({ "massive_ratio" }, T.massive_ratio, 4)
  local klo, khi = range({ "avg_kurtosis", "max_kurtosis" }, T.avg_kurtosis, 8)
  local ilo, ihi = range({ "max_inf_norm" }, nil, 40)
  local figs = plot.figure(dir, "history", "history", {
    { comment = "panels present: train, val, curve, phenomena (sink share, value ratio, massive ratio), sink rate, max kurtosis, learning rate changes; the tracked curve stale",
      columns = { "train", "val", "curve", "phenomena", "sink_rate", "max_kurtosis", "lr_varies", "max_inf_norm", "stale" },
      rows = { { #rows > 0 and 1 or 0, #vrows > 0 and 1 or 0, #crows > 0 and 1 or 0,
                 (has.sink_share or has.massive_ratio) and 1 or 0, has.sink_rate and 1 or 0, has.max_kurtosis and 1 or 0,
                 lr_varies and 1 or 0, has.max_inf_norm and 1 or 0, h.stale and 1 or 0 } } },
    { comment = "training steps" .. (#rows < h.steps and string.format(" (every %d-th of %d)", math.ceil(h.steps / M.FIGURE_POINTS), h.steps) or ""),
      columns = { "step", "loss", "lr", "grad_norm" }, rows = rows, empty_row = nan },
    { comment = "evaluations", columns = { "step", "val_loss" }, rows = vrows, empty_row = nan },
    { comment = "phenomena during training (recipes' tracker)", columns = { "step", unpack(CK) }, rows = crows,
      empty_row = { 0 / 0, 0 / 0, 0 / 0, 0 / 0, 0 / 0, 0 / 0, 0 / 0, 0 / 0 } },
    { comment = "thresholds (judge/thresholds), the final window (last 10 % of the tracked steps) and its means",
      columns = { "th_sink_share", "th_value_ratio", "th_massive_ratio", "th_avg_kurtosis", "final_from", "final_to",
                  "final_sink_share", "final_value_ratio", "final_massive_ratio", "final_avg_kurtosis", "final_sink_rate", "lr",
                  "value_lo", "value_hi", "massive_lo", "massive_hi", "kurtosis_lo", "kurtosis_hi", "inf_lo", "inf_hi" },
      rows = { { T.sink_share, T.value_ratio, T.massive_ratio, T.avg_kurtosis, num(j.window.from), num(j.window.to),
                 num(F.sink_share), num(F.value_ratio), num(F.massive_ratio), num(F.avg_kurtosis), num(F.sink_rate),
                 #rows > 0 and rows[#rows][3] or 0 / 0, vlo, vhi, mlo, mhi, klo, khi, ilo, ihi } } },
  })
  for _, f in ipairs(figs) do files[#files + 1] = f end
  return files
end

-- the stamp of a written history: its version, and "stale" when its tracked curve was measured
-- by other code than this tree's
local function stamp(dir)
  local info = serialize.deserialize(read_file(dir .. "/done.lua") or "return nil", "@" .. dir .. "/done.lua")
  return tostring(M.VERSION) .. (tracked.fresh(info) and "" or " stale") .. "\n"
end

-- write dir's history unless one of this version (and of the curve's freshness: a curve that
-- turned stale is redrawn with its mark) is there; meta as for write. Returns true when
-- written, or raises write's error.
function M.ensure(dir, meta)
  local want = stamp(dir)
  if read_file(dir .. "/history.version") == want and read_file(dir .. "/history.nc") and read_file(dir .. "/history.png") then return false end
  M.write(dir, nil, meta)
  fs.write_atomic(dir .. "/history.version", want)
  return true
end

-- bin/outlierlab history DIR [--out=DIR2]: write the history of a cached model (into DIR, or
-- copy the files to DIR2) and print the paths
function M.main(argv)
  local dir = argv[2]
  if not dir or dir:match("^%-%-") then
    io.stderr:write("usage: outlierlab history <model dir, e.g. cache/models/<hash>> [--out=DIR]\n")
    return 2
  end
  dir = dir:gsub("/+$", "")
  if not read_file(dir .. "/done.lua") and not read_file(dir .. "/model.safetensors") then
    error("history: " .. dir .. " is not a trained model's directory (no done.lua, no model.safetensors)", 0)
  end
  local out
  for i = 3, #argv do out = argv[i]:match("^%-%-out=(.+)$") or out end
  local spec = read_file(dir .. "/spec.json")
  local config = {}
  if spec then
    local ok, v = pcall(require("cjson").decode, spec)
    if ok then config = v end
  end
  local files = M.write(dir, nil, { config = config })
  fs.write_atomic(dir .. "/history.version", stamp(dir))
  if out then
    os.execute("mkdir -p '" .. out:gsub("'", "'\\''") .. "'")
    for i, f in ipairs(files) do
      local dst = out .. "/" .. f:match("([^/]+)$")
      plot.write_atomic(dst, read_file(f))
      files[i] = dst
    end
  end
  for _, f in ipairs(files) do print(f) end
  return 0
end

return M
