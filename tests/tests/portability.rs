//! The same `.wasm` on every host we name (docs/embedding.md, "Portability"): the
//! component's imports, read from the built component down to each function of the
//! interfaces an embedder implements itself, against what Spin 4, our host, the Node.js host
//! and the Python host provide. Each host's set is written down here with where it comes
//! from. A new import, or a newly called function of an interface an embedder writes
//! (key-value, config), fails here until every host provides it.

use edgehook_runtime::COMPONENT_WASM;
use wasmparser::component_types::ComponentEntityType;
use wasmparser::{Parser, Payload, Validator, WasmFeatures};

/// WASI 0.2 interfaces (any 0.2.x patch: hosts match WASI 0.2 imports by semver). Every
/// host below provides all of them, each for its own reason (see the host).
const WASI_0_2: &[&str] = &[
    "wasi:cli/environment@0.2",
    "wasi:cli/exit@0.2",
    "wasi:cli/stdin@0.2",
    "wasi:cli/stdout@0.2",
    "wasi:cli/stderr@0.2",
    "wasi:cli/terminal-input@0.2",
    "wasi:cli/terminal-output@0.2",
    "wasi:cli/terminal-stdin@0.2",
    "wasi:cli/terminal-stdout@0.2",
    "wasi:cli/terminal-stderr@0.2",
    "wasi:clocks/monotonic-clock@0.2",
    "wasi:clocks/wall-clock@0.2",
    "wasi:filesystem/types@0.2",
    "wasi:filesystem/preopens@0.2",
    "wasi:io/error@0.2",
    "wasi:io/poll@0.2",
    "wasi:io/streams@0.2",
    "wasi:random/random@0.2",
    "wasi:random/insecure@0.2",
    "wasi:random/insecure-seed@0.2",
    "wasi:sockets/network@0.2",
    "wasi:sockets/instance-network@0.2",
    "wasi:sockets/ip-name-lookup@0.2",
    "wasi:sockets/tcp@0.2",
    "wasi:sockets/tcp-create-socket@0.2",
    "wasi:sockets/udp@0.2",
    "wasi:sockets/udp-create-socket@0.2",
    "wasi:http/types@0.2",
    "wasi:http/outgoing-handler@0.2",
];

/// The key-value and config interfaces whole (every function of their WIT).
const KV_AND_CONFIG: &[&str] = &[
    "wasi:keyvalue/store@0.2.0-draft2",
    "wasi:keyvalue/atomics@0.2.0-draft2",
    "wasi:keyvalue/batch@0.2.0-draft2",
    "wasi:config/store@0.2.0-draft-2024-09-27",
];

/// A host: where its set comes from, and the set. An entry names an interface
/// (`name@version`, `@0.2` = any 0.2.x: every function of it) or one function of one
/// (`name@version#function`).
struct Host {
    name: &'static str,
    source: &'static str,
    provides: &'static [&'static [&'static str]],
}

const HOSTS: &[Host] = &[
    Host {
        name: "Spin 4.0.2",
        source: "its `platform` world (wit/deps/spin@4.0.0/world.wit in the Spin repository): \
                 wasi:cli, clocks, filesystem, io, random, sockets, http 0.2; key-value draft2 \
                 (key_value_stores in spin.toml); wasi:config from [variables]",
        provides: &[WASI_0_2, KV_AND_CONFIG],
    },
    Host {
        name: "edgehook-runtime (serve, simulation, examples/embed.rs)",
        source: "host/runtime/src/runtime.rs `link`: wasmtime_wasi::p2::add_to_linker_async \
                 (cli, clocks, filesystem, io, random, sockets), \
                 wasmtime_wasi_http::p2::add_only_http_to_linker_async (types, \
                 outgoing-handler), bindings::add_to_linker (bindgen! over wit/deps: every \
                 key-value and config function)",
        provides: &[WASI_0_2, KV_AND_CONFIG],
    },
    Host {
        name: "Node.js (examples/node: jco 1.35.0, preview2-shim 0.26.1)",
        source: "preview2-shim's WASIShim.getImportObject() (cli, sockets, filesystem, io, \
                 random, clocks, http types and handlers; jco keys imports by name without \
                 version); examples/node/store.mjs (every key-value function, config get and \
                 get-all)",
        provides: &[WASI_0_2, KV_AND_CONFIG],
    },
    Host {
        name: "Python (examples/python: wasmtime 50.0.1)",
        source: "Linker.add_wasip2() (wasmtime's WASI 0.2: cli, clocks, filesystem, io, \
                 random, sockets), Linker.add_wasi_http() (types, outgoing-handler); \
                 examples/python/host.py (the key-value functions listed, config get and \
                 get-all)",
        provides: &[WASI_0_2, PYTHON_KV_AND_CONFIG],
    },
];

/// What examples/python/host.py defines, function by function (it implements only what
/// the component calls).
const PYTHON_KV_AND_CONFIG: &[&str] = &[
    "wasi:keyvalue/store@0.2.0-draft2#open",
    "wasi:keyvalue/store@0.2.0-draft2#[method]bucket.get",
    "wasi:keyvalue/store@0.2.0-draft2#[method]bucket.set",
    "wasi:keyvalue/store@0.2.0-draft2#[method]bucket.delete",
    "wasi:keyvalue/atomics@0.2.0-draft2#[static]cas.new",
    "wasi:keyvalue/atomics@0.2.0-draft2#[method]cas.current",
    "wasi:keyvalue/atomics@0.2.0-draft2#increment",
    "wasi:keyvalue/atomics@0.2.0-draft2#swap",
    "wasi:keyvalue/batch@0.2.0-draft2#get-many",
    "wasi:keyvalue/batch@0.2.0-draft2#set-many",
    "wasi:config/store@0.2.0-draft-2024-09-27#get",
    "wasi:config/store@0.2.0-draft-2024-09-27#get-all",
];

/// Whether `entry` covers `interface` and, if given, `function` of it (an entry naming one
/// function covers that one only).
fn covers(entry: &str, interface: &str, function: Option<&str>) -> bool {
    let (entry_interface, entry_function) = match entry.split_once('#') {
        Some((i, f)) => (i, Some(f)),
        None => (entry, None),
    };
    let interface_matches = entry_interface == interface
        || entry_interface.strip_suffix("@0.2").is_some_and(|name| {
            interface
                .strip_prefix(name)
                .and_then(|v| v.strip_prefix("@0.2."))
                .is_some_and(|patch| !patch.is_empty() && patch.bytes().all(|b| b.is_ascii_digit()))
        });
    interface_matches
        && (entry_function.is_none() || function.is_none() || entry_function == function)
}

fn provided(host: &Host, interface: &str, function: Option<&str>) -> bool {
    host.provides
        .iter()
        .flat_map(|set| set.iter())
        .any(|entry| covers(entry, interface, function))
}

/// The component's imports: each interface with the functions it imports from it.
fn imports() -> Vec<(String, Vec<String>)> {
    let mut names = Vec::new();
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(COMPONENT_WASM) {
        match payload.expect("the component parses") {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(section) if depth == 0 => {
                for import in section {
                    names.push(import.expect("import").name.name.to_owned());
                }
            }
            _ => {}
        }
    }
    let types = Validator::new_with_features(WasmFeatures::all())
        .validate_all(COMPONENT_WASM)
        .expect("the component validates");
    names
        .into_iter()
        .map(|name| {
            let item = types
                .component_item_for_import(&name)
                .unwrap_or_else(|| panic!("no type for import {name}"));
            let ComponentEntityType::Instance(id) = item.ty else {
                panic!("import {name} is not an interface");
            };
            let functions = types[id]
                .exports
                .iter()
                .filter(|(_, item)| matches!(item.ty, ComponentEntityType::Func(_)))
                .map(|(f, _)| f.clone())
                .collect();
            (name, functions)
        })
        .collect()
}

#[test]
fn every_host_provides_every_import_of_the_component() {
    let imports = imports();
    assert!(
        imports.len() >= 10,
        "the imports were not read: {imports:?}"
    );
    let mut missing = Vec::new();
    for (interface, functions) in &imports {
        // An interface may import types only (wasi:io/error: its resource).
        let wanted = std::iter::once(None).chain(functions.iter().map(|f| Some(f.as_str())));
        for function in wanted {
            for host in HOSTS {
                if !provided(host, interface, function) {
                    let what = function.map_or(String::new(), |f| format!("#{f}"));
                    missing.push(format!("{} lacks {interface}{what}", host.name));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "the component imports what a host does not provide (a host adapts to the WIT world \
         or the component does without):\n{}\nwhere each host's set comes from:\n{}",
        missing.join("\n"),
        HOSTS
            .iter()
            .map(|h| format!("- {}: {}", h.name, h.source))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn state_and_settings_come_only_from_the_host() {
    let imports = imports();
    for needed in KV_AND_CONFIG {
        assert!(
            imports.iter().any(|(i, _)| i == needed),
            "{needed} is not imported"
        );
    }
    // docs/embedding.md ("Key-value contract") lists the key-value calls the component
    // makes, and the Python host implements exactly those.
    let mut calls: Vec<String> = imports
        .iter()
        .filter(|(i, _)| i.starts_with("wasi:keyvalue/"))
        .flat_map(|(i, fs)| fs.iter().map(move |f| format!("{i}#{f}")))
        .collect();
    calls.sort();
    let mut listed: Vec<String> = PYTHON_KV_AND_CONFIG
        .iter()
        .filter(|f| f.starts_with("wasi:keyvalue/"))
        .map(|s| s.to_string())
        .collect();
    listed.sort();
    assert_eq!(
        calls, listed,
        "the key-value calls changed: update docs/embedding.md and examples/python/host.py"
    );
}

#[test]
fn the_sets_refuse_what_a_host_lacks() {
    let python = &HOSTS[3];
    let spin = &HOSTS[0];
    assert!(provided(
        spin,
        "wasi:http/outgoing-handler@0.2.12",
        Some("handle")
    ));
    assert!(!provided(
        spin,
        "wasi:keyvalue/store@0.2.0-draft",
        Some("open")
    ));
    assert!(!provided(
        spin,
        "wasi:http/outgoing-handler@0.3.0",
        Some("handle")
    ));
    assert!(!provided(
        spin,
        "wasi:http/outgoing-handler@0.2.x",
        Some("handle")
    ));
    assert!(!provided(spin, "fermyon:spin/llm@2.0.0", Some("infer")));
    assert!(provided(
        python,
        "wasi:keyvalue/store@0.2.0-draft2",
        Some("[method]bucket.get")
    ));
    assert!(!provided(
        python,
        "wasi:keyvalue/store@0.2.0-draft2",
        Some("[method]bucket.exists")
    ));
    assert!(!provided(
        python,
        "wasi:keyvalue/watcher@0.2.0-draft2",
        Some("on-set")
    ));
}
