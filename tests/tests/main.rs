//! The black-box tests: the real edgehook `.wasm` driven through the host. One test binary
//! with a module per area (`cargo test -p edgehook-tests --test blackbox <module>::`), so
//! wasmtime is linked once rather than once per file and each run compiles the component
//! once (see docs/design/building-and-testing.md).

mod common;

mod alerts;
mod component;
mod delivery;
mod delivery_lists;
mod delivery_options;
mod depgraph;
mod faults;
mod fifo;
mod host_quirks;
mod hosts;
mod injection;
mod invariants;
mod lifecycle;
mod loads;
mod notices;
mod openapi;
mod pacing;
mod partner_api;
mod partner_faults;
mod partner_idempotency;
mod portability;
mod recovery;
mod replays;
mod retarget;
mod retention;
mod retries;
mod scenario;
mod scopes;
mod sealing;
mod seams;
mod secrets;
mod spin_manifest;
mod ssrf;
mod test_delivery;
mod verifiers;
