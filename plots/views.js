// views.js — the interactive views of outlierlab's pages (lua/outlierlab/figure/views.lua writes
// the page, its data blocks and this script inline; docs/reference/views.md).
// Apache ECharts draws the heat maps and lines when the page's assets folder has it; without it
// every heat map is a plain canvas with the same hover read-out, and the page says how to install
// the library. Strings from the records (token strings, labels) reach the page only through
// textContent, canvas text or esc() (tooltips): never as HTML.
(function () {
  "use strict";
  var spec = JSON.parse(document.getElementById("olv-spec").textContent);
  var EC = (typeof window.echarts === "object" && window.echarts) ? window.echarts : null;
  var PALETTE = ["#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89", "#35b779", "#6ece58", "#b5de2b", "#fde725"];
  var OLV = window.OLV = { views: {}, library: EC ? "echarts " + EC.version : null, modal: null };
  var records = {};

  // a record: inline (a JSON block of the page) or in a data file beside the page, loaded on
  // demand by a script element (file:// pages cannot fetch), which calls OLV_DATA
  function rec(id) {
    if (!records[id]) records[id] = JSON.parse(document.getElementById(id).textContent);
    return records[id];
  }
  window.OLV_DATA = function (id, r) { records[id] = r; };
  var waiting = 0;
  function load(ids, done) {
    var missing = ids.filter(function (id) { return !records[id] && !document.getElementById(id); });
    if (missing.length === 0) { done(); return; }
    var left = missing.length;
    waiting++;
    missing.forEach(function (id) {
      var sc = document.createElement("script");
      sc.src = spec.files[id];
      sc.onload = function () { if (--left === 0) { done(); waiting--; settle(); } };
      sc.onerror = function () { console.error("views: cannot load " + spec.files[id]); };
      document.body.appendChild(sc);
    });
  }
  var started = false;
  function settle() {
    if (started && waiting === 0) document.body.setAttribute("data-olv-ready", String(spec.views.length));
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function esc(s) {
    return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
  }
  // a token as the reader should see it: control characters as \xNN, in quotes
  function tok(s) {
    s = String(s === null || s === undefined ? "" : s);
    return "\u201c" + s.replace(/[\u0000-\u001f\u007f]/g, function (c) {
      return "\\x" + ("0" + c.charCodeAt(0).toString(16)).slice(-2);
    }) + "\u201d";
  }
  function fmt(v) {
    if (v === null || v === undefined || isNaN(v)) return "n/a";
    var a = Math.abs(v);
    if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(3);
    return String(Number(v.toPrecision(4)));
  }
  function hex(c) { return [parseInt(c.slice(1, 3), 16), parseInt(c.slice(3, 5), 16), parseInt(c.slice(5, 7), 16)]; }
  var RGB = PALETTE.map(hex);
  function colour(u) {   // u in [0, 1] -> [r, g, b]
    if (!(u >= 0)) u = 0;
    if (u > 1) u = 1;
    var x = u * (RGB.length - 1), i = Math.min(Math.floor(x), RGB.length - 2), f = x - i;
    return [0, 1, 2].map(function (k) { return Math.round(RGB[i][k] + f * (RGB[i + 1][k] - RGB[i][k])); });
  }

  // ------------------------------------------------------------ one heat map
  // o: nx, ny, value(x, y) (the colour value), lo, hi (its range), xlabel(i), ylabel(j),
  // tip(x, y) (the read-out text), click(x, y), height, scaleText(v) (colour bar labels),
  // readout (an element), labels (values written in the cells)
  function heat(box, o) {
    var h = { o: o, box: box };
    var tipText = function (x, y) { return o.tip(x, y); };
    function show(x, y, pinned) {
      if (!o.readout) return;
      o.readout.textContent = (pinned ? "pinned: " : "") + tipText(x, y);
      o.readout.setAttribute("data-cell", x + "," + y);
    }
    if (EC) {
      var div = el("div", "olv-chart");
      div.style.height = (o.height || 320) + "px";
      box.appendChild(div);
      var data = [];
      for (var y = 0; y < o.ny; y++) for (var x = 0; x < o.nx; x++) data.push([x, y, o.value(x, y)]);
      var xs = [], ys = [];
      for (var i = 0; i < o.nx; i++) xs.push(o.xlabel(i));
      for (var j = 0; j < o.ny; j++) ys.push(o.ylabel(j));
      var chart = EC.init(div, null, { renderer: "canvas" });
      chart.setOption({
        animation: false,
        grid: { left: o.left || 110, right: 90, top: 10, bottom: o.bottom || 50 },
        tooltip: { trigger: "item", confine: true, formatter: function (p) { return esc(tipText(p.value[0], p.value[1])); } },
        xAxis: { type: "category", data: xs, name: o.xname || "", nameLocation: "middle", nameGap: o.bottom ? o.bottom - 18 : 32,
                 axisLabel: { rotate: o.xrotate || 0, fontSize: 10, interval: o.xall && o.nx <= 64 ? 0 : "auto" }, splitArea: { show: false } },
        yAxis: { type: "category", data: ys, inverse: true, name: o.yname || "", axisLabel: { fontSize: 10, interval: o.ny <= 64 ? 0 : "auto" } },
        visualMap: { type: "continuous", min: o.lo, max: o.hi, dimension: 2, calculable: true, orient: "vertical",
                     right: 5, top: "middle", itemHeight: Math.max(80, Math.min(200, (o.height || 320) - 80)),
                     inRange: { color: PALETTE }, formatter: function (v) { return o.scaleText ? o.scaleText(v) : fmt(v); } },
        series: [{ type: "heatmap", data: data, progressive: 0, emphasis: { itemStyle: { borderColor: "#e22", borderWidth: 1 } },
                   label: { show: !!o.labels, fontSize: 10, formatter: function (p) { return o.labels ? o.labels(p.value[0], p.value[1]) : ""; } } }]
      });
      chart.on("mouseover", function (p) { if (p.value) show(p.value[0], p.value[1], false); });
      chart.on("click", function (p) { if (p.value) { show(p.value[0], p.value[1], true); if (o.click) o.click(p.value[0], p.value[1]); } });
      h.chart = chart;
      // new values of the same cells (a layer switch): the chart stays, only its data change
      // (disposing a chart while a frame is pending throws inside ECharts 6)
      h.update = function () {
        var d2 = [];
        for (var y = 0; y < o.ny; y++) for (var x = 0; x < o.nx; x++) d2.push([x, y, o.value(x, y)]);
        chart.setOption({ series: [{ data: d2 }] });
      };
      h.cell = function (x, y) {
        var pt = chart.convertToPixel({ seriesIndex: 0 }, [x, y]);
        var r = div.getBoundingClientRect();
        return { x: r.left + pt[0], y: r.top + pt[1] };
      };
      window.addEventListener("resize", function () { chart.resize(); });
    } else {
      // the plain fallback: one pixel block per cell on a canvas, the read-out on hover
      var wrap = el("div", "olv-canvas");
      var cv = document.createElement("canvas");
      var cw = Math.max(2, Math.min(24, Math.floor(760 / o.nx))), ch = Math.max(2, Math.min(18, Math.floor((o.height || 320) / o.ny)));
      cv.width = o.nx * cw;
      cv.height = o.ny * ch;
      var g = cv.getContext("2d");
      h.update = function () {
        for (var yy = 0; yy < o.ny; yy++) for (var xx = 0; xx < o.nx; xx++) {
          var c = colour((o.value(xx, yy) - o.lo) / ((o.hi - o.lo) || 1));
          g.fillStyle = "rgb(" + c.join(",") + ")";
          g.fillRect(xx * cw, yy * ch, cw, ch);
        }
      };
      h.update();
      wrap.appendChild(cv);
      box.appendChild(wrap);
      var at = function (ev) {
        var r = cv.getBoundingClientRect();
        return [Math.floor((ev.clientX - r.left) / cw), Math.floor((ev.clientY - r.top) / ch)];
      };
      cv.addEventListener("mousemove", function (ev) {
        var p = at(ev);
        if (p[0] >= 0 && p[0] < o.nx && p[1] >= 0 && p[1] < o.ny) { show(p[0], p[1], false); cv.title = tipText(p[0], p[1]); }
      });
      cv.addEventListener("click", function (ev) {
        var p = at(ev);
        if (p[0] >= 0 && p[0] < o.nx && p[1] >= 0 && p[1] < o.ny) { show(p[0], p[1], true); if (o.click) o.click(p[0], p[1]); }
      });
      h.cell = function (x, y) {
        var r = cv.getBoundingClientRect();
        return { x: r.left + (x + 0.5) * cw, y: r.top + (y + 0.5) * ch };
      };
    }
    return h;
  }

  // ------------------------------------------------------------ the views
  function layerControl(box, layers, bus) {
    var bar = el("div", "olv-controls");
    bar.appendChild(el("span", null, "layer "));
    var buttons = layers.map(function (l, i) {
      var b = el("button", "olv-layer", String(l));
      b.type = "button";
      b.addEventListener("click", function () { bus.set(i); });
      bar.appendChild(b);
      return b;
    });
    bus.on(function (i) { buttons.forEach(function (b, k) { b.classList.toggle("on", k === i); }); });
    box.appendChild(bar);
  }
  function makeBus(start) {
    var fns = [], bus = { value: start };
    bus.on = function (f) { fns.push(f); f(bus.value); };
    bus.set = function (v) { bus.value = v; fns.forEach(function (f) { f(v); }); };
    return bus;
  }
  function tokenLabel(r, t) { return t + " " + tok(r.tokens[t]); }
  // the colour scale of |h| (log): from the 2nd percentile of the non-zero values (below: the
  // darkest colour) to the largest, so that the bulk of the values spreads over the colours
  function absRange(rs) {
    var all = [], hi = 0;
    rs.forEach(function (r) { r.h.forEach(function (L) { L.forEach(function (row) { row.forEach(function (v) {
      var a = Math.abs(v === null ? NaN : v);
      if (a > 0) { all.push(a); if (a > hi) hi = a; }
    }); }); }); });
    all.sort(function (a, b) { return a - b; });
    var lo = all.length ? all[Math.floor(0.02 * (all.length - 1))] : 1e-4;
    if (!(lo < hi)) lo = hi / 10;
    return { lo: Math.log10(Math.max(lo, 1e-8)), hi: Math.log10(Math.max(hi, 1e-8)) };
  }
  // the layer with the largest |h| (where a massive activation is, if any)
  function peakLayer(r) {
    var best = 0, at = 0;
    r.h.forEach(function (L, i) { L.forEach(function (row) { row.forEach(function (v) { if (Math.abs(v) > best) { best = Math.abs(v); at = i; } }); }); });
    return at;
  }

  function activations(box, r, ctx) {
    var bus = ctx.bus || makeBus(peakLayer(r));
    if (!ctx.bus) layerControl(box, r.layers, bus);
    var range = ctx.range || absRange([r]);
    var readout = el("div", "olv-readout", "hover a cell: its layer, token, channel and value");
    var holder = el("div");
    box.appendChild(holder);
    box.appendChild(readout);
    var view = { kind: "activations", readout: readout, heats: [] };
    var H = null, li = 0;
    bus.on(function (k) {
      li = k;
      H = r.h[li];
      view.layer = li;
      if (view.heats[0]) { view.heats[0].update(); return; }
      view.heats = [heat(holder, {
        nx: r.channels.length, ny: r.tokens.length, lo: range.lo, hi: range.hi, readout: readout,
        height: Math.max(260, Math.min(900, r.tokens.length * 13 + 70)),
        value: function (x, y) { var v = H[y][x]; return Math.log10(Math.max(Math.abs(v === null ? 0 : v), 1e-8)); },
        scaleText: function (v) { return "|h| " + fmt(Math.pow(10, v)); },
        xlabel: function (i) { return String(r.channels[i]); }, ylabel: function (j) { return tokenLabel(r, j); },
        xname: "channel", left: 120,
        tip: function (x, y) {
          var v = H[y][x];
          return "layer " + r.layers[li] + " · token " + y + " " + tok(r.tokens[y]) + " · channel " + r.channels[x] +
            " · h = " + fmt(v) + " (|h| = " + fmt(Math.abs(v)) + ")";
        }
      })];
    });
    return view;
  }

  function firstToken(box, r) {
    var f = r.first, rows = r.layers.map(function (l, i) {
      return { layer: l, top1: f.top1[i], ch: f.top_channel[i], others: f.others_top1[i], median: f.median[i], norm: f.norm[i] };
    });
    var readout = el("div", "olv-readout", "");
    var view = { kind: "first_token", readout: readout, heats: [] };
    if (EC) {
      var div = el("div", "olv-chart");
      div.style.height = "280px";
      box.appendChild(div);
      var chart = EC.init(div, null, { renderer: "canvas" });
      chart.setOption({
        animation: false,
        legend: { top: 0, type: "scroll", textStyle: { fontSize: 10 } },
        grid: { left: 70, right: 30, top: 52, bottom: 45 },
        tooltip: { trigger: "axis", confine: true, formatter: function (ps) {
          var k = ps[0].dataIndex, x = rows[k];
          return esc("layer " + x.layer + ": first token " + tok(r.tokens[0]) + " top-1 |h| " + fmt(x.top1) + " in channel " + x.ch +
            ", ‖h‖ " + fmt(x.norm) + "; other tokens' top-1 " + fmt(x.others) + "; median |h| " + fmt(x.median) +
            "; top-1 / median " + fmt(x.top1 / x.median));
        } },
        xAxis: { type: "category", data: r.layers.map(String), name: "layer", nameLocation: "middle", nameGap: 28 },
        yAxis: { type: "log", name: "|h| (log scale)" },
        series: [
          { name: "first token top-1", type: "line", data: rows.map(function (x) { return x.top1; }) },
          { name: "others' top-1", type: "line", data: rows.map(function (x) { return x.others; }) },
          { name: "median |h|", type: "line", data: rows.map(function (x) { return x.median; }) }
        ]
      });
      view.chart = chart;
    }
    // the numbers, always (the fallback's only view, the exact values beside the chart)
    var t = el("table", "olv-table");
    var hr = el("tr");
    ["layer", "first token top-1 |h|", "its channel", "‖h₀‖", "others' top-1", "median |h|", "top-1 / median"].forEach(function (s) { hr.appendChild(el("th", null, s)); });
    t.appendChild(hr);
    rows.forEach(function (x) {
      var tr = el("tr");
      [x.layer, fmt(x.top1), x.ch, fmt(x.norm), fmt(x.others), fmt(x.median), fmt(x.top1 / x.median)].forEach(function (s) { tr.appendChild(el("td", null, s)); });
      t.appendChild(tr);
    });
    box.appendChild(t);
    return view;
  }

  var modals = {};
  function openHead(r, li, hh) {
    closeModal();
    var mkey = r.key + ":" + r.layers[li] + ":" + hh;
    if (modals[mkey]) {
      OLV.modal = modals[mkey];
      OLV.modal.element.style.display = "";
      document.body.setAttribute("data-olv-modal", mkey);
      return;
    }
    var back = el("div", "olv-modal");
    var panel = el("div", "olv-modal-panel");
    var close = el("button", "olv-close", "close ✕");
    close.type = "button";
    close.addEventListener("click", closeModal);
    var alpha = r.sink[li][hh];
    panel.appendChild(close);
    panel.appendChild(el("h3", null, r.label + " — layer " + r.layers[li] + ", head " + hh + ": α = " + fmt(alpha) +
      (alpha > r.sink_eps ? " (a sink head)" : "")));
    var readout = el("div", "olv-readout", "hover a cell: query token → key token and the probability");
    var box = el("div");
    panel.appendChild(box);
    panel.appendChild(readout);
    back.appendChild(panel);
    back.addEventListener("click", function (ev) { if (ev.target === back) closeModal(); });
    document.body.appendChild(back);
    var A = r.attn[li][hh], n = r.tokens.length;
    var hm = heat(box, {
      // colours from 0 to the head's largest probability: a head that spreads its attention
      // (p near 1/T everywhere) still shows its pattern
      nx: n, ny: n, lo: 0, hi: headMax(A), readout: readout, height: Math.max(360, Math.min(760, n * 12 + 130)), xall: true,
      value: function (x, y) { return A[y][x] === null ? 0 : A[y][x]; },
      xlabel: function (i) { return tokenLabel(r, i); }, ylabel: function (j) { return tokenLabel(r, j); },
      xname: "key (attended to)", yname: "query", xrotate: 90, bottom: 110, left: 120,
      tip: function (x, y) {
        return "layer " + r.layers[li] + " head " + hh + " · query " + y + " " + tok(r.tokens[y]) + " → key " + x + " " +
          tok(r.tokens[x]) + " · p = " + fmt(A[y][x]);
      }
    });
    OLV.modal = modals[mkey] = { layer: r.layers[li], head: hh, heat: hm, readout: readout, element: back };
    document.body.setAttribute("data-olv-modal", mkey);
  }
  function headMax(A) {
    var m = 0;
    A.forEach(function (row) { row.forEach(function (v) { if (v > m) m = v; }); });
    return m > 0 ? m : 1;
  }
  function closeModal() {
    if (!OLV.modal) return;
    OLV.modal.element.style.display = "none";
    OLV.modal = null;
    document.body.removeAttribute("data-olv-modal");
  }
  document.addEventListener("keydown", function (ev) { if (ev.key === "Escape") closeModal(); });

  function sinkMap(box, r) {
    var readout = el("div", "olv-readout", "hover a cell: the head's α; click: its attention, enlarged");
    var view = { kind: "sink_map", readout: readout };
    var nh = r.n_heads;
    view.heats = [heat(box, {
      nx: nh, ny: r.layers.length, lo: 0, hi: 1, readout: readout, height: Math.max(160, r.layers.length * 34 + 60),
      value: function (x, y) { return r.sink[y][x]; },
      labels: function (x, y) { return fmt(r.sink[y][x]) + (r.sink[y][x] > r.sink_eps ? " ●" : ""); },
      xlabel: function (i) { return "head " + i; }, ylabel: function (j) { return "layer " + r.layers[j]; }, left: 70,
      tip: function (x, y) {
        var a = r.sink[y][x];
        return "layer " + r.layers[y] + " head " + x + " · α = " + fmt(a) + (a > r.sink_eps ? " > ε = " + r.sink_eps + ": a sink head" : " ≤ ε = " + r.sink_eps);
      },
      click: function (x, y) { openHead(r, y, x); }
    })];
    var n = 0;
    r.sink.forEach(function (L) { L.forEach(function (a) { if (a > r.sink_eps) n++; }); });
    box.appendChild(el("p", "olv-note", n + " of " + (r.layers.length * nh) + " heads are sinks (α > " + r.sink_eps +
      ") on this sequence of " + r.n_tokens + " tokens (Gu et al.'s rate over many sequences is in the run's summary)."));
    return view;
  }

  function attentionGrid(box, r) {
    var view = { kind: "attention_grid", thumbs: {} };
    var n = r.tokens.length, table = el("table", "olv-grid");
    var hr = el("tr");
    hr.appendChild(el("th", null, ""));
    for (var h = 0; h < r.n_heads; h++) hr.appendChild(el("th", null, "head " + h));
    table.appendChild(hr);
    r.layers.forEach(function (l, li) {
      var tr = el("tr");
      tr.appendChild(el("th", null, "layer " + l));
      for (var hh = 0; hh < r.n_heads; hh++) {
        var td = el("td");
        var a = r.sink[li][hh];
        var cv = document.createElement("canvas");
        cv.width = n;
        cv.height = n;
        cv.className = "olv-thumb" + (a > r.sink_eps ? " sink" : "");
        var g = cv.getContext("2d"), img = g.createImageData(n, n), A = r.attn[li][hh], top = headMax(A);
        for (var y = 0; y < n; y++) for (var x = 0; x < n; x++) {
          var c = colour(Math.sqrt((A[y][x] || 0) / top)), o = 4 * (y * n + x);
          img.data[o] = c[0]; img.data[o + 1] = c[1]; img.data[o + 2] = c[2]; img.data[o + 3] = 255;
        }
        g.putImageData(img, 0, 0);
        cv.title = "layer " + l + " head " + hh + ": α = " + fmt(a) + " (click to enlarge)";
        cv.setAttribute("data-layer", l);
        cv.setAttribute("data-head", hh);
        (function (li2, h2) { cv.addEventListener("click", function () { openHead(r, li2, h2); }); })(li, hh);
        td.appendChild(cv);
        td.appendChild(el("div", "olv-cap", "α " + fmt(a) + (a > r.sink_eps ? " sink" : "")));
        tr.appendChild(td);
        view.thumbs[l + ":" + hh] = cv;
      }
      table.appendChild(tr);
    });
    box.appendChild(table);
    box.appendChild(el("p", "olv-note", "Colour: √(p / the head's largest p), so that small probabilities and spread heads show; the first " + n + " tokens of the sequence, " +
      "queries down, keys across. A red frame marks a sink head (α > " + r.sink_eps + ")."));
    return view;
  }

  var RENDER = { activations: activations, first_token: firstToken, sink_map: sinkMap, attention_grid: attentionGrid };
  var TITLE = {
    activations: "|h| per token and channel: hover for the value, the token and the channel; click to pin",
    first_token: "The first token's state across the layers (the massive activation)",
    sink_map: "Sink map: α = mean attention to the first token, per layer × head",
    attention_grid: "Attention of every head (rows: layers, columns: heads): click a thumbnail to enlarge"
  };

  OLV.ms = {};   // milliseconds each view took to draw
  function render(s) {
    var t0 = performance.now();
    try { draw(s); } finally { OLV.ms[s.id] = Math.round(performance.now() - t0); }
  }
  function draw(s) {
    var box = document.getElementById(s.id);
    var of = s.kind === "side_by_side" ? s.of : s.kind;
    box.appendChild(el("h2", null, s.title || ((s.kind === "side_by_side" ? "Side by side — " : "") + TITLE[of])));
    if (s.note) box.appendChild(el("p", "olv-note", s.note));
    if (s.kind !== "side_by_side") {
      load(s.data, function () { OLV.views[s.id] = RENDER[of](box, rec(s.data[0]), {}); });
      return;
    }
    // the same view of every chosen model on the same text: one layer control, one colour scale
    var ids = s.data, chosen = ids.map(function (_, i) { return i < (s.show || 3); });
    var bar = el("div", "olv-controls olv-choose");
    bar.appendChild(el("span", null, "models: "));
    ids.forEach(function (id, i) {
      var lab = el("label", "olv-pick"), cb = document.createElement("input");
      cb.type = "checkbox";
      cb.checked = chosen[i];
      cb.setAttribute("data-rec", id);
      cb.addEventListener("change", function () { chosen[i] = cb.checked; draw(); });
      lab.appendChild(cb);
      lab.appendChild(document.createTextNode(" " + spec.labels[id]));
      bar.appendChild(lab);
    });
    if (ids.length > 1) box.appendChild(bar);
    var view = OLV.views[s.id] = { kind: "side_by_side", of: of, parts: [] };
    var drawn = {};   // one area per choice of models, kept hidden when another is shown
    function draw() {
      var sel = ids.filter(function (_, i) { return chosen[i]; }), key = sel.join(",");
      Object.keys(drawn).forEach(function (k) { drawn[k].area.style.display = k === key ? "" : "none"; });
      if (drawn[key]) { view.ids = sel; view.parts = drawn[key].parts; return; }
      var area = el("div");
      box.appendChild(area);
      drawn[key] = { area: area, parts: [] };
      load(sel, function () {
        var rs = sel.map(rec), ctx = {};
        if (of === "activations" && rs.length > 0) {
          ctx.bus = makeBus(peakLayer(rs[0]));
          layerControl(area, rs[0].layers, ctx.bus);
          ctx.range = absRange(rs);
        }
        var row = el("div", "olv-side");
        area.appendChild(row);
        view.ids = sel;
        // every column in place before any chart measures its width
        var cols = rs.map(function (r) {
          var col = el("div", "olv-col");
          col.appendChild(el("h3", null, r.label));
          if (r.note) col.appendChild(el("p", "olv-note", r.note));
          row.appendChild(col);
          return col;
        });
        view.parts = drawn[key].parts = rs.map(function (r, i) {
          if ((of === "sink_map" || of === "attention_grid") && !r.attn) { cols[i].appendChild(el("p", "olv-note", "no attention recorded")); return null; }
          return RENDER[of](cols[i], r, ctx);
        });
      });
    }
    draw();
  }

  var status = document.getElementById("olv-status");
  if (EC) {
    status.textContent = "Charts: Apache ECharts " + EC.version + " (" + spec.assets + "/" + spec.asset + ").";
  } else {
    status.className += " olv-missing";
    status.textContent = "The charting library (" + spec.library + ") is not next to this page" +
      (spec.assets ? " (" + spec.assets + "/" + spec.asset + ")" : "") +
      ": the views are plain heat maps. To install it: make views-assets, then make gallery (or make report).";
  }
  // the first view now, the others when they come near the window (a long page of several
  // models costs its drawing only where the reader looks); OLV.ensure draws one at once
  var later = {};
  function ensure(id) { var s = later[id]; if (s) { delete later[id]; render(s); } }
  var io = ("IntersectionObserver" in window) ? new IntersectionObserver(function (es) {
    es.forEach(function (e) { if (e.isIntersecting) { io.unobserve(e.target); ensure(e.target.id); } });
  }, { rootMargin: "300px" }) : null;
  spec.views.forEach(function (s, i) {
    if (i === 0 || !io) { render(s); return; }
    later[s.id] = s;
    io.observe(document.getElementById(s.id));
  });
  OLV.ensure = ensure;
  OLV.ensureAll = function () { spec.views.forEach(function (s) { ensure(s.id); }); return true; };
  started = true;
  // the cell under a pointer, for a scripted hover (the browser test): page coordinates of cell
  // (x, y) of heat map k of view id (k counts the side-by-side parts' heat maps in order)
  OLV.cell = function (id, k, x, y) {
    ensure(id);
    var v = OLV.views[id], hs = [];
    (v.parts || [v]).forEach(function (p) { if (p && p.heats) hs = hs.concat(p.heats); });
    return hs[k].cell(x, y);
  };
  settle();
})();
