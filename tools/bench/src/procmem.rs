//! The process's memory as `/proc` reports it (the `store` section).

use crate::measure::proc_status_bytes;
use anyhow::Result;

/// This process's resident memory now.
pub fn rss() -> Result<u64> {
    proc_status_bytes("VmRSS").ok_or_else(|| anyhow::anyhow!("no VmRSS in /proc/self/status"))
}
