// The APSYN demo page: a shared 6x6 board (G object "board"), a player object per tab (C, RO)
// and a private note per tab (C, NA), with the rounds and each request's code. Open it in
// several tabs: ?session=NAME (default "demo"), ?key=KEY when the server has a session key.
// `window.apsyn` is the ApsynClient (tests read `apsyn.state()`).

import { ApsynClient, describe, hex4, kindOf } from "./apsyn.js";

const SIZE = 6;
const SHOWN_REQUESTS = 40;
const SHOWN_SYNCS = 12;
const RENDER_EVERY_MS = 50;

const params = new URLSearchParams(location.search);
const session = params.get("session") || "demo";
const idKey = `apsyn:${session}:id`;
const wsUrl = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/`;
const client = new ApsynClient(wsUrl, session, {
  key: params.get("key"), reconnectDelay: Number(params.get("reconnect")) || 0.5,
  eager: params.get("eager") === "1", quiet: params.get("quiet") === "1" });
client.clientId = sessionStorage.getItem(idKey) || ""; // a reload asks for its id back
window.apsyn = client;

const $ = (id) => document.getElementById(id);
const syncs = []; // {round, acks, updates}

function hue(clientId) {
  return (parseInt(clientId || "0", 16) * 137) % 360;
}

function colour(clientId) {
  return `hsl(${hue(clientId)} 65% 45%)`;
}

const cells = new Map();
for (let y = 0; y < SIZE; y += 1) {
  for (let x = 0; x < SIZE; x += 1) {
    const name = `r${y}c${x}`;
    const cell = document.createElement("button");
    cell.type = "button";
    cell.dataset.cell = name;
    cell.addEventListener("click", () => claim(name));
    $("board").append(cell);
    cells.set(name, cell);
  }
}

function claim(cell) {
  if (!client.clientId) return;
  client.set("board", cell, client.clientId);
  const me = client.value(`C/${client.clientId}/player`);
  if (me) client.set("player", "clicks", (me.clicks || 0) + 1, { scope: "C" });
}

$("clear").addEventListener("click", () => {
  const board = client.value("G//board") || {};
  client.update("board", Object.fromEntries(Object.keys(board).map((k) => [k, null])));
});

$("note-form").addEventListener("submit", (event) => {
  event.preventDefault();
  client.set("note", "text", $("note").value, { scope: "C" });
});

client.on("phase", (phase) => {
  if (phase !== "syncing") return;
  sessionStorage.setItem(idKey, client.clientId);
  // what this tab needs, created once: a create that meets an existing object gets 45
  if (client.value("G//board") === undefined) client.create("board", {});
  if (client.value(`C/${client.clientId}/player`) === undefined) {
    client.create("player", { clicks: 0 }, { scope: "C", mode: "RO" });
  }
  if (client.value(`C/${client.clientId}/note`) === undefined) {
    client.create("note", { text: "" }, { scope: "C", mode: "NA" });
  }
});

client.on("round", (round, msg) => {
  syncs.unshift({ round, acks: msg.acks, updates: msg.actions.length });
  if (syncs.length > SHOWN_SYNCS) syncs.length = SHOWN_SYNCS;
});

let scheduled = null;
function schedule() {
  if (scheduled === null) scheduled = setTimeout(render, RENDER_EVERY_MS);
}
for (const event of ["change", "round", "result", "phase", "log"]) client.on(event, schedule);

function render() {
  scheduled = null;
  const state = client.state();
  $("session").textContent = session;
  $("client-id").textContent = state.clientId || "----";
  $("client-id").style.background = colour(state.clientId);
  $("phase").textContent = state.phase;
  $("phase").dataset.phase = state.phase;
  $("round").textContent = hex4(state.round);
  $("rounds").textContent = state.rounds;
  if (state.config) {
    $("timing").textContent = `rounds of ${state.config.min}-${state.config.max} ms, `
      + `a silent peer dropped after ${state.config.tout}`;
  }
  $("refused").hidden = !state.refused;
  if (state.refused) $("refused").textContent = `join refused: ${state.refused.code} ${state.refused.reason}`;

  const board = state.objects["G//board"] || {};
  for (const [name, cell] of cells) {
    const owner = typeof board[name] === "string" ? board[name] : "";
    cell.textContent = owner;
    cell.style.background = owner ? colour(owner) : "";
    cell.style.color = owner ? "#fff" : "";
  }

  const players = Object.entries(state.objects).filter(([key]) => /^C\/[0-9A-F]{4}\/player$/.test(key));
  $("players").replaceChildren(...players.map(([key, value]) => {
    const id = key.split("/")[1];
    const li = document.createElement("li");
    li.dataset.player = id;
    li.innerHTML = `<code class="me"></code> <span></span>`;
    li.firstChild.textContent = id;
    li.firstChild.style.background = colour(id);
    const clicks = value.clicks ?? 0;
    li.lastChild.textContent = `${clicks} click${clicks === 1 ? "" : "s"}${id === state.clientId ? " (you)" : ""}`;
    return li;
  }));
  const note = state.objects[`C/${state.clientId}/note`];
  $("note-now").textContent = note ? `saved: "${note.text}"` : "";

  $("requests").replaceChildren(...state.results.slice(-SHOWN_REQUESTS).reverse().map((entry) => {
    const li = document.createElement("li");
    li.className = kindOf(entry.code === undefined ? null : entry.code);
    if (entry.code !== undefined) li.dataset.code = entry.code === null ? "unknown" : entry.code;
    li.dataset.number = entry.number;
    const when = entry.round === null ? "queued" : `round ${hex4(entry.round)}`;
    const answer = entry.code === undefined ? "waiting" : describe(entry.code);
    li.innerHTML = "<span></span> <span class=\"code\"></span>";
    li.firstChild.textContent = `#${entry.number} ${when} ${entry.what} →`;
    li.lastChild.textContent = answer;
    return li;
  }));
  $("syncs").replaceChildren(...syncs.map((s) => {
    const li = document.createElement("li");
    li.textContent = `round ${hex4(s.round)}: ${s.updates} updates, acks [${s.acks.join(",")}]`;
    return li;
  }));
  $("objects").textContent = JSON.stringify(state.objects, null, 1);
}

render();
client.connect();
