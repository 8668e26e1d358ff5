// The browser client: a ReplicaClient (objects.js over causal.js) on one WebSocket to the
// hub's /ws, its state in localStorage so a reload resumes, the seed's Fibonacci reconnect
// backoff (none after a deliberate Offline), and the event log and revision picture the demo
// page shows.

import { LinkState, ReplicaClient, StateError } from "./objects.js";
import { LocalStore } from "./store.js";
import { HUB_ID, ProtocolError, decode, encode, isId, subscribe } from "./wire.js";

const ID_KEY = "gossamer:id";
const ID_IN_USE = 4001; // the one refusal that may pass: the id's other connection may go away
const BOXES_PER_OBJECT = 120; // revision boxes kept per object in the picture
const LOG_LINES = 500;

/** The seed's reconnect delays: unit * 1, 1, 2, 3, 5, 8, ... capped. */
export class FibonacciBackoff {
  constructor(unit = 1, cap = 30) {
    this.unit = unit;
    this.cap = cap;
    this.reset();
  }

  reset() {
    this.previous = 0;
    this.current = 1;
  }

  nextDelay() {
    const delay = Math.min(this.cap, this.unit * this.current);
    if (delay < this.cap) [this.previous, this.current] = [this.current, this.previous + this.current];
    return delay;
  }
}

function randomId() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * The client id: `?id=NAME` if given (and valid), else the one stored in this browser, else
 * a new random one (stored). Returns [id, problem or null].
 */
export function chooseId(search = location.search, storage = localStorage) {
  const asked = new URLSearchParams(search).get("id");
  if (asked !== null) {
    if (isId(asked) && asked !== HUB_ID) return [asked, null];
    const problem = `?id=${asked} is not a client id (1-128 of letters, digits, _ . : -; not "hub")`;
    return [storedId(storage), problem];
  }
  return [storedId(storage), null];
}

function storedId(storage) {
  let id = storage.getItem(ID_KEY);
  if (!isId(id) || id === HUB_ID) {
    id = randomId();
    storage.setItem(ID_KEY, id);
  }
  return id;
}

export function defaultUrl() {
  return `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`;
}

export class BrowserReplica {
  constructor({ id, url = defaultUrl(), storage = localStorage, backoff = new FibonacciBackoff(),
    onUpdate = () => {}, onStopAll = () => {} } = {}) {
    this.id = id;
    this.url = url;
    this.backoff = backoff;
    this.onUpdate = onUpdate;
    this.onStopAll = onStopAll;
    this.log = []; // [{time, text, kind}]
    this.boxes = new Map(); // key -> [{writer, seq, old, rev, deleted, state}]
    this.conflicts = []; // [{key, loser, winner, arrived}]
    this.resolutions = []; // [{key, original, seq}]
    this.connects = 0;
    this.ws = null;
    this.holding = false; // test hook: incoming frames wait (a slow network)
    this.heldFrames = [];
    this._reconnectTimer = null;
    this._waiting = false;
    this.store = new LocalStore(id, storage, (exc) => this.note(`storage full: ${exc.message}`, "error"));
    this.wantOnline = this.store.get("client", "offline") !== true;
    // the token the hub issued at this id's first join: presented at every join (in the
    // first subscribe of each connection) to prove the id
    this.token = this.store.get("client", "token") ?? null;
    this.refused = null; // the hub's last refusal {code, reason}, until a join succeeds
    this._joinPending = false;
    this.replica = new ReplicaClient({
      me: id, store: this.store, send: (msg) => this._send(msg),
      trace: (event, fields) => this._trace(event, fields),
      onChange: () => this._update(),
      onClear: (by) => this._cleared(by),
      onStop: (by) => this.onStopAll(by),
      onLink: () => this._update(),
    });
  }

  start() {
    if (this.wantOnline) this._connect();
    else this.note("offline (as left before the reload): press Reconnect", "link");
    this._update();
  }

  // -- reading and writing --------------------------------------------------------------------

  get link() {
    return this.replica.link;
  }

  get synced() {
    if (this.refused) return false;
    const r = this.replica;
    return r.link === LinkState.ONLINE && !r.offlineQueue.length && r.causal.caughtUp
      && !r.rebaseQueue.length;
  }

  get(key) {
    return this.replica.get(key);
  }

  set(key, value) {
    return this.replica.set(key, value);
  }

  delete(key) {
    return this.replica.delete(key);
  }

  items() {
    return this.replica.items();
  }

  clearAll() {
    this.replica.clearAll();
  }

  stopAll() {
    this.replica.stopAll();
  }

  // -- the connection -------------------------------------------------------------------------

  goOffline() {
    this.wantOnline = false;
    this.store.put("client", "offline", true);
    this.store.commit();
    clearTimeout(this._reconnectTimer);
    this._reconnectTimer = null;
    const ws = this.ws;
    this.ws = null;
    if (ws) ws.close(1000, "offline");
    this.replica.disconnected("offline");
    this.heldFrames = [];
    this.note("offline: writes wait in the offline queue", "link");
    this._update();
  }

  reconnect() {
    this.refused = null;
    this.wantOnline = true;
    this.store.put("client", "offline", false);
    this.store.commit();
    this.backoff.reset();
    clearTimeout(this._reconnectTimer);
    this._reconnectTimer = null;
    this._connect();
    this._update();
  }

  _connect() {
    if (!this.wantOnline || this.ws) return;
    let ws;
    try {
      ws = new WebSocket(this.url);
    } catch (exc) {
      this.note(`cannot open ${this.url}: ${exc.message}`, "error");
      this._scheduleReconnect();
      return;
    }
    this.ws = ws;
    ws.onopen = () => {
      if (this.ws !== ws) return;
      this.connects++;
      this._joinPending = true; // the replica's first message, its subscribe, joins
      this.note("connected: synchronizing with the network...", "link");
      this.replica.connected();
      this._update();
    };
    ws.onmessage = (event) => {
      if (this.ws !== ws) return;
      if (this.holding) this.heldFrames.push(event.data);
      else this._receive(event.data);
    };
    ws.onclose = () => {
      if (this.ws !== ws) return;
      this.ws = null;
      this.heldFrames = [];
      this.replica.disconnected("disconnected");
      this._scheduleReconnect();
      this._update();
    };
  }

  _scheduleReconnect() {
    if (!this.wantOnline || this._reconnectTimer !== null) return;
    const delay = this.backoff.nextDelay();
    this.note(`reconnecting in ${delay} seconds...`, "link");
    this._reconnectTimer = setTimeout(() => {
      this._reconnectTimer = null;
      this._connect();
    }, delay * 1000);
  }

  _send(msg) {
    const ws = this.ws;
    if (ws && ws.readyState === WebSocket.OPEN) {
      if (this._joinPending && msg.subscribe === true) {
        this._joinPending = false;
        if (this.token !== null) msg = { ...msg, token: this.token };
      }
      ws.send(encode(msg));
    }
    // else offline: the protocol resends what matters once connected
  }

  _welcomed(msg) {
    if (msg.dest !== this.id) return;
    this.refused = null;
    this.backoff.reset();
    this.replica.resumeAfter(msg.resume);
    if (msg.token !== undefined) {
      this.token = msg.token;
      this.store.put("client", "token", msg.token);
      this.store.commit(); // kept before the hub is told so
      this._send(subscribe(this.id, this.replica.vector, msg.token)); // confirms it
      this.note(`joined as ${this.id} (the hub issued this browser's token for it)`, "link");
    }
  }

  _refusedBy(msg) {
    this.refused = { code: msg.code, reason: msg.reason };
    this.note(`the hub refused ${this.id} (code ${msg.code}): ${msg.reason}`, "error");
    if (msg.code !== ID_IN_USE) this.wantOnline = false; // no redial: it cannot pass
  }

  _receive(text) {
    let decoded;
    try {
      decoded = decode(text);
    } catch (exc) {
      if (!(exc instanceof ProtocolError)) throw exc;
      this.note(`dropped a frame from the hub: ${exc.message}`, "error");
      return;
    }
    try {
      if (decoded.type === "welcome") this._welcomed(decoded.msg);
      else if (decoded.type === "refused") this._refusedBy(decoded.msg);
      else this.replica.onMessage(decoded.type, decoded.msg);
    } catch (exc) {
      console.error(exc);
      this.note(`failed on a ${decoded.type} message: ${exc.message}`, "error");
    }
    this._update();
  }

  /** Test hook: hold incoming frames (true) as a slow network would; false delivers them. */
  holdIncoming(on) {
    this.holding = on;
    if (!on) {
      const frames = this.heldFrames;
      this.heldFrames = [];
      for (const text of frames) this._receive(text);
    }
  }

  // -- the event log and the revision picture -------------------------------------------------

  note(text, kind = "info") {
    this.log.push({ time: new Date().toISOString().slice(11, 23), text, kind });
    if (this.log.length > LOG_LINES) this.log.splice(0, this.log.length - LOG_LINES);
    this._update();
  }

  _cleared(by) {
    this.log = [];
    this.boxes = new Map();
    this.conflicts = [];
    this.resolutions = [];
    this.note(by === this.id ? "cleared all clients" : `cleared by ${by}`, "clear");
  }

  _boxesOf(key) {
    let boxes = this.boxes.get(key);
    if (!boxes) this.boxes.set(key, (boxes = []));
    return boxes;
  }

  _findBox(key, writer, seq) {
    const boxes = this.boxes.get(key) ?? [];
    for (let i = boxes.length - 1; i >= 0; i--) {
      if (boxes[i].writer === writer && boxes[i].seq === seq) return boxes[i];
    }
    return null;
  }

  _addBox(key, box) {
    const boxes = this._boxesOf(key);
    boxes.push(box);
    if (boxes.length > BOXES_PER_OBJECT) boxes.splice(0, boxes.length - BOXES_PER_OBJECT);
    return box;
  }

  _trace(event, f) {
    switch (event) {
      case "apply":
        this._addBox(f.key, { writer: f.writer, seq: f.seq, old: f.old, rev: f.rev,
          deleted: f.deleted, state: "applied" });
        break;
      case "revert": {
        const box = this._findBox(f.key, f.writer, f.seq);
        if (box) box.state = "conflict";
        break;
      }
      case "conflict": {
        const loser = `${f.writer}:${f.seq}`;
        this.conflicts.push({ key: f.key, loser, winner: f.winner, arrived: f.arrived,
          beyondHistory: !!f.beyondHistory });
        const box = this._findBox(f.key, f.writer, f.seq)
          ?? this._addBox(f.key, { writer: f.writer, seq: f.seq, old: f.old, rev: f.rev,
            deleted: false, state: "conflict" });
        box.state = "conflict";
        this.note(`conflict on ${f.key}: ${loser} lost to ${f.winner}`
          + (f.writer === this.id ? ", rebasing it" : `, telling ${f.writer}`), "conflict");
        break;
      }
      case "resolution": {
        this.resolutions.push({ key: f.key, original: f.original, seq: f.seq });
        const box = this._findBox(f.key, this.id, f.seq);
        if (box) box.state = "resolution";
        this.note(`resolved the conflict on ${f.key}: write ${f.original} rebased as ${f.seq}`,
          "resolution");
        break;
      }
      case "resolve":
        if (!f.rebased) this.note(`gave up write ${f.original} on ${f.key} (rebase said no)`, "conflict");
        break;
      case "conflict_msg":
        this.note(`${f.peer} reports: my write ${f.seq} on ${f.key} lost to ${f.winner}`, "conflict");
        break;
      case "nack":
        this._waiting = true;
        this.note(`Missing messages [${f.start}..${f.end}] from ${f.origin}! Waiting for it...`, "gap");
        break;
      case "gap_closed":
        if (this._waiting && f.caughtUp) {
          this._waiting = false;
          this.note("Resuming normal operation", "gap");
        }
        break;
      case "sync":
        if (f.queued) {
          this.note(`Consuming offline queue... (${f.queued} writes: ${f.sent} sent, `
            + `${f.rebased} rebased)`, "sync");
        }
        this.note(`in sync with the network${f.timedOut ? " (timed out waiting)" : ""}`, "link");
        break;
      case "snapshot":
        this.boxes = new Map(); // the installed paths follow as apply events
        this.note(`installed a snapshot of ${f.objects} objects from the hub`, "sync");
        break;
      case "stop":
        this.note(f.peer === this.id ? "stopped every writer" : `${f.peer} stopped every writer`, "info");
        break;
      case "left":
        this.note(`${f.peer} left`, "info");
        break;
      case "drop":
        if (["crc", "snapshot_behind", "evicted", "holdback_full", "unknown_base"].includes(f.reason)) {
          this.note(`dropped: ${f.reason} (${JSON.stringify(f)})`, "error");
        }
        break;
      default:
        break;
    }
  }

  _update() {
    this.onUpdate();
  }
}

export { LinkState, StateError };
