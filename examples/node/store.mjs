// What the embedder supplies itself: wasi:keyvalue@0.2.0-draft2 (store, atomics, batch) over
// an in-memory Map, and wasi:config/store@0.2.0-draft-2024-09-27 over a plain object.
//
// jco's calling convention for imports (see the .d.ts that `jco transpile` writes):
// - a `result<T, E>` import returns T, or throws E (a plain object such as
//   `{ tag: "other", val: "..." }`);
// - `option<T>` is T or `undefined`; `s64`/`u64` are BigInt; `list<u8>` is a Uint8Array;
// - a resource is a JS class passed in the import object (`Bucket`, `Cas`); the functions
//   that return one must return an instance of that very class.
//
// The rules the component relies on are in docs/embedding.md ("Key-value contract"). The
// ones a Map gets wrong unless it is careful:
// - a compare-and-swap must fail when anything wrote (or deleted) the key after `Cas.new`,
//   even if it wrote the same bytes: every write here stores a fresh entry object, and a
//   swap checks that the entry it began on is still the one in the Map (by identity);
// - a swap begun on a missing key must fail once another writer has created it;
// - counters start at 0 when missing, may go down, and `increment(k, 0)` reads one;
// - values are copied in and out (the bytes jco hands over may be a view into the guest's
//   memory).

/** The whole store: key → { bytes }. One flat keyspace; only bucket `default` exists. */
export class MemoryStore {
  entries = new Map();

  get(key) {
    return this.entries.get(key)?.bytes;
  }

  set(key, bytes) {
    this.entries.set(key, { bytes: Uint8Array.from(bytes) });
  }

  delete(key) {
    this.entries.delete(key);
  }
}

const storeError = (message) => ({ tag: "other", val: message });

/** The wasi:keyvalue interfaces over `store`, keyed as jco's `instantiate` expects. */
export function keyvalueImports(store) {
  class Bucket {
    get(key) {
      const bytes = store.get(key);
      return bytes === undefined ? undefined : Uint8Array.from(bytes);
    }
    set(key, value) {
      store.set(key, value);
    }
    delete(key) {
      store.delete(key);
    }
    exists(key) {
      return store.entries.has(key);
    }
    listKeys(cursor) {
      // One page holding every key: the component never lists (docs/embedding.md).
      return { keys: [...store.entries.keys()].filter((k) => cursor === undefined || k > cursor).sort() };
    }
  }

  const open = (identifier) => {
    if (identifier !== "default") throw { tag: "no-such-store" };
    return new Bucket();
  };

  class Cas {
    #key;
    #began; // the entry object the swap began on, or undefined for a missing key

    static new(_bucket, key) {
      const cas = new Cas();
      cas.#key = key;
      cas.#began = store.entries.get(key);
      return cas;
    }

    current() {
      return this.#began === undefined ? undefined : Uint8Array.from(this.#began.bytes);
    }

    static swap(cas, value) {
      if (store.entries.get(cas.#key) !== cas.#began) {
        // Someone wrote or deleted the key since `Cas.new`: the caller must begin again.
        throw { tag: "cas-failed", val: cas };
      }
      store.set(cas.#key, value);
    }
  }

  const increment = (_bucket, key, delta) => {
    const bytes = store.get(key);
    const text = bytes === undefined ? "0" : new TextDecoder().decode(bytes);
    if (!/^-?[0-9]{1,19}$/.test(text)) throw storeError(`${key} does not hold a counter`);
    const next = BigInt(text) + delta;
    if (next !== BigInt.asIntN(64, next)) throw storeError(`${key} would overflow`);
    store.set(key, new TextEncoder().encode(next.toString())); // counters as decimal text
    return next;
  };

  return {
    "wasi:keyvalue/store": { Bucket, open },
    "wasi:keyvalue/atomics": { Cas, increment, swap: Cas.swap },
    "wasi:keyvalue/batch": {
      // One entry per key asked for, in the order asked, `undefined` for a missing key.
      getMany: (bucket, keys) => keys.map((key) => [key, bucket.get(key)]),
      setMany: (bucket, pairs) => pairs.forEach(([key, value]) => bucket.set(key, value)),
      deleteMany: (bucket, keys) => keys.forEach((key) => bucket.delete(key)),
    },
  };
}

/** wasi:config/store over a plain object of snake_case keys (docs/design/configuration.md). */
export function configImports(settings) {
  const entries = Object.entries(settings).map(([k, v]) => [k, String(v)]);
  return {
    "wasi:config/store": {
      get: (key) => entries.find(([k]) => k === key)?.[1],
      getAll: () => entries,
    },
  };
}
