//! Whole-system scenarios on the simulation host: many subscriptions, many events, a share of
//! failing endpoints, the full retry schedule on virtual time, then an audit of every
//! delivery record. Used by the tests (small sizes), the benchmark and `edgehook-sim` (large
//! ones).

use crate::sim::Simulation;
use crate::simnet::Reply;
use anyhow::{Context as _, Result, bail, ensure};
use edgehook_component::delivery::Delivery;
use edgehook_component::storage::keys;
use edgehook_component::subscriptions::Subscription;
use edgehook_testkit::progress::Progress;
use serde_json::Value;
use std::time::{Duration, Instant};

/// What to simulate.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Subscriptions, all listening to `load.updated`.
    pub subscriptions: usize,
    /// Events published, one every `spacing`.
    pub events: usize,
    /// Percentage of endpoints that always answer 503.
    pub failing_percent: u64,
    /// Virtual time between two events.
    pub spacing: Duration,
    /// Randomness seed.
    pub seed: u64,
    /// Attempts one tick runs at once.
    pub max_concurrency: u32,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            subscriptions: 100,
            events: 100,
            failing_percent: 30,
            spacing: Duration::from_secs(1),
            seed: 1,
            max_concurrency: 16,
        }
    }
}

/// The audit of a finished scenario.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Delivery records created.
    pub created: usize,
    /// Ended succeeded.
    pub succeeded: usize,
    /// Ended failed.
    pub failed: usize,
    /// Ended cancelled (their subscription was disabled).
    pub cancelled: usize,
    /// Still pending (must be 0 once the schedule has run out).
    pub pending: usize,
    /// Attempts recorded in all delivery records.
    pub attempts: usize,
    /// Requests the simulated endpoints received.
    pub requests_received: usize,
    /// The most attempts any delivery had.
    pub max_attempts: usize,
    /// Attempts not sent at the moment they were due.
    pub off_schedule: usize,
    /// Subscriptions disabled for repeated failures.
    pub disabled: usize,
    /// Deliveries whose attempts do not match their status (a success not last, a failure
    /// with other than 3 failed attempts).
    pub irregular: usize,
    /// Wall-clock time the scenario took (setup excluded).
    pub wall: Duration,
}

const CLIENT_CAP: usize = 100;

/// Whether endpoint `i` of scenario `s` always fails.
pub fn is_failing(s: &Scenario, i: usize) -> bool {
    (i as u64 * 7919 + s.seed) % 100 < s.failing_percent
}

/// Runs a scenario and audits every delivery record.
pub fn run(s: &Scenario) -> Result<Outcome> {
    run_with(s, &mut Progress::silent())
}

/// [`run`], showing its progress (subscriptions created, events published) on `progress`.
pub fn run_with(s: &Scenario, progress: &mut Progress) -> Result<Outcome> {
    let mut sim = Simulation::builder()
        .seed(s.seed)
        .config("admin_token", "scenario")
        .config("max_concurrency", &s.max_concurrency.to_string())
        .build()?;
    let admin = [("authorization", "Bearer scenario")];
    let mut key = String::new();
    progress.phase("creating subscriptions", s.subscriptions as u64);
    for i in 0..s.subscriptions {
        progress.set(i as u64);
        if i % CLIENT_CAP == 0 {
            let resp = sim.request(
                "POST",
                &format!("/internal/v1/clients/c{i}/keys"),
                &admin,
                b"",
            )?;
            ensure!(resp.status == 201, "issuing a key: {}", resp.status);
            key = resp.json()["data"]["apiKey"]
                .as_str()
                .context("apiKey")?
                .to_owned();
        }
        let url = format!("https://s{i}.example.com/hook");
        let fails = is_failing(s, i);
        sim.net()
            .endpoint(&url, [Reply::Status(if fails { 503 } else { 200 })]);
        let body = serde_json::json!({"url": url, "eventTypes": ["load.updated"]}).to_string();
        let auth = format!("Bearer {key}");
        let resp = sim.request(
            "POST",
            "/v1/webhooks",
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            body.as_bytes(),
        )?;
        ensure!(resp.status == 201, "create: {}", resp.status);
    }
    let started = Instant::now();
    progress.phase("publishing events", s.events as u64);
    for n in 0..s.events {
        progress.set(n as u64);
        let load = format!(r#"{{"id":"L{n}","status":"ASSIGNED","updatedAt":{n}}}"#);
        match sim.publish("load.updated", load.as_bytes())? {
            Ok(_) => {}
            Err(e) => bail!("publish {n}: {e:?}"),
        }
        sim.advance(Duration::ZERO)?;
        sim.advance(s.spacing)?;
    }
    progress.phase("running the retries left", 0);
    sim.advance(Duration::from_secs(3600))?;
    progress.phase("auditing the ledger", 0);
    let wall = started.elapsed();
    let outcome = audit(&sim, wall);
    progress.clear();
    outcome
}

impl Outcome {
    /// Checks the ledger against what the schedule says must have happened: every delivery
    /// ended (succeeded, failed or cancelled), none had a 4th attempt, every attempt ran when
    /// due and reached the endpoint exactly once, every healthy endpoint got every event, and
    /// every failing endpoint ended disabled. Returns every violation found.
    pub fn check(&self, s: &Scenario) -> Result<(), Vec<String>> {
        let healthy = (0..s.subscriptions).filter(|i| !is_failing(s, *i)).count();
        let mut problems = Vec::new();
        let mut expect = |ok: bool, what: String| {
            if !ok {
                problems.push(what);
            }
        };
        expect(
            self.pending == 0,
            format!("{} deliveries still pending", self.pending),
        );
        expect(
            self.created == self.succeeded + self.failed + self.cancelled,
            format!("created {} != succeeded + failed + cancelled", self.created),
        );
        expect(
            self.succeeded == healthy * s.events,
            format!(
                "succeeded {} != {healthy} healthy x {} events",
                self.succeeded, s.events
            ),
        );
        expect(
            self.max_attempts <= 3,
            format!("a delivery had {} attempts", self.max_attempts),
        );
        expect(
            self.irregular == 0,
            format!("{} irregular deliveries", self.irregular),
        );
        expect(
            self.off_schedule == 0,
            format!("{} attempts off schedule", self.off_schedule),
        );
        expect(
            self.attempts == self.requests_received,
            format!(
                "{} attempts recorded, {} received",
                self.attempts, self.requests_received
            ),
        );
        expect(
            self.disabled == s.subscriptions - healthy,
            format!(
                "{} disabled, {} failing",
                self.disabled,
                s.subscriptions - healthy
            ),
        );
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}

fn audit(sim: &Simulation, wall: Duration) -> Result<Outcome> {
    let mut o = Outcome {
        wall,
        requests_received: sim.net().received().len(),
        ..Outcome::default()
    };
    for (key, value) in sim.store().snapshot() {
        if key.starts_with(keys::SUBSCRIPTION_PREFIX) {
            let sub = Subscription::decode(&value)
                .map_err(|e| anyhow::anyhow!("{key}: {}", e.log.unwrap_or(e.message)))?;
            o.disabled += usize::from(sub.disabled_reason.as_deref() == Some("repeated_failures"));
        }
        if !key.starts_with(keys::DELIVERY_PREFIX) {
            continue;
        }
        let d: Value = serde_json::to_value(
            Delivery::decode(&value)
                .map_err(|e| anyhow::anyhow!("{key}: {e}"))?
                .view(),
        )?;
        o.created += 1;
        match d["status"].as_str() {
            Some("succeeded") => o.succeeded += 1,
            Some("failed") => o.failed += 1,
            Some("cancelled") => o.cancelled += 1,
            _ => o.pending += 1,
        }
        let attempts = d["attempts"].as_array().context("attempts")?;
        let ok = |a: &Value| a["succeeded"] == true;
        let regular = match d["status"].as_str() {
            Some("succeeded") => {
                attempts.last().is_some_and(ok) && attempts.iter().filter(|a| ok(a)).count() == 1
            }
            Some("failed") => attempts.len() == 3 && !attempts.iter().any(ok),
            Some("cancelled") => attempts.len() < 3 && !attempts.iter().any(ok),
            _ => false,
        };
        o.irregular += usize::from(!regular);
        o.attempts += attempts.len();
        o.max_attempts = o.max_attempts.max(attempts.len());
        o.off_schedule += attempts
            .iter()
            .filter(|a| a["dueAt"] != a["startedAt"])
            .count();
    }
    Ok(o)
}
