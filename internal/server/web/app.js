// The Meridian dashboard: polls /dashboard/state every two seconds and
// renders the view named by the location's hash. Every value is set as
// text (never as markup): names come from clients.
"use strict";

const views = ["members", "latency", "keyspaces", "coordination"];
const pollMs = 2000;
let state = null;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, String(v));
    else e[k] = v;
  }
  for (const c of children) {
    if (c === undefined || c === null) continue;
    e.append(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return e;
}

function replace(id, ...children) {
  const e = document.getElementById(id);
  e.replaceChildren(...children.filter((c) => c !== null && c !== undefined));
}

function table(headers, rows) {
  return el("table", {}, el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", {}, h)))), el("tbody", {}, ...rows));
}

function more(listing, what) {
  const shown = (listing.items || []).length;
  if (listing.total > shown) return el("div", { class: "more" }, `first ${shown} shown of ${listing.total} ${what}`);
  return null;
}

function ms(us) {
  const v = us / 1000;
  return (v < 10 ? v.toFixed(2) : v.toFixed(1)) + " ms";
}

function ago(t) {
  const s = Math.max(0, Math.round((Date.now() - new Date(t).getTime()) / 1000));
  if (s < 60) return s + " s ago";
  if (s < 3600) return Math.round(s / 60) + " min ago";
  return Math.round(s / 3600) + " h ago";
}

function memberName(id) {
  if (!id) return "none";
  const m = (state.members || []).find((x) => x.id === id);
  return m ? `${id} (${m.region}/${m.zone})` : String(id);
}

function renderSummary() {
  const c = state.counts;
  const stats = [
    ["member", String(state.member)], ["leader", state.leader ? String(state.leader) : "none"], ["term", String(state.term)],
    ["sessions", c.sessions], ["watches", c.watches], ["znodes", c.znodes], ["ephemerals", c.ephemerals],
    ["locks", c.locks], ["queues", c.queues], ["barriers", c.barriers + c.double_barriers],
  ];
  // Watches are per member (where the watching session is); the rest is
  // the cluster's, as this member has applied it.
  const label = { watches: `watches on member ${state.member}` };
  replace("summary", ...stats.map(([k, v]) =>
    el("div", { class: "stat", "data-count": k }, el("div", { class: "v" }, String(v)), el("div", { class: "k" }, label[k] || k))));
}

function renderMembers() {
  const regions = new Map();
  for (const m of state.members || []) {
    if (!regions.has(m.region)) regions.set(m.region, new Map());
    const zones = regions.get(m.region);
    if (!zones.has(m.zone)) zones.set(m.zone, []);
    zones.get(m.zone).push(m);
  }
  const cards = [];
  for (const [region, zones] of [...regions].sort((a, b) => a[0].localeCompare(b[0]))) {
    const zoneDivs = [...zones].sort((a, b) => a[0].localeCompare(b[0])).map(([zone, ms]) =>
      el("div", { class: "zone", "data-zone": zone },
        el("div", { class: "zname" }, "zone " + zone),
        ...ms.map((m) => el("span", {
          class: "member" + (m.leader ? " leader" : ""), "data-member-id": m.id, "data-region": m.region,
          "data-zone": m.zone, "data-role": m.role, "data-leader": m.leader ? "true" : "false",
        }, el("b", {}, "member " + m.id), el("span", { class: "role" }, m.role),
        m.leader ? el("span", { class: "badge", "data-leader-marker": "" }, "leader") : null,
        m.self ? el("span", { class: "badge self" }, "this member") : null))));
    cards.push(el("div", { class: "region", "data-region": region }, el("h3", {}, "region " + region), ...zoneDivs));
  }
  replace("members", cards.length ? el("div", { class: "regions" }, ...cards) : el("p", { class: "empty" }, "no members"));
}

function heat(us, lo, hi) {
  // Green (fast) to red (slow) on a log scale between the matrix's extremes.
  const f = hi > lo ? Math.log(us / lo) / Math.log(hi / lo) : 0;
  return `hsl(${Math.round(120 * (1 - f))}, 70%, 82%)`;
}

function renderLatency() {
  const ids = (state.members || []).map((m) => m.id);
  const rows = state.rtt.rows_us || {};
  const values = [];
  for (const r of Object.values(rows)) for (const v of Object.values(r)) if (v > 0) values.push(v);
  const lo = Math.min(...values), hi = Math.max(...values);
  const body = ids.map((from) => el("tr", {},
    el("th", {}, "from " + memberName(from)),
    ...ids.map((to) => {
      if (from === to) return el("td", { class: "none" }, "—");
      const v = rows[from] && rows[from][to];
      if (!v) return el("td", { class: "none", "data-from": from, "data-to": to }, "?");
      const td = el("td", { "data-from": from, "data-to": to, "data-rtt-us": v }, ms(v));
      td.style.background = heat(v, lo, hi);
      return td;
    })));
  replace("rtt", table(["", ...ids.map((id) => "to " + id)], body));
  const known = Object.keys(rows).length;
  replace("rtt-note", known < ids.length
    ? `Rows known here: ${known} of ${ids.length}. Members report their round trips to the leader once a second; the leader's dashboard shows them all.`
    : "Each member's own measurements (probes over the raft connections), sliding-window median.");
  if (values.length) {
    const sw = (c) => { const s = el("span", { class: "sw" }); s.style.background = c; return s; };
    document.getElementById("rtt").append(el("div", { class: "legend" }, sw(heat(lo, lo, hi)), ms(lo), sw(heat(hi, lo, hi)), ms(hi)));
  }
  replace("placement", state.placement ? "Last placement decision: " + state.placement : "");
  const hist = state.leader_history || [];
  replace("leader-history", hist.length ? table(["when", "group", "from", "to", "region", "term"], hist.map((h) =>
    el("tr", { "data-group": h.group, "data-to": h.to },
      el("td", { title: h.time }, ago(h.time)), el("td", {}, h.keyspace || String(h.group)),
      el("td", {}, h.from ? memberName(h.from) : "none"), el("td", {}, memberName(h.to)),
      el("td", {}, h.region), el("td", { class: "num" }, String(h.term)))))
    : el("p", { class: "empty" }, "no leader change seen by this member"));
  const lim = state.limits.leader_history_per_group;
  document.getElementById("leader-history").append(el("div", { class: "more" },
    `As member ${state.member} saw them since it started: the last ${lim} per group, kept in memory, not replicated.`));
}

function renderKeyspaces() {
  const ks = state.keyspaces || [];
  replace("keyspaces", ks.length ? table(["prefix", "home", "survival", "group", "leader", "voters", "learners"], ks.map((k) =>
    el("tr", { "data-keyspace": k.prefix },
      el("td", { class: "mono" }, k.prefix), el("td", { "data-home": k.home }, k.home), el("td", {}, k.survival),
      el("td", { class: "num" }, String(k.group)), el("td", { "data-leader": k.leader }, memberName(k.leader)),
      el("td", {}, (k.voters || []).join(", ")), el("td", {}, (k.learners || []).join(", ") || "—"))))
    : el("p", { class: "empty" }, "no regional keyspaces: everything is in the root group"));
}

function people(list, total, kind) {
  const spans = (list || []).map((h) => el("div", kind === "holder"
    ? { "data-holder-session": h.session, "data-token": h.token }
    : { "data-waiter-session": h.session },
  el("span", { class: "mono" }, h.session), kind === "holder" ? ` token ${h.token}` : "", h.shared ? " (shared)" : ""));
  if (total > spans.length) spans.push(el("div", { class: "more" }, `and ${total - spans.length} more`));
  return spans.length ? spans : ["—"];
}

function renderCoordination() {
  const locks = state.locks;
  replace("locks", (locks.items || []).length ? table(["lock", "permits", "holders (session, fencing token)", "waiters (session, in line)"],
    locks.items.map((l) => el("tr", { "data-lock": l.name },
      el("td", { class: "mono" }, l.name), el("td", { class: "num" }, String(l.permits)),
      el("td", {}, ...people(l.holders, l.holders_total, "holder")),
      el("td", {}, ...people(l.waiters, l.waiters_total, "waiter")))))
    : el("p", { class: "empty" }, "no locks held or waited for"), more(locks, "locks"));
  const qs = state.queues;
  replace("queues", (qs.items || []).length ? table(["queue", "ready", "in flight", "waiting consumers", "bytes"],
    qs.items.map((q) => el("tr", { "data-queue": q.name },
      el("td", { class: "mono" }, q.name), el("td", { class: "num", "data-ready": q.ready }, String(q.ready)),
      el("td", { class: "num" }, String(q.in_flight)), el("td", { class: "num" }, String(q.consumers)),
      el("td", { class: "num" }, String(q.bytes)))))
    : el("p", { class: "empty" }, "no queue has items or waiting consumers"), more(qs, "queues"));
  const bs = state.barriers, ds = state.double_barriers;
  const parts = [];
  parts.push((bs.items || []).length ? table(["barrier (set)"], bs.items.map((b) =>
    el("tr", { "data-barrier": b }, el("td", { class: "mono" }, b))))
    : el("p", { class: "empty" }, "no barrier set"), more(bs, "barriers"));
  parts.push((ds.items || []).length ? table(["double barrier", "parties", "entered", "leaving", "open"], ds.items.map((d) =>
    el("tr", { "data-double-barrier": d.name }, el("td", { class: "mono" }, d.name), el("td", { class: "num" }, String(d.parties)),
      el("td", { class: "num" }, String(d.entered)), el("td", { class: "num" }, String(d.leaving)), el("td", {}, d.open ? "open" : "waiting"))))
    : el("p", { class: "empty" }, "no double barrier has participants"), more(ds, "double barriers"));
  replace("barriers", ...parts);
}

function currentView() {
  const v = location.hash.replace(/^#/, "");
  return views.includes(v) ? v : "members";
}

function render() {
  const view = currentView();
  for (const v of views) {
    document.getElementById("view-" + v).classList.toggle("active", v === view);
  }
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.view === view);
  if (!state) return;
  renderSummary();
  ({ members: renderMembers, latency: renderLatency, keyspaces: renderKeyspaces, coordination: renderCoordination })[view]();
  document.body.dataset.rendered = view;
}

async function poll() {
  const status = document.getElementById("status");
  try {
    const r = await fetch("/dashboard/state", { cache: "no-store" });
    if (!r.ok) throw new Error(r.status + " " + (await r.text()).trim());
    state = await r.json();
    status.textContent = `member ${state.member} · updated ${new Date(state.time).toLocaleTimeString()}`;
    status.classList.remove("stale");
    render();
  } catch (e) {
    status.textContent = "not updating: " + e.message;
    status.classList.add("stale");
  }
  setTimeout(poll, pollMs);
}

window.addEventListener("hashchange", render);
render();
poll();
