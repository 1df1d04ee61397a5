// Dashboard index: re-reads the recent runs and the current locks every few seconds and
// redraws both tables in place. Rendering mirrors the server's index.html template. With
// the admin token (the locks section has data-admin) it also drives the lock actions:
// force-release at the fence shown, unfreeze, freeze; each is a call of the JSON API whose
// answer, error included, the page shows.
(function () {
  "use strict";
  var runsBody = document.querySelector("table.runs tbody");
  var locksSection = document.getElementById("locks");
  var every = 3000;
  var admin = locksSection && locksSection.hasAttribute("data-admin");
  var msg = document.getElementById("action-msg");
  var timer = null;

  var o = window.orchestrator;
  var clock = o.clock, took = o.took, el = o.el, cell = o.cell, send = o.send, say = o.say;
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
      var wf = o.waitingFor(r);
      if (wf) { st.appendChild(document.createTextNode(" ")); st.appendChild(el("span", "waiting", wf)); }
      tr.appendChild(cell("Status", st));
      tr.appendChild(cell("Build", (r.trigger && r.trigger.build) || ""));
      tr.appendChild(cell("Image tag", code(r.trigger && r.trigger.image_tag)));
      tr.appendChild(cell("Created", clock(r.created_at)));
      tr.appendChild(cell("Took", took(r.started_at, r.ended_at)));
      rows.appendChild(tr);
    });
    runsBody.replaceChildren(rows);
  }

  // waiters mirrors index.html: the count, then each waiting run linked, with its step.
  function waiters(l) {
    var w = el("span");
    w.appendChild(document.createTextNode(String(l.waiters)));
    (l.waiting_runs || []).forEach(function (x) {
      var s = el("span", "waiter");
      var a = el("a");
      a.href = "/runs/" + encodeURIComponent(x.run_id);
      a.appendChild(code(x.run_id.slice(0, 12)));
      s.appendChild(a);
      s.appendChild(document.createTextNode(" " + x.pipeline + "/" + x.step + " since " + clock(x.since)));
      w.appendChild(document.createTextNode(" "));
      w.appendChild(s);
    });
    return w;
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
      tr.appendChild(cell("Waiters", waiters(l)));
      tr.appendChild(cell("Message", l.message));
      if (admin) tr.appendChild(cell("Action", actionButton(l)));
      rows.appendChild(tr);
    });
    body.replaceChildren(rows);
  }

  // The operator namespaces (data-namespaces, from the server): the lock actions take only
  // keys in them; the API refuses the others (a daemon's own leases).
  var namespaces = ((locksSection && locksSection.getAttribute("data-namespaces")) || "").split(" ").filter(Boolean);
  function operable(key) {
    return namespaces.some(function (ns) { return key.length > ns.length && key.indexOf(ns) === 0; });
  }

  // actionButton mirrors index.html: nothing for a key no action takes, Unfreeze for a
  // frozen key, else Release at the fence.
  function actionButton(l) {
    if (!operable(l.key)) return "";
    var b = el("button");
    b.type = "button";
    b.setAttribute("data-key", l.key);
    if (l.frozen) {
      b.setAttribute("data-act", "unfreeze");
      b.textContent = "Unfreeze";
    } else {
      b.setAttribute("data-act", "release");
      b.setAttribute("data-fence", String(l.fence));
      b.setAttribute("data-holder", l.holder || "");
      b.textContent = "Release fence " + l.fence;
    }
    return b;
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
      .then(function () { timer = setTimeout(tick, every); });
  }
  // now redraws at once (after an action), then goes on every few seconds.
  function now() {
    clearTimeout(timer);
    tick();
  }
  timer = setTimeout(tick, every);

  if (!admin) return;
  var path = function (key, tail) { return "/v1/locks/" + encodeURIComponent(key) + tail; };
  var releaseForm = document.getElementById("release-form");
  var unfreezeForm = document.getElementById("unfreeze-form");
  var freezeForm = document.getElementById("freeze-form");

  // open shows a confirmation panel filled in from the row's button; the panel keeps what it
  // was opened with (the fence above all) while the table redraws under it.
  function open(form, b) {
    releaseForm.hidden = unfreezeForm.hidden = true;
    form.dataset.key = b.getAttribute("data-key");
    form.dataset.fence = b.getAttribute("data-fence") || "";
    form.querySelectorAll("[data-f]").forEach(function (f) {
      f.textContent = { key: form.dataset.key, fence: form.dataset.fence, holder: b.getAttribute("data-holder") || "" }[f.getAttribute("data-f")];
    });
    form.reset();
    form.hidden = false;
    say(msg, "", false);
    form.querySelector("input").focus();
  }
  locksSection.addEventListener("click", function (ev) {
    var b = ev.target.closest("button[data-act]");
    if (b) open(b.getAttribute("data-act") === "release" ? releaseForm : unfreezeForm, b);
    var c = ev.target.closest("button[data-close]");
    if (c) c.closest("form").hidden = true;
  });

  // act sends one action from form and shows its outcome.
  function act(form, method, url, body, done) {
    var buttons = form.querySelectorAll("button");
    buttons.forEach(function (b) { b.disabled = true; });
    send(method, url, body).then(function (res) {
      buttons.forEach(function (b) { b.disabled = false; });
      if (!res.ok) { say(msg, o.refusal(res), true); return; }
      say(msg, done(res.data), false);
      if (form !== freezeForm) form.hidden = true;
      now();
    });
  }
  releaseForm.addEventListener("submit", function (ev) {
    ev.preventDefault();
    var key = releaseForm.dataset.key, fence = Number(releaseForm.dataset.fence);
    act(releaseForm, "POST", path(key, "/release"), { fence: fence, reason: releaseForm.elements.reason.value }, function (d) {
      var l = (d && d.released) || {};
      return "Released " + key + " (fence " + fence + ", held by " + (l.holder || "?") + ").";
    });
  });
  unfreezeForm.addEventListener("submit", function (ev) {
    ev.preventDefault();
    var key = unfreezeForm.dataset.key;
    act(unfreezeForm, "DELETE", path(key, "/freeze"), { reason: unfreezeForm.elements.reason.value }, function () {
      return "Unfroze " + key + ".";
    });
  });
  freezeForm.addEventListener("submit", function (ev) {
    ev.preventDefault();
    var f = freezeForm.elements, key = f.key.value.trim();
    act(freezeForm, "POST", path(key, "/freeze"), { message: f.message.value, "for": f["for"].value.trim() }, function (d) {
      var l = (d && d.frozen) || {};
      return "Froze " + key + " until " + clock(l.expires_at) + ".";
    });
  });
})();
