//! The built component itself: what it exports and how big it is. What it imports, against
//! what every host provides: `portability.rs`.

use edgehook_runtime::COMPONENT_WASM;
use wasmparser::{Parser, Payload};

/// The component's top-level export names.
fn export_names() -> Vec<String> {
    let mut exports = Vec::new();
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(COMPONENT_WASM) {
        match payload.expect("the component parses") {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentExportSection(section) if depth == 0 => {
                for export in section {
                    exports.push(export.expect("export").name.name.to_owned());
                }
            }
            _ => {}
        }
    }
    exports
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
