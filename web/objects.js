// Replicated objects with total order per object: a port of
// src/gossamer/protocols/replica/objects.py and src/gossamer/protocols/ordering/per_object.py
// (read their docstrings for the design).
//
// Every write goes from revision `old_value` to a new unique revision `value`; the writes of a
// key form a tree and its state is the end of the winning path (at every fork the write of the
// lowest writer id, then lowest seq, wins), the same on every replica whatever the delivery
// order. A write based on the current revision extends the path; one based on an earlier
// revision of the path competes with the write that follows that revision (the fork sibling):
// if it ranks lower, the sibling and everything after it are reverted; otherwise it loses.
// A loser's writer is told with a Conflict, except a client's own loss, which it sees and
// rebases itself (after a random, growing delay). Writes made while not online wait in the
// offline queue and are rebased on the synced state before they are sent.

import { CausalDelivery, msgId } from "./causal.js";
import { ContentError, HUB_ID, checkContent, clear, conflict, stop } from "./wire.js";

export const LinkState = Object.freeze({ OFFLINE: "offline", SYNCING: "syncing", ONLINE: "online" });

const T_OBJECTS = "obj";
const T_RESOLVED = "resolved";
const T_REBASE = "rebase";
const T_OFFLINE = "offline";
const SLACK = 1e-9;

export const OBJECT_DEFAULTS = {
  historyLimit: 256, // applied writes kept per key (as the Python client: verdicts agree)
  resolvedLimit: 2000,
  pendingConflictLimit: 1024,
  rebaseQueueLimit: 10000,
  rebaseDelay: 0.1,
  rebaseBackoffMax: 6,
  catchUpWait: 2.0,
  offlineQueueLimit: 10000,
  syncTimeout: 5.0,
  snapshotKeysLimit: 100000,
};

const pad = (n) => String(n).padStart(12, "0");
const now = () => performance.now() / 1000;

export class StateError extends Error {}

/** The default rebase: the intended content wins over whatever is there now. */
export const reapply = (key, intended) => intended;

const writeOf = (msg) => ({
  revision: msg.value, old: msg.old_value, writer: msg.id, seq: msg.vector[msg.id],
  content: msg.data ?? null, deleted: !!msg.deleted,
});
const writeToJson = (w) => [w.revision, w.old, w.writer, w.seq, w.content, w.deleted];
const writeFromJson = ([revision, old, writer, seq, content, deleted]) => (
  { revision: String(revision), old: old ?? null, writer: String(writer), seq: Number(seq),
    content: content ?? null, deleted: !!deleted });
const rankLess = (a, b) => a.writer < b.writer || (a.writer === b.writer && a.seq < b.seq);

/** ["extends"|"wins"|"loses", fork index or null] for `write` against a key's history. */
export function judge(history, write) {
  const current = history.length ? history[history.length - 1].revision : null;
  if (write.old === current) return ["extends", null];
  let fork = null;
  if (write.old === null) {
    if (history.length && history[0].old === null) fork = 0;
  } else {
    for (let i = history.length - 2; i >= 0; i--) {
      if (history[i].revision === write.old) {
        fork = i + 1;
        break;
      }
    }
  }
  if (fork === null) return ["loses", null];
  return rankLess(write, history[fork]) ? ["wins", fork] : ["loses", fork];
}

function newRevision() {
  const bytes = crypto.getRandomValues(new Uint8Array(6)); // 48 bits, like the Python client
  return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
}

export class ReplicaClient {
  /**
   * me, store (LocalStore), send(msg) to the hub, trace(event, fields), and the callbacks
   * onChange(key, content, revision), onClear(by), onStop(by), onLink(state).
   */
  constructor({ me, store, send, trace, config, causal, rebase, onChange, onClear, onStop, onLink }) {
    this.me = me;
    this.store = store;
    this.send = send;
    this.trace = trace ?? (() => {});
    this.config = { ...OBJECT_DEFAULTS, ...config };
    this.rebase = rebase ?? reapply;
    this.onChange = onChange;
    this.onClear = onClear;
    this.onStop = onStop;
    this.onLink = onLink;
    this.link = LinkState.OFFLINE;
    this.causal = new CausalDelivery({ me, store, send, trace: this.trace, config: causal,
      onDeliver: (msg) => this._apply(msg) });
    this._syncTimer = null;
    this._syncStarted = 0;
    this._offline = new Map(); // number -> [key, content, deleted, base]
    this._offlineLatest = new Map();
    this._offlineNext = 1;
    this._snapshotVector = null;
    this._snapshotParts = new Map();
    this.staleConflicts = 0;
    this._objects = new Map(); // key -> [write], the kept winning path
    this._resolved = new Map(); // own lost seq -> rebased seq (null: gave up)
    this._rebasedFrom = new Map();
    this._pending = new Map(); // loser seq -> Conflict awaiting its winner
    this._rebaseQueue = new Map(); // seq -> [key, write]
    this._rebaseAt = new Map();
    this._rebaseTimer = null;
    this._rebaseTimerAt = 0;
    this._awaitingCatchUp = false;
    this._outbox = [];
    for (const [key, rows] of store.scan(T_OBJECTS)) this._objects.set(key, rows.map(writeFromJson));
    for (const [key, value] of store.scan(T_RESOLVED)) {
      this._resolved.set(Number(key), value);
      if (value !== null) this._rebasedFrom.set(value, Number(key));
    }
    for (const [key, [objectKey, row]] of store.scan(T_REBASE)) {
      this._rebaseQueue.set(Number(key), [objectKey, writeFromJson(row)]);
      this._rebaseAt.set(Number(key), this._rebaseTime(Number(key)));
    }
    for (const [key, [objectKey, content, deleted, base]] of store.scan(T_OFFLINE)) {
      const number = Number(key);
      this._offline.set(number, [objectKey, content, !!deleted, base]);
      this._offlineLatest.set(objectKey, number);
      this._offlineNext = Math.max(this._offlineNext, number + 1);
    }
  }

  // -- the link -------------------------------------------------------------------------------

  /** The WebSocket is open: resubscribe and sync before sending the offline queue. */
  connected() {
    if (this.link !== LinkState.OFFLINE) return;
    this._syncStarted = now();
    this.trace("connect", { queued: this._offline.size });
    this.causal.start();
    this._setLink(LinkState.SYNCING);
    this._syncTimer = setTimeout(() => this._syncDone(true), this.config.syncTimeout * 1000);
  }

  /** The WebSocket closed (or the user went offline): writes queue up. */
  disconnected(why = "disconnected") {
    clearTimeout(this._rebaseTimer);
    this._rebaseTimer = null;
    clearTimeout(this._syncTimer);
    this._syncTimer = null;
    this.causal.stop();
    if (this.link !== LinkState.OFFLINE) {
      this.trace("offline", { reason: why, queued: this._offline.size });
      this._setLink(LinkState.OFFLINE);
    }
  }

  _setLink(state) {
    this.link = state;
    if (this.onLink) this.onLink(state);
  }

  /** One decoded message from the hub. */
  /** A new incarnation of this id (see causal.resumeAfter): the earlier runs' lost writes
   * waiting to be rebased are given up (those runs rebased them). */
  resumeAfter(seq) {
    if (!this.causal.resumeAfter(seq)) return;
    for (const lost of [...this._rebaseQueue.keys()].filter((n) => n <= seq)) {
      this._rebaseQueue.delete(lost);
      this._rebaseAt.delete(lost);
      this.store.delete(T_REBASE, pad(lost));
    }
    for (const lost of [...this._pending.keys()].filter((n) => n <= seq)) this._pending.delete(lost);
    this.store.commit();
  }

  onMessage(type, msg) {
    if (this.link === LinkState.OFFLINE) return;
    if (type === "data" || type === "retry" || type === "nack" || type === "subscribe") {
      this.causal.onMessage(type, msg);
    } else {
      this.causal.noteHeard();
      if (type === "conflict") this._onConflict(msg);
      else if (type === "snapshot") this._onSnapshot(msg);
      else if (type === "clear") this._cleared(msg.id);
      else if (type === "stop") {
        this.trace("stop", { peer: msg.id });
        if (this.onStop) this.onStop(msg.id);
      } else if (type === "left") this.trace("left", { peer: msg.left });
    }
    this._afterDelivery();
    if (this.link === LinkState.SYNCING && this.causal.heard && this.causal.caughtUp) {
      this._syncDone(false);
    }
  }

  // -- the application's face -----------------------------------------------------------------

  get(key) {
    const number = this._offlineLatest.get(key);
    if (number !== undefined) {
      const [, content, deleted] = this._offline.get(number);
      return deleted ? null : content;
    }
    return this.replicated(key);
  }

  replicated(key) {
    const history = this._objects.get(key);
    if (!history || !history.length || history[history.length - 1].deleted) return null;
    return history[history.length - 1].content;
  }

  revision(key) {
    const history = this._objects.get(key);
    return history && history.length ? history[history.length - 1].revision : null;
  }

  items() {
    const keys = [...new Set([...this._objects.keys(), ...this._offlineLatest.keys()])].sort();
    const out = {};
    for (const key of keys) {
      const content = this.get(key);
      if (content !== null) out[key] = content;
    }
    return out;
  }

  /** Writes waiting for a connection, oldest first: [key, content, deleted]. */
  get offlineQueue() {
    return [...this._offline.keys()].sort((a, b) => a - b)
      .map((n) => this._offline.get(n).slice(0, 3));
  }

  get rebaseQueue() {
    return [...this._rebaseQueue.keys()].sort((a, b) => a - b).map((s) => {
      const [key, w] = this._rebaseQueue.get(s);
      return [key, w.content, w.deleted];
    });
  }

  revisions() {
    const out = {};
    for (const key of [...this._objects.keys()].sort()) {
      const history = this._objects.get(key);
      if (history.length) out[key] = history[history.length - 1].revision;
    }
    return out;
  }

  /** The kept winning path of `key`: [{revision, old, writer, seq, deleted}], oldest first. */
  history(key) {
    return (this._objects.get(key) ?? []).map(({ revision, old, writer, seq, deleted }) => (
      { revision, old, writer, seq, deleted }));
  }

  get vector() {
    return this.causal.vector;
  }

  get resolved() {
    return Object.fromEntries(this._resolved);
  }

  set(key, content) {
    if (typeof key !== "string" || !key) throw new ContentError("key must be a non-empty string");
    if (content === null || content === undefined) throw new ContentError("use delete(key)");
    return this._write(key, checkContent(content), false);
  }

  delete(key) {
    if (this.get(key) === null) return null;
    return this._write(key, null, true);
  }

  // -- writing --------------------------------------------------------------------------------

  _write(key, content, deleted) {
    if (this.link !== LinkState.ONLINE) {
      this._queueOffline(key, content, deleted);
      return null;
    }
    return this._writeNow(key, content, deleted);
  }

  _writeNow(key, content, deleted) {
    const history = this._history(key);
    const old = history.length ? history[history.length - 1].revision : null;
    const revision = newRevision();
    const msg = this.causal.makeData({ key, old_value: old, value: revision, data: content, deleted });
    this._push(key, history, writeOf(msg));
    this.causal.sendData(msg);
    this._changed(key);
    return revision;
  }

  _history(key) {
    let history = this._objects.get(key);
    if (!history) this._objects.set(key, (history = []));
    return history;
  }

  _push(key, history, write) {
    history.push(write);
    this.trace("apply", { key, writer: write.writer, seq: write.seq, rev: write.revision,
      old: write.old, deleted: write.deleted });
    if (history.length > this.config.historyLimit) {
      history.splice(0, history.length - this.config.historyLimit);
    }
    this.store.put(T_OBJECTS, key, history.map(writeToJson));
  }

  _changed(key) {
    if (this.onChange) this.onChange(key, this.get(key), this.revision(key));
  }

  // -- applying delivered writes --------------------------------------------------------------

  _apply(msg) {
    const key = msg.key;
    const history = this._history(key);
    const write = writeOf(msg);
    const [verdict, fork] = judge(history, write);
    if (verdict === "extends") {
      this._push(key, history, write);
      this._changed(key);
    } else if (verdict === "wins") {
      const reverted = history.splice(fork);
      for (const undone of [...reverted].reverse()) {
        this.trace("revert", { key, writer: undone.writer, seq: undone.seq, rev: undone.revision });
      }
      this._push(key, history, write);
      for (const loser of [...reverted].reverse()) this._lost(key, loser, write, false);
      this._changed(key);
    } else {
      const winner = fork !== null ? history[fork] : history[history.length - 1];
      if (!winner) {
        this.trace("drop", { key, origin: msg.id, seq: write.seq, reason: "unknown_base" });
        return;
      }
      const beyond = fork === null && history.length >= this.config.historyLimit;
      this._lost(key, write, winner, true, beyond);
    }
  }

  _lost(key, loser, winner, arrived, beyondHistory = false) {
    this.trace("conflict", { key, writer: loser.writer, seq: loser.seq, rev: loser.revision,
      old: loser.old, winner: msgId(winner.writer, winner.seq), arrived, beyondHistory });
    if (loser.writer === this.me) {
      this._queueRebase(key, loser);
    } else {
      this._outbox.push(conflict(this.me, loser.writer, loser.seq, winner.writer, winner.seq, key));
    }
  }

  _afterDelivery() {
    const outbox = this._outbox;
    this._outbox = [];
    for (const msg of outbox) this.send(msg);
    if (this._awaitingCatchUp && this.causal.caughtUp) this._rebaseDue();
    else this._armRebase();
    if (this._pending.size) {
      for (const [seq, c] of [...this._pending]) {
        if (this.causal.delivered(c.winner) >= c.winner_time) {
          this._pending.delete(seq);
          this._settle(c);
        }
      }
    }
  }

  // -- offline work ---------------------------------------------------------------------------

  _queueOffline(key, content, deleted) {
    // a write to the key of the write queued last, with the default rebase, replaces it:
    // nobody saw it, and a chain of hundreds to one key outruns the other replicas' bounded
    // histories (the Python client does the same; docs/replica-wire.md)
    const last = this._offlineNext - 1;
    const previous = this._offline.get(last);
    const replaces = this.rebase === reapply && previous !== undefined && previous[0] === key;
    let number;
    let base;
    if (replaces) {
      number = last;
      base = previous[3];
    } else {
      if (this._offline.size >= this.config.offlineQueueLimit) {
        throw new StateError(`the offline queue is full: the write to ${key} was not made`);
      }
      number = this._offlineNext++;
      base = this.revision(key);
    }
    this._offline.set(number, [key, content, deleted, base]);
    this._offlineLatest.set(key, number);
    this.store.put(T_OFFLINE, pad(number), [key, content, deleted, base]);
    this.store.commit();
    this.trace("queue", { key, number, deleted, base, replaces });
    if (this.onChange) this.onChange(key, deleted ? null : content, null);
  }

  _syncDone(timedOut) {
    if (this.link !== LinkState.SYNCING) return;
    clearTimeout(this._syncTimer);
    this._syncTimer = null;
    this._setLink(LinkState.ONLINE);
    const numbers = [...this._offline.keys()].sort((a, b) => a - b);
    const queued = numbers.map((n) => this._offline.get(n));
    for (const n of numbers) this.store.delete(T_OFFLINE, pad(n));
    this._offline.clear();
    this._offlineLatest.clear();
    let sent = 0;
    let rebased = 0;
    for (const [key, intended, deleted, base] of queued) {
      const current = this.replicated(key);
      const revision = this.revision(key);
      if (deleted) {
        if (current !== null) {
          this._writeNow(key, null, true);
          sent++;
        }
        continue;
      }
      let content = intended;
      if (base !== revision) {
        rebased++;
        content = this.rebase(key, intended, current);
        if (content === null || content === undefined) continue;
      }
      this._writeNow(key, content, false);
      sent++;
    }
    this.store.commit();
    this.trace("sync", { queued: queued.length, sent, rebased, timedOut,
      waited: now() - this._syncStarted });
    for (const key of new Set(queued.map((q) => q[0]))) this._changed(key);
    this._armRebase();
  }

  // -- clear and stop -------------------------------------------------------------------------

  clearAll() {
    if (this.link !== LinkState.ONLINE) throw new StateError(`clear needs the hub: this client is ${this.link}`);
    this.send(clear(this.me));
    this._cleared(this.me);
    for (const key of [...this._objects.keys()]) {
      if (this.replicated(key) !== null) this._writeNow(key, null, true);
    }
  }

  stopAll() {
    if (this.link !== LinkState.ONLINE) throw new StateError(`stop-all needs the hub: this client is ${this.link}`);
    this.send(stop(this.me));
    this.trace("stop", { peer: this.me });
    if (this.onStop) this.onStop(this.me);
  }

  _cleared(by) {
    for (const n of this._offline.keys()) this.store.delete(T_OFFLINE, pad(n));
    const dropped = this._offline.size + this._rebaseQueue.size;
    const keys = [...this._offlineLatest.keys()];
    this._offline.clear();
    this._offlineLatest.clear();
    for (const seq of this._rebaseQueue.keys()) {
      this.store.delete(T_REBASE, pad(seq));
      this._markResolved(seq, null);
    }
    this._rebaseQueue.clear();
    this._rebaseAt.clear();
    this._pending.clear();
    this.store.commit();
    this.trace("clear", { peer: by, dropped });
    if (this.onClear) this.onClear(by);
    for (const key of keys) this._changed(key);
  }

  // -- snapshots from the hub -----------------------------------------------------------------

  _onSnapshot(msg) {
    if (msg.dest !== this.me) return;
    const vectorText = JSON.stringify(Object.entries(msg.vector).sort());
    if (this._snapshotVector !== vectorText) {
      this._snapshotVector = vectorText;
      this._snapshotParts = new Map();
    }
    for (const [key, path] of Object.entries(msg.objects)) this._snapshotParts.set(key, path);
    if (this._snapshotParts.size > this.config.snapshotKeysLimit) {
      this.trace("drop", { peer: msg.id, reason: "snapshot_too_large" });
      this._snapshotVector = null;
      this._snapshotParts = new Map();
      return;
    }
    if (msg.last) {
      const parts = this._snapshotParts;
      this._snapshotParts = new Map();
      this._snapshotVector = null;
      this._install({ ...msg.vector }, parts);
    }
  }

  _install(vector, objects) {
    const mine = this.causal.vector;
    const behind = Object.entries(mine).filter(([o, c]) => c > (vector[o] ?? 0));
    if (behind.length) {
      this.trace("drop", { peer: HUB_ID, reason: "snapshot_behind", behind: Object.fromEntries(behind) });
      return;
    }
    const touched = new Set([...this._objects.keys(), ...objects.keys()]);
    this.store.clearTable(T_OBJECTS);
    this._objects = new Map();
    for (const [key, path] of objects) {
      const history = path.map(writeFromJson).slice(-this.config.historyLimit);
      this._objects.set(key, history);
      this.store.put(T_OBJECTS, key, history.map(writeToJson));
    }
    this.trace("snapshot", { peer: HUB_ID, objects: objects.size, vector });
    for (const [key, history] of this._objects) {
      for (const w of history) {
        this.trace("apply", { key, writer: w.writer, seq: w.seq, rev: w.revision, old: w.old,
          deleted: w.deleted, snapshot: true });
      }
    }
    this.causal.install(vector);
    this.store.commit();
    for (const key of [...touched].sort()) this._changed(key);
  }

  // -- resolving own lost writes --------------------------------------------------------------

  _queueRebase(key, write) {
    const seq = write.seq;
    if (this._resolved.has(seq) || this._rebaseQueue.has(seq)) return;
    if (this._rebaseQueue.size >= this.config.rebaseQueueLimit) {
      const oldest = Math.min(...this._rebaseQueue.keys());
      this.store.delete(T_REBASE, pad(oldest));
      this._markResolved(oldest, null);
      this._rebaseQueue.delete(oldest);
      this._rebaseAt.delete(oldest);
    }
    this._rebaseQueue.set(seq, [key, write]);
    this._rebaseAt.set(seq, this._rebaseTime(seq));
    this.store.put(T_REBASE, pad(seq), [key, writeToJson(write)]);
  }

  losses(seq) {
    let count = 0;
    while (this._rebasedFrom.has(seq)) {
      seq = this._rebasedFrom.get(seq);
      count++;
    }
    return count;
  }

  _rebaseTime(seq) {
    const window = this.config.rebaseDelay * 2 ** Math.min(this.losses(seq), this.config.rebaseBackoffMax);
    return now() + Math.random() * window;
  }

  _armRebase() {
    if (!this._rebaseQueue.size || this.link !== LinkState.ONLINE) return;
    const due = Math.min(...this._rebaseAt.values());
    if (this._rebaseTimer !== null) {
      if (this._rebaseTimerAt <= due) return;
      clearTimeout(this._rebaseTimer);
    }
    this._rebaseTimerAt = due;
    this._rebaseTimer = setTimeout(() => this._rebaseDue(), Math.max(0, due - now()) * 1000);
  }

  _rebaseDue() {
    clearTimeout(this._rebaseTimer);
    this._rebaseTimer = null;
    if (this.link !== LinkState.ONLINE) return;
    const t = now() + SLACK + 0.002; // setTimeout may fire a little early
    const due = [...this._rebaseQueue.keys()].sort((a, b) => a - b)
      .filter((seq) => this._rebaseAt.get(seq) <= t);
    if (due.length && !this.causal.caughtUp) {
      const deadline = Math.min(...due.map((s) => this._rebaseAt.get(s))) + this.config.catchUpWait;
      if (t < deadline) {
        this._awaitingCatchUp = true;
        this._rebaseTimerAt = deadline;
        this._rebaseTimer = setTimeout(() => this._rebaseDue(), (deadline - now()) * 1000);
        return;
      }
    }
    this._awaitingCatchUp = false;
    for (const seq of due) {
      const [key, write] = this._rebaseQueue.get(seq);
      this._rebaseQueue.delete(seq);
      this._rebaseAt.delete(seq);
      this.store.delete(T_REBASE, pad(seq));
      this._resolve(key, write);
    }
    this.store.commit();
    this._armRebase();
  }

  _resolve(key, write) {
    if (this._resolved.has(write.seq)) return;
    const current = this.replicated(key);
    let newSeq = null;
    if (write.deleted) {
      if (current !== null) newSeq = this._rebasedWrite(key, write.seq, null, true);
    } else {
      const content = this.rebase(key, write.content, current);
      if (content !== null && content !== undefined) {
        newSeq = this._rebasedWrite(key, write.seq, content, false);
      }
    }
    if (newSeq === null) {
      this._markResolved(write.seq, null);
      this.store.commit();
    }
    this.trace("resolve", { key, original: write.seq, seq: newSeq, rebased: newSeq !== null });
  }

  _rebasedWrite(key, original, content, deleted) {
    const history = this._history(key);
    const old = history.length ? history[history.length - 1].revision : null;
    const msg = this.causal.makeData({ key, old_value: old, value: newRevision(), data: content, deleted });
    const seq = msg.vector[this.me];
    this._push(key, history, writeOf(msg));
    this._markResolved(original, seq);
    this.trace("resolution", { key, original, seq });
    this.causal.sendData(msg);
    this._changed(key);
    return seq;
  }

  _markResolved(seq, newSeq) {
    this._resolved.set(seq, newSeq);
    if (newSeq !== null) this._rebasedFrom.set(newSeq, seq);
    this.store.put(T_RESOLVED, pad(seq), newSeq);
    while (this._resolved.size > this.config.resolvedLimit) {
      const oldest = Math.min(...this._resolved.keys());
      const rebased = this._resolved.get(oldest);
      this._resolved.delete(oldest);
      if (rebased !== null) this._rebasedFrom.delete(rebased);
      this.store.delete(T_RESOLVED, pad(oldest));
    }
  }

  // -- Conflict messages from peers -----------------------------------------------------------

  _onConflict(msg) {
    if (msg.dest !== this.me) return;
    if (msg.loser_time > this.causal.sent) {
      this.trace("drop", { peer: msg.id, seq: msg.loser_time, reason: "unknown_write" });
      return;
    }
    const seq = msg.loser_time;
    if (this._resolved.has(seq) || this._rebaseQueue.has(seq) || this._pending.has(seq)) return;
    this.trace("conflict_msg", { peer: msg.id, key: msg.object, seq,
      winner: msgId(msg.winner, msg.winner_time) });
    this.causal.learn(msg.winner, msg.winner_time);
    if (this.causal.delivered(msg.winner) >= msg.winner_time) {
      this._settle(msg);
      return;
    }
    if (this._pending.size >= this.config.pendingConflictLimit) {
      this._pending.delete(Math.min(...this._pending.keys()));
    }
    this._pending.set(seq, msg);
  }

  _settle(msg) {
    if (this._resolved.has(msg.loser_time) || this._rebaseQueue.has(msg.loser_time)) return;
    this.staleConflicts++;
    this.trace("drop", { peer: msg.id, key: msg.object, seq: msg.loser_time, reason: "stale_conflict" });
  }
}
