//! Links the guest with a linear memory of 2 MiB from the start ([`INITIAL_MEMORY`]).
//!
//! Rust's default is the 1 MiB stack and the static data (17 pages here), so the heap starts
//! nearly full and any request that allocates more than a few KiB grows the memory. On a
//! pooled host (wasmtime's pooling allocator, as `edgehook serve` and Spin run it) the next
//! instance in that slot then shrinks it back with `mprotect`, and taking access away makes
//! the kernel flush the TLB of every core running the process (an interrupt to each): 9 % of
//! `serve`'s CPU on a list of 50, which grew its memory on every request. Starting at 2 MiB,
//! what a request needs is there already, and the pool resets the pages a request touched in
//! place (it keeps 2 MiB of each slot resident). Pages never touched cost nothing.
//!
//! Only for wasm32: the native build of the crate (its tests) links as usual.

/// The guest's initial linear memory, in bytes (a multiple of the 64 KiB Wasm page).
/// `edgehook-runtime` checks it against its pool's resident bytes per slot.
const INITIAL_MEMORY: u32 = 2 << 20;

fn main() {
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("wasm32") {
        println!("cargo:rustc-link-arg-cdylib=--initial-memory={INITIAL_MEMORY}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
