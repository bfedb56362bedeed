// The dashboard page: the overview pushed by /api/events (the whole overview first, then only the changed rows
// and removed keys, merged here), the selected cluster's detail from /api/cluster/<key>.
"use strict";
const $ = (id) => document.getElementById(id);
const SHOWN = 25;  // rows drawn at most: thousands of table rows make the page slow; the filter finds the rest
const S = { page: null, rows: new Map(), sorted: null, offset: 0, selected: null, pinned: false, detail: null,
            detailFor: null, charts: [], lost: false, fetching: false };

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}
function cell(row, text, cls) { const td = el("td", cls, text); row.appendChild(td); return td; }
function badge(text, cls) { return el("span", "badge " + (cls || text.replace(/ /g, "-")), text); }

// ---- formats (as quota_pipeline/dashboard/text.py) -------------------------------------------------------
function fmtFactor(f) {
  if (f === null || f === undefined) return "-";
  return f.toFixed(2).replace(/0+$/, "").replace(/\.$/, "") || "0";
}
function fmtPct(r) { return r === null || r === undefined ? "-" : (r * 100).toFixed(1) + "%"; }
function fmtSize(b) {
  if (b === null || b === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let rest = Math.abs(b), i = 0;
  while (rest >= 1024 && i < units.length - 1) { rest /= 1024; i++; }
  return (b < 0 ? "-" : "") + (i === 0 ? rest.toFixed(0) : rest.toFixed(1)) + " " + units[i];
}
function fmtDur(s) {
  if (s === null || s === undefined) return "-";
  s = Math.max(0, Math.floor(s));
  for (const [size, name, sub, subName] of [[86400, "d", 3600, "h"], [3600, "h", 60, "min"], [60, "min", 1, "s"]]) {
    if (s >= size) { const rest = Math.floor((s % size) / sub); return `${Math.floor(s / size)} ${name}` + (rest ? ` ${rest} ${subName}` : ""); }
  }
  return `${s} s`;
}
function fmtTime(epoch) {
  if (epoch === null || epoch === undefined) return "-";
  const iso = new Date(epoch * 1000).toISOString();
  const today = new Date(serverNow() * 1000).toISOString().slice(0, 10);
  return (iso.slice(0, 10) === today ? "" : iso.slice(0, 10) + " ") + iso.slice(11, 19) + " UTC";
}
function fmtEta(c) {
  if (c.eta_seconds === null || c.eta_seconds === undefined) return c.volumes_listed ? "not filling" : "-";
  return c.eta_seconds <= 0 ? "at the limit now" : "in " + fmtDur(c.eta_seconds);
}
function fmtPredictive(p) {  // as text.predictive
  return `broker ${p.broker_id} ${p.log_dir} reaches the hard limit in ${fmtDur(p.eta_seconds)} at the current fill ` +
    `(horizon ${fmtDur(p.horizon_seconds)})`;
}
function predictive(c) { return c.basis === "record" && c.predictive ? c.predictive : null; }  // in force now
function serverNow() { return Date.now() / 1000 + S.offset; }
function age(c) { return c.decided_at === undefined ? null : serverNow() - c.decided_at; }
function isStale(c) { return c.stale || (age(c) !== null && age(c) > S.page.stale_after_seconds); }
function factorClass(f) { return "factor " + (f === 0 ? "f0" : f !== null && f < 1 ? "fpart" : "f1"); }
function where(v) { return v ? `broker ${v.broker_id} ${v.log_dir}` : "-"; }
function available(v) { return !v ? "-" : v.offline ? (v.reason === "offline-filling" ? "offline, was filling" : "offline") : v.available_ratio !== null ? fmtPct(v.available_ratio) : fmtSize(v.available_bytes); }

// ---- header, banner, counts --------------------------------------------------------------------------------
function renderFeed() {
  const page = S.page, feed = page.feed, node = $("feed"), banner = $("banner");
  node.replaceChildren(el("span", "dot"), document.createTextNode(
    `${feed.topic} on ${feed.bootstrap}: ${feed.state === "following" ? (feed.caught_up ? "live" : "reading history ...") : feed.state}`));
  node.className = "feed" + (feed.state === "following" && !S.lost ? "" : " bad");
  let text = null, warn = false;
  if (S.lost) text = "Lost the connection to the dashboard server; retrying. What you see may be out of date.";
  else if (feed.state === "connecting") { text = `Connecting to ${feed.bootstrap} ...`; warn = true; }
  else if (feed.state !== "following") text = `Decision topic unavailable since ${fmtTime(feed.since)}: ${feed.message}`;
  else if (page.counts.refused_records > 0) {  // someone but the pipeline wrote to the topic: say so first
    const last = page.last_refused;
    text = `${page.counts.refused_records} decision record(s) refused as the brokers refuse them (not signed with a ` +
      "configured key, written again, or dated further ahead of the clock than quota.pipeline.reader.max.clock.skew " +
      "allows); only the pipeline may change the factor" +
      (last ? ` (last: key ${last.key ?? "none"} ${last.where}: ${last.reason})` : "");
  }
  else if (page.counts.unreadable_records > 0) {
    const last = page.last_unreadable;
    text = `${page.counts.unreadable_records} record(s) on the topic could not be read` +
      (last ? ` (last: key ${last.key ?? "none"} ${last.where}: ${last.error})` : "");
    warn = true;
  }
  banner.hidden = text === null;
  banner.className = "banner" + (warn ? " warn" : "");
  banner.textContent = text || "";
}

function renderCounts() {
  let stale = 0;
  for (const c of S.rows.values()) if (isStale(c)) stale++;
  const n = S.page.counts, node = $("counts");
  const item = (value, label, cls) => { const c = el("div", "count" + (value && cls ? " " + cls : "")); c.append(el("strong", null, value), label); return c; };
  node.replaceChildren(item(n.clusters, "clusters"), item(n.stopped, "stopped", "red"), item(n.throttled, "throttled", "red"),
    item(stale, `without a decision for > ${fmtDur(S.page.stale_after_seconds)}`, "amber"),
    item(n.fallback, "on the fallback", "amber"), item(n.unreadable_records, "unreadable records", "amber"),
    item(n.refused_records, "refused records", "red"));
}

// ---- overview ----------------------------------------------------------------------------------------------
// Riskiest first, as the server's risk order (factor, stale or fallback, ETA, minimum ratio; null: none), then key.
function byRisk(a, b) {
  for (let i = 0; i < a.risk.length; i++) {
    const x = a.risk[i] ?? Infinity, y = b.risk[i] ?? Infinity;
    if (x !== y) return x < y ? -1 : 1;
  }
  return a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
}
function clusters() {  // every cluster riskiest first, sorted again only after a change
  if (!S.sorted) S.sorted = [...S.rows.values()].sort(byRisk);
  return S.sorted;
}
function matches(c, words) {
  const text = (`${c.key} ${c.state}${isStale(c) ? " STALE" : ""}${c.basis === "fallback" ? " FALLBACK" : ""}` +
    `${predictive(c) ? " PREDICTIVE" : ""}`).toLowerCase();
  return words.every((w) => text.includes(w));
}

function renderOverview() {
  const body = $("overview").tBodies[0], rows = [];
  const words = $("filter").value.toLowerCase().split(/\s+/).filter(Boolean);
  const all = clusters(), chosen = words.length ? all.filter((c) => matches(c, words)) : all;
  $("shown").textContent = all.length === 0 ? "" :
    `${chosen.length > SHOWN ? `the ${SHOWN} riskiest of ` : ""}${chosen.length} ` +
    (words.length ? `cluster(s) matching "${words.join(" ")}" (of ${all.length})` : "cluster(s)") +
    (chosen.length > SHOWN ? "; type in the filter to find the others" : "");
  for (const c of chosen.slice(0, SHOWN)) {
    const tr = el("tr", "row" + (c.key === S.selected ? " selected" : ""));
    tr.dataset.cluster = c.key;
    tr.addEventListener("click", () => select(c.key, true));
    cell(tr, c.key);
    const state = cell(tr, null), badges = [Object.assign(badge(c.state), { title: c.stop ? c.stop.headline : "" })];
    if (isStale(c) && c.state !== "NO DECISION") badges.push(badge("STALE", "amber"));
    if (c.basis === "fallback") badges.push(badge("FALLBACK", "amber"));
    if (predictive(c)) badges.push(Object.assign(badge("PREDICTIVE", "amber"), { title: "predictive throttle: " + fmtPredictive(c.predictive) }));
    if (c.stop) badges.splice(1, 0, el("span", "scope", c.stop.scope === "cluster" ? "every topic" : `${c.stop.count} topic(s)`));
    badges.forEach((b, i) => state.append(...(i ? [" ", b] : [b])));
    cell(tr, c.factor_text, factorClass(c.factor) + " num");
    cell(tr, c.throttled_since ? `${c.since_approx ? "at least " : ""}${fmtTime(c.throttled_since)} (${fmtDur(serverNow() - c.throttled_since)})` : "-");
    cell(tr, c.decided_at === undefined ? "none readable" : `${c.source} ${c.status === "SUCCESS" ? "" : c.status + " "}${fmtDur(age(c))} ago`);
    const v = c.closest;
    cell(tr, where(v));
    cell(tr, available(v), "num");
    cell(tr, fmtEta(c), "num");
    cell(tr, c.missing_brokers && c.missing_brokers.length ? c.missing_brokers.join(", ") : "none");
    rows.push(tr);
  }
  body.replaceChildren(...rows);
  $("empty").hidden = all.length > 0;
  mark("overview-rendered", rows.length > 0);
}
function mark(name, done) {  // for bench/dashboard_scale.py: navigation start -> what a person sees
  if (done && !performance.getEntriesByName(name).length) performance.mark(name);
}

// ---- detail ------------------------------------------------------------------------------------------------
function renderDetail() {
  const d = S.detail, section = $("detail");
  if (!d || d.cluster.key !== S.selected) { section.hidden = true; return; }
  const fresh = S.rows.get(S.selected) || d.cluster;
  const c = { ...d.cluster, ...fresh };
  section.hidden = false;
  $("detail-title").textContent = c.key;
  $("detail-state").replaceWith(Object.assign(badge(c.state), { id: "detail-state" }));
  $("detail-factor").textContent = c.factor_text;
  $("detail-factor").className = factorClass(c.factor);
  $("detail-reason").textContent = c.reason;
  // The row's stop names the first topics only; the detail's names them all while both say the same stop.
  const same = d.cluster.stop && c.stop && d.cluster.stop.headline === c.stop.headline;
  renderStop(same ? d.cluster.stop : c.stop);
  const warnings = [];
  const warn = (text, red) => warnings.push(el("div", "warning" + (red ? " red" : ""), text));
  if (isStale(c) && c.decided_at !== undefined)
    warn(`No decision for ${fmtDur(age(c))}: more than two check intervals (${fmtDur(S.page.check_interval_seconds)} each). ` +
         "Is the streaming job running and publishing?", true);
  if (c.missing_brokers && c.missing_brokers.length)
    warn(`Broker(s) ${c.missing_brokers.join(", ")} registered but without a log dir reading in force: a release needs every broker.`);
  if (c.unreadable) warn(`${c.unreadable} record(s) of this cluster could not be read (last: ${c.last_error}).`);
  if (predictive(c))
    warn(`Predictive throttle in force: ${fmtPredictive(c.predictive)}. Producers are slowed by ETA / horizon ` +
         `(factor ${fmtFactor(c.predictive.eta_seconds / c.predictive.horizon_seconds)}) before the hard limit stops them.`);
  if (c.note) warn(c.note);
  $("detail-warnings").replaceChildren(...warnings);
  renderFacts(c);
  renderVolumes(c);
  $("detail-data").hidden = c.decided_at === undefined;  // no readable decision: nothing to list or draw
}

function stopWhy(stop) {  // the log dirs at or below the hard limit, as tail says it
  const dirs = stop.dirs.map((v) => `broker ${v.broker_id} ${v.log_dir}: ${v.state}`);
  const unlisted = stop.violations - stop.dirs.length;
  if (unlisted > 0) dirs.push(`${unlisted} more not listed in the record`);
  return `why: ${stop.violations} log dir(s) at or below the hard limit` + (dirs.length ? ` (${dirs.join("; ")})` : "");
}
function renderStop(stop) {  // topic names are outside text: only ever textContent
  $("detail-stop").hidden = !stop;
  if (!stop) return;
  $("stop-headline").textContent = stop.headline + (stop.scope === "cluster" ? " of the cluster" : "");
  $("stop-why").textContent = stopWhy(stop);
  const items = stop.topics.map((t) => el("li", null, t));
  if (stop.more) items.push(el("li", "more", `+ ${stop.more} more`));
  $("stop-topics").replaceChildren(...items);
  $("stop-topics").hidden = items.length === 0;
}

function renderFacts(c) {
  const facts = [
    ["factor in force", c.factor === null ? "-" : `${c.factor_text} (${c.basis === "record" ? "the decision" : "the brokers' fallback"})`],
    ["decision", c.source ? `${c.source}, poll ${c.status}, factor ${fmtFactor(c.record_factor)}` : "-"],
    ["decided", c.decided_at !== undefined ? `${fmtTime(c.decided_at)} (${fmtDur(age(c))} ago)` : "-"],
    ["valid until", c.valid_until ? fmtTime(c.valid_until) : c.source ? "no expiry (fallback)" : "-"],
    ["below factor 1 since", c.throttled_since ? `${c.since_approx ? "at least " : ""}${fmtTime(c.throttled_since)} (${fmtDur(serverNow() - c.throttled_since)})` : c.factor === null ? "-" : "at factor 1"],
    ["predictive throttle", predictive(c) ? fmtPredictive(c.predictive) : c.source ? "none" : "-"],
    ["limits", c.limit_text || "-"],
    ["minimum available", fmtPct(c.min_available_ratio)],
    ["log dirs at the hard limit", c.violations ?? "-"],
    ["brokers reporting", c.active_brokers ?? "-"],
    ["missing brokers", c.missing_brokers && c.missing_brokers.length ? c.missing_brokers.join(", ") : "none"],
  ];
  $("detail-facts").replaceChildren(...facts.flatMap(([k, v]) => [el("dt", null, k), el("dd", null, v)]));
}

function renderVolumes(c) {
  const rows = (c.volumes || []).map((v) => {
    const tr = el("tr");
    cell(tr, v.broker_id, "num"); cell(tr, v.log_dir);
    cell(tr, v.offline ? "offline" : `${fmtSize(v.available_bytes)} (${fmtPct(v.available_ratio)})`, "num");
    cell(tr, fmtSize(v.total_bytes), "num"); cell(tr, fmtSize(v.headroom_bytes), "num");
    cell(tr, v.fill_rate_bytes_per_second ? fmtSize(v.fill_rate_bytes_per_second) + "/s" : c.volumes_listed ? "not filling" : "-", "num");
    cell(tr, v.eta_seconds === null ? (c.volumes_listed ? "not filling" : "-") : v.eta_seconds <= 0 ? "at the limit now" : "in " + fmtDur(v.eta_seconds), "num");
    cell(tr, v.top_partitions.map((p) => `${p.topic}-${p.partition} ${fmtSize(p.size_bytes)}`).join(", ") ||
         (c.volumes_listed ? "none listed" : "not in a version 1 record"), "wrap");
    return tr;
  });
  $("volumes").tBodies[0].replaceChildren(...rows);
}

// ---- charts (uPlot, served from the package) ---------------------------------------------------------------
function timeTicks(u, ticks, axis, space, step) {  // 24-hour UTC labels; the date only for spans over a day
  const span = u.scales.x.max - u.scales.x.min;
  return ticks.map((t) => {
    const iso = new Date(t * 1000).toISOString();
    return span > 86400 ? iso.slice(5, 10) + " " + iso.slice(11, 16) : step < 60 ? iso.slice(11, 19) : iso.slice(11, 16);
  });
}

function renderCharts(timeline) {
  for (const chart of S.charts) chart.destroy();
  S.charts = [];
  if (!timeline.t.length) return;
  const utc = (ts) => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC");
  const make = (id, series, data, yValues, range) => {
    const node = $(id);
    node.replaceChildren();
    return new uPlot({ width: Math.max(300, node.clientWidth), height: 220, tzDate: utc,
      scales: { x: { time: true }, y: { range } },
      axes: [{ space: 90, values: timeTicks }, { size: 60, values: (u, vals) => vals.map(yValues) }],
      series: [{ label: "UTC" }, ...series] }, data, node);
  };
  const stepped = uPlot.paths.stepped({ align: 1 });
  S.charts.push(make("chart-factor", [{ label: "factor", stroke: "#b3261e", width: 2, paths: stepped, value: (u, v) => fmtFactor(v) }],
    [timeline.t, timeline.factor], fmtFactor, [0, 1.05]));
  const series = [{ label: "min available", stroke: "#3466c2", width: 2, value: (u, v) => fmtPct(v) }];
  const data = [timeline.t, timeline.min_ratio];
  const line = (label, stroke) => ({ label, stroke, dash: [6, 4], points: { show: false }, value: (u, v) => fmtPct(v) });
  if (timeline.hard) { series.push(line("hard limit", "#b3261e")); data.push(timeline.hard); }
  if (timeline.soft) { series.push(line("soft limit", "#d98c00")); data.push(timeline.soft); }
  const top = Math.max(0.01, ...timeline.min_ratio.filter((r) => r !== null), ...(timeline.soft || timeline.hard || [0]));
  S.charts.push(make("chart-ratio", series, data, fmtPct, [0, Math.min(1, top * 1.15)]));
}

// ---- data flow ---------------------------------------------------------------------------------------------
function select(key, pinned) {
  S.selected = key;
  S.pinned = S.pinned || pinned;
  if (pinned) history.replaceState(null, "", "#cluster=" + encodeURIComponent(key));
  renderOverview();
  refreshDetail(true);
}

async function refreshDetail(force) {
  const c = S.selected === null ? undefined : S.rows.get(S.selected);
  if (!c) { S.detail = null; renderDetail(); return; }
  const version = `${c.key}|${c.observed_at}|${c.unreadable}`;
  if ((!force && version === S.detailFor) || S.fetching) return;
  S.fetching = true;
  try {
    const response = await fetch("/api/cluster/" + encodeURIComponent(c.key));
    if (!response.ok) return;
    S.detail = await response.json();
    S.detailFor = version;
    renderDetail();
    renderCharts(S.detail.timeline);
    mark("detail-rendered", true);
  } catch (e) { /* the server is away: the banner says so, the next push retries */ }
  finally { S.fetching = false; }
}

function onPage(page, full) {  // full: the whole overview; else the rows changed since the last event
  if (full) S.rows = new Map();
  for (const c of page.clusters) S.rows.set(c.key, c);
  for (const key of page.removed || []) S.rows.delete(key);
  S.sorted = null;
  delete page.clusters;
  S.page = page;
  S.offset = page.now - Date.now() / 1000;
  if (!S.pinned || !S.rows.has(S.selected)) S.selected = clusters().length ? clusters()[0].key : null;  // the riskiest
  renderAll();
  refreshDetail(false);
}

function renderAll() {
  if (!S.page) {
    $("banner").hidden = !S.lost;
    $("banner").textContent = "Cannot reach the dashboard server; retrying.";
    return;
  }
  renderFeed(); renderCounts(); renderOverview(); renderDetail();
}

function connect() {
  const events = new EventSource("/api/events");
  events.addEventListener("overview", (e) => { S.lost = false; onPage(JSON.parse(e.data), true); });
  events.addEventListener("changes", (e) => { S.lost = false; onPage(JSON.parse(e.data), false); });
  events.onerror = () => { S.lost = true; renderAll(); };
}

const wanted = new URLSearchParams(location.hash.slice(1)).get("cluster");
if (wanted) { S.selected = wanted; S.pinned = true; }
connect();  // its first event is the whole overview
$("filter").addEventListener("input", () => { if (S.page) renderOverview(); });
setInterval(renderAll, 1000);  // ages and staleness move between pushes

// ---- remedy's plan (dashboard --plan): shown only while some log dir needs one ----------------------------
function renderPlan(body) {
  const plan = body.plan, dirs = plan ? plan.dirs : [];
  $("plan").hidden = !body.error && dirs.length === 0;
  $("plan-note").textContent = body.error ? "the cluster could not be read: " + body.error :
    `read ${fmtDur(body.age_seconds)} ago; make it with quota-pipeline remedy CONFIG --execute` +
    (plan && plan.moves.length ? ` (${fmtSize(plan.moved_bytes)} in all)` : "");
  const dirRows = $("plan-dirs").tBodies[0], moveRows = $("plan-moves").tBodies[0];
  dirRows.replaceChildren();
  moveRows.replaceChildren();
  for (const d of dirs) {
    const row = el("tr");
    for (const text of [d.broker, d.log_dir, d.why, fmtSize(d.available_bytes), fmtSize(d.goal_bytes),
                        fmtSize(d.freed_bytes), fmtSize(d.available_after_bytes),
                        d.resolved ? "back above its limit" : d.note]) cell(row, text);
    dirRows.appendChild(row);
  }
  for (const m of plan ? plan.moves : []) {
    const row = el("tr");
    for (const text of [`${m.topic}-${m.partition}`, `broker ${m.from.broker} ${m.from.log_dir}`,
                        `broker ${m.to.broker} ${m.to.log_dir}`, fmtSize(m.size_bytes), m.why]) cell(row, text);
    moveRows.appendChild(row);
  }
}
async function refreshPlan() {
  try {
    const body = await (await fetch("/api/plan")).json();
    if (!body.enabled) return;  // started without --plan: never shown
    renderPlan(body);
    setTimeout(refreshPlan, 10000);
  } catch (e) { setTimeout(refreshPlan, 10000); }
}
refreshPlan();
window.addEventListener("resize", () => { if (S.detail) renderCharts(S.detail.timeline); });

// ---- the demo's story (quota-pipeline demo): what happened so far, newest last -------------------------------
async function refreshStory() {
  try {
    const body = await (await fetch("/api/story")).json();
    if (!body.enabled) return;  // not the demo: never shown
    $("story").hidden = body.lines.length === 0;
    const list = $("story-lines");
    for (const line of body.lines.slice(list.children.length)) {  // lines are only ever appended
      const item = el("li");
      item.appendChild(el("time", null, fmtTime(line.at)));
      item.appendChild(el("span", null, line.text));
      list.appendChild(item);
    }
    setTimeout(refreshStory, 2000);
  } catch (e) { setTimeout(refreshStory, 2000); }
}
refreshStory();
