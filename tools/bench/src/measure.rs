//! How figures are taken: process CPU time, timing runs of a call, percentiles in µs.

use anyhow::Result;
use std::time::{Duration, Instant};

/// CPU time this process has used so far, all threads (live and ended), from
/// `/proc/self/stat`; `None` where there is no such file. Unlike wall-clock time it does not
/// count time the machine gave to other guests (steal), nor time spent waiting, so CPU per
/// request compares builds on a shared machine where requests per second cannot.
pub fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may contain spaces:
    // state is the first, utime the 12th, stime the 13th (clock ticks).
    let mut fields = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    // USER_HZ: 100 on Linux (the ABI fixes it, whatever the kernel's own tick rate).
    Some(Duration::from_millis((utime + stime) * 10))
}

/// A figure of this process's memory from `/proc/self/status`, in bytes: `VmRSS` (resident
/// now) or `VmHWM` (the most it has been resident); `None` where there is no such file.
pub fn proc_status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status
        .lines()
        .find(|l| l.strip_prefix(field).is_some_and(|r| r.starts_with(':')))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Process CPU time (µs) per unit of work since `since` (`NaN` where it cannot be read).
pub fn cpu_per(since: Option<Duration>, units: usize) -> f64 {
    match (since, process_cpu()) {
        (Some(a), Some(b)) => b.saturating_sub(a).as_secs_f64() * 1e6 / units.max(1) as f64,
        _ => f64::NAN,
    }
}

/// The value at `p` (0.0 to 1.0) of sorted durations, in µs (0 when there is none).
pub fn percentile_us(sorted: &[Duration], p: f64) -> f64 {
    edgehook_testkit::percentile(sorted, p).as_secs_f64() * 1e6
}

/// Times `n` runs of `f`; returns the sorted durations.
pub async fn timed<F, Fut>(n: usize, mut f: F) -> Result<Vec<Duration>>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        f(i).await?;
        out.push(t.elapsed());
    }
    out.sort_unstable();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resident_memory_is_read_from_proc() {
        let Some(rss) = proc_status_bytes("VmRSS") else {
            return; // no /proc
        };
        let peak = proc_status_bytes("VmHWM").expect("VmHWM beside VmRSS");
        assert!(rss > 0 && peak >= rss, "{rss} {peak}");
        assert_eq!(proc_status_bytes("NoSuchField"), None);
    }

    /// `process_cpu` reads this process's own CPU time (not a constant field, not its
    /// children's): burning CPU on this thread moves it forward, by no more than the wall
    /// time that passed times the threads that could have run.
    #[test]
    fn process_cpu_counts_this_process_working() {
        let Some(start) = process_cpu() else {
            return; // no /proc: the benchmark prints NaN there
        };
        let wall = Instant::now();
        let mut x = 0u64;
        let burned = loop {
            for i in 0..100_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
            let now = process_cpu().expect("readable a moment ago");
            if now - start >= Duration::from_millis(50) {
                break now - start;
            }
            assert!(
                wall.elapsed() < Duration::from_secs(30),
                "30 s of busy work did not show as 50 ms of CPU"
            );
        };
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        assert!(burned <= wall.elapsed() * threads + Duration::from_millis(20));
    }
}
