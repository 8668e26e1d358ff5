// The demo page of seed 000: random writers at 1, 2 or 20 writes per second, Clear (every
// client), Offline/Reconnect, stop-all, the offline and holdback queues, the revision picture
// (each write a box: bottom colour = the revision it was based on, top colour = the revision it
// made; conflicts red, resolutions blue) and the event log. `window.gossamer` exposes the
// client for scripts and tests.

import { BrowserReplica, FibonacciBackoff, LinkState, chooseId } from "./client.js";

const OBJECTS = Array.from({ length: 20 }, (_, n) => `obj-${String(n).padStart(2, "0")}`);
const RENDER_EVERY_MS = 60;

const $ = (id) => document.getElementById(id);
const escapeHtml = (text) => String(text).replace(/[&<>"']/g, (c) => (
  { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));

function colour(revision) {
  if (revision === null || revision === undefined) return "#ffffff";
  if (/^[0-9a-f]{6}/i.test(revision)) return `#${revision.slice(0, 6)}`;
  let h = 0;
  for (const c of revision) h = (h * 31 + c.codePointAt(0)) >>> 0;
  return `#${(h & 0xffffff).toString(16).padStart(6, "0")}`;
}

const params = new URLSearchParams(location.search);
const [id, idProblem] = chooseId();
const unit = Number(params.get("backoff")) > 0 ? Number(params.get("backoff")) : 1;

let writer = null; // the interval of the random writer
let speed = 1;
let written = 0;
let renderTimer = null;

const client = new BrowserReplica({
  id,
  backoff: new FibonacciBackoff(unit, 30),
  onUpdate: () => scheduleRender(),
  onStopAll: () => stopWriting(),
});

function writeRandom() {
  const key = OBJECTS[Math.floor(Math.random() * OBJECTS.length)];
  try {
    client.set(key, { by: id, n: Math.floor(Math.random() * 1_000_000) });
    written++;
  } catch (exc) {
    client.note(`write to ${key} failed: ${exc.message}`, "error");
    stopWriting();
  }
}

function startWriting(perSecond = speed) {
  speed = [1, 2, 20].includes(Number(perSecond)) ? Number(perSecond) : 1;
  clearInterval(writer);
  writer = setInterval(writeRandom, 1000 / speed);
  for (const input of document.querySelectorAll('input[name="speed"]')) {
    input.checked = Number(input.value) === speed;
  }
  scheduleRender();
}

function stopWriting() {
  clearInterval(writer);
  writer = null;
  scheduleRender();
}

function tryOnline(what, action) {
  try {
    action();
  } catch (exc) {
    client.note(`${what}: ${exc.message}`, "error");
  }
}

// -- the controls ---------------------------------------------------------------------------

$("start").addEventListener("click", () => (writer === null ? startWriting() : stopWriting()));
for (const input of document.querySelectorAll('input[name="speed"]')) {
  input.addEventListener("change", () => {
    speed = Number(input.value);
    if (writer !== null) startWriting(speed);
  });
}
$("clear").addEventListener("click", () => tryOnline("clear", () => client.clearAll()));
$("offline").addEventListener("click", () => (
  client.wantOnline ? client.goOffline() : client.reconnect()));
$("toggle-log").addEventListener("click", () => {
  const box = $("log-box");
  box.hidden = !box.hidden;
  $("toggle-log").textContent = box.hidden ? "Show log" : "Hide log";
});
$("stop-all").addEventListener("click", () => {
  stopWriting();
  if (client.link === LinkState.ONLINE) client.stopAll();
  else client.note("stop-all needs the hub: only this client stopped", "error");
});

// -- rendering ------------------------------------------------------------------------------

function scheduleRender() {
  if (renderTimer === null) renderTimer = setTimeout(render, RENDER_EVERY_MS);
}

function renderObjects() {
  const replica = client.replica;
  const keys = [...new Set([...OBJECTS, ...[...client.boxes.keys()].sort(),
    ...Object.keys(replica.items())])];
  const rows = keys.map((key) => {
    const boxes = (client.boxes.get(key) ?? []).map((b) => {
      const cls = `rev${b.state === "applied" ? "" : ` ${b.state}`}${b.deleted ? " deleted" : ""}`;
      const title = `${b.writer}:${b.seq} ${b.old ?? "(new)"} \u2192 ${b.rev}${b.deleted ? " (delete)" : ""}`;
      return `<span class="${cls}" data-writer="${escapeHtml(b.writer)}" data-seq="${b.seq}" `
        + `title="${escapeHtml(title)}" style="background:linear-gradient(to top, ${colour(b.old)}, `
        + `${colour(b.rev)})"></span>`;
    }).join("");
    const value = client.get(key);
    return `<div class="object" data-key="${escapeHtml(key)}"><span class="key">${escapeHtml(key)}</span>`
      + `<span class="revs">${boxes}</span>`
      + `<span class="value">${value === null ? "" : escapeHtml(JSON.stringify(value))}</span></div>`;
  });
  $("objects").innerHTML = rows.join("");
}

function render() {
  renderTimer = null;
  const replica = client.replica;
  $("client-id").textContent = id;
  const link = $("link");
  link.textContent = replica.link;
  link.dataset.link = replica.link;
  $("offline").textContent = client.wantOnline ? "Offline" : "Reconnect";
  $("start").textContent = writer === null ? "Start" : "Stop";
  $("speeds").hidden = writer === null;
  const queue = replica.offlineQueue;
  $("offline-count").textContent = queue.length;
  $("offline-queue").innerHTML = queue.map(([key, content, deleted]) => (
    `<li>${escapeHtml(key)}: ${deleted ? "(delete)" : escapeHtml(JSON.stringify(content))}</li>`)).join("");
  const held = replica.causal.held();
  $("holdback-count").textContent = held.length;
  $("holdback-queue").innerHTML = held.map((h) => (
    `<li>${escapeHtml(h.id)}:${h.seq} ${escapeHtml(h.key)}</li>`)).join("");
  renderObjects();
  $("vector").textContent = `vector ${JSON.stringify(replica.vector)}`;
  const log = $("log");
  log.innerHTML = client.log.map((line) => (
    `<li class="log-${line.kind}"><span class="time">${line.time}</span>${escapeHtml(line.text)}</li>`))
    .reverse().join("");
}

// -- the scripting face ---------------------------------------------------------------------

window.gossamer = {
  id,
  client,
  objects: OBJECTS,
  get link() { return client.link; },
  get synced() { return client.synced; },
  get refused() { return client.refused; }, // {code, reason} of the hub's last refusal, or null
  get writing() { return writer !== null; },
  get speed() { return speed; },
  get written() { return written; },
  get conflicts() { return client.conflicts.slice(); },
  get resolutions() { return client.resolutions.slice(); },
  get connects() { return client.connects; },
  get: (key) => client.get(key),
  set: (key, value) => client.set(key, value),
  delete: (key) => client.delete(key),
  items: () => client.items(),
  revision: (key) => client.replica.revision(key),
  revisions: () => client.replica.revisions(),
  history: (key) => client.replica.history(key),
  vector: () => client.replica.vector,
  offlineQueue: () => client.replica.offlineQueue,
  holdback: () => client.replica.causal.held(),
  rebaseQueue: () => client.replica.rebaseQueue,
  caughtUp: () => client.replica.causal.caughtUp,
  events: () => client.log.map((line) => line.text),
  offline: () => client.goOffline(),
  reconnect: () => client.reconnect(),
  start: (perSecond) => startWriting(perSecond),
  stop: () => stopWriting(),
  clear: () => client.clearAll(),
  stopAll: () => client.stopAll(),
  render: () => render(),
  debug: { holdIncoming: (on) => client.holdIncoming(on) },
};

if (idProblem) client.note(`${idProblem}; using ${id}`, "error");
client.start();
render();
