//! The built component itself: what it imports (only what Spin 4's platform world provides),
//! what it exports, and how big it is.

use edgehook_runtime::COMPONENT_WASM;
use wasmparser::{Parser, Payload};

/// Interfaces Spin 4's `platform` world provides that this component may import. WASI 0.2
/// interfaces may be any 0.2.x patch version (hosts match them by semver).
const ALLOWED_WASI_0_2: &[&str] = &[
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "wasi:clocks/monotonic-clock",
    "wasi:clocks/wall-clock",
    "wasi:filesystem/types",
    "wasi:filesystem/preopens",
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:sockets/network",
    "wasi:sockets/instance-network",
    "wasi:sockets/ip-name-lookup",
    "wasi:sockets/tcp",
    "wasi:sockets/tcp-create-socket",
    "wasi:sockets/udp",
    "wasi:sockets/udp-create-socket",
    "wasi:http/types",
    "wasi:http/outgoing-handler",
];

/// Non-WASI-0.2 interfaces of Spin 4's platform world we use, with exact versions.
const ALLOWED_EXACT: &[&str] = &[
    "wasi:keyvalue/store@0.2.0-draft2",
    "wasi:keyvalue/atomics@0.2.0-draft2",
    "wasi:keyvalue/batch@0.2.0-draft2",
    "wasi:config/store@0.2.0-draft-2024-09-27",
];

/// Imports the component must have: its state and settings come only from the host.
const REQUIRED: &[&str] = &[
    "wasi:keyvalue/store@0.2.0-draft2",
    "wasi:keyvalue/atomics@0.2.0-draft2",
    "wasi:keyvalue/batch@0.2.0-draft2",
    "wasi:config/store@0.2.0-draft-2024-09-27",
];

fn allowed(import: &str) -> bool {
    ALLOWED_EXACT.contains(&import)
        || import.split_once("@0.2.").is_some_and(|(name, patch)| {
            ALLOWED_WASI_0_2.contains(&name) && patch.bytes().all(|b| b.is_ascii_digit())
        })
}

/// The component's top-level import and export names.
fn interface_names() -> (Vec<String>, Vec<String>) {
    let (mut imports, mut exports) = (Vec::new(), Vec::new());
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(COMPONENT_WASM) {
        match payload.expect("the component parses") {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(section) if depth == 0 => {
                for import in section {
                    imports.push(import.expect("import").name.name.to_owned());
                }
            }
            Payload::ComponentExportSection(section) if depth == 0 => {
                for export in section {
                    exports.push(export.expect("export").name.name.to_owned());
                }
            }
            _ => {}
        }
    }
    (imports, exports)
}

#[test]
fn imports_stay_inside_spin_4s_platform_world() {
    let (imports, _) = interface_names();
    assert!(
        !imports.is_empty(),
        "a component that imports nothing was not parsed right"
    );
    let outside: Vec<&String> = imports.iter().filter(|i| !allowed(i)).collect();
    assert!(
        outside.is_empty(),
        "imports Spin 4 does not provide: {outside:?}"
    );
    for needed in REQUIRED {
        assert!(
            imports.iter().any(|i| i == needed),
            "{needed} is not imported"
        );
    }
}

#[test]
fn the_allow_list_refuses_what_spin_lacks() {
    assert!(allowed("wasi:http/outgoing-handler@0.2.12"));
    assert!(!allowed("wasi:keyvalue/store@0.2.0-draft"));
    assert!(!allowed("wasi:http/outgoing-handler@0.3.0"));
    assert!(!allowed("fermyon:spin/llm@2.0.0"));
    assert!(!allowed("wasi:http/outgoing-handler@0.2.x"));
}

#[test]
fn exports_the_service_world() {
    let (_, exports) = interface_names();
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
        size <= 512 * 1024,
        "component is {size} bytes, over the 512 KiB budget"
    );
}
