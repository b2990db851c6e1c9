//! The built component itself: what it exports and how big it is. What it imports, against
//! what every host provides: `portability.rs`. The web portal's component beside it: its
//! exports, its few imports and its size budget.

use edgehook_runtime::{COMPONENT_WASM, PORTAL_SIZE_BUDGET, PORTAL_WASM};
use wasmparser::{Parser, Payload};

/// The component's top-level export names.
fn export_names() -> Vec<String> {
    top_level(COMPONENT_WASM).1
}

/// A component's top-level import and export names.
fn top_level(wasm: &[u8]) -> (Vec<String>, Vec<String>) {
    let (mut imports, mut exports) = (Vec::new(), Vec::new());
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(wasm) {
        match payload.expect("the component parses") {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentExportSection(section) if depth == 0 => {
                for export in section {
                    exports.push(export.expect("export").name.name.to_owned());
                }
            }
            Payload::ComponentImportSection(section) if depth == 0 => {
                for import in section {
                    imports.push(import.expect("import").name.name.to_owned());
                }
            }
            _ => {}
        }
    }
    (imports, exports)
}

#[test]
fn exports_the_service_world() {
    let exports = export_names();
    for expected in [
        "wasi:http/incoming-handler@0.2.12",
        "edgehook:webhooks/events@0.1.0",
        "edgehook:webhooks/scheduler@0.1.0",
    ] {
        assert!(
            exports.iter().any(|e| e == expected),
            "missing export {expected}: {exports:?}"
        );
    }
}

#[test]
fn component_size_is_within_budget() {
    let size = COMPONENT_WASM.len();
    println!(
        "component size: {size} bytes ({:.1} KiB)",
        size as f64 / 1024.0
    );
    assert!(
        size <= edgehook_runtime::COMPONENT_SIZE_BUDGET,
        "component is {size} bytes, over the budget of {} bytes",
        edgehook_runtime::COMPONENT_SIZE_BUDGET
    );
}

#[test]
fn the_portal_exports_the_handler_only_and_imports_no_state_or_network() {
    let (imports, exports) = top_level(PORTAL_WASM);
    assert_eq!(exports, ["wasi:http/incoming-handler@0.2.12"]);
    for import in &imports {
        assert!(import.starts_with("wasi:"), "{import}");
        for never in [
            "keyvalue",
            "config",
            "outgoing-handler",
            "sockets",
            "filesystem/",
        ] {
            assert!(!import.contains(never), "the portal imports {import}");
        }
    }
}

#[test]
fn portal_size_is_within_budget() {
    let size = PORTAL_WASM.len();
    println!(
        "portal size: {size} bytes ({:.1} KiB)",
        size as f64 / 1024.0
    );
    assert!(
        size <= PORTAL_SIZE_BUDGET,
        "the portal is {size} bytes, over the budget of {PORTAL_SIZE_BUDGET} bytes"
    );
}
