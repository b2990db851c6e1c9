// Verifies captured edgehook deliveries in Standard Webhooks mode with the official
// `standardwebhooks` package (npm, pinned in package-lock.json): the receiver's side,
// written as the standard's README shows it. Usage:
//   node verify.mjs SECRET CAPTURED.json
// CAPTURED.json: [{"headers": {name: value}, "body": "<the raw body, UTF-8>"}, ...].
// Prints one line per delivery and exits 0 only if every one verifies.
import { readFileSync } from "node:fs";
import { Webhook } from "standardwebhooks";

const [secret, file] = process.argv.slice(2);
const wh = new Webhook(secret);
let failed = 0;
for (const { headers, body } of JSON.parse(readFileSync(file, "utf8"))) {
  try {
    wh.verify(body, headers);
    console.log(`verified ${headers["webhook-id"]}`);
  } catch (e) {
    failed += 1;
    console.log(`REJECTED ${headers["webhook-id"]}: ${e.message}`);
  }
}
process.exit(failed === 0 ? 0 : 1);
