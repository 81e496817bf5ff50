// meshnode dashboard: polls the admin API of the node that served it once a second.
// Plain DOM, no framework, nothing from other hosts. Every list is paged: the page
// never renders more than PAGE rows of a kind, however large the fleet.
"use strict";

const POLL_MS = 1000;
const PAGE = { members: 50, actors: 20, sessions: 20 };

// A pager keeps the cursor of the page shown and the cursors of the pages before it.
function pager(name) {
  return { name, cursor: "", back: [], next: "" };
}
const pagers = { members: pager("members"), actors: pager("actors"), sessions: pager("sessions") };

// Previous samples of each node lifecycle's record counters, for rates.
const samples = new Map(); // "rid/generation" -> {t, total, byCommand}
const rates = new Map();   // "rid/generation" -> {total, byCommand: {cmd: perSecond}}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function setText(id, v) {
  const e = document.getElementById(id);
  if (e.textContent !== String(v)) e.textContent = String(v);
}

async function getJSON(path) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), 5000);
  try {
    const resp = await fetch(path, { signal: ctl.signal, cache: "no-store" });
    const body = await resp.json();
    if (!resp.ok) throw new Error(`${path}: ${body.error || resp.status}: ${body.message || ""}`);
    return body;
  } finally {
    clearTimeout(timer);
  }
}

function pageQuery(p) {
  const q = new URLSearchParams({ limit: PAGE[p.name] });
  if (p.cursor) q.set("after", p.cursor);
  return q.toString();
}

function renderPager(p, shown, total) {
  const box = document.getElementById(p.name + "-pager");
  box.replaceChildren(
    el("button", { type: "button", disabled: p.back.length === 0, onclick: () => { p.cursor = p.back.pop() || ""; refresh(); }, "data-testid": p.name + "-prev" }, "‹ prev"),
    el("span", {}, ` ${shown} shown of ${total} `),
    el("button", { type: "button", disabled: !p.next, onclick: () => { p.back.push(p.cursor); p.cursor = p.next; refresh(); }, "data-testid": p.name + "-next" }, "next ›"),
  );
}

function fmtNum(n) {
  return Number(n).toLocaleString("en-US");
}

function fmtRate(r) {
  return r === undefined ? "–" : r.toFixed(1);
}

// fmtAge writes a duration in seconds the short way: 42s, 3m 05s, 2h 14m, 3d 4h.
function fmtAge(sec) {
  sec = Math.max(0, Math.floor(sec));
  const d = Math.floor(sec / 86400), h = Math.floor(sec / 3600) % 24, m = Math.floor(sec / 60) % 60, s = sec % 60;
  if (d > 0) return `${d}d ${h}h`;
  if (h > 0) return `${h}h ${String(m).padStart(2, "0")}m`;
  if (m > 0) return `${m}m ${String(s).padStart(2, "0")}s`;
  return `${s}s`;
}

function fmtMiB(bytes) {
  return bytes > 0 ? (bytes / 1048576).toFixed(1) + " MiB" : "–";
}

// stateText is a member's state, with how long it has been so when it is not alive.
function stateText(m, now) {
  if (m.state === "alive" || !m.since) return m.state;
  return `${m.state} for ${fmtAge((now - Date.parse(m.since)) / 1000)}`;
}

function byKey(obj) {
  return Object.entries(obj || {}).sort((a, b) => a[0].localeCompare(b[0]));
}

function updateRates(n) {
  const key = n.rid + "/" + n.generation;
  const t = Date.parse(n.time);
  const cur = { t, total: n.records.total, byCommand: n.records.byCommand || {} };
  const prev = samples.get(key);
  if (prev && t > prev.t) {
    const dt = (t - prev.t) / 1000;
    const byCommand = {};
    for (const [cmd, c] of Object.entries(cur.byCommand)) {
      const p = prev.byCommand[cmd] || { in: 0, out: 0 };
      byCommand[cmd] = (c.in + c.out - p.in - p.out) / dt;
    }
    rates.set(key, { total: (cur.total - prev.total) / dt, byCommand });
  }
  if (!prev || t > prev.t) samples.set(key, cur);
  return rates.get(key);
}

function renderFleet(f) {
  setText("self", `served by ${f.self}`);
  pagers.members.next = f.next || "";
  let alive = 0, sessions = 0, bindings = 0, actors = 0, records = 0, drops = 0, rate = 0, rated = false;
  const rows = [], cards = [];
  for (const m of f.members) {
    if (m.state === "alive") alive++;
    const n = m.node;
    const r = n ? updateRates(n) : undefined;
    if (n) {
      sessions += n.sessions.total;
      bindings += n.bindings;
      actors += n.actors;
      records += n.records.total;
      drops += n.records.dropsTotal;
      if (r) { rate += r.total; rated = true; }
    }
    const transports = n ? byKey(n.sessions.byTransport).map(([k, v]) => `${k} ${v}`).join(", ") : "";
    const cell = (v, testid) => el("td", testid ? { "data-testid": testid } : {}, v);
    const h = n && n.health;
    const ready = h ? el("td", { "data-testid": "member-ready", class: h.ready ? "" : "not-ready", title: h.notReady || "" }, h.ready ? "ready" : "not ready: " + h.notReady) : cell("–");
    const version = m.versions ? m.versions.build + (m.versions.revision ? " (" + m.versions.revision + ")" : "") : (h ? h.version : "–");
    rows.push(el("tr", { "data-testid": "member-row", "data-rid": m.rid, "data-state": m.state,
      class: (m.rid === f.self ? "self " : "") + "state-" + m.state },
      cell(m.rid), cell(stateText(m, Date.now()) + (m.error ? " ⚠" : ""), "member-state"), cell(m.generation), cell(m.address),
      ready, cell(version, "member-version"), cell(h ? fmtAge(h.uptimeSeconds) : "–", "member-uptime"),
      cell(h ? `${fmtMiB(h.rssBytes)} / ${fmtMiB(h.heapBytes)}` : "–", "member-memory"),
      cell(h ? `${h.openFiles} / ${h.maxFiles}` : "–", "member-files"),
      n ? cell(`${n.sessions.total}${transports ? " (" + transports + ")" : ""}`, "member-sessions") : cell(m.error || "–"),
      cell(n ? `${n.jobQueue.inUse} / ${n.jobQueue.limit}${n.jobQueue.paused ? " paused" : ""}` : "–"),
      cell(n ? n.bindings : "–", "member-bindings"), cell(n ? n.actors : "–", "member-actors"),
      cell(n ? fmtNum(n.records.total) : "–", "member-records"), cell(r ? fmtRate(r.total) : "–"),
      cell(n ? n.records.dropsTotal : "–")));
    if (n) {
      const cmds = byKey(n.records.byCommand).map(([cmd, c]) =>
        el("tr", {}, el("td", {}, cmd), el("td", {}, fmtNum(c.in)), el("td", {}, fmtNum(c.out)), el("td", {}, r ? fmtRate(r.byCommand[cmd]) : "–")));
      const dropRows = byKey(n.records.drops).map(([reason, v]) => el("tr", {}, el("td", {}, reason), el("td", {}, fmtNum(v))));
      cards.push(el("div", { class: "card", "data-testid": "node-card", "data-rid": m.rid },
        el("h3", {}, m.rid),
        n.store ? el("p", { "data-testid": "node-store", "data-ok": String(n.store.ok) },
          `store ${n.store.name} ${n.store.location}: ${n.store.ok ? "ok" : "DOWN (" + n.store.error + ")"}; ` +
          `${fmtNum(n.store.Saves)} saves, ${fmtNum(n.store.Conflicts)} conflicts, ${fmtNum(n.store.SaveFailures)} failed, ${fmtNum(n.store.Corrupt)} corrupt`) : el("p", {}, "no store"),
        el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "command"), el("th", {}, "in"), el("th", {}, "out"), el("th", {}, "/s"))),
          el("tbody", {}, ...(cmds.length ? cmds : [el("tr", {}, el("td", { colSpan: 4 }, "no records yet"))]))),
        el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "drop reason"), el("th", {}, "records"))),
          el("tbody", {}, ...(dropRows.length ? dropRows : [el("tr", {}, el("td", { colSpan: 2 }, "no drops"))])))));
    } else if (m.error) {
      cards.push(el("div", { class: "card error", "data-rid": m.rid }, el("h3", {}, m.rid), el("p", {}, m.error)));
    }
  }
  document.getElementById("members").replaceChildren(...rows);
  document.getElementById("nodes").replaceChildren(...cards);
  setText("members-count", `(${f.total} known)`);
  setText("fleet-members", alive);
  setText("fleet-sessions", sessions);
  setText("fleet-bindings", bindings);
  setText("fleet-actors", actors);
  setText("fleet-records", records);
  setText("fleet-rate", rated ? fmtRate(rate) : "–");
  setText("fleet-drops", drops);
  renderPager(pagers.members, f.members.length, f.total);
}

function renderActors(a) {
  pagers.actors.next = a.next || "";
  const rows = a.actors.map((x) => el("tr", { "data-testid": "actor-row", "data-actor": x.id },
    el("td", {}, x.id), el("td", {}, x.kind), el("td", {}, x.node), el("td", {}, x.objectGeneration),
    el("td", { "data-testid": "actor-bound" }, x.boundSessions)));
  for (const [rid, msg] of byKey(a.errors)) {
    rows.push(el("tr", { class: "error" }, el("td", { colSpan: 5 }, `${rid}: ${msg}`)));
  }
  document.getElementById("actors").replaceChildren(...rows);
  setText("actors-count", `(${a.total} hosted)`);
  renderPager(pagers.actors, a.actors.length, a.total);
}

// renderTopics shows the topics with subscribers anywhere in the fleet, as this node
// knows them (presence is eventually consistent), and this node's topic figures.
function renderTopics(t) {
  const rows = t.topics.map((x) => el("tr", { "data-testid": "topic-row" },
    el("td", {}, x.topic), el("td", { "data-testid": "topic-subscribers" }, x.subscribers),
    el("td", {}, x.nodes.map((n) => `${n.rid} ${n.subscribers}`).join(", "))));
  document.getElementById("topics").replaceChildren(...rows);
  const st = t.stats;
  setText("topics-count", `(${t.total}${t.next ? ", first " + t.topics.length : ""}; this node: ` +
    `${st.publishes} published, ${st.deliveries} delivered, ${st.droppedSlow} slow subscribers dropped)`);
}

function renderSessions(s) {
  pagers.sessions.next = s.next || "";
  const rows = s.sessions.map((x) => el("tr", { "data-testid": "session-row" },
    el("td", {}, x.id), el("td", {}, x.transport), el("td", {}, x.remote), el("td", {}, x.state),
    el("td", {}, new Date(x.opened).toLocaleTimeString()),
    el("td", {}, x.bindings.map((b) => `${b.actor}@${b.node}`).join(", "))));
  document.getElementById("sessions").replaceChildren(...rows);
  const by = byKey(s.byTransport).map(([k, v]) => `${k} ${v}`).join(", ");
  setText("sessions-count", `(${s.total}${by ? ": " + by : ""})`);
  renderPager(pagers.sessions, s.sessions.length, s.total);
}

// ---------------------------------------------------------------- charts
//
// Each node keeps its last ten minutes of points (GET /v1/node/series; this page asks
// the node that served it, which gathers them: /v1/fleet/series). The page keeps
// them per node lifecycle and draws one line per node in each chart.

const SERIES_MS = 2000;
const WINDOW_MS = 10 * 60 * 1000;
const COLORS = ["#2557d6", "#c4320a", "#1c7c43", "#7a2ee0", "#b54708", "#0e7490", "#be185d", "#4d7c0f"];
const CHARTS = [
  { id: "chart-records", key: "records", fmt: (v) => v.toFixed(0) },
  { id: "chart-sessions", key: "sessions", fmt: (v) => v.toFixed(0) },
  { id: "chart-p99", key: "p99", fmt: (v) => v.toFixed(v < 10 ? 2 : 0) },
  { id: "chart-errors", key: "errors", fmt: (v) => v.toFixed(v < 10 ? 1 : 0) },
];
const lines = new Map(); // "rid/generation" -> {rid, points: [...]}, in order of first sight
let seriesTimer = null;

async function refreshSeries() {
  clearTimeout(seriesTimer);
  try {
    // Ask from the oldest last point held, so that no node's new points are missed;
    // each line keeps only points after its own last one.
    let since = 0;
    for (const l of lines.values()) {
      const last = l.points.length ? l.points[l.points.length - 1].t : 0;
      since = since === 0 ? last : Math.min(since, last);
    }
    const s = await getJSON("/v1/fleet/series?limit=" + PAGE.members + (since ? "&since=" + since : ""));
    const horizon = Date.now() - WINDOW_MS;
    for (const m of s.members) {
      if (!m.series) continue;
      const key = m.rid + "/" + m.series.generation;
      let l = lines.get(key);
      if (!l) {
        l = { rid: m.rid, points: [] };
        lines.set(key, l);
      }
      const last = l.points.length ? l.points[l.points.length - 1].t : 0;
      for (const p of m.series.points) if (p.t > last) l.points.push(p);
    }
    for (const [key, l] of lines) {
      l.points = l.points.filter((p) => p.t >= horizon);
      if (l.points.length === 0) lines.delete(key);
    }
    drawCharts();
  } catch (err) {
    const st = document.getElementById("status");
    st.className = "status error";
    st.textContent = "series: " + String(err.message || err);
  } finally {
    seriesTimer = setTimeout(refreshSeries, SERIES_MS);
  }
}

function drawCharts() {
  const now = Date.now();
  const all = [...lines.values()];
  for (const c of CHARTS) drawChart(document.getElementById(c.id), all, c, now - WINDOW_MS, now);
  const legend = all.map((l, i) => {
    const swatch = el("span", { class: "swatch" });
    swatch.style.background = COLORS[i % COLORS.length]; // CSSOM: allowed by the page's CSP
    return el("span", { "data-testid": "legend-entry" }, swatch, l.rid);
  });
  document.getElementById("chart-legend").replaceChildren(...legend);
}

// drawChart draws one line per node of key over [from, to]; the canvas says what it
// drew in data attributes (series: lines with a point, points: points drawn).
function drawChart(canvas, all, c, from, to) {
  const g = canvas.getContext("2d");
  const W = canvas.width, H = canvas.height, L = 48, R = 8, T = 8, B = 20;
  g.clearRect(0, 0, W, H);
  let maxV = 0, series = 0, points = 0;
  for (const l of all) for (const p of l.points) if (p[c.key] !== null && p[c.key] > maxV) maxV = p[c.key];
  maxV = maxV > 0 ? maxV * 1.1 : 1;
  const x = (t) => L + ((t - from) / (to - from)) * (W - L - R);
  const y = (v) => T + (1 - v / maxV) * (H - T - B);
  // Axes, the top and middle values, the time marks.
  g.strokeStyle = "#d9dee7";
  g.fillStyle = "#667085";
  g.font = "11px system-ui, sans-serif";
  g.lineWidth = 1;
  for (const f of [0, 0.5, 1]) {
    const yy = Math.round(y(maxV * f)) + 0.5;
    g.beginPath(); g.moveTo(L, yy); g.lineTo(W - R, yy); g.stroke();
    g.fillText(c.fmt(maxV * f), 4, yy + 4);
  }
  for (let m = 10; m >= 0; m -= 2) {
    g.textAlign = m === 0 ? "right" : "center";
    g.fillText(m === 0 ? "now" : `-${m}m`, x(to - m * 60000), H - 5);
  }
  g.textAlign = "left";
  all.forEach((l, i) => {
    g.strokeStyle = COLORS[i % COLORS.length];
    g.lineWidth = 2;
    g.beginPath();
    let drawn = 0, pen = false;
    for (const p of l.points) {
      const v = p[c.key];
      if (v === null || v === undefined) { pen = false; continue; } // a gap: no request completed
      const px = x(p.t), py = y(v);
      if (pen) g.lineTo(px, py); else g.moveTo(px, py);
      pen = true;
      drawn++;
    }
    g.stroke();
    if (drawn === 1) { // a lone point would draw nothing
      const p = l.points.find((p) => p[c.key] !== null);
      g.fillStyle = g.strokeStyle;
      g.fillRect(x(p.t) - 2, y(p[c.key]) - 2, 4, 4);
    }
    if (drawn > 0) series++;
    points += drawn;
  });
  canvas.dataset.series = String(series);
  canvas.dataset.points = String(points);
}

let timer = null;
let running = false;

// refresh polls every endpoint once and schedules the next poll; a pager click calls
// it at once.
async function refresh() {
  clearTimeout(timer);
  if (running) return; // the poll in flight schedules the next one
  running = true;
  try {
    const [f, a, s, t] = await Promise.all([
      getJSON("/v1/fleet?" + pageQuery(pagers.members)),
      getJSON("/v1/fleet/actors?" + pageQuery(pagers.actors)),
      getJSON("/v1/sessions?" + pageQuery(pagers.sessions)),
      getJSON("/v1/topics?limit=50"),
    ]);
    renderFleet(f);
    renderActors(a);
    setText("sessions-node", f.self);
    renderSessions(s);
    renderTopics(t);
    const st = document.getElementById("status");
    st.className = "status ok";
    st.textContent = "updated " + new Date().toLocaleTimeString();
  } catch (err) {
    const st = document.getElementById("status");
    st.className = "status error";
    st.textContent = String(err.message || err);
  } finally {
    running = false;
    timer = setTimeout(refresh, POLL_MS);
  }
}

refresh();
refreshSeries();
