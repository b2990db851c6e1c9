//! Builds the edgehook component (`component/`) for `wasm32-wasip2` with the size-optimized
//! `guest` profile and hands its path to the host crate as `EDGEHOOK_COMPONENT_WASM`, so that
//! `cargo build`/`cargo test` at the workspace root always embed the current .wasm. The two
//! small guests beside it are built the same way: the benchmarks' baseline (`bench/empty`,
//! `EDGEHOOK_EMPTY_WASM`) and the key-value conformance probe (`tests/kvprobe`,
//! `EDGEHOOK_KVPROBE_WASM`).
//!
//! The guest build uses its own target directory (`<target>/guest`): the outer cargo holds
//! the lock on the main one while build scripts run.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = manifest_dir
        .parent()
        .expect("host/ sits in the workspace")
        .to_path_buf();
    for watched in [
        "component/src",
        "bench/empty/src",
        "tests/kvprobe/src",
        "component/Cargo.toml",
        "Cargo.toml",
        "wit",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");

    let target_dir = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("guest");
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(&root)
        .args([
            "build",
            "--package",
            "edgehook-component",
            "--package",
            "edgehook-empty",
            "--package",
            "edgehook-kvprobe",
        ])
        .args(["--target", "wasm32-wasip2"])
        .args(["--profile", "guest", "--target-dir"])
        .arg(&target_dir)
        // The outer build's flags and wrappers are for the native host, not the guest.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_PRIMARY_PACKAGE")
        // `cargo clippy` sets these for the outer build; the guest is linted on its own.
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CLIPPY_ARGS")
        .status()
        .expect("could not run cargo to build the component");
    assert!(
        status.success(),
        "building the component for wasm32-wasip2 failed (is the target installed? \
         rust-toolchain.toml lists it; `rustup target add wasm32-wasip2`)"
    );
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("set by cargo"));
    for (file, var) in [
        ("edgehook_component.wasm", "EDGEHOOK_COMPONENT_WASM"),
        ("edgehook_empty.wasm", "EDGEHOOK_EMPTY_WASM"),
        ("edgehook_kvprobe.wasm", "EDGEHOOK_KVPROBE_WASM"),
    ] {
        let out = out_dir.join(file);
        std::fs::copy(target_dir.join("wasm32-wasip2/guest").join(file), &out)
            .expect("copy the built component");
        println!("cargo:rustc-env={var}={}", out.display());
    }
}
