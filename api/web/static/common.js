// Helpers shared by the dashboard's pages (index.js, run.js): time and duration formatting
// that mirror the server's templates, and small DOM builders.
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
  window.orchestrator = { pad: pad, isZero: isZero, clock: clock, dur: dur, took: took, el: el, cell: cell };
})();
