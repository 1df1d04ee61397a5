// Dashboard index: re-reads the recent runs and the current locks every few seconds and
// redraws both tables in place. Rendering mirrors the server's index.html template.
(function () {
  "use strict";
  var runsBody = document.querySelector("table.runs tbody");
  var locksSection = document.getElementById("locks");
  var every = 3000;

  var o = window.orchestrator;
  var clock = o.clock, took = o.took, el = o.el, cell = o.cell;
  function code(text) { return el("code", "", text || ""); }

  function renderRuns(list) {
    if (!runsBody) return;
    var rows = document.createDocumentFragment();
    list.forEach(function (r) {
      var tr = el("tr");
      tr.setAttribute("data-run", r.id);
      var a = el("a");
      a.href = "/runs/" + encodeURIComponent(r.id);
      a.appendChild(code(r.id.slice(0, 12)));
      tr.appendChild(cell("Run", a));
      tr.appendChild(cell("Pipeline", r.pipeline));
      var st = el("span");
      st.appendChild(el("span", "badge s-" + r.status, r.status));
      if (r.reason) { st.appendChild(document.createTextNode(" ")); st.appendChild(el("span", "reason", r.reason)); }
      tr.appendChild(cell("Status", st));
      tr.appendChild(cell("Build", (r.trigger && r.trigger.build) || ""));
      tr.appendChild(cell("Image tag", code(r.trigger && r.trigger.image_tag)));
      tr.appendChild(cell("Created", clock(r.created_at)));
      tr.appendChild(cell("Took", took(r.started_at, r.ended_at)));
      rows.appendChild(tr);
    });
    runsBody.replaceChildren(rows);
  }

  function renderLocks(list) {
    if (!locksSection) return;
    var body = locksSection.querySelector("tbody");
    var empty = locksSection.querySelector(".empty");
    var table = locksSection.querySelector("table");
    if (table) table.hidden = list.length === 0;
    if (empty) empty.hidden = list.length > 0;
    if (!body) return;
    var rows = document.createDocumentFragment();
    list.forEach(function (l) {
      var tr = el("tr");
      tr.setAttribute("data-lock", l.key);
      var k = el("span");
      k.appendChild(code(l.key));
      if (l.frozen) { k.appendChild(document.createTextNode(" ")); k.appendChild(el("span", "badge s-frozen", "frozen")); }
      tr.appendChild(cell("Key", k));
      tr.appendChild(cell("Holder", l.holder));
      tr.appendChild(cell("Fence", String(l.fence)));
      tr.appendChild(cell("Acquired", clock(l.acquired_at)));
      tr.appendChild(cell("Expires", clock(l.expires_at)));
      tr.appendChild(cell("Waiters", String(l.waiters)));
      tr.appendChild(cell("Message", l.message));
      rows.appendChild(tr);
    });
    body.replaceChildren(rows);
  }

  function get(path) {
    return fetch(path, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; });
  }

  function tick() {
    Promise.all([get("/v1/runs?limit=30"), get("/v1/locks")])
      .then(function (res) {
        if (res[0]) renderRuns(res[0].runs || []);
        if (res[1]) renderLocks(res[1].locks || []);
      })
      .catch(function () {})
      .then(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
})();
