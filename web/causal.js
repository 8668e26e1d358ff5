// Causal delivery of seed-000 data messages: a port of
// src/gossamer/protocols/ordering/causal.py (read its docstring for the design).
//
// A vector counts, per client id, the data messages delivered here (own entry: sent). A data
// message carries its sender's vector with the sender's entry counting it, so vector[id] is its
// sequence number. It is delivered when it is the sender's next one and everything else its
// vector counts was delivered here; duplicates are dropped; anything else waits in a bounded
// holdback queue while the gaps its vector reveals are NACKed to their origins (only beyond
// what was already asked for: the seed's high_ends; then re-NACKed with backoff). Own messages
// are kept in a bounded durable send log that answers NACKs and Subscribes. The client repeats
// its Subscribe (its vector) with backoff after publishing, so a lost last message is found.

import {
  CRC_OK, HUB_ID, MAX_RETRY_BATCH, dataMessage, isId, nack, retry, subscribe,
} from "./wire.js";

const T_VECTOR = "vector";
const T_LOG = "log";
const T_META = "meta";
const RETRY_BYTES = 32 * 1024; // a retry frame stays well under the hub's 64 KiB

export const CAUSAL_DEFAULTS = {
  holdbackLimit: 10000,
  sendLogLimit: 1000, // localStorage is small: the hub's log (1,000 per origin) serves most
  retryBatch: 256,
  maxNackRanges: 8,
  nackDelay: 0.05,
  nackRetry: 0.25,
  nackRetryCap: 2.0,
  announceInterval: 0.5,
  announceCap: 5.0,
};

const pad = (seq) => String(seq).padStart(12, "0");
export const msgId = (origin, seq) => `${origin}:${seq}`;

export class CausalDelivery {
  /**
   * me: own id; store: LocalStore; send(msg): to the hub (dropped while offline);
   * onDeliver(msg): every delivered data message; trace(event, fields): what happened.
   */
  constructor({ me, store, send, onDeliver, trace, config }) {
    this.me = me;
    this.store = store;
    this.send = send;
    this.onDeliver = onDeliver;
    this.trace = trace ?? (() => {});
    this.config = { ...CAUSAL_DEFAULTS, ...config };
    this.duplicates = 0;
    this._vector = new Map();
    this._sendLog = new Map();
    this._logFirst = 1;
    this._holdback = new Map(); // origin -> Map(seq -> msg)
    this._held = 0;
    this._gaps = new Map(); // origin -> {knownHigh, requested, promptTimer, retryTimer, retryInterval}
    this._heard = false;
    this._covered = false;
    this._announceTimer = null;
    this._announceDelay = this.config.announceInterval;
    for (const [origin, count] of store.scan(T_VECTOR)) this._vector.set(origin, count);
    for (const [, msg] of store.scan(T_LOG)) this._sendLog.set(msg.vector[me], msg);
    this._logFirst = store.get(T_META, "log_first") ?? 1;
  }

  // -- lifecycle ------------------------------------------------------------------------------

  start() {
    this._heard = false;
    this._sendSubscribe();
    this._armAnnounce(true);
  }

  stop() {
    for (const gap of this._gaps.values()) this._cancelGapTimers(gap);
    this._gaps.clear();
    clearTimeout(this._announceTimer);
    this._announceTimer = null;
    this.store.commit();
  }

  /** A data, retry, nack or subscribe message from the hub. */
  onMessage(type, msg) {
    const vectors = type === "retry" ? msg.retry.map((p) => p.vector)
      : type === "data" || type === "subscribe" ? [msg.vector] : [];
    for (const vector of vectors) {
      for (const client of Object.keys(vector)) {
        if (!isId(client)) throw new Error(`vector names an invalid client id ${client}`);
      }
    }
    this._heard = true;
    if (type === "data") this._receive(msg, true);
    else if (type === "retry") this._onRetry(msg);
    else if (type === "nack") this._onNack(msg);
    else if (type === "subscribe") this._onSubscribe(msg);
    else throw new Error(`causal layer got ${type}`);
    this.store.commit();
  }

  // -- inspection -----------------------------------------------------------------------------

  get vector() {
    return Object.fromEntries(this._vector);
  }

  get holdbackSize() {
    return this._held;
  }

  /** Held messages, for the demo's holdback box: [{id, seq, key}], by origin then seq. */
  held() {
    const out = [];
    for (const [origin, held] of this._holdback) {
      for (const seq of [...held.keys()].sort((a, b) => a - b)) {
        out.push({ id: origin, seq, key: held.get(seq).key });
      }
    }
    return out;
  }

  get sent() {
    return this._vector.get(this.me) ?? 0;
  }

  get heard() {
    return this._heard;
  }

  noteHeard() {
    this._heard = true;
  }

  get caughtUp() {
    return this._gaps.size === 0 && this._held === 0;
  }

  delivered(origin) {
    return this._vector.get(origin) ?? 0;
  }

  gaps() {
    return Object.fromEntries([...this._gaps].map(([o, g]) => [o, g.knownHigh]));
  }

  /**
   * The hub knows of `seq` messages of this id, more than this store sent: a new incarnation
   * (a fresh or restored store). Own messages are numbered after `seq` from now on.
   */
  resumeAfter(seq) {
    if (seq <= this.sent) return false;
    this._vector.set(this.me, seq);
    this.store.put(T_VECTOR, this.me, seq);
    this.store.commit();
    return true;
  }

  // -- publishing -----------------------------------------------------------------------------

  /** Take the next sequence number and log the message (the caller then calls sendData). */
  makeData({ key, old_value, value, data, deleted }) {
    const seq = this.sent + 1;
    const vector = this.vector;
    vector[this.me] = seq;
    const msg = dataMessage({ id: this.me, key, old_value, value, vector, data, deleted });
    this._vector.set(this.me, seq);
    this.store.put(T_VECTOR, this.me, seq);
    this._sendLog.set(seq, msg);
    this.store.put(T_LOG, pad(seq), msg);
    while (this._sendLog.size > this.config.sendLogLimit) {
      const evicted = this._logFirst++;
      if (this._sendLog.delete(evicted)) this.store.delete(T_LOG, pad(evicted));
    }
    this.store.put(T_META, "log_first", this._logFirst);
    return msg;
  }

  sendData(msg) {
    this.store.commit();
    this.trace("publish", { origin: this.me, key: msg.key, seq: msg.vector[this.me],
      rev: msg.value, old: msg.old_value });
    this.send(msg);
    this._armAnnounce(true);
  }

  sentMessage(seq) {
    return this._sendLog.get(seq) ?? null;
  }

  /** A snapshot made at `vector` (entry-wise at least ours) was installed. */
  install(vector) {
    for (const [origin, count] of Object.entries(vector)) {
      if (count > (this._vector.get(origin) ?? 0)) {
        this._vector.set(origin, count);
        this.store.put(T_VECTOR, origin, count);
      }
    }
    for (const [origin, held] of [...this._holdback]) {
      for (const seq of [...held.keys()]) {
        if (seq <= (this._vector.get(origin) ?? 0)) {
          held.delete(seq);
          this._held--;
        }
      }
      if (!held.size) this._holdback.delete(origin);
    }
    this._drain();
    for (const [origin, gap] of [...this._gaps]) this._updateGap(origin, gap);
  }

  // -- announcing -----------------------------------------------------------------------------

  _sendSubscribe() {
    this.send(subscribe(this.me, this.vector));
  }

  _wantsAnnounce() {
    return this.sent > 0 || !this._heard;
  }

  _armAnnounce(reset) {
    if (reset) {
      this._announceDelay = this.config.announceInterval;
      clearTimeout(this._announceTimer);
      this._announceTimer = null;
    }
    if (this._announceTimer !== null || !this._wantsAnnounce()) return;
    const delay = this._announceDelay * (0.5 + 0.5 * Math.random());
    this._announceTimer = setTimeout(() => this._announceDue(), delay * 1000);
  }

  _announceDue() {
    this._announceTimer = null;
    if (!this._wantsAnnounce()) return;
    if (!this._covered || !this._heard) this._sendSubscribe();
    this._covered = false;
    this._announceDelay = Math.min(this._announceDelay * 2, this.config.announceCap);
    this._armAnnounce(false);
  }

  _onSubscribe(msg) {
    if (msg.id === this.me) return;
    this._learnVector(msg.vector);
    const theirs = msg.vector[this.me] ?? 0;
    if (theirs < this.sent) this._resend(msg.id, theirs + 1, this.sent);
    else this._covered = true;
  }

  _learnVector(vector) {
    for (const [origin, high] of Object.entries(vector)) {
      if (high > (this._vector.get(origin) ?? 0)) this.learn(origin, high);
    }
  }

  // -- answering NACKs ------------------------------------------------------------------------

  _onNack(msg) {
    if (msg.dest !== this.me) return;
    const end = Math.min(msg.end, this.sent, msg.start + MAX_RETRY_BATCH - 1);
    if (end >= msg.start) this._resend(msg.id, msg.start, end);
  }

  _resend(dest, start, end) {
    if (start < this._logFirst) {
      this.trace("drop", { peer: dest, origin: this.me, seq: start, reason: "evicted" });
      start = this._logFirst;
    }
    let batch = [];
    let size = 0;
    for (let seq = start; seq <= end; seq++) {
      const msg = this._sendLog.get(seq);
      if (!msg) continue;
      const length = JSON.stringify(msg).length + 1;
      if (batch.length && (batch.length === this.config.retryBatch || size + length > RETRY_BYTES)) {
        this.send(retry(this.me, dest, batch));
        batch = [];
        size = 0;
      }
      batch.push(msg);
      size += length;
    }
    if (batch.length) this.send(retry(this.me, dest, batch));
  }

  // -- receiving ------------------------------------------------------------------------------

  _onRetry(msg) {
    if (msg.dest !== this.me) return;
    for (const part of msg.retry) this._receive(part, false);
  }

  _receive(msg, multicast) {
    const origin = msg.id;
    const seq = msg.vector[origin];
    if (msg[CRC_OK] === false) {
      this.trace("drop", { origin, key: msg.key, seq, reason: "crc" });
      this.learn(origin, seq); // NACK it: the copy was damaged
      return;
    }
    const mine = msg.vector[this.me] ?? 0;
    if (multicast && mine >= this.sent) this._covered = true;
    if (origin === this.me || mine > this.sent) {
      if (seq > this.sent || origin !== this.me) {
        this.trace("drop", { origin, seq, reason: "own_future" });
      } else {
        this.duplicates++;
      }
      return;
    }
    const have = this._vector.get(origin) ?? 0;
    let held = this._holdback.get(origin);
    if (seq <= have || (held && held.has(seq))) {
      this.duplicates++;
      return;
    }
    if (seq === have + 1 && this._depsMet(msg)) {
      this._deliver(msg);
      this._drain();
      return;
    }
    if (this._held >= this.config.holdbackLimit) {
      this.trace("drop", { origin, key: msg.key, seq, reason: "holdback_full" });
    } else {
      if (!held) this._holdback.set(origin, (held = new Map()));
      held.set(seq, msg);
      this._held++;
      this.trace("hold", { origin, key: msg.key, seq });
    }
    this._learnVector(msg.vector);
  }

  _depsMet(msg) {
    for (const [other, count] of Object.entries(msg.vector)) {
      if (other !== msg.id && count > (this._vector.get(other) ?? 0)) return false;
    }
    return true;
  }

  _deliver(msg) {
    const origin = msg.id;
    const seq = msg.vector[origin];
    this._vector.set(origin, seq);
    this.store.put(T_VECTOR, origin, seq);
    this.trace("deliver", { origin, key: msg.key, seq });
    if (this.onDeliver) this.onDeliver(msg);
    const gap = this._gaps.get(origin);
    if (gap) this._updateGap(origin, gap);
  }

  _drain() {
    let progressed = true;
    while (progressed && this._held) {
      progressed = false;
      for (const [origin, held] of [...this._holdback]) {
        for (;;) {
          const msg = held.get((this._vector.get(origin) ?? 0) + 1);
          if (!msg || !this._depsMet(msg)) break;
          held.delete(msg.vector[origin]);
          this._held--;
          this._deliver(msg);
          progressed = true;
        }
        if (!held.size) this._holdback.delete(origin);
      }
    }
  }

  // -- gaps and NACKs -------------------------------------------------------------------------

  /** Messages 1..high of `origin` exist; NACK those missing here. */
  learn(origin, high) {
    if (origin === this.me || origin === HUB_ID || high <= (this._vector.get(origin) ?? 0)) return;
    let gap = this._gaps.get(origin);
    if (!gap) {
      gap = { knownHigh: high, requested: this._vector.get(origin) ?? 0, promptTimer: null,
        retryTimer: null, retryInterval: this.config.nackRetry };
      this._gaps.set(origin, gap);
    } else if (high > gap.knownHigh) {
      gap.knownHigh = high;
    }
    this._updateGap(origin, gap);
  }

  _updateGap(origin, gap) {
    if ((this._vector.get(origin) ?? 0) >= gap.knownHigh) {
      this._cancelGapTimers(gap);
      this._gaps.delete(origin);
      this.trace("gap_closed", { origin, caughtUp: this.caughtUp });
      return;
    }
    if (gap.knownHigh > gap.requested && gap.promptTimer === null) {
      gap.promptTimer = setTimeout(() => this._nackPrompt(origin), this.config.nackDelay * 1000);
    } else if (gap.promptTimer === null && gap.retryTimer === null) {
      gap.retryTimer = setTimeout(() => this._nackRetry(origin), gap.retryInterval * 1000);
    }
  }

  _cancelGapTimers(gap) {
    clearTimeout(gap.promptTimer);
    clearTimeout(gap.retryTimer);
    gap.promptTimer = gap.retryTimer = null;
  }

  _nackPrompt(origin) {
    const gap = this._gaps.get(origin);
    if (!gap) return;
    gap.promptTimer = null;
    const floor = Math.max(this._vector.get(origin) ?? 0, gap.requested);
    this._sendNacks(origin, this.missingRanges(origin, floor + 1, gap.knownHigh));
    gap.requested = Math.max(gap.requested, gap.knownHigh);
    if (gap.retryTimer === null) {
      gap.retryTimer = setTimeout(() => this._nackRetry(origin), gap.retryInterval * 1000);
    }
  }

  _nackRetry(origin) {
    const gap = this._gaps.get(origin);
    if (!gap) return;
    gap.retryTimer = null;
    const ranges = this.missingRanges(origin, (this._vector.get(origin) ?? 0) + 1, gap.knownHigh);
    if (!ranges.length) return;
    this._sendNacks(origin, ranges);
    gap.requested = Math.max(gap.requested, gap.knownHigh);
    gap.retryInterval = Math.min(gap.retryInterval * 2, this.config.nackRetryCap);
    gap.retryTimer = setTimeout(() => this._nackRetry(origin), gap.retryInterval * 1000);
  }

  /** Inclusive ranges of start..end neither delivered nor held (bounded in count and size). */
  missingRanges(origin, start, end) {
    const held = [...(this._holdback.get(origin)?.keys() ?? [])]
      .filter((s) => s >= start && s <= end).sort((a, b) => a - b);
    const ranges = [];
    const add = (low, high) => {
      ranges.push([low, Math.min(high, low + MAX_RETRY_BATCH - 1)]);
      return ranges.length < this.config.maxNackRanges;
    };
    let low = start;
    for (const seq of held) {
      if (seq > low && !add(low, seq - 1)) return ranges;
      low = seq + 1;
    }
    if (low <= end) add(low, end);
    return ranges;
  }

  _sendNacks(origin, ranges) {
    for (const [start, end] of ranges) {
      this.send(nack(this.me, origin, start, end));
      this.trace("nack", { origin, start, end });
    }
  }
}
