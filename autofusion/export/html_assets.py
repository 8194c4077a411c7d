"""The HTML report's style sheet and script, inlined into every page (no file is fetched at view
time, no library is used).

The script works on the SVG that `dot` wrote: every node is a `<g class="node">` whose id is a key
of the page's JSON (`#af-data`), every cluster a `<g class="cluster">`. It gives each view pan
(drag), zoom (wheel, buttons) and fit by moving the SVG's viewBox; search by node name (a node of
the fused graph is found by the ONNX nodes it stands for too), with Enter for the next match;
details of a node on click and a short tooltip on hover; and a link between the views: selecting
a node selects the nodes that stand for the same ONNX nodes in the other view. The address can
say what to show: `#find=NAME` searches on load, `#layout=before|after|both` picks the views.
When it has set up, it marks <html data-af-ready="yes">; an error is written to data-af-error
(the headless-browser test reads both).
"""

CSS = r"""
:root { --fg: #1d1d1f; --muted: #666; --line: #ddd; --hit: #ff2d95; --sel: #000; }
* { box-sizing: border-box; }
body { margin: 0; font: 13px/1.4 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: var(--fg); }
header { padding: 10px 16px 4px; }
header h1 { font-size: 17px; margin: 0 0 2px; }
header .af-sub { color: var(--muted); }
#af-summary { display: flex; flex-wrap: wrap; gap: 8px 28px; padding: 4px 16px 8px; align-items: flex-start; }
#af-summary h2 { font-size: 13px; margin: 6px 0 4px; }
table { border-collapse: collapse; }
th, td { text-align: left; padding: 2px 8px 2px 0; vertical-align: top; border-bottom: 1px solid #eee; }
th { font-weight: 600; color: var(--muted); }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
#af-summary td:first-child { white-space: nowrap; }
.af-swatch { display: inline-block; width: 11px; height: 11px; border: 1.5px solid; border-radius: 3px; vertical-align: -1px; margin-right: 4px; }
.af-swatch.af-dashed { border-style: dashed; }
.af-misses { max-height: 150px; overflow: auto; }
.af-misses td { font-size: 12px; }
a.af-find { color: #0645ad; cursor: pointer; text-decoration: none; }
a.af-find:hover { text-decoration: underline; }
.af-toolbar { display: flex; flex-wrap: wrap; gap: 6px 10px; align-items: center; padding: 6px 16px; border-top: 1px solid var(--line); border-bottom: 1px solid var(--line); background: #fafafa; }
.af-toolbar button { font: inherit; padding: 2px 9px; border: 1px solid #bbb; background: #fff; border-radius: 4px; cursor: pointer; }
.af-toolbar button.af-on { background: #1d1d1f; color: #fff; border-color: #1d1d1f; }
#af-search { font: inherit; width: 280px; padding: 3px 6px; border: 1px solid #bbb; border-radius: 4px; }
#af-found { color: var(--muted); min-width: 70px; }
.af-legend { display: flex; flex-wrap: wrap; gap: 4px 12px; color: var(--muted); font-size: 12px; }
.af-main { display: flex; height: calc(100vh - 90px); min-height: 420px; }
.af-pane { flex: 1 1 0; display: flex; flex-direction: column; min-width: 0; border-right: 1px solid var(--line); }
.af-pane[hidden] { display: none; }
.af-pane-title { padding: 3px 10px; font-weight: 600; background: #f3f3f3; border-bottom: 1px solid var(--line); }
.af-canvas { flex: 1; position: relative; overflow: hidden; cursor: grab; background: #fff; }
.af-canvas.af-dragging { cursor: grabbing; }
.af-canvas > svg { position: absolute; inset: 0; width: 100%; height: 100%; user-select: none; }
#af-details { width: 330px; flex: none; overflow: auto; padding: 8px 12px; font-size: 12px; background: #fcfcfc; }
#af-details h3 { font-size: 13px; margin: 0 0 2px; word-break: break-all; }
#af-details h4 { font-size: 12px; margin: 10px 0 2px; color: var(--muted); }
#af-details td { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 11px; word-break: break-all; }
#af-details .af-op { color: var(--muted); margin-bottom: 6px; }
#af-details .af-warn { color: #b00000; }
#af-details ul { margin: 2px 0; padding-left: 16px; }
#af-tip { position: fixed; pointer-events: none; background: rgba(20,20,20,.92); color: #fff; padding: 4px 7px; border-radius: 4px; font-size: 11px; max-width: 420px; z-index: 10; display: none; white-space: pre-line; }
g.node { cursor: pointer; }
g.node.af-hit > polygon, g.node.af-hit > path, g.node.af-hit > ellipse { stroke: var(--hit); stroke-width: 4px; }
g.node.af-peer > polygon, g.node.af-peer > path, g.node.af-peer > ellipse { stroke: var(--sel); stroke-width: 3px; stroke-dasharray: 5 2; }
g.node.af-selected > polygon, g.node.af-selected > path, g.node.af-selected > ellipse { stroke: var(--sel); stroke-width: 5px; }
g.cluster.af-group > text { font-weight: 600; }
"""

JS = r"""
(function () {
  "use strict";
  var root = document.documentElement;
  window.addEventListener("error", function (e) { root.setAttribute("data-af-error", String(e.message)); });
  var data = JSON.parse(document.getElementById("af-data").textContent);
  var facts = {};                       // box id -> facts, both views
  ["before", "after"].forEach(function (v) { Object.keys(data[v]).forEach(function (id) { facts[id] = data[v][id]; }); });
  var viewOf = function (id) { return id.indexOf("before-") === 0 ? "before" : "after"; };
  var panes = {};
  var selected = [], hits = [], matches = [], matchAt = -1;
  var READABLE = 0.6;                   // pixels per SVG unit at which 10-point labels still read

  function box(id) { return document.getElementById(id); }

  function setupPane(view) {
    var pane = document.getElementById("af-pane-" + view);
    var canvas = pane.querySelector(".af-canvas"), svg = canvas.querySelector("svg");
    var vb = svg.viewBox.baseVal;
    var p = { view: view, pane: pane, canvas: canvas, svg: svg, graph: svg.querySelector("g.graph"),
              full: { x: vb.x, y: vb.y, w: vb.width, h: vb.height }, vb: null };
    svg.removeAttribute("width"); svg.removeAttribute("height");
    svg.setAttribute("preserveAspectRatio", "xMidYMid meet");
    svg.querySelectorAll("g.node > title").forEach(function (t) { t.remove(); });
    panes[view] = p;
    canvas.addEventListener("wheel", function (e) {
      e.preventDefault();
      var pt = toGraph(p, e.clientX, e.clientY);
      zoomAt(p, Math.pow(1.0015, e.deltaY), pt.x, pt.y);
    }, { passive: false });
    var drag = null;
    canvas.addEventListener("pointerdown", function (e) {
      if (e.button !== 0) return;
      drag = { x: e.clientX, y: e.clientY, vb: p.vb.slice(), moved: false };
      canvas.setPointerCapture(e.pointerId);
    });
    canvas.addEventListener("pointermove", function (e) {
      if (!drag) return;
      var dx = e.clientX - drag.x, dy = e.clientY - drag.y;
      if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
      drag.moved = true; canvas.classList.add("af-dragging");
      var s = unitsPerPixel(p);
      setViewBox(p, [drag.vb[0] - dx * s, drag.vb[1] - dy * s, drag.vb[2], drag.vb[3]]);
    });
    canvas.addEventListener("pointerup", function (e) {
      var wasDrag = drag && drag.moved;
      drag = null; canvas.classList.remove("af-dragging");
      if (wasDrag) return;
      var hit = document.elementsFromPoint(e.clientX, e.clientY).map(function (el) { return el.closest && el.closest("g.node"); })
        .filter(Boolean)[0];
      if (hit) select(hit.id, true);
    });
    svg.addEventListener("mouseover", function (e) {
      var g = e.target.closest && e.target.closest("g.node");
      if (g && facts[g.id]) showTip(g.id, e);
    });
    svg.addEventListener("mousemove", function (e) { if (tip.style.display === "block") placeTip(e); });
    svg.addEventListener("mouseout", function (e) {
      var g = e.target.closest && e.target.closest("g.node");
      if (g && !(e.relatedTarget && g.contains(e.relatedTarget))) tip.style.display = "none";
    });
  }

  function size(p) { return { w: p.canvas.clientWidth || 1, h: p.canvas.clientHeight || 1 }; }
  function unitsPerPixel(p) { var c = size(p); return Math.max(p.vb[2] / c.w, p.vb[3] / c.h); }
  function setViewBox(p, vb) { p.vb = vb; p.svg.setAttribute("viewBox", vb.map(function (n) { return n.toFixed(2); }).join(" ")); }
  function viewAround(p, cx, cy, w) {   // a viewBox centred at (cx, cy), w wide, in the canvas's aspect
    var c = size(p), h = w * c.h / c.w;
    setViewBox(p, [cx - w / 2, cy - h / 2, w, h]);
  }
  function toGraph(p, clientX, clientY) {
    var r = p.canvas.getBoundingClientRect(), s = unitsPerPixel(p), c = size(p);
    var x0 = p.vb[0] + p.vb[2] / 2 - (c.w / 2) * s, y0 = p.vb[1] + p.vb[3] / 2 - (c.h / 2) * s;
    return { x: x0 + (clientX - r.left) * s, y: y0 + (clientY - r.top) * s };
  }
  function zoomAt(p, factor, x, y) {
    var w = Math.min(Math.max(p.vb[2] * factor, 20), Math.max(p.full.w, p.full.h) * 4);
    var f = w / p.vb[2];
    var cx = x + (p.vb[0] + p.vb[2] / 2 - x) * f, cy = y + (p.vb[1] + p.vb[3] / 2 - y) * f;
    viewAround(p, cx, cy, w);
  }
  function zoomCentre(p, factor) { zoomAt(p, factor, p.vb[0] + p.vb[2] / 2, p.vb[1] + p.vb[3] / 2); }
  function fit(p) {
    var c = size(p), f = p.full, w = Math.max(f.w, f.h * c.w / c.h);
    viewAround(p, f.x + f.w / 2, f.y + f.h / 2, w);
  }
  function start(p) {   // a tall graph starts at its top at full size, centred on its first input; others fit whole
    var c = size(p), f = p.full;
    if (Math.min(c.w / f.w, c.h / f.h) >= READABLE) { fit(p); return; }   // whole and still readable
    var w = Math.min(f.w + 16, c.w * 0.75), h = w * c.h / c.w, cx = f.x + f.w / 2;
    var first = p.svg.querySelector("g.node");
    if (first && w < f.w) { var b = bbox(p, first); cx = Math.min(Math.max(b.x + b.w / 2, f.x + w / 2), f.x + f.w - w / 2); }
    setViewBox(p, [cx - w / 2, f.y, w, h]);
  }
  function bbox(p, el) {   // the element's box in the SVG's coordinates
    var b = el.getBBox(), m = p.graph.transform.baseVal.consolidate();
    var a = m ? m.matrix : { a: 1, d: 1, e: 0, f: 0 };
    return { x: a.a * b.x + a.e, y: a.d * b.y + a.f, w: a.a * b.width, h: a.d * b.height };
  }
  function reveal(ids) {   // centre each visible view on its boxes among ids
    Object.keys(panes).forEach(function (v) {
      var p = panes[v];
      if (p.pane.hidden) return;
      var els = ids.filter(function (id) { return viewOf(id) === v; }).map(box).filter(Boolean);
      if (!els.length) return;
      var bs = els.map(function (el) { return bbox(p, el); });
      var x0 = Math.min.apply(null, bs.map(function (b) { return b.x; })), y0 = Math.min.apply(null, bs.map(function (b) { return b.y; }));
      var x1 = Math.max.apply(null, bs.map(function (b) { return b.x + b.w; })), y1 = Math.max.apply(null, bs.map(function (b) { return b.y + b.h; }));
      var c = size(p), w = p.vb[2], need = Math.max(x1 - x0, (y1 - y0) * c.w / c.h) * 1.3;
      if (w < need) w = need;                          // all of them in view
      if (w > Math.max(need, c.w / READABLE)) w = Math.max(need, c.w);   // close enough to read
      viewAround(p, (x0 + x1) / 2, (y0 + y1) / 2, w);
    });
  }

  function mark(ids, cls) { ids.forEach(function (id) { var el = box(id); if (el) el.classList.add(cls); }); }
  function unmark(ids, cls) { ids.forEach(function (id) { var el = box(id); if (el) el.classList.remove(cls); }); }

  function select(id, fromClick) {
    var f = facts[id];
    if (!f) return;
    if (f.stub_of) { select(f.stub_of, fromClick); return; }
    unmark(selected, "af-selected"); unmark(selected, "af-peer");
    var peers = f.peers || [];
    selected = [id].concat(peers);
    mark([id], "af-selected"); mark(peers, "af-peer");
    showDetails(id);
    reveal(fromClick ? peers : selected);
  }

  function el(tag, text, cls) { var e = document.createElement(tag); if (text != null) e.textContent = text; if (cls) e.className = cls; return e; }
  function findLink(name) {
    var a = el("a", name, "af-find"); a.href = "#"; a.setAttribute("data-find", name); return a;
  }
  function table(rows) {
    var t = el("table");
    rows.forEach(function (r) { var tr = el("tr"); r.forEach(function (c) { tr.appendChild(el("td", c)); }); t.appendChild(tr); });
    return t;
  }
  function showDetails(id) {
    var f = facts[id], d = document.getElementById("af-details");
    d.textContent = "";
    d.appendChild(el("h3", f.name));
    d.appendChild(el("div", f.op + (viewOf(id) === "before" ? " — before fusion" : " — after fusion"), "af-op"));
    if (f.rule) { var r = el("div"); r.appendChild(el("b", "Made by ")); r.appendChild(document.createTextNode(f.rule)); d.appendChild(r); }
    if (f.fate) d.appendChild(el("div", f.fate));
    if (f.runs) { var ru = el("div"); ru.appendChild(el("b", "Runs on ")); ru.appendChild(document.createTextNode(f.runs)); d.appendChild(ru); }
    if (f.time) { var ti = el("div"); ti.appendChild(el("b", "Time ")); ti.appendChild(document.createTextNode(f.time)); d.appendChild(ti); }
    if (f.near_misses) {
      d.appendChild(el("h4", "Not fused", "af-warn"));
      var ul = el("ul"); f.near_misses.forEach(function (t) { ul.appendChild(el("li", t, "af-warn")); }); d.appendChild(ul);
    }
    if (f.origin) {
      d.appendChild(el("h4", "Stands for " + f.origin.length + " ONNX node" + (f.origin.length > 1 ? "s" : "")));
      var ol = el("ul"); f.origin.forEach(function (n) { var li = el("li"); li.appendChild(findLink(n)); ol.appendChild(li); }); d.appendChild(ol);
    }
    if (f.readers) d.appendChild(el("div", "Read by " + f.readers + " nodes (drawn as stubs beside each)"));
    if (f.inputs && f.inputs.length) { d.appendChild(el("h4", "Inputs")); d.appendChild(table(f.inputs)); }
    if (f.outputs && f.outputs.length) { d.appendChild(el("h4", "Outputs")); d.appendChild(table(f.outputs)); }
    var attrs = Object.keys(f.attrs || {});
    if (attrs.length) { d.appendChild(el("h4", "Attributes")); d.appendChild(table(attrs.map(function (k) { return [k, f.attrs[k]]; }))); }
  }

  var tip = document.getElementById("af-tip");
  function showTip(id, e) {
    var f = facts[id];
    if (f.stub_of) f = facts[f.stub_of];
    var out = (f.outputs || f.inputs || [])[0];
    tip.textContent = f.name + "\n" + f.op + (out ? "  " + out[1] : "") + (f.rule ? "\n" + f.rule : "") + (f.time ? "\n" + f.time : "") +
      (f.near_misses ? "\nnot fused: " + f.near_misses[0] : "");
    tip.style.display = "block"; placeTip(e);
  }
  function placeTip(e) { tip.style.left = (e.clientX + 14) + "px"; tip.style.top = (e.clientY + 12) + "px"; }

  function search(query) {
    unmark(hits, "af-hit"); hits = []; matches = []; matchAt = -1;
    var q = query.trim().toLowerCase(), found = document.getElementById("af-found");
    if (!q) { found.textContent = ""; return; }
    Object.keys(facts).forEach(function (id) {
      var f = facts[id];
      if (f.stub_of || !box(id)) return;
      var names = [f.name].concat(f.origin || []);
      if (names.some(function (n) { return n.toLowerCase().indexOf(q) >= 0; })) matches.push(id);
    });
    hits = matches.slice(0, 2000);
    mark(hits, "af-hit");
    found.textContent = matches.length ? matches.length + " found" : "not found";
    if (matches.length) next();
  }
  function next() {
    if (!matches.length) return;
    matchAt = (matchAt + 1) % matches.length;
    document.getElementById("af-found").textContent = (matchAt + 1) + " / " + matches.length;
    select(matches[matchAt], false);
  }

  function setLayout(which) {
    ["before", "after"].forEach(function (v) { panes[v].pane.hidden = !(which === "both" || which === v); });
    document.querySelectorAll("[data-layout]").forEach(function (b) { b.classList.toggle("af-on", b.getAttribute("data-layout") === which); });
    Object.keys(panes).forEach(function (v) { var p = panes[v]; if (!p.pane.hidden) { if (!p.vb) start(p); else setViewBox(p, p.vb); } });
    if (selected.length) reveal(selected);
  }

  setupPane("before"); setupPane("after");
  document.querySelectorAll("[data-layout]").forEach(function (b) {
    b.addEventListener("click", function () { setLayout(b.getAttribute("data-layout")); });
  });
  var input = document.getElementById("af-search");
  input.addEventListener("input", function () { search(input.value); });
  input.addEventListener("keydown", function (e) { if (e.key === "Enter") { e.preventDefault(); next(); } });
  document.getElementById("af-zoom-in").addEventListener("click", function () { Object.values(panes).forEach(function (p) { if (!p.pane.hidden) zoomCentre(p, 1 / 1.4); }); });
  document.getElementById("af-zoom-out").addEventListener("click", function () { Object.values(panes).forEach(function (p) { if (!p.pane.hidden) zoomCentre(p, 1.4); }); });
  document.getElementById("af-fit").addEventListener("click", function () { Object.values(panes).forEach(function (p) { if (!p.pane.hidden) fit(p); }); });
  document.addEventListener("click", function (e) {
    var a = e.target.closest && e.target.closest("a.af-find");
    if (!a) return;
    e.preventDefault();
    input.value = a.getAttribute("data-find"); search(input.value);
    document.getElementById("af-graphs").scrollIntoView();
  });
  window.addEventListener("resize", function () { Object.values(panes).forEach(function (p) { if (p.vb && !p.pane.hidden) viewAround(p, p.vb[0] + p.vb[2] / 2, p.vb[1] + p.vb[3] / 2, p.vb[2]); }); });

  var hash = {};
  location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
    var i = kv.indexOf("="); if (i > 0) hash[kv.slice(0, i)] = decodeURIComponent(kv.slice(i + 1));
  });
  setLayout(hash.layout === "before" || hash.layout === "after" ? hash.layout : "both");
  if (hash.find) { input.value = hash.find; search(hash.find); }
  ["before", "after"].forEach(function (v) {
    root.setAttribute("data-af-boxes-" + v, String(panes[v].svg.querySelectorAll("g.node").length));
  });
  root.setAttribute("data-af-ready", "yes");
})();
"""
