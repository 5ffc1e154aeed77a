// Apollo annotator console: plain JS, no build step.
// Safety: everything that comes from agents, environments or annotators is rendered with
// textContent / createTextNode, never as HTML (no innerHTML anywhere in this file).
"use strict";

const $ = (id) => document.getElementById(id);
const LS = window.localStorage;
const COLLAPSE_LINES = 40, HEAD_LINES = 12, TAIL_LINES = 12, COLLAPSE_CHARS = 6000;

const state = {
  me: null,
  tid: null,
  traj: null,
  steps: [],            // loaded steps of the selected trajectory (full)
  open: new Set(),      // expanded step indexes
  expanded: new Set(),  // expanded long outputs ("step:3", "rec:17")
  ctx: new Map(),       // step index -> loaded context (kept across re-renders)
  records: { terminal: [], file: [], search: [] },
  lastRecordId: 0,
  guidance: [],
  allGuidance: [],
  triage: [],
  serverSkew: 0,        // server time - browser time (s)
  lostAfter: 30,
  es: null,
  loadingSteps: false,
  stepsAgain: false,
  linkStep: null,       // step to open from a deep link once loaded
};

// ---------------------------------------------------------------- DOM helpers (text only)
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = String(v);
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(e.dataset, v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// Text with the search keyword wrapped in <mark> elements (built as nodes, never parsed).
function highlighted(text, query) {
  const frag = document.createDocumentFragment();
  text = String(text ?? "");
  if (!query) { frag.append(document.createTextNode(text)); return frag; }
  const lower = text.toLowerCase(), q = query.toLowerCase();
  let i = 0;
  for (;;) {
    const j = lower.indexOf(q, i);
    if (j < 0) break;
    if (j > i) frag.append(document.createTextNode(text.slice(i, j)));
    frag.append(el("mark", { text: text.slice(j, j + q.length) }));
    i = j + q.length;
  }
  frag.append(document.createTextNode(text.slice(i)));
  return frag;
}

function pre(text, cls, query) {
  const p = el("pre", { class: cls });
  p.append(highlighted(text, query));
  return p;
}

// A long output as head … tail with a button to show it all (the choice is kept per key).
function collapsible(text, cls, query, key) {
  text = String(text ?? "");
  const lines = text.split("\n");
  const long = lines.length > COLLAPSE_LINES || text.length > COLLAPSE_CHARS;
  if (!long) return pre(text, cls, query);
  const box = el("div", { class: "collapsible", dataset: { key } });
  const draw = () => {
    const open = state.expanded.has(key);
    let head, tail, hidden;
    if (lines.length > COLLAPSE_LINES) {
      head = lines.slice(0, HEAD_LINES).join("\n"); tail = lines.slice(-TAIL_LINES).join("\n");
      hidden = (lines.length - HEAD_LINES - TAIL_LINES) + " lines";
    } else {
      head = text.slice(0, 2000); tail = text.slice(-2000); hidden = (text.length - 4000) + " characters";
    }
    const btn = el("button", { type: "button", class: "expand", "aria-expanded": open ? "true" : "false",
      text: open ? "Collapse" : "Show all (" + hidden + " hidden)",
      onclick: (ev) => { ev.stopPropagation(); if (open) state.expanded.delete(key); else state.expanded.add(key); draw(); } });
    if (open) box.replaceChildren(pre(text, cls, query), btn);
    else box.replaceChildren(pre(head, cls + " head", query), el("div", { class: "elided", text: "… " + hidden + " …" }), btn,
      pre(tail, cls + " tail", query));
  };
  draw();
  return box;
}

function fmtTime(t) { return t ? new Date(t * 1000).toLocaleTimeString() : ""; }

function fmtDuration(s) {
  s = Math.max(0, Math.floor(s));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  return (h ? h + ":" + String(m).padStart(2, "0") : String(m)) + ":" + String(sec).padStart(2, "0");
}

function fmtAge(s) {
  s = Math.max(0, Math.floor(s));
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min";
  return (s / 3600).toFixed(1) + " h";
}

function serverNow() { return Date.now() / 1000 + state.serverSkew; }
function enc(s) { return encodeURIComponent(s); }
function announce(text) { $("announce").textContent = ""; setTimeout(() => { $("announce").textContent = text; }, 30); }

// ---------------------------------------------------------------- API
class HttpError extends Error {
  constructor(status, detail) { super(detail); this.status = status; }
}

async function api(path, opts = {}) {
  const init = { method: opts.method || "GET", credentials: "same-origin", headers: {} };
  if (init.method !== "GET") init.headers["X-Apollo-UI"] = "1";
  if (opts.body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(opts.body);
  }
  const r = await fetch(path, init);
  if (r.status === 401 && !opts.noLogout) { showLogin("Your session has ended: log in again."); throw new HttpError(401, "unauthorized"); }
  let data = null;
  try { data = await r.json(); } catch (e) { data = null; }
  if (!r.ok) throw new HttpError(r.status, (data && data.detail) ? String(typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail)) : r.statusText);
  return data;
}

// ---------------------------------------------------------------- login
function showLogin(message) {
  if (state.es) { state.es.close(); state.es = null; }
  $("app").hidden = true;
  $("login").hidden = false;
  $("logout").hidden = true;
  $("who").textContent = "";
  setLive(false);
  $("login-error").textContent = message || "";
  $("token").focus();
}

async function login(ev) {
  ev.preventDefault();
  const token = $("token").value.trim();
  $("login-error").textContent = "";
  try {
    const me = await api("/api/session", { method: "POST", body: { token }, noLogout: true });
    $("token").value = "";
    start(me);
  } catch (e) {
    $("login-error").textContent = e.status === 401 ? "Unknown token." : ("Login failed: " + e.message);
  }
}

async function logout() {
  try { await api("/api/session", { method: "DELETE", noLogout: true }); } catch (e) { /* ignore */ }
  state.me = null;
  showLogin("");
}

function start(me) {
  state.me = me;
  $("login").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  $("who").textContent = me.name + " (" + me.role + ")";
  $("guidance-note").textContent = me.role === "annotator" ? "" : "Viewer tokens cannot send guidance.";
  updateGuidanceForm();
  loadRollouts().then(() => { openFromLink(); });
  loadAllGuidance();
  connectEvents();
}

// ---------------------------------------------------------------- deep links: #r=<rollout>&s=<step>
function readLink() {
  const p = new URLSearchParams(location.hash.slice(1));
  const s = p.get("s");
  return { tid: p.get("r"), step: s !== null && /^\d+$/.test(s) ? Number(s) : null };
}

function writeLink(step) {
  const p = new URLSearchParams();
  if (state.tid) p.set("r", state.tid);
  if (step !== null && step !== undefined) p.set("s", String(step));
  const h = "#" + p.toString();
  if (location.hash !== h) history.replaceState(null, "", h);
}

function openFromLink() {
  const { tid, step } = readLink();
  if (!tid) return;
  state.linkStep = step;
  if (step !== null) $("follow").checked = false;  // a link to a step stays on that step
  selectRollout(tid);
}

// ---------------------------------------------------------------- live updates (SSE)
function setLive(on, text) {
  const b = $("live");
  b.textContent = text || (on ? "live" : "offline");
  b.classList.toggle("off", !on);
}

function throttle(fn, ms) {
  let timer = null, again = false;
  return function run() {
    if (timer) { again = true; return; }
    fn();
    timer = setTimeout(() => { timer = null; if (again) { again = false; run(); } }, ms);
  };
}

const refreshRollouts = throttle(() => loadRollouts(), 1000);
const refreshGuidance = throttle(() => loadGuidance(), 250);
const refreshAllGuidance = throttle(() => loadAllGuidance(), 500);
const refreshRecords = throttle(() => loadRecords(), 300);

function connectEvents() {
  if (state.es) state.es.close();
  const es = new EventSource("/api/events");
  state.es = es;
  let first = true;
  es.addEventListener("hello", () => {
    setLive(true);
    if (!first) {  // reconnected (e.g. the service restarted): catch up on everything
      loadRollouts(); loadAllGuidance();
      if (state.tid) selectRollout(state.tid, true);
    }
    first = false;
  });
  es.onerror = () => {
    setLive(false, "reconnecting…");
    if (es.readyState === EventSource.CLOSED) api("/api/session").then(() => setTimeout(connectEvents, 2000)).catch(() => {});
  };
  const onEvent = (ev) => {
    let d = {};
    try { d = JSON.parse(ev.data); } catch (e) { return; }
    refreshRollouts();
    if (ev.type === "guidance" || ev.type === "trajectory") refreshAllGuidance();
    if (!state.tid || d.trajectory_id !== state.tid) return;
    if (ev.type === "step") { loadSteps(); refreshRecords(); refreshGuidance(); }
    else if (ev.type === "guidance") refreshGuidance();
    else if (ev.type === "record") refreshRecords();
    else if (ev.type === "trajectory") { loadTrajectoryHeader(); refreshGuidance(); }
  };
  for (const kind of ["step", "guidance", "record", "trajectory"]) es.addEventListener(kind, onEvent);
}

// ---------------------------------------------------------------- triage list
function stallS() { const v = Number($("stall-s").value); return v > 0 ? v : 60; }

function badgesOf(t) {
  const b = [];
  const now = serverNow();
  if (t.lost) b.push("lost");
  if (t.status === "running" && !t.lost) {
    const last = t.last_step_at || t.started_at;
    if (now - last > stallS()) b.push("stalled");
  }
  if (t.erroring) b.push("erroring");
  if (t.off_plan) b.push("off_plan");
  if (t.status !== "running" && t.status !== "lost") b.push(t.status);
  return b;
}

const BADGE_TEXT = { lost: "lost", stalled: "stalled", erroring: "erroring", off_plan: "off plan" };

function attentionScore(t) {
  const b = badgesOf(t);
  return (b.includes("lost") ? 8 : 0) + (b.includes("erroring") ? 4 : 0) + (b.includes("off_plan") ? 2 : 0) + (b.includes("stalled") ? 1 : 0);
}

function sortRows(rows) {
  const key = $("sort").value;
  const num = (v, d) => (v === null || v === undefined ? d : Number(v));
  const cmp = {
    attention: (a, b) => attentionScore(b) - attentionScore(a) || a.task_id.localeCompare(b.task_id) || a.sample - b.sample,
    task: (a, b) => a.task_id.localeCompare(b.task_id) || a.sample - b.sample,
    age: (a, b) => num(a.last_step_at, a.started_at) - num(b.last_step_at, b.started_at),
    errors: (a, b) => b.consecutive_errors - a.consecutive_errors,
    best: (a, b) => num(b.best_score, -1) - num(a.best_score, -1),
    evals: (a, b) => b.evals_used - a.evals_used,
    steps: (a, b) => b.step_count - a.step_count,
    pending: (a, b) => b.guidance_pending - a.guidance_pending,
  }[key] || (() => 0);
  return rows.slice().sort(cmp);
}

function filterRows(rows) {
  const q = $("filter").value.trim().toLowerCase();
  const f = $("badge-filter").value;
  return rows.filter((t) => {
    if (q && !(t.task_id + " " + t.trajectory_id).toLowerCase().includes(q)) return false;
    if (!f) return true;
    if (f === "pending") return t.guidance_pending > 0;
    if (f === "attention") return attentionScore(t) > 0;
    return badgesOf(t).includes(f);
  });
}

async function loadRollouts() {
  const status = $("show-all").checked ? "all" : "running";
  let data;
  try { data = await api("/api/triage?status=" + status); } catch (e) { return; }
  state.serverSkew = data.server_time - Date.now() / 1000;
  state.lostAfter = data.lost_after_s;
  state.triage = data.rows.filter((r) => r && r.trajectory_id);
  renderRollouts();
}

let lastRolloutSig = "";

function renderRollouts() {
  const rows = sortRows(filterRows(state.triage));
  const tbody = document.querySelector("#rollout-table tbody");
  // rows are rebuilt only when what they show changed: a rebuild between a press and a release
  // (e.g. a field's change event on blur) would swallow the click
  const sig = JSON.stringify([state.tid, state.triage.length, rows.map((t) => [t.trajectory_id, badgesOf(t), t.step_count,
    t.last_action, t.last_step_at, t.consecutive_errors, t.consecutive_invalid, t.evals_used, t.best_score,
    t.guidance_pending, t.guidance_delivered, t.status, t.sample])]);
  if (sig === lastRolloutSig && tbody.children.length === rows.length) return;
  lastRolloutSig = sig;
  const focusedTid = document.activeElement && document.activeElement.closest && document.activeElement.closest("#rollout-table tr")
    ? document.activeElement.closest("tr").dataset.tid : null;
  const now = serverNow();
  const trs = rows.map((t) => {
    const badges = badgesOf(t);
    const selected = t.trajectory_id === state.tid;
    const steps = t.max_steps ? t.step_count + "/" + t.max_steps : String(t.step_count);
    const age = t.last_step_at ? fmtAge(now - t.last_step_at) + " ago" : "no step yet";
    const tr = el("tr", {
      class: [selected ? "selected" : "", t.status !== "running" ? "ended" : "", ...badges.map((b) => "b-" + b)].join(" ").trim(),
      dataset: { tid: t.trajectory_id, badges: badges.join(" "), lastStep: t.last_step_at || "", started: t.started_at },
      tabindex: (selected || (!state.tid && rows[0] === t)) ? "0" : "-1",
      "aria-selected": selected ? "true" : "false",
      onclick: () => selectRollout(t.trajectory_id),
    },
    el("td", {},
      el("span", { class: "task", text: t.task_id }), " ",
      el("span", { class: "sample", title: "sample " + t.sample + " of this task" + (t.seed !== null && t.seed !== undefined ? " (seed " + t.seed + ")" : ""), text: "#" + t.sample }),
      el("span", { class: "tid", text: t.trajectory_id }),
      el("span", { class: "badges" }, ...badges.map((b) => el("span", { class: "tag tag-" + b, title: b === "off_plan" ? (t.flags || []).map((f) => "step " + f.step + ": " + f.category + ": " + f.reason).join("\n") : "", text: BADGE_TEXT[b] || b })))),
    el("td", { class: "last" }, el("span", { class: "step-tool", text: t.last_action || "–" }),
      el("span", { class: "age", text: "step " + steps + " · " + age })),
    el("td", { class: "errors", text: t.consecutive_errors + (t.consecutive_invalid ? " (" + t.consecutive_invalid + " inv.)" : "") }),
    el("td", { class: "evals", text: t.evals_used + "/" + t.eval_budget }),
    el("td", { class: "best", text: t.best_score === null || t.best_score === undefined ? "–" : Number(t.best_score).toFixed(1) }),
    el("td", { class: "pending", text: t.guidance_pending + "/" + t.guidance_delivered }));
    tr.addEventListener("keydown", (ev) => { if (ev.key === "Enter") { ev.preventDefault(); selectRollout(t.trajectory_id); } });
    return tr;
  });
  tbody.replaceChildren(...trs);
  if (focusedTid) { const tr = tbody.querySelector("tr[data-tid='" + CSS.escape(focusedTid) + "']"); if (tr) { tr.tabIndex = 0; tr.focus(); } }
  $("no-rollouts").hidden = rows.length > 0;
  $("no-rollouts").textContent = state.triage.length ? "No rollout matches the filter." : "No running rollout.";
  $("rollout-count").textContent = rows.length + (rows.length !== state.triage.length ? " of " + state.triage.length : "");
}

function tick() {
  if (!state.me) return;
  renderRolloutAges();
  if (state.traj && !state.traj.ended_at) renderTrajMeta();
  renderGuidance();
}

function renderRolloutAges() {
  const now = serverNow();
  let changed = false;
  for (const t of state.triage) {
    const tr = document.querySelector("#rollout-table tr[data-tid='" + CSS.escape(t.trajectory_id) + "']");
    if (!tr) continue;
    const age = tr.querySelector(".age");
    const steps = t.max_steps ? t.step_count + "/" + t.max_steps : String(t.step_count);
    if (age) age.textContent = "step " + steps + " · " + (t.last_step_at ? fmtAge(now - t.last_step_at) + " ago" : "no step yet");
    if (badgesOf(t).join(" ") !== tr.dataset.badges) changed = true;
  }
  if (changed) renderRollouts();
}

// ---------------------------------------------------------------- one trajectory
async function selectRollout(tid, keepView) {
  const changed = tid !== state.tid;
  if (changed) saveDraft();
  state.tid = tid;
  if (changed) {
    state.traj = null;
    state.steps = [];
    state.open = new Set();
    state.ctx = new Map();
    state.records = { terminal: [], file: [], search: [] };
    state.lastRecordId = 0;
    state.guidance = [];
    $("steps").replaceChildren();
    $("guidance-history").replaceChildren();
    $("terminal").replaceChildren(); $("files").replaceChildren(); $("searches").replaceChildren();
    if (!keepView) $("search").value = "";
    restoreDraft();
    if (state.linkStep === null) writeLink(null);
  }
  for (const tr of document.querySelectorAll("#rollout-table tbody tr")) {
    const sel = tr.dataset.tid === tid;
    tr.classList.toggle("selected", sel);
    tr.setAttribute("aria-selected", sel ? "true" : "false");
    tr.tabIndex = sel ? 0 : -1;
  }
  $("empty").hidden = true;
  $("traj").hidden = false;
  updateGuidanceForm();
  await Promise.all([loadTrajectoryHeader(), loadSteps(true), loadRecords(), loadGuidance()]);
}

async function loadTrajectoryHeader() {
  const tid = state.tid;
  let t;
  try { t = await api("/api/trajectories/" + enc(tid)); } catch (e) {
    if (e.status === 404 && tid === state.tid) { $("traj-title").textContent = tid; $("traj-meta").textContent = "not found"; }
    return;
  }
  if (tid !== state.tid) return;
  state.traj = t;
  state.serverSkew = t.server_time - Date.now() / 1000;
  $("traj-title").textContent = t.task_id;
  $("task-text").textContent = t.task_text || "(the agent did not report the task text)";
  renderTrajMeta();
  updateGuidanceForm();
}

function renderTrajMeta() {
  const t = state.traj;
  if (!t) return;
  const end = t.ended_at || serverNow();
  const tri = state.triage.find((r) => r.trajectory_id === t.trajectory_id);
  const status = tri && tri.lost ? "lost (no word from its worker)" : t.status;
  const parts = [t.trajectory_id, status, "step " + t.step_count + (t.meta && t.meta.max_steps ? "/" + t.meta.max_steps : ""),
    "elapsed " + fmtDuration(end - t.started_at)];
  if (t.latest_score !== null && t.latest_score !== undefined) parts.push("score " + Number(t.latest_score).toFixed(1));
  if (t.epoch > 1) parts.push("resumed ×" + (t.epoch - 1));
  $("traj-meta").textContent = parts.join(" · ");
}

async function loadSteps(reset) {
  if (state.loadingSteps) { state.stepsAgain = true; return; }
  state.loadingSteps = true;
  const tid = state.tid;
  try {
    do {
      state.stepsAgain = false;
      const since = reset ? 0 : state.steps.length;
      reset = false;
      let rows;
      try { rows = await api("/api/trajectories/" + enc(tid) + "/steps?full=true&since=" + since); } catch (e) { return; }
      if (tid !== state.tid) return;
      const before = state.steps.length;
      for (const s of rows) { if (s.step_index < stepsView.upTo) stepsView.sig = ""; state.steps[s.step_index] = s; }
      for (let i = 0; i < state.steps.length; i++) if (!state.steps[i]) state.steps[i] = null;
      renderSteps();
      if (state.linkStep !== null && state.steps[state.linkStep]) {
        const i = state.linkStep; state.linkStep = null; openStep(i, true);
      } else if (state.steps.length > before && $("follow").checked && before > 0) {
        followLatest();
      } else if (before === 0 && state.steps.length && $("follow").checked && state.linkStep === null) {
        followLatest();
      }
      if (state.steps.length > before && before > 0) announce((state.steps.length - before) + " new step(s) in " + (state.traj ? state.traj.task_id : tid));
      loadTrajectoryHeader();
    } while (state.stepsAgain && tid === state.tid);
  } finally {
    state.loadingSteps = false;
  }
}

function stepText(s) {
  return [s.tool || "", JSON.stringify(s.arguments || {}), s.assistant_text || "", s.observation || ""].join("\n").toLowerCase();
}

function stepFailed(s) {
  if (!s.tool) return true;
  const o = (s.detail || {}).observation || {};
  if (o.error || o.refused) return true;
  if (o.exit_code !== undefined && o.exit_code !== null && o.exit_code !== 0) return true;
  return /^\s*(Error|Refused|Invalid action)/.test(s.observation || "");
}

function guidanceAt(i) {
  return state.guidance.filter((g) => (g.state === "delivered" || g.state === "acknowledged") && g.delivered_step === i);
}

// The step list grows by appending while nothing else changed (a full rebuild on every new step
// would swallow a click whose press and release straddle it); any other change rebuilds it.
const stepsView = { sig: "", upTo: 0, shown: 0, total: 0 };

function renderSteps() {
  const q = $("search").value.trim();
  const ql = q.toLowerCase();
  const failedOnly = $("failed-only").checked;
  const list = $("steps");
  const sig = JSON.stringify([state.tid, q, failedOnly, [...state.open].sort((a, b) => a - b),
    state.guidance.map((g) => [g.guidance_id, g.state, g.delivered_step])]);
  let from = 0;
  if (sig === stepsView.sig && stepsView.upTo <= state.steps.length) from = stepsView.upTo;
  else { stepsView.shown = 0; stepsView.total = 0; }
  const focused = from === 0 && document.activeElement && document.activeElement.closest ? document.activeElement.closest("#steps li") : null;
  const focusedStep = focused ? focused.dataset.step : null;
  const items = [];
  for (let i = from; i < state.steps.length; i++) {
    const s = state.steps[i];
    if (!s) continue;
    stepsView.total++;
    if (failedOnly && !stepFailed(s)) continue;
    const match = !ql || stepText(s).includes(ql) || guidanceAt(i).some((g) => g.text.toLowerCase().includes(ql));
    if (!match) continue;
    stepsView.shown++;
    items.push(renderStep(s, q));
  }
  if (from === 0) list.replaceChildren(...items); else list.append(...items);
  stepsView.sig = sig;
  stepsView.upTo = state.steps.length;
  if (focusedStep !== null) { const li = list.querySelector("li[data-step='" + focusedStep + "']"); if (li) li.focus({ preventScroll: true }); }
  const what = failedOnly ? " failed" : "";
  const shown = stepsView.shown, total = stepsView.total;
  $("search-count").textContent = q || failedOnly ? (shown + " of " + total + what + " steps" + (q ? " match" : "")) : (total + " steps");
}

function renderStep(s, q) {
  const i = s.step_index;
  const g = guidanceAt(i);
  const args = JSON.stringify(s.arguments || {});
  const failed = stepFailed(s);
  const isOpen = state.open.has(i);
  const head = el("div", { class: "step-head" },
    el("span", { class: "step-index", text: "#" + i }),
    el("span", { class: "step-tool", text: s.tool || "(invalid action)" }),
    failed ? el("span", { class: "tag tag-erroring", text: "failed" }) : null,
    el("span", { class: "step-preview" }, highlighted(args.length > 140 ? args.slice(0, 140) + "…" : args, q)),
    g.length ? el("span", { class: "g-state delivered", text: "guidance ×" + g.length }) : null);
  const li = el("li", { class: "step" + (g.length ? " guided" : "") + (failed ? " failed" : "") + (isOpen ? " open" : ""),
    dataset: { step: i }, tabindex: "-1", "aria-expanded": isOpen ? "true" : "false",
    "aria-label": "step " + i + " " + (s.tool || "invalid action") + (failed ? ", failed" : "") }, head);
  head.addEventListener("click", () => toggleStep(i));
  li.addEventListener("keydown", (ev) => {
    if (ev.target !== li) return;
    if (ev.key === "Enter") { ev.preventDefault(); toggleStep(i); }
  });
  if (isOpen) li.append(renderStepBody(s, q, g));
  return li;
}

function renderStepBody(s, q, g) {
  const d = s.detail || {};
  const body = el("div", { class: "step-body" });
  if (g.length) {
    body.append(el("h4", { text: "Guidance delivered before this step" }));
    for (const x of g) body.append(pre(x.text, "obs", q));
  }
  body.append(el("h4", { text: "Model output" }),
    collapsible(s.assistant_text || "(not reported by the agent)", "model-text", q, "model:" + s.step_index),
    el("h4", { text: "Action" }),
    pre((s.tool || "(invalid action)") + " " + JSON.stringify(s.arguments || {}, null, 2), "action", q));
  const o = d.observation || {};
  const flags = [];
  if (o.exit_code !== undefined && o.exit_code !== null) flags.push("exit " + o.exit_code);
  if (o.error) flags.push("error"); if (o.truncated) flags.push("truncated"); if (o.refused) flags.push("refused");
  body.append(el("h4", { text: "Observation" + (flags.length ? " (" + flags.join(", ") + ")" : "") }),
    collapsible(s.observation, "obs observation", q, "obs:" + s.step_index));
  const timing = [];
  if (d.prompt_tokens) timing.push(d.prompt_tokens + " prompt tokens");
  if (d.gen_time_s) timing.push("generation " + Number(d.gen_time_s).toFixed(2) + " s");
  if (d.wall_time_s) timing.push("step " + Number(d.wall_time_s).toFixed(2) + " s");
  timing.push(fmtTime(s.created_at));
  body.append(el("p", { class: "muted small", text: timing.join(" · ") }));
  const ctxBox = el("div", { class: "context" });
  if (state.ctx.has(s.step_index)) {
    renderContext(s.step_index, state.ctx.get(s.step_index), ctxBox, q);
    body.append(ctxBox);
    return body;
  }
  const btn = el("button", { type: "button", class: "show-context", text: "Show the context the model saw",
    onclick: async (ev) => { ev.stopPropagation(); btn.disabled = true; await showContext(s.step_index, ctxBox); btn.remove(); } });
  body.append(btn, ctxBox);
  return body;
}

function toggleStep(i) {
  if (state.open.has(i)) { state.open.delete(i); writeLink(null); } else { state.open.add(i); writeLink(i); }
  renderSteps();
  updateGuidanceTarget();
  const li = $("steps").querySelector("li[data-step='" + i + "']");
  if (li) li.focus({ preventScroll: true });
}

function openStep(i, scroll) {
  state.open.add(i);
  writeLink(i);
  renderSteps();
  updateGuidanceTarget();
  const li = $("steps").querySelector("li[data-step='" + i + "']");
  if (li) { li.classList.add("linked"); if (scroll) li.scrollIntoView({ block: "start" }); li.focus({ preventScroll: true }); }
}

function followLatest() {
  const items = $("steps").querySelectorAll("li.step");
  const last = items[items.length - 1];
  if (!last) return;
  for (const li of $("steps").querySelectorAll("li.latest")) li.classList.remove("latest");
  last.classList.add("latest");
  last.scrollIntoView({ block: "end" });
}

function jumpToLatest() {
  showTab("steps");
  followLatest();
  const items = $("steps").querySelectorAll("li.step");
  if (items.length) items[items.length - 1].focus({ preventScroll: true });
}

async function showContext(i, box) {
  let c;
  try { c = await api("/api/trajectories/" + enc(state.tid) + "/steps/" + i + "/context"); }
  catch (e) { box.replaceChildren(el("p", { class: "error", text: "Could not load the context: " + e.message })); return; }
  state.ctx.set(i, c);
  renderContext(i, c, box, $("search").value.trim());
}

function renderContext(i, c, box, q) {
  const nodes = [el("h4", { text: "Context at step " + i + " (" + c.messages.length + " messages, " +
    (c.source === "agent" ? "as reported by the agent" : "rebuilt from the store") + ")" })];
  for (const n of c.notes || []) nodes.push(el("p", { class: "muted small", text: "Note: " + n }));
  const human = new Set(c.human || []);  // only rows the store authenticated are human guidance
  c.messages.forEach((m, k) => {
    const content = typeof m.content === "string" ? m.content : JSON.stringify(m.content);
    const isGuidance = human.has(k);
    nodes.push(el("div", { class: "ctx-msg" + (isGuidance ? " user-guidance" : "") },
      el("div", { class: "ctx-role", text: m.role + (isGuidance ? " · human guidance" : "") }),
      collapsible(content, "", q, "ctx:" + i + ":" + k)));
  });
  box.replaceChildren(...nodes);
}

// ---------------------------------------------------------------- records: terminal (live), files, search
async function loadRecords() {
  const tid = state.tid;
  if (!tid) return;
  let rows;
  try { rows = await api("/api/trajectories/" + enc(tid) + "/records?since_id=" + state.lastRecordId); } catch (e) { return; }
  if (tid !== state.tid) return;
  let grew = false;
  for (const r of rows) {
    if (r.id <= state.lastRecordId) continue;
    state.lastRecordId = Math.max(state.lastRecordId, r.id);
    if (state.records[r.kind]) state.records[r.kind].push(r);
    if (r.kind === "terminal") { appendTerminal(r); grew = true; }
    else if (r.kind === "file") $("files").append(renderFile(r));
    else if (r.kind === "search") $("searches").append(renderSearch(r));
  }
  if (!state.records.terminal.length) $("terminal").replaceChildren(el("p", { class: "muted", text: "No terminal output yet." }));
  else $("terminal").querySelector("p.muted")?.remove();
  if (!state.records.file.length) $("files").replaceChildren(el("p", { class: "muted", text: "No file modified yet." }));
  else $("files").querySelector("p.muted")?.remove();
  if (!state.records.search.length) $("searches").replaceChildren(el("p", { class: "muted", text: "No search yet." }));
  else $("searches").querySelector("p.muted")?.remove();
  if (grew && $("follow").checked && !$("tab-terminal").hidden) {
    const last = $("terminal").lastElementChild;
    if (last) last.scrollIntoView({ block: "end" });
  }
}

function recHead(r, text) {
  return el("div", { class: "rec-head", text: (r.step_index !== null && r.step_index !== undefined ? "step " + r.step_index + " · " : "") + fmtTime(r.created_at) + " · " + text });
}

// A record with data.stream (an id the agent chose) is a chunk of a running command's output:
// chunks of one stream append to one block, marked running until a chunk says done.
function appendTerminal(r) {
  const d = r.data || {};
  const session = d.session_id || "default";
  if (d.stream !== undefined && d.stream !== null) {
    const key = session + ":" + d.stream;
    let box = $("terminal").querySelector("div.terminal-entry[data-stream='" + CSS.escape(key) + "']");
    if (!box) {
      box = el("div", { class: "terminal-entry streaming", dataset: { stream: key } },
        recHead(r, "session " + session + (d.command ? " $ " + d.command : "") + " (live)"),
        el("pre", { class: "stream-out" }),
        el("span", { class: "tag tag-running", text: "running" }));
      $("terminal").append(box);
    }
    box.querySelector("pre.stream-out").append(document.createTextNode(String(d.output ?? d.chunk ?? "")));
    if (d.done) { box.classList.remove("streaming"); box.querySelector(".tag-running")?.remove(); }
    return;
  }
  const head = (d.tool && d.tool !== "run_command" ? d.tool + " " : "") + "session " + session;
  $("terminal").append(el("div", { class: "terminal-entry" }, recHead(r, head),
    collapsible(d.output ?? d.text ?? JSON.stringify(d), "", "", "rec:" + r.id)));
}

function renderFile(r) {
  const d = r.data || {};
  const box = el("pre", { class: "diff" });
  for (const line of String(d.diff || "").split("\n")) {
    if (!line) continue;
    const cls = line.startsWith("@@") ? "hunk" : line.startsWith("+") && !line.startsWith("+++") ? "add"
      : line.startsWith("-") && !line.startsWith("---") ? "del" : "ctx";
    box.append(el("span", { class: cls, text: line }));
  }
  const lines = d.lines ? " lines " + d.lines[0] + "-" + d.lines[1] : "";
  return el("div", { class: "file-entry" }, recHead(r, (d.op || "change") + " " + (d.path || r.ref) + lines + (d.exact === false ? " (partial diff)" : "")), box);
}

function renderSearch(r) {
  const d = r.data || {};
  const what = d.tool === "search_dir" ? "search " + JSON.stringify(d.query ?? "") + " in " + (d.path || ".") : (d.tool || "search") + " " + (d.path || "");
  return el("div", { class: "search-entry" }, recHead(r, what), collapsible(d.results ?? JSON.stringify(d), "obs", "", "rec:" + r.id));
}

// ---------------------------------------------------------------- drafts (one per rollout, kept in localStorage)
function draftKey(tid) { return "apollo.draft." + tid; }

function saveDraft() {
  if (!state.tid) return;
  const v = $("guidance-text").value;
  try { if (v) LS.setItem(draftKey(state.tid), v); else LS.removeItem(draftKey(state.tid)); } catch (e) { /* storage full or off */ }
}

function restoreDraft() {
  let v = "";
  try { v = state.tid ? LS.getItem(draftKey(state.tid)) || "" : ""; } catch (e) { v = ""; }
  $("guidance-text").value = v;
  $("draft-note").textContent = v ? "Draft restored." : "";
}

// ---------------------------------------------------------------- guidance
function updateGuidanceTarget() {
  const t = $("guidance-target");
  if (!state.tid) { t.textContent = "No rollout selected."; return; }
  const task = state.traj ? state.traj.task_id : "";
  const open = [...state.open];
  const viewing = open.length ? " · viewing step " + Math.max(...open) : "";
  const next = state.traj ? " · next step " + state.traj.step_count : "";
  t.textContent = "To: " + (task ? task + " · " : "") + state.tid + next + viewing;
}

function updateGuidanceForm() {
  const annot = state.me && state.me.role === "annotator";
  const ended = state.traj && state.traj.trajectory_id === state.tid && state.traj.status !== "running";
  const ok = annot && state.tid && !ended;
  $("guidance-text").disabled = !ok;
  $("send").disabled = !ok;
  if (annot && ended) $("guidance-note").textContent = "This rollout has ended: guidance can no longer be delivered.";
  else if (annot) $("guidance-note").textContent = "";
  updateGuidanceTarget();
}

async function loadGuidance() {
  const tid = state.tid;
  if (!tid) return;
  let rows;
  try { rows = await api("/api/trajectories/" + enc(tid) + "/guidance"); } catch (e) { return; }
  if (tid !== state.tid) return;
  const before = JSON.stringify(state.guidance.map((g) => [g.guidance_id, g.state, g.delivered_step]));
  state.guidance = rows;
  renderGuidance();
  if (before !== JSON.stringify(rows.map((g) => [g.guidance_id, g.state, g.delivered_step]))) renderSteps();
}

async function loadAllGuidance() {
  let rows;
  try { rows = await api("/api/guidance"); } catch (e) { return; }
  state.allGuidance = rows;
  renderAllGuidance();
}

function guidanceStatus(g) {
  const lat = g.delivered_at && g.created_at ? " after " + (g.delivered_at - g.created_at).toFixed(1) + " s" : "";
  if (g.state === "pending") {
    const parts = [];
    const wait = g.available_at - serverNow();
    if (wait >= 1) parts.push("due in " + fmtAge(wait));
    if (g.at_step !== null && g.at_step !== undefined) parts.push("at step " + g.at_step);
    return "pending" + (parts.length ? " (" + parts.join(", ") + ")" : "") + (g.attempts ? ", re-queued after an agent restart" : "");
  }
  if (g.state === "expired") return "expired: the rollout ended before it was delivered";
  if (g.state === "rejected") return "rejected: not written by an annotator (authentication failed)";
  const base = "delivered at step " + g.delivered_step + lat;
  return g.state === "acknowledged" ? base + ", in the trajectory" : base;
}

function guidanceItem(g, withTarget) {
  const li = el("li", { class: "g-item g-" + g.state, dataset: { guidanceId: g.guidance_id, state: g.state, step: g.delivered_step ?? "", tid: g.trajectory_id },
    tabindex: withTarget ? "0" : null },
    withTarget ? el("div", { class: "g-meta g-target", text: (g.task_id || "?") + " · " + g.trajectory_id }) : null,
    el("div", { class: "g-text", text: g.text }),
    el("div", { class: "g-meta" },
      el("span", { class: "g-state " + g.state, text: g.state }), " ",
      el("span", { class: "g-status", text: guidanceStatus(g) })),
    el("div", { class: "g-meta", text: "sent " + fmtTime(g.created_at) + " by " + g.author }));
  if (withTarget) {
    const go = () => { state.linkStep = g.delivered_step ?? null; if (state.linkStep !== null) $("follow").checked = false; if (g.trajectory_id !== state.tid) selectRollout(g.trajectory_id); else if (state.linkStep !== null) { const i = state.linkStep; state.linkStep = null; openStep(i, true); } };
    li.addEventListener("click", go);
    li.addEventListener("keydown", (ev) => { if (ev.key === "Enter") { ev.preventDefault(); go(); } });
  }
  return li;
}

function renderGuidance() {
  $("guidance-history").replaceChildren(...state.guidance.slice().reverse().map((g) => guidanceItem(g, false)));
}

function renderAllGuidance() {
  $("guidance-all").replaceChildren(...state.allGuidance.slice(0, 200).map((g) => guidanceItem(g, true)));
}

function newId() {
  if (window.crypto && crypto.randomUUID) return crypto.randomUUID().replace(/-/g, "");
  const a = new Uint8Array(16); crypto.getRandomValues(a);
  return Array.from(a, (b) => b.toString(16).padStart(2, "0")).join("");
}

function updateWhen() {
  const w = $("send-when").value;
  $("send-delay").hidden = w !== "delay";
  $("send-at-step").hidden = w !== "step";
  if (w === "step" && !$("send-at-step").value && state.traj) $("send-at-step").value = String(state.traj.step_count + 1);
}

async function sendGuidance(ev) {
  if (ev) ev.preventDefault();
  const text = $("guidance-text").value;
  if (!text.trim() || !state.tid || $("send").disabled) return;
  const tid = state.tid, body = { text, guidance_id: newId() };
  const w = $("send-when").value;
  if (w === "delay") body.delay_s = Math.max(0, Math.floor(Number($("send-delay").value) || 0));
  if (w === "step") body.at_step = Math.max(0, Math.floor(Number($("send-at-step").value) || 0));
  $("send").disabled = true;
  $("guidance-error").textContent = "";
  try {
    for (let attempt = 0; ; attempt++) {  // retried with the same id: the service accepts a message once
      try { await api("/api/trajectories/" + enc(tid) + "/guidance", { method: "POST", body }); break; }
      catch (e) {
        if (e instanceof HttpError && e.status < 500) throw e;
        if (attempt >= 20) throw e;
        $("guidance-error").textContent = "Service unreachable, retrying…";
        await new Promise((r) => setTimeout(r, Math.min(250 * 2 ** attempt, 3000)));
      }
    }
    if (tid === state.tid) $("guidance-text").value = "";
    try { LS.removeItem(draftKey(tid)); } catch (e) { /* ignore */ }
    $("draft-note").textContent = "";
    $("guidance-error").textContent = "";
    announce("Guidance sent to " + tid + ".");
    await Promise.all([loadGuidance(), loadAllGuidance()]);
  } catch (e) {
    $("guidance-error").textContent = "Not sent: " + e.message;
  } finally {
    updateGuidanceForm();
  }
}

// ---------------------------------------------------------------- tabs
const TABS = ["steps", "terminal", "files", "search"];

function showTab(name, focus) {
  for (const b of document.querySelectorAll(".tabs [role=tab]")) {
    const on = b.dataset.tab === name;
    b.classList.toggle("active", on);
    b.setAttribute("aria-selected", on ? "true" : "false");
    b.tabIndex = on ? 0 : -1;
    if (on && focus) b.focus();
  }
  for (const t of TABS) $("tab-" + t).hidden = t !== name;
}

function tabKeys(ev) {
  const cur = TABS.indexOf(ev.target.dataset.tab);
  let next = null;
  if (ev.key === "ArrowRight") next = TABS[(cur + 1) % TABS.length];
  else if (ev.key === "ArrowLeft") next = TABS[(cur + TABS.length - 1) % TABS.length];
  else if (ev.key === "Home") next = TABS[0];
  else if (ev.key === "End") next = TABS[TABS.length - 1];
  if (next) { ev.preventDefault(); showTab(next, true); }
}

// ---------------------------------------------------------------- keyboard
function isField(t) { return t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT" || t.isContentEditable); }

function moveFocus(delta) {
  const inSteps = document.activeElement && document.activeElement.closest && document.activeElement.closest("#steps");
  const list = inSteps ? [...$("steps").querySelectorAll("li.step")] : [...document.querySelectorAll("#rollout-table tbody tr")];
  if (!list.length) return;
  let i = list.indexOf(inSteps ? document.activeElement.closest("li.step") : document.activeElement.closest && document.activeElement.closest("tr"));
  if (i < 0) i = inSteps ? -1 : list.findIndex((tr) => tr.dataset.tid === state.tid);
  const next = list[Math.max(0, Math.min(list.length - 1, i + delta))];
  for (const x of list) x.tabIndex = x === next ? 0 : -1;
  next.focus();
  next.scrollIntoView({ block: "nearest" });
}

function onKey(ev) {
  if (!state.me || !$("login").hidden) return;
  const t = ev.target;
  if (ev.key === "Escape") {
    if (isField(t)) { if (t.id === "search" && t.value) { t.value = ""; renderSteps(); } t.blur(); ev.preventDefault(); return; }
    const li = t.closest && t.closest("#steps li.step");
    if (li && state.open.has(Number(li.dataset.step))) { toggleStep(Number(li.dataset.step)); ev.preventDefault(); return; }
    if (!$("help").hidden) { toggleHelp(false); return; }
    const sel = document.querySelector("#rollout-table tr.selected") || document.querySelector("#rollout-table tbody tr");
    if (sel) sel.focus();
    return;
  }
  if (isField(t) || ev.ctrlKey || ev.metaKey || ev.altKey) return;
  if (ev.key === "j" || ev.key === "ArrowDown" && t.closest && (t.closest("#rollout-table") || t.closest("#steps"))) { ev.preventDefault(); moveFocus(1); }
  else if (ev.key === "k" || ev.key === "ArrowUp" && t.closest && (t.closest("#rollout-table") || t.closest("#steps"))) { ev.preventDefault(); moveFocus(-1); }
  else if (ev.key === "/") { ev.preventDefault(); if (!$("traj").hidden) { showTab("steps"); $("search").focus(); } else $("filter").focus(); }
  else if (ev.key === "g") { if (!$("guidance-text").disabled) { ev.preventDefault(); $("guidance-text").focus(); } }
  else if (ev.key === "G") { ev.preventDefault(); jumpToLatest(); }
  else if (ev.key === "f") { $("follow").checked = !$("follow").checked; LS.setItem("apollo.follow", $("follow").checked ? "1" : "0"); announce("Follow " + ($("follow").checked ? "on" : "off")); }
  else if (ev.key === "?") toggleHelp();
}

function toggleHelp(on) {
  const h = $("help");
  h.hidden = on === undefined ? !h.hidden : !on;
  $("help-btn").setAttribute("aria-expanded", h.hidden ? "false" : "true");
}

// ---------------------------------------------------------------- wiring
function init() {
  $("login-form").addEventListener("submit", login);
  $("logout").addEventListener("click", logout);
  $("help-btn").addEventListener("click", () => toggleHelp());
  for (const id of ["show-all"]) $(id).addEventListener("change", loadRollouts);
  for (const id of ["filter", "badge-filter", "sort", "stall-s"]) {
    const saved = LS.getItem("apollo." + id);
    if (saved !== null && id !== "filter") $(id).value = saved;
    $(id).addEventListener(id === "filter" ? "input" : "change", () => { if (id !== "filter") LS.setItem("apollo." + id, $(id).value); renderRollouts(); });
  }
  const follow = LS.getItem("apollo.follow");
  if (follow !== null) $("follow").checked = follow === "1";
  $("follow").addEventListener("change", () => { LS.setItem("apollo.follow", $("follow").checked ? "1" : "0"); if ($("follow").checked) followLatest(); });
  $("jump-latest").addEventListener("click", jumpToLatest);
  $("search").addEventListener("input", throttle(renderSteps, 150));
  $("failed-only").addEventListener("change", renderSteps);
  $("guidance-form").addEventListener("submit", sendGuidance);
  $("guidance-text").addEventListener("input", throttle(saveDraft, 300));
  $("guidance-text").addEventListener("keydown", (ev) => { if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); saveDraft(); sendGuidance(); } });
  $("send-when").addEventListener("change", updateWhen);
  for (const b of document.querySelectorAll(".tabs [role=tab]")) {
    b.addEventListener("click", () => showTab(b.dataset.tab));
    b.addEventListener("keydown", tabKeys);
  }
  document.addEventListener("keydown", onKey);
  window.addEventListener("hashchange", () => { const { tid, step } = readLink(); if (tid && (tid !== state.tid || step !== null)) openFromLink(); });
  window.addEventListener("beforeunload", saveDraft);
  setInterval(tick, 1000);
  setInterval(() => { if (state.me) refreshRollouts(); }, 5000);
  api("/api/session", { noLogout: true }).then(start).catch(() => showLogin(""));
}

document.addEventListener("DOMContentLoaded", init);
