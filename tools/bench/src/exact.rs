//! The exact rows (guest fuel, host calls and store operations per request: the same on
//! every run of a build, on any machine) against a committed baseline (`tools/bench/exact-baseline.json`):
//! the suite exits non-zero when one exceeds its baseline by more than [`TOLERANCE`], so a
//! smoke run in CI catches a regression no timing could show. `--write-baseline` records the
//! run's exact rows as the new baseline (after a change that costs more on purpose; say why
//! in BENCHMARKS.md).

use crate::table::Row;
use anyhow::{Context as _, Result};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// How much an exact row may exceed its baseline.
pub const TOLERANCE: f64 = 0.05;

/// The committed baseline file.
pub fn baseline_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("exact-baseline.json")
}

/// Whether a row is an exact count (fuel, host calls, store operations).
fn exact(row: &Row) -> bool {
    matches!(row.unit, "fuel" | "calls" | "ops")
}

/// The rows over their baseline by more than [`TOLERANCE`], as lines to print. Rows the
/// baseline does not name are not judged (a new row is added by `--write-baseline`).
pub fn regressions(rows: &[Row]) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(baseline_path())
        .with_context(|| format!("reading {}", baseline_path().display()))?;
    let baseline: BTreeMap<String, f64> =
        serde_json::from_str(&text).context("the exact baseline is a JSON object of numbers")?;
    Ok(rows
        .iter()
        .filter(|r| exact(r))
        .filter_map(|r| {
            let base = baseline.get(&r.name)?;
            (r.value > base * (1.0 + TOLERANCE)).then(|| {
                format!(
                    "REGRESSION {}: {} {} against {} in the baseline (+{:.1} %)",
                    r.name,
                    r.value,
                    r.unit,
                    base,
                    (r.value / base - 1.0) * 100.0
                )
            })
        })
        .collect())
}

/// Writes the run's exact rows as the baseline.
pub fn write_baseline(rows: &[Row]) -> Result<()> {
    let map: BTreeMap<&str, f64> = rows
        .iter()
        .filter(|r| exact(r))
        .map(|r| (r.name.as_str(), r.value))
        .collect();
    let text = serde_json::to_string_pretty(&map)? + "\n";
    std::fs::write(baseline_path(), text).context("writing the exact baseline")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, value: f64, unit: &'static str) -> Row {
        Row {
            name: name.into(),
            value,
            unit,
            baseline: None,
            target: String::new(),
            met: None,
        }
    }

    #[test]
    fn only_exact_rows_over_the_tolerance_are_regressions() {
        let names: Vec<String> = serde_json::from_str::<BTreeMap<String, f64>>(
            &std::fs::read_to_string(baseline_path()).expect("the committed baseline"),
        )
        .expect("json")
        .into_keys()
        .collect();
        let first = names.first().expect("a row").clone();
        let text = std::fs::read_to_string(baseline_path()).expect("baseline");
        let base: BTreeMap<String, f64> = serde_json::from_str(&text).expect("json");
        let b = base[&first];
        let unit = if first.contains("fuel") {
            "fuel"
        } else {
            "ops"
        };
        assert!(
            regressions(&[row(&first, b * 1.04, unit)])
                .expect("judged")
                .is_empty()
        );
        assert_eq!(
            regressions(&[row(&first, b * 1.06, unit)])
                .expect("judged")
                .len(),
            1
        );
        assert!(
            regressions(&[row(&first, b * 2.0, "us")])
                .expect("judged")
                .is_empty(),
            "timings are not judged"
        );
        assert!(
            regressions(&[row("a row the baseline does not name", 1e9, unit)])
                .expect("judged")
                .is_empty()
        );
    }
}
