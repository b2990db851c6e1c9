#!/usr/bin/env node
// Verify edgehook webhook deliveries (Node.js 18+, built-in modules only).
//
// Usage:
//   node verify.mjs vectors docs/signature-vectors.json
//       Checks every test vector (with "now" = the vector's timestamp), and checks that a
//       tampered body, a stale timestamp, a timestamp from the future and a repeated delivery
//       id are rejected. Exits 0 when everything holds, 1 otherwise.
//   node verify.mjs capture delivery.json
//       Verifies one captured delivery: {"secret", "headers": {name: value}, "bodyBase64",
//       "now"} ("now" in Unix seconds). Prints the delivery id and event and exits 0 when it
//       verifies; prints the reason and exits 1 when it does not.
//
// The part between the BEGIN and END marker comments is what docs/verifying.md shows.

import { readFileSync, realpathSync } from "node:fs";
import { pathToFileURL } from "node:url";

// BEGIN verifier
import { createHmac, timingSafeEqual } from "node:crypto";

const TOLERANCE_SECONDS = 5 * 60; // reject timestamps more than 5 minutes old (or ahead)

export class Rejected extends Error {}

/**
 * Checks one delivery. `headers` maps lowercase header names to values (Node's
 * `req.headers` already does), `rawBody` is a Buffer with the body exactly as received
 * (never JSON.stringify(JSON.parse(...))) and `now` is the current Unix time in seconds.
 * Returns { deliveryId, event } or throws Rejected.
 */
export function verify(secret, headers, rawBody, now) {
  const timestamp = headers["x-service-timestamp"] ?? "";
  const signature = headers["x-service-signature"] ?? "";
  const deliveryId = headers["x-service-delivery-id"] ?? "";
  const event = headers["x-service-event"] ?? "";
  if (!timestamp || !signature || !deliveryId || !event) {
    throw new Rejected("missing X-Service-* header");
  }
  if (!/^[0-9]{1,12}$/.test(timestamp)) {
    throw new Rejected("X-Service-Timestamp is not Unix seconds");
  }
  const age = now - Number(timestamp);
  if (age > TOLERANCE_SECONDS) throw new Rejected("timestamp too old");
  if (age < -TOLERANCE_SECONDS) throw new Rejected("timestamp too far in the future");
  // HMAC-SHA256 over "<timestamp>.<raw body>", keyed with the secret's UTF-8 bytes
  // (the whole "whsec_..." string, not base64-decoded).
  const expected = createHmac("sha256", Buffer.from(secret, "utf8"))
    .update(Buffer.from(timestamp + ".", "ascii"))
    .update(rawBody)
    .digest();
  // During a secret rotation X-Service-Signatures lists the new secret's signature and the
  // old one's: either secret verifies (X-Service-Signature stays the old one's).
  const candidates = [signature, ...(headers["x-service-signatures"] ?? "").split(",")];
  const matches = candidates
    .map((c) => c.trim())
    .filter((c) => /^[0-9a-f]{64}$/.test(c))
    .map((c) => timingSafeEqual(expected, Buffer.from(c, "hex")));
  if (!matches.includes(true)) throw new Rejected("signature mismatch");
  return { deliveryId, event };
}

/**
 * Verifies, then deduplicates by X-Service-Delivery-Id: retries and replays reuse it.
 * This in-memory Set is for illustration; in production keep the ids in a durable store
 * shared by every instance (a table with a unique key, or Redis SET NX with an expiry of
 * a few days).
 */
export class Receiver {
  constructor(secret) {
    this.secret = secret;
    this.seen = new Set();
  }

  /**
   * Verifies and, unless it is a repeat, hands the delivery to `process` (keep it quick,
   * e.g. enqueue; answer 2xx, do the expensive work later). Returns
   * { deliveryId, event, duplicate }; answer 2xx to duplicates too.
   */
  handle(headers, rawBody, now, process) {
    const lower = Object.fromEntries(
      Object.entries(headers).map(([name, value]) => [name.toLowerCase(), value]),
    );
    const { deliveryId, event } = verify(this.secret, lower, rawBody, now);
    if (this.seen.has(deliveryId)) return { deliveryId, event, duplicate: true };
    process(event, rawBody); // if this throws, the id stays unseen and a retry is processed
    this.seen.add(deliveryId);
    return { deliveryId, event, duplicate: false };
  }
}
// END verifier

/** The headers edgehook would send with the vector's timestamp and signature. */
function deliveryHeaders(vector, deliveryId) {
  const headers = {
    "Content-Type": "application/json",
    "X-Service-Delivery-Id": deliveryId,
    "X-Service-Event": "load.updated",
    "X-Service-Timestamp": String(vector.timestamp),
    "X-Service-Signature": vector.signature,
  };
  // During a rotation's overlap: X-Service-Signature the previous secret's, both listed.
  if (vector.previousSignature) {
    headers["X-Service-Signature"] = vector.previousSignature;
    headers["X-Service-Signatures"] = `${vector.signature},${vector.previousSignature}`;
  }
  return headers;
}

const ignore = () => {};

/** Every vector verifies; tampering, staleness and repeats are caught. */
function checkVectors(path) {
  const vectors = JSON.parse(readFileSync(path, "utf8"));
  if (!Array.isArray(vectors) || vectors.length === 0) {
    console.log(`no vectors in ${path}`);
    return false;
  }
  let ok = true;
  const report = (passed, name, label, outcome) => {
    ok = ok && passed;
    console.log(`${passed ? "ok  " : "FAIL"} ${name}: ${label} (${outcome})`);
  };
  vectors.forEach((vector, index) => {
    const { name, timestamp: ts } = vector;
    const body = Buffer.from(vector.body, "utf8");
    const deliveryId = `dlv_vector_${index}`;
    const headers = deliveryHeaders(vector, deliveryId);
    const cases = [
      ["verifies", body, ts, null],
      ["rejects a tampered body", Buffer.concat([body, Buffer.from(" ")]), ts, "signature mismatch"],
      ["rejects a stale timestamp", body, ts + TOLERANCE_SECONDS + 1, "timestamp too old"],
      [
        "rejects a future timestamp",
        body,
        ts - TOLERANCE_SECONDS - 1,
        "timestamp too far in the future",
      ],
    ];
    for (const [label, raw, now, want] of cases) {
      try {
        const got = new Receiver(vector.secret).handle(headers, raw, now, ignore);
        report(want === null && got.deliveryId === deliveryId, name, label, "accepted");
      } catch (e) {
        if (!(e instanceof Rejected)) throw e;
        report(e.message === want, name, label, `rejected: ${e.message}`);
      }
    }
    if (vector.previousSecret) {
      const with_ = "verifies with the previous secret";
      try {
        const got = new Receiver(vector.previousSecret).handle(headers, body, ts, ignore);
        report(got.deliveryId === deliveryId, name, with_, "accepted");
      } catch (e) {
        if (!(e instanceof Rejected)) throw e;
        report(false, name, with_, `rejected: ${e.message}`);
      }
    }
    const label = "a repeated delivery id is processed once";
    const processed = [];
    const receiver = new Receiver(vector.secret);
    try {
      const first = receiver.handle(headers, body, ts, (e, b) => processed.push(b));
      const second = receiver.handle(headers, body, ts + 60, (e, b) => processed.push(b));
      const passed =
        !first.duplicate && second.duplicate && processed.length === 1 && processed[0].equals(body);
      report(passed, name, label, `${processed.length} processed`);
    } catch (e) {
      if (!(e instanceof Rejected)) throw e;
      report(false, name, label, `rejected: ${e.message}`);
    }
  });
  return ok;
}

/** Verifies one captured delivery. */
function checkCapture(path) {
  const capture = JSON.parse(readFileSync(path, "utf8"));
  const body = Buffer.from(capture.bodyBase64, "base64");
  try {
    const { deliveryId, event } = new Receiver(capture.secret).handle(
      capture.headers,
      body,
      capture.now,
      ignore,
    );
    console.log(`ok ${deliveryId} ${event}`);
    return true;
  } catch (e) {
    if (!(e instanceof Rejected)) throw e;
    console.log(`rejected: ${e.message}`);
    return false;
  }
}

const isMain =
  process.argv[1] !== undefined &&
  import.meta.url === pathToFileURL(realpathSync(process.argv[1])).href;
if (isMain) {
  const [mode, file] = process.argv.slice(2);
  if (process.argv.length !== 4 || !["vectors", "capture"].includes(mode)) {
    console.error("usage: node verify.mjs vectors|capture FILE");
    process.exit(2);
  }
  process.exit((mode === "vectors" ? checkVectors(file) : checkCapture(file)) ? 0 : 1);
}
