-- nn — a Torch-like module layer. A module is a table with :forward(x, ...) (also callable
-- as m(x)), :parameters() and a name; its parameters are slices of the context's flat
-- parameter buffer (ctx:param), so the optimizer and an MPI gradient sum see one buffer.
-- Initialisation draws from the context's seed sequence: the same seed gives the same model.
local ol = require "outlierlab"
local nn = {}

local Module = {}
Module.__index = Module
Module.__call = function(self, ...) return self:forward(...) end
nn.Module = Module

-- Probe functions (opts.probe = fn(name, layer, tensor) of a model's forward) may say which
-- points they want: nn.probe_wants(fn, name, layer) is false only when fn was registered with
-- a predicate (nn.register_probe(fn, wants(name, layer))) that declines; a model skips the work
-- of a point nobody wants (the attention probabilities, a full B·NH·T² pass). outlierlab.measure.probes
-- registers its collector; any other function gets every point.
local probe_wants = setmetatable({}, { __mode = "k" })
function nn.register_probe(fn, wants) probe_wants[fn] = wants return fn end
function nn.probe_wants(fn, name, layer)
  local w = probe_wants[fn]
  return w == nil or w(name, layer) and true or false
end

-- define a module class: local Foo = nn.class("Foo")
function nn.class(name, parent)
  local cls = setmetatable({}, { __index = parent or Module })
  cls.__index = cls
  cls.__call = Module.__call
  cls.__name = name
  return cls
end

function Module:parameters()
  local out = {}
  local function walk(m)
    for _, p in ipairs(m._params or {}) do out[#out + 1] = p end
    for _, c in ipairs(m._children or {}) do walk(c) end
  end
  walk(self)
  return out
end
function Module:add_param(p) self._params = self._params or {}; self._params[#self._params + 1] = p; return p end
function Module:add_child(c) self._children = self._children or {}; self._children[#self._children + 1] = c; return c end
function Module:train(on)
  self.training = on ~= false
  for _, c in ipairs(self._children or {}) do c:train(on) end
  return self
end
function Module:eval() return self:train(false) end
function Module:num_params()
  local n = 0
  for _, p in ipairs(self:parameters()) do n = n + tonumber(p.numel) end
  return n
end

-- Linear(ctx, in, out, {bias = true, name = "fc", std = 0.02}): y = x·Wᵀ + b, W (out, in).
-- Init: W ~ N(0, std²) (GPT-2/BERT style), b = 0.
local Linear = nn.class("Linear")
nn.Linear = Linear
function nn.Linear_new(ctx, nin, nout, opts)
  opts = opts or {}
  local name = opts.name or "linear"
  local self = setmetatable({ ctx = ctx, name = name, nin = nin, nout = nout, training = true }, Linear)
  self.weight = self:add_param(ctx:param(name .. ".weight", { nout, nin }))
  self.weight:normal_(0, opts.std or 0.02, ctx:next_seed())
  if opts.bias ~= false then
    self.bias = self:add_param(ctx:param(name .. ".bias", { nout }))
  end
  return self
end
setmetatable(Linear, { __index = Module, __call = function(_, ...) return nn.Linear_new(...) end })
function Linear:forward(x) return x:linear(self.weight, self.bias) end

-- LayerNorm(ctx, C, {affine = true, bias = true, eps = 1e-5, name}): gains 1, biases 0.
local LayerNorm = nn.class("LayerNorm")
nn.LayerNorm = LayerNorm
setmetatable(LayerNorm, { __index = Module, __call = function(_, ctx, C, opts)
  opts = opts or {}
  local name = opts.name or "ln"
  local self = setmetatable({ ctx = ctx, name = name, eps = opts.eps or 1e-5, training = true }, LayerNorm)
  if opts.affine ~= false then
    self.weight = self:add_param(ctx:param(name .. ".weight", { C })):fill_(1)
    if opts.bias ~= false then self.bias = self:add_param(ctx:param(name .. ".bias", { C })) end
  end
  return self
end })
function LayerNorm:forward(x) return x:layernorm(self.weight, self.bias, self.eps) end

-- RMSNorm(ctx, C, {eps = 1e-6, name, single = false}): gain 1. single = true: one scalar gain g
-- for all channels, y = g·x/√(mean(x²) + eps) (single-scale RMSNorm, Outlier-Safe Pre-Training,
-- Park et al. 2025): no per-channel gain that could single out a channel.
local RMSNorm = nn.class("RMSNorm")
nn.RMSNorm = RMSNorm
setmetatable(RMSNorm, { __index = Module, __call = function(_, ctx, C, opts)
  opts = opts or {}
  local name = opts.name or "rmsnorm"
  local self = setmetatable({ ctx = ctx, name = name, eps = opts.eps or 1e-6, training = true,
                              single = opts.single and true or false }, RMSNorm)
  self.weight = self:add_param(ctx:param(name .. ".weight", { self.single and 1 or C })):fill_(1)
  return self
end })
function RMSNorm:forward(x)
  if self.single then return x:rmsnorm(nil, self.eps) * self.weight end
  return x:rmsnorm(self.weight, self.eps)
end

-- Embedding(ctx, V, C, {std = 0.02, name}): ids int32 (...) -> (..., C).
local Embedding = nn.class("Embedding")
nn.Embedding = Embedding
setmetatable(Embedding, { __index = Module, __call = function(_, ctx, V, Cdim, opts)
  opts = opts or {}
  local name = opts.name or "embedding"
  local self = setmetatable({ ctx = ctx, name = name, training = true }, Embedding)
  self.weight = self:add_param(ctx:param(name .. ".weight", { V, Cdim }))
  self.weight:normal_(0, opts.std or 0.02, ctx:next_seed())
  return self
end })
function Embedding:forward(ids) return ids:embedding(self.weight) end

-- Activations and dropout as modules (for Sequential).
local function act(name, fn)
  local cls = nn.class(name)
  setmetatable(cls, { __index = Module, __call = function(_, opts)
    return setmetatable({ name = name, opts = opts, training = true }, cls)
  end })
  cls.forward = fn
  nn[name] = cls
end
act("ReLU", function(_, x) return x:relu() end)
act("GELU", function(self, x) return x:gelu(self.opts and self.opts.approx) end)
act("SiLU", function(_, x) return x:silu() end)
act("Tanh", function(_, x) return x:tanh() end)
act("Sigmoid", function(_, x) return x:sigmoid() end)

-- Dropout(p, seed): active only in training mode; a new mask every call (seed, counter).
local Dropout = nn.class("Dropout")
nn.Dropout = Dropout
setmetatable(Dropout, { __index = Module, __call = function(_, p, seed)
  return setmetatable({ name = "dropout", p = p, seed = seed or 0, calls = 0, training = true }, Dropout)
end })
function Dropout:forward(x)
  if not self.training or self.p == 0 then return x end
  self.calls = self.calls + 1
  return x:dropout(self.p, self.seed * 7919 + self.calls)
end

-- Sequential{m1, m2, ...}
local Sequential = nn.class("Sequential")
nn.Sequential = Sequential
setmetatable(Sequential, { __index = Module, __call = function(_, mods)
  local self = setmetatable({ name = "sequential", training = true }, Sequential)
  for _, m in ipairs(mods or {}) do self:add(m) end
  return self
end })
function Sequential:add(m) self.modules = self.modules or {}; self.modules[#self.modules + 1] = m; self:add_child(m); return self end
function Sequential:forward(x)
  for _, m in ipairs(self.modules or {}) do x = m:forward(x) end
  return x
end

return nn
