// Timeline of a run, drawn as inline SVG by the run page itself: one row per step, a bar
// along time for what the step did (its lock wait, then sync, deploy and health check, or
// the mobile update), the waits for the phase locks on a row of their own and the start of
// each wave as a marker, so the pipelining of Phase 1 and Phase 2 and where time went are
// seen at a glance. run.js calls draw with the run and the events so far; while the run goes
// on, the bars of the steps under way grow with the clock.
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var svg = document.getElementById("timeline");
  if (!svg) return;
  var legend = document.getElementById("timeline-legend");
  var rowH = 22, labelW = 150, padR = 16, top = 26;
  var last = null, timer = null;

  function t(s) { return s && s.indexOf("0001-01-01") !== 0 ? new Date(s).getTime() : 0; }
  function node(tag, attrs, text) {
    var e = document.createElementNS(NS, tag);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // segments lists each row's bars: {row, label, kind, from, to, step, outcome of an
  // analysis}. Times in ms.
  function segments(run, events, now) {
    var rows = [], segs = [], marks = [];
    var at = {}; // "phase/service/type" → time of the event
    var lockWait = {}; // phase lock key → wait start
    var phaseLocks = [];
    var analyses = [], measuring = null; // the release's analyses: {from, to, title, outcome}
    events.forEach(function (ev) {
      if (ev.type === "analysis.started") {
        measuring = { from: t(ev.at), to: 0, title: "analysis " + (ev.message || "") };
        analyses.push(measuring);
      }
      if (ev.type === "analysis.ended" && measuring) {
        measuring.to = t(ev.at);
        measuring.title = "analysis " + (ev.message || "");
        measuring.outcome = (ev.data || {}).outcome || "";
        measuring = null;
      }
      var when = t(ev.at);
      if (ev.service) at[ev.phase + "/" + ev.service + "/" + ev.type] = when;
      if (!ev.service && ev.lock_key) {
        if (ev.type === "lock.waiting") lockWait[ev.lock_key] = when;
        if (ev.type === "lock.acquired" && lockWait[ev.lock_key] !== undefined) {
          phaseLocks.push({ key: ev.lock_key, from: lockWait[ev.lock_key], to: when });
          delete lockWait[ev.lock_key];
        }
      }
      if (ev.type === "wave.started") marks.push({ at: when, label: ev.message || "wave" });
    });
    Object.keys(lockWait).forEach(function (k) { phaseLocks.push({ key: k, from: lockWait[k], to: now }); });
    if (phaseLocks.length) {
      rows.push("phase locks");
      phaseLocks.forEach(function (w) {
        segs.push({ row: 0, kind: "wait", from: w.from, to: w.to, step: "lock/" + w.key, title: "waiting for " + w.key });
      });
    }
    (run.steps || []).forEach(function (s) {
      var start = t(s.started_at);
      if (!start) return;
      var end = t(s.ended_at) || (s.status === "waiting_lock" || s.status === "running" || s.status === "deployed" ? now : start);
      var row = rows.length, name = s.phase + "/" + s.name;
      rows.push(s.phase + " " + s.name);
      var waited = s.status === "waiting_lock" ? end - start : Math.min((s.lock_wait_ns || 0) / 1e6, end - start);
      if (waited > 0) segs.push({ row: row, kind: "wait", from: start, to: start + waited, step: name, title: "waiting for " + (s.lock_key || "its lock") });
      if (s.status === "waiting_lock") return;
      var from = start + waited;
      if (s.phase === "phase2") {
        var dStart = at[name + "/deploy.started"] || from;
        var dEnd = at[name + "/deploy.finished"] || (t(s.ended_at) ? end : 0);
        if (dStart > from) segs.push({ row: row, kind: "prep", from: from, to: dStart, step: name, title: "checks before the deploy" });
        segs.push({ row: row, kind: "deploy", from: dStart, to: dEnd || now, step: name, title: "deploy" });
        if (dEnd && end > dEnd) segs.push({ row: row, kind: "health", from: dEnd, to: end, step: name, title: "health check" });
      } else {
        segs.push({ row: row, kind: s.phase === "mobile" ? "mobile" : "sync", from: from, to: end, step: name, title: s.phase === "mobile" ? "mobile update" : "sync" });
      }
    });
    if (analyses.length) {
      var arow = rows.length;
      rows.push("analysis");
      analyses.forEach(function (a, i) {
        segs.push({ row: arow, kind: "analysis", outcome: a.outcome || "measuring", from: a.from, to: a.to || now,
          step: "analysis/" + (i + 1), title: a.title });
      });
    }
    return { rows: rows, segs: segs, marks: marks };
  }

  function draw(run, events) {
    last = { run: run, events: events };
    var ended = !!t(run.ended_at);
    var now = ended ? t(run.ended_at) : Date.now();
    var lay = segments(run, events, now);
    var start = t(run.started_at) || t(run.created_at);
    lay.segs.forEach(function (s) { if (!start || s.from < start) start = s.from; });
    var span = Math.max(now - start, 1000);
    var width = Math.max(svg.parentNode.clientWidth || 600, 320);
    var x = function (ms) { return labelW + (ms - start) / span * (width - labelW - padR); };
    var height = top + Math.max(lay.rows.length, 1) * rowH + 6;
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
    svg.setAttribute("width", width);
    svg.setAttribute("height", height);
    var g = document.createDocumentFragment();
    [0, 0.25, 0.5, 0.75, 1].forEach(function (f) { // the time axis: seconds since the start
      var px = labelW + f * (width - labelW - padR);
      g.appendChild(node("line", { x1: px, x2: px, y1: top - 6, y2: height, "class": "grid" }));
      g.appendChild(node("text", { x: px, y: 12, "class": "tick", "text-anchor": f === 0 ? "start" : f === 1 ? "end" : "middle" },
        window.orchestrator.dur(f * span)));
    });
    lay.rows.forEach(function (label, i) {
      g.appendChild(node("text", { x: 4, y: top + i * rowH + 15, "class": "label" }, label));
    });
    lay.marks.forEach(function (m) {
      var px = x(m.at);
      g.appendChild(node("line", { x1: px, x2: px, y1: top - 6, y2: height, "class": "wave" }));
      g.appendChild(node("text", { x: px + 3, y: top - 8, "class": "wave-label" }, m.label.split(":")[0]));
    });
    lay.segs.forEach(function (s) {
      var w = Math.max(x(s.to) - x(s.from), 1);
      var r = node("rect", { x: x(s.from), y: top + s.row * rowH + 3, width: w, height: rowH - 6, rx: 3,
        "class": "bar " + s.kind + (s.outcome ? " " + s.outcome : ""), "data-step": s.step, "data-kind": s.kind });
      r.appendChild(node("title", {}, s.title + ": " + window.orchestrator.dur(s.to - s.from)));
      g.appendChild(r);
    });
    svg.replaceChildren(g);
    svg.setAttribute("aria-label", "Timeline of the run: " + lay.rows.length + " rows over " + window.orchestrator.dur(span));
    if (legend) legend.hidden = lay.segs.length === 0;
    if (!ended && !timer) timer = setInterval(function () { if (last) draw(last.run, last.events); }, 1000);
    if (ended && timer) { clearInterval(timer); timer = null; }
  }

  window.orchestrator.timeline = { draw: draw };
})();
