//! The receiver-side verifiers partners copy (`docs/verify/`: Python, Node.js, Rust) check
//! every published signature vector, reject tampered bodies, stale and future timestamps and
//! repeated delivery ids, fail on a tampered vectors file, verify captured deliveries, and are
//! shown in `docs/verifying.md` exactly as they are in the files that run here.

use edgehook_sim::simnet::Received;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The Rust verifier, the same file `cargo run -p edgehook-tests --example verify` builds.
#[allow(dead_code)]
#[path = "../../docs/verify/verify.rs"]
mod verify;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the repository")
        .to_path_buf()
}

fn vectors_path() -> PathBuf {
    repo().join("docs/signature-vectors.json")
}

fn vectors() -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(vectors_path()).expect("docs/signature-vectors.json");
    serde_json::from_str::<Vec<serde_json::Value>>(&text).expect("an array of vectors")
}

/// A file in a fresh, uniquely named directory under the system temp dir; removed on drop.
struct TempFile {
    dir: PathBuf,
    path: PathBuf,
}

impl TempFile {
    fn new(name: &str, contents: &str) -> Self {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "edgehook-verifiers-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create a temp dir");
        let path = dir.join(name);
        std::fs::write(&path, contents).expect("write the temp file");
        TempFile { dir, path }
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Which verifier to run.
#[derive(Debug, Clone, Copy)]
enum Verifier {
    Python,
    Node,
    Rust,
}

const ALL: [Verifier; 3] = [Verifier::Python, Verifier::Node, Verifier::Rust];

/// Runs one verifier's command line; returns its exit status and what it printed.
fn run(verifier: Verifier, mode: &str, file: &Path) -> (i32, String) {
    let (program, script) = match verifier {
        Verifier::Python => ("python3", "docs/verify/verify.py"),
        Verifier::Node => ("node", "docs/verify/verify.mjs"),
        Verifier::Rust => {
            let args = ["verify", mode, &file.display().to_string()].map(String::from);
            return (i32::from(verify::run(&args)), String::new());
        }
    };
    let out = Command::new(program)
        .arg(repo().join(script))
        .arg(mode)
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("{program} must be installed to run this test: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn every_verifier_accepts_every_vector_and_rejects_tampering_staleness_and_repeats() {
    let count = vectors().len();
    assert!(count >= 7, "the vectors file lost entries");
    for verifier in ALL {
        let (status, output) = run(verifier, "vectors", &vectors_path());
        assert_eq!(
            status, 0,
            "{verifier:?} on the published vectors:\n{output}"
        );
        if !matches!(verifier, Verifier::Rust) {
            // Each vector: verifies, tampered body, stale, future, repeated id; a rotation's
            // also verifies with the previous secret.
            let rotations = vectors()
                .iter()
                .filter(|v| v.get("previousSecret").is_some())
                .count();
            assert!(rotations >= 1, "no rotation vector");
            assert_eq!(
                output.lines().filter(|l| l.starts_with("ok ")).count(),
                count * 5 + rotations,
                "{verifier:?} checked everything:\n{output}"
            );
            assert!(!output.contains("FAIL"), "{output}");
        }
    }
}

#[test]
fn every_verifier_fails_on_a_tampered_vectors_file() {
    let original = vectors();
    let last = original.len() - 1;
    let mut tampers: Vec<(&str, Vec<serde_json::Value>)> = Vec::new();

    // One body changed (a space appended), signature kept.
    let mut body_changed = original.clone();
    let body = format!("{} ", body_changed[last]["body"].as_str().expect("body"));
    body_changed[last]["body"] = body.into();
    tampers.push(("a body", body_changed));

    // One hex digit of one signature changed.
    let mut signature_changed = original.clone();
    let sig = signature_changed[0]["signature"]
        .as_str()
        .expect("signature");
    let flipped = if sig.starts_with('0') { "1" } else { "0" };
    signature_changed[0]["signature"] = format!("{flipped}{}", &sig[1..]).into();
    tampers.push(("a signature", signature_changed));

    // Another secret (as after a rotation).
    let mut secret_changed = original.clone();
    secret_changed[1]["secret"] = "whsec_rotated".into();
    tampers.push(("a secret", secret_changed));

    for (what, tampered) in tampers {
        let file = TempFile::new(
            "tampered-vectors.json",
            &serde_json::to_string_pretty(&tampered).expect("serialize"),
        );
        for verifier in ALL {
            let (status, output) = run(verifier, "vectors", &file.path);
            assert_eq!(
                status, 1,
                "{verifier:?} must fail when {what} is tampered with:\n{output}"
            );
        }
    }
}

/// Standard base64 with padding, as `bodyBase64` in a capture.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A captured delivery as the capture mode reads it, built from a vector.
fn capture(vector: &serde_json::Value, body: &str, now: u64) -> serde_json::Value {
    serde_json::json!({
        "secret": vector["secret"],
        "headers": {
            "Content-Type": "application/json",
            "X-Service-Delivery-Id": "dlv_0123456789abcdef",
            "x-service-event": "load.status_changed",
            "X-SERVICE-TIMESTAMP": vector["timestamp"].as_u64().expect("timestamp").to_string(),
            "X-Service-Signature": vector["signature"],
        },
        "bodyBase64": base64(body.as_bytes()),
        "now": now,
    })
}

/// The headers of SPEC §4.4, and only those, as the simulated network records them.
const DELIVERY_HEADERS: [&str; 5] = [
    "content-type",
    "x-service-delivery-id",
    "x-service-event",
    "x-service-timestamp",
    "x-service-signature",
];

/// Headers HTTP itself adds to a delivery, beside the SPEC §4.4 ones.
const TRANSPORT_HEADERS: [&str; 3] = ["host", "content-length", "user-agent"];

/// A request the simulated network recorded, as a capture file: every header it carried,
/// the raw body, and `now` (the receiver's clock) in Unix seconds.
fn capture_of(secret: &str, received: &Received, now_ms: u64) -> serde_json::Value {
    let headers: serde_json::Map<String, serde_json::Value> = received
        .headers
        .iter()
        .map(|(name, value)| {
            let value = std::str::from_utf8(value).expect("header values are text");
            (name.clone(), value.into())
        })
        .collect();
    serde_json::json!({
        "secret": secret,
        "headers": headers,
        "bodyBase64": base64(&received.body),
        "now": now_ms / 1000,
    })
}

/// Checks a recorded delivery's headers and runs every verifier's capture mode on it;
/// panics with the verifier's output unless all three accept it.
fn assert_every_verifier_accepts(secret: &str, received: &Received, now_ms: u64) {
    let names: Vec<&str> = received.headers.iter().map(|(n, _)| n.as_str()).collect();
    for header in DELIVERY_HEADERS {
        assert!(
            names.contains(&header),
            "a delivery carries {header} (SPEC §4.4)"
        );
    }
    for name in &names {
        assert!(
            DELIVERY_HEADERS.contains(name) || TRANSPORT_HEADERS.contains(name),
            "unexpected header {name}"
        );
    }
    let file = TempFile::new(
        "capture.json",
        &serde_json::to_string(&capture_of(secret, received, now_ms)).expect("serialize"),
    );
    let id = received.header("x-service-delivery-id").unwrap_or_default();
    let event = received.header("x-service-event").unwrap_or_default();
    for verifier in ALL {
        let (status, output) = run(verifier, "capture", &file.path);
        assert_eq!(
            status, 0,
            "{verifier:?} rejected {}:\n{output}",
            received.url
        );
        if !matches!(verifier, Verifier::Rust) {
            assert_eq!(output.trim(), format!("ok {id} {event}"));
        }
    }
}

#[test]
fn a_request_as_the_simulated_network_records_it_is_a_capture_every_verifier_accepts() {
    // Hand-made from a vector: the capture format itself, independent of the engine
    // (real deliveries are checked in the last test).
    let vector = &vectors()[2];
    let ts = vector["timestamp"].as_u64().expect("timestamp");
    let text = |key: &str| vector[key].as_str().expect(key).as_bytes().to_vec();
    let received = Received {
        url: "https://hooks.example.com/edgehook".into(),
        method: "POST".into(),
        headers: vec![
            ("content-type".into(), b"application/json".to_vec()),
            (
                "x-service-delivery-id".into(),
                b"dlv_0123456789abcdef".to_vec(),
            ),
            ("x-service-event".into(), b"load.created".to_vec()),
            ("x-service-timestamp".into(), ts.to_string().into_bytes()),
            ("x-service-signature".into(), text("signature")),
        ],
        body: text("body"),
        at_ms: ts * 1000 + 400,
    };
    let secret = vector["secret"].as_str().expect("secret");
    assert_every_verifier_accepts(secret, &received, received.at_ms + 1500);
}

#[test]
fn every_verifier_checks_a_captured_delivery() {
    assert_eq!(base64(b"ab"), "YWI=");
    assert_eq!(base64("é🚚x".as_bytes()), "w6nwn5qaeA==");
    for (index, vector) in vectors().iter().enumerate() {
        let name = vector["name"].as_str().expect("name");
        let body = vector["body"].as_str().expect("body");
        let ts = vector["timestamp"].as_u64().expect("timestamp");
        let mut cases = vec![(
            "as sent, 5 minutes later",
            capture(vector, body, ts + 300),
            0,
        )];
        if index == 0 {
            // The edges, once (each case starts two interpreters).
            cases.extend([
                (
                    "as sent, 4 minutes early",
                    capture(vector, body, ts - 240),
                    0,
                ),
                (
                    "5 minutes and 1 s later",
                    capture(vector, body, ts + 301),
                    1,
                ),
                (
                    "5 minutes and 1 s early",
                    capture(vector, body, ts - 301),
                    1,
                ),
                (
                    "body changed (a newline appended)",
                    capture(vector, &format!("{body}\n"), ts),
                    1,
                ),
            ]);
        }
        for (what, capture, want) in cases {
            let file = TempFile::new(
                "capture.json",
                &serde_json::to_string(&capture).expect("serialize"),
            );
            for verifier in ALL {
                let (status, output) = run(verifier, "capture", &file.path);
                assert_eq!(status, want, "{verifier:?}, {name}, {what}:\n{output}");
                if want == 0 && !matches!(verifier, Verifier::Rust) {
                    assert_eq!(output.trim(), "ok dlv_0123456789abcdef load.status_changed");
                }
            }
        }
    }
}

#[test]
fn the_rust_verifier_rejects_malformed_headers() {
    use verify::{Rejected, verify};
    let vector = &vectors()[0];
    let secret = vector["secret"].as_str().expect("secret");
    let body = vector["body"].as_str().expect("body").as_bytes();
    let ts = vector["timestamp"].as_u64().expect("timestamp").to_string();
    let sig = vector["signature"].as_str().expect("signature").to_owned();
    let check = |timestamp: &str, signature: &str, id: &str| {
        let headers = [
            ("x-service-timestamp", timestamp),
            ("x-service-signature", signature),
            ("x-service-delivery-id", id),
            ("x-service-event", "load.created"),
        ];
        let lookup = |n: &str| headers.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
        verify(secret, lookup, body, ts.parse().expect("digits"))
    };
    assert!(check(&ts, &sig, "dlv_1").is_ok());
    assert_eq!(check(&ts, &sig, ""), Err(Rejected::MissingHeader));
    assert_eq!(check("", &sig, "dlv_1"), Err(Rejected::MissingHeader));
    assert_eq!(
        check(&format!("{ts}.0"), &sig, "dlv_1"),
        Err(Rejected::BadTimestamp)
    );
    assert_eq!(
        check(&format!("+{ts}"), &sig, "dlv_1"),
        Err(Rejected::BadTimestamp)
    );
    assert_eq!(
        check(&ts, &sig.to_uppercase(), "dlv_1"),
        Err(Rejected::BadSignature)
    );
    assert_eq!(check(&ts, &sig[..62], "dlv_1"), Err(Rejected::BadSignature));
    assert_eq!(
        check(&ts, &format!("sha256={sig}"), "dlv_1"),
        Err(Rejected::BadSignature)
    );
}

/// The lines strictly between the comment lines `BEGIN verifier` and `END verifier`.
fn snippet(text: &str) -> String {
    let mut inside = false;
    let mut out = String::new();
    for line in text.lines() {
        let marker = line.trim_start_matches(['#', '/', ' ']);
        if marker == "END verifier" {
            return out;
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
        if marker == "BEGIN verifier" {
            inside = true;
        }
    }
    panic!("no BEGIN/END verifier markers");
}

#[test]
fn docs_show_each_verifier_exactly_as_the_file_that_is_tested() {
    let doc = std::fs::read_to_string(repo().join("docs/verifying.md")).expect("docs/verifying.md");
    for (lang, file) in [
        ("python", "docs/verify/verify.py"),
        ("js", "docs/verify/verify.mjs"),
        ("rust", "docs/verify/verify.rs"),
    ] {
        let code = std::fs::read_to_string(repo().join(file)).expect(file);
        let block = format!("```{lang}\n{}```\n", snippet(&code));
        assert!(
            doc.contains(&block),
            "docs/verifying.md must show the snippet of {file} verbatim (copy the lines \
             between BEGIN verifier and END verifier into its ```{lang} block)"
        );
        assert!(
            doc.contains(file.trim_start_matches("docs/")),
            "the doc links {file}"
        );
    }
}

/// A simulation (admin token `t`) and an API key of client `acme` as a bearer header value.
fn simulation_with_key(seed: u64) -> (edgehook_sim::sim::Simulation, String) {
    let mut sim = edgehook_sim::sim::Simulation::builder()
        .seed(seed)
        .config("admin_token", "t")
        .build()
        .expect("simulation");
    let issued = sim
        .request(
            "POST",
            "/internal/v1/clients/acme/keys",
            &[("authorization", "Bearer t")],
            b"",
        )
        .expect("issue");
    let key = issued.json()["data"]["apiKey"]
        .as_str()
        .expect("key")
        .to_owned();
    (sim, format!("Bearer {key}"))
}

#[test]
fn every_verifier_accepts_real_deliveries_and_their_retries() {
    use edgehook_sim::simnet::Reply;
    let (mut sim, key) = simulation_with_key(77);
    let url = "https://hooks.example.com/edgehook";
    sim.net()
        .endpoint(url, [Reply::Status(503), Reply::Status(200)]);
    let body = serde_json::json!({"url": url, "eventTypes": ["load.status_changed"]}).to_string();
    let created = sim
        .request(
            "POST",
            "/v1/webhooks",
            &[
                ("authorization", &key),
                ("content-type", "application/json"),
            ],
            body.as_bytes(),
        )
        .expect("create");
    let secret = created.json()["data"]["signingSecret"]
        .as_str()
        .expect("secret")
        .to_owned();
    let load = "{\"id\":\"L-7\",  \"status\":\"DELIVERED\",\"note\":\"Zürich \\u2192 Köln\"}\n";
    sim.publish("load.status_changed", load.as_bytes())
        .expect("runs")
        .expect("accepted");
    sim.advance(std::time::Duration::from_secs(120))
        .expect("advance");
    let received = sim.net().received_by(url);
    assert_eq!(received.len(), 2, "attempt 1 failed, attempt 2 succeeded");
    assert_eq!(
        received[0].header("x-service-delivery-id"),
        received[1].header("x-service-delivery-id")
    );
    assert_ne!(
        received[0].header("x-service-timestamp"),
        received[1].header("x-service-timestamp")
    );
    for r in &received {
        assert_eq!(r.body, load.as_bytes());
        assert_every_verifier_accepts(&secret, r, r.at_ms);
    }
}

/// During a secret rotation's overlap every verifier accepts a real delivery
/// with the old secret (through `X-Service-Signature`, as SPEC §5.2 reads) and with the new
/// one (through `X-Service-Signatures`), and rejects it with any other.
#[test]
fn every_verifier_accepts_either_secret_during_a_rotation() {
    let (mut sim, key) = simulation_with_key(78);
    let url = "https://hooks.example.com/rotating";
    sim.net().endpoint(url, []);
    let json = [
        ("authorization", key.as_str()),
        ("content-type", "application/json"),
    ];
    let body = serde_json::json!({"url": url, "eventTypes": ["load.created"]}).to_string();
    let created = sim
        .request("POST", "/v1/webhooks", &json, body.as_bytes())
        .expect("create")
        .json();
    let id = created["data"]["id"].as_str().expect("id");
    let old = created["data"]["signingSecret"].as_str().expect("secret");
    let path = format!("/v1/webhooks/{id}/rotate-secret");
    let rotated = sim
        .request("POST", &path, &json, b"{}")
        .expect("rotate")
        .json();
    let new = rotated["data"]["signingSecret"].as_str().expect("secret");
    sim.publish("load.created", b"{\"id\":\"L-1\"}")
        .expect("runs")
        .expect("accepted");
    sim.advance(std::time::Duration::from_secs(1))
        .expect("advance");
    let received = sim.net().received_by(url).pop().expect("a delivery");
    assert!(received.header("x-service-signatures").is_some());
    for (secret, accepted) in [(old, true), (new, true), ("whsec_other", false)] {
        let file = TempFile::new(
            "capture.json",
            &serde_json::to_string(&capture_of(secret, &received, received.at_ms)).expect("json"),
        );
        for verifier in ALL {
            let (status, output) = run(verifier, "capture", &file.path);
            assert_eq!(
                status == 0,
                accepted,
                "{verifier:?} with {secret}: {output}"
            );
        }
    }
}
