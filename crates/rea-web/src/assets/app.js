// rea web console: keeps an open page current over server-sent events.
// The page works without it; this only refreshes <main> in place (no
// reload) when the daemon says something changed, and appends a followed
// run's output as it comes.
(function () {
  "use strict";
  var live = document.body.getAttribute("data-live");
  if (!live || !window.EventSource || !window.fetch) return;
  var mark = document.getElementById("live");
  var es = new EventSource(live);
  var timer = null;
  var busy = false;
  function refresh() {
    timer = null;
    if (busy) { timer = setTimeout(refresh, 300); return; }
    busy = true;
    fetch(location.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (!text) return;
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.querySelector("main");
        var old = document.querySelector("main");
        if (fresh && old) old.replaceWith(fresh);
        var l = doc.body.getAttribute("data-live");
        if (l && l !== live) { live = l; es.close(); es = open(l); }
        if (!l) es.close();
      })
      .catch(function () {})
      .then(function () { busy = false; });
  }
  function soon() { if (!timer) timer = setTimeout(refresh, 250); }
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
        if (pre) pre.appendChild(document.createTextNode(ev.text));
        return;
      }
      soon();
    };
    return s;
  }
  es.close();
  es = open(live);
})();
