//! The last step of each walk: with `seal_key` set (the manifest requires it), no byte of
//! what the store keeps holds any secret the walk was shown, in any form
//! ([`edgehook_testkit::secrets::forms`]). On SQLite the files of Spin's state directory are
//! searched as they are on disk (database and write-ahead log); on Redis, the dump file the
//! server writes of its data (uncompressed). The search is shown able to find: the same
//! bytes hold each subscription's id.

use super::harness::Walk;
use edgehook_testkit::redis::RedisServer;
use edgehook_testkit::secrets::{holds, needles};
use std::path::Path;

/// Where the walk's store keeps its bytes.
pub enum Store<'a> {
    /// Spin's default store: SQLite files under the application's state directory.
    Sqlite,
    /// A Redis server of the test's own.
    Redis(&'a RedisServer),
}

/// Every file under `dir` (recursively), named, with its bytes.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for path in std::fs::read_dir(&d)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
        {
            if path.is_dir() {
                todo.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                out.push((path.display().to_string(), bytes));
            }
        }
    }
    out
}

/// Checks that the store holds no form of any of `subs`' secrets, and (so that the search
/// is known to work) that it holds each of their ids.
pub fn sealed(w: &mut Walk, store: Store<'_>, subs: &[(String, String)]) {
    let step = "no stored byte holds a signing secret";
    let stored = match store {
        Store::Sqlite => files(&w.app_dir().join("state")),
        Store::Redis(redis) => vec![("dump.rdb".to_owned(), redis.dump_file())],
    };
    let ids: Vec<Vec<u8>> = subs.iter().map(|(id, _)| id.as_bytes().to_vec()).collect();
    let found_ids = ids
        .iter()
        .filter(|id| {
            stored
                .iter()
                .any(|(_, b)| holds(b, std::slice::from_ref(id)))
        })
        .count();
    w.check(
        step,
        !subs.is_empty() && found_ids == subs.len(),
        format!(
            "the search finds {found_ids} of {} subscription ids",
            subs.len()
        ),
    );
    let secrets: Vec<&str> = subs.iter().map(|(_, s)| s.as_str()).collect();
    let needles = needles(&secrets);
    let holding: Vec<&str> = stored
        .iter()
        .filter(|(_, bytes)| holds(bytes, &needles))
        .map(|(name, _)| name.as_str())
        .collect();
    w.check(step, holding.is_empty(), format!("a secret in {holding:?}"));
}
