-- QT Fig. 16–17 — the ViT outlier summary for several images and two layers: the image, the
-- 6σ outliers of a layer's output per patch, the cumulative attention the next layer's head puts
-- on every patch, that head's attention matrix, and the value magnitudes of outlier and other
-- patches.
--
-- Method (QT App. A.2, Fig. 16–17; as qt-fig3 for one image): the vanilla ViT of qt-table2 and
-- qt-fig3 (the same spec through papers.qt_spec, so the same cached model), on the first held-out
-- batch of synthetic images (an object on a background; outlierlab.data.images). For each of the
-- first n_show images and each of two layers l (the third- and second-to-last, QT's #10 and #11
-- of 12): 6σ outliers at h_l (μ, σ over the batch's whole tensor, QT_6SIGMA) counted per patch; in
-- layer l + 1 the head with the most concentrated cumulative attention Â_j = Σ_i A_ij (largest
-- max_j Â_j, chosen without looking at the outliers); its Â per patch and its attention matrix;
-- the mean ‖v_j‖ of that head over outlier patches and over the other patches.
local data = require "outlierlab.data"
local probes = require "outlierlab.measure.probes"
local figure = require "outlierlab.figure"
local thresholds = require "outlierlab.judge.thresholds"
local inspect = require "outlierlab.measure.inspect"
local papers = require "outlierlab.recipes.papers"
local recipes = require "outlierlab.recipes"

local MODEL_SEED = 1   -- qt-table2's first seed: the same cached vanilla ViT as qt-fig3
local function model_spec(cfg) return papers.qt_spec(cfg, "vit", papers.qt_attention(cfg, "vit", "vanilla"), MODEL_SEED) end

local FIG = figure.declare{
  title = "ViT outlier summaries for several images and two layers (QT Fig. 16–17, reproduced)",
  dims = {
    { "image", long_name = "held-out image (index in the first batch)" },
    { "pair", long_name = "layer l whose output is analysed (attention of layer l + 1)" },
    { "y", long_name = "pixel row" }, { "x", long_name = "pixel column" }, { "rgb", long_name = "colour channel (0 red, 1 green, 2 blue)" },
    { "patch_row", long_name = "patch grid row (0 = top)" }, { "patch_col", long_name = "patch grid column (0 = left)" },
    { "query", long_name = "query token: 0 [CLS], 1 + row G + col a patch" }, { "key", long_name = "key token: 0 [CLS], 1 + row G + col a patch" },
    { "patch_kind", long_name = "patches", labels = true },
  },
  vars = {
    { "pixels", dims = { "image", "y", "x", "rgb" }, long_name = "the input image (0..255)", units = "1", type = "int" },
    { "outliers", dims = { "image", "pair", "patch_row", "patch_col" }, long_name = "6 sigma outlier elements of h_l per patch", units = "1", type = "int" },
    { "cumulative_attention", dims = { "image", "pair", "patch_row", "patch_col" }, long_name = "cumulative attention of the chosen head of layer l + 1 on each patch", units = "1" },
    { "attention", dims = { "image", "pair", "query", "key" }, long_name = "attention probabilities of the chosen head of layer l + 1", units = "1" },
    { "value_norm", dims = { "image", "pair", "patch_kind" }, long_name = "mean L2 norm of the chosen head's values over the patches of each kind (undefined without outlier patches)", units = "1", label = "mean ||v||" },
    { "head", dims = { "image", "pair" }, long_name = "chosen head of layer l + 1 (most concentrated cumulative attention)", units = "1", type = "int" },
    { "background_share", dims = {}, long_name = "share of outlier patches that are background (all shown images and layers)", units = "1" },
    { "background_patches", dims = {}, long_name = "share of background among all shown patches", units = "1" },
    { "value_ratio", dims = {}, long_name = "mean over image and layer of mean ||v|| of outlier patches over that of the other patches", units = "1" },
    { "outlier_patches", dims = {}, long_name = "outlier patches over the shown images and layers", units = "1", type = "int" },
    { "enrichment", dims = {}, long_name = "share of the chosen heads' patch attention on outlier patches over the share of outlier patches", units = "1" },
  },
  panels = {
    { kind = "rgb", z = "pixels", each = "image", title = "image {image}" },
    { kind = "heatmap", z = "outliers", each = { "image", "pair" }, title = "image {image}: 6σ outliers of layer {pair}", why_empty = "no 6σ outlier in layer {pair}", zero_is_empty = true },
    { kind = "heatmap", z = "cumulative_attention", each = { "image", "pair" }, title = "image {image}: Â per patch, layer {pair} + 1" },
    { kind = "heatmap", z = "attention", each = { "image", "pair" }, title = "image {image}: attention, layer {pair} + 1", xlabel = "key", ylabel = "query" },
    { kind = "bars", x = "patch_kind", y = "value_norm", each = { "image", "pair" }, title = "image {image}: value norms, layer {pair} + 1",
      why_empty = "no outlier patch in layer {pair}" },
  },
}

local function train(run) return recipes.fit(run, model_spec(run.cfg)) end

local function analyze(run)
  local cfg, spec = run.cfg, model_spec(run.cfg)
  local ctx, m
  if run.pretrained then
    ctx, m = run.pretrained:load()
    spec.data.size, spec.batch.patch = m.cfg.image_size, m.cfg.patch_size
  else ctx, m = recipes.load(spec, run.out.train) end
  local L = m.cfg.n_layer
  local H, Pz = spec.data.size, spec.batch.patch
  local G = H / Pz
  local NP, T = G * G, G * G + 1
  local pairs_ = {}
  for l = math.max(0, L - 3), L - 2 do pairs_[#pairs_ + 1] = l end
  local want = {}
  for _, l in ipairs(pairs_) do want[l] = true end
  local loader = data.ImageLoader{ n = spec.data.n, size = H, classes = spec.data.classes, seed = spec.data.seed,
                                   B = spec.batch.B, split = "val", patch = Pz, style = spec.data.style }
  local hs, As, Vs, batch = {}, {}, {}, nil
  local P = probes.new{ points = { "h", "attn_probs", "v" } }
  P:attach("h", function(t, l) if want[l] then hs[l] = t end end)
  P:attach("attn_probs", function(t, l) if want[l - 1] then As[l] = t end end)
  P:attach("v", function(t, l) if want[l - 1] then Vs[l] = t end end)
  local n = math.min(cfg.n_show, spec.batch.B)
  local px, outl, cum, att, vn, head = {}, {}, {}, {}, {}, {}
  local n_out, n_bg, n_bgp, n_p, ratios, on_out, on_all = 0, 0, 0, 0, {}, 0, 0
  ctx:no_grad(function()
    ctx:reset()
    batch = loader:next(ctx)
    P:forward(m, batch)
    -- copy what the figure shows while the step's tensors live
    local po = batch.patch_object.idata
    for b = 0, n - 1 do
      local img = {}
      for y = 0, H - 1 do for x = 0, H - 1 do for ch = 0, 2 do
        local v = batch.images.data[((b * 3 + ch) * H + y) * H + x] * 0.25 + 0.5
        img[#img + 1] = math.floor(255 * math.min(1, math.max(0, v)) + 0.5)
      end end end
      px[b + 1] = img
      outl[b + 1], cum[b + 1], att[b + 1], vn[b + 1], head[b + 1] = {}, {}, {}, {}, {}
      for k, l in ipairs(pairs_) do
        local h = hs[l]
        local C = h:size(2)
        local all = h:size(0) * T * C
        local s, s2 = 0, 0
        for i = 0, all - 1 do local v = h.data[i] s, s2 = s + v, s2 + v * v end
        local mu = s / all
        local sd = math.sqrt((s2 - s * s / all) / (all - 1))
        local cnt, flag = {}, {}
        for p = 0, NP - 1 do
          local c = 0
          local base = (b * T + p + 1) * C
          for j = 0, C - 1 do if math.abs(h.data[base + j] - mu) > 6 * sd then c = c + 1 end end
          cnt[p + 1], flag[p + 1] = c, c > 0
          n_p = n_p + 1
          local bg = po[b * NP + p] == 0
          if bg then n_bgp = n_bgp + 1 end
          if c > 0 then n_out = n_out + 1 if bg then n_bg = n_bg + 1 end end
        end
        local A = inspect.copy_row(As[l + 1], b)
        local NH = A.shape[1]
        local bh, bc, best = 0, nil, -1
        for hh = 0, NH - 1 do
          local r = inspect.received(inspect.plane(A, hh), T)
          local mx = 0
          for j = 1, T do if r[j] > mx then mx = r[j] end end
          if mx > best then best, bh, bc = mx, hh, r end
        end
        local cp = {}
        for p = 1, NP do
          cp[p] = bc[p + 1] * T
          on_all = on_all + cp[p]
          if flag[p] then on_out = on_out + cp[p] end
        end
        local V = inspect.copy_row(Vs[l + 1], b)
        local g = inspect.kv_head(bh, NH, V.shape[1])
        local norms = inspect.row_norms(inspect.plane(V, g), T, V.shape[3])
        local so, no, sx, nx = 0, 0, 0, 0
        for p = 1, NP do
          if flag[p] then so, no = so + norms[p + 1], no + 1 else sx, nx = sx + norms[p + 1], nx + 1 end
        end
        local vo, vx = no > 0 and so / no or 0 / 0, nx > 0 and sx / nx or 0 / 0
        if no > 0 and nx > 0 then ratios[#ratios + 1] = vo / vx end
        outl[b + 1][k], cum[b + 1][k], att[b + 1][k] = cnt, cp, inspect.plane(A, bh)
        vn[b + 1][k] = no > 0 and { vx, vo } or { 0 / 0, 0 / 0 }
        head[b + 1][k] = bh
      end
    end
  end)
  ctx:reset()
  local imgs = {}
  for b = 1, n do imgs[b] = b - 1 end
  local share_out = n_out / math.max(n_p, 1)
  return {
    coords = { image = imgs, pair = pairs_, y = H, x = H, rgb = 3, patch_row = G, patch_col = G, query = T, key = T,
               patch_kind = { "other patches", "outlier patches" } },
    vars = { pixels = px, outliers = outl, cumulative_attention = cum, attention = att, value_norm = vn, head = head,
             background_share = n_out > 0 and n_bg / n_out or 0 / 0, background_patches = n_bgp / math.max(n_p, 1),
             value_ratio = inspect.mean(ratios), outlier_patches = n_out,
             enrichment = (n_out > 0 and on_all > 0) and (on_out / on_all) / share_out or 0 / 0 },
  }
end

local function summary(run)
  local v = figure.values(FIG, run.out.analyze)
  -- the verdict with margins (analysis.thresholds.vit_checks, as qt-fig3's)
  local cs, holds = thresholds.vit_checks{
    n = v.outlier_patches, background = { share = v.background_share, p = v.background_patches },
    head = "the next layer's chosen heads'", enrichment = v.enrichment, value_ratio = v.value_ratio }
  local lines = thresholds.vit_lines(cs)
  return {
    paper = "ViT-S/16 layers #10 and #11 on eight ImageNet images: outliers at background patches near the border; head #1 of the next layer puts its cumulative attention on a few of them (vertical stripes); outlier patches have smaller values (Fig. 3: ~0.5 against ~2–2.5; the appendix figures vary by image)",
    reproduced = v.outlier_patches > 0 and string.format("%d outlier patches over the shown images and layers, %.0f %% background (background is %.0f %% of the patches); the chosen heads' attention on outlier patches is %.2f × their share; mean ‖v‖ of outlier patches = %.2f × the other patches'",
      v.outlier_patches, 100 * v.background_share, 100 * v.background_patches, v.enrichment, v.value_ratio)
      or string.format("no 6σ outlier patch over the shown images and layers (background is %.0f %% of the patches)", 100 * v.background_patches),
    holds = holds,
    notes = string.format("Criterion (with margins): outlier patches are background more often than patches in general beyond chance, the next layer's chosen head attends to them at least %g × their share, and their values are at most %g × the other patches'; with fewer than %d outlier patches the verdict is inconclusive.",
      thresholds.VIT.enrichment, thresholds.VIT.value_ratio, thresholds.VIT.min_patches) .. "\n\n" .. table.concat(lines, "\n") ..
      (v.outlier_patches == 0 and "\n\nNo 6σ outlier in the shown layers: the outlier panels say so and the verdict is inconclusive." or ""),
  }
end

return {
  id = "qt-fig16",
  title = "ViT outlier summaries for several images and two layers: outliers, next-layer attention, value magnitudes",
  source = { paper = "QT (Bondarenko et al. 2023)", figure = "Fig. 16–17",
             claim = "Across images and in both of the last layers, ViT outliers sit in background patches, the next layer's head attends to them, and their values are small." },
  profiles = recipes.single_seed(papers.qt_profiles{ quick = { n_show = 2 }, default = { n_show = 8 }, paper = { n_show = 8 } }),
  stages = figure.stages(train, analyze, FIG),
  summary = summary,
}
