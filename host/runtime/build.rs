//! Builds the edgehook component (`component/`) for `wasm32-wasip2` with the size-optimized
//! `guest` profile and hands its path to this crate as `EDGEHOOK_COMPONENT_WASM`, so that
//! `cargo build`/`cargo test` at the workspace root always embed the current .wasm. The
//! small guests beside it are built the same way: the web portal (`portal/`, with its static
//! files, `EDGEHOOK_PORTAL_WASM`), the benchmarks' baseline (`bench/empty`,
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
        .ancestors()
        .nth(2)
        .expect("host/runtime/ sits in the workspace")
        .to_path_buf();
    for watched in [
        "component",
        "bench/empty/src",
        "tests/kvprobe/src",
        "portal/src",
        "portal/static",
        "portal/Cargo.toml",
        "Cargo.toml",
        "wit",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");

    ensure_wasm_target(&root);

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
            "--package",
            "edgehook-portal",
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
        "building the component for wasm32-wasip2 failed (see the compiler's errors above)"
    );
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("set by cargo"));
    for (file, var) in [
        ("edgehook_component.wasm", "EDGEHOOK_COMPONENT_WASM"),
        ("edgehook_empty.wasm", "EDGEHOOK_EMPTY_WASM"),
        ("edgehook_kvprobe.wasm", "EDGEHOOK_KVPROBE_WASM"),
        ("edgehook_portal.wasm", "EDGEHOOK_PORTAL_WASM"),
    ] {
        let out = out_dir.join(file);
        let built = std::fs::read(target_dir.join("wasm32-wasip2/guest").join(file))
            .expect("read the built component");
        std::fs::write(&out, strip_component_names(&built)).expect("write the component");
        println!("cargo:rustc-env={var}={}", out.display());
    }
}

/// The component without its `component-name` section: the names of its component-level
/// items (about 12 KiB of lowered and lifted function names), debugging aid only, as the
/// core module's own `name` section is, which the `guest` profile's `strip = true` removes.
/// Rust's linker for `wasm32-wasip2` has no option to leave the component names out, so
/// they are dropped here (as `wasm-tools strip` does). Anything not a well-formed component
/// is returned unchanged (its loading fails with the real error).
fn strip_component_names(wasm: &[u8]) -> Vec<u8> {
    fn leb(bytes: &[u8], at: &mut usize) -> Option<usize> {
        let (mut value, mut shift) = (0usize, 0);
        loop {
            let byte = *bytes.get(*at)?;
            *at += 1;
            value |= usize::from(byte & 0x7f).checked_shl(shift)?;
            if byte & 0x80 == 0 {
                return Some(value);
            }
            shift += 7;
        }
    }
    let strip = || -> Option<Vec<u8>> {
        let mut out = wasm.get(..8)?.to_vec();
        let mut at = 8;
        while at < wasm.len() {
            let start = at;
            let id = wasm[at];
            at += 1;
            let size = leb(wasm, &mut at)?;
            let end = at.checked_add(size).filter(|e| *e <= wasm.len())?;
            let mut name_at = at;
            let is_names = id == 0
                && leb(wasm, &mut name_at).is_some_and(|len| {
                    wasm.get(name_at..name_at + len) == Some(b"component-name".as_slice())
                });
            if !is_names {
                out.extend_from_slice(&wasm[start..end]);
            }
            at = end;
        }
        Some(out)
    };
    strip().unwrap_or_else(|| wasm.to_vec())
}

/// The target the component is built for.
const WASM_TARGET: &str = "wasm32-wasip2";

/// Makes sure the compiler can build for [`WASM_TARGET`]: a toolchain installed by rustup
/// without it (rust-toolchain.toml lists it, but rustup adds listed targets only when it
/// installs the toolchain itself, and not at all with `RUSTUP_AUTO_INSTALL=0`) gets it through
/// `rustup target add`; where that cannot be done the build stops with one line saying what
/// to run.
fn ensure_wasm_target(root: &std::path::Path) {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    if target_installed(&rustc) {
        return;
    }
    // The rustup proxy names the toolchain it runs; without it, the pinned channel.
    let toolchain = env::var("RUSTUP_TOOLCHAIN")
        .ok()
        .or_else(|| pinned_channel(root));
    let mut add = Command::new("rustup");
    add.args(["target", "add", WASM_TARGET]);
    if let Some(toolchain) = &toolchain {
        add.args(["--toolchain", toolchain]);
    }
    let command = format!(
        "rustup target add {WASM_TARGET}{}",
        toolchain
            .as_deref()
            .map(|t| format!(" --toolchain {t}"))
            .unwrap_or_default()
    );
    println!("cargo:warning=the {WASM_TARGET} target is missing; running `{command}`");
    match add.status() {
        Ok(status) if status.success() && target_installed(&rustc) => {}
        Ok(_) => panic!(
            "the {WASM_TARGET} target is missing and `{command}` failed (see above); \
             run it by hand, then build again"
        ),
        Err(_) => panic!(
            "the {WASM_TARGET} target is missing and rustup is not on PATH: install the \
             Rust standard library for {WASM_TARGET} for `{rustc}` (with rustup: `{command}`), \
             then build again"
        ),
    }
}

/// Whether `rustc`'s sysroot holds the standard library for [`WASM_TARGET`].
fn target_installed(rustc: &str) -> bool {
    let Ok(out) = Command::new(rustc).args(["--print", "sysroot"]).output() else {
        return false;
    };
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    sysroot
        .join("lib/rustlib")
        .join(WASM_TARGET)
        .join("lib")
        .is_dir()
}

/// The `channel` of rust-toolchain.toml, if it names one.
fn pinned_channel(root: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(root.join("rust-toolchain.toml")).ok()?;
    text.lines().find_map(|line| {
        let value = line
            .trim()
            .strip_prefix("channel")?
            .trim()
            .strip_prefix('=')?;
        Some(value.trim().trim_matches('"').to_owned())
    })
}
