#!/usr/bin/env python3
"""Verify edgehook webhook deliveries (Python 3.8+, standard library only).

Usage:
  python3 verify.py vectors docs/signature-vectors.json
      Checks every test vector (with "now" = the vector's timestamp), and checks that a
      tampered body, a stale timestamp, a timestamp from the future and a repeated delivery
      id are rejected. Exits 0 when everything holds, 1 otherwise.
  python3 verify.py capture delivery.json
      Verifies one captured delivery: {"secret", "headers": {name: value}, "bodyBase64",
      "now"} ("now" in Unix seconds). Prints the delivery id and event and exits 0 when it
      verifies; prints the reason and exits 1 when it does not.

The part between the BEGIN and END marker comments is what docs/verifying.md shows.
"""

import base64
import json
import sys

# BEGIN verifier
import hashlib
import hmac
import re

TOLERANCE_SECONDS = 5 * 60  # reject timestamps more than 5 minutes old (or ahead)


class Rejected(Exception):
    """The delivery must be answered with 400 (or 401) and not processed."""


def verify(secret, headers, raw_body, now):
    """Checks one delivery. `headers` maps lowercase header names to values, `raw_body`
    is the request body exactly as received (bytes, never re-serialized JSON) and `now`
    is the current Unix time in seconds. Returns (delivery_id, event) or raises Rejected."""
    timestamp = headers.get("x-service-timestamp", "")
    signature = headers.get("x-service-signature", "")
    delivery_id = headers.get("x-service-delivery-id", "")
    event = headers.get("x-service-event", "")
    if not (timestamp and signature and delivery_id and event):
        raise Rejected("missing X-Service-* header")
    if not re.fullmatch(r"[0-9]{1,12}", timestamp):
        raise Rejected("X-Service-Timestamp is not Unix seconds")
    age = now - int(timestamp)
    if age > TOLERANCE_SECONDS:
        raise Rejected("timestamp too old")
    if age < -TOLERANCE_SECONDS:
        raise Rejected("timestamp too far in the future")
    # HMAC-SHA256 over "<timestamp>.<raw body>", keyed with the secret's UTF-8 bytes
    # (the whole "whsec_..." string, not base64-decoded).
    signed = timestamp.encode("ascii") + b"." + raw_body
    expected = hmac.new(secret.encode("utf-8"), signed, hashlib.sha256).hexdigest()
    # During a secret rotation X-Service-Signatures lists the new secret's signature and the
    # old one's: either secret verifies (X-Service-Signature stays the old one's).
    candidates = [signature] + headers.get("x-service-signatures", "").split(",")
    matches = [hmac.compare_digest(expected.encode("ascii"), c.strip().encode("utf-8"))
               for c in candidates]
    if not any(matches):
        raise Rejected("signature mismatch")
    return delivery_id, event


class Receiver:
    """Verifies, then deduplicates by X-Service-Delivery-Id: retries and replays reuse it.
    This in-memory set is for illustration; in production keep the ids in a durable store
    shared by every instance (a table with a unique key, or Redis SET NX with an expiry of
    a few days)."""

    def __init__(self, secret):
        self.secret = secret
        self.seen = set()

    def handle(self, headers, raw_body, now, process):
        """Verifies and, unless it is a repeat, hands the delivery to `process` (keep it
        quick, e.g. enqueue; answer 2xx, do the expensive work later). Returns
        (delivery_id, event, is_duplicate); answer 2xx to duplicates too."""
        headers = {name.lower(): value for name, value in headers.items()}
        delivery_id, event = verify(self.secret, headers, raw_body, now)
        if delivery_id in self.seen:
            return delivery_id, event, True
        process(event, raw_body)  # if this raises, the id stays unseen and a retry is processed
        self.seen.add(delivery_id)
        return delivery_id, event, False
# END verifier


def delivery_headers(vector, delivery_id):
    """The headers edgehook would send with the vector's timestamp and signature (during a
    rotation's overlap: X-Service-Signature the previous secret's, both in the list)."""
    headers = {
        "Content-Type": "application/json",
        "X-Service-Delivery-Id": delivery_id,
        "X-Service-Event": "load.updated",
        "X-Service-Timestamp": str(vector["timestamp"]),
        "X-Service-Signature": vector["signature"],
    }
    if "previousSignature" in vector:
        headers["X-Service-Signature"] = vector["previousSignature"]
        headers["X-Service-Signatures"] = vector["signature"] + "," + vector["previousSignature"]
    return headers


def ignore(_event, _body):
    """A `process` callback that does nothing."""


def check_vectors(path):
    """Every vector verifies; tampering, staleness and repeats are caught."""
    with open(path, "rb") as f:
        vectors = json.loads(f.read().decode("utf-8"))
    if not isinstance(vectors, list) or not vectors:
        print("no vectors in " + path)
        return False
    ok = True

    def report(passed, name, label, outcome):
        nonlocal ok
        ok = ok and passed
        print("%s %s: %s (%s)" % ("ok  " if passed else "FAIL", name, label, outcome))

    for index, vector in enumerate(vectors):
        name = vector["name"]
        body = vector["body"].encode("utf-8")
        ts = vector["timestamp"]
        delivery_id = "dlv_vector_%d" % index
        headers = delivery_headers(vector, delivery_id)
        cases = [
            ("verifies", body, ts, None),
            ("rejects a tampered body", body + b" ", ts, "signature mismatch"),
            ("rejects a stale timestamp", body, ts + TOLERANCE_SECONDS + 1, "timestamp too old"),
            ("rejects a future timestamp", body, ts - TOLERANCE_SECONDS - 1,
             "timestamp too far in the future"),
        ]
        for label, raw, now, want in cases:
            try:
                got = Receiver(vector["secret"]).handle(headers, raw, now, ignore)
                report(want is None and got[0] == delivery_id, name, label, "accepted")
            except Rejected as e:
                report(str(e) == want, name, label, "rejected: %s" % e)
        if "previousSecret" in vector:
            try:
                got = Receiver(vector["previousSecret"]).handle(headers, body, ts, ignore)
                report(got[0] == delivery_id, name, "verifies with the previous secret", "accepted")
            except Rejected as e:
                report(False, name, "verifies with the previous secret", "rejected: %s" % e)
        processed = []
        receiver = Receiver(vector["secret"])
        try:
            first = receiver.handle(headers, body, ts, lambda e, b: processed.append(b))[2]
            second = receiver.handle(headers, body, ts + 60, lambda e, b: processed.append(b))[2]
            passed = not first and second and processed == [body]
            report(passed, name, "a repeated delivery id is processed once", "%d processed" % len(processed))
        except Rejected as e:
            report(False, name, "a repeated delivery id is processed once", "rejected: %s" % e)
    return ok


def check_capture(path):
    """Verifies one captured delivery."""
    with open(path, "rb") as f:
        capture = json.loads(f.read().decode("utf-8"))
    body = base64.b64decode(capture["bodyBase64"], validate=True)
    try:
        delivery_id, event, _ = Receiver(capture["secret"]).handle(
            capture["headers"], body, capture["now"], ignore
        )
    except Rejected as e:
        print("rejected: %s" % e)
        return False
    print("ok %s %s" % (delivery_id, event))
    return True


def main(argv):
    """Command-line entry point; returns the exit status."""
    if len(argv) != 3 or argv[1] not in ("vectors", "capture"):
        print("usage: verify.py vectors|capture FILE", file=sys.stderr)
        return 2
    good = check_vectors(argv[2]) if argv[1] == "vectors" else check_capture(argv[2])
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
