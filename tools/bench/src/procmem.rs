//! The process's memory as `/proc` reports it: its resident bytes, and its mappings with what
//! each holds resident (the `footprint` section's checkpoints).

use crate::measure::proc_status_bytes;
use anyhow::Result;

/// This process's mappings from `/proc/self/smaps`: (size, resident bytes, name), the name
/// empty for anonymous memory. Empty where smaps cannot be read.
pub fn mappings() -> Vec<(u64, u64, String)> {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return Vec::new();
    };
    let kib = |line: &str, field: &str| -> Option<u64> {
        line.strip_prefix(field)?
            .split_whitespace()
            .next()?
            .parse::<u64>()
            .ok()
            .map(|k| k * 1024)
    };
    let mut out: Vec<(u64, u64, String)> = Vec::new();
    for line in smaps.lines() {
        if let Some(k) = kib(line, "Size:") {
            if let Some(last) = out.last_mut() {
                last.0 = k;
            }
        } else if let Some(k) = kib(line, "Rss:") {
            if let Some(last) = out.last_mut() {
                last.1 = k;
            }
        } else if line.split_whitespace().next().is_some_and(|r| {
            r.contains('-') && r.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
        }) {
            let name = line.split_whitespace().nth(5).unwrap_or("").to_string();
            out.push((0, 0, name));
        }
    }
    out
}

/// The resident bytes of the process's mappings of 4 GiB or more: wasmtime's pooling
/// allocator reserves the memories of all its slots as one such mapping (256 slots of
/// 256 MiB and guards); nothing else here maps that much. 0 where smaps cannot be read.
pub fn pool_rss(maps: &[(u64, u64, String)]) -> u64 {
    maps.iter()
        .filter(|(size, _, _)| *size >= 4 << 30)
        .map(|(_, rss, _)| rss)
        .sum()
}

/// The largest resident anonymous mappings: (size, resident bytes).
pub fn top_anonymous(maps: &[(u64, u64, String)], n: usize) -> Vec<(u64, u64)> {
    let mut anon: Vec<(u64, u64)> = maps
        .iter()
        .filter(|(_, _, name)| name.is_empty() || name.starts_with('['))
        .map(|(size, rss, _)| (*size, *rss))
        .collect();
    anon.sort_by_key(|(_, rss)| std::cmp::Reverse(*rss));
    anon.truncate(n);
    anon
}

/// This process's resident memory now.
pub fn rss() -> Result<u64> {
    proc_status_bytes("VmRSS").ok_or_else(|| anyhow::anyhow!("no VmRSS in /proc/self/status"))
}
