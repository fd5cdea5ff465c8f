// The registry dashboard: plain JavaScript, no dependencies, reads only the JSON API.
"use strict";

(function () {
  const POLL_MS = 2000;
  const TICK_MS = 250;
  const TALLY_STEP_MS = 300;    // while the server reads a pass of the write-queue tally
  const FETCH_TIMEOUT_MS = 8000;
  const MAX_TOPIC_ROWS = 200;
  const OPEN_UP_TO = 30;        // broker groups: up to this many, every cluster starts open
  const TOKEN_KEY = "rmq-registry-token";
  const SVG = "http://www.w3.org/2000/svg";

  const $ = (id) => document.getElementById(id);
  // group-2 before group-10
  const natural = new Intl.Collator(undefined, { numeric: true, sensitivity: "base" }).compare;

  const state = {
    etags: {},          // url -> ETag of the body we hold
    cluster: null,      // ClusterInfo
    live: null,         // {now, brokers}
    liveAt: 0,          // performance.now() when `live` arrived
    liveMap: new Map(), // brokerAddr -> live row
    summary: null,      // one page of topics: {topics: [...], nextCursor, total, orderTopics}
    tally: null,        // {tally: {groups, finishedAt, ...} | null, pass: {read, of} | null}
    tallyBusy: false,
    pages: [],          // cursors of the pages before the one shown (for "Previous")
    cursor: "",         // the shown page's cursor ("" for the first)
    staleMs: null,      // age of the oldest answer served from memory in this refresh (?stale)
    lastReached: null,  // ms epoch: when the worker last reached Redis (its 503s say)
    livePaged: false,   // the last /v1/brokers/live answer came in several pages
    summaryUrl: null,   // the URL `summary` came from
    lastOk: null,       // Date of the last complete refresh
    failingSince: null,
    selected: null,     // topic whose route is shown
    route: null,        // the route shown (body)
    routeGen: 0,
    routeAbort: null,
    broker: null,       // address whose details are shown
    open: new Set(),    // clusters the user opened
    closed: new Set(),  // clusters the user closed
    bars: new Map(),    // brokerAddr -> {row, bar, fill, text, badge}
    groupBodies: new Map(), // brokerName -> {body, head, group}
    problemsKey: "",
    departures: [],     // the brokers that left in the last hour, newest first (GET /v1/departures)
    storeReset: null,   // the last store reset the worker noticed, while the fleet is not back (/v1/store)
    readsFailing: false, // the last refresh's reads failed: the page cannot say what is right now
    departuresRead: false, // the last /v1/departures read answered
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

  function hourMinute(date) {
    return date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hour12: false });
  }

  function seconds(ms) {
    if (ms < 10000) return (ms / 1000).toFixed(1) + " s";
    if (ms < 120000) return Math.round(ms / 1000) + " s";
    if (ms < 7200000) return Math.round(ms / 60000) + " min";
    return Math.round(ms / 3600000) + " h";
  }

  function num(n) { return Number(n).toLocaleString("en-US"); }

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
      // on a 503: when the worker last reached Redis (its clock, not this tab's)
      const reached = resp.headers.get("X-Registry-Last-Reached");
      if (reached !== null) state.lastReached = Number(reached);
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

  // ------------------------------------------------------------------ status line and banner
  function setStatus(kind, text) {
    const el = $("status");
    if (el.dataset.state !== kind || $("status-text").textContent !== text) {
      el.dataset.state = kind;
      $("status-text").textContent = text;
    }
    document.body.classList.toggle("stale", kind !== "ok");
  }

  // `reached`: ms epoch of the worker's last Redis answer, kept on the banner for tools
  function setOutage(text, reached) {
    const el = $("outage");
    el.hidden = !text;
    if (el.textContent !== (text || "")) el.textContent = text || "";
    if (reached) el.dataset.reached = String(reached.getTime()); else delete el.dataset.reached;
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
  // The topics page shown: server-side paging, prefix search and filters, so the page
  // stays light with 100,000 topics (the server reads a bounded slice per request).
  function summaryUrl() {
    const params = new URLSearchParams({ limit: String(MAX_TOPIC_ROWS) });
    if (state.cursor) params.set("cursor", state.cursor);
    const q = $("topic-search").value.trim();
    if (q) params.set("q", q);
    if ($("order-only").checked) params.set("order", "1");
    const cluster = $("topic-cluster").value;
    if (cluster) params.set("cluster", cluster);
    if (!$("show-system").checked) params.set("system", "0");
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

  // The fleet-wide tally: each request lets the server read one more slice of a pass;
  // while a pass is under way the page asks again soon, so the chart fills in seconds.
  async function pollTally() {
    if (state.tallyBusy) return;
    state.tallyBusy = true;
    try {
      for (;;) {
        const body = await getJson("/v1/brokers/write-queues");
        if (body) { state.tally = body; renderChart(); }
        if (!state.tally || !state.tally.pass) break;
        await new Promise((r) => setTimeout(r, TALLY_STEP_MS));
      }
    } catch (e) {
      /* the status line reports the store; the chart keeps its last pass */
    } finally {
      state.tallyBusy = false;
    }
  }

  // The worker's record of a store reset (Redis lost its data): on the first screen until
  // the fleet is back. A worker without the read (an older one) leaves it unknown.
  async function getStoreReset() {
    try {
      const body = await getJson("/v1/store");
      if (!body) return false;
      const reset = body.lastReset && body.lastReset.recent ? body.lastReset : null;
      const changed = JSON.stringify(reset) !== JSON.stringify(state.storeReset);
      state.storeReset = reset;
      return changed;
    } catch (e) {
      return false;
    }
  }

  async function refreshTopics() {
    try {
      const summary = await getSummary();
      if (summary) state.summary = summary;
      renderTopics(); renderCounts();
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
    const [results, resetChanged] = await Promise.all([
      Promise.allSettled([getJson("/v1/cluster?stale"), getLive(), getSummary(), getJson("/v1/departures")]),
      getStoreReset()]);
    // the departures add to what the page says; the status is the other reads'
    const failure = results.slice(0, 3).find((r) => r.status === "rejected");
    const [cluster, live, summary, record] = results.map((r) => (r.status === "fulfilled" ? r.value : null));
    if (record) state.departures = record.departures;
    // what the first screen may claim: nothing is "wrong" or "right" about what was not read
    const failing = Boolean(failure), departuresRead = Boolean(record);
    const readsChanged = failing !== state.readsFailing || departuresRead !== state.departuresRead;
    state.readsFailing = failing; state.departuresRead = departuresRead;
    if (live) {
      state.live = live; state.liveAt = performance.now();
      state.liveMap = new Map(live.brokers.map((b) => [b.brokerAddr, b]));
    }
    if (cluster) { state.cluster = cluster; renderClusterOptions(); }
    if (summary) state.summary = summary;
    if (cluster) renderClusters();
    else if (live) updateLive();
    if (cluster && state.tally && state.tally.tally) renderChart();  // its count beside the page's
    if (summary || cluster) renderTopics();
    if (!summary && state.summary) renderPager();
    if (cluster || live || summary || record || resetChanged) renderCounts();
    if (cluster || live || record || resetChanged || readsChanged) renderProblems();
    if (cluster || live) { renderBroker(); renderRoute(); }
    if (!failure) {
      state.lastOk = new Date();
      state.failingSince = null;
      state.lastReached = null;
      setStatus("ok", "Registry reachable");
      setOutage(null);
      pollTally();
    } else {
      reportFailure(failure.reason);
      if (!state.tally) $("chart").replaceChildren(h("p", { class: "empty" }, "Not available until the registry's reads answer."));
    }
    showRefreshed();
  }

  function reportFailure(e) {
    state.failingSince = state.failingSince || new Date();
    // since when: the worker's own record of its last Redis answer when it gives one, so
    // a tab opened in the middle of an outage does not date the outage from its opening
    const reached = state.lastReached !== null ? new Date(state.lastReached) : null;
    const since = " since " + timeOf(reached || state.failingSince);
    const held = state.lastOk ? " This page shows the data of its last refresh, at " + timeOf(state.lastOk) + "."
      : state.staleMs !== null ? " This page shows the cluster table the worker held in memory; heartbeats and topics are unknown."
        : " This page has no data from before the outage.";
    if (e instanceof HttpError && e.status === 401) {
      setStatus("auth", "A token is required to read this registry: enter one above");
      setOutage(null);
    } else if (e instanceof HttpError && e.status === 403) {
      setStatus("auth", "The token was refused for reads");
      setOutage(null);
    } else if (e instanceof HttpError && e.status === 503) {
      if (state.staleMs !== null) {
        setStatus("stale", "Store (Redis) unavailable" + since + ": showing cluster data as of " +
          seconds(state.staleMs) + " ago, from the registry's memory");
      } else {
        setStatus("down", "Registry reachable, but its store (Redis) is unavailable" + since);
      }
      setOutage(reached
        ? "Outage: the registry's store (Redis) does not answer. The worker serving this page last reached it at " +
          reached.toLocaleString([], { hour12: false }) + " (" + seconds(Date.now() - reached.getTime()) + " ago)." + held
        : "Outage: the registry's store (Redis) does not answer; the worker serving this page has not reached it since it started." + held,
        reached);
    } else if (e instanceof HttpError) {
      setStatus("down", "Registry answered " + e.status + " " + (e.code || "") + since);
      setOutage(null);
    } else {
      setStatus("down", "Registry unreachable since " + timeOf(state.failingSince));
      setOutage("Outage: no registry worker answers this page (first failed request at " +
        timeOf(state.failingSince) + ")." + held);
    }
  }

  async function pollLoop() {
    for (;;) {
      try { await refresh(); } catch (e) { console.error(e); }
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }

  // ------------------------------------------------------------------ liveness
  // Redis time now, estimated from the last answer plus the time passed since.
  function serverNow() {
    if (!state.live) return null;
    return state.live.now + (performance.now() - state.liveAt);
  }

  // {kind: ok | late | expired | unknown, label, age, timeout} of one address now
  function liveness(addr) {
    const b = state.liveMap.get(addr);
    const now = serverNow();
    if (!b || now === null) return { kind: "unknown", label: "no heartbeat data", b };
    if (!b.alive || b.lastUpdateTimestamp === null) {
      const label = b.deadline && now - b.deadline >= 1000 ? "expired " + seconds(now - b.deadline) + " ago" : "expired";
      return { kind: "expired", label, b };
    }
    const age = Math.max(0, now - b.lastUpdateTimestamp);
    const timeout = b.heartbeatTimeoutMillis || 1;
    const ratio = age / timeout;
    const kind = ratio >= 1 ? "expired" : ratio > state.live.lateFraction ? "late" : "ok";  // the server's rule
    return { kind, label: seconds(age) + " / " + seconds(timeout), age, timeout, ratio, b };
  }

  function groupsOf(cluster) {
    const table = (state.cluster && state.cluster.brokerAddrTable) || {};
    return ((state.cluster && state.cluster.clusterAddrTable[cluster]) || [])
      .filter((name) => table[name])
      .map((name) => table[name])
      .sort((a, b) => natural(a.brokerName, b.brokerName));
  }

  function masterState(group) {
    const master = group.brokerAddrs["0"];
    if (master === undefined) return "none";
    const b = state.liveMap.get(master);
    return b && !b.alive ? "expired" : "ok";
  }

  function clusterNames() {
    return state.cluster ? Object.keys(state.cluster.clusterAddrTable).sort(natural) : [];
  }

  function totalGroups() {
    return state.cluster ? Object.keys(state.cluster.brokerAddrTable).length : 0;
  }

  // ------------------------------------------------------------------ problems first
  function problems() {
    const out = { noMaster: [], late: [], expired: [] };
    for (const cluster of clusterNames()) {
      for (const g of groupsOf(cluster)) {
        const ms = masterState(g);
        if (ms !== "ok") out.noMaster.push({ g, cluster, ms });
        for (const [id, addr] of Object.entries(g.brokerAddrs)) {
          const l = liveness(addr);
          if (l.kind === "late") out.late.push({ g, cluster, id, addr, l });
          else if (l.kind === "expired") out.expired.push({ g, cluster, id, addr, l });
        }
      }
    }
    return out;
  }

  // The registry's record of the last hour, so every browser sees the same, split in two:
  // `left`, the newest departure of each address that did not come back (not registered
  // now, no return marked); `back`, every departure whose broker came back since (a return
  // the registry marked, an address registered now, or one that left again later), which
  // stays on the screen for its hour.
  function departed() {
    const registered = new Set();
    for (const g of Object.values((state.cluster && state.cluster.brokerAddrTable) || {})) {
      for (const addr of Object.values(g.brokerAddrs)) registered.add(addr);
    }
    const newest = new Map();
    for (const d of state.departures) if (!newest.has(d.brokerAddr)) newest.set(d.brokerAddr, d);
    const left = [], back = [];
    for (const d of state.departures) {
      const latest = newest.get(d.brokerAddr) === d;
      if (d.backAt != null || !latest || registered.has(d.brokerAddr)) back.push(d);
      else left.push(d);
    }
    return { left, back };
  }

  function groupLink(name) {
    return h("a", { href: "#group-" + encodeURIComponent(name), class: "glink", "data-group": name }, name);
  }

  function renderProblems() {
    if (!state.cluster) return;
    const p = problems();
    const { left, back } = departed();
    const table = state.cluster.brokerAddrTable;
    // a group none of whose members is registered now, with its newest departure
    const gone = [...new Map(left.filter((d) => !table[d.brokerName]).map((d) => [d.brokerName, d]).reverse()).values()]
      .sort((a, b) => b.at - a.at);
    const stayed = left.filter((d) => table[d.brokerName]);  // members of groups still registered
    // rebuilt when what it says changes (the ages of late and expired members included)
    const key = JSON.stringify([p.noMaster.map((x) => x.g.brokerName + x.ms), p.late.map((x) => x.addr + x.l.label),
      p.expired.map((x) => x.addr + x.l.label), left.map((d) => d.brokerAddr + d.at),
      back.map((d) => d.brokerAddr + d.at + d.backAt), state.storeReset, state.readsFailing, state.departuresRead]);
    if (key === state.problemsKey) return;
    state.problemsKey = key;
    const box = $("problems");
    const items = [];
    const role = (id) => (String(id) === "0" ? "master" : "slave " + id);
    const when = (d) => d.cause + " at " + timeOf(new Date(d.at));
    const reset = state.storeReset;
    if (reset) {
      items.push(h("li", { class: "bad", "data-problem": "store-reset" },
        h("strong", {}, "The store (Redis) was reset at " + timeOf(new Date(reset.at)) + ": "),
        (reset.lostGroups || reset.lostTopics
          ? num(reset.lostGroups) + " broker groups and " + num(reset.lostTopics) + " topics lost; " +
            num(totalGroups()) + " of " + num(reset.lostGroups) + " groups back."
          : num(reset.lostChanges) + " change records lost (no scan had counted its groups yet); " +
            num(totalGroups()) + " groups back.") +
        " Brokers re-register by themselves within 30 s (Redis restarted empty, a failover to an empty replica, " +
        "or a FLUSHALL)."));
    }
    if (p.noMaster.length) {
      items.push(h("li", { class: "bad", "data-problem": "no-master" },
        h("strong", {}, p.noMaster.length + (p.noMaster.length === 1 ? " group without" : " groups without") + " a live master: "),
        ...joined(p.noMaster.map((x) => h("span", {}, groupLink(x.g.brokerName),
          " (" + x.cluster + (x.ms === "expired" ? ", master expired" : ", no master registered") + ")")))));
    }
    // one line per kind of member problem: how many, then each address with its group and age
    const members = (list, kind, cls, one, many, [whyOne, whyMany]) => {
      if (!list.length) return;
      items.push(h("li", { class: cls, "data-problem": kind },
        h("strong", {}, num(list.length) + (list.length === 1 ? one + " (" + whyOne : many + " (" + whyMany) + "): "),
        ...joined(list.map((x) => h("span", {}, h("code", {}, x.addr), " ", groupLink(x.g.brokerName),
          " " + role(x.id) + ", " + x.l.label)))));
    };
    members(p.expired, "expired", "bad", " member expired", " members expired",
      ["removed at the next expiry scan", "removed at the next expiry scan"]);
    members(p.late, "late", "warn", " member late", " members late",
      ["past 80 % of its timeout", "past 80 % of their timeout"]);
    if (stayed.length) {
      items.push(h("li", { class: "warn", "data-problem": "departed" },
        h("strong", {}, stayed.length + (stayed.length === 1 ? " member left" : " members left") + " in the last hour: "),
        ...joined(stayed.map((d) => h("span", { "data-departed": d.brokerAddr }, h("code", {}, d.brokerAddr), " ",
          groupLink(d.brokerName), " " + role(d.brokerId) + ", " + when(d))))));
    }
    if (gone.length) {
      items.push(h("li", { class: "warn", "data-problem": "gone" },
        h("strong", {}, gone.length + (gone.length === 1 ? " group left" : " groups left") + " in the last hour: "),
        ...joined(gone.map((d) => h("span", { "data-gone": d.brokerName }, h("code", {}, d.brokerName),
          " (" + d.cluster + "), its last member " + when(d))))));
    }
    const problemsNow = items.length;
    if (back.length) {
      items.push(h("li", { class: "info", "data-problem": "back" },
        h("strong", {}, back.length + (back.length === 1 ? " broker left and came back" : " brokers left and came back") +
          " in the last hour: "),
        ...joined(back.map((d) => h("span", { "data-back": d.brokerAddr }, h("code", {}, d.brokerAddr), " ",
          groupLink(d.brokerName), " " + role(d.brokerId) + ", left " + hourMinute(new Date(d.at)) + " (" + d.cause +
          "), back" + (d.backAt != null ? " " + hourMinute(new Date(d.backAt)) : ""))))));
    }
    const help = h("p", { class: "help" }, "Brokers that left are the registry's record of the last hour (unregistered, connection closed or expired), the same for every browser.");
    // "Nothing wrong" only about what this refresh read: during an outage the page holds an
    // older picture, and without the departures read it cannot say none left
    let verdict = null;
    if (state.readsFailing) {
      verdict = h("p", { class: "unknown", "data-verdict": "unknown" }, "Not known now: the registry's reads fail (see above)" +
        (state.lastOk ? "; at the last refresh that answered, " + timeOf(state.lastOk) + ", " +
          (problemsNow ? "it said:" : "nothing was wrong.") : "."));
    } else if (!problemsNow && !totalGroups()) {
      verdict = h("p", { class: "unknown", "data-verdict": "empty" }, "No broker group is registered" +
        (!state.departuresRead ? "; the brokers that left in the last hour could not be read."
          : back.length ? "." : ", and no broker left in the last hour."));
    } else if (!problemsNow) {
      verdict = h("p", { class: "all-well", "data-verdict": "well" }, "Nothing wrong: every one of the " + totalGroups() +
        (totalGroups() === 1 ? " broker group has" : " broker groups have") + " a live master and no member is late or expired" +
        (!state.departuresRead ? "; the brokers that left in the last hour could not be read."
          : back.length ? "; the brokers below came back." : ", and no broker left in the last hour."));
    }
    box.replaceChildren(...(verdict ? [verdict] : []), ...(items.length ? [h("ul", { class: "problem-list" }, ...items), help] : []));
  }

  function joined(nodes) {
    const out = [];
    nodes.forEach((n, i) => { if (i) out.push(", "); out.push(n); });
    return out;
  }

  // ------------------------------------------------------------------ clusters
  function groupMatches(g, q) {
    if (!q) return true;
    if (g.brokerName.toLowerCase().includes(q)) return true;
    return Object.values(g.brokerAddrs).some((a) => a.includes(q));
  }

  // late or expired; "unknown" (no heartbeat data, e.g. a tab opened during an outage) is not counted
  function groupHasProblem(g) {
    if (masterState(g) !== "ok") return true;
    return Object.values(g.brokerAddrs).some((a) => { const k = liveness(a).kind; return k === "late" || k === "expired"; });
  }

  function clusterOpen(cluster, problemsHere) {
    if (state.open.has(cluster)) return true;
    if (state.closed.has(cluster)) return false;
    return totalGroups() <= OPEN_UP_TO || problemsHere > 0 && totalGroups() <= OPEN_UP_TO * 4;
  }

  function renderClusters() {
    const box = $("cluster-list");
    if (!state.cluster) return;
    const clusters = clusterNames();
    state.bars = new Map();
    state.groupBodies = new Map();
    const frag = document.createDocumentFragment();
    if (clusters.length === 0) frag.append(h("p", { class: "empty" }, "No broker is registered."));
    clusters.forEach((cluster, ci) => {
      const groups = groupsOf(cluster);
      const members = groups.reduce((n, g) => n + Object.keys(g.brokerAddrs).length, 0);
      const noMaster = groups.filter((g) => masterState(g) !== "ok").length;
      const table = h("table", { class: "brokers", "data-cluster": cluster },
        h("caption", { class: "visually-hidden" }, "Cluster " + cluster),
        h("thead", {}, h("tr", {},
          h("th", { scope: "col" }, "Address"),
          h("th", { scope: "col" }, "ID"),
          h("th", { scope: "col" }, "Role"),
          h("th", { scope: "col" }, "HA address"),
          h("th", { scope: "col", class: "hb-col" }, "Heartbeat age / timeout"))));
      groups.forEach((g, gi) => {
        const gid = "g-" + ci + "-" + gi;
        const head = h("th", { scope: "colgroup", colspan: 5, id: gid });
        const body = h("tbody", { class: "group", "data-group": g.brokerName, id: "group-" + g.brokerName });
        body.append(h("tr", { class: "group-head" }, head));
        const ids = Object.keys(g.brokerAddrs).sort((a, b) => Number(a) - Number(b));
        for (const id of ids) {
          const addr = g.brokerAddrs[id];
          const fill = h("span", { class: "fill" });
          const bar = h("div", { class: "bar", role: "meter", "aria-valuemin": 0,
                                 "aria-label": "Heartbeat age of " + addr }, fill);
          const text = h("span", { class: "hb-text" });
          const badge = h("span", { class: "badge warn hb-badge", hidden: true });
          const ha = h("td", { "data-label": "HA address", class: "c-ha" });
          const row = h("tr", { class: "member", "data-addr": addr, "data-id": id },
            h("th", { scope: "row", headers: gid },
              h("button", { type: "button", class: "addr-link", "data-addr": addr, "aria-controls": "broker-panel",
                            title: "Details of " + addr }, h("code", {}, addr))),
            h("td", { "data-label": "ID", class: "c-id" }, id),
            h("td", { "data-label": "Role", class: "c-role" }, id === "0" ? h("span", { class: "role master" }, "master")
                                                          : h("span", { class: "role slave" }, "slave")),
            ha,
            h("td", { "data-label": "Heartbeat", class: "hb-cell" }, h("div", { class: "hb" }, bar, text, badge)));
          body.append(row);
          state.bars.set(addr, { row, bar, fill, text, badge, ha });
        }
        state.groupBodies.set(g.brokerName, { body, head, group: g });
        table.append(body);
      });
      const badge = h("span", { class: "badge bad", "data-cluster-flag": cluster, hidden: true });
      const details = h("details", { class: "cluster", "data-cluster": cluster },
        h("summary", {},
          h("span", { class: "cname" }, cluster), " — ",
          num(groups.length) + (groups.length === 1 ? " broker group, " : " broker groups, ") +
          num(members) + (members === 1 ? " broker" : " brokers"), badge),
        h("div", { class: "table-wrap" }, table));
      details.open = clusterOpen(cluster, noMaster);
      details.addEventListener("toggle", () => {
        if (details.open) { state.open.add(cluster); state.closed.delete(cluster); }
        else { state.closed.add(cluster); state.open.delete(cluster); }
      });
      frag.append(details);
    });
    box.replaceChildren(frag);
    updateLive();
  }

  // New heartbeats, the same tables: only the cells that depend on them change.
  function updateLive() {
    for (const [addr, it] of state.bars) {
      const b = state.liveMap.get(addr);
      it.broker = b;
      const ha = b && b.haServerAddr ? b.haServerAddr : null;
      if (it.ha.dataset.value !== String(ha)) {
        it.ha.dataset.value = String(ha);
        it.ha.replaceChildren(ha ? h("code", {}, ha) : h("span", { class: "muted" }, "—"));
      }
    }
    for (const { body, head, group } of state.groupBodies.values()) {
      const ms = masterState(group);
      body.classList.toggle("no-master", ms !== "ok");
      const n = Object.keys(group.brokerAddrs).length;
      if (head.dataset.ms !== ms) {
        head.dataset.ms = ms;
        const flag = ms === "none" ? h("span", { class: "badge bad", "data-flag": "no-master" }, "No master")
          : ms === "expired" ? h("span", { class: "badge bad", "data-flag": "master-expired" }, "Master expired") : "";
        head.replaceChildren(h("span", { class: "gname" }, group.brokerName),
          h("span", { class: "muted" }, " " + n + " member(s)"), flag);
      }
    }
    tickBars();
    filterGroups();
  }

  // Heartbeat bars move between polls: ages are counted from the last Redis time seen.
  function tickBars() {
    for (const [addr, it] of state.bars) {
      const l = liveness(addr);
      let pct = 0, valueNow = 0, valueMax = 1;
      if (l.kind === "expired") pct = 100;
      if (l.age !== undefined) {
        valueNow = Math.min(l.age, l.timeout); valueMax = l.timeout;
        pct = Math.min(100, l.ratio * 100);
      }
      it.fill.style.width = pct.toFixed(1) + "%";
      it.bar.dataset.state = l.kind;
      it.row.dataset.state = l.kind;
      it.bar.setAttribute("aria-valuemax", String(Math.round(valueMax)));
      it.bar.setAttribute("aria-valuenow", String(Math.round(valueNow)));
      it.bar.setAttribute("aria-valuetext", l.label);
      if (it.text.textContent !== l.label) it.text.textContent = l.label;
      // the text says "expired" already; "late" needs saying, not only the colour
      it.badge.textContent = l.kind === "late" ? "late" : "";
      it.badge.hidden = l.kind !== "late";
    }
  }

  // The group search and the problems-only switch hide rows; the tables stay whole.
  function filterGroups() {
    const q = $("group-search").value.trim().toLowerCase();
    const only = $("problems-only").checked;
    let shown = 0, total = 0;
    const perCluster = new Map();
    for (const { body, group } of state.groupBodies.values()) {
      const problem = groupHasProblem(group);
      const show = groupMatches(group, q) && (!only || problem);
      body.hidden = !show;
      total += 1;
      if (show) shown += 1;
      const c = perCluster.get(group.cluster) || { shown: 0, problems: 0 };
      if (show) c.shown += 1;
      if (problem) c.problems += 1;
      perCluster.set(group.cluster, c);
    }
    for (const details of document.querySelectorAll("#cluster-list details.cluster")) {
      const c = perCluster.get(details.dataset.cluster) || { shown: 0, problems: 0 };
      details.hidden = (q || only) ? c.shown === 0 : false;
      if ((q || only) && c.shown > 0 && !state.closed.has(details.dataset.cluster)) details.open = true;
      const badge = details.querySelector("[data-cluster-flag]");
      const text = c.problems ? c.problems + (c.problems === 1 ? " group with a problem" : " groups with a problem") : "";
      if (badge.textContent !== text) badge.textContent = text;
      badge.hidden = !c.problems;
    }
    $("group-found").textContent = q || only ? num(shown) + " of " + num(total) + " groups shown" : "";
  }

  function openGroup(name) {
    const it = state.groupBodies.get(name);
    if (!it) return;
    $("group-search").value = "";
    $("problems-only").checked = false;
    filterGroups();
    const details = it.body.closest("details");
    if (details && !details.open) details.open = true;
    it.body.scrollIntoView({ block: "center" });
    it.body.classList.add("flash");
    setTimeout(() => it.body.classList.remove("flash"), 2000);
  }

  // ------------------------------------------------------------------ a broker's detail
  function showBroker(addr) {
    state.broker = addr;
    $("broker-panel").hidden = false;
    renderBroker();
    $("broker-h").focus();
  }

  function renderBroker() {
    const addr = state.broker;
    if (!addr) return;
    $("broker-addr").textContent = addr;
    const l = liveness(addr);
    const b = l.b;
    const row = (k, v) => [h("dt", {}, k), h("dd", {}, v)];
    const when = (ms) => (ms ? new Date(ms).toLocaleString([], { hour12: false }) : "—");
    const dv = b && b.dataVersion;
    const items = [];
    if (!b) {
      items.push(...row("State", "no longer registered (or not in the last answer)"));
    } else {
      items.push(...row("Cluster", b.cluster), ...row("Broker group", b.brokerName),
        ...row("Broker ID", b.brokerId + (b.brokerId === 0 ? " (master)" : " (slave)")),
        ...row("HA address", b.haServerAddr || "—"),
        ...row("Acting master", h("span", { "data-field": "actingMaster" }, b.enableActingMaster
          ? "enabled: with no master, the smallest-id slave serves reads (RocketMQ 5)" : "not enabled")),
        ...row("Zone", b.zoneName || "—"),
        ...row("Heartbeat", h("span", { "data-field": "heartbeat", "data-state": l.kind }, l.label +
          (l.kind === "late" ? " (late)" : ""))),
        ...row("Heartbeat timeout", b.heartbeatTimeoutMillis ? seconds(b.heartbeatTimeoutMillis) +
          " (" + num(b.heartbeatTimeoutMillis) + " ms)" : "—"),
        ...row("Last heartbeat", when(b.lastUpdateTimestamp)),
        ...row("Expires at", when(b.deadline)),
        ...row("dataVersion", dv && typeof dv === "object"
          ? h("span", { "data-field": "dataVersion" }, "counter " + dv.counter + ", timestamp " + when(dv.timestamp))
          : String(dv === null || dv === undefined ? "—" : dv)),
        ...row("Broker version", h("span", { class: "muted" }, "not recorded: the registry keeps no broker version")));
    }
    $("broker-detail").replaceChildren(...items);
  }

  function closeBroker() {
    const addr = state.broker;
    state.broker = null;
    $("broker-panel").hidden = true;
    const back = addr && document.querySelector('button.addr-link[data-addr="' + CSS.escape(addr) + '"]');
    if (back) back.focus();
  }

  // ------------------------------------------------------------------ overview
  function renderCounts() {
    if (state.cluster) {
      const clusters = Object.keys(state.cluster.clusterAddrTable);
      const groups = Object.values(state.cluster.brokerAddrTable);
      let total = 0, alive = 0;
      for (const g of groups) {
        for (const addr of Object.values(g.brokerAddrs)) {
          total += 1;
          const b = state.liveMap.get(addr);
          if (b && b.alive) alive += 1;
        }
      }
      const noMaster = groups.filter((g) => masterState(g) !== "ok").length;
      // against those registered before the losses: the ones that left and did not come back count
      const left = departed().left.length;
      // after a store reset, the brokers it lost count too until they are back
      const lost = state.storeReset ? state.storeReset.lostBrokers : 0;
      const before = Math.max(total + left, lost);
      $("count-clusters").textContent = num(clusters.length);
      $("count-groups").textContent = num(groups.length);
      $("count-brokers").textContent = (state.live ? num(alive) : "–") + " / " + num(before);
      $("count-brokers").title = total + " registered" + (left ? ", " + left + " left in the last hour" : "") +
        (before > total + left ? ", " + lost + " before the store reset" : "");
      $("count-nomaster").textContent = num(noMaster);
      $("count-nomaster").parentElement.classList.toggle("alert", noMaster > 0);
    }
    if (state.summary) {
      $("count-topics").textContent = num(state.summary.total);
      $("count-order").textContent = num(state.summary.orderTopics);
    }
  }

  function renderClusterOptions() {
    const select = $("topic-cluster");
    const want = ["", ...clusterNames()];
    const have = [...select.options].map((o) => o.value);
    if (want.join("\n") === have.join("\n")) return;
    const value = select.value;
    select.replaceChildren(...want.map((c) => h("option", { value: c }, c || "all clusters")));
    select.value = want.includes(value) ? value : "";
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
    const cluster = $("topic-cluster").value;
    const total = state.summary.total;
    const shown = state.summary.topics;
    const focused = document.activeElement && document.activeElement.dataset
      ? document.activeElement.dataset.topic : undefined;
    const table = state.cluster ? state.cluster.brokerAddrTable : {};

    const rows = document.createDocumentFragment();
    for (const t of shown) {
      const read = t.queueDatas.reduce((n, d) => n + d.readQueueNums, 0);
      const write = t.queueDatas.reduce((n, d) => n + writeQueues(d), 0);
      const list = h("ul", { class: "qlist" });
      for (const d of t.queueDatas) {
        const p = perm(d.perm);
        const c = table[d.brokerName] ? table[d.brokerName].cluster : null;
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
    const filtered = q || orderOnly || cluster;
    const more = state.summary.nextCursor ? "+" : "";
    const first = state.pages.length * MAX_TOPIC_ROWS;
    let caption = filtered
      ? (first ? "topics " + num(first + 1) + "-" + num(first + shown.length) + " of those matching " : shown.length + more + " of ")
        + num(total) + " topics match"
      : (state.pages.length || state.summary.nextCursor
        ? "topics " + num(first + 1) + "-" + num(first + shown.length) + " of " + num(total)
        : num(total) + " topics");
    if (cluster) caption += " in " + cluster;
    if (state.summary.skipped) {
      caption += "; " + num(state.summary.skipped) + " passed over on this page (" +
        (cluster ? "other clusters' or system topics" : "system topics") + ")";
    }
    $("topic-caption").textContent = caption;
    renderPager();
    if (shown.length === 0) {
      $("topic-rows").append(h("tr", {}, h("td", { colspan: 5, class: "empty" },
        !total ? "No topic is registered."
          : state.summary.nextCursor ? "None on this stretch of the topic list: Next page searches on."
            : "No topic matches the search.")));
    }
    if (focused !== undefined) {
      const again = $("topic-rows").querySelector('button[data-topic="' + CSS.escape(focused) + '"]');
      if (again) again.focus();
    }
  }

  // ------------------------------------------------------------------ chart
  // Every broker group's writable write queues over every topic (the server's tally, not
  // the topics of the page shown): one column per group, by cluster, in natural order.
  function renderChart() {
    const box = $("chart");
    const t = state.tally;
    const pass = t && t.pass ? " (reading the fleet again: " + t.pass.read + " of " + t.pass.of + " groups)" : "";
    if (!t || !t.tally) {
      box.replaceChildren(h("p", { class: "empty" }, t && t.pass
        ? "Adding up every group's queues: " + t.pass.read + " of " + t.pass.of + " groups read…" : "Loading…"));
      return;
    }
    const rows = t.tally.groups.filter((r) => r.topics > 0)
      .sort((a, b) => natural(a.cluster, b.cluster) || natural(a.brokerName, b.brokerName));
    const idle = t.tally.groups.length - rows.length;
    const topicsTotal = state.summary ? num(state.summary.total) + " topics" : "every topic";
    $("chart-caption").textContent = "Writable write queues per broker group, summed over " + topicsTotal +
      " (as of " + timeOf(new Date(t.tally.finishedAt)) + ")" + pass;
    if (rows.length === 0) {
      box.replaceChildren(h("p", { class: "empty" }, "No queues yet."));
      $("chart-outliers").textContent = "";
      return;
    }
    const values = rows.map((r) => r.writeQueues);
    const max = Math.max(...values, 1);
    const min = Math.min(...values);
    const mean = values.reduce((a, b) => a + b, 0) / rows.length;
    const few = rows.length <= 40;
    const isSkewed = (v) => mean > 0 && (v > mean * 1.5 || v < mean * 0.5);
    // a handful of skewed groups among hundreds are named on the chart itself
    const nameSkewed = !few && rows.filter((r) => isSkewed(r.writeQueues)).length <= 8;
    const W = 1000, top = 18, left = 56, bottom = few ? 70 : 22, plotH = 170;
    const H = top + plotH + bottom;
    const step = (W - left - 4) / rows.length;
    const barW = Math.max(0.6, step * (few ? 0.7 : 0.85));
    const y = (v) => top + plotH - (v / max) * plotH;
    const svg = s("svg", { viewBox: "0 0 " + W + " " + H, width: "100%", role: "img",
                           "aria-labelledby": "chart-title chart-desc", class: "bars-chart" },
      s("title", { id: "chart-title" }, "Write queues per broker group"),
      s("desc", { id: "chart-desc" }, rows.length + " groups; mean " + mean.toFixed(1) + ", max " + max + ", min " + min + "."));
    // the scale: 0, the mean and the largest value
    svg.append(
      s("line", { x1: left, x2: W - 2, y1: y(0), y2: y(0), class: "axis" }),
      s("text", { x: left - 6, y: y(0) + 4, "text-anchor": "end", class: "lbl" }, "0"),
      s("text", { x: left - 6, y: y(max) + 4, "text-anchor": "end", class: "lbl" }, num(max)));
    let lastCluster = null;
    rows.forEach((r, i) => {
      const x = left + i * step;
      if (r.cluster !== lastCluster) {
        lastCluster = r.cluster;
        svg.append(s("line", { x1: x, x2: x, y1: 2, y2: top + plotH, class: "sep" }),
          s("text", { x: x + 3, y: 12, class: "lbl cl" }, r.cluster));
      }
      const v = r.writeQueues;
      const skew = isSkewed(v);
      const bar = s("rect", { x: (x + (step - barW) / 2).toFixed(2), y: y(v).toFixed(1), width: barW.toFixed(2),
                              height: Math.max(1, top + plotH - y(v)).toFixed(1),
                              class: "bar" + (skew ? " skew" : ""), "data-group": r.brokerName },
        s("title", {}, r.brokerName + " (" + r.cluster + "): " + num(v) + " write queues over " + num(r.topics) + " topics"));
      svg.append(bar);
      if (skew && nameSkewed) {
        const cx = x + step / 2;
        const right = cx > W - 160;
        svg.append(s("text", { x: right ? cx - 4 : cx + 4, y: Math.max(top + 10, y(v) + 10),
                               "text-anchor": right ? "end" : "start", class: "lbl out" }, r.brokerName + " " + num(v)));
      }
      if (few) {
        const cx = x + step / 2;
        svg.append(s("text", { x: cx, y: y(v) - 3, "text-anchor": "middle", class: "val" }, v),
          s("text", { x: cx, y: top + plotH + 12, "text-anchor": "end", class: "lbl",
                      transform: "rotate(-35 " + cx + " " + (top + plotH + 12) + ")" },
            r.brokerName.length > 16 ? r.brokerName.slice(0, 15) + "…" : r.brokerName));
      }
    });
    svg.append(s("line", { x1: left, x2: W - 2, y1: y(mean), y2: y(mean), class: "mean" }));
    if (y(mean) - y(max) > 12) svg.append(s("text", { x: left - 6, y: y(mean) + 4, "text-anchor": "end", class: "lbl" }, "mean"));
    box.replaceChildren(svg);
    const byValue = [...rows].sort((a, b) => b.writeQueues - a.writeQueues);
    const skewed = rows.filter((r) => isSkewed(r.writeQueues)).length;
    const name = (r) => r.brokerName + " " + num(r.writeQueues);
    // the tally is of its last complete pass: while groups register or leave it counts
    // another moment than the page's counts above, and says so rather than disagree
    const registered = state.cluster ? totalGroups() : t.tally.groups.length;
    const moment = registered !== t.tally.groups.length
      ? " as of " + timeOf(new Date(t.tally.finishedAt)) + " (" + num(registered) + " broker groups registered now)" : "";
    $("chart-outliers").textContent = num(rows.length) + " groups with topics" +
      (idle ? " (" + num(idle) + " without any, not drawn)" : "") + moment + "; mean " + num(mean.toFixed(1)) +
      (min > 0 ? ", max/min " + (max / min).toFixed(1) : "") + "; " + skewed + " skewed. Most: " +
      byValue.slice(0, 3).map(name).join(", ") + ". Least: " + byValue.slice(-3).reverse().map(name).join(", ") + ".";
  }

  // ------------------------------------------------------------------ route panel
  function showRoute(topic, focus) {
    if (state.routeAbort) state.routeAbort.abort();
    state.selected = topic;
    state.route = null;
    const gen = ++state.routeGen;
    $("route-topic").textContent = topic;
    $("route-json").textContent = "";
    $("route-tables").replaceChildren();
    $("route-status").textContent = "Loading…";
    $("route-panel").hidden = false;
    $("route-hint").hidden = true;
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
    state.route = null;
    $("route-panel").hidden = true;
    $("route-hint").hidden = false;
    for (const tr of document.querySelectorAll("#topic-rows tr.selected")) tr.classList.remove("selected");
    for (const b of document.querySelectorAll('#topic-rows button[aria-pressed="true"]')) b.setAttribute("aria-pressed", "false");
    const back = topic && $("topic-rows").querySelector('button[data-topic="' + CSS.escape(topic) + '"]');
    (back || $("topic-search")).focus();
  }

  // The route as two tables: its queues per broker group, and each group's addresses with
  // their heartbeat as /v1/brokers/live last said.
  function renderRoute() {
    const box = $("route-tables");
    const r = state.route;
    if (!r || !r.queueDatas) { box.replaceChildren(); return; }
    const clusterOf = new Map((r.brokerDatas || []).map((b) => [b.brokerName, b.cluster]));
    const queues = h("table", { class: "route-table", "data-part": "queues" },
      h("caption", {}, "Queues (" + r.queueDatas.length + " broker groups)"),
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Broker group"), h("th", { scope: "col" }, "Cluster"),
        h("th", { scope: "col", class: "num" }, "Read"), h("th", { scope: "col", class: "num" }, "Write"),
        h("th", { scope: "col" }, "Perm"))),
      h("tbody", {}, ...r.queueDatas.map((d) => {
        const p = perm(d.perm);
        return h("tr", { "data-group": d.brokerName }, h("th", { scope: "row" }, d.brokerName),
          h("td", {}, clusterOf.get(d.brokerName) || "—"),
          h("td", { class: "num" }, d.readQueueNums), h("td", { class: "num" }, d.writeQueueNums),
          h("td", {}, h("abbr", { class: "perm" + ((d.perm & 2) ? "" : " nowrite"), title: p.long }, p.short)));
      })));
    const addrRows = [];
    for (const b of r.brokerDatas || []) {
      const ids = Object.keys(b.brokerAddrs).sort((x, y) => Number(x) - Number(y));
      for (const id of ids) {
        const addr = b.brokerAddrs[id];
        const l = liveness(addr);
        addrRows.push(h("tr", { "data-addr": addr, "data-state": l.kind },
          h("th", { scope: "row" }, h("code", {}, addr)),
          h("td", {}, b.brokerName + " " + (id === "0" ? "master" : "slave " + id)),
          h("td", { class: "live" }, h("span", { class: "dot-" + l.kind, "aria-hidden": "true" }),
            l.kind === "ok" ? "alive, " + l.label : l.kind === "late" ? "late, " + l.label
              : l.kind === "expired" ? l.label : "not in the live table")));
      }
    }
    const addrs = h("table", { class: "route-table", "data-part": "brokers" },
      h("caption", {}, "Broker addresses and their heartbeat"),
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Address"), h("th", { scope: "col" }, "Group, role"),
        h("th", { scope: "col" }, "Heartbeat (age / timeout)"))),
      h("tbody", {}, ...addrRows));
    box.replaceChildren(queues, addrs);
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
        state.route = body;
        $("route-json").textContent = JSON.stringify(body, null, 2);
        $("route-status").textContent = "As of " + when + "; watching for changes.";
      } else if (resp.status === 404 && body && body.error === "TOPIC_NOT_EXIST") {
        state.route = null;
        $("route-json").textContent = JSON.stringify(body, null, 2);
        $("route-status").textContent = "No live broker serves this topic (as of " + when + "); watching.";
      } else {
        $("route-status").textContent = "Could not read the route: " + resp.status + " " +
          ((body && body.message) || "") + "; retrying…";
      }
      renderRoute();
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
    $("topic-cluster").addEventListener("change", restart);
    $("show-system").addEventListener("change", restart);
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
    let groupDebounce = null;
    $("group-search").addEventListener("input", () => {
      clearTimeout(groupDebounce);
      groupDebounce = setTimeout(filterGroups, 100);
    });
    $("problems-only").addEventListener("change", filterGroups);
    $("expand-all").addEventListener("click", () => {
      for (const d of document.querySelectorAll("#cluster-list details.cluster")) d.open = true;
    });
    $("collapse-all").addEventListener("click", () => {
      for (const d of document.querySelectorAll("#cluster-list details.cluster")) d.open = false;
    });
    $("cluster-list").addEventListener("click", (ev) => {
      const btn = ev.target.closest("button.addr-link");
      if (btn) showBroker(btn.dataset.addr);
    });
    $("broker-close").addEventListener("click", closeBroker);
    $("broker-panel").addEventListener("keydown", (ev) => {
      if (ev.key === "Escape") { ev.preventDefault(); closeBroker(); }
    });
    $("problems").addEventListener("click", (ev) => {
      const a = ev.target.closest("a.glink");
      if (a) { ev.preventDefault(); openGroup(a.dataset.group); }
    });
    document.addEventListener("keydown", (ev) => {
      const typing = ev.target.closest && ev.target.closest("input, textarea, select");
      if (ev.key === "/" && !typing && !ev.ctrlKey && !ev.metaKey && !ev.altKey) {
        ev.preventDefault();
        $("topic-search").focus();
      }
    });
    setInterval(() => {
      tickBars(); showRefreshed(); renderProblems();
      if (state.broker) renderBroker();
    }, TICK_MS);
    pollLoop();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
