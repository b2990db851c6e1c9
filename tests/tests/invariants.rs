//! The architecture invariants a reading of the source can check (ARCHITECTURE.md,
//! "Architecture invariants"): every plain write is of a record its request creates or holds
//! leased (the rest are compare-and-swaps), generated bindings stay in the shell modules, and
//! the core reads no clock and no randomness of its own; and no source file is past 800
//! lines. (That every store key is built in `keys.rs`
//! the compiler checks: the store calls take a `keys::Key`, which only `keys.rs` builds; and
//! that the layers depend one way only, too: each is a crate of its own.)

use crate::common::sources;
use regex::Regex;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Lines of `files` (but those whose path ends with one of `allowed`) that contain `needle`.
fn occurrences(files: &[(String, Vec<String>)], allowed: &[&str], needle: &str) -> Vec<String> {
    files
        .iter()
        .filter(|(name, _)| !allowed.iter().any(|a| name.ends_with(a)))
        .flat_map(|(name, lines)| {
            lines
                .iter()
                .enumerate()
                .filter(|(_, l)| l.contains(needle))
                .map(move |(n, l)| format!("{name}:{}: {}", n + 1, l.trim()))
        })
        .collect()
}

#[test]
fn generated_bindings_stay_in_the_shell_modules() {
    let guest = sources("component");
    for needle in ["wit_bindgen", "bindings::"] {
        let found = occurrences(&guest, &["component/src/shell.rs"], needle);
        assert!(
            found.is_empty(),
            "{needle} outside the shell:\n{}",
            found.join("\n")
        );
    }
    // Every host crate and tool, its tests included.
    let host: Vec<_> = ["host", "tools"].into_iter().flat_map(sources).collect();
    for needle in ["bindgen!", "bindings::", "generated::"] {
        let found = occurrences(
            &host,
            &[
                "host/runtime/src/bindings.rs",
                "host/runtime/src/runtime.rs",
            ],
            needle,
        );
        assert!(
            found.is_empty(),
            "{needle} outside bindings.rs and runtime.rs:\n{}",
            found.join("\n")
        );
    }
}

#[test]
fn the_core_reads_no_clock_and_no_randomness_of_its_own() {
    let core = sources("component");
    for needle in [
        "SystemTime",
        "Instant",
        "std::time",
        "getrandom",
        "rand::",
        "RandomState",
        // Their default hasher is seeded from the system's randomness.
        "HashMap",
        "HashSet",
        "std::env",
    ] {
        // The build script runs on the build machine (it reads cargo's target), never in
        // the component.
        let found = occurrences(
            &core,
            &["component/src/shell.rs", "component/build.rs"],
            needle,
        );
        assert!(
            found.is_empty(),
            "the core reads {needle} itself (it must come through Env):\n{}",
            found.join("\n")
        );
    }
}

#[test]
fn the_component_reads_json_without_typed_deserializes() {
    // serde's type errors format floats (`Unexpected::Float`), and any typed deserialize
    // can build one: the component read JSON that way until it cost ~47 KiB of its size
    // budget (BENCHMARKS.md, "Component size"). JSON is read as a `Value`, or by a visitor
    // that takes any value (`deserialize_any`) and never reports a type error.
    let core = sources("component");
    for needle in [
        "derive(Deserialize",
        "Deserialize)]",
        "from_value",
        "deserialize_map",
        "deserialize_struct",
        "deserialize_str(",
        "deserialize_seq",
    ] {
        let found = occurrences(&core, &[], needle);
        assert!(
            found.is_empty(),
            "a typed JSON read in the component ({needle}):\n{}",
            found.join("\n")
        );
    }
}

#[test]
fn every_plain_write_is_of_a_record_its_request_creates() {
    // Every read-modify-write of a key is a compare-and-swap (`kv::update`); a plain `set` is
    // only for a record under a key the request itself made new, written before anything
    // points at it, or one it holds under a lease. A new plain write must be added here with
    // its reason.
    let allowed = [
        // A new API key's id pointer and record (random id, hash of a random key).
        ("component/api/src/auth.rs", "api_key_id"),
        ("component/api/src/auth.rs", "api_key"),
        // A new event's load and record; the record's fanned-out mark, which every writer
        // of that event writes the same.
        ("component/delivery/src/fanout.rs", "event_body"),
        ("component/delivery/src/fanout.rs", "event"),
        // A delivery's outcome, written over the record its claim (or its publish) wrote
        // while that lease has at least half its margin to run: nobody else writes a
        // pending record under a live lease (`outcome::held_for_long_enough`).
        ("component/delivery/src/outcome.rs", "delivery"),
        // A new subscription's record, pending, before any index entry is trusted.
        ("component/subscriptions/src/create.rs", "subscription"),
        // A new replay job (random id; listed for the ticks first, a listed id without a
        // record is dropped), and a selecting step's own record, which only the step that
        // holds the job's lease writes (a step run again rewrites it with the same ids).
        ("component/delivery/src/replays.rs", "replay"),
        ("component/delivery/src/replays.rs", "replay_selection"),
    ];
    let mut seen = std::collections::BTreeSet::new();
    let mut found = Vec::new();
    for (name, lines) in sources("component") {
        if name.ends_with("shell.rs") {
            continue; // the binding of `set` itself
        }
        for (n, line) in lines.iter().enumerate() {
            let Some(call) = line.split(".set(").nth(1) else {
                continue;
            };
            if !call.starts_with("&keys::") {
                if line.contains("kv") {
                    found.push(format!(
                        "{name}:{}: a set of a key not built here: {line}",
                        n + 1
                    ));
                }
                continue; // a `Cell::set`
            }
            let builder = call["&keys::".len()..].split('(').next().unwrap_or("");
            match allowed
                .iter()
                .find(|(f, b)| name.ends_with(f) && *b == builder)
            {
                Some(entry) => {
                    seen.insert(*entry);
                }
                None => found.push(format!("{name}:{}: {}", n + 1, line.trim())),
            }
        }
    }
    // Batch writes are plain writes too: each of delivery records, under the rules above
    // (their keys are built with `keys::delivery` in the same file).
    let batches = [
        // A fresh (key-less) event's body, delivery records and record, in one batch
        // after the history entries (a keyed one's records are compare-and-swaps).
        "component/delivery/src/fanout.rs",
        // A batch's outcomes written under their leases (as above), in one batch.
        "component/delivery/src/outcome.rs",
    ];
    let mut batch_seen = std::collections::BTreeSet::new();
    for (name, lines) in sources("component") {
        if name.ends_with("shell.rs") || name.contains("/tests/") {
            continue; // the binding of `set-many`; tests' own stores
        }
        for (n, line) in lines.iter().enumerate() {
            if !line.contains(".set_many(") {
                continue;
            }
            match batches.iter().find(|f| name.ends_with(*f)) {
                Some(f) if lines.iter().any(|l| l.contains("keys::delivery(")) => {
                    batch_seen.insert(*f);
                }
                _ => found.push(format!("{name}:{}: {}", n + 1, line.trim())),
            }
        }
    }
    assert!(
        found.is_empty(),
        "plain writes outside the list (a compare-and-swap, or a reason here):\n{}",
        found.join("\n")
    );
    assert_eq!(seen.len(), allowed.len(), "every listed write still exists");
    assert_eq!(
        batch_seen.len(),
        batches.len(),
        "every listed batch write still exists"
    );
}

/// The project's own files whose names end in one of `extensions`, anywhere under the
/// repository: build output, vendored packages and git's own files left out.
fn project_files(extensions: &[&str]) -> Vec<PathBuf> {
    let skipped = ["target", "node_modules", ".venv", ".git"];
    let mut dirs = vec![PathBuf::from(crate::common::ROOT)];
    let mut files = Vec::new();
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).expect("dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
                if !name.is_some_and(|n| skipped.contains(&n.as_str())) {
                    dirs.push(path);
                }
            } else if path
                .extension()
                .is_some_and(|e| extensions.iter().any(|x| e == *x))
            {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// No source file of the project is past 800 lines (ARCHITECTURE.md, "Architecture
/// invariants"): a file that grows past it is split by what its parts do (the delivery
/// tests are `delivery.rs` and `retries.rs`, the schedule). Every `.rs` file of the
/// repository counts, tests and tools included; build output and vendored packages do not.
#[test]
fn no_source_file_is_past_800_lines() {
    const MAX_LINES: usize = 800;
    let files = project_files(&["rs"]);
    let mut long = Vec::new();
    for path in &files {
        let lines = std::fs::read_to_string(path)
            .expect("source")
            .lines()
            .count();
        if lines > MAX_LINES {
            long.push(format!("{}: {lines} lines", path.display()));
        }
    }
    assert!(files.len() > 200, "only {} files found", files.len());
    assert!(
        long.is_empty(),
        "past {MAX_LINES} lines:\n{}",
        long.join("\n")
    );
}

/// No store key is spelled outside `keys.rs`: no other Rust file of the project, tests and
/// tools included, has a string literal that begins with a key kind's prefix
/// (`keys::PREFIXES`) or is one of the fixed keys with a name of their own (the directories,
/// the tick lease, the ingest key index). Tests and tools that look through a store use
/// `keys.rs`'s builders and prefixes, so that a change of the layout changes them too. (The
/// fixed keys `health` and `disabled` are ordinary words, a status or a JSON value as often
/// as a key: they are not looked for.)
#[test]
fn no_store_key_is_spelled_outside_keys_rs() {
    use edgehook_component::storage::keys;
    const KEYS_RS: &str = "component/storage/src/keys.rs";
    let fixed = [
        keys::DUE_DIRECTORY,
        keys::REPLAY_DIRECTORY,
        keys::FIFO_DIRECTORY,
        keys::RETENTION_DIRECTORY,
        keys::TICK_LEASE,
        keys::INGEST_KEYS,
    ];
    let mut spelled: Vec<String> = keys::PREFIXES.iter().map(|p| format!("\"{p}")).collect();
    spelled.extend(fixed.iter().map(|k| format!("\"{k}\"")));
    let files = project_files(&["rs"]);
    let mut found = Vec::new();
    for path in &files {
        let at = path.strip_prefix(crate::common::ROOT).unwrap_or(path);
        let text = std::fs::read_to_string(path).expect("source");
        if at == std::path::Path::new(KEYS_RS) {
            // Where they are spelled: the check finds each there.
            let missing: Vec<&String> = spelled.iter().filter(|s| !text.contains(*s)).collect();
            assert!(missing.is_empty(), "not in {KEYS_RS}: {missing:?}");
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            if let Some(key) = spelled.iter().find(|s| line.contains(s.as_str())) {
                found.push(format!(
                    "{}:{}: {key}: {}",
                    at.display(),
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(files.len() > 200, "only {} files found", files.len());
    assert!(
        found.is_empty(),
        "store keys spelled outside {KEYS_RS} (use its builders, and its prefixes to look \
         through a store by kind):\n{}",
        found.join("\n")
    );
}

/// The text files the citation check reads: code, docs, configuration, scripts, the
/// portal's pages and the WIT.
const TEXT_FILES: [&str; 12] = [
    "rs", "md", "toml", "sh", "js", "ts", "py", "html", "css", "yaml", "yml", "wit",
];

/// Nothing in the project's code, comments, tests or docs cites an issue by its number or
/// a numbered work period: the project speaks of itself (what the code does, which rule it
/// keeps), and git keeps its history. See [`citation`] for what counts.
#[test]
fn no_text_cites_an_issue_or_a_numbered_work_period() {
    let files = project_files(&TEXT_FILES);
    let mut found = Vec::new();
    for path in &files {
        let Ok(text) = std::fs::read_to_string(path) else {
            continue; // not UTF-8: not prose
        };
        for (n, line) in text.lines().enumerate() {
            if let Some(cited) = citation(line) {
                let at = path.strip_prefix(crate::common::ROOT).unwrap_or(path);
                let at = at.display();
                found.push(format!("{at}:{}: {cited}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(files.len() > 300, "only {} files found", files.len());
    assert!(
        found.is_empty(),
        "issue numbers or numbered work periods (say what the code does or which rule it \
         keeps instead; git keeps the history):\n{}",
        found.join("\n")
    );
}

/// The first citation in `line`: a `#` and one to three digits as a word, "issue" and a
/// number (with or without its `#`), or "session" or "work period" and a number. Not a
/// citation: a `#` inside a word (`retry#2` in test data), an HTML entity's, a URL's
/// `/sessions` and a status code, four digits or more, or a colour of three digits on a
/// line that sets a colour.
fn citation(line: &str) -> Option<&str> {
    static PATTERN: OnceLock<Regex> = OnceLock::new();
    let pattern = PATTERN.get_or_init(|| {
        Regex::new(r"(?i)(?:^|[^\w/#&])(#\d{1,3}|issues? #?\d+|(?:sessions?|work periods?) \d+)\b")
            .expect("pattern")
    });
    let lower = line.to_ascii_lowercase();
    let colours = ["color", "background", "border", "fill", "stroke", "shadow"];
    let sets_a_colour = colours.iter().any(|c| lower.contains(c));
    pattern
        .captures_iter(line)
        .filter_map(|c| c.get(1))
        .map(|m| m.as_str())
        .find(|m| !(sets_a_colour && m.len() == 4 && m.starts_with('#')))
}

#[test]
fn a_citation_is_found_and_an_identifier_an_entity_or_a_colour_is_not() {
    let n = 28;
    for cited in [
        format!("see #{n}"),
        format!("(#{n} point 4a)"),
        format!("#{n}'s table"),
        format!("Issue {n}"),
        format!("issue #{n}"),
        format!("issues {n} and {}", n + 1),
        format!("Session {n}"),
        format!("sessions {n}-{}", n + 1),
        format!("work period {n}"),
    ] {
        assert!(citation(&cited).is_some(), "not found in {cited:?}");
    }
    for clean in [
        format!("order-{n} retry#2"),
        "POST /v1/portal/sessions 201 session".to_owned(),
        format!("it&#{n};s"),
        format!("color: #{n}0;"),
        format!("#{n}{n}"),
        format!("#1e1e{n}"),
        "#[derive(Debug)]".to_owned(),
        "a session's cookie".to_owned(),
    ] {
        assert_eq!(citation(&clean), None, "found in {clean:?}");
    }
}

/// No product function of the component is past 80 lines (ARCHITECTURE.md, "Architecture
/// invariants"): a longer one is split into named steps. A function counts from its `fn`
/// line to its closing brace, comments included; test code does not count.
#[test]
fn no_component_function_is_past_80_lines() {
    const MAX_LINES: usize = 80;
    let files = sources("component");
    let (mut long, mut functions) = (Vec::new(), 0);
    for (name, lines) in &files {
        for (start, end) in function_spans(lines) {
            functions += 1;
            let n = end - start + 1;
            if n > MAX_LINES {
                long.push(format!(
                    "{name}:{}: {n} lines: {}",
                    start + 1,
                    lines[start].trim()
                ));
            }
        }
    }
    assert!(functions > 500, "only {functions} functions found");
    assert!(
        long.is_empty(),
        "functions past {MAX_LINES} lines:\n{}",
        long.join("\n")
    );
}

/// The (first, last) line of each function with a body in `lines` (comments stripped): from
/// its `fn` line to the `}` at the same indent. One-line functions and bodiless
/// declarations are left out.
fn function_spans(lines: &[String]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let code = line.trim_start();
        let indent = line.len() - code.len();
        let mut rest = code;
        for prefix in [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "const ",
            "async ",
            "unsafe ",
        ] {
            rest = rest.strip_prefix(prefix).unwrap_or(rest);
        }
        if !rest.starts_with("fn ") {
            continue;
        }
        let opens = lines[i..]
            .iter()
            .map(|l| l.trim_end())
            .position(|l| l.ends_with('{') || l.ends_with(';') || l.ends_with('}'));
        let Some(open) = opens.map(|o| i + o) else {
            continue;
        };
        if !lines[open].trim_end().ends_with('{') {
            continue; // a declaration, or a body on one line
        }
        let close = format!("{}}}", " ".repeat(indent));
        if let Some(end) = (open + 1..lines.len()).find(|&j| lines[j].trim_end() == close) {
            spans.push((i, end));
        }
    }
    spans
}
