//! How the component scales: the simulation's speed, the cost of publish and list as the
//! data grows, and the component's size.

use crate::measure::{percentile_us, timed};
use crate::setup::{create, create_many, env, issue_key, req};
use crate::table::Row;
use anyhow::Result;
use edgehook_runtime::Runtime;
use edgehook_runtime::store::{KvStore, MemoryStore};
use edgehook_sim::scenario::{self, Scenario};
use std::sync::Arc;
use std::time::Duration;

/// 10,000 deliveries through the full retry schedule on the simulation host.
pub fn simulation_speed() -> Result<Vec<Row>> {
    let s = Scenario {
        subscriptions: 100,
        events: 100,
        ..Scenario::default()
    };
    let o = scenario::run(&s)?;
    o.check(&s).map_err(|p| anyhow::anyhow!("ledger: {p:?}"))?;
    let secs = o.wall.as_secs_f64();
    Ok(vec![Row {
        name: format!(
            "simulation: {} deliveries, {} attempts, 30% failing",
            o.created, o.attempts
        ),
        value: secs,
        unit: "s",
        baseline: None,
        target: "< 5 s".into(),
        met: Some(secs < 5.0),
    }])
}

/// Publish and list cost at 10, 1,000 and 10,000 subscriptions in the store: 10 of them
/// match the published type and the listing client has 50; the rest belong to others.
pub async fn cost_growth() -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut first: Option<(f64, f64)> = None;
    for total in [10usize, 1000, 10_000] {
        let store = Arc::new(MemoryStore::new());
        let env = env(KvStore::Local(store.clone()));
        let rt = Runtime::embedded()?;
        let key = issue_key(rt, &env, "owner").await?;
        create_many(rt, &env, &key, "m", 10, "load.created").await?;
        let lister = issue_key(rt, &env, "lister").await?;
        create_many(rt, &env, &lister, "l", 50, "load.updated").await?;
        let mut others = String::new();
        for i in 0..total.saturating_sub(10) {
            if i % 10_000 == 0 {
                others = issue_key(rt, &env, &format!("other{i}")).await?;
            }
            create(
                rt,
                &env,
                &others,
                &format!("https://o{i}.example.com/x"),
                "load.status_changed",
            )
            .await?;
        }
        let runs = 200;
        let ops0 = store.ops();
        let publish = timed(runs, |_| async {
            rt.publish(&env, "load.created", br#"{"id":"L"}"#)
                .await?
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
            Ok(())
        })
        .await?;
        let publish_ops = (store.ops() - ops0) as f64 / runs as f64;
        let list = timed(runs, |_| async {
            rt.handle(&env, req("GET", "/v1/webhooks?limit=50", &lister, ""))
                .await
                .map(|_| ())
        })
        .await?;
        let (p, l) = (percentile_us(&publish, 0.5), percentile_us(&list, 0.5));
        let (p0, l0) = *first.get_or_insert((p, l));
        rows.push(Row {
            name: format!(
                "publish (10 matching) at {total} subscriptions, p50; {publish_ops:.0} ops"
            ),
            value: p,
            unit: "us",
            baseline: Some(p0),
            target: "flat as total grows".into(),
            met: Some(p <= 2.0 * p0),
        });
        rows.push(Row {
            name: format!("list (50 own) at {total} subscriptions, p50"),
            value: l,
            unit: "us",
            baseline: Some(l0),
            target: "flat as total grows".into(),
            met: Some(l <= 2.0 * l0),
        });
    }
    Ok(rows)
}

/// The state [`history_growth`] measures: 10 subscriptions of `owner` listen to
/// `load.created`, `lister` has 50 on `load.updated`; then `lister` creates a subscription to
/// `load.created` and deletes it `cycles` times, lengthening the history of both the
/// fan-out list publish reads and the client index list reads.
struct History {
    store: Arc<MemoryStore>,
    env: edgehook_runtime::HostEnv,
    lister: String,
}

impl History {
    async fn new(rt: &Runtime, cycles: usize) -> Result<History> {
        let store = Arc::new(MemoryStore::new());
        let env = env(KvStore::Local(store.clone()));
        let owner = issue_key(rt, &env, "owner").await?;
        create_many(rt, &env, &owner, "m", 10, "load.created").await?;
        let lister = issue_key(rt, &env, "lister").await?;
        create_many(rt, &env, &lister, "l", 50, "load.updated").await?;
        for i in 0..cycles {
            let url = format!("https://churn{i}.example.com/x");
            let id = create(rt, &env, &lister, &url, "load.created").await?;
            let path = format!("/v1/webhooks/{id}");
            let resp = rt.handle(&env, req("DELETE", &path, &lister, "")).await?;
            anyhow::ensure!(resp.status == 200, "delete: {}", resp.status);
        }
        Ok(History { store, env, lister })
    }

    /// `runs` publishes and `runs` lists: their durations, and store operations per call
    /// (a list's answer is checked once, before it is timed).
    async fn measure(&self, rt: &Runtime, runs: usize) -> Result<[(Vec<Duration>, f64); 2]> {
        let ops0 = self.store.ops();
        let publish = timed(runs, |_| async {
            rt.publish(&self.env, "load.created", br#"{"id":"L"}"#)
                .await?
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
            Ok(())
        })
        .await?;
        let list = || req("GET", "/v1/webhooks?limit=50", &self.lister, "");
        let resp = rt.handle(&self.env, list()).await?;
        anyhow::ensure!(resp.json()["data"].as_array().map(Vec::len) == Some(50));
        let ops1 = self.store.ops();
        let list = timed(runs, |_| async {
            rt.handle(&self.env, list()).await?;
            Ok(())
        })
        .await?;
        let per = |ops: u64| ops as f64 / runs as f64;
        Ok([
            (publish, per(ops1 - ops0)),
            (list, per(self.store.ops() - ops1)),
        ])
    }
}

/// Publish (10 matching) and list (50) in a fresh store against the same after
/// `cycles` create/delete cycles. The two stores are measured in alternating rounds, so
/// the machine's drift falls on both; store operations per call are exact.
pub async fn history_growth(cycles: usize) -> Result<Vec<Row>> {
    let rt = Runtime::embedded()?;
    let fresh = History::new(rt, 0).await?;
    let churned = History::new(rt, cycles).await?;
    let mut samples: [[Vec<Duration>; 2]; 2] = Default::default();
    let mut ops = [[0.0; 2]; 2];
    for _ in 0..10 {
        for (s, history) in [&fresh, &churned].into_iter().enumerate() {
            for (k, (durations, per)) in history.measure(rt, 40).await?.into_iter().enumerate() {
                samples[s][k].extend(durations);
                ops[s][k] = per;
            }
        }
    }
    let mut rows = Vec::new();
    for (k, what) in ["publish (10 matching)", "list (50 own)"]
        .into_iter()
        .enumerate()
    {
        let [mut a, mut b] = [samples[0][k].clone(), samples[1][k].clone()];
        a.sort();
        b.sort();
        let (p0, p1) = (percentile_us(&a, 0.5), percentile_us(&b, 0.5));
        rows.push(Row {
            name: format!("{what} after {cycles} create/delete cycles, p50 (vs fresh)"),
            value: p1,
            unit: "us",
            baseline: Some(p0),
            target: "<= 1.1x".into(),
            met: Some(p1 <= 1.1 * p0),
        });
        rows.push(Row {
            name: format!("{what} after {cycles} create/delete cycles, store operations"),
            value: ops[1][k],
            unit: "ops",
            baseline: Some(ops[0][k]),
            target: "<= 1.1x (exact)".into(),
            met: Some(ops[1][k] <= 1.1 * ops[0][k]),
        });
    }
    Ok(rows)
}

/// Component size against the budget, the empty component as baseline.
pub fn size() -> Vec<Row> {
    let size = edgehook_runtime::COMPONENT_WASM.len() as f64 / 1024.0;
    vec![Row {
        name: "component size (vs empty component)".into(),
        value: size,
        unit: "KiB",
        baseline: Some(edgehook_runtime::EMPTY_WASM.len() as f64 / 1024.0),
        target: format!("<= {} KiB", edgehook_runtime::COMPONENT_SIZE_BUDGET / 1024),
        met: Some(size <= edgehook_runtime::COMPONENT_SIZE_BUDGET as f64 / 1024.0),
    }]
}
