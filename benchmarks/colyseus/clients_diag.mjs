// The load generator of benchmarks/appsync.py, the same for both servers: CLIENTS clients over
// WebSocket, each changing its own property RATE times a second (the value is the time of the
// change on this process's clock); SAMPLE of them are instrumented (they decode everything and
// time each change from its making to its arrival), the others are light (they send their
// changes and decode only what the protocol needs to go on: nothing for Colyseus, the round
// numbers of APSYN's headers).
//
//   node clients.mjs SYSTEM URL CLIENTS SAMPLE WARMUP_S MEASURE_S RATE [GATHER [EAGER [QUIET]]]
//     SYSTEM colyseus | apsyn
//     GATHER (apsyn) answer each round this fraction of its min time late, with the changes
//            made meanwhile, as gossamer's peers do with PeerConfig.gather (default 0: at once)
//     EAGER  (apsyn) 1: send each change when it is made, in the answer if it is still to
//            come, else in a rqst of its own for the open round (PeerConfig.eager)
//     QUIET  (apsyn) 1: answer a round only with changes to send, or when tout/2 rounds went
//            by without a rqst, so CTRL does not drop the client for silence (PeerConfig.quiet)
//
// Prints "measuring" when the measured window starts and "done" when it ends (the driver reads
// the server's CPU time at both), then one JSON line of results.
import { Client } from "colyseus.js";
import WebSocket from "ws";

const [system, url, clientsArg, sampleArg, warmupArg, measureArg, rateArg, gatherArg,
  eagerArg, quietArg] = process.argv.slice(2);
const CLIENTS = Number(clientsArg);
const SAMPLE = Math.min(Number(sampleArg), CLIENTS);
const WARMUP = Number(warmupArg) * 1000;
const MEASURE = Number(measureArg) * 1000;
const PERIOD = 1000 / Number(rateArg);
const GATHER = Number(gatherArg || 0);
const EAGER = eagerArg === "1";
const QUIET = quietArg === "1";
const JOINS_AT_ONCE = 20;

let measuring = false;
const latencies = []; // ms, at the instrumented clients, inside the window
let received = 0; // changes seen by the instrumented clients inside the window
let sent = 0; // changes made inside the window, by every client
let errors = 0;
let syncs = 0; // syncs that client 0 received inside the window (APSYN: the rounds)
let frames = 0; // frames the clients sent inside the window (APSYN: answers and eager rqsts)
const now = () => performance.now();
const phases = []; // ms from client 0's latest sync arrival to each change any client makes
const gaps = []; // ms between client 0's syncs
let lastSync = 0;

function changed() {
  if (measuring) { sent += 1; if (lastSync > 0) phases.push(now() - lastSync); }
  return now();
}

function seen(t) {
  if (!measuring || !(t > 0)) return;
  received += 1;
  latencies.push(now() - t);
}

// -- Colyseus ----------------------------------------------------------------------------------

async function colyseusClient(index, instrumented) {
  const client = new Client(url);
  const room = await client.joinOrCreate("bench");
  if (instrumented) {
    const last = new Map();
    room.onStateChange((state) => {
      state.players.forEach((player, key) => {
        if (player.t !== last.get(key)) {
          last.set(key, player.t);
          seen(player.t);
        }
      });
    });
  } else {
    room.serializer.patch = () => {}; // light: the patches are received, not decoded
  }
  room.onError(() => { errors += 1; });
  setTimeout(() => setInterval(() => room.send("set", changed()), PERIOD),
             Math.random() * PERIOD);
}

// -- APSYN -------------------------------------------------------------------------------------

const HEADER = /"c":"([0-9A-Fa-f]{4})","r":"([0-9A-Fa-f]{4})","l":"([0-9A-Fa-f]{4})"/;
const MIN_MS = /"sc":\{"min":"([0-9A-Fa-f]{1,8})"/;
const TOUT = /"tout":"([0-9A-Fa-f]{1,4})"/;

function apsynClient(index, instrumented, onRound) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { perMessageDeflate: false });
    let cid = null;
    let change = null; // the time of the latest change not yet sent
    let created = index !== 0; // client 0 creates the shared board
    let delay = 0; // ms from a sync to its answer (GATHER x the session's min round time)
    let pending = null; // the gathering answer's timer
    let open = null; // the round the latest sync began (an eager change is for it)
    let keep = 1; // QUIET: a rqst at least every this many rounds (tout / 2)
    let silent = 0; // QUIET: syncs received since the last rqst sent
    ws.on("open", () => {
      ws.send('{"h":{"p":"APSYN/01","c":"","r":"0000","l":"0000"},"b":{"id":"bench"}}');
    });
    ws.on("error", (err) => { errors += 1; reject(err); });
    ws.on("close", () => { if (cid === null) reject(new Error("closed before its init")); });
    ws.on("message", (data) => {
      if (measuring && index === 0) { syncs += 1; if (lastSync > 0) gaps.push(now() - lastSync); }
      if (index === 0) lastSync = now();
      const head = HEADER.exec(data.toString("latin1", 0, 120));
      if (head === null) { errors += 1; return; }
      const round = head[2] === "0000" ? head[3] : head[2]; // an init's l: the round to answer
      open = round;
      if (cid === null) {
        cid = head[1];
        const min = MIN_MS.exec(data.toString("latin1", 0, 200));
        delay = min === null ? 0 : GATHER * parseInt(min[1], 16);
        const tout = TOUT.exec(data.toString("latin1", 0, 200));
        keep = tout === null ? 1 : Math.max(1, Math.floor(parseInt(tout[1], 16) / 2));
        setTimeout(() => setInterval(() => {
          change = changed();
          if (EAGER) { // now: the answer if it is still to come, else a rqst of its own
            if (pending !== null) { clearTimeout(pending); pending = null; }
            answer(open);
          }
        }, PERIOD), Math.random() * PERIOD);
        resolve();
      }
      if (instrumented) {
        const body = JSON.parse(data.toString()).b;
        for (const action of body.syn || []) {
          if (action.t !== "upd") continue;
          if (action.i.n.startsWith("board.p")) seen(action.d);
          else if (action.i.n === "board" && action.d !== null && typeof action.d === "object") {
            for (const t of Object.values(action.d)) seen(t); // a round's changes in one upd
          }
        }
      }
      silent += 1;
      if (QUIET && created && change === null && silent < keep) {
        // nothing to say this round
      } else if (delay > 0) {
        pending = setTimeout(() => { pending = null; answer(round); }, delay);
      } else {
        answer(round);
      }
      if (onRound) onRound();
    });

    function answer(round) {
      const actions = [];
      if (!created) {
        actions.push({ t: "cre", i: { s: "G", n: "board" }, m: "RW", d: {} });
        created = true;
      } else if (change !== null) {
        actions.push({ t: "upd", i: { s: "G", n: `board.p${cid}` }, d: change });
        change = null;
      }
      if (measuring) frames += 1;
      silent = 0;
      ws.send(`{"h":{"p":"APSYN/01","c":"${cid}","r":"${round}","l":"${round}"},"b":` +
              `${JSON.stringify(actions)}}`);
    }
  });
}

// -- the run -----------------------------------------------------------------------------------

async function startAll() {
  const make = system === "colyseus" ? colyseusClient : apsynClient;
  if (system === "apsyn") {
    // the board first: the others' changes are properties of it
    let rounds = 0;
    await new Promise((resolve, reject) => {
      apsynClient(0, SAMPLE > 0, () => { rounds += 1; if (rounds === 3) resolve(); })
        .catch(reject);
    });
  } else {
    await make(0, SAMPLE > 0);
  }
  for (let start = 1; start < CLIENTS; start += JOINS_AT_ONCE) {
    const batch = [];
    for (let i = start; i < Math.min(start + JOINS_AT_ONCE, CLIENTS); i++) {
      batch.push(make(i, i < SAMPLE));
    }
    await Promise.all(batch);
  }
}

function percentile(sorted, q) {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

await startAll();
await new Promise((resolve) => setTimeout(resolve, WARMUP));
console.log("measuring");
measuring = true;
await new Promise((resolve) => setTimeout(resolve, MEASURE));
measuring = false;
console.log("done");
latencies.sort((a, b) => a - b);
console.log(JSON.stringify({
  system, clients: CLIENTS, sample: SAMPLE, seconds: MEASURE / 1000,
  p50_ms: percentile(latencies, 0.5), p99_ms: percentile(latencies, 0.99),
  pct: [0.01,0.1,0.25,0.5,0.75,0.9,0.99].map((q) => percentile(latencies, q)),
  phase: (() => { phases.sort((a, b) => a - b); return [0.1,0.25,0.5,0.75,0.9].map((q) => percentile(phases, q)); })(),
  gaps: (() => { gaps.sort((a, b) => a - b); return [0.1,0.5,0.9,0.99].map((q) => percentile(gaps, q)); })(),
  received, sent, errors, syncs, frames,
}));
process.exit(0);
