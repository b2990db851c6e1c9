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

/// Component size against the budget, the empty component as baseline.
pub fn size() -> Vec<Row> {
    let size = edgehook_runtime::COMPONENT_WASM.len() as f64 / 1024.0;
    vec![Row {
        name: "component size (vs empty component)".into(),
        value: size,
        unit: "KiB",
        baseline: Some(edgehook_runtime::EMPTY_WASM.len() as f64 / 1024.0),
        target: "<= 512 KiB".into(),
        met: Some(size <= 512.0),
    }]
}
