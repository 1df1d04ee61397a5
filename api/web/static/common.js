// Helpers shared by the dashboard's pages (index.js, run.js): time and duration formatting
// that mirror the server's templates, small DOM builders, and send, which makes the pages'
// actions calls of the JSON API (with the session cookie) and words their answers.
(function () {
  "use strict";
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function isZero(t) { return !t || t.indexOf("0001-01-01") === 0; }
  function clock(t) {
    if (isZero(t)) return "";
    var d = new Date(t);
    return pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes()) + ":" + pad(d.getUTCSeconds()) + "Z";
  }
  function dur(ms) {
    if (ms < 1000) return Math.round(ms) + "ms";
    if (ms < 60000) return (ms / 1000).toFixed(1) + "s";
    return Math.floor(ms / 60000) + "m" + pad(Math.round((ms % 60000) / 1000)) + "s";
  }
  function took(start, end) {
    if (isZero(start)) return "";
    if (isZero(end)) return "running";
    return dur(new Date(end) - new Date(start));
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  // cell is a table cell with a data-label, so the phone layout can show the column name.
  function cell(label, content) {
    var td = el("td");
    td.setAttribute("data-label", label);
    if (content instanceof Node) td.appendChild(content); else td.textContent = content || "";
    return td;
  }
  // send calls the API and resolves to {ok, status, data}, never rejects: a network failure
  // is an answer with status 0.
  function send(method, path, body) {
    var init = { method: method, credentials: "same-origin", headers: { Accept: "application/json" } };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch(path, init).then(function (r) {
      return r.text().then(function (t) {
        var data = null;
        try { data = t ? JSON.parse(t) : null; } catch (e) { data = null; }
        return { ok: r.ok, status: r.status, data: data };
      });
    }, function (e) {
      return { ok: false, status: 0, data: { error: { message: "the daemon could not be reached (" + e.message + ")" } } };
    });
  }
  // refusal words an API error answer: status, code and the API's own message.
  function refusal(res) {
    var e = (res.data && res.data.error) || {};
    var head = res.status ? "Refused (" + res.status + (e.code ? " " + e.code : "") + ")" : "Failed";
    return head + ": " + (e.message || "no details");
  }
  // say shows text in a status line (msg), as an error or not.
  function say(msg, text, isError) {
    if (!msg) return;
    msg.textContent = text;
    msg.className = isError ? "msg error" : "msg ok";
    msg.hidden = !text;
  }
  // waitingFor mirrors runs.Run.WaitingFor: what the run waits on, from each wait's text.
  function waitingFor(run) {
    return (run.waiting || []).map(function (w) { return w.text; }).join("; ");
  }
  var terminal = { succeeded: true, failed: true, superseded: true, canceled: true, interrupted: true, expired: true };
  window.orchestrator = {
    pad: pad, isZero: isZero, clock: clock, dur: dur, took: took, el: el, cell: cell,
    send: send, refusal: refusal, say: say, waitingFor: waitingFor, ended: function (status) { return !!terminal[status]; }
  };
})();
