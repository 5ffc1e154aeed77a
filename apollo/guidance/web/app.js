// Apollo annotator UI: plain JS, no build step.
// Safety: everything that comes from agents, environments or annotators is rendered with
// textContent / createTextNode, never as HTML (no innerHTML anywhere in this file).
"use strict";

const $ = (id) => document.getElementById(id);

const state = {
  me: null,
  tid: null,
  traj: null,
  steps: [],            // loaded steps of the selected trajectory (full)
  open: new Set(),      // expanded step indexes
  ctx: new Map(),       // step index -> loaded context (kept across re-renders)
  records: { terminal: [], file: [], search: [] },
  lastRecordId: 0,
  guidance: [],
  rollouts: [],
  clockSkew: 0,         // server time - browser time (s)
  es: null,
  loadingSteps: false,
  stepsAgain: false,
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

function fmtTime(t) {
  if (!t) return "";
  return new Date(t * 1000).toLocaleTimeString();
}

function fmtDuration(s) {
  s = Math.max(0, Math.floor(s));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  return (h ? h + ":" + String(m).padStart(2, "0") : String(m)) + ":" + String(sec).padStart(2, "0");
}

function enc(s) { return encodeURIComponent(s); }

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
  const canWrite = me.role === "annotator";
  $("guidance-note").textContent = canWrite ? "" : "Viewer tokens cannot send guidance.";
  updateGuidanceForm();
  loadRollouts();
  connectEvents();
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

const refreshRollouts = throttle(() => loadRollouts(), 700);
const refreshGuidance = throttle(() => loadGuidance(), 250);
const refreshRecords = throttle(() => loadRecords(), 400);

function connectEvents() {
  if (state.es) state.es.close();
  const es = new EventSource("/api/events");
  state.es = es;
  let first = true;
  es.addEventListener("hello", () => {
    setLive(true);
    if (!first) {  // reconnected (e.g. the service restarted): catch up on everything
      loadRollouts();
      if (state.tid) selectRollout(state.tid, true);
    }
    first = false;
  });
  es.onerror = () => {
    setLive(false, "reconnecting…");
    // a 401 closes the stream for good: check the session
    if (es.readyState === EventSource.CLOSED) api("/api/session").then(() => setTimeout(connectEvents, 2000)).catch(() => {});
  };
  const onEvent = (ev) => {
    let d = {};
    try { d = JSON.parse(ev.data); } catch (e) { return; }
    refreshRollouts();
    if (!state.tid || d.trajectory_id !== state.tid) return;
    if (ev.type === "step") { loadSteps(); refreshRecords(); refreshGuidance(); }
    else if (ev.type === "guidance") refreshGuidance();
    else if (ev.type === "record") refreshRecords();
    else if (ev.type === "trajectory") loadTrajectoryHeader();
  };
  for (const kind of ["step", "guidance", "record", "trajectory"]) es.addEventListener(kind, onEvent);
}

// ---------------------------------------------------------------- rollouts list
async function loadRollouts() {
  const status = $("show-all").checked ? "all" : "running";
  let rows;
  try { rows = await api("/api/trajectories?status=" + status); } catch (e) { return; }
  const now = Date.now() / 1000;
  if (rows.length) state.clockSkew = rows[0].server_time - now;
  state.rollouts = rows;
  const tbody = document.querySelector("#rollout-table tbody");
  tbody.replaceChildren(...rows.map((t) => {
    const steps = t.max_steps ? t.step_count + "/" + t.max_steps : String(t.step_count);
    const score = t.latest_score === null || t.latest_score === undefined ? "–" : Number(t.latest_score).toFixed(1);
    const tr = el("tr", {
      class: (t.trajectory_id === state.tid ? "selected " : "") + (t.status !== "running" ? "ended" : ""),
      dataset: { tid: t.trajectory_id, started: t.started_at, ended: t.ended_at || "" },
      onclick: () => selectRollout(t.trajectory_id),
    },
    el("td", {}, el("span", { class: "task", text: t.task_id }), el("span", { class: "tid", text: t.trajectory_id })),
    el("td", { class: "steps", text: steps }),
    el("td", { class: "elapsed", text: fmtDuration(t.elapsed_s) }),
    el("td", { class: "score", text: score }),
    el("td", { class: "pending", text: t.pending_guidance || "" }));
    return tr;
  }));
  $("no-rollouts").hidden = rows.length > 0;
}

function tickElapsed() {
  const now = Date.now() / 1000 + state.clockSkew;
  for (const tr of document.querySelectorAll("#rollout-table tbody tr")) {
    if (tr.dataset.ended) continue;
    tr.querySelector(".elapsed").textContent = fmtDuration(now - Number(tr.dataset.started));
  }
  if (state.traj && !state.traj.ended_at) renderTrajMeta();
}

// ---------------------------------------------------------------- one trajectory
async function selectRollout(tid, keepView) {
  const changed = tid !== state.tid;
  state.tid = tid;
  if (changed) {
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
  }
  for (const tr of document.querySelectorAll("#rollout-table tbody tr")) tr.classList.toggle("selected", tr.dataset.tid === tid);
  $("empty").hidden = true;
  $("traj").hidden = false;
  updateGuidanceForm();
  await Promise.all([loadTrajectoryHeader(), loadSteps(true), loadRecords(), loadGuidance()]);
}

async function loadTrajectoryHeader() {
  const tid = state.tid;
  let t;
  try { t = await api("/api/trajectories/" + enc(tid)); } catch (e) { return; }
  if (tid !== state.tid) return;
  state.traj = t;
  state.clockSkew = t.server_time - Date.now() / 1000;
  $("traj-title").textContent = t.task_id;
  $("task-text").textContent = t.task_text || "(the agent did not report the task text)";
  renderTrajMeta();
  updateGuidanceForm();
}

function renderTrajMeta() {
  const t = state.traj;
  if (!t) return;
  const end = t.ended_at || (Date.now() / 1000 + state.clockSkew);
  const parts = [t.trajectory_id, t.status, "step " + t.step_count + (t.meta && t.meta.max_steps ? "/" + t.meta.max_steps : ""),
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
      for (const s of rows) state.steps[s.step_index] = s;
      // a rollout posts steps in order, but a gap can appear (service restart): fill placeholders
      for (let i = 0; i < state.steps.length; i++) if (!state.steps[i]) state.steps[i] = null;
      renderSteps();
      loadTrajectoryHeader();
    } while (state.stepsAgain && tid === state.tid);
  } finally {
    state.loadingSteps = false;
  }
}

function stepText(s) {
  return [s.tool || "", JSON.stringify(s.arguments || {}), s.assistant_text || "", s.observation || ""].join("\n").toLowerCase();
}

function guidanceAt(i) {
  return state.guidance.filter((g) => g.status === "delivered" && g.delivered_step === i);
}

function renderSteps() {
  const q = $("search").value.trim();
  const ql = q.toLowerCase();
  const list = $("steps");
  const items = [];
  let shown = 0, total = 0;
  for (let i = 0; i < state.steps.length; i++) {
    const s = state.steps[i];
    if (!s) continue;
    total++;
    const match = !ql || stepText(s).includes(ql) || guidanceAt(i).some((g) => g.text.toLowerCase().includes(ql));
    if (!match) continue;
    shown++;
    items.push(renderStep(s, q));
  }
  list.replaceChildren(...items);
  $("search-count").textContent = q ? (shown + " of " + total + " steps match") : (total + " steps");
}

function renderStep(s, q) {
  const i = s.step_index;
  const g = guidanceAt(i);
  const args = JSON.stringify(s.arguments || {});
  const head = el("div", { class: "step-head", onclick: () => toggleStep(i) },
    el("span", { class: "step-index", text: "#" + i }),
    el("span", { class: "step-tool", text: s.tool || "(invalid action)" }),
    el("span", { class: "step-preview" }, highlighted(args.length > 140 ? args.slice(0, 140) + "…" : args, q)),
    g.length ? el("span", { class: "g-state delivered", text: "guidance ×" + g.length }) : null);
  const li = el("li", { class: "step" + (g.length ? " guided" : ""), dataset: { step: i } }, head);
  if (state.open.has(i)) li.append(renderStepBody(s, q, g));
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
    pre(s.assistant_text || "(not reported by the agent)", "model-text", q),
    el("h4", { text: "Action" }),
    pre((s.tool || "(invalid action)") + " " + JSON.stringify(s.arguments || {}, null, 2), "action", q));
  const o = d.observation || {};
  const flags = [];
  if (o.exit_code !== undefined && o.exit_code !== null) flags.push("exit " + o.exit_code);
  if (o.error) flags.push("error"); if (o.truncated) flags.push("truncated"); if (o.refused) flags.push("refused");
  body.append(el("h4", { text: "Observation" + (flags.length ? " (" + flags.join(", ") + ")" : "") }),
    pre(s.observation, "obs observation", q));
  const timing = [];
  if (d.prompt_tokens) timing.push(d.prompt_tokens + " prompt tokens");
  if (d.gen_time_s) timing.push("generation " + Number(d.gen_time_s).toFixed(2) + " s");
  if (d.wall_time_s) timing.push("step " + Number(d.wall_time_s).toFixed(2) + " s");
  if (timing.length) body.append(el("p", { class: "muted small", text: timing.join(" · ") }));
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
  if (state.open.has(i)) state.open.delete(i); else state.open.add(i);
  renderSteps();
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
  for (const m of c.messages) {
    const content = typeof m.content === "string" ? m.content : JSON.stringify(m.content);
    const isGuidance = m.role === "user" && content.startsWith("<real_user>");
    nodes.push(el("div", { class: "ctx-msg" + (isGuidance ? " user-guidance" : "") },
      el("div", { class: "ctx-role", text: m.role + (isGuidance ? " · human guidance" : "") }), pre(content, "", q)));
  }
  box.replaceChildren(...nodes);
}

// ---------------------------------------------------------------- records: terminal, files, search
async function loadRecords() {
  const tid = state.tid;
  if (!tid) return;
  let rows;
  try { rows = await api("/api/trajectories/" + enc(tid) + "/records?since_id=" + state.lastRecordId); } catch (e) { return; }
  if (tid !== state.tid) return;
  for (const r of rows) {
    state.lastRecordId = Math.max(state.lastRecordId, r.id);
    if (state.records[r.kind]) state.records[r.kind].push(r);
    if (r.kind === "terminal") $("terminal").append(renderTerminal(r));
    else if (r.kind === "file") $("files").append(renderFile(r));
    else if (r.kind === "search") $("searches").append(renderSearch(r));
  }
  if (!state.records.terminal.length) $("terminal").replaceChildren(el("p", { class: "muted", text: "No terminal output yet." }));
  else $("terminal").querySelector("p.muted")?.remove();
  if (!state.records.file.length) $("files").replaceChildren(el("p", { class: "muted", text: "No file modified yet." }));
  else $("files").querySelector("p.muted")?.remove();
  if (!state.records.search.length) $("searches").replaceChildren(el("p", { class: "muted", text: "No search yet." }));
  else $("searches").querySelector("p.muted")?.remove();
}

function recHead(r, text) {
  return el("div", { class: "rec-head", text: (r.step_index !== null ? "step " + r.step_index + " · " : "") + fmtTime(r.created_at) + " · " + text });
}

function renderTerminal(r) {
  const d = r.data || {};
  const head = (d.tool && d.tool !== "run_command" ? d.tool + " " : "") + "session " + (d.session_id || "default");
  return el("div", { class: "terminal-entry" }, recHead(r, head), pre(d.output ?? d.text ?? JSON.stringify(d), ""));
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
  return el("div", { class: "search-entry" }, recHead(r, what), pre(d.results ?? JSON.stringify(d), "obs"));
}

// ---------------------------------------------------------------- guidance
function updateGuidanceForm() {
  const ok = state.me && state.me.role === "annotator" && state.tid && (!state.traj || state.traj.status === "running" || state.traj.trajectory_id !== state.tid);
  $("guidance-text").disabled = !ok;
  $("send").disabled = !ok;
  if (state.me && state.me.role === "annotator" && state.traj && state.traj.trajectory_id === state.tid && state.traj.status !== "running")
    $("guidance-note").textContent = "This rollout has ended: guidance can no longer be delivered.";
  else if (state.me && state.me.role === "annotator") $("guidance-note").textContent = "";
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

function guidanceStatus(g) {
  if (g.state === "pending") return g.attempts ? "pending (re-queued after an agent restart)" : "pending";
  const lat = g.delivered_at && g.created_at ? " (+" + (g.delivered_at - g.created_at).toFixed(1) + " s)" : "";
  const base = "delivered at step " + g.delivered_step + ", " + fmtTime(g.delivered_at) + lat;
  return g.state === "acknowledged" ? base + ", in the trajectory" : base;
}

function renderGuidance() {
  const items = state.guidance.slice().reverse().map((g) => el("li", {
    class: "g-item", dataset: { guidanceId: g.guidance_id, state: g.state, step: g.delivered_step ?? "" } },
    el("div", { class: "g-text", text: g.text }),
    el("div", { class: "g-meta" },
      el("span", { class: "g-state " + g.state, text: g.state }), " ",
      el("span", { class: "g-status", text: guidanceStatus(g) })),
    el("div", { class: "g-meta", text: "sent " + fmtTime(g.created_at) + " by " + g.author })));
  $("guidance-history").replaceChildren(...items);
}

function newId() {
  if (window.crypto && crypto.randomUUID) return crypto.randomUUID().replace(/-/g, "");
  const a = new Uint8Array(16); crypto.getRandomValues(a);
  return Array.from(a, (b) => b.toString(16).padStart(2, "0")).join("");
}

async function sendGuidance(ev) {
  ev.preventDefault();
  const text = $("guidance-text").value;
  if (!text.trim() || !state.tid) return;
  const tid = state.tid, body = { text, guidance_id: newId() };
  $("send").disabled = true;
  $("guidance-error").textContent = "";
  try {
    // retried with the same id: the service accepts a message once
    for (let attempt = 0; ; attempt++) {
      try { await api("/api/trajectories/" + enc(tid) + "/guidance", { method: "POST", body }); break; }
      catch (e) {
        if (e instanceof HttpError && e.status < 500) throw e;
        if (attempt >= 20) throw e;
        $("guidance-error").textContent = "Service unreachable, retrying…";
        await new Promise((r) => setTimeout(r, Math.min(250 * 2 ** attempt, 3000)));
      }
    }
    $("guidance-text").value = "";
    $("guidance-error").textContent = "";
    await loadGuidance();
  } catch (e) {
    $("guidance-error").textContent = "Not sent: " + e.message;
  } finally {
    updateGuidanceForm();
  }
}

// ---------------------------------------------------------------- tabs, wiring
function showTab(name) {
  for (const b of document.querySelectorAll(".tabs button")) b.classList.toggle("active", b.dataset.tab === name);
  for (const t of ["steps", "terminal", "files", "search"]) $("tab-" + t).hidden = t !== name;
}

function init() {
  $("login-form").addEventListener("submit", login);
  $("logout").addEventListener("click", logout);
  $("show-all").addEventListener("change", loadRollouts);
  $("search").addEventListener("input", throttle(renderSteps, 150));
  $("guidance-form").addEventListener("submit", sendGuidance);
  for (const b of document.querySelectorAll(".tabs button")) b.addEventListener("click", () => showTab(b.dataset.tab));
  setInterval(tickElapsed, 1000);
  setInterval(() => { if (state.me) refreshRollouts(); }, 5000);
  api("/api/session", { noLogout: true }).then(start).catch(() => showLogin(""));
}

document.addEventListener("DOMContentLoaded", init);
