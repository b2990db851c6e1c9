"""Embedding the edgehook component in Python with wasmtime-py (docs/embedding.md, "Python").

    python host.py [path/to/edgehook_component.wasm]

What wasmtime-py (PyPI `wasmtime`, pinned in requirements.txt) can do here, and what not:

- WASI (clocks, random, io, cli) comes from `Linker.add_wasip2`, outgoing HTTP from
  `Linker.add_wasi_http` (wasmtime's own client).
- wasi:keyvalue (store, atomics, batch) and wasi:config are this file's: `add_instance`,
  `add_resource` and `add_func` over an in-memory dict.
- The typed exports work: `events.publish` and `scheduler.tick`.
- The HTTP export (`wasi:http/incoming-handler`) cannot be called: it takes an
  `incoming-request` and a `response-outparam`, resources of wasmtime's WASI HTTP
  implementation, and the C API that wasmtime-py wraps has no function that makes either.
  Every partner and operator route (API keys, subscriptions) is behind that export, so this
  host can make no subscription, and a publish creates no delivery.

So this host checks what it can: it links every import, instantiates the component, publishes
an event (receipt: an event id, 0 deliveries), sees an unknown event type refused with the
WIT error case, and ticks. Exits 0 when all of that holds. The whole story (a subscription,
a delivery, a verified signature) is the Node.js host's (examples/node).
"""

import secrets
import sys
from pathlib import Path

from wasmtime import Config, Engine, Store, WasiConfig
from wasmtime.component import Component, Linker, ResourceHost, ResourceType, Variant

HERE = Path(__file__).resolve().parent
DEFAULT_WASM = HERE / "../../target/guest/wasm32-wasip2/guest/edgehook_component.wasm"

KV = "wasi:keyvalue/{}@0.2.0-draft2"
BUCKET, CAS = 1, 2  # this host's ids for its two resource types


class MemoryStore:
    """One flat keyspace. Every write stores a fresh version number, so a compare-and-swap
    fails after any write or delete since it began, even one of the same bytes."""

    def __init__(self):
        self.entries = {}  # key -> (version, bytes)
        self.version = 0  # each write stores a new (version, bytes) entry; a swap checks identity
        self.swaps = {}  # rep of a live `cas` -> (key, the entry it began on, or None)
        self.next_cas = 0

    def get(self, key):
        entry = self.entries.get(key)
        return None if entry is None else entry[1]

    def set(self, key, value):
        self.version += 1
        self.entries[key] = (self.version, bytes(value))

    def delete(self, key):
        self.entries.pop(key, None)


def link_keyvalue(linker, store):
    """wasi:keyvalue@0.2.0-draft2 as the component uses it (docs/embedding.md, "Key-value
    contract"). Resources are host integers ("reps"); methods get the handle first.

    wasmtime-py lowers a `result` by the Python value's class: `None` or bytes are `ok`,
    a `ResourceHost` for `swap` is `err(cas-failed(..))`. A store this simple never fails,
    so no `error` is ever returned (raising in a host function traps the guest)."""

    def rep(s, handle):
        """The host's integer behind a handle the guest passed in (wasmtime-py hands it over
        as a `ResourceAny`). `to_host` also ends a borrow: every handle passed in must go
        through it (or `drop`) exactly once, or the call traps ("borrow handles still
        remain")."""
        return handle.to_host(s).rep

    def method(body):
        """A function taking a bucket first: the bucket is always the one; release it."""

        def call(s, bucket, *args):
            rep(s, bucket)
            return body(*args)

        return call

    def set_many(pairs):
        # Each pair written in order (a publish's delivery records, a batch's outcomes).
        for key, value in pairs:
            store.set(key, value)

    def increment(key, delta):
        text = (store.get(key) or b"0").decode()
        value = int(text) + delta
        store.set(key, str(value).encode())  # counters as decimal text
        return value

    def new_cas(key):
        store.next_cas += 1
        store.swaps[store.next_cas] = (key, store.entries.get(key))
        return ResourceHost.own(store.next_cas, CAS)

    def cas_current(s, cas):
        began = store.swaps[rep(s, cas)][1]
        return None if began is None else began[1]

    def swap(s, cas, value):
        key, began = store.swaps.pop(rep(s, cas))
        if store.entries.get(key) is not began:
            # Written or deleted since `cas.new`: hand the (new) handle back, the caller
            # begins again.
            return new_cas(key)
        store.set(key, value)
        return None

    with linker.root() as root:
        with root.add_instance(KV.format("store")) as kv:
            kv.add_resource("bucket", ResourceType.host(BUCKET), lambda s, r: None)
            kv.add_func("open", lambda s, name: ResourceHost.own(1, BUCKET))
            kv.add_func("[method]bucket.get", method(store.get))
            kv.add_func("[method]bucket.set", method(store.set))
            kv.add_func("[method]bucket.delete", method(store.delete))
        with root.add_instance(KV.format("atomics")) as atomics:
            atomics.add_resource("cas", ResourceType.host(CAS), lambda s, r: store.swaps.pop(r, None))
            atomics.add_func("[static]cas.new", method(new_cas))
            atomics.add_func("[method]cas.current", cas_current)
            atomics.add_func("increment", method(increment))
            atomics.add_func("swap", swap)
        with root.add_instance(KV.format("batch")) as batch:
            # One entry per key asked for, in order, None for a missing key.
            get_many = method(lambda keys: [(k, store.get(k)) for k in keys])
            batch.add_func("get-many", get_many)
            batch.add_func("set-many", method(set_many))


def link_config(linker, settings):
    """wasi:config/store over a dict of snake_case keys (docs/design/configuration.md)."""
    pairs = [(k, str(v)) for k, v in settings.items()]
    with linker.root() as root:
        with root.add_instance("wasi:config/store@0.2.0-draft-2024-09-27") as config:
            config.add_func("get", lambda s, key: dict(pairs).get(key))
            config.add_func("get-all", lambda s: pairs)


def field(record, name):
    """A field of a WIT record (wasmtime-py keeps the WIT names, dashes included)."""
    return getattr(record, name)


def main():
    wasm = Path(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_WASM)
    print(f"-- component: {wasm}")
    engine = Engine(Config())
    component = Component.from_file(engine, str(wasm))

    linker = Linker(engine)
    linker.add_wasip2()
    linker.add_wasi_http()
    kv = MemoryStore()
    link_keyvalue(linker, kv)
    settings = {
        "admin_token": "python-host-operator-token",
        "opportunistic_tick_s": 0,
        # Signing secrets are sealed under it in the store; keep it apart from the store.
        "seal_key": secrets.token_hex(32),
    }
    link_config(linker, settings)

    store = Store(engine)
    store.set_wasi(WasiConfig())  # no files, no environment, no arguments
    store.set_wasi_http()
    instance = linker.instantiate(store, component)
    print("-- linked every import and instantiated the component")

    def export(interface, name):
        iface = instance.get_export_index(store, interface)
        func = instance.get_func(store, instance.get_export_index(store, name, iface))
        assert func is not None, f"{interface}#{name} is not exported"
        return func

    publish = export("edgehook:webhooks/events@0.1.0", "publish")
    tick = export("edgehook:webhooks/scheduler@0.1.0", "tick")

    load = b'{"id":"L-1","status":"ASSIGNED"}'
    receipt = publish(store, "load.created", load)
    publish.post_return(store)
    assert not isinstance(receipt, Variant), f"publish refused: {receipt}"
    event_id, deliveries = field(receipt, "event-id"), field(receipt, "deliveries")
    print(f"-- published {event_id}: {deliveries} deliveries (there is no subscription)")
    assert event_id.startswith("evt_") and deliveries == 0, receipt
    assert any(load == value for _, value in kv.entries.values()), "the load is stored as is"

    refused = publish(store, "load.deleted", load)
    publish.post_return(store)
    assert isinstance(refused, Variant) and refused.tag == "unknown-event-type", refused
    print(f"-- load.deleted refused: {refused.tag}({refused.payload})")

    report = tick(store)
    tick.post_return(store)
    attempted, next_due = field(report, "attempted"), field(report, "next-due-ms")
    print(f"-- tick: {attempted} attempted, next due {next_due}")
    assert attempted == 0, report

    print(f"ok: {len(kv.entries)} keys in the store; the HTTP API is out of reach (see above)")


if __name__ == "__main__":
    main()
