// Embedding the edgehook component in Node.js (docs/embedding.md, "Node.js").
//
//   node host.mjs [path/to/edgehook_component.wasm]
//
// 1. jco transpiles the component (transpile.mjs) to a JS module whose `instantiate`
//    takes every import as a JS object.
// 2. The imports: WASI (clocks, random, io, http, cli) from @bytecodealliance/preview2-shim,
//    sandboxed (no files, no environment); wasi:keyvalue and wasi:config from store.mjs; the
//    outgoing handler wrapped in an allow list (the embedder's outbound policy).
// 3. The story: preview2-shim's HTTPServer serves the component's HTTP API on a loopback
//    port; the operator issues a partner key and the partner subscribes a loopback receiver
//    (receiver.mjs, a worker thread) over that API; the platform publishes through the
//    `events` export; the host's timer calls `scheduler.tick` when `next-due-ms` says; the
//    receiver verifies the signature with docs/verify/verify.mjs; with `seal_key` set (a
//    random key here; the platform's secret store in production), no value in the store
//    holds the signing secret, in text or base64.
// Exits 0 when the delivery arrived and verified, 1 otherwise.

import { http as wasiHttp } from "@bytecodealliance/preview2-shim";
import { WASIShim } from "@bytecodealliance/preview2-shim/instantiation";
import { randomBytes } from "node:crypto";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import { MemoryStore, configImports, keyvalueImports } from "./store.mjs";
import { load } from "./transpile.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const wasmPath =
  process.argv[2] ?? join(here, "../../target/guest/wasm32-wasip2/guest/edgehook_component.wasm");
const ADMIN_TOKEN = "node-host-operator-token";
const DEADLINE_MS = 20_000; // the whole story; a failed attempt 1 is retried only after 60 s

const fail = (message) => {
  console.log(`FAILED: ${message}`);
  process.exit(1);
};
const step = (message) => console.log(`-- ${message}`);

/** The next message from `worker` that `wanted` accepts (or a failure after the deadline). */
function nextMessage(worker, wanted) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("no message from the receiver")), DEADLINE_MS);
    const listen = (message) => {
      if (!wanted(message)) return;
      clearTimeout(timer);
      worker.off("message", listen);
      resolve(message);
    };
    worker.on("message", listen);
  });
}

/** 2. The imports. `allowed` is the set of `host:port` the component may send to. */
function imports(store, settings, allowed) {
  const wasi = new WASIShim({ sandbox: { preopens: {}, env: {}, args: ["edgehook"] } });
  const outgoing = {
    handle(request, options) {
      // The embedder's outbound policy, before any connection: the component records
      // the refusal as a failed attempt (`HTTP-request-denied`).
      if (!allowed.has(request.authority())) throw { tag: "HTTP-request-denied" };
      return wasiHttp.outgoingHandler.handle(request, options);
    },
  };
  return {
    ...wasi.getImportObject(),
    "wasi:http/outgoing-handler": outgoing,
    ...keyvalueImports(store),
    ...configImports(settings),
  };
}

/** A JSON request to the component's HTTP API; returns [status, parsed body]. */
async function call(base, method, path, token, body) {
  const response = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return [response.status, await response.json()];
}

async function main() {
  step(`component: ${wasmPath}`);
  const instantiate = await load(wasmPath); // 1.

  const receiverThread = new Worker(new URL("./receiver.mjs", import.meta.url));
  const { port: receiverPort } = await nextMessage(receiverThread, (m) => "port" in m);
  const hookUrl = `http://127.0.0.1:${receiverPort}/hook`;

  const settings = {
    admin_token: ADMIN_TOKEN,
    // Signing secrets are stored sealed under this key (64 hex digits); keep it apart from
    // the store: docs/operations.md, "The secrets key".
    seal_key: randomBytes(32).toString("hex"),
    // The receiver is plain http on loopback, which the component refuses by default
    // (SSRF rules): both switches are for development only.
    allow_http: true,
    allow_private_targets: true,
    // This host owns the timer; no tick piggybacks on API requests.
    opportunistic_tick_s: 0,
  };
  const store = new MemoryStore();
  const allowed = new Set([`127.0.0.1:${receiverPort}`]);
  const edgehook = await instantiate(imports(store, settings, allowed));

  // 3. The HTTP API on a loopback port, served by preview2-shim (its I/O thread accepts the
  // connection; the component's incoming-handler runs on this thread).
  const server = new wasiHttp.HTTPServer(edgehook.incomingHandler);
  server.listen(0, "127.0.0.1");
  const api = `http://127.0.0.1:${server.address().port}`;
  step(`HTTP API on ${api}, receiver on ${hookUrl}`);

  try {
    const [issued, key] = await call(api, "POST", "/internal/v1/clients/acme/keys", ADMIN_TOKEN);
    if (issued !== 201) fail(`issuing a key answered ${issued}: ${JSON.stringify(key)}`);
    step(`operator issued a key for client acme (${key.data.apiKey.slice(0, 8)}...)`);

    const [created, sub] = await call(api, "POST", "/v1/webhooks", key.data.apiKey, {
      url: hookUrl,
      eventTypes: ["load.created"],
    });
    if (created !== 201) fail(`creating the subscription answered ${created}: ${JSON.stringify(sub)}`);
    step(`partner subscribed ${sub.data.id} to load.created at ${sub.data.url}`);
    receiverThread.postMessage({ secret: sub.data.signingSecret });
    await nextMessage(receiverThread, (m) => "armed" in m);

    const load = '{"id":"L-1","externalId":"EXT-1","status":"ASSIGNED","createdAt":1700000000000}';
    const delivered = nextMessage(receiverThread, (m) => "verified" in m);
    const receipt = edgehook.events.publish("load.created", new TextEncoder().encode(load));
    step(`published ${receipt.eventId}: ${receipt.deliveries} delivery, next due ${receipt.nextDueMs}`);

    // The host's timer: tick when next-due-ms says, until the delivery has been made.
    const started = Date.now();
    let due = receipt.nextDueMs;
    while (due !== undefined) {
      const wait = Number(due) - Date.now();
      if (Date.now() + wait - started > DEADLINE_MS) break;
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      const report = edgehook.scheduler.tick();
      step(
        `tick: ${report.attempted} attempted, ${report.succeeded} succeeded, ` +
          `${report.failed} failed, next due ${report.nextDueMs ?? "none"}`,
      );
      if (report.succeeded > 0) break;
      due = report.nextDueMs;
    }

    const got = await delivered;
    if (!got.verified) fail(`the receiver rejected the delivery: ${got.reason}`);
    if (got.body !== load) fail(`the body changed on the way: ${got.body}`);
    step(`receiver got ${got.method} ${got.path}: ${got.event} ${got.deliveryId}`);
    const holding = (text) =>
      [...store.entries].filter(([key, { bytes }]) =>
        [text, Buffer.from(text).toString("base64"), Buffer.from(text).toString("base64url")].some(
          (form) => key.includes(form) || Buffer.from(bytes).includes(form),
        ),
      ).length;
    if (holding(sub.data.id) === 0) fail("the search finds no subscription id in the store");
    const secretAt = holding(sub.data.signingSecret);
    if (secretAt !== 0) fail(`${secretAt} stored values hold the signing secret`);
    step(`the store holds no signing secret (sealed under seal_key), ${store.entries.size} keys`);
    console.log(`verified: ${got.deliveryId} (${got.event}), body byte for byte as published`);
  } finally {
    server.stop();
    await receiverThread.terminate();
  }
}

main().then(
  () => process.exit(0),
  (e) => fail(e?.stack ?? JSON.stringify(e)),
);
