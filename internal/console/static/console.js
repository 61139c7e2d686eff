// Live updates: the server renders the page's live part and sends it over
// server-sent events; this swaps it in. Without JavaScript the pages work
// as they are (reload to refresh).
(function () {
  var live = document.getElementById("live");
  if (!live || !window.EventSource) { return; }
  var src = new EventSource("/ui/events?page=" + encodeURIComponent(live.dataset.live));
  src.addEventListener("live", function (e) {
    // Keep an open form or a focused field as it is.
    if (live.contains(document.activeElement) && document.activeElement.tagName !== "BODY") { return; }
    live.innerHTML = e.data;
  });
})();
