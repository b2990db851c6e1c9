//! `edgehook store`: reads an embedded store directory for inspection (a copy that `edgehook
//! backup` made, or the store of a stopped `serve`) through the engine's own API. It opens
//! the store, so it refuses one that a running `serve` has open: inspect a copy.

use anyhow::{Context as _, Result};
use clap::Subcommand;
use edgehook_runtime::embedded::{self, Durability, FjallStore};
use edgehook_runtime::store::KvBackend;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What `edgehook store` does.
#[derive(Subcommand)]
pub enum StoreCommand {
    /// Keys, bytes on disk, and keys by prefix (the text before the first `:`).
    Stats {
        /// The data directory (its `store` directory is read).
        #[arg(long, default_value = "edgehook-data", env = "EDGEHOOK_DATA_DIR")]
        data_dir: PathBuf,
    },
    /// Keys in order, from the first one after --after, at most --limit.
    Keys {
        /// The data directory (its `store` directory is read).
        #[arg(long, default_value = "edgehook-data", env = "EDGEHOOK_DATA_DIR")]
        data_dir: PathBuf,
        /// Only keys that start with this.
        #[arg(long, default_value = "")]
        prefix: String,
        /// Start after this key.
        #[arg(long)]
        after: Option<String>,
        /// At most this many keys.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// One key's value as stored, printed with non-printable bytes escaped.
    Get {
        /// The data directory (its `store` directory is read).
        #[arg(long, default_value = "edgehook-data", env = "EDGEHOOK_DATA_DIR")]
        data_dir: PathBuf,
        /// The key.
        key: String,
    },
}

/// Runs `command`, printing its answer.
pub fn run(command: StoreCommand) -> Result<()> {
    match command {
        StoreCommand::Stats { data_dir } => {
            let store = open(&data_dir)?;
            let mut by_prefix: BTreeMap<String, u64> = BTreeMap::new();
            let mut after: Option<String> = None;
            loop {
                let page = store.list_keys(after.as_deref(), 10_000).map_err(err)?;
                for key in &page {
                    let prefix = key.split(':').next().unwrap_or_default();
                    *by_prefix.entry(prefix.to_owned()).or_default() += 1;
                }
                match page.last() {
                    Some(last) => after = Some(last.clone()),
                    None => break,
                }
            }
            let keys: u64 = by_prefix.values().sum();
            let bytes = embedded::disk_bytes(&data_dir.join("store"))?;
            println!("{keys} keys, {bytes} bytes on disk");
            for (prefix, n) in by_prefix {
                println!("{n:>12}  {prefix}:");
            }
        }
        StoreCommand::Keys {
            data_dir,
            prefix,
            after,
            limit,
        } => {
            let store = open(&data_dir)?;
            let mut cursor = after;
            let mut shown = 0;
            'pages: while shown < limit {
                let page = store.list_keys(cursor.as_deref(), 1_000).map_err(err)?;
                let Some(last) = page.last().cloned() else {
                    break;
                };
                // Keys sort by bytes: those before the prefix's are passed over, and the
                // first after them ends the list.
                for key in page.iter().filter(|k| k.as_str() >= prefix.as_str()) {
                    if !key.starts_with(&prefix) || shown == limit {
                        break 'pages;
                    }
                    println!("{key}");
                    shown += 1;
                }
                cursor = Some(last);
            }
        }
        StoreCommand::Get { data_dir, key } => {
            let store = open(&data_dir)?;
            match store.get(&key).map_err(err)? {
                Some(value) => println!("{}", value.escape_ascii()),
                None => anyhow::bail!("{key}: no such key"),
            }
        }
    }
    Ok(())
}

fn open(data_dir: &Path) -> Result<FjallStore> {
    let dir = data_dir.join("store");
    anyhow::ensure!(
        dir.join(embedded::DB_DIR).exists(),
        "{} holds no edgehook store",
        dir.display()
    );
    embedded::open(&dir, Durability::Always).with_context(|| {
        format!(
            "opening {} (inspect a copy: edgehook backup)",
            dir.display()
        )
    })
}

fn err(e: edgehook_runtime::store::StoreError) -> anyhow::Error {
    anyhow::anyhow!(e)
}
