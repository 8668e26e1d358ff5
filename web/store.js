// A small write-back store on localStorage, the browser's counterpart of the Python clients'
// sqlite store: tables of key -> JSON value, read once at start, written on `commit()`.
// Every client id has its own namespace (`gossamer:<id>:<table>:<key>`), so pages with
// different `?id=` in one browser profile keep separate replicas.

export class LocalStore {
  constructor(namespace, storage = globalThis.localStorage, onError = null) {
    this.prefix = `gossamer:${namespace}:`;
    this.storage = storage;
    this.onError = onError;
    this.tables = new Map(); // table -> Map(key -> value)
    this.dirty = new Map(); // storage key -> JSON text, or null to remove
    this.failed = false;
    for (let i = 0; i < storage.length; i++) {
      const name = storage.key(i);
      if (!name || !name.startsWith(this.prefix)) continue;
      const rest = name.slice(this.prefix.length);
      const cut = rest.indexOf(":");
      if (cut < 0) continue;
      try {
        this._table(rest.slice(0, cut)).set(rest.slice(cut + 1), JSON.parse(storage.getItem(name)));
      } catch {
        // a value we cannot read is as good as absent
      }
    }
  }

  _table(table) {
    let map = this.tables.get(table);
    if (!map) this.tables.set(table, (map = new Map()));
    return map;
  }

  get(table, key) {
    return this._table(table).get(key);
  }

  put(table, key, value) {
    this._table(table).set(key, value);
    this.dirty.set(`${this.prefix}${table}:${key}`, JSON.stringify(value));
  }

  delete(table, key) {
    if (this._table(table).delete(key)) this.dirty.set(`${this.prefix}${table}:${key}`, null);
  }

  /** [key, value] pairs of `table`, sorted by key. */
  scan(table) {
    return [...this._table(table).entries()].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  }

  clearTable(table) {
    for (const key of [...this._table(table).keys()]) this.delete(table, key);
  }

  commit() {
    if (!this.dirty.size) return;
    const dirty = this.dirty;
    this.dirty = new Map();
    for (const [name, text] of dirty) {
      try {
        if (text === null) this.storage.removeItem(name);
        else this.storage.setItem(name, text);
      } catch (exc) {
        if (!this.failed && this.onError) this.onError(exc);
        this.failed = true; // quota: the state lives on in memory, reloads lose the rest
      }
    }
  }

  /** Remove everything of this namespace (memory and storage). */
  wipe() {
    this.tables.clear();
    this.dirty.clear();
    const names = [];
    for (let i = 0; i < this.storage.length; i++) {
      const name = this.storage.key(i);
      if (name && name.startsWith(this.prefix)) names.push(name);
    }
    for (const name of names) this.storage.removeItem(name);
  }
}
