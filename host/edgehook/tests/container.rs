//! The container image (deploy/container/Containerfile, `FROM scratch`): `tools/container.sh`
//! lays out its root filesystem from this test build's binary, `podman build` builds it and
//! `podman save` writes it to a tar. Containers cannot be started on the CI machine, so the
//! proof is the saved image itself: its config (a non-root user, the volume, the ports, the
//! health check, the command) is read from the tar, its one layer is unpacked, and `serve`
//! runs from that root filesystem under `chroot` as the image's user, with the image's
//! command and environment: the health check answers, and a published event is delivered
//! to a loopback receiver. A library missing from the image fails it there. `.ci/run`
//! installs podman (Debian's); without it, or without root (for `chroot`), the test is
//! skipped, and fails under CI.

use crate::common::*;
use edgehook_testkit::skipped;
use serde_json::{Value, json};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The admin token and seal key the image is run with, as an operator passes them.
const ADMIN_TOKEN: &str = "container-test-admin-token-0123456789abcdef";
const SEAL_KEY: &str = "8d2f0c5a6b7e4f1a9c3d2e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6a7b8c9d";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// `command`'s output; panics with its stderr unless it exits 0.
fn run(command: &mut Command) -> Output {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// podman with its storage and state under `dir`, so nothing is left behind. vfs: a driver
/// that works in any container the CI may run in (overlay on overlay may not); with one
/// layer it copies no more than overlay would.
fn podman(dir: &Path) -> Command {
    let mut command = Command::new("podman");
    for (flag, sub) in [
        ("--root", "storage"),
        ("--runroot", "run"),
        ("--tmpdir", "tmp"),
    ] {
        command.arg(flag).arg(dir.join(sub));
    }
    command.args(["--storage-driver", "vfs", "--events-backend", "none"]);
    command
}

/// Whether this machine can run the test: podman installed, and root (for `chroot`).
fn can_run() -> bool {
    let podman = Command::new("podman")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !podman {
        skipped("podman is not installed (.ci/run installs Debian's)");
        return false;
    }
    if std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() != 0) {
        skipped("not root: the image's root filesystem is run under chroot");
        return false;
    }
    true
}

/// Builds the image from `BIN` in `dir`, saves it and unpacks it: the image's config and the
/// directory its layer was unpacked into.
fn build_save_unpack(dir: &Path) -> (Value, PathBuf) {
    let context = dir.join("context");
    run(Command::new(repo("tools/container.sh"))
        .arg(BIN)
        .arg(&context));
    let tag = "localhost/edgehook:container-test";
    run(podman(dir)
        .args(["build", "--quiet", "--format", "docker", "-t", tag])
        .arg(&context));
    let saved = dir.join("image.tar");
    run(podman(dir)
        .args(["save", "--quiet", "--format", "docker-archive", "-o"])
        .arg(&saved)
        .arg(tag));
    let unpacked = dir.join("saved");
    std::fs::create_dir_all(&unpacked).expect("mkdir");
    run(Command::new("tar")
        .arg("-xf")
        .arg(&saved)
        .arg("-C")
        .arg(&unpacked));
    let read_json = |name: &str| -> Value {
        let text = std::fs::read(unpacked.join(name)).expect(name);
        serde_json::from_slice(&text).expect("json")
    };
    let manifest = read_json("manifest.json");
    let image = &manifest[0];
    let layers = image["Layers"].as_array().expect("Layers");
    assert_eq!(layers.len(), 1, "FROM scratch and one ADD: one layer");
    let config = read_json(image["Config"].as_str().expect("Config"))["config"].clone();
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).expect("mkdir");
    // As root, tar keeps the owners the layer says (/data is the image user's).
    run(Command::new("tar")
        .arg("-xf")
        .arg(unpacked.join(layers[0].as_str().expect("layer")))
        .arg("-C")
        .arg(&rootfs));
    (config, rootfs)
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|s| s.as_str().expect("string"))
        .collect()
}

/// The image's config: a non-root user, `/data` a volume, the API's and the metrics' ports,
/// a health check of the binary's own, `serve` on all addresses with its data in `/data`.
fn check_config(config: &Value) -> u32 {
    let user = config["User"].as_str().expect("User");
    let uid: u32 = user
        .split(':')
        .next()
        .unwrap_or("")
        .parse()
        .expect("a numeric uid");
    assert_ne!(uid, 0, "the image runs as a non-root user: {user}");
    assert!(config["Volumes"].get("/data").is_some(), "{config}");
    for port in ["8080/tcp", "9464/tcp"] {
        assert!(
            config["ExposedPorts"].get(port).is_some(),
            "{port}: {config}"
        );
    }
    assert_eq!(
        strings(&config["Healthcheck"]["Test"]),
        ["CMD", "/usr/local/bin/edgehook", "healthcheck"]
    );
    assert_eq!(strings(&config["Entrypoint"]), ["/usr/local/bin/edgehook"]);
    let cmd = strings(&config["Cmd"]);
    assert_eq!(cmd[0], "serve");
    for pair in [["--listen", "0.0.0.0:8080"], ["--data-dir", "/data"]] {
        assert!(cmd.windows(2).any(|w| w == pair), "{pair:?} in {cmd:?}");
    }
    uid
}

/// The root filesystem: the test's binary as built, the user's /data, the CA certificates.
fn check_rootfs(rootfs: &Path, uid: u32) {
    let bin = rootfs.join("usr/local/bin/edgehook");
    assert!(
        std::fs::read(&bin).expect("the binary") == std::fs::read(BIN).expect("BIN"),
        "the image holds the binary it was made from"
    );
    let data = std::fs::metadata(rootfs.join("data")).expect("/data");
    assert!(data.is_dir() && data.uid() == uid && data.gid() == uid);
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).expect("passwd");
    assert!(passwd.contains(&format!(":x:{uid}:{uid}:")), "{passwd}");
    let cas = std::fs::read_to_string(rootfs.join("etc/ssl/certs/ca-certificates.crt"));
    assert!(cas.expect("the CA bundle").contains("BEGIN CERTIFICATE"));
}

/// `argv` (the image's entrypoint and a command) run from `rootfs` as the image's user, with
/// the image's environment and `env`.
fn in_image(rootfs: &Path, config: &Value, argv: &[String], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new("chroot");
    command
        .arg(format!(
            "--userspec={}",
            config["User"].as_str().expect("User")
        ))
        .arg(rootfs)
        .args(argv)
        .env_clear()
        .envs(env.iter().copied());
    for pair in strings(&config["Env"]) {
        let (k, v) = pair.split_once('=').expect("NAME=value");
        command.env(k, v);
    }
    command
}

/// The image's entrypoint and command, on loopback ports of the system's choosing and
/// delivering to loopback receivers.
fn serve_argv(config: &Value) -> Vec<String> {
    let mut argv: Vec<String> = strings(&config["Entrypoint"])
        .into_iter()
        .chain(strings(&config["Cmd"]))
        .map(str::to_owned)
        .collect();
    for i in 1..argv.len() {
        if matches!(argv[i - 1].as_str(), "--listen" | "--metrics-listen") {
            argv[i] = "127.0.0.1:0".to_owned();
        }
    }
    argv.extend(["--allow-http", "--allow-private-targets"].map(str::to_owned));
    argv
}

/// The image's health check from its config, against `url`: whether it exited 0.
fn healthcheck(rootfs: &Path, config: &Value, url: &str) -> bool {
    let argv: Vec<String> = strings(&config["Healthcheck"]["Test"])[1..]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let out = in_image(rootfs, config, &argv, &[("EDGEHOOK_HEALTHCHECK_URL", url)])
        .output()
        .expect("the health check");
    out.status.success()
}

#[test]
fn the_saved_image_runs_serve_as_its_user_answers_its_health_check_and_delivers() {
    if !can_run() {
        return;
    }
    let dir = temp_dir("container");
    let (config, rootfs) = build_save_unpack(&dir);
    let uid = check_config(&config);
    check_rootfs(&rootfs, uid);

    let env = [
        ("EDGEHOOK_ADMIN_TOKEN", ADMIN_TOKEN),
        ("EDGEHOOK_SEAL_KEY", SEAL_KEY),
    ];
    let mut server = Proc::spawn(in_image(&rootfs, &config, &serve_argv(&config), &env));
    let base = format!("http://{}", server.address());
    assert!(healthcheck(&rootfs, &config, &format!("{base}/healthz")));
    let closed = edgehook_testkit::free_port();
    assert!(!healthcheck(
        &rootfs,
        &config,
        &format!("http://127.0.0.1:{closed}/healthz")
    ));

    let rt = rt();
    let recv = receiver(&rt);
    let operator = edgehook::cli::Remote::new(&base, ADMIN_TOKEN).expect("operator");
    let (status, issued) = rt
        .block_on(operator.call("POST", "/internal/v1/clients/acme/keys", None, &[]))
        .expect("issue a key");
    assert_eq!(status, 201, "{issued}");
    let issued: Value = serde_json::from_str(&issued).expect("json");
    let key = issued["data"]["apiKey"].as_str().expect("apiKey");
    let url = recv.url("/image");
    let data = create_subscription(
        &rt,
        &base,
        key,
        &json!({"url": url, "eventTypes": ["load.created"]}),
    );
    let secret = data["signingSecret"].as_str().expect("secret").to_owned();
    publish_event(&rt, &operator, "load.created", br#"{"id":"L-IMAGE"}"#);
    wait_for("the delivery", || !recv.received().is_empty());
    let r = recv.received()[0].clone();
    assert!(r.text().contains("L-IMAGE"), "{}", r.text());
    assert!(edgehook_testkit::signature::verifies(
        &secret,
        r.header("x-service-timestamp"),
        r.header("x-service-signature"),
        &r.body,
    ));
    // The store was made in the volume, by the image's user.
    let store = std::fs::metadata(rootfs.join("data/store")).expect("/data/store");
    assert_eq!(store.uid(), uid);
    server.kill();
    let _ = std::fs::remove_dir_all(&dir);
}
