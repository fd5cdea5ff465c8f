// The registry dashboard: plain JavaScript, no dependencies, reads only the JSON API.
"use strict";

(function () {
  const POLL_MS = 2000;
  const TICK_MS = 250;
  const FETCH_TIMEOUT_MS = 8000;
  const MAX_TOPIC_ROWS = 200;
  const LATE = 0.8;
  const TOKEN_KEY = "rmq-registry-token";
  const SVG = "http://www.w3.org/2000/svg";

  const $ = (id) => document.getElementById(id);

  const state = {
    etags: {},          // url -> ETag of the body we hold
    cluster: null,      // ClusterInfo
    live: null,         // {now, brokers}
    liveAt: 0,          // performance.now() when `live` arrived
    summary: null,      // one page of topics: {topics: [...], nextCursor, total, orderTopics}
    pages: [],          // cursors of the pages before the one shown (for "Previous")
    cursor: "",         // the shown page's cursor ("" for the first)
    staleMs: null,      // age of the oldest answer served from memory in this refresh (?stale)
    livePaged: false,   // the last /v1/brokers/live answer came in several pages
    summaryUrl: null,   // the URL `summary` came from
    lastOk: null,       // Date of the last complete refresh
    failingSince: null,
    selected: null,     // topic whose route is shown
    routeGen: 0,
    routeAbort: null,
    bars: new Map(),    // brokerAddr -> {row, bar, fill, text, badge}
  };

  // ------------------------------------------------------------------ helpers
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") el.className = v;
      else if (k === "text") el.textContent = v;
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  function s(tag, attrs, ...children) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return el;
  }

  function token() {
    try { return sessionStorage.getItem(TOKEN_KEY) || ""; } catch (e) { return ""; }
  }

  function headers(etag) {
    const out = { Accept: "application/json" };
    const t = token();
    if (t) out.Authorization = "Bearer " + t;
    if (etag) out["If-None-Match"] = etag;
    return out;
  }

  function timeOf(date) {
    return date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
  }

  function seconds(ms) {
    if (ms < 10000) return (ms / 1000).toFixed(1) + " s";
    if (ms < 120000) return Math.round(ms / 1000) + " s";
    if (ms < 7200000) return Math.round(ms / 60000) + " min";
    return Math.round(ms / 3600000) + " h";
  }

  // RocketMQ PermName: 4 read, 2 write, 1 inherit
  // Write queues a producer can use: none on a queue row whose perm lost its W bit (a
  // wiped broker), whatever its writeQueueNums says. The analytics jobs count the same way.
  function writeQueues(d) {
    return (d.perm & 2) ? d.writeQueueNums : 0;
  }

  function perm(p) {
    const r = p & 4 ? "R" : "-";
    const w = p & 2 ? "W" : "-";
    const words = [p & 4 ? "read" : "no read", p & 2 ? "write" : "no write"];
    if (p & 1) words.push("inherit");
    return { short: r + w + (p & 1 ? "I" : ""), long: words.join(", ") + " (perm " + p + ")" };
  }

  class HttpError extends Error {
    constructor(status, body) {
      super((body && body.message) || "HTTP " + status);
      this.status = status;
      this.code = body && body.error;
    }
  }

  // GET with the ETag we hold; resolves to the new body, or null when unchanged (304).
  async function getJson(url) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
    try {
      const resp = await fetch(url, { headers: headers(state.etags[url]), cache: "no-store", signal: ctl.signal });
      // present only on an answer served from a worker's memory while Redis is unreachable
      const age = resp.headers.get("X-Registry-Age-Ms");
      if (age !== null) state.staleMs = Math.max(state.staleMs || 0, Number(age));
      if (resp.status === 304) return null;
      let body = null;
      try { body = await resp.json(); } catch (e) { body = null; }
      if (!resp.ok) throw new HttpError(resp.status, body);
      const etag = resp.headers.get("ETag");
      if (etag) state.etags[url] = etag; else delete state.etags[url];
      return body;
    } finally {
      clearTimeout(timer);
    }
  }

  // ------------------------------------------------------------------ status line
  function setStatus(kind, text) {
    const el = $("status");
    if (el.dataset.state !== kind || $("status-text").textContent !== text) {
      el.dataset.state = kind;
      $("status-text").textContent = text;
    }
    document.body.classList.toggle("stale", kind !== "ok");
  }

  function showRefreshed() {
    if (!state.lastOk) return;
    const t = $("refreshed");
    t.textContent = timeOf(state.lastOk);
    t.setAttribute("datetime", state.lastOk.toISOString());
    const ago = Date.now() - state.lastOk.getTime();
    $("refreshed-ago").textContent = ago >= 3000 ? "(" + seconds(ago) + " ago)" : "";
  }

  // ------------------------------------------------------------------ polling
  // The topics page shown: server-side paging and prefix search, so the page stays light
  // with 100,000 topics (the server reads one bounded slice per request).
  function summaryUrl() {
    const params = new URLSearchParams({ limit: String(MAX_TOPIC_ROWS) });
    if (state.cursor) params.set("cursor", state.cursor);
    const q = $("topic-search").value.trim();
    if (q) params.set("q", q);
    if ($("order-only").checked) params.set("order", "1");
    return "/v1/topics/summary?" + params.toString();
  }

  // Every broker, following the pages of /v1/brokers/live (one page up to 500 groups).
  async function getLive() {
    const first = "/v1/brokers/live";
    if (state.livePaged) delete state.etags[first];  // a 304 of page 1 says nothing of the rest
    const body = await getJson(first);
    if (body === null || !body.nextCursor) { state.livePaged = false; return body; }
    state.livePaged = true;
    let next = body.nextCursor;
    while (next) {
      const url = first + "?cursor=" + encodeURIComponent(next);
      delete state.etags[url];
      const page = await getJson(url);
      body.brokers.push(...page.brokers);
      next = page.nextCursor;
    }
    body.nextCursor = null;
    return body;
  }

  // The page for the current view; a 304 stands for the page we hold only if we hold it
  // for this very view.
  async function getSummary() {
    const url = summaryUrl();
    if (url !== state.summaryUrl) delete state.etags[url];
    const body = await getJson(url);
    if (body !== null) state.summaryUrl = url;
    return body;
  }

  async function refreshTopics() {
    try {
      const summary = await getSummary();
      if (summary) state.summary = summary;
      renderTopics(); renderChart(); renderCounts();
    } catch (e) { /* the next poll reports it */ }
  }

  function turnPage(forward) {
    if (forward) {
      if (!state.summary || !state.summary.nextCursor) return;
      state.pages.push(state.cursor);
      state.cursor = state.summary.nextCursor;
    } else {
      if (!state.pages.length) return;
      state.cursor = state.pages.pop();
    }
    refreshTopics();
  }

  async function refresh() {
    state.staleMs = null;
    const results = await Promise.allSettled([getJson("/v1/cluster?stale"), getLive(), getSummary()]);
    const failure = results.find((r) => r.status === "rejected");
    const [cluster, live, summary] = results.map((r) => (r.status === "fulfilled" ? r.value : null));
    if (live) { state.live = live; state.liveAt = performance.now(); }
    if (cluster) state.cluster = cluster;
    if (summary) state.summary = summary;
    if (cluster || live) renderClusters();
    if (summary || cluster) renderTopics();
    if (!summary && state.summary) renderPager();
    if (summary) renderChart();
    if (cluster || live || summary) renderCounts();
    if (!failure) {
      state.lastOk = new Date();
      state.failingSince = null;
      setStatus("ok", "Registry reachable");
    } else {
      const e = failure.reason;
      state.failingSince = state.failingSince || new Date();
      const since = " since " + timeOf(state.failingSince);
      if (e instanceof HttpError && e.status === 401) {
        setStatus("auth", "A token is required to read this registry: enter one above");
      } else if (e instanceof HttpError && e.status === 403) {
        setStatus("auth", "The token was refused for reads");
      } else if (e instanceof HttpError && e.status === 503 && state.staleMs !== null) {
        setStatus("stale", "Store (Redis) unavailable" + since + ": showing cluster data as of " +
          seconds(state.staleMs) + " ago, from the registry's memory");
      } else if (e instanceof HttpError && e.status === 503) {
        setStatus("down", "Registry reachable, but its store (Redis) is unavailable" + since);
      } else if (e instanceof HttpError) {
        setStatus("down", "Registry answered " + e.status + " " + (e.code || "") + since);
      } else {
        setStatus("down", "Registry unreachable" + since);
      }
    }
    showRefreshed();
  }

  async function pollLoop() {
    for (;;) {
      try { await refresh(); } catch (e) { console.error(e); }
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }

  // ------------------------------------------------------------------ clusters
  function liveByAddr() {
    const m = new Map();
    for (const b of (state.live && state.live.brokers) || []) m.set(b.brokerAddr, b);
    return m;
  }

  // Redis time now, estimated from the last answer plus the time passed since.
  function serverNow() {
    if (!state.live) return null;
    return state.live.now + (performance.now() - state.liveAt);
  }

  function groupsOf(cluster) {
    const table = (state.cluster && state.cluster.brokerAddrTable) || {};
    return ((state.cluster && state.cluster.clusterAddrTable[cluster]) || [])
      .filter((name) => table[name])
      .map((name) => table[name]);
  }

  function masterState(group, live) {
    const master = group.brokerAddrs["0"];
    if (master === undefined) return "none";
    const b = live.get(master);
    return b && !b.alive ? "expired" : "ok";
  }

  function renderClusters() {
    const box = $("cluster-list");
    if (!state.cluster) return;
    const live = liveByAddr();
    const clusters = Object.keys(state.cluster.clusterAddrTable).sort();
    state.bars = new Map();
    const frag = document.createDocumentFragment();
    if (clusters.length === 0) frag.append(h("p", { class: "empty" }, "No broker is registered."));
    clusters.forEach((cluster, ci) => {
      const groups = groupsOf(cluster);
      const members = groups.reduce((n, g) => n + Object.keys(g.brokerAddrs).length, 0);
      const noMaster = groups.filter((g) => masterState(g, live) !== "ok").length;
      const table = h("table", { class: "brokers", "data-cluster": cluster },
        h("caption", {},
          h("span", { class: "cname" }, cluster), " — ",
          groups.length + (groups.length === 1 ? " broker group, " : " broker groups, ") +
          members + (members === 1 ? " broker" : " brokers"),
          noMaster ? h("span", { class: "badge warn" }, noMaster + " without live master") : null),
        h("thead", {}, h("tr", {},
          h("th", { scope: "col" }, "Address"),
          h("th", { scope: "col" }, "ID"),
          h("th", { scope: "col" }, "Role"),
          h("th", { scope: "col" }, "HA address"),
          h("th", { scope: "col", class: "hb-col" }, "Heartbeat age / timeout"))));
      groups.forEach((g, gi) => {
        const ms = masterState(g, live);
        const gid = "g-" + ci + "-" + gi;
        const body = h("tbody", { class: "group" + (ms !== "ok" ? " no-master" : ""), "data-group": g.brokerName });
        body.append(h("tr", { class: "group-head" },
          h("th", { scope: "colgroup", colspan: 5, id: gid },
            h("span", { class: "gname" }, g.brokerName),
            h("span", { class: "muted" }, " " + Object.keys(g.brokerAddrs).length + " member(s)"),
            ms === "none" ? h("span", { class: "badge bad", "data-flag": "no-master" }, "No master") : null,
            ms === "expired" ? h("span", { class: "badge bad", "data-flag": "master-expired" }, "Master expired") : null)));
        const ids = Object.keys(g.brokerAddrs).sort((a, b) => Number(a) - Number(b));
        for (const id of ids) {
          const addr = g.brokerAddrs[id];
          const b = live.get(addr);
          const fill = h("span", { class: "fill" });
          const bar = h("div", { class: "bar", role: "meter", "aria-valuemin": 0,
                                 "aria-label": "Heartbeat age of " + addr }, fill);
          const text = h("span", { class: "hb-text" });
          const badge = h("span", { class: "badge warn hb-badge", hidden: true });
          const row = h("tr", { class: "member", "data-addr": addr, "data-id": id },
            h("th", { scope: "row", headers: gid }, h("code", {}, addr)),
            h("td", { "data-label": "ID", class: "c-id" }, id),
            h("td", { "data-label": "Role", class: "c-role" }, id === "0" ? h("span", { class: "role master" }, "master")
                                                          : h("span", { class: "role slave" }, "slave")),
            h("td", { "data-label": "HA address", class: "c-ha" }, b && b.haServerAddr ? h("code", {}, b.haServerAddr) : h("span", { class: "muted" }, "—")),
            h("td", { "data-label": "Heartbeat", class: "hb-cell" }, h("div", { class: "hb" }, bar, text, badge)));
          body.append(row);
          state.bars.set(addr, { row, bar, fill, text, badge, broker: b });
        }
        table.append(body);
      });
      frag.append(h("section", { class: "cluster", "aria-label": "Cluster " + cluster },
        h("div", { class: "table-wrap" }, table)));
    });
    box.replaceChildren(frag);
    tickBars();
  }

  // Heartbeat bars move between polls: ages are counted from the last Redis time seen.
  function tickBars() {
    const now = serverNow();
    for (const [addr, it] of state.bars) {
      const b = it.broker;
      let kind, pct, label, valueNow = 0, valueMax = 1;
      if (!b || now === null) {
        kind = "unknown"; pct = 0; label = "no heartbeat data";
      } else if (!b.alive || b.lastUpdateTimestamp === null) {
        kind = "expired"; pct = 100;
        label = b.deadline && now - b.deadline >= 1000 ? "expired " + seconds(now - b.deadline) + " ago" : "expired";
      } else {
        const age = Math.max(0, now - b.lastUpdateTimestamp);
        const timeout = b.heartbeatTimeoutMillis || 1;
        const ratio = age / timeout;
        valueNow = Math.min(age, timeout); valueMax = timeout;
        pct = Math.min(100, ratio * 100);
        kind = ratio >= 1 ? "expired" : ratio > LATE ? "late" : "ok";
        label = seconds(age) + " / " + seconds(timeout);
      }
      it.fill.style.width = pct.toFixed(1) + "%";
      it.bar.dataset.state = kind;
      it.row.dataset.state = kind;
      it.bar.setAttribute("aria-valuemax", String(Math.round(valueMax)));
      it.bar.setAttribute("aria-valuenow", String(Math.round(valueNow)));
      it.bar.setAttribute("aria-valuetext", label);
      it.text.textContent = label;
      // the text says "expired" already; "late" needs saying, not only the colour
      it.badge.textContent = kind === "late" ? "late" : "";
      it.badge.hidden = kind !== "late";
    }
  }

  // ------------------------------------------------------------------ overview
  function renderCounts() {
    const live = liveByAddr();
    if (state.cluster) {
      const clusters = Object.keys(state.cluster.clusterAddrTable);
      const groups = Object.values(state.cluster.brokerAddrTable);
      let total = 0, alive = 0;
      for (const g of groups) {
        for (const addr of Object.values(g.brokerAddrs)) {
          total += 1;
          const b = live.get(addr);
          if (b && b.alive) alive += 1;
        }
      }
      const noMaster = groups.filter((g) => masterState(g, live) !== "ok").length;
      $("count-clusters").textContent = clusters.length;
      $("count-groups").textContent = groups.length;
      $("count-brokers").textContent = alive + " / " + total;
      $("count-nomaster").textContent = noMaster;
      $("count-nomaster").parentElement.classList.toggle("alert", noMaster > 0);
    }
    if (state.summary) {
      $("count-topics").textContent = state.summary.total;
      $("count-order").textContent = state.summary.orderTopics;
    }
  }

  // ------------------------------------------------------------------ topics
  function renderPager() {
    const more = $("topic-more");
    const paged = state.pages.length > 0 || Boolean(state.summary && state.summary.nextCursor);
    more.hidden = !paged;
    $("topic-prev").disabled = state.pages.length === 0;
    $("topic-next").disabled = !(state.summary && state.summary.nextCursor);
    $("topic-page").textContent = "Page " + (state.pages.length + 1);
  }

  function renderTopics() {
    if (!state.summary) return;
    const q = $("topic-search").value.trim();
    const orderOnly = $("order-only").checked;
    const total = state.summary.total;
    const shown = state.summary.topics;
    const found = shown;
    const focused = document.activeElement && document.activeElement.dataset
      ? document.activeElement.dataset.topic : undefined;
    const cluster = state.cluster ? state.cluster.brokerAddrTable : {};

    const rows = document.createDocumentFragment();
    for (const t of shown) {
      const read = t.queueDatas.reduce((n, d) => n + d.readQueueNums, 0);
      const write = t.queueDatas.reduce((n, d) => n + writeQueues(d), 0);
      const list = h("ul", { class: "qlist" });
      for (const d of t.queueDatas) {
        const p = perm(d.perm);
        const c = cluster[d.brokerName] ? cluster[d.brokerName].cluster : null;
        list.append(h("li", {},
          h("span", { class: "bn", title: c ? "cluster " + c : null }, d.brokerName), " ",
          h("span", { class: "q" }, "r" + d.readQueueNums + " w" + d.writeQueueNums), " ",
          h("abbr", { class: "perm" + ((d.perm & 2) ? "" : " nowrite"), title: p.long }, p.short)));
      }
      const selected = t.topic === state.selected;
      rows.append(h("tr", { "data-topic": t.topic, class: selected ? "selected" : null },
        h("th", { scope: "row" },
          h("button", { type: "button", class: "topic-link", "data-topic": t.topic,
                        "aria-controls": "route-panel", "aria-pressed": selected ? "true" : "false" }, t.topic)),
        h("td", { "data-label": "Order", class: "c-order" + (t.orderTopicConf ? "" : " none") }, t.orderTopicConf
          ? h("span", { class: "badge order", title: "ORDER_TOPIC_CONFIG: " + t.orderTopicConf }, "order")
          : h("span", { class: "muted", "aria-label": "not an order topic" }, "—")),
        h("td", { class: "num c-read", "data-label": "Read queues" }, read),
        h("td", { class: "num c-write", "data-label": "Write queues" }, write),
        h("td", { class: "c-groups", "data-label": "Per broker group" }, list)));
    }
    $("topic-rows").replaceChildren(rows);
    const filtered = q || orderOnly;
    const more = state.summary.nextCursor ? "+" : "";
    const first = state.pages.length * MAX_TOPIC_ROWS;
    $("topic-caption").textContent = filtered
      ? (first ? "topics " + (first + 1) + "-" + (first + shown.length) + " of those matching " : shown.length + more + " of ")
        + total + " topics match"
      : (state.pages.length || state.summary.nextCursor
        ? "topics " + (first + 1) + "-" + (first + shown.length) + " of " + total
        : total + " topics");
    renderPager();
    if (found.length === 0) {
      $("topic-rows").append(h("tr", {}, h("td", { colspan: 5, class: "empty" },
        total ? "No topic matches the search." : "No topic is registered.")));
    }
    if (focused !== undefined) {
      const again = $("topic-rows").querySelector('button[data-topic="' + CSS.escape(focused) + '"]');
      if (again) again.focus();
    }
  }

  // ------------------------------------------------------------------ chart
  function renderChart() {
    const box = $("chart");
    const totals = new Map();
    for (const t of state.summary.topics) {
      for (const d of t.queueDatas) totals.set(d.brokerName, (totals.get(d.brokerName) || 0) + writeQueues(d));
    }
    const names = [...totals.keys()].sort();
    if (names.length === 0) {
      box.replaceChildren(h("p", { class: "empty" }, "No queues yet."));
      return;
    }
    const W = 360, rowH = 22, top = 6, labelW = 112, valueW = 48;
    const H = top * 2 + names.length * rowH;
    const max = Math.max(...totals.values(), 1);
    const mean = [...totals.values()].reduce((a, b) => a + b, 0) / names.length;
    const scale = (v) => (v / max) * (W - labelW - valueW);
    const min = Math.min(...totals.values());
    const desc = names.map((n) => n + " " + totals.get(n)).join(", ");
    const svg = s("svg", { viewBox: "0 0 " + W + " " + H, width: "100%", role: "img",
                           "aria-labelledby": "chart-title chart-desc", class: "bars-chart" },
      s("title", { id: "chart-title" }, "Write queues per broker group"),
      s("desc", { id: "chart-desc" }, desc + ". Mean " + mean.toFixed(1) + "."));
    names.forEach((n, i) => {
      const v = totals.get(n);
      const y = top + i * rowH;
      const skew = mean > 0 && (v > mean * 1.5 || v < mean * 0.5);
      svg.append(
        s("text", { x: labelW - 6, y: y + rowH / 2 + 4, "text-anchor": "end", class: "lbl" }, n.length > 16 ? n.slice(0, 15) + "…" : n),
        s("rect", { x: labelW, y: y + 3, width: Math.max(1, scale(v)).toFixed(1), height: rowH - 6, rx: 2,
                    class: "bar" + (skew ? " skew" : ""), "data-group": n }),
        s("text", { x: labelW + scale(v) + 4, y: y + rowH / 2 + 4, class: "val" }, v));
    });
    const mx = labelW + scale(mean);
    svg.append(s("line", { x1: mx, x2: mx, y1: 2, y2: H - 2, class: "mean" }));
    box.replaceChildren(svg);
    $("chart-caption").textContent = "Writable write queues per broker group (sum over topics whose perm has W; " +
      "dashed line: mean " + mean.toFixed(1) + (min > 0 ? ", max/min " + (max / min).toFixed(1) : "") + ")";
  }

  // ------------------------------------------------------------------ route panel
  function showRoute(topic, focus) {
    if (state.routeAbort) state.routeAbort.abort();
    state.selected = topic;
    const gen = ++state.routeGen;
    $("route-topic").textContent = topic;
    $("route-json").textContent = "";
    $("route-status").textContent = "Loading…";
    $("route-panel").hidden = false;
    for (const b of document.querySelectorAll("#topic-rows button.topic-link")) {
      const on = b.dataset.topic === topic;
      b.setAttribute("aria-pressed", on ? "true" : "false");
      b.closest("tr").classList.toggle("selected", on);
    }
    if (focus) $("route-h").focus();
    watchRoute(topic, gen);
  }

  function closeRoute() {
    const topic = state.selected;
    if (state.routeAbort) state.routeAbort.abort();
    state.routeGen += 1;
    state.selected = null;
    $("route-panel").hidden = true;
    for (const tr of document.querySelectorAll("#topic-rows tr.selected")) tr.classList.remove("selected");
    for (const b of document.querySelectorAll('#topic-rows button[aria-pressed="true"]')) b.setAttribute("aria-pressed", "false");
    const back = topic && $("topic-rows").querySelector('button[data-topic="' + CSS.escape(topic) + '"]');
    (back || $("topic-search")).focus();
  }

  // The route as a producer receives it; then long polls (?watch=<etag>) for its next change.
  async function watchRoute(topic, gen) {
    let etag = null;
    const base = "/v1/routes/" + encodeURIComponent(topic);
    while (state.routeGen === gen) {
      const ctl = new AbortController();
      state.routeAbort = ctl;
      const url = etag ? base + "?watch=" + encodeURIComponent(etag) + "&timeout=30s" : base;
      let resp, body = null;
      try {
        resp = await fetch(url, { headers: headers(), cache: "no-store", signal: ctl.signal });
        if (resp.status !== 304) { try { body = await resp.json(); } catch (e) { body = null; } }
      } catch (e) {
        if (state.routeGen !== gen) return;
        $("route-status").textContent = "Registry unreachable; retrying…";
        await new Promise((r) => setTimeout(r, POLL_MS));
        continue;
      }
      if (state.routeGen !== gen) return;
      if (resp.status === 304) continue;
      const got = resp.headers.get("ETag");
      const when = timeOf(new Date());
      if (resp.status === 200) {
        $("route-json").textContent = JSON.stringify(body, null, 2);
        $("route-status").textContent = "As of " + when + "; watching for changes.";
      } else if (resp.status === 404 && body && body.error === "TOPIC_NOT_EXIST") {
        $("route-json").textContent = JSON.stringify(body, null, 2);
        $("route-status").textContent = "No live broker serves this topic (as of " + when + "); watching.";
      } else {
        $("route-status").textContent = "Could not read the route: " + resp.status + " " +
          ((body && body.message) || "") + "; retrying…";
      }
      etag = resp.status === 200 || resp.status === 404 ? got : null;
      if (!etag) await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }

  // ------------------------------------------------------------------ input
  function topicButtons() {
    return [...document.querySelectorAll("#topic-rows button.topic-link")];
  }

  function onTopicKey(ev) {
    const btn = ev.target.closest("button.topic-link");
    if (!btn) return;
    const all = topicButtons();
    const i = all.indexOf(btn);
    let next = null;
    if (ev.key === "ArrowDown") next = all[i + 1];
    else if (ev.key === "ArrowUp") next = all[i - 1];
    else if (ev.key === "Home") next = all[0];
    else if (ev.key === "End") next = all[all.length - 1];
    else return;
    ev.preventDefault();
    if (next) next.focus();
  }

  function init() {
    const input = $("token");
    input.value = token();
    $("token-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      try { sessionStorage.setItem(TOKEN_KEY, input.value.trim()); } catch (e) { /* private mode */ }
      state.etags = {};
      if (state.selected) showRoute(state.selected, false);
      refresh();
    });
    $("token-clear").addEventListener("click", () => {
      try { sessionStorage.removeItem(TOKEN_KEY); } catch (e) { /* private mode */ }
      input.value = "";
      state.etags = {};
      refresh();
    });
    let debounce = null;
    const restart = () => { state.pages = []; state.cursor = ""; refreshTopics(); };
    $("topic-search").addEventListener("input", () => {
      clearTimeout(debounce);
      debounce = setTimeout(restart, 150);
    });
    $("order-only").addEventListener("change", restart);
    $("topic-prev").addEventListener("click", () => turnPage(false));
    $("topic-next").addEventListener("click", () => turnPage(true));
    $("topic-rows").addEventListener("click", (ev) => {
      const btn = ev.target.closest("button.topic-link");
      if (btn) showRoute(btn.dataset.topic, true);
    });
    $("topic-rows").addEventListener("keydown", onTopicKey);
    $("route-close").addEventListener("click", closeRoute);
    $("route-panel").addEventListener("keydown", (ev) => {
      if (ev.key === "Escape") { ev.preventDefault(); closeRoute(); }
    });
    document.addEventListener("keydown", (ev) => {
      const typing = ev.target.closest && ev.target.closest("input, textarea, select");
      if (ev.key === "/" && !typing && !ev.ctrlKey && !ev.metaKey && !ev.altKey) {
        ev.preventDefault();
        $("topic-search").focus();
      }
    });
    setInterval(() => { tickBars(); showRefreshed(); }, TICK_MS);
    pollLoop();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
