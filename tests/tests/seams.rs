//! The seams between the host and the real component: time, key-value faults, config and
//! randomness each reach the component only through the host, and each is observable.

use edgehook_runtime::store::Faults;
use edgehook_sim::sim::Simulation;
use std::time::Duration;

#[test]
fn the_component_sees_time_move_only_when_the_test_advances_it() -> anyhow::Result<()> {
    let mut sim = Simulation::new(1)?;
    let t0 = sim.request("GET", "/healthz", &[], b"")?.json()["serverTimeMs"].as_u64();
    let t1 = sim.request("GET", "/healthz", &[], b"")?.json()["serverTimeMs"].as_u64();
    assert_eq!(t0, Some(sim.now_ms()));
    assert_eq!(
        t0, t1,
        "no time passes between calls unless the test says so"
    );
    sim.advance(Duration::from_secs(90))?;
    let t2 = sim.request("GET", "/healthz", &[], b"")?.json()["serverTimeMs"].as_u64();
    assert_eq!(t2, t0.map(|t| t + 90_000));
    Ok(())
}

#[test]
fn a_key_value_fault_becomes_the_503_envelope() -> anyhow::Result<()> {
    let mut sim = Simulation::new(2)?;
    sim.store().set_faults(Faults {
        fail_all: true,
        ..Faults::default()
    });
    let resp = sim.request("GET", "/healthz", &[], b"")?;
    assert_eq!(resp.status, 503);
    let body = resp.json();
    assert_eq!(body["error"]["code"], "store_unavailable");
    assert_eq!(body["requestId"].as_str(), resp.header("x-request-id"));
    assert!(
        !String::from_utf8_lossy(&resp.body).contains("injected"),
        "no internals leak"
    );
    sim.store().set_faults(Faults::default());
    assert_eq!(sim.request("GET", "/healthz", &[], b"")?.status, 200);
    Ok(())
}

#[test]
fn a_config_value_reaches_the_component() -> anyhow::Result<()> {
    let mut sim = Simulation::builder()
        .seed(3)
        .config("admin_token", "op-secret")
        .config("attempt_timeout_ms", "2500")
        .build()?;
    let auth = [("authorization", "Bearer op-secret")];
    let resp = sim.request("GET", "/internal/v1/settings", &auth, b"")?;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.json()["data"]["attemptTimeoutMs"], 2500);
    assert!(!String::from_utf8_lossy(&resp.body).contains("op-secret"));
    let wrong = [("authorization", "Bearer not-it")];
    assert_eq!(
        sim.request("GET", "/internal/v1/settings", &wrong, b"")?
            .status,
        401
    );
    Ok(())
}

#[test]
fn an_invalid_config_value_is_a_500_naming_no_secret() -> anyhow::Result<()> {
    let mut sim = Simulation::builder()
        .config("max_concurrency", "lots")
        .build()?;
    let resp = sim.request("GET", "/healthz", &[], b"")?;
    assert_eq!(resp.status, 500);
    assert_eq!(resp.json()["error"]["code"], "internal");
    Ok(())
}

#[test]
fn the_same_seed_gives_the_same_request_ids() -> anyhow::Result<()> {
    let ids = |seed: u64| -> anyhow::Result<Vec<String>> {
        let mut sim = Simulation::new(seed)?;
        (0..3)
            .map(|_| {
                let resp = sim.request("GET", "/nowhere", &[], b"")?;
                Ok(resp.header("x-request-id").unwrap_or_default().to_owned())
            })
            .collect()
    };
    let a = ids(7)?;
    assert_eq!(a, ids(7)?);
    assert_ne!(a, ids(8)?);
    assert_eq!(a.iter().collect::<std::collections::BTreeSet<_>>().len(), 3);
    Ok(())
}
