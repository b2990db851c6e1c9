"""Verifies captured edgehook deliveries in Standard Webhooks mode with the official
`standardwebhooks` package (PyPI, pinned in requirements.txt): the receiver's side, written
as the standard's README shows it. Usage:
    python verify.py SECRET CAPTURED.json
CAPTURED.json: [{"headers": {name: value}, "body": "<the raw body, UTF-8>"}, ...].
Prints one line per delivery and exits 0 only if every one verifies.
"""
import json
import sys

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

secret, path = sys.argv[1], sys.argv[2]
wh = Webhook(secret)
failed = 0
with open(path, encoding="utf-8") as f:
    captured = json.load(f)
for delivery in captured:
    headers, body = delivery["headers"], delivery["body"]
    try:
        wh.verify(body.encode(), headers, json_parse=False)
        print(f"verified {headers['webhook-id']}")
    except WebhookVerificationError as e:
        failed += 1
        print(f"REJECTED {headers['webhook-id']}: {e}")
sys.exit(0 if failed == 0 else 1)
