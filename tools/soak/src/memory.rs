//! The server's memory over a soak run and the "memory flat" verdict.
//!
//! `edgehook serve`'s embedded store caches what it reads and writes (its engine's page
//! cache, bounded), and every published event is retained (30 days by default), so the
//! server's RSS may grow with the data it holds. A leak is growth beyond that. So the
//! verdict compares the load's middle third with its last third (the first third is warm-up)
//! after taking out what the store's growth explains:
//!
//! ```text
//! net(t)      = RSS(t) - factor * live_store_bytes(t)
//! unexplained = mean(net, last third) - mean(net, middle third)
//! flat        = unexplained <= max(ratio * mean(RSS, middle third), floor)
//! ```
//!
//! `live_store_bytes` is the store's bytes on disk
//! ([`edgehook_runtime::embedded::disk_bytes`]); `factor` (RSS per live byte) is measured in the
//! same run by starting a second server on the final store and comparing its RSS with an
//! empty server's.

/// One sample of the server process.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    /// Seconds since the load started.
    pub t_s: f64,
    /// Resident set size, KiB (`VmRSS`).
    pub rss_kib: u64,
    /// Peak resident set size so far, KiB (`VmHWM`).
    pub hwm_kib: u64,
    /// Threads.
    pub threads: u64,
    /// Open file descriptors.
    pub fds: u64,
    /// The store's bytes on disk, if they were read at this sample.
    pub store_live_bytes: Option<u64>,
}

/// The bound on unexplained growth.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    /// Share of the middle third's mean RSS.
    pub ratio: f64,
    /// Never less than this, MiB.
    pub floor_mib: f64,
    /// Open descriptors the last third may hold beyond the middle third's most.
    pub fds_slack: u64,
}

impl Default for Bound {
    fn default() -> Self {
        Bound {
            ratio: 0.05,
            floor_mib: 4.0,
            fds_slack: 16,
        }
    }
}

/// Means and maxima over one third of the load.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Third {
    /// Samples in it.
    pub samples: usize,
    /// Mean RSS, MiB.
    pub rss_mib: f64,
    /// Mean live store data, MiB.
    pub store_mib: f64,
    /// Mean of RSS minus factor x store, MiB.
    pub net_mib: f64,
    /// Most open descriptors.
    pub fds_max: u64,
    /// Most threads.
    pub threads_max: u64,
}

/// The verdict.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    /// Seconds 0 to 1/3 of the load (warm-up; reported, not judged).
    pub first: Third,
    /// The middle third.
    pub middle: Third,
    /// The last third.
    pub last: Third,
    /// RSS bytes per live store byte.
    pub factor: f64,
    /// Growth of mean RSS from the middle to the last third, MiB.
    pub rss_growth_mib: f64,
    /// What the store's growth explains of it, MiB.
    pub explained_mib: f64,
    /// The rest, MiB.
    pub unexplained_mib: f64,
    /// The bound on the rest, MiB.
    pub bound_mib: f64,
    /// Whether memory stayed flat.
    pub flat: bool,
    /// Whether open descriptors stayed flat.
    pub fds_flat: bool,
}

const MIB: f64 = 1024.0 * 1024.0;

/// The store's live bytes at `t`, interpolated between the samples that read it.
fn store_at(points: &[(f64, u64)], t: f64) -> f64 {
    let Some(first) = points.first() else {
        return 0.0;
    };
    if t <= first.0 {
        return first.1 as f64;
    }
    for w in points.windows(2) {
        let ((t0, v0), (t1, v1)) = (w[0], w[1]);
        if t <= t1 {
            let f = if t1 > t0 { (t - t0) / (t1 - t0) } else { 1.0 };
            return v0 as f64 + f * (v1 as f64 - v0 as f64);
        }
    }
    points.last().map_or(0.0, |p| p.1 as f64)
}

fn third(samples: &[&Sample], points: &[(f64, u64)], factor: f64) -> Third {
    let n = samples.len().max(1) as f64;
    let mut t = Third {
        samples: samples.len(),
        ..Third::default()
    };
    for s in samples {
        let rss = s.rss_kib as f64 * 1024.0;
        let store = store_at(points, s.t_s);
        t.rss_mib += rss / MIB / n;
        t.store_mib += store / MIB / n;
        t.net_mib += (rss - factor * store) / MIB / n;
        t.fds_max = t.fds_max.max(s.fds);
        t.threads_max = t.threads_max.max(s.threads);
    }
    t
}

/// Judges the samples of a load that ran `duration_s` seconds.
pub fn verdict(samples: &[Sample], duration_s: f64, factor: f64, bound: Bound) -> Verdict {
    let points: Vec<(f64, u64)> = samples
        .iter()
        .filter_map(|s| s.store_live_bytes.map(|b| (s.t_s, b)))
        .collect();
    let in_range = |from: f64, to: f64| -> Vec<&Sample> {
        samples
            .iter()
            .filter(|s| s.t_s >= from && s.t_s < to)
            .collect()
    };
    let d = duration_s;
    let first = third(&in_range(0.0, d / 3.0), &points, factor);
    let middle = third(&in_range(d / 3.0, 2.0 * d / 3.0), &points, factor);
    let last = third(&in_range(2.0 * d / 3.0, d + 1.0), &points, factor);
    let rss_growth_mib = last.rss_mib - middle.rss_mib;
    let explained_mib = factor * (last.store_mib - middle.store_mib);
    let unexplained_mib = last.net_mib - middle.net_mib;
    let bound_mib = (bound.ratio * middle.rss_mib).max(bound.floor_mib);
    Verdict {
        first,
        middle,
        last,
        factor,
        rss_growth_mib,
        explained_mib,
        unexplained_mib,
        bound_mib,
        flat: middle.samples > 0 && last.samples > 0 && unexplained_mib <= bound_mib,
        fds_flat: last.fds_max <= middle.fds_max + bound.fds_slack,
    }
}

/// RSS bytes per live store byte: what a server holding the final store costs beyond an
/// empty one, over that store's live bytes. `None` when the store is too small to tell.
pub fn factor(empty_rss_kib: u64, loaded_rss_kib: u64, live_bytes: u64) -> Option<f64> {
    if live_bytes < (4 << 20) {
        return None;
    }
    let extra = loaded_rss_kib.saturating_sub(empty_rss_kib) as f64 * 1024.0;
    Some(extra / live_bytes as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 90 samples over 90 s: RSS = 100 MiB + 2 x store + `leak_mib_per_s` x t; the store
    /// grows 0.5 MiB/s and is read every third sample.
    fn run(leak_mib_per_s: f64) -> Vec<Sample> {
        (0..90)
            .map(|i| {
                let t = i as f64;
                let store = 0.5 * MIB * t;
                let rss = 100.0 * MIB + 2.0 * store + leak_mib_per_s * MIB * t;
                Sample {
                    t_s: t,
                    rss_kib: (rss / 1024.0) as u64,
                    hwm_kib: (rss / 1024.0) as u64,
                    threads: 5,
                    fds: 40,
                    store_live_bytes: (i % 3 == 0).then_some(store as u64),
                }
            })
            .collect()
    }

    #[test]
    fn growth_the_store_explains_is_flat() {
        let v = verdict(&run(0.0), 90.0, 2.0, Bound::default());
        assert!(v.flat, "{v:?}");
        assert!(v.unexplained_mib.abs() < 0.2, "{v:?}");
        assert!((v.rss_growth_mib - 30.0).abs() < 0.5, "{v:?}");
        assert_eq!(v.middle.samples, 30);
    }

    #[test]
    fn a_leak_is_not_flat() {
        // 0.3 MiB/s over 30 s between the thirds' centres: 9 MiB, over the bound (~7.6).
        let v = verdict(&run(0.3), 90.0, 2.0, Bound::default());
        assert!(!v.flat, "{v:?}");
        assert!((v.unexplained_mib - 9.0).abs() < 0.2, "{v:?}");
    }

    #[test]
    fn descriptors_that_keep_growing_are_not_flat() {
        let mut samples = run(0.0);
        for s in &mut samples {
            s.fds = 40 + s.t_s as u64;
        }
        assert!(!verdict(&samples, 90.0, 2.0, Bound::default()).fds_flat);
    }

    #[test]
    fn the_factor_needs_a_store_big_enough_to_measure() {
        assert_eq!(factor(50_000, 60_000, 1 << 20), None);
        assert_eq!(factor(50_000, 70_480, 10 << 20), Some(2.0));
    }
}
