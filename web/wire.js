// The wire format of seed 000 (docs/replica-wire.md), as src/gossamer/protocols/replica/wire.py
// speaks it: one JSON object per WebSocket text frame, told apart by a flag field.
//
// The checksum. `crc` is the unsigned CRC32 of the UTF-8 text `key|value`, plus `|<canonical
// JSON of data>` when the message carries content. Python computes the canonical JSON with
// orjson (keys sorted by code point, at every depth; no spaces; strings escaped as JSON.stringify
// does). Numbers are where JS and Python part ways, so this module renders them the way orjson
// renders the value Python decodes:
//   - an integer is rendered as an integer; it must be a safe integer (|n| < 2**53) when this
//     client writes it (Python keeps every digit of a big integer, JS cannot);
//   - a number that Python holds as a float (its JSON text has a `.` or an exponent, or this
//     client writes a non-integer) is rendered like orjson: `1.0` for an integral float, an
//     exponent for magnitudes >= 1e16 or < 1e-5 (`1e+16`, `1.5e-6`), shortest digits otherwise.
// A received message is checked against the numbers' text as it arrived (`parseRaw`), so a
// Python writer's `1.0` is checked as `1.0` although JSON.parse makes it `1`. A JS writer's
// content is JSON.stringify'd: integers go out as integers and non-integers as shortest digits,
// which Python reads back to the same float. So the rule for content written by this client:
// JSON values whose numbers are safe integers or non-integral finite numbers (`checkContent`).

export const HUB_ID = "hub";
export const MAX_RETRY_BATCH = 1024;

const ID_RE = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;

export class ProtocolError extends Error {}
export class ContentError extends Error {}

export function isId(value) {
  return typeof value === "string" && ID_RE.test(value);
}

// -- CRC32 ------------------------------------------------------------------------------------

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

export function crc32(bytes) {
  let c = 0xffffffff;
  for (let i = 0; i < bytes.length; i++) c = CRC_TABLE[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

const ENCODER = new TextEncoder();

/** CRC32 of `key|value`, with `|<canonical JSON>` of `data` when it is not null. */
export function crcOf(key, value, data) {
  let text = `${key}|${value}`;
  if (data !== null && data !== undefined) text += "|" + canonical(data);
  return crc32(ENCODER.encode(text));
}

// -- canonical JSON (orjson with OPT_SORT_KEYS) -----------------------------------------------

/** A number as it was written in a received frame (see `parseRaw`). */
export class RawNumber {
  constructor(text) {
    this.text = text;
  }
}

/** How orjson renders the Python float `v`. */
export function pyFloat(v) {
  if (!Number.isFinite(v)) throw new ContentError(`${v} is not a JSON number`);
  if (Object.is(v, -0)) return "-0.0";
  const a = Math.abs(v);
  if (a >= 1e16 || a < 1e-5) return v.toExponential(); // 1e+16, 1.5e-6 (JS: from 1e21, 1e-7)
  const text = String(v);
  return Number.isInteger(v) ? text + ".0" : text;
}

/** Python's str order (code points), which orjson sorts keys by. */
export function codePointCompare(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.codePointAt(i);
    const y = b.codePointAt(i);
    if (x !== y) return x < y ? -1 : 1;
    if (x > 0xffff) i++;
  }
  return a.length - b.length;
}

function isPlainObject(v) {
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/** The canonical JSON text of a JSON value; throws ContentError on anything else. */
export function canonical(v) {
  if (v === null) return "null";
  if (v instanceof RawNumber) {
    const t = v.text;
    if (/[.eE]/.test(t)) return pyFloat(Number(t));
    return t === "-0" ? "0" : t;
  }
  switch (typeof v) {
    case "boolean":
      return v ? "true" : "false";
    case "number":
      if (!Number.isFinite(v)) throw new ContentError(`${v} is not a JSON number`);
      if (Number.isInteger(v)) {
        if (!Number.isSafeInteger(v)) {
          throw new ContentError(`${v} is beyond 2**53: Python would not read back the same number`);
        }
        return String(v);
      }
      return pyFloat(v);
    case "string":
      if (!v.isWellFormed()) throw new ContentError("a string with a lone surrogate is not JSON");
      return JSON.stringify(v);
    case "object":
      if (Array.isArray(v)) return "[" + v.map(canonical).join(",") + "]";
      if (!isPlainObject(v)) throw new ContentError(`a ${v.constructor?.name} is not JSON`);
      return "{" + Object.keys(v).sort(codePointCompare)
        .map((k) => {
          if (!k.isWellFormed()) throw new ContentError("a key with a lone surrogate is not JSON");
          return JSON.stringify(k) + ":" + canonical(v[k]);
        })
        .join(",") + "}";
    default:
      throw new ContentError(`a ${typeof v} is not JSON`);
  }
}

/** Check that `content` is JSON whose checksum Python computes the same way; returns a copy. */
export function checkContent(content) {
  canonical(content);
  return JSON.parse(JSON.stringify(content));
}

// -- parsing with the numbers' text kept ------------------------------------------------------

const NUMBER_RE = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;

/** JSON.parse, except that every number is a RawNumber holding its text. */
export function parseRaw(text) {
  let i = 0;
  const fail = () => {
    throw new ProtocolError(`not JSON at offset ${i}`);
  };
  const skip = () => {
    while (i < text.length) {
      const c = text.charCodeAt(i);
      if (c === 32 || c === 9 || c === 10 || c === 13) i++;
      else break;
    }
  };
  const string = () => {
    if (text[i] !== '"') fail();
    let j = i + 1;
    while (j < text.length && text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
    if (j >= text.length) fail();
    const s = JSON.parse(text.slice(i, j + 1));
    i = j + 1;
    return s;
  };
  const value = () => {
    skip();
    const c = text[i];
    if (c === "{") {
      i++;
      const obj = Object.create(null);
      skip();
      if (text[i] === "}") {
        i++;
        return obj;
      }
      for (;;) {
        skip();
        const key = string();
        skip();
        if (text[i++] !== ":") fail();
        obj[key] = value();
        skip();
        const sep = text[i++];
        if (sep === "}") return obj;
        if (sep !== ",") fail();
      }
    }
    if (c === "[") {
      i++;
      const arr = [];
      skip();
      if (text[i] === "]") {
        i++;
        return arr;
      }
      for (;;) {
        arr.push(value());
        skip();
        const sep = text[i++];
        if (sep === "]") return arr;
        if (sep !== ",") fail();
      }
    }
    if (c === '"') return string();
    for (const [word, val] of [["true", true], ["false", false], ["null", null]]) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return val;
      }
    }
    NUMBER_RE.lastIndex = i;
    const m = NUMBER_RE.exec(text);
    if (!m) fail();
    i = NUMBER_RE.lastIndex;
    return new RawNumber(m[0]);
  };
  const result = value();
  skip();
  if (i !== text.length) fail();
  return result;
}

// -- decoding ---------------------------------------------------------------------------------

/** Whether a decoded data message's crc matched (set by `decode`; JSON.stringify skips it). */
export const CRC_OK = Symbol("crcOk");

const FLAGS = ["nack", "retry", "conflict", "subscribe", "clear", "stop", "snapshot", "welcome",
  "refused"];
const OPTIONAL = { welcome: ["token"] }; // fields a message may leave out
const FIELDS = {
  nack: ["id", "dest", "start", "end"],
  retry: ["id", "dest", "retry"],
  conflict: ["id", "dest", "loser_time", "winner", "winner_time", "object"],
  subscribe: ["id", "vector"],
  clear: ["id"],
  stop: ["id"],
  snapshot: ["id", "dest", "vector", "objects", "last"],
  welcome: ["id", "dest", "resume"],
  refused: ["id", "dest", "code", "reason"],
};
const DATA_FIELDS = new Set(["id", "key", "old_value", "value", "crc", "vector", "data", "deleted"]);
const KINDS = {
  id: "id", dest: "id", winner: "id", start: "int", end: "int", loser_time: "int",
  winner_time: "int", object: "string", vector: "vector", last: "bool", resume: "int",
  code: "int", reason: "string", token: "string",
};

function isInt(v) {
  return typeof v === "number" && Number.isInteger(v);
}

function noExtra(obj, allowed, what) {
  const extra = Object.keys(obj).filter((k) => !allowed.has(k));
  if (extra.length) throw new ProtocolError(`${what}: unknown field(s) ${extra.sort().join(", ")}`);
}

function checkVector(vector, what) {
  if (typeof vector !== "object" || vector === null || Array.isArray(vector)) {
    throw new ProtocolError(`${what}: vector must be an object`);
  }
  for (const [node, count] of Object.entries(vector)) {
    if (!isId(node)) throw new ProtocolError(`${what}: vector key ${node} is not a client id`);
    if (!isInt(count) || count < 0) throw new ProtocolError(`${what}: vector entry ${node} < 0`);
  }
}

function checkField(obj, name, kind, what) {
  if (!(name in obj)) throw new ProtocolError(`${what}: missing field ${name}`);
  const v = obj[name];
  const ok = kind === "id" ? isId(v)
    : kind === "int" ? isInt(v)
      : kind === "string" ? typeof v === "string"
        : kind === "bool" ? typeof v === "boolean" : true;
  if (!ok) throw new ProtocolError(`${what}: field ${name} has the wrong type`);
  if (kind === "vector") checkVector(v, what);
}

function checkData(obj, raw, what) {
  if (typeof obj !== "object" || obj === null || Array.isArray(obj) || !("key" in obj)) {
    throw new ProtocolError(`${what}: not a data message`);
  }
  noExtra(obj, DATA_FIELDS, what);
  checkField(obj, "id", "id", what);
  if (typeof obj.key !== "string" || !obj.key) throw new ProtocolError(`${what}: bad key`);
  const old = obj.old_value ?? null;
  if (old !== null && typeof old !== "string") throw new ProtocolError(`${what}: bad old_value`);
  if (typeof obj.value !== "string") throw new ProtocolError(`${what}: bad value`);
  if (!isInt(obj.crc) || obj.crc < 0 || obj.crc > 0xffffffff) throw new ProtocolError(`${what}: bad crc`);
  checkField(obj, "vector", "vector", what);
  if ((obj.vector[obj.id] ?? 0) < 1) throw new ProtocolError(`${what}: vector[id] must be >= 1`);
  const deleted = obj.deleted ?? false;
  if (typeof deleted !== "boolean") throw new ProtocolError(`${what}: bad deleted`);
  const data = obj.data ?? null;
  const msg = { id: obj.id, key: obj.key, old_value: old, value: obj.value, crc: obj.crc,
    vector: { ...obj.vector } };
  if (data !== null) msg.data = data;
  if (deleted) msg.deleted = true;
  let ok;
  try {
    ok = msg.crc === crcOf(msg.key, msg.value, data === null ? null : raw().data);
  } catch {
    ok = false;
  }
  msg[CRC_OK] = ok;
  return msg;
}

function checkSnapshotWrite(row, key) {
  const bad = (why) => {
    throw new ProtocolError(`snapshot: object ${key}: ${why}`);
  };
  if (!Array.isArray(row) || row.length !== 6) bad("a write is [revision, old, writer, seq, content, deleted]");
  const [revision, old, writer, seq, , deleted] = row;
  if (typeof revision !== "string" || !revision) bad("bad revision");
  if (old !== null && typeof old !== "string") bad("bad old revision");
  if (!isId(writer)) bad("bad writer");
  if (!isInt(seq) || seq < 1) bad("bad seq");
  if (typeof deleted !== "boolean") bad("bad deleted flag");
}

/**
 * Decode one frame: `{type, msg}` with `type` one of data, nack, retry, conflict, subscribe,
 * clear, stop, snapshot, welcome, refused, left. A data message (also inside a retry) carries `msg[CRC_OK]`.
 */
export function decode(text) {
  let obj;
  try {
    obj = JSON.parse(text);
  } catch (exc) {
    throw new ProtocolError(`not JSON: ${exc.message}`);
  }
  if (typeof obj !== "object" || obj === null || Array.isArray(obj)) {
    throw new ProtocolError("expected a JSON object");
  }
  if (typeof obj.id !== "string") throw new ProtocolError("message: missing field id");
  let rawTree;
  const raw = () => (rawTree ??= parseRaw(text));
  for (const flag of FLAGS) {
    if (!(flag in obj)) continue;
    if (flag !== "retry" && obj[flag] !== true) throw new ProtocolError(`flag ${flag} must be true`);
    const names = FIELDS[flag];
    const optional = OPTIONAL[flag] ?? [];
    noExtra(obj, new Set([...names, ...optional, flag]), flag);
    const msg = {};
    for (const name of names) {
      if (name === "retry" || name === "objects") continue;
      checkField(obj, name, KINDS[name], flag);
      msg[name] = obj[name];
    }
    for (const name of optional) {
      if (obj[name] === undefined || obj[name] === null) continue;
      checkField(obj, name, KINDS[name], flag);
      msg[name] = obj[name];
    }
    if (flag === "retry") {
      if (!Array.isArray(obj.retry)) throw new ProtocolError("retry: field retry must be a list");
      if (obj.retry.length > MAX_RETRY_BATCH) throw new ProtocolError("retry: too many messages");
      msg.retry = obj.retry.map((part, n) => checkData(part, () => raw().retry[n], "retry"));
    } else if (flag === "snapshot") {
      const objects = obj.objects;
      if (typeof objects !== "object" || objects === null || Array.isArray(objects)) {
        throw new ProtocolError("snapshot: objects must be an object");
      }
      for (const [key, path] of Object.entries(objects)) {
        if (!key || !Array.isArray(path) || !path.length) {
          throw new ProtocolError(`snapshot: object ${key} needs a non-empty path`);
        }
        for (const row of path) checkSnapshotWrite(row, key);
      }
      msg.objects = objects;
    } else if (flag === "nack" && (msg.start < 1 || msg.end < msg.start)) {
      throw new ProtocolError("nack: need 1 <= start <= end");
    } else if (flag === "conflict" && (msg.loser_time < 1 || msg.winner_time < 1)) {
      throw new ProtocolError("conflict: times are sequence numbers >= 1");
    }
    return { type: flag, msg };
  }
  if ("left" in obj) {
    noExtra(obj, new Set(["id", "left"]), "left");
    checkField(obj, "left", "id", "left");
    return { type: "left", msg: { id: obj.id, left: obj.left } };
  }
  if ("key" in obj) return { type: "data", msg: checkData(obj, raw, "data") };
  throw new ProtocolError("no flag and no key: not a seed-000 message");
}

// -- encoding ---------------------------------------------------------------------------------

/** A data message in the wire's field order. */
export function dataMessage({ id, key, old_value, value, vector, data, deleted }) {
  const msg = { id, key, old_value, value, crc: crcOf(key, value, data), vector };
  if (data !== null && data !== undefined) msg.data = data;
  if (deleted) msg.deleted = true;
  return msg;
}

/** A subscribe; `token` (the join's: the first subscribe of a connection) proves the id. */
export const subscribe = (id, vector, token = null) => (
  token === null ? { id, vector, subscribe: true } : { id, vector, subscribe: true, token });
export const nack = (id, dest, start, end) => ({ id, dest, start, end, nack: true });
export const retry = (id, dest, parts) => ({ id, dest, retry: parts });
export const conflict = (id, dest, loserTime, winner, winnerTime, object) => (
  { id, dest, loser_time: loserTime, winner, winner_time: winnerTime, object, conflict: true });
export const clear = (id) => ({ id, clear: true });
export const stop = (id) => ({ id, stop: true });

export function encode(msg) {
  return JSON.stringify(msg);
}
