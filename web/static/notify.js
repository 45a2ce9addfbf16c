// Owner notifications in the browser (R23.10). The live stream
// (/api/v1/stream, opened by console.js) carries a "notice" event for a
// card or a question waiting for the owner, a reply ready and a turn that
// failed (the relay decides which: never a turn another relay's agent
// started); console.js passes each on as the document's "relay:notice".
// While the owner allowed notifications and this tab is hidden, each shows
// as a browser notification titled by the relay ("Approval needed ·
// TITLE", …); clicking it opens the session. Permission is asked only from
// the visible "Turn on notifications" control, never on load.
(function () {
  "use strict";
  var supported = "Notification" in window;
  var btn = document.getElementById("notify-on");

  function showControl() {
    if (btn) btn.hidden = !supported || Notification.permission !== "default";
  }

  function onNotice(e) {
    var n;
    try { n = JSON.parse(e.detail); } catch (x) { return; }
    if (!n || !n.heading || !n.session) return;
    if (!supported || Notification.permission !== "granted" || document.visibilityState !== "hidden") return;
    var note = new Notification(n.heading, { body: n.text || "", tag: n.event + ":" + n.session });
    note.onclick = function () {
      window.focus();
      location.href = "/s/" + encodeURIComponent(n.session);
      if (note.close) note.close();
    };
  }

  document.addEventListener("relay:notice", onNotice);

  if (btn) {
    btn.addEventListener("click", function () {
      if (!supported) return;
      Promise.resolve(Notification.requestPermission()).then(function () {
        showControl();
        var st = document.getElementById("status");
        if (st) st.textContent = Notification.permission === "granted" ?
          "Notifications are on: cards, questions, replies and errors show while this tab is hidden." :
          "Notifications are not allowed in this browser.";
      });
    });
  }
  showControl();
})();
