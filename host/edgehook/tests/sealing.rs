//! `serve` seals signing secrets at rest: with no `seal_key` given it makes one in its data
//! directory (`seal-key`, mode 0600, one warning), no byte of the embedded store's files nor
//! of any value in it (read back through the engine, as the files are compressed) holds a
//! secret, `edgehook backup` copies neither a secret nor the key, deliveries verify with the
//! partner's secret (the test kit's verifier, not the component's), and the copy, once the
//! key is put back beside it, starts a server whose deliveries verify with the same secret.

use crate::common::*;
use edgehook_runtime::embedded::{Durability, open};
use edgehook_runtime::store::KvBackend;
use serde_json::json;
use std::path::Path;

/// A secret's text and its base64 in each alphabet, padded or not.
fn forms(secret: &str) -> Vec<Vec<u8>> {
    use edgehook_component::model::ids::{push_base64, push_base64url};
    let (mut padded, mut url) = (String::new(), String::new());
    push_base64(&mut padded, secret.as_bytes());
    push_base64url(&mut url, secret.as_bytes());
    let pad = "=".repeat(padded.len() - padded.trim_end_matches('=').len());
    vec![
        secret.as_bytes().to_vec(),
        padded.trim_end_matches('=').as_bytes().to_vec(),
        url.as_bytes().to_vec(),
        format!("{url}{pad}").into_bytes(),
        padded.into_bytes(),
    ]
}

fn holds(bytes: &[u8], needles: &[Vec<u8>]) -> bool {
    needles
        .iter()
        .any(|n| bytes.windows(n.len()).any(|w| w == n.as_slice()))
}

/// Every file under `dir` whose bytes hold one of `needles`.
fn files_holding(dir: &Path, needles: &[Vec<u8>]) -> Vec<String> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else if std::fs::read(&path).is_ok_and(|b| holds(&b, needles)) {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

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
    let mut restored = Proc::start(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--allow-http",
            "--allow-private-targets",
            "--data-dir",
            "copy",
        ],
        &dir,
    );
    let restored_base = format!("http://{}", restored.address());
    let token = std::fs::read_to_string(dir.join("copy/admin-token")).expect("token");
    let operator = edgehook::cli::Remote::new(&restored_base, token.trim()).expect("operator");
    let before = recv.received().len();
    publish_event(&rt, &operator, "load.created", br#"{"id":"L2"}"#);
    wait_for("the restored delivery", || recv.received().len() > before);
    let r = recv.received()[before].clone();
    assert!(edgehook_testkit::signature::verifies(
        &secret,
        r.header("x-service-timestamp"),
        r.header("x-service-signature"),
        &r.body,
    ));
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
