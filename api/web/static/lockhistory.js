// Lock history page: reads GET /v1/locks/history for the chosen period and draws, as inline
// SVG, a row per key with a bar per run's hold of it (labelled with the run, linked to its
// page) and per wait, along time. Re-read every 5 s, so a live hold grows.
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var svg = document.getElementById("lock-timeline");
  if (!svg) return;
  var o = window.orchestrator, form = document.getElementById("history-form");
  var period = document.getElementById("history-period"), msg = document.getElementById("history-msg");
  var rowH = 24, labelW = 190, padR = 16, top = 26;

  function t(s) { return s && s.indexOf("0001-01-01") !== 0 ? new Date(s).getTime() : 0; }
  function node(tag, attrs, text) {
    var e = document.createElementNS(NS, tag);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function draw(h) {
    // The axis runs from the first hold or wait of the period (not its start: a quiet hour
    // would squeeze every bar into its last pixels) to now.
    var now = t(h.now), first = now;
    h.spans.forEach(function (s) { first = Math.min(first, t(s.from)); });
    var from = Math.max(t(h.since), first - (now - first) * 0.02), span = Math.max(now - from, 1000);
    var keys = [];
    h.spans.forEach(function (s) { if (keys.indexOf(s.key) < 0) keys.push(s.key); });
    var width = Math.max(svg.parentNode.clientWidth || 600, 360);
    var x = function (ms) { return labelW + (Math.max(ms, from) - from) / span * (width - labelW - padR); };
    var height = top + Math.max(keys.length, 1) * rowH + 6;
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
    svg.setAttribute("width", width);
    svg.setAttribute("height", height);
    var g = document.createDocumentFragment();
    [0, 0.5, 1].forEach(function (f) {
      var px = labelW + f * (width - labelW - padR);
      g.appendChild(node("line", { x1: px, x2: px, y1: top - 6, y2: height, "class": "grid" }));
      g.appendChild(node("text", { x: px, y: 12, "class": "tick", "text-anchor": f === 0 ? "start" : f === 1 ? "end" : "middle" },
        o.clock(new Date(from + f * span).toISOString())));
    });
    keys.forEach(function (k, i) {
      g.appendChild(node("text", { x: 4, y: top + i * rowH + 16, "class": "label" }, k));
    });
    if (!keys.length) g.appendChild(node("text", { x: 4, y: top + 16, "class": "label" }, "No lock was held or waited for in this period."));
    h.spans.forEach(function (s) {
      var row = keys.indexOf(s.key), end = t(s.to) || now;
      var a = node("a", { href: "/runs/" + encodeURIComponent(s.run_id), "data-run": s.run_id });
      var cls = s.kind === "waited" ? "wait" : s.lost ? "lost" : "sync";
      var x0 = x(t(s.from)), w = Math.max(x(end) - x0, 2);
      var r = node("rect", { x: x0, y: top + row * rowH + 3, width: w, height: rowH - 6, rx: 3,
        "class": "bar " + cls, "data-key": s.key, "data-kind": s.kind });
      var what = (s.kind === "waited" ? "waited: " : "held: ") + s.pipeline + " run " + s.run_id + " (" + s.step + ")" +
        (s.fence ? ", fence " + s.fence : "") + (s.lost ? ", lost" : "") + ", " + o.clock(s.from) + " for " + o.dur(end - t(s.from));
      r.appendChild(node("title", {}, what));
      a.appendChild(r);
      if (w > 70) a.appendChild(node("text", { x: x0 + 4, y: top + row * rowH + 16, "class": "bar-label" }, s.run_id.slice(0, 8)));
      g.appendChild(a);
    });
    svg.replaceChildren(g);
    svg.setAttribute("aria-label", "Lock history: " + keys.length + " keys, " + h.spans.length + " holds and waits since " + o.clock(new Date(from).toISOString()));
    o.say(msg, h.truncated ? "Only the newest runs are shown: more ran in this period." : "", false);
  }

  function load() {
    o.send("GET", "/v1/locks/history?period=" + encodeURIComponent(period.value)).then(function (res) {
      if (!res.ok) { o.say(msg, o.refusal(res), true); return; }
      draw(res.data);
    });
  }
  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    history.replaceState(null, "", "?period=" + encodeURIComponent(period.value));
    load();
  });
  load();
  setInterval(load, 5000);
})();
