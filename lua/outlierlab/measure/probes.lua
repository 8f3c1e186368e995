-- probes — collects the tensors a model reports at its probe points (docs/reference/interfaces.md:
-- model:forward(batch, {probe = fn(name, layer, tensor)})) and hands each one, with the
-- batch it came from, to the registered handlers. Nothing is kept: handlers stream the
-- tensor into accumulators (outlierlab.measure.metrics) while it is alive (step arena).
--
--   local probes = require "outlierlab.measure.probes"
--   local P = probes.new{ points = {"h", "ffn_out"}, layers = "all" | {10, 11},
--                         on = function(name, layer, tensor, batch) ... end }   -- on is optional
--   P:attach("ffn_out", analysis.LayerStats{T = 128, C = 256, V = vocab, rule = analysis.QT_6SIGMA})
--   P:attach("attn_probs", function(A, layer, batch, name) ... end, {10, 11})  -- own layer filter
--   local out = P:forward(model, batch)    -- sets the batch, runs the model with P.fn, ends the batch
--   -- or by hand: P:set_batch(batch); model:forward(batch, {probe = P.fn}); P:end_batch()
--
-- A handler is a function(tensor, layer, batch, name) or an object with a method
-- :probe(tensor, layer, batch, name) (analysis.LayerStats, LayerAttn) and optionally
-- :end_batch(batch) (analysis.Overlap is attached with P:attach_overlap).
-- P.counts[name] counts the tensors seen per point (a model that never reports a point is
-- visible there); P.fn ignores points and layers nobody asked for, at the cost of one lookup.
local probes = {}

local Probe = {}
Probe.__index = Probe

local function layer_filter(layers, what)
  if layers == nil or layers == "all" then return nil end
  if type(layers) == "number" then layers = { layers } end
  if type(layers) ~= "table" then error(what .. ": layers must be 'all', a number or a list of numbers", 3) end
  local set = {}
  for _, l in ipairs(layers) do
    if type(l) ~= "number" then error(what .. ": layer " .. tostring(l) .. " is not a number", 3) end
    set[l] = true
  end
  return set
end

function probes.new(o)
  o = o or {}
  for k in pairs(o) do
    if k ~= "points" and k ~= "layers" and k ~= "on" then error("probes.new: unknown key '" .. tostring(k) .. "'", 2) end
  end
  local self = setmetatable({ handlers = {}, enders = {}, counts = {}, batch = nil, objects = {},
                              layers = layer_filter(o.layers, "probes.new"), on = o.on, points = {} }, Probe)
  for _, p in ipairs(o.points or {}) do self.points[p] = true end
  if o.on ~= nil and type(o.on) ~= "function" then error("probes.new: on must be a function", 2) end
  self.fn = function(name, layer, tensor) self:dispatch(name, layer, tensor) end
  -- models ask before computing a point only probes look at (nn.probe_wants)
  require("outlierlab.nn").register_probe(self.fn, function(name, layer) return self:wants(name, layer) end)
  return self
end

-- true when dispatch(name, layer, …) would reach the on function or a handler
function Probe:wants(name, layer)
  if not self.points[name] or (self.layers and not self.layers[layer]) then return false end
  if self.on then return true end
  for _, h in ipairs(self.handlers[name] or {}) do
    if not h.layers or h.layers[layer] then return true end
  end
  return false
end

-- register a handler for one point (optionally only some layers)
function Probe:attach(point, handler, layers)
  if type(point) ~= "string" then error("probes:attach: point must be a string", 2) end
  local call
  if type(handler) == "function" then
    call = handler
    self.local_only = true   -- a function's results live in its own upvalues: not mergeable
  elseif type(handler) == "table" and type(handler.probe) == "function" then
    call = function(t, l, b, n) handler:probe(t, l, b, n) end
    if type(handler.merge) == "function" then self.objects[#self.objects + 1] = handler
    else self.local_only = true end
    if type(handler.end_batch) == "function" then self.enders[#self.enders + 1] = handler end
  else
    error("probes:attach: handler for '" .. point .. "' must be a function or have a :probe method", 2)
  end
  local list = self.handlers[point] or {}
  self.handlers[point] = list
  list[#list + 1] = { call = call, layers = layer_filter(layers, "probes:attach") }
  self.points[point] = true
  return handler
end

-- SO Table 1 overlap: activation outliers at act_point, attention outliers at attn_point
function Probe:attach_overlap(ov, act_point, attn_point, layers)
  local lf = layer_filter(layers, "probes:attach_overlap")
  self:attach(act_point or "h", function(t, l, b) ov:probe_act(t, l, b) end)
  self:attach(attn_point or "attn_probs", function(t, l, b)
    if not lf or lf[l] then ov:probe_attn(t, l, b) end
  end)
  self.enders[#self.enders + 1] = ov
  self.local_only = true
  return ov
end

-- Under MPI: true when every handler is an accumulator with :merge, so ranks may take
-- disjoint batches and merge afterwards (P:merge_ranks); false when a function handler
-- (whose state the collector cannot see) is attached: then every rank must see every batch.
function Probe:distributable() return not self.local_only and self.on == nil end

-- Merge every attached accumulator across the MPI ranks (outlierlab.dist.allmerge).
function Probe:merge_ranks()
  local dist = require "outlierlab.util.dist"
  for _, h in ipairs(self.objects) do dist.allmerge(h) end
end

function Probe:set_batch(batch) self.batch = batch end

function Probe:dispatch(name, layer, tensor)
  if not self.points[name] then return end
  if self.layers and not self.layers[layer] then return end
  self.counts[name] = (self.counts[name] or 0) + 1
  if self.on then self.on(name, layer, tensor, self.batch) end
  local list = self.handlers[name]
  if list then
    for _, h in ipairs(list) do
      if not h.layers or h.layers[layer] then h.call(tensor, layer, self.batch, name) end
    end
  end
end

function Probe:end_batch()
  for _, h in ipairs(self.enders) do h:end_batch(self.batch) end
  self.batch = nil
end

-- one evaluation forward pass with the probes on (train = false unless opts says otherwise)
function Probe:forward(model, batch, opts)
  local fo = { probe = self.fn, train = false }
  for k, v in pairs(opts or {}) do fo[k] = v end
  fo.probe = self.fn
  self:set_batch(batch)
  local out = model:forward(batch, fo)
  self:end_batch()
  return out
end

return probes
