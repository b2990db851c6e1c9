//! The process's memory as `/proc` reports it: its resident bytes, and its mappings with what
//! each holds resident (the `footprint` section's checkpoints).

use crate::measure::proc_status_bytes;
use anyhow::Result;

/// One mapping of `/proc/self/smaps`.
pub struct Mapping {
    /// Where it starts and ends (exclusive).
    pub start: u64,
    pub end: u64,
    /// Its resident bytes.
    pub rss: u64,
    /// Its file or `[heap]`-like name; empty for anonymous memory.
    pub name: String,
}

/// This process's mappings from `/proc/self/smaps`. Empty where smaps cannot be read.
pub fn mappings() -> Vec<Mapping> {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return Vec::new();
    };
    let mut out: Vec<Mapping> = Vec::new();
    for line in smaps.lines() {
        if let Some(rss) = line.strip_prefix("Rss:") {
            if let (Some(last), Some(k)) = (
                out.last_mut(),
                rss.split_whitespace()
                    .next()
                    .and_then(|k| k.parse::<u64>().ok()),
            ) {
                last.rss = k * 1024;
            }
        } else if let Some((start, end)) = line
            .split_whitespace()
            .next()
            .and_then(|r| r.split_once('-'))
            .and_then(|(a, b)| {
                Some((
                    u64::from_str_radix(a, 16).ok()?,
                    u64::from_str_radix(b, 16).ok()?,
                ))
            })
        {
            let name = line.split_whitespace().nth(5).unwrap_or("").to_string();
            out.push(Mapping {
                start,
                end,
                rss: 0,
                name,
            });
        }
    }
    out
}

/// The resident bytes of wasmtime's pooling allocators: each reserves its slots as one
/// span of mappings of 4 GiB or more (256 slots of 256 MiB with their guards), which a
/// slot's use splits into smaller ones (the part its memory uses, the rest). Every run of
/// adjacent mappings that holds one of 4 GiB or more counts; nothing else here maps that
/// much. 0 where smaps cannot be read.
pub fn pool_rss(maps: &[Mapping]) -> u64 {
    let mut total = 0;
    let (mut run, mut large, mut end) = (0, false, None);
    for m in maps {
        if end != Some(m.start) {
            total += if large { run } else { 0 };
            (run, large) = (0, false);
        }
        run += m.rss;
        large |= m.end - m.start >= 4 << 30;
        end = Some(m.end);
    }
    total + if large { run } else { 0 }
}

/// The largest resident anonymous mappings: (size, resident bytes).
pub fn top_anonymous(maps: &[Mapping], n: usize) -> Vec<(u64, u64)> {
    let mut anon: Vec<(u64, u64)> = maps
        .iter()
        .filter(|m| m.name.is_empty() || m.name.starts_with('['))
        .map(|m| (m.end - m.start, m.rss))
        .collect();
    anon.sort_by_key(|(_, rss)| std::cmp::Reverse(*rss));
    anon.truncate(n);
    anon
}

/// This process's resident memory now.
pub fn rss() -> Result<u64> {
    proc_status_bytes("VmRSS").ok_or_else(|| anyhow::anyhow!("no VmRSS in /proc/self/status"))
}
