// APSYN/01 (seed 002) in the browser: the wire codec (the seed's grammar, with the decisions of
// docs/appsync-wire.md), the one way an action changes a shared object (as the server and the
// Python peer apply it), and ApsynClient: one peer of one session on a WebSocket whose first
// frame is the peer's join. No build step, no dependency.

export const VERSION = "01";
export const PROTOCOL = `APSYN/${VERSION}`;
export const ROUND_MAX = 0xffff;
export const MAX_ACTIONS = 256; // actions in one rqst
export const MAX_DEPTH = 32; // JSON nesting
export const MAX_NAME = 256;
export const MAX_FRAME = 4 * 1024 * 1024; // what a peer reads (a sync grows with the peers)
const MAX_LIST = 1 << 16; // actions in an init or a sync

/** The seed's code table, with the seed's phrases. */
export const CODES = Object.freeze({
  20: "OK",
  21: "Request Accepted",
  22: "Request Preferred",
  23: "Multiple Requests Accepted",
  24: "Majority Request Accepted",
  30: "Conflict",
  31: "Request Refused Temporary",
  32: "Request Inferior",
  33: "Request Inferior to Multiple",
  34: "Request Inferior to Majority",
  39: "Permanent Conflict",
  40: "Bad Request",
  41: "Unauthorized",
  42: "Validation Failed",
  43: "Forbidden",
  44: "Not Found",
  45: "Already Exist",
  50: "Internal Server Error",
  51: "Not Implemented",
  53: "Service Unavailable",
  55: "Version Not Supported",
});

/** "21 Request Accepted"; "unknown" for null (the connection broke before the answer). */
export function describe(code) {
  return code === null || code === undefined ? "unknown" : `${code} ${CODES[code] ?? "?"}`;
}

/** 2x: accepted; 3x: a conflict (retry may work); 4x/5x: an error. */
export function kindOf(code) {
  if (code === null || code === undefined) return "unknown";
  if (code < 30) return "accepted";
  if (code < 40) return "conflict";
  return "error";
}

/** Bad input: `status` is what a server answers with (40 bad request, 55 version). */
export class ApsynError extends Error {
  constructor(status, message) {
    super(message);
    this.name = "ApsynError";
    this.status = status;
  }
}

/** A call that the client's state does not allow (not joined yet, queue full, closed). */
export class StateError extends Error {
  constructor(message) {
    super(message);
    this.name = "StateError";
  }
}

const HEX4 = /^[0-9A-Fa-f]{4}$/;
const PROTO = /^APSYN\/[0-9]{2}$/;
const NAME = /^[A-Za-z0-9$_]+(?:\.[A-Za-z0-9$_]+)*$/;
const SCOPES = new Set(["G", "L", "C"]);
const MODES = new Set(["NA", "RO", "RW"]);

const bad = (why) => new ApsynError(40, why);

/** The round after `n`: FFFF wraps to 0001, 0000 is reserved. */
export function nextRound(n) {
  return n >= ROUND_MAX ? 1 : n + 1;
}

export function hex4(n) {
  return n.toString(16).toUpperCase().padStart(4, "0");
}

function isPlainObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function obj(value, keys, what, optional = []) {
  if (!isPlainObject(value)) throw bad(`${what} must be a JSON object`);
  const have = Object.keys(value);
  const ok = have.every((k) => keys.includes(k))
    && keys.every((k) => optional.includes(k) || have.includes(k));
  if (!ok) throw bad(`${what} has keys ${have.sort()}, expected ${keys}`);
  return value;
}

function str(value, what) {
  if (typeof value !== "string") throw bad(`${what} must be a string`);
  return value;
}

function round4(value, what) {
  if (!HEX4.test(str(value, what))) throw bad(`${what} must be 4 hex digits`);
  return parseInt(value, 16);
}

function hexField(value, what, digits) {
  const text = str(value, what);
  if (!new RegExp(`^[0-9A-Fa-f]{1,${digits}}$`).test(text)) {
    throw bad(`${what} must be 1..${digits} hex digits`);
  }
  return parseInt(text, 16);
}

function checkDepth(value, depth = 0) {
  if (depth > MAX_DEPTH) throw bad(`JSON nested deeper than ${MAX_DEPTH}`);
  if (Array.isArray(value)) value.forEach((v) => checkDepth(v, depth + 1));
  else if (isPlainObject(value)) Object.values(value).forEach((v) => checkDepth(v, depth + 1));
}

// -- object info and actions (kept in their wire shape: {t, i: {s, i?, n}, m?, d?}) ----------

/** A checked object info {s, i?, n}; the scope id in upper case. */
export function makeInfo(scope, name, scopeId = null) {
  if (!SCOPES.has(scope)) throw bad("s must be G, L or C");
  if (typeof name !== "string" || name.length > MAX_NAME || !NAME.test(name)) {
    throw bad(`bad object name ${JSON.stringify(String(name).slice(0, 40))}`);
  }
  const info = { s: scope };
  if (scopeId !== null && scopeId !== undefined) {
    if (typeof scopeId !== "string" || !HEX4.test(scopeId)) throw bad("a scope id is 4 hex digits");
    info.i = scopeId.toUpperCase();
  }
  if (scope === "C" && info.i === undefined) throw bad("a C object needs its owner's client id as scope id");
  if (scope === "G" && info.i !== undefined) throw bad("a G object has no scope id");
  info.n = name;
  return info;
}

/** One string per object: scope, scope id and root name ("G//board", "C/0002/note"). */
export function objectKey(info) {
  return `${info.s}/${info.i ?? ""}/${info.n.split(".")[0]}`;
}

function decodeInfo(value) {
  const info = obj(value, ["s", "i", "n"], "object info", ["i"]);
  return makeInfo(str(info.s, "s"), str(info.n, "n"), "i" in info ? str(info.i, "i") : null);
}

export function createAction(info, mode, data) {
  if (!MODES.has(mode)) throw bad("m must be NA, RO or RW");
  if (info.n.includes(".")) throw bad("a create is of a whole object: no dotted name");
  checkDepth(data);
  return { t: "cre", i: info, m: mode, d: data };
}

export function updateAction(info, data) {
  checkDepth(data);
  return { t: "upd", i: info, d: data };
}

export function deleteAction(info) {
  return { t: "del", i: info };
}

function decodeAction(value) {
  if (!isPlainObject(value) || !("t" in value)) throw bad("an action is an object with t");
  if (value.t === "cre") {
    const body = obj(value, ["t", "i", "m", "d"], "cre");
    return createAction(decodeInfo(body.i), str(body.m, "m"), body.d);
  }
  if (value.t === "upd") {
    const body = obj(value, ["t", "i", "d"], "upd");
    return updateAction(decodeInfo(body.i), body.d);
  }
  if (value.t === "del") {
    obj(value, ["t", "i"], "del");
    return deleteAction(decodeInfo(value.i));
  }
  throw bad(`unknown action ${JSON.stringify(String(value.t).slice(0, 10))}`);
}

function decodeActions(value, what) {
  if (!Array.isArray(value)) throw bad(`${what} must be an array`);
  if (value.length > MAX_LIST) throw bad(`${what} is too long`);
  return value.map(decodeAction);
}

// -- messages ------------------------------------------------------------------------------
// {type: "join", header, id} | {type: "init", header, config: {min, max, tout}, creates}
// | {type: "sync", header, acks, actions} | {type: "rqst", header, actions};
// header = {c: "" or 4 hex digits, r: round number, l: last received}.

function headerWire(h) {
  return { p: PROTOCOL, c: h.c, r: hex4(h.r), l: hex4(h.l) };
}

/** The wire text of a message: keys in the grammar's order, no whitespace, upper-case hex. */
export function encode(msg) {
  let body;
  if (msg.type === "join") body = { id: msg.id };
  else if (msg.type === "init") {
    const sc = msg.config;
    body = {
      sc: { min: sc.min.toString(16).toUpperCase(), max: sc.max.toString(16).toUpperCase(),
        tout: sc.tout.toString(16).toUpperCase() },
      cr: msg.creates,
    };
  } else if (msg.type === "sync") body = { ack: msg.acks, syn: msg.actions };
  else if (msg.type === "rqst") body = msg.actions;
  else throw new TypeError(`not an APSYN message: ${msg.type}`);
  return JSON.stringify({ h: headerWire(msg.header), b: body });
}

export function joinMessage(id, clientId = "") {
  if (typeof id !== "string" || id.length < 1 || id.length > 512) throw bad("a join id is 1..512 characters");
  return { type: "join", header: { c: clientId, r: 0, l: 0 }, id };
}

export function rqstMessage(clientId, round, last, actions) {
  if (!clientId) throw bad("a rqst carries the peer's client id");
  if (round === 0) throw bad("a rqst has a round number other than 0000");
  if (actions.length > MAX_ACTIONS) throw bad(`more than ${MAX_ACTIONS} actions in a rqst`);
  return { type: "rqst", header: { c: clientId, r: round, l: last }, actions };
}

function decodeHeader(value) {
  const head = obj(value, ["p", "c", "r", "l"], "head");
  const proto = str(head.p, "p");
  if (!PROTO.test(proto)) throw bad("p must be APSYN/ and 2 digits");
  if (proto !== PROTOCOL) throw new ApsynError(55, `${proto} is not supported, ${PROTOCOL} is`);
  const c = str(head.c, "c");
  if (c !== "" && !HEX4.test(c)) throw bad("c must be empty or 4 hex digits");
  return { c: c.toUpperCase(), r: round4(head.r, "r"), l: round4(head.l, "l") };
}

function envelope(text, maxFrame) {
  if (typeof text !== "string") throw bad("a frame is text");
  if (text.length > maxFrame) throw bad(`frame of ${text.length} characters over ${maxFrame}`);
  let value;
  try {
    value = JSON.parse(text);
  } catch (exc) {
    throw bad(`not JSON: ${String(exc.message).slice(0, 80)}`);
  }
  const message = obj(value, ["h", "b"], "message");
  return [decodeHeader(message.h), message.b];
}

/** What a server sends: an init (round 0000) or a sync. Throws ApsynError (40 or 55).
 * JSON.parse keeps the last of duplicated keys: this side cannot refuse them. */
export function decodeFromServer(text, maxFrame = MAX_FRAME) {
  const [header, body] = envelope(text, maxFrame);
  if (header.r === 0) {
    if (header.c === "") throw bad("an init has round 0000 and the peer's client id");
    const init = obj(body, ["sc", "cr"], "init body");
    const sc = obj(init.sc, ["min", "max", "tout"], "sc");
    const config = { min: hexField(sc.min, "min", 8), max: hexField(sc.max, "max", 8),
      tout: hexField(sc.tout, "tout", 4) };
    if (config.max < 1 || config.tout < 1 || config.min > config.max) {
      throw bad("need 0 <= min <= max, max >= 1 and tout >= 1");
    }
    const creates = decodeActions(init.cr, "cr");
    if (!creates.every((a) => a.t === "cre")) throw bad("an init holds only cre actions");
    return { type: "init", header, config, creates };
  }
  const sync = obj(body, ["ack", "syn"], "sync body");
  if (!Array.isArray(sync.ack) || !sync.ack.every((a) => Number.isInteger(a) && a in CODES)) {
    throw bad("ack must be a list of codes of the code table");
  }
  return { type: "sync", header, acks: sync.ack, actions: decodeActions(sync.syn, "syn") };
}

/** What a peer sends: a join (round 0000) or a rqst. Throws ApsynError (40 or 55). */
export function decodeFromPeer(text, maxFrame = 64 * 1024) {
  const [header, body] = envelope(text, maxFrame);
  if (header.r === 0) {
    if (header.l !== 0) throw bad("a join has round and last received 0000");
    const join = obj(body, ["id"], "join body");
    return joinMessage(str(join.id, "id"), header.c);
  }
  return rqstMessage(header.c, header.r, header.l, decodeActions(body, "rqst body"));
}

// -- shared objects ------------------------------------------------------------------------
// {scope, scopeId, name, mode, value}: applying an action the server accepted, whoever asked.

function mergePatch(target, patch) {
  if (!isPlainObject(patch)) return structuredClone(patch);
  const result = isPlainObject(target) ? { ...target } : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete result[key];
    else result[key] = mergePatch(result[key], value);
  }
  return result;
}

function setPath(value, path, next, remove) {
  if (!isPlainObject(value)) throw new ApsynError(44, "the property's parent is not an object");
  const [head, ...rest] = path;
  const out = { ...value };
  if (rest.length) {
    if (!(head in out)) throw new ApsynError(44, `no property ${head}`);
    out[head] = setPath(out[head], rest, next, remove);
  } else if (remove) {
    if (!(head in out)) throw new ApsynError(44, `no property ${head}`);
    delete out[head];
  } else {
    out[head] = structuredClone(next);
  }
  return out;
}

/** The object after `action` (null: deleted); ApsynError 44/45 when it does not apply. */
export function applyAction(current, action) {
  const info = action.i;
  const [root, ...path] = info.n.split(".");
  if (action.t === "cre") {
    if (current) throw new ApsynError(45, `${objectKey(info)} exists`);
    return { scope: info.s, scopeId: info.i ?? null, name: root, mode: action.m,
      value: structuredClone(action.d) };
  }
  if (!current) throw new ApsynError(44, `no object ${objectKey(info)}`);
  let value;
  if (action.t === "del") {
    if (!path.length) return null;
    value = setPath(current.value, path, null, true);
  } else if (!path.length) value = mergePatch(current.value, action.d);
  else value = setPath(current.value, path, action.d, false);
  return { ...current, value };
}

// -- the client ----------------------------------------------------------------------------

export const Phase = Object.freeze({
  CONNECTING: "connecting", JOINING: "joining", SYNCING: "syncing", CLOSED: "closed" });

const LOG_LINES = 200;

/** 36 hex digits from the browser's cryptographic source: a peer secret. */
function randomSecret() {
  const bytes = new Uint8Array(18);
  globalThis.crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
const RESULTS_KEPT = 500;

/**
 * One peer of one session. `connect()`; `share(name, initial)` gives an object whose `set`
 * requests a change (sent in the answer to the next sync); every request gets a result
 * (`{number, what, round, code}`; code null: the connection broke before the answer);
 * `on("change" | "round" | "result" | "phase" | "log", fn)`. A refused join (close code
 * 4000 + status) is not retried; another broken connection is rejoined with the same client id.
 */
export class ApsynClient {
  constructor(url, session, { key = null, reconnectDelay = 0.5, maxQueue = 10_000,
    maxFrame = MAX_FRAME, WebSocketImpl = globalThis.WebSocket, gather = 0, eager = false,
    quiet = false, secret = null } = {}) {
    if (!(gather >= 0 && gather < 1)) throw new RangeError(`gather must be in [0, 1), got ${gather}`);
    // answer each round this fraction of its min time late, with the changes made meanwhile
    // (as gossamer's Python peer, PeerConfig.gather); 0: at once
    this.gather = gather;
    // send each request when it is made (those of one task together): in the round's answer
    // if it is still to come, else in a rqst of its own for the open round (PeerConfig.eager)
    this.eager = Boolean(eager);
    // answer a round only with requests queued (or gathered), and at least every tout / 2
    // rounds so that the server does not drop this client for silence: an idle client costs
    // the server no frame a round. Only where rounds are of fixed length (the init's max
    // equal to its min); where a round waits for every answer, every round is answered
    // (as gossamer's Python peer, PeerConfig.quiet)
    this.quiet = Boolean(quiet);
    this.url = url;
    this.session = session;
    this.key = key;
    // sent in every join (";peer="): CTRL gives this client's id back on a reconnect only
    // with it, so nobody else can take its objects (docs/security.md, APSYN peers)
    this.secret = secret ?? randomSecret();
    this.reconnectDelay = reconnectDelay;
    this.maxQueue = maxQueue;
    this.maxFrame = maxFrame;
    this.WebSocketImpl = WebSocketImpl;
    this.phase = Phase.CLOSED;
    this.clientId = "";
    this.round = 0;
    this.rounds = 0; // syncs applied
    this.config = null;
    this.refused = null; // {code, reason} of a refused join
    this.joins = 0;
    this.firstFrame = null; // what this client wrote first on its last connection (a join)
    this.store = new Map(); // object key -> {scope, scopeId, name, mode, value}
    this.queue = []; // [number, action]
    this.inFlight = []; // numbers sent, not yet acknowledged, oldest first
    this.results = []; // {number, what, round, code}, the newest RESULTS_KEPT
    this.lines = [];
    this.holdUntilRound = 0;
    this._numbers = 0;
    this._byNumber = new Map(); // number -> {entry, resolve}
    this._handlers = { change: [], round: [], result: [], phase: [], log: [] };
    this._ws = null;
    this._timer = null;
    this._answerTimer = null; // a gathering answer
    this._eagerTimer = null; // requests to send now (eager)
    this._unanswered = 0; // rounds begun since this client's last rqst (quiet)
  }

  // -- events ----------------------------------------------------------------------------

  on(event, fn) {
    if (!(event in this._handlers)) throw new TypeError(`no event ${event}`);
    this._handlers[event].push(fn);
    return () => { this._handlers[event] = this._handlers[event].filter((f) => f !== fn); };
  }

  _emit(event, ...args) {
    for (const fn of this._handlers[event]) {
      try {
        fn(...args);
      } catch (exc) {
        console.error(`apsyn ${event} handler:`, exc);
      }
    }
  }

  log(line) {
    this.lines.unshift(line);
    if (this.lines.length > LOG_LINES) this.lines.length = LOG_LINES;
    this._emit("log", line);
  }

  _setPhase(phase) {
    if (phase === this.phase) return;
    this.phase = phase;
    this._emit("phase", phase);
  }

  // -- connection ------------------------------------------------------------------------

  connect() {
    if (this.phase !== Phase.CLOSED || this._ws) throw new StateError("connect() while connected");
    this.refused = null;
    this._dial();
  }

  close() {
    this._setPhase(Phase.CLOSED);
    clearTimeout(this._timer);
    this._timer = null;
    clearTimeout(this._answerTimer);
    this._answerTimer = null;
    if (this._ws) this._ws.close(1000, "closed by the page");
  }

  _dial() {
    this._timer = null;
    this._setPhase(Phase.CONNECTING);
    const ws = new this.WebSocketImpl(this.url);
    this._ws = ws;
    ws.onopen = () => {
      if (ws !== this._ws) return;
      this._setPhase(Phase.JOINING);
      const id = this.session + (this.key ? `;key=${this.key}` : "") + `;peer=${this.secret}`;
      this.firstFrame = encode(joinMessage(id, this.clientId));
      ws.send(this.firstFrame);
      this.joins += 1;
      this.log(`join ${this.session}${this.clientId ? ` as ${this.clientId}` : ""}`);
    };
    ws.onmessage = (event) => { if (ws === this._ws) this._received(event.data); };
    ws.onclose = (event) => { if (ws === this._ws) this._closed(event.code, event.reason); };
  }

  _closed(code, reason) {
    this._ws = null;
    clearTimeout(this._answerTimer);
    this._answerTimer = null;
    for (const number of this.inFlight) this._result(number, null); // sent: may have happened
    this.inFlight = [];
    this.log(`connection closed ${code}${reason ? ` ${reason}` : ""}`);
    if (code >= 4000 && code < 5000) { // a refused join: 4000 + status, not retried
      this.refused = { code, reason };
      this._setPhase(Phase.CLOSED);
    }
    if (this.phase !== Phase.CLOSED) {
      this._setPhase(Phase.CONNECTING);
      this._timer = setTimeout(() => this._dial(), this.reconnectDelay * 1000);
    }
  }

  _received(text) {
    let msg;
    try {
      msg = decodeFromServer(text, this.maxFrame);
    } catch (exc) {
      if (!(exc instanceof ApsynError)) throw exc;
      this.log(`dropped a frame: ${exc.status} ${exc.message}`);
      return;
    }
    if (msg.type === "init") this._init(msg);
    else this._sync(msg);
  }

  _init(msg) {
    this.clientId = msg.header.c;
    this.config = msg.config;
    this.round = msg.header.l;
    const old = this.store;
    this.store = new Map();
    for (const create of msg.creates) this.store.set(objectKey(create.i), applyAction(null, create));
    this._setPhase(Phase.SYNCING);
    this.log(`init: client ${this.clientId}, round ${hex4(this.round)}, ${this.store.size} objects`);
    const keys = [...new Set([...old.keys(), ...this.store.keys()])].sort();
    for (const key of keys) {
      const before = old.get(key);
      const after = this.store.get(key);
      if (JSON.stringify(before) !== JSON.stringify(after)) this._emit("change", key, after?.value ?? null, after ?? null);
    }
    this._answerRound();
  }

  _sync(msg) {
    if (this.phase !== Phase.SYNCING) return;
    const number = msg.header.r;
    if (number !== nextRound(this.round)) {
      if (number !== this.round) { // a gap: ask again, telling the server what we have
        this.log(`gap: got round ${hex4(number)} after ${hex4(this.round)}`);
        this._write([]);
      }
      return;
    }
    this.round = number;
    this.rounds += 1;
    for (const code of msg.acks) {
      if (this.inFlight.length) this._result(this.inFlight.shift(), code);
    }
    for (const action of msg.actions) {
      const key = objectKey(action.i);
      let after;
      try {
        after = applyAction(this.store.get(key) ?? null, action);
      } catch (exc) {
        if (!(exc instanceof ApsynError)) throw exc;
        this.log(`diverged on ${key}: ${exc.status} ${exc.message}`);
        continue;
      }
      if (after === null) this.store.delete(key);
      else this.store.set(key, after);
      this._emit("change", key, after?.value ?? null, after);
    }
    this._emit("round", number, msg);
    this._answerRound();
  }

  /** Answer the round just begun: at once, or `gather` x its min time later. */
  _answerRound() {
    clearTimeout(this._answerTimer);
    this._answerTimer = null;
    this._unanswered += 1;
    if (this._maySkip()) return; // nothing to ask (an eager request made later still goes)
    const delay = this.config ? this.gather * this.config.min : 0;
    if (delay <= 0) this._answer();
    else {
      this._answerTimer = setTimeout(() => {
        this._answerTimer = null;
        if (!this._maySkip()) this._answer();
      }, delay);
    }
  }

  /** A quiet client with nothing queued may leave this round unanswered: the session's
   * rounds are of fixed length (they wait for nobody) and the server heard from it less
   * than tout / 2 rounds ago. */
  _maySkip() {
    const c = this.config;
    return this.quiet && this.queue.length === 0 && c !== null && c.max === c.min
      && this._unanswered < Math.max(1, Math.floor(c.tout / 2));
  }

  _answer() {
    const batch = [];
    if (this.round >= this.holdUntilRound) {
      while (this.queue.length && batch.length < MAX_ACTIONS) {
        const [number, action] = this.queue.shift();
        this.inFlight.push(number);
        const held = this._byNumber.get(number);
        if (held) held.entry.round = this.round;
        batch.push(action);
      }
    }
    this._write(batch);
  }

  _write(actions) {
    if (!this._ws || !this.clientId || this._ws.readyState !== 1) return;
    const r = this.round || 1;
    this._unanswered = 0;
    this._ws.send(encode(rqstMessage(this.clientId, r, r, actions)));
  }

  _result(number, code) {
    const held = this._byNumber.get(number);
    if (!held) return;
    this._byNumber.delete(number);
    held.entry.code = code;
    this.log(`#${number} ${held.entry.what}: ${describe(code)}`);
    this._emit("result", held.entry);
    held.resolve(code);
  }

  // -- application -----------------------------------------------------------------------

  /** Queue `action` (sent in the answer to the next sync); a promise of its code. */
  request(action) {
    if (this.queue.length >= this.maxQueue) {
      throw new StateError(`${this.queue.length} requests queued: the server is not answering`);
    }
    this._numbers += 1;
    const number = this._numbers;
    const entry = { number, what: `${action.t} ${action.i.s}/${action.i.i ?? ""}/${action.i.n}`,
      round: null, code: undefined };
    this.results.push(entry);
    if (this.results.length > RESULTS_KEPT) this.results.shift();
    this.queue.push([number, action]);
    if (this.eager && this._eagerTimer === null) {
      this._eagerTimer = setTimeout(() => this._sendEagerly(), 0);
    }
    return new Promise((resolve) => { this._byNumber.set(number, { entry, resolve }); });
  }

  _sendEagerly() {
    this._eagerTimer = null;
    if (this.phase !== Phase.SYNCING || !this.queue.length || this.round < this.holdUntilRound) {
      return; // not joined, or held: they go with an answer
    }
    clearTimeout(this._answerTimer); // the round's answer, if it was still to come: now
    this._answerTimer = null;
    this._answer();
  }

  /** An object info; C objects default to this client's own scope id. */
  info(name, { scope = "G", owner = null } = {}) {
    if (scope === "C" && !owner && !this.clientId) throw new StateError("not joined yet: no client id");
    return makeInfo(scope, name, scope === "C" ? owner || this.clientId : null);
  }

  create(name, data, { scope = "G", mode = "RW", owner = null } = {}) {
    return this.request(createAction(this.info(name, { scope, owner }), mode, data));
  }

  /** Set one property (`prop` may be dotted: "a.b"; the parents must exist). */
  set(name, prop, value, opts = {}) {
    return this.request(updateAction(this.info(`${name}.${prop}`, opts), value));
  }

  /** A JSON merge patch of the object: only the changed members, null removes one. */
  update(name, patch, opts = {}) {
    return this.request(updateAction(this.info(name, opts), patch));
  }

  remove(name, opts = {}) {
    return this.request(deleteAction(this.info(name, opts)));
  }

  /** The object `name`, created with `initial` when it is not there yet (a create that finds
   * it there is answered 45 and changes nothing). */
  share(name, initial = {}, { scope = "G", mode = "RW", owner = null } = {}) {
    const info = this.info(name, { scope, owner });
    const key = objectKey(info);
    if (!this.store.has(key)) this.create(name, initial, { scope, mode, owner });
    const client = this;
    const opts = { scope, owner: info.i ?? null };
    return {
      key,
      info,
      get value() { return client.value(key); },
      set: (prop, value) => client.set(name, prop, value, opts),
      update: (patch) => client.update(name, patch, opts),
      remove: () => client.remove(name, opts),
      onChange: (fn) => client.on("change", (k, value) => { if (k === key) fn(value); }),
    };
  }

  value(key) {
    const found = this.store.get(key);
    return found ? found.value : undefined;
  }

  /** Every visible object: key -> value, keys sorted. */
  objects() {
    return Object.fromEntries([...this.store.keys()].sort().map((k) => [k, this.store.get(k).value]));
  }

  get synced() {
    return this.phase === Phase.SYNCING && !this.queue.length && !this.inFlight.length;
  }

  /** For tests: keep queued requests until the answer to round `n` (no wrap), so that
   * several pages' requests land in one round. False if that round has passed already. */
  holdUntil(n) {
    if (this.round >= n) return false;
    this.holdUntilRound = n;
    return true;
  }

  /** A JSON snapshot for tests and tools. */
  state() {
    return {
      phase: this.phase, clientId: this.clientId, session: this.session, round: this.round,
      rounds: this.rounds, joins: this.joins, synced: this.synced, refused: this.refused,
      config: this.config, queued: this.queue.length, inFlight: this.inFlight.length,
      objects: this.objects(),
      modes: Object.fromEntries([...this.store].map(([k, o]) => [k, o.mode])),
      results: this.results.map((e) => ({ ...e })),
    };
  }
}
