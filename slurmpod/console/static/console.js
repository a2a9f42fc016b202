// slurmpod console: refreshes the live parts of a cluster page (summary, groups, nodes, events) by polling
// the server-rendered fragments at data-live-url. No dependencies; pauses while the tab is hidden.
(function () {
  "use strict";
  var root = document.querySelector("[data-live-root]");
  if (!root) { return; }
  var url = root.getAttribute("data-live-url");
  var every = parseInt(root.getAttribute("data-refresh-ms"), 10) || 2000;
  var busy = false;

  function apply(parts) {
    Object.keys(parts).forEach(function (key) {
      var box = root.querySelector('[data-live="' + key + '"]');
      if (box && box.innerHTML !== parts[key] && !box.contains(document.activeElement)) {
        box.innerHTML = parts[key];
      }
    });
  }

  function tick() {
    if (busy || document.hidden) { return; }
    busy = true;
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" }, cache: "no-store" })
      .then(function (r) {
        if (r.status === 401) { window.location.reload(); return null; }
        return r.ok ? r.json() : null;
      })
      .then(function (data) {
        if (data && data.html) {
          apply(data.html);
          Object.keys(data.imageStatus || {}).forEach(function (group) {
            root.querySelectorAll("[data-image-status-for]").forEach(function (el) {
              if (el.getAttribute("data-image-status-for") === group) { el.textContent = data.imageStatus[group]; }
            });
          });
          root.setAttribute("data-status", data.status);
        }
      })
      .catch(function () { /* offline for a moment: try again at the next tick */ })
      .then(function () { busy = false; });
  }

  window.setInterval(tick, every);
  document.addEventListener("visibilitychange", tick);
})();
