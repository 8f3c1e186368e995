-- data/images — synthetic image classification for the ViT runs (engine/io_images.c).
--
--   local tr = data.ImageLoader{ n = 4096, size = 32, classes = 4, seed = 1, B = 16, patch = 8 }
--   local b = tr:next(ctx)   -- {images = f32 (B,3,H,W), labels = i32 (B),
--                            --  patch_object = i32 (B, NP), patch_frac = f32 (B, NP)} (with patch)
--   local img = data.image{ seed = 1, index = 0, size = 32, class = 2 }   -- one image, Lua-owned
--
-- Dataset: image i (0 <= i < n for split "train"; n <= i < n + n_val for "val") has class
-- floor(u(seed, i)·classes) and pixels from ol_image_synth(seed, i). A batch row is a
-- uniformly drawn image of the split, a function of (seed, split, step, global row).
-- Patches are numbered row-major over the (H/patch, W/patch) grid, as the ViT patch
-- embedding flattens them (patch p is sequence position p+1 after [CLS]); a patch is an
-- object patch when at least half of its pixels belong to the object.
local ffi = require "ffi"
local ol = require "outlierlab"
local C = ol.C

local M = {}

function M.class_names()
  local out = {}
  for c = 0, C.ol_image_num_classes() - 1 do out[c + 1] = ffi.string(C.ol_image_class_name(c)) end
  return out
end

local function class_of(seed, i, classes)
  return math.floor(C.ol_rand_uniform(seed + 0x1ab, i) * classes)
end

-- per-patch object fraction of an (H, W) mask into frac (NP floats)
local function patch_fractions(mask, H, W, P, frac)
  local gh, gw = H / P, W / P
  for py = 0, gh - 1 do
    for px = 0, gw - 1 do
      local s = 0
      for y = py * P, py * P + P - 1 do
        for x = px * P, px * P + P - 1 do s = s + mask[y * W + x] end
      end
      frac[py * gw + px] = s / (P * P)
    end
  end
end

-- Background styles (engine/io_images.c): "textured" (default: noise, stripes or a checkerboard,
-- the object near the centre) or "flat" (one colour, a small object anywhere: most patches carry
-- no information; the model organism's images, docs/reference/data.md).
local STYLES = { textured = 0, flat = 1 }
function M.style_code(style, what)
  if style == nil then return 0 end
  local c = STYLES[style]
  if not c then error(string.format("%s: style must be 'textured' or 'flat', got %s", what, tostring(style)), 3) end
  return c
end

-- data.image{seed=, index=, size=, class=, patch=, style=} -> {data = float[3*H*W], mask = uint8[H*W],
-- size=, class=, patch_frac = {...} (with patch)}
function M.image(opts)
  local H = opts.size or 32
  local cls = opts.class or 0
  local data = ffi.new("float[?]", 3 * H * H)
  local mask = ffi.new("uint8_t[?]", H * H)
  if C.ol_image_synth_style(data, mask, H, H, cls, opts.seed or 0, opts.index or 0, M.style_code(opts.style, "data.image")) ~= 0 then
    ol.engine_error(1)
  end
  local out = { data = data, mask = mask, size = H, class = cls }
  if opts.patch then
    local np = (H / opts.patch) ^ 2
    local frac = ffi.new("float[?]", np)
    patch_fractions(mask, H, H, opts.patch, frac)
    out.patch_frac = {}
    for i = 0, np - 1 do out.patch_frac[i + 1] = frac[i] end
  end
  return out
end

local ImageLoader = {}
ImageLoader.__index = ImageLoader
M.ImageLoaderClass = ImageLoader

local known = { n = true, n_val = true, size = true, classes = true, seed = true, B = true, split = true,
                patch = true, rank = true, world = true, style = true }

-- Image b of a batch's images (B, 3, H, H) as 8-bit RGB pixels for a figure: { {x, y, r, g, b}, ... }
-- in rows (y-major), undoing the loader's normalisation (x − 0.5) / 0.25 and clamping to [0, 1].
function M.rgb(images, b, H)
  local img = images.data
  local out = {}
  for y = 0, H - 1 do
    for xx = 0, H - 1 do
      local px = { xx, y }
      for ch = 0, 2 do
        local val = img[((b * 3 + ch) * H + y) * H + xx] * 0.25 + 0.5
        px[#px + 1] = math.floor(255 * math.min(1, math.max(0, val)) + 0.5)
      end
      out[#out + 1] = px
    end
  end
  return out
end

function M.ImageLoader(opts)
  local what = "data.ImageLoader"
  opts = opts or {}
  for k in pairs(opts) do if not known[k] then error(what .. ": unknown option '" .. tostring(k) .. "'", 2) end end
  local self = setmetatable({ kind = "image" }, ImageLoader)
  local function int(key, lo, default)
    local v = opts[key] == nil and default or opts[key]
    if type(v) ~= "number" or v ~= math.floor(v) or v < lo then
      error(string.format("%s: %s must be an integer >= %d, got %s", what, key, lo, tostring(v)), 3)
    end
    return v
  end
  self.n = int("n", 1, 4096)
  self.n_val = int("n_val", 1, math.max(1, math.floor(self.n / 8)))
  self.size = int("size", 4, 32)
  self.classes = int("classes", 2, 4)
  self.B = int("B", 1, nil)
  self.seed = int("seed", 0, 1234)
  self.rank, self.world = int("rank", 0, 0), int("world", 1, 1)
  self.split = opts.split or "train"
  if self.split ~= "train" and self.split ~= "val" then error(what .. ": split must be 'train' or 'val'", 2) end
  self.style = M.style_code(opts.style, what)
  local nc = C.ol_image_num_classes()
  if self.classes > nc then error(string.format("%s: classes = %d but only %d shapes exist", what, self.classes, nc), 2) end
  if self.rank >= self.world then error(what .. ": rank must be < world", 2) end
  if self.B % self.world ~= 0 then error(string.format("%s: B = %d is not a multiple of world = %d", what, self.B, self.world), 2) end
  self.Bl, self.row0 = self.B / self.world, self.rank * self.B / self.world
  if opts.patch ~= nil then
    self.patch = int("patch", 1, nil)
    if self.size % self.patch ~= 0 then error(string.format("%s: size %d is not a multiple of patch %d", what, self.size, self.patch), 2) end
    self.np = (self.size / self.patch) ^ 2
    self.frac = ffi.new("float[?]", self.np)
  end
  self.base, self.count = (self.split == "train" and 0 or self.n), (self.split == "train" and self.n or self.n_val)
  self.stream = math.floor(C.ol_rand_uniform(self.seed, self.split == "train" and 0x1 or 0x2) * 2 ^ 53)
  self.mask = ffi.new("uint8_t[?]", self.size * self.size)
  self.step = 0
  return self
end

-- image index of global row g at a step
function ImageLoader:index(step, g)
  return self.base + math.floor(C.ol_rand_uniform(self.stream, step * self.B + g) * self.count)
end
function ImageLoader:label(i) return class_of(self.seed, i, self.classes) end

function ImageLoader:next(ctx)
  local B, H = self.Bl, self.size
  local images = ctx:tensor({ B, 3, H, H }, { name = "images" })
  local labels = ctx:tensor({ B }, { dtype = "i32", name = "labels" })
  local po, pf
  if self.patch then
    po = ctx:tensor({ B, self.np }, { dtype = "i32", name = "patch_object" })
    pf = ctx:tensor({ B, self.np }, { name = "patch_frac" })
  end
  for r = 0, B - 1 do
    local i = self:index(self.step, self.row0 + r)
    local cls = class_of(self.seed, i, self.classes)
    if C.ol_image_synth_style(images.data + r * 3 * H * H, self.mask, H, H, cls, self.seed, i, self.style) ~= 0 then
      ol.engine_error(1)
    end
    labels.idata[r] = cls
    if self.patch then
      patch_fractions(self.mask, H, H, self.patch, self.frac)
      for p = 0, self.np - 1 do
        pf.data[r * self.np + p] = self.frac[p]
        po.idata[r * self.np + p] = self.frac[p] >= 0.5 and 1 or 0
      end
    end
  end
  self.step = self.step + 1
  return { images = images, labels = labels, patch_object = po, patch_frac = pf }
end

function ImageLoader:state()
  return { kind = "image", step = self.step, seed = self.seed, B = self.B, size = self.size, split = self.split }
end
function ImageLoader:set_state(s)
  if type(s) ~= "table" then error("image loader: set_state expects a table", 2) end
  for _, k in ipairs { "kind", "seed", "B", "size", "split" } do
    if s[k] ~= nil and s[k] ~= self[k] then
      error(string.format("image loader: set_state: saved %s = %s but this loader has %s", k, tostring(s[k]), tostring(self[k])), 2)
    end
  end
  if type(s.step) ~= "number" or s.step < 0 or s.step ~= math.floor(s.step) then error("image loader: set_state: bad step", 2) end
  self.step = s.step
end
function ImageLoader:reset() self.step = 0 end

return M
