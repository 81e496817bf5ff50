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

// The admin token: asked for once, when the node first answers 401, and kept in this
// page only (never in storage; a reload asks again). A node that takes a client
// certificate of the browser never asks.
let token = "";

function askToken(why) {
  const form = document.getElementById("auth");
  setText("auth-why", why || "");
  if (form.hidden) {
    form.hidden = false;
    document.getElementById("auth-token").focus();
  }
}

document.getElementById("auth").addEventListener("submit", (ev) => {
  ev.preventDefault();
  token = document.getElementById("auth-token").value.trim();
  document.getElementById("auth-token").value = "";
  document.getElementById("auth").hidden = true;
  refresh();
});

async function getJSON(path) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), 5000);
  try {
    const headers = token ? { Authorization: "Bearer " + token } : {};
    const resp = await fetch(path, { signal: ctl.signal, cache: "no-store", headers });
    const body = await resp.json();
    if (resp.status === 401) askToken(body.message);
    if (!resp.ok) throw new Error(`${path}: ${body.error || resp.status}: ${body.message || ""}`);
    return body;
  } finally {
    clearTimeout(timer);
  }
}

// protectionsText says what protects node n, loudly when something is off.
function protectionsText(s) {
  if (!s) return "protections: unknown";
  const parts = [];
  if (s.meshTLS) {
    const until = new Date(s.meshTLS.notAfter).toISOString().slice(0, 16).replace("T", " ");
    parts.push(`mesh TLS on (expires ${until}${s.expires ? ", " + s.expires.toUpperCase() : ""})`);
  } else parts.push("mesh TLS OFF");
  parts.push(s.gossip.encrypted ? `gossip encrypted (${s.gossip.keys} key${s.gossip.keys === 1 ? "" : "s"}, primary ${s.gossip.primary})` : "gossip IN THE CLEAR");
  const admin = [s.admin.token ? "token" : "", s.admin.tls ? "TLS" : ""].filter(Boolean).join(" + ");
  parts.push(admin ? `admin ${admin}` : "admin OPEN");
  if (s.insecureMesh && s.missing) parts.push("INSECURE: " + s.missing.join(", ") + " missing");
  if (s.pending && s.pending.length) parts.push(`${s.pending.length} member(s) not admitted`);
  const refused = Object.values(s.refused || {}).reduce((a, b) => a + b, 0);
  if (refused) parts.push(`${fmtNum(refused)} refused`);
  return "protections: " + parts.join(" · ");
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
    rows.push(el("tr", { "data-testid": "member-row", "data-rid": m.rid, "data-state": m.state, class: m.rid === f.self ? "self" : "" },
      cell(m.rid), cell(m.state + (m.error ? " ⚠" : ""), "member-state"), cell(m.generation), cell(m.address),
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
        el("p", { "data-testid": "node-security", class: n.security && n.security.meshTLS && n.security.gossip.encrypted ? "" : "warn" }, protectionsText(n.security)),
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

let timer = null;
let running = false;

// refresh polls every endpoint once and schedules the next poll; a pager click calls
// it at once.
async function refresh() {
  clearTimeout(timer);
  if (running) return; // the poll in flight schedules the next one
  running = true;
  try {
    const [f, a, s] = await Promise.all([
      getJSON("/v1/fleet?" + pageQuery(pagers.members)),
      getJSON("/v1/fleet/actors?" + pageQuery(pagers.actors)),
      getJSON("/v1/sessions?" + pageQuery(pagers.sessions)),
    ]);
    renderFleet(f);
    renderActors(a);
    setText("sessions-node", f.self);
    renderSessions(s);
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
