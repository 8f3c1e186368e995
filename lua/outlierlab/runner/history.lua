-- history — a trained model's training curves, one command away (as TensorBoard's scalars are):
-- a NetCDF file and a gnuplot figure next to the cached model.
--
--   bin/outlierlab history cache/models/<hash>     -> <hash>/history.nc, history.png, history.pdf
--   make history MODEL=cache/models/<hash>
--   require("outlierlab.runner.history").write(dir, info)  -- what the experiment runner calls after training
--
-- The curves come from what the trainer recorded: the training loss, learning rate and gradient
-- norm of every step (train.run's res.losses / lrs / gnorms, also kept in the checkpoint's
-- metadata, so a model trained before its history was written still has one), the validation
-- loss of every evaluation, and the outlier metrics measured during training where the trainer
-- records them (info.curve or the model directory's curve.lua: { {step =, max_inf_norm =,
-- avg_kurtosis =}, ... }, as experiments/emergence.lua does).
--
-- history.nc (CF + ACDD global attributes of outlierlab.figure.netcdf):
--   loss(step), learning_rate(step), grad_norm(step)               every training step
--   val_loss(eval)              with coordinate eval = the step of each evaluation
--   max_inf_norm(probe), avg_kurtosis(probe)  with coordinate probe = the step of each measurement
-- The figure (plots/history.gp) has four panels: loss (training and validation), learning rate,
-- gradient norm (log scale), outlier metrics (log scale; "not recorded" when absent). Runs of
-- more than 4,000 steps are thinned for the figure (every k-th step); the NetCDF file keeps all.
local results = require "outlierlab.figure.netcdf"
local plot = require "outlierlab.figure.gnuplot"
local serialize = require "outlierlab.util.serialize"

local M = {}
M.FIGURE_POINTS = 4000

local read_file = require("outlierlab.util.fs").read_file

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
  if #h.curve > 0 then
    local cs, mi, ku = {}, {}, {}
    for i, r in ipairs(h.curve) do
      cs[i], mi[i], ku[i] = r.step or 0, num(r.max_inf_norm), num(r.avg_kurtosis)
      crows[i] = { cs[i], mi[i], ku[i] }
    end
    nc:dim("probe", #cs, cs, { long_name = "training step of the outlier measurement (0 = initialisation)" })
    nc:var("max_inf_norm", { "probe" }, mi, { long_name = "max inf norm over the hooked tensors (docs/METRICS.md)", units = "1", type = "double" })
    nc:var("avg_kurtosis", { "probe" }, ku, { long_name = "average kurtosis over the hooked tensors (docs/METRICS.md)", units = "1", type = "double" })
  end
  files[#files + 1] = nc:close()
  local nan = { 0 / 0, 0 / 0, 0 / 0, 0 / 0 }
  local figs = plot.figure(dir, "history", "history", {
    { comment = "panels present: train, val, curve", columns = { "train", "val", "curve" },
      rows = { { #rows > 0 and 1 or 0, #vrows > 0 and 1 or 0, #crows > 0 and 1 or 0 } } },
    { comment = "training steps" .. (#rows < h.steps and string.format(" (every %d-th of %d)", math.ceil(h.steps / M.FIGURE_POINTS), h.steps) or ""),
      columns = { "step", "loss", "lr", "grad_norm" }, rows = rows, empty_row = nan },
    { comment = "evaluations", columns = { "step", "val_loss" }, rows = vrows, empty_row = nan },
    { comment = "outlier metrics during training", columns = { "step", "max_inf_norm", "avg_kurtosis" }, rows = crows, empty_row = nan },
  })
  for _, f in ipairs(figs) do files[#files + 1] = f end
  return files
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
