// Checks store.mjs against the key-value contract the component relies on
// (docs/embedding.md, "Checking a host"): runs the probe component (tests/kvprobe, built
// beside the component as edgehook_kvprobe.wasm) on this host's store and asks it for
// every rule.
//
//   node check-store.mjs path/to/edgehook_kvprobe.wasm
//
// Prints one line per rule; exits 0 when every rule holds. (The contention rules, many
// instances at once, need a host that runs instances concurrently; Node runs one.)

import { http as wasiHttp } from "@bytecodealliance/preview2-shim";
import { WASIShim } from "@bytecodealliance/preview2-shim/instantiation";
import { MemoryStore, keyvalueImports } from "./store.mjs";
import { load } from "./transpile.mjs";

const instantiate = await load(process.argv[2]);
const wasi = new WASIShim({ sandbox: { preopens: {}, env: {}, args: ["kvprobe"] } });
const probe = await instantiate({ ...wasi.getImportObject(), ...keyvalueImports(new MemoryStore()) });
const server = new wasiHttp.HTTPServer(probe.incomingHandler);
server.listen(0, "127.0.0.1");
try {
  const response = await fetch(`http://127.0.0.1:${server.address().port}/conformance?run=node`);
  const { rules } = await response.json();
  for (const { name, ok, detail } of rules) console.log(`${ok ? "ok  " : "FAIL"} ${name}: ${detail}`);
  const broken = rules.filter((rule) => !rule.ok).length;
  console.log(`${rules.length} rules, ${broken} broken`);
  process.exitCode = response.status === 200 && rules.length > 0 && broken === 0 ? 0 : 1;
} finally {
  server.stop();
}
