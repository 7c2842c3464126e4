// rea web console: keeps an open page current over server-sent events.
// The page works without it; this only refreshes <main> in place (no
// reload) when the daemon says something this page shows changed, at most
// once a second, and appends a followed run's output as it comes.
(function () {
  "use strict";
  var body = document.body;
  var live = body.getAttribute("data-live");
  if (!live || !window.EventSource || !window.fetch) return;
  var mark = document.getElementById("live");
  var es = null;
  var timer = null;
  var last = 0;
  var busy = false;
  function refresh() {
    timer = null;
    if (busy) { soon(); return; }
    busy = true;
    last = Date.now();
    fetch(location.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (!text) return;
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.querySelector("main");
        var old = document.querySelector("main");
        if (fresh && old) old.replaceWith(fresh);
        var l = doc.body.getAttribute("data-live");
        if (l !== live) {
          live = l;
          if (es) es.close();
          es = l ? open(l) : null;
        }
      })
      .catch(function () {})
      .then(function () { busy = false; });
  }
  function soon() {
    if (timer) return;
    var wait = Math.max(150, 1000 - (Date.now() - last));
    timer = setTimeout(refresh, wait);
  }
  // Whether an event concerns what this page shows.
  function concerns(ev) {
    var job = body.getAttribute("data-job");
    var run = body.getAttribute("data-run");
    var names = [];
    if (ev.job) names.push(ev.job);
    if (ev.summary && ev.summary.name) names.push(ev.summary.name);
    if (ev.jobs) names = names.concat(ev.jobs);
    if (ev.event === "reloaded" || ev.event === "lost") return true;
    if (run) return ev.run === run;
    if (job) return names.indexOf(job) >= 0;
    if (body.getAttribute("data-page") === "jobs") {
      for (var i = 0; i < names.length; i++) {
        if (document.querySelector('tr[data-job="' + CSS.escape(names[i]) + '"]')) return true;
      }
      return false;
    }
    return ev.event !== "output";
  }
  function open(url) {
    var s = new EventSource(url);
    s.onopen = function () { if (mark) mark.className = "on"; };
    s.onerror = function () { if (mark) mark.className = ""; };
    s.onmessage = function (e) {
      var ev;
      try { ev = JSON.parse(e.data); } catch (x) { return; }
      if (!ev || !ev.event) return; // the opening overview
      if (ev.event === "output") {
        var pre = document.getElementById("output");
        if (pre && ev.run === body.getAttribute("data-run")) pre.appendChild(document.createTextNode(ev.text));
        return;
      }
      if (concerns(ev)) soon();
    };
    return s;
  }
  es = open(live);
})();
