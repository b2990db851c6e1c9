//! `serve` seals signing secrets at rest: with no `seal_key` given it makes one in its data
//! directory (`seal-key`, mode 0600, one warning), no byte of the embedded store's files nor
//! of any value in it (read back through the engine, as the files are compressed) holds a
//! secret, `edgehook backup` copies neither a secret nor the key, deliveries verify with the
//! partner's secret (the test kit's verifier, not the component's), and the copy, once the
//! key is put back beside it, starts a server whose deliveries verify with the same secret;
//! after a key rotation, `edgehook reseal` seals it under the new key, which then serves
//! alone.

use crate::common::*;
use edgehook_runtime::embedded::{Durability, open};
use edgehook_runtime::store::KvBackend;
use edgehook_testkit::secrets::{files_holding, forms, holds};
use serde_json::json;
use std::path::Path;

/// The keys of the embedded store at `store` whose values hold one of `needles`, read
/// through the engine (its files are compressed).
fn values_holding(store: &Path, needles: &[Vec<u8>]) -> Vec<String> {
    let kv = open(store, Durability::Always).expect("open the copy");
    let mut keys = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = kv.list_keys(cursor.as_deref(), 1000).expect("list");
        let Some(last) = page.last().cloned() else {
            break;
        };
        keys.extend(page);
        cursor = Some(last);
    }
    keys.into_iter()
        .filter(|k| kv.get(k).expect("get").is_some_and(|v| holds(&v, needles)))
        .collect()
}

#[test]
fn serve_seals_secrets_under_its_key_file_and_no_stored_byte_or_backup_holds_one() {
    let dir = temp_dir("sealing");
    let rt = rt();
    let recv = receiver(&rt);
    let mut server = Proc::start(&serve_to_loopback("attempt_timeout_ms=1000"), &dir);
    server.wait_for("the seal key warning", |l| l.contains("seal key created"));
    let key_file = dir.join("edgehook-data/seal-key");
    let seal_key = std::fs::read_to_string(&key_file).expect("seal-key");
    assert!(
        seal_key.len() == 64 && seal_key.bytes().all(|b| b.is_ascii_hexdigit()),
        "64 hex digits"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&key_file)
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let (base, operator, key) = operator_and_key(&rt, &dir, &mut server);
    let url = format!("http://127.0.0.1:{}/sealed", recv.port());
    let data = create_subscription(
        &rt,
        &base,
        &key,
        &json!({"url": url, "eventTypes": ["load.created"]}),
    );
    let secret = data["signingSecret"].as_str().expect("secret").to_owned();
    let id = data["id"].as_str().expect("id").to_owned();
    publish_event(&rt, &operator, "load.created", br#"{"id":"L1"}"#);
    wait_for("the delivery", || !recv.received().is_empty());
    let r = recv.received()[0].clone();
    let verifies = |secret: &str| {
        edgehook_testkit::signature::verifies(
            secret,
            r.header("x-service-timestamp"),
            r.header("x-service-signature"),
            &r.body,
        )
    };
    assert!(verifies(&secret));
    assert!(!verifies("whsec_another"), "the check can fail");

    let out = std::process::Command::new(BIN)
        .args(["backup", "--to", "copy"])
        .current_dir(&dir)
        .output()
        .expect("backup");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    assert!(text.contains("the seal key is not in it"), "{text}");
    assert!(!dir.join("copy/seal-key").exists());

    let secret_forms = forms(&secret);
    let mut with_key = secret_forms.clone();
    with_key.push(seal_key.as_bytes().to_vec());
    with_key.extend(forms(&seal_key));
    assert_eq!(
        files_holding(&dir.join("edgehook-data/store"), &secret_forms),
        Vec::<String>::new()
    );
    assert_eq!(
        files_holding(&dir.join("copy"), &with_key),
        Vec::<String>::new()
    );
    assert_eq!(
        values_holding(&dir.join("copy/store"), &secret_forms),
        Vec::<String>::new()
    );
    // The search reads every value: it finds what is stored in the clear.
    let found = values_holding(&dir.join("copy/store"), &[id.as_bytes().to_vec()]);
    assert!(found.iter().any(|k| k.ends_with(id.as_str())), "{found:?}");

    // The copy with the key put back: a server whose deliveries verify with the secret.
    server.kill();
    std::fs::copy(&key_file, dir.join("copy/seal-key")).expect("key back");
    let serve_copy = |extra: &[&str]| {
        let mut args = vec![
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--allow-http",
            "--allow-private-targets",
            "--data-dir",
            "copy",
        ];
        args.extend(extra);
        Proc::start(&args, &dir)
    };
    // Whether a load published to `server` reaches the receiver signed with the secret.
    let delivered_signed = |server: &mut Proc, load: &[u8]| {
        let base = format!("http://{}", server.address());
        let token = std::fs::read_to_string(dir.join("copy/admin-token")).expect("token");
        let operator = edgehook::cli::Remote::new(&base, token.trim()).expect("operator");
        let before = recv.received().len();
        publish_event(&rt, &operator, "load.created", load);
        wait_for("the delivery", || recv.received().len() > before);
        let r = recv.received()[before].clone();
        edgehook_testkit::signature::verifies(
            &secret,
            r.header("x-service-timestamp"),
            r.header("x-service-signature"),
            &r.body,
        )
    };
    let mut restored = serve_copy(&[]);
    assert!(delivered_signed(&mut restored, br#"{"id":"L2"}"#));

    // A key rotation: the new key, the old one as the previous; `edgehook reseal` seals
    // every secret under the new key, a batch a call with its count on stderr; after it the
    // old key can go, and deliveries verify under the new key alone.
    restored.kill();
    let rotating = format!("--set=seal_previous_key={}", seal_key.trim());
    let with_new = format!("--set=seal_key={}", "7".repeat(64));
    let mut rotated = serve_copy(&[&with_new, &rotating]);
    let rotated_base = format!("http://{}", rotated.address());
    let out = std::process::Command::new(BIN)
        .args(["reseal", "--batch", "1", "--data-dir", "copy", "--server"])
        .arg(&rotated_base)
        .current_dir(&dir)
        .output()
        .expect("reseal");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("a JSON report");
    assert_eq!(report["resealed"], 1, "{stdout}");
    assert_eq!(report["unreadable"], json!([]), "{stdout}");
    assert!(
        report["batches"].as_u64() >= Some(2),
        "a record a call: {stdout}"
    );
    assert!(stderr.contains("1 re-sealed, 0 unreadable"), "{stderr}");
    rotated.kill();
    let mut renewed = serve_copy(&[&with_new]);
    assert!(delivered_signed(&mut renewed, br#"{"id":"L3"}"#));
    renewed.kill();
}

#[test]
fn on_redis_with_a_seal_key_no_value_holds_a_secret() {
    use edgehook_runtime::redisstore::{RedisOptions, RedisStore};
    use edgehook_runtime::store::RemoteKv;
    if !edgehook_testkit::redis::redis_or_skip() {
        return;
    }
    let redis = edgehook_testkit::redis::shared_redis();
    let dir = temp_dir("sealing-redis");
    let rt = rt();
    let recv = receiver(&rt);
    let prefix = format!("sealing{}:", std::process::id());
    let url = redis.url();
    let seal_key = "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789";
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--allow-http",
        "--allow-private-targets",
        "--kv",
        &url,
        "--kv-prefix",
        &prefix,
    ];
    let mut server = Proc::start_with_env(&args, &dir, &[("EDGEHOOK_SEAL_KEY", seal_key)]);
    let (base, operator, key) = operator_and_key(&rt, &dir, &mut server);
    let hook = format!("http://127.0.0.1:{}/redis", recv.port());
    let data = create_subscription(
        &rt,
        &base,
        &key,
        &json!({"url": hook, "eventTypes": ["load.created"]}),
    );
    let secret = data["signingSecret"].as_str().expect("secret").to_owned();
    let id = data["id"].as_str().expect("id").to_owned();
    publish_event(&rt, &operator, "load.created", br#"{"id":"R1"}"#);
    wait_for("the delivery", || !recv.received().is_empty());
    let r = recv.received()[0].clone();
    assert!(edgehook_testkit::signature::verifies(
        &secret,
        r.header("x-service-timestamp"),
        r.header("x-service-signature"),
        &r.body,
    ));
    let store = rt
        .block_on(RedisStore::open_with(
            &url,
            RedisOptions {
                prefix: prefix.clone(),
                ..RedisOptions::default()
            },
        ))
        .expect("redis");
    let mut keys = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = rt
            .block_on(store.list_keys(cursor.as_deref(), 1000))
            .expect("list");
        let Some(last) = page.last().cloned() else {
            break;
        };
        keys.extend(page);
        cursor = Some(last);
    }
    let mut needles = forms(&secret);
    needles.extend(forms(seal_key));
    let (mut holding, mut with_id) = (Vec::new(), 0);
    for k in &keys {
        let value = rt.block_on(store.get(k)).expect("get").unwrap_or_default();
        if holds(&value, &needles) || holds(k.as_bytes(), &needles) {
            holding.push(k.clone());
        }
        with_id += usize::from(holds(&value, &[id.as_bytes().to_vec()]));
    }
    assert_eq!(holding, Vec::<String>::new());
    assert!(with_id > 0, "the search reads the values: {keys:?}");
}
