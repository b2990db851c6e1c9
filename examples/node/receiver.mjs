// A subscriber's endpoint on a loopback port, in a worker thread of its own: while the
// component runs `tick`, preview2-shim blocks the main thread until each outgoing request
// has its answer, so a receiver on the main thread could never answer.
//
// It verifies every delivery with the Node verifier partners copy (docs/verify/verify.mjs,
// imported as it is), answers 204 when it verifies and 400 when it does not, and tells the
// main thread what it got. The main thread sends the subscription's signing secret first.

import { createServer } from "node:http";
import { parentPort } from "node:worker_threads";
import { Receiver, Rejected } from "../../docs/verify/verify.mjs";

let receiver = null;
parentPort.on("message", ({ secret }) => {
  receiver = new Receiver(secret);
  parentPort.postMessage({ armed: true });
});

const server = createServer((req, res) => {
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk));
  req.on("end", () => {
    const rawBody = Buffer.concat(chunks); // the bytes as they came, never re-serialized
    const now = Math.floor(Date.now() / 1000);
    const seen = { method: req.method, path: req.url, body: rawBody.toString("utf8") };
    try {
      if (receiver === null) throw new Rejected("no secret yet");
      const { deliveryId, event, duplicate } = receiver.handle(req.headers, rawBody, now, () => {});
      res.writeHead(204).end();
      parentPort.postMessage({ ...seen, verified: true, deliveryId, event, duplicate });
    } catch (e) {
      if (!(e instanceof Rejected)) throw e;
      res.writeHead(400).end();
      parentPort.postMessage({ ...seen, verified: false, reason: e.message });
    }
  });
});

server.listen(0, "127.0.0.1", () => parentPort.postMessage({ port: server.address().port }));
