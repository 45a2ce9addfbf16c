// relay console: buttons and forms call the owner API (/api/v1) with the
// sign-in cookie; /api/v1/stream says when the live parts of the page
// ([data-live]) are fetched again. No build step, no dependencies.
"use strict";
(function () {
  var statusEl = document.getElementById("status");
  function say(msg, bad) {
    if (!statusEl) return;
    statusEl.textContent = msg;
    statusEl.className = "status" + (bad ? " bad" : msg ? " ok" : "");
    clearTimeout(say.t);
    if (msg && !bad) say.t = setTimeout(function () { say(""); }, 4000);
  }

  // api calls the owner API; it resolves to the JSON answer or rejects with its error text.
  function api(method, url, body) {
    var opt = { method: method, credentials: "same-origin", headers: { "Accept": "application/json" } };
    if (body !== undefined) {
      opt.headers["Content-Type"] = "application/json";
      opt.body = JSON.stringify(body);
    }
    return fetch(url, opt).then(function (res) {
      return res.text().then(function (t) {
        var data = null;
        try { data = t ? JSON.parse(t) : null; } catch (e) { data = null; }
        if (res.status === 401) { location.reload(); }
        if (!res.ok) throw new Error((data && data.error) || ("The relay answered " + res.status + "."));
        return data;
      });
    });
  }

  function formBody(form) {
    var out = {};
    Array.prototype.forEach.call(form.elements, function (el) {
      if (!el.name || el.disabled) return;
      if (el.type === "checkbox") { out[el.name] = el.checked; return; }
      if (el.type === "radio") { if (el.checked) out[el.name] = el.value; return; }
      var v = el.value;
      if (v === "" && !el.hasAttribute("data-keep-empty")) return;
      // data-type="minutes": typed in minutes, sent in seconds (the API's unit).
      out[el.name] = el.dataset.type === "int" ? parseInt(v, 10) : el.dataset.type === "minutes" ? Math.round(parseFloat(v) * 60) : v;
    });
    return out;
  }

  function split(spec) {
    var i = spec.indexOf(" ");
    return [spec.slice(0, i), spec.slice(i + 1)];
  }

  function busy(el, on) {
    var btns = el.tagName === "FORM" ? el.querySelectorAll("button") : [el];
    Array.prototype.forEach.call(btns, function (b) { b.disabled = on; });
  }

  // copyText puts text on the clipboard; where the Clipboard API is not
  // allowed (a plain-http origin), through a selected, hidden textarea.
  function copyText(text) {
    function viaSelection() {
      var ta = document.createElement("textarea");
      ta.value = text;
      ta.setAttribute("readonly", "");
      ta.className = "offscreen";
      document.body.appendChild(ta);
      ta.select();
      var ok = false;
      try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
      ta.remove();
      return ok ? Promise.resolve() : Promise.reject(new Error("no copy"));
    }
    if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text).catch(viaSelection);
    return viaSelection();
  }

  // moveGroup puts a group one place up or down in the sidebar's order
  // (PUT /api/v1/groups/order with every group of the list, R23.7).
  function moveGroup(btn) {
    var head = btn.closest("[data-group]");
    var ids = Array.prototype.map.call(document.querySelectorAll("#live-sessions [data-group]"), function (e) { return e.dataset.group; });
    var i = ids.indexOf(head.dataset.group), j = btn.dataset.moveGroup === "up" ? i - 1 : i + 1;
    if (i < 0 || j < 0 || j >= ids.length) { say(j < 0 ? "This group is first already." : "This group is last already."); return; }
    ids[i] = ids[j];
    ids[j] = head.dataset.group;
    busy(btn, true);
    api("PUT", "/api/v1/groups/order", { ids: ids }).then(function () {
      busy(btn, false);
      say(btn.textContent.trim() + ": done.");
      refresh();
    }, function (e) { say(e.message, true); busy(btn, false); });
  }

  document.addEventListener("click", function (ev) {
    var cp = ev.target.closest("[data-copy]");
    if (cp) {
      var src = document.getElementById(cp.dataset.copy);
      copyText(src ? (src.tagName === "INPUT" ? src.value : src.textContent) : "").then(function () { say("Copied."); },
        function () { say("This browser did not copy: select the text and copy it.", true); });
      return;
    }
    var mv = ev.target.closest("[data-move-group]");
    if (mv) { moveGroup(mv); return; }
    var b = ev.target.closest("[data-call]");
    if (b) {
      ev.preventDefault();
      if (b.dataset.confirm && !window.confirm(b.dataset.confirm)) return;
      var ms = split(b.dataset.call);
      var body = b.dataset.json ? JSON.parse(b.dataset.json) : undefined;
      busy(b, true);
      api(ms[0], ms[1], body).then(function (data) {
        busy(b, false);
        if (b.dataset.show) show(document.getElementById(b.dataset.show), data || {});
        say(b.dataset.done || ((b.getAttribute("aria-label") || b.textContent.trim()) + ": done."));
        refresh();
      }, function (e) { say(e.message, true); busy(b, false); });
      return;
    }
  });

  // show fills an element's [data-field] parts from an API answer (a value
  // shown once, like a new peer token) and shows it.
  function show(el, data) {
    if (!el) return;
    Array.prototype.forEach.call(el.querySelectorAll("[data-field]"), function (f) {
      var v = data[f.dataset.field];
      v = v === undefined || v === null ? "" : String(v);
      if (f.tagName === "INPUT" || f.tagName === "TEXTAREA") { f.value = v; return; }
      var text = v && f.dataset.format ? f.dataset.format.replace("{}", v) : v;
      if (f.dataset.attr) { f.setAttribute(f.dataset.attr, text); return; }
      f.textContent = text;
    });
    el.hidden = false;
    var first = el.querySelector("input[data-field]");
    if (first) { first.focus(); first.select(); }
  }

  document.addEventListener("submit", function (ev) {
    var f = ev.target;
    if (!f.dataset.api) return;
    ev.preventDefault();
    var ms = split(f.dataset.api);
    // A form with a [data-form-error] part shows a refusal there, next to what was typed.
    var errEl = f.querySelector("[data-form-error]");
    if (errEl) { errEl.hidden = true; errEl.textContent = ""; }
    busy(f, true);
    var body = formBody(f);
    api(ms[0], ms[1], body).then(function (data) {
      busy(f, false);
      // An external session's token is shown here, once (R23.5), instead of opening its page.
      if (f.dataset.external && body.provider === "external" && data && data.token) {
        show(document.getElementById(f.dataset.external), data);
        say("The session was made: connect your MCP client with its token.");
        refresh();
        return;
      }
      if (f.dataset.go && data && data.id) { location.href = f.dataset.go.replace("{id}", data.id); return; }
      if (f.hasAttribute("data-reset")) f.reset();
      say(f.dataset.done || "Saved.");
      refresh();
    }, function (e) {
      busy(f, false);
      if (errEl) { errEl.textContent = e.message; errEl.hidden = false; say(""); return; }
      say(e.message, true);
    });
  });

  // A select with data-change="METHOD URL" sends {name: value} when it changes;
  // a refusal puts it back to what the page last showed.
  document.addEventListener("change", function (ev) {
    var sel = ev.target;
    if (!sel.dataset || !sel.dataset.change) return;
    var ms = split(sel.dataset.change), body = {};
    body[sel.name] = sel.value;
    var label = sel.labels && sel.labels[0] ? sel.labels[0].textContent.trim() : sel.name;
    var chosen = sel.options[sel.selectedIndex] ? sel.options[sel.selectedIndex].textContent : sel.value;
    sel.disabled = true;
    api(ms[0], ms[1], body).then(function () {
      sel.disabled = false;
      say(label + ": " + chosen + ". Saved.");
      refresh();
    }, function (e) {
      sel.disabled = false;
      Array.prototype.forEach.call(sel.options, function (o) { o.selected = o.defaultSelected; });
      say(e.message, true);
    });
  });

  // Ctrl+Enter sends a message.
  document.addEventListener("keydown", function (ev) {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey) && ev.target.tagName === "TEXTAREA" && ev.target.form) {
      ev.preventDefault();
      ev.target.form.requestSubmit();
    }
  });

  // @ in the message box offers the paired relays' names (data-mentions);
  // choosing one inserts "@name ", the mention that unlocks that relay in
  // the conversation. Not after a word character (an e-mail address is no
  // mention). Arrows move, Enter or Tab inserts, Escape closes.
  var men = { box: null, list: null, start: 0, names: [], at: 0 };
  var wordChar = /[A-Za-z0-9_\-\u0080-\uffff]/;
  function mentionQuery(box) {
    var pos = box.selectionStart;
    if (pos !== box.selectionEnd) return null;
    var before = box.value.slice(0, pos);
    var m = /@([A-Za-z0-9_.\-\u0080-\uffff]*)$/.exec(before);
    if (!m) return null;
    var start = pos - m[0].length;
    if (start > 0 && wordChar.test(before.charAt(start - 1))) return null;
    return { start: start, q: m[1].toLowerCase() };
  }
  function mentionClose() {
    if (men.list) { men.list.hidden = true; men.list.replaceChildren(); }
    if (men.box) { men.box.setAttribute("aria-expanded", "false"); men.box.removeAttribute("aria-activedescendant"); }
    men.names = [];
  }
  function mentionMark() {
    Array.prototype.forEach.call(men.list.children, function (li, i) {
      li.setAttribute("aria-selected", i === men.at ? "true" : "false");
    });
    men.box.setAttribute("aria-activedescendant", "mention-" + men.at);
  }
  function mentionOpen(box) {
    var list = document.getElementById(box.getAttribute("aria-controls") || "");
    var q = mentionQuery(box);
    if (!list || !q) { mentionClose(); return; }
    var all = box.dataset.mentions.split("\n").filter(Boolean);
    var names = all.filter(function (n) { return n.toLowerCase().indexOf(q.q) === 0; });
    if (!names.length) { mentionClose(); return; }
    men.box = box; men.list = list; men.start = q.start; men.names = names; men.at = 0;
    list.replaceChildren();
    names.forEach(function (n, i) {
      var li = document.createElement("li");
      li.id = "mention-" + i;
      li.setAttribute("role", "option");
      li.textContent = n;
      list.appendChild(li);
    });
    list.hidden = false;
    box.setAttribute("aria-expanded", "true");
    mentionMark();
  }
  function mentionInsert(i) {
    var box = men.box, name = men.names[i];
    if (!box || name === undefined) return;
    var pos = box.selectionStart, v = box.value;
    var text = "@" + name + " ";
    box.value = v.slice(0, men.start) + text + v.slice(pos);
    var caret = men.start + text.length;
    box.setSelectionRange(caret, caret);
    mentionClose();
    box.focus();
  }
  document.addEventListener("input", function (ev) {
    if (ev.target.dataset && ev.target.dataset.mentions !== undefined) mentionOpen(ev.target);
  });
  document.addEventListener("keydown", function (ev) {
    men.swallow = false;
    if (!men.names.length || ev.target !== men.box || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    var n = men.names.length;
    if (ev.key === "ArrowDown" || ev.key === "ArrowUp") {
      men.at = (men.at + (ev.key === "ArrowDown" ? 1 : n - 1)) % n;
      mentionMark();
    } else if (ev.key === "Enter" || ev.key === "Tab") {
      mentionInsert(men.at);
      men.swallow = true; // and not the newline of the key's keypress
    } else if (ev.key === "Escape") {
      mentionClose();
    } else {
      return;
    }
    ev.preventDefault();
    ev.stopPropagation();
  }, true);
  document.addEventListener("keypress", function (ev) {
    if (men.swallow) { ev.preventDefault(); men.swallow = false; }
  }, true);
  // mousedown keeps the focus in the box; the click chooses.
  document.addEventListener("mousedown", function (ev) {
    if (ev.target.closest && ev.target.closest(".mentions [role=option]")) ev.preventDefault();
  });
  document.addEventListener("click", function (ev) {
    var o = ev.target.closest && ev.target.closest(".mentions [role=option]");
    if (o) mentionInsert(Array.prototype.indexOf.call(o.parentNode.children, o));
  });
  document.addEventListener("focusout", function (ev) {
    if (ev.target === men.box) setTimeout(function () { if (document.activeElement !== men.box) mentionClose(); }, 0);
  });

  // New session: the model list follows the provider; "Your own MCP
  // client" (external) takes no model and no first message.
  function toggleExternal(sel) {
    var ext = sel.value === "external";
    Array.prototype.forEach.call(sel.form.querySelectorAll("[data-not-external]"), function (d) {
      d.hidden = ext;
      Array.prototype.forEach.call(d.querySelectorAll("input, textarea, select"), function (x) { x.disabled = ext; });
    });
    Array.prototype.forEach.call(sel.form.querySelectorAll("[data-only-external]"), function (d) { d.hidden = !ext; });
  }
  document.addEventListener("change", function (ev) {
    var sel = ev.target;
    if (!sel.dataset || !sel.dataset.models) return;
    if (sel.form) toggleExternal(sel);
    var opt = sel.options[sel.selectedIndex], list = document.getElementById(sel.dataset.models);
    if (!opt || !list) return;
    list.replaceChildren();
    (opt.dataset.models || "").split("\n").filter(Boolean).forEach(function (m) {
      var o = document.createElement("option"); o.value = m; list.appendChild(o);
    });
  });

  // Live parts: each [data-live] element's children carry ids; a child whose
  // server HTML did not change is kept as it is (with what the owner typed).
  function mark(root) {
    root._src = root.innerHTML;
    Array.prototype.forEach.call(root.children, function (c) { c._src = c.outerHTML; });
  }
  // keepOpen keeps what the owner opened (a folded run of tool calls) open
  // when its element is replaced by a newer one.
  function keepOpen(o, n) {
    var was = o.querySelectorAll("details"), now = n.querySelectorAll("details");
    for (var i = 0; i < was.length && i < now.length; i++) if (was[i].open) now[i].open = true;
  }
  function merge(cur, nu) {
    if (cur._src === nu.innerHTML) return false;
    cur._src = nu.innerHTML;
    var old = {};
    Array.prototype.forEach.call(cur.children, function (c) { if (c.id) old[c.id] = c; });
    var want = Array.prototype.map.call(nu.children, function (c) {
      var o = c.id && old[c.id];
      if (o && o._src === c.outerHTML) return o;
      var n = document.importNode(c, true);
      n._src = c.outerHTML;
      if (o) keepOpen(o, n);
      return n;
    });
    var keep = new Set(want);
    Array.prototype.slice.call(cur.childNodes).forEach(function (c) { if (!keep.has(c)) c.remove(); });
    want.forEach(function (n, i) {
      if (cur.children[i] !== n) cur.insertBefore(n, cur.children[i] || null);
    });
    return true;
  }

  if (document.body.dataset.page === "session" && !location.hash) window.scrollTo(0, document.body.scrollHeight);
  // "New session" beside a conversation links to /#new-session: open it there.
  var named = location.hash && document.getElementById(location.hash.slice(1));
  if (named && named.tagName === "DETAILS") named.open = true;
  var live = document.querySelectorAll("[data-live]");
  Array.prototype.forEach.call(live, mark);
  var pending = false, sidePending = false, running = false, timer = 0;
  function refresh() {
    pending = true;
    if (running || timer) return;
    timer = setTimeout(run, 60);
  }
  // refreshSide refreshes only the sessions list beside a conversation
  // (another session changed): the page's ?side=1 renders the list alone,
  // asked by the session's full id (the address may hold only a prefix).
  function refreshSide() {
    if (document.body.dataset.page !== "session") { refresh(); return; }
    sidePending = true;
    if (running || timer) return;
    timer = setTimeout(run, 60);
  }
  function run() {
    timer = 0;
    if (!pending && !sidePending) return;
    var src = pending ? location.href : "/s/" + encodeURIComponent(me) + "?side=1";
    pending = false;
    sidePending = false;
    running = true;
    var msgs = document.getElementById("live-msgs");
    var atEnd = (window.innerHeight + window.scrollY) >= document.body.scrollHeight - 80;
    fetch(src, { credentials: "same-origin", headers: { "X-Live": "1" } }).then(function (res) {
      return res.text().then(function (t) { return { res: res, t: t }; });
    }).then(function (x) {
      var doc = new DOMParser().parseFromString(x.t, "text/html");
      if (!doc.querySelector("#live-nav") || x.res.status >= 400) { location.reload(); return; }
      var changed = false;
      Array.prototype.forEach.call(document.querySelectorAll("[data-live]"), function (cur) {
        var nu = doc.getElementById(cur.id);
        if (nu && merge(cur, nu)) changed = true;
      });
      if (changed && msgs && atEnd) window.scrollTo(0, document.body.scrollHeight);
      document.dispatchEvent(new CustomEvent("relay:refreshed"));
    }).catch(function () { /* the stream's reconnect brings the next refresh */ }).then(function () {
      running = false;
      if (pending || sidePending) timer = setTimeout(run, 60);
    });
  }

  // The stream: EventSource reconnects by itself (the relay asks for 1 s);
  // a closed one (signed out, relay gone long) is opened again.
  var me = document.body.dataset.session || "";
  var page = document.body.dataset.page;
  function connect() {
    if (!document.getElementById("live-nav")) return;
    var es = new EventSource("/api/v1/stream");
    window.relayStream = es;
    es.addEventListener("hello", function () { document.body.dataset.stream = "open"; refresh(); });
    es.addEventListener("session", function (e) {
      if (page === "session" && e.data !== me) { refreshSide(); return; }
      if (page === "settings" || page === "relays" || page === "inbox") return;
      refresh();
    });
    ["cards", "inbox", "question", "settings"].forEach(function (k) { es.addEventListener(k, refresh); });
    // A notice for the owner (R23.10): notify.js shows it.
    es.addEventListener("notice", function (e) { document.dispatchEvent(new CustomEvent("relay:notice", { detail: e.data })); });
    // The sessions list itself changed (a group made, renamed or dissolved; a subscription to all sessions).
    es.addEventListener("sessions", function () { if (page === "sessions" || page === "session") refresh(); });
    es.addEventListener("turn", function () { if (page !== "session") refresh(); else refreshSide(); });
    es.onerror = function () {
      document.body.dataset.stream = "closed";
      if (es.readyState === EventSource.CLOSED) setTimeout(connect, 2000);
    };
  }
  connect();
  window.relayRefresh = refresh;
})();
