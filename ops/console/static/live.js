// Live turns for a job page: the server sends each new event as a rendered
// <li> (server-sent events from /jobs/<id>/live); the result reloads the
// page, which then shows the result and the diff. Everything else works
// without this script.
(function () {
  "use strict";
  var list = document.getElementById("events");
  if (!list || list.dataset.live !== "on" || !window.EventSource) return;
  var state = document.getElementById("live-state");
  var url = "/jobs/" + encodeURIComponent(list.dataset.job) + "/live?after=" + encodeURIComponent(list.dataset.after || "0");
  var src = new EventSource(url);
  var now = function () { return performance.timeOrigin + performance.now(); };
  src.onopen = function () {
    document.body.dataset.live = "open";
    if (state) state.textContent = "Live: new turns appear as the worker publishes them.";
  };
  src.addEventListener("ev", function (msg) {
    var tpl = document.createElement("template");
    tpl.innerHTML = msg.data.trim();
    var li = tpl.content.firstElementChild;
    if (!li) return;
    if (list.querySelector('li[data-stream-seq="' + li.dataset.streamSeq + '"]')) return; // already shown
    li.dataset.shownAt = String(now());
    li.classList.add("fresh");
    list.appendChild(li);
    var badge = document.querySelector("#status .state");
    if (badge && badge.textContent === "queued") { // the page was loaded before the job started
      badge.textContent = "running";
      badge.className = "state st-running";
    }
  });
  src.addEventListener("result", function () {
    src.close();
    document.body.dataset.live = "done";
    if (state) state.textContent = "Finished: loading the result…";
    window.location.reload();
  });
  src.onerror = function () {
    if (state) state.textContent = "Live stream interrupted; retrying…";
  };
})();
