// The Colyseus side of benchmarks/appsync.py: one room type, "bench", whose state is one
// player per client holding the time of its last change; a client's "set" message changes its
// own player, and the room sends its state patches every PATCH_MS (the APSYN round time).
//   node server.mjs PORT PATCH_MS     prints "listening PORT" once it accepts clients
import { Server, Room } from "@colyseus/core";
import { WebSocketTransport } from "@colyseus/ws-transport";
import { Schema, MapSchema, defineTypes } from "@colyseus/schema";

class Player extends Schema {
  constructor() {
    super();
    this.t = 0; // the sender's clock (ms) when it made its last change
  }
}
defineTypes(Player, { t: "float64" });

class BenchState extends Schema {
  constructor() {
    super();
    this.players = new MapSchema();
  }
}
defineTypes(BenchState, { players: { map: Player } });

const port = Number(process.argv[2] || 2567);
const patchMs = Number(process.argv[3] || 50);

class BenchRoom extends Room {
  maxClients = 2000;

  onCreate() {
    this.setState(new BenchState());
    this.setPatchRate(patchMs);
    this.onMessage("set", (client, t) => {
      const player = this.state.players.get(client.sessionId);
      if (player !== undefined && typeof t === "number") player.t = t;
    });
  }

  onJoin(client) {
    this.state.players.set(client.sessionId, new Player());
  }

  onLeave(client) {
    this.state.players.delete(client.sessionId);
  }
}

const server = new Server({ transport: new WebSocketTransport({ maxPayload: 1 << 20 }),
                            greet: false });
server.define("bench", BenchRoom);
await server.listen(port, "127.0.0.1");
console.log(`listening ${port}`);
