// Loading a component in Node.js: jco transpiles it in process; the JS glue goes to a
// temporary directory just long enough to be imported, the core modules stay in memory.
// With `instantiation: "async"`, the glue imports nothing itself: every import of the
// component is an entry of the object given to `instantiate`, keyed by interface name
// without its version (`"wasi:keyvalue/store"`).

import { transpile } from "@bytecodealliance/jco";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

/** Returns `instantiate(imports)`, which resolves to the component's exports. */
export async function load(wasmPath) {
  const { files } = await transpile(readFileSync(wasmPath), {
    name: "component",
    instantiation: "async",
    noTypescript: true,
    quiet: true,
  });
  const dir = mkdtempSync(join(tmpdir(), "edgehook-node-"));
  try {
    writeFileSync(join(dir, "component.js"), files["component.js"]);
    const glue = await import(pathToFileURL(join(dir, "component.js")).href);
    const compile = (name) => WebAssembly.compile(files[name]);
    return (imports) => glue.instantiate(compile, imports);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
