// Live run page: follows /v1/runs/{id}/events over Server-Sent Events and, on every event,
// re-reads the run and redraws its steps, without reloading the page. Rendering mirrors the
// server's run.html template. With the trigger or admin token it also cancels the run (a
// call of the JSON API whose answer, error included, the page shows).
(function () {
  "use strict";
  var root = document.getElementById("run");
  if (!root) return;
  var id = root.getAttribute("data-run-id");
  var live = document.getElementById("live");
  var eventsList = document.getElementById("events");
  var fetching = false, again = false, ended = false;
  // notes are the messages of service.superseded events, by "phase/name" (dashboard.go).
  var notes = {};

  var o = window.orchestrator;
  var clock = o.clock, dur = o.dur, took = o.took, cell = o.cell;
  function wait(ns) { return ns ? dur(ns / 1e6) : ""; }
  function detail(s) {
    if (s.error) return s.error;
    if (s.note) return s.note;
    if (s.status === "waiting_lock" && s.lock_key) return "waiting for " + s.lock_key;
    var parts = [], c = s.changes || {};
    if (s.status === "superseded") parts.push(notes[s.phase + "/" + s.name] || "not deployed by this run: a newer run re-synced the service");
    if (c.image_tag) parts.push("tag " + (c.image_tag.old || "(none)") + " → " + (c.image_tag["new"] || "(none)"));
    if (c.env && c.env.length) parts.push("env: " + c.env.map(envChange).join(", "));
    if (c.values && c.values.length) parts.push("fields: " + c.values.map(fieldChange).join(", "));
    else if (c.fields && c.fields.length) parts.push("fields: " + c.fields.join(", "));
    if (s.deployment_uuid) parts.push("deployment " + s.deployment_uuid);
    return parts.join("; ");
  }
  // detailWithLink is detail and, once Coolify has shown the step's deployment, a link to
  // its page there (run.html's).
  function detailWithLink(s) {
    var text = detail(s), u = s.deployment_url;
    if (!u || !/^https?:\/\//.test(u)) return text;
    var span = document.createElement("span"), a = document.createElement("a");
    span.textContent = text + " ";
    a.className = "coolify-link";
    a.href = u;
    a.rel = "noopener noreferrer";
    a.textContent = "open in Coolify";
    span.appendChild(a);
    return span;
  }
  // fieldChange mirrors runs.FieldChange.String: `field old → new`.
  function fieldChange(f) {
    return (f.field || "(value)") + " " + (f.old || "(none)") + " → " + (f["new"] || "(none)");
  }
  // envChange mirrors runs.EnvChange.String: which flags, comment and whether the value
  // changed, never the value.
  function envChange(e) {
    var what = [], create = e.action === "create";
    if (e.action === "unchanged") return e.key + " unchanged";
    if (e.value_unknown) what.push("value (current one hidden)");
    else if (e.value_changed) what.push("value");
    (e.flags || []).forEach(function (f) {
      what.push(create ? f.name + " " + f["new"] : f.name + " " + f.old + " → " + f["new"]);
    });
    if (e.comment) {
      what.push(create ? "comment " + JSON.stringify(e.comment["new"])
        : "comment " + JSON.stringify(e.comment.old) + " → " + JSON.stringify(e.comment["new"]));
    }
    var head = e.key + (create ? " created" : "");
    return what.length ? head + " (" + what.join(", ") + ")" : head;
  }
  function badge(status) {
    var b = document.createElement("span");
    b.className = "badge s-" + status;
    b.textContent = status;
    return b;
  }

  function render(run) {
    var st = document.getElementById("run-status");
    st.className = "badge s-" + run.status;
    st.textContent = run.status;
    document.getElementById("run-reason").textContent = run.reason || "";
    var waiting = document.getElementById("waiting"), wf = o.waitingFor(run);
    waiting.textContent = wf;
    waiting.hidden = !wf;
    document.getElementById("run-started").textContent = clock(run.started_at);
    document.getElementById("run-ended").textContent = clock(run.ended_at);
    document.getElementById("run-took").textContent = took(run.started_at, run.ended_at);
    var sup = document.getElementById("superseded-by");
    if (run.superseded_by) {
      var a = sup.querySelector("a");
      a.href = "/runs/" + encodeURIComponent(run.superseded_by);
      a.querySelector("code").textContent = run.superseded_by;
    }
    sup.hidden = !run.superseded_by;
    if (o.timeline) o.timeline.draw(run, seenEvents);
    if (cancelForm && o.ended(run.status)) cancelForm.hidden = true;
    if (rollbackForm) rollbackForm.hidden = run.status !== "succeeded";
    var sections = document.querySelectorAll("section.phase");
    for (var i = 0; i < sections.length; i++) {
      var phase = sections[i].getAttribute("data-phase");
      var tbody = sections[i].querySelector("tbody");
      var steps = (run.steps || []).filter(function (s) { return s.phase === phase; });
      var rows = document.createDocumentFragment();
      // Phase-2 steps of a pipeline with several waves are grouped by wave, as the server
      // renders them (dashboard.go, phaseOf).
      var waves = [];
      steps.forEach(function (s) { if (waves.indexOf(s.wave || 0) < 0) waves.push(s.wave || 0); });
      waves.sort(function (a, b) { return a - b; });
      if (waves.length > 1) {
        steps = steps.slice().sort(function (a, b) { return waves.indexOf(a.wave || 0) - waves.indexOf(b.wave || 0); });
      }
      var shown = null;
      steps.forEach(function (s) {
        var w = waves.indexOf(s.wave || 0);
        if (waves.length > 1 && w !== shown) {
          shown = w;
          var head = document.createElement("tr");
          head.className = "wave";
          var th = document.createElement("th");
          th.colSpan = 7;
          th.textContent = "Wave " + (w + 1) + " of " + waves.length;
          head.appendChild(th);
          rows.appendChild(head);
        }
        var tr = document.createElement("tr");
        tr.setAttribute("data-step", s.phase + "/" + s.name);
        tr.setAttribute("data-status", s.status);
        tr.appendChild(cell("Step", s.name));
        tr.appendChild(cell("Status", badge(s.status)));
        tr.appendChild(cell("Lock wait", wait(s.lock_wait_ns)));
        tr.appendChild(cell("Fence", s.fence ? String(s.fence) : ""));
        tr.appendChild(cell("Started", clock(s.started_at)));
        tr.appendChild(cell("Took", took(s.started_at, s.ended_at)));
        tr.appendChild(cell("Detail", detailWithLink(s)));
        rows.appendChild(tr);
      });
      if (!steps.length) {
        var tr = document.createElement("tr");
        tr.className = "none";
        var td = document.createElement("td");
        td.colSpan = 7;
        td.textContent = "No steps in this phase.";
        tr.appendChild(td);
        rows.appendChild(tr);
      }
      tbody.replaceChildren(rows);
    }
  }

  function refresh() {
    if (fetching) { again = true; return; }
    fetching = true;
    fetch("/v1/runs/" + encodeURIComponent(id), { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (run) { if (run) render(run); })
      .catch(function () {})
      .then(function () {
        fetching = false;
        if (again) { again = false; refresh(); }
      });
  }

  var seenEvents = [];
  function addEvent(ev) {
    seenEvents.push(ev);
    if (ev.type === "service.superseded" && ev.message) notes[ev.phase + "/" + ev.service] = ev.message;
    var li = document.createElement("li");
    var t = document.createElement("span"); t.className = "t"; t.textContent = clock(ev.at);
    var ty = document.createElement("span"); ty.className = "ty"; ty.textContent = ev.type;
    li.appendChild(t); li.appendChild(ty);
    // An analysis event's outcome (successful, failed, inconclusive) colours it.
    if (ev.data && ev.data.outcome) li.setAttribute("data-outcome", ev.data.outcome);
    var what = [ev.phase, ev.service, ev.lock_key, ev.fence ? "fence " + ev.fence : "", ev.message]
      .filter(function (x) { return x; }).join(" · ");
    li.appendChild(document.createTextNode(what));
    eventsList.appendChild(li);
    eventsList.scrollTop = eventsList.scrollHeight;
  }

  function setLive(text, on) {
    live.textContent = text;
    live.className = on ? "live on" : "live";
  }

  var cancelForm = document.getElementById("cancel-form");
  if (cancelForm) {
    var ask = document.getElementById("cancel-ask"), sure = document.getElementById("cancel-confirm");
    var msg = document.getElementById("action-msg");
    ask.addEventListener("click", function () { ask.hidden = true; sure.hidden = false; });
    document.getElementById("cancel-keep").addEventListener("click", function () { ask.hidden = false; sure.hidden = true; });
    cancelForm.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var yes = document.getElementById("cancel-yes");
      yes.disabled = true;
      o.send("POST", "/v1/runs/" + encodeURIComponent(id) + "/cancel").then(function (res) {
        yes.disabled = false;
        ask.hidden = false; sure.hidden = true;
        if (!res.ok) { o.say(msg, o.refusal(res), true); return; }
        o.say(msg, res.data && res.data.run && res.data.run.status === "canceled" ? "Canceled." :
          "Cancel requested: the run stops after its current step and puts back what it changed.", false);
        refresh();
      });
    });
  }

  // Re-run and roll back to this: each starts a new run through the API, whose page the
  // browser then opens; a refusal is shown in the status line.
  var rerunForm = document.getElementById("rerun-form"), rollbackForm = document.getElementById("rollback-form");
  function startFrom(form, action, body) {
    var button = form.querySelector("button[type=submit]");
    button.disabled = true;
    o.send("POST", "/v1/runs/" + encodeURIComponent(id) + "/" + action, body).then(function (res) {
      button.disabled = false;
      if (!res.ok) { o.say(document.getElementById("action-msg"), o.refusal(res), true); return; }
      location.href = "/runs/" + encodeURIComponent(res.data.run.id);
    });
  }
  if (rerunForm) {
    rerunForm.addEventListener("submit", function (ev) { ev.preventDefault(); startFrom(rerunForm, "rerun", {}); });
  }
  if (rollbackForm) {
    rollbackForm.addEventListener("submit", function (ev) {
      ev.preventDefault();
      startFrom(rollbackForm, "rollback", { reason: rollbackForm.elements.reason.value });
    });
  }
  var decide = document.getElementById("decide-form");
  if (decide) {
    var dmsg = document.getElementById("decide-msg");
    var vote = function (verb, body) {
      var buttons = decide.querySelectorAll("button");
      for (var i = 0; i < buttons.length; i++) buttons[i].disabled = true;
      o.send("POST", "/v1/runs/" + encodeURIComponent(id) + "/" + verb, body).then(function (res) {
        for (var i = 0; i < buttons.length; i++) buttons[i].disabled = false;
        if (!res.ok) { o.say(dmsg, o.refusal(res), true); return; }
        o.say(dmsg, verb === "approve" ? "Approved." : "Rejected: the run ends failed.", false);
        decide.hidden = true;
        refresh();
      });
    };
    document.getElementById("approve").addEventListener("click", function () {
      vote("approve", { digest: this.getAttribute("data-digest"), reason: document.getElementById("decide-reason").value });
    });
    document.getElementById("reject").addEventListener("click", function () {
      vote("reject", { reason: document.getElementById("decide-reason").value });
    });
  }

  var es = new EventSource("/v1/runs/" + encodeURIComponent(id) + "/events");
  es.onopen = function () { setLive("live", true); };
  es.onmessage = function (m) {
    try { addEvent(JSON.parse(m.data)); } catch (e) { return; }
    refresh();
  };
  es.addEventListener("end", function () {
    ended = true;
    es.close();
    setLive("run ended", false);
    refresh();
  });
  es.onerror = function () { if (!ended) setLive("reconnecting…", false); };
})();
