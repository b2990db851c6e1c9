//! The store's maintenance thread: merges of the key index and compactions of the log run
//! there, one at a time, so no writer waits for one; the store's last handle closes its queue
//! and waits for the job in progress ([`MaintenanceThread`]).

use super::{FileStore, Inner, index};
use std::sync::{Arc, Mutex};

/// The maintenance thread of an open store and its queue, shared by the store's handles.
/// When the last handle drops, the queue closes and the drop waits for the job in progress:
/// a merge or a compaction holds the store (and its directory's lock) while it runs, and the
/// store must be closed, its lock released, once its last handle is gone (an open of the same
/// directory right after must not find it in use).
pub(super) struct MaintenanceThread {
    jobs: Option<std::sync::mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MaintenanceThread {
    /// Queues `job`; gives it back if the thread has ended.
    pub(super) fn send(&self, job: Job) -> Result<(), Job> {
        match &self.jobs {
            Some(jobs) => jobs.send(job).map_err(|e| e.0),
            None => Err(job),
        }
    }
}

impl Drop for MaintenanceThread {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A job of the store's maintenance thread.
pub(super) enum Job {
    /// Merge the key index's recent changes into a sorted run ([`merge_index`]).
    Merge,
    /// Rewrite the log ([`FileStore::compact`]).
    Compact,
    /// Answer once the jobs before it are done (tests).
    #[cfg(test)]
    Ping(std::sync::mpsc::Sender<()>),
    /// Hold the store as a merge or a compaction does: say so, then keep it until told to
    /// go on (tests).
    #[cfg(test)]
    Hold {
        holding: std::sync::mpsc::Sender<()>,
        go: std::sync::mpsc::Receiver<()>,
    },
}

pub(super) fn run(job: Job, inner: &std::sync::Weak<Mutex<Inner>>, maintenance: &Arc<Mutex<()>>) {
    match job {
        Job::Merge => merge_index(inner, maintenance),
        // A compaction holds the store open while it runs (another opener of the directory
        // would rewrite the same temporary file), as it did when the writer ran it.
        Job::Compact => {
            if let Some(inner) = inner.upgrade() {
                let store = FileStore {
                    inner,
                    maintenance: Arc::clone(maintenance),
                    jobs: None,
                    counters: Arc::default(),
                };
                store.compact_or_log();
            }
        }
        #[cfg(test)]
        Job::Ping(done) => {
            let _ = done.send(());
        }
        #[cfg(test)]
        Job::Hold { holding, go } => {
            let held = inner.upgrade();
            let _ = holding.send(());
            let _ = go.recv();
            drop(held);
        }
    }
}

/// The store's maintenance thread: one per open store, for its merges and compactions, so
/// no writer (a runtime worker) waits for one (a compaction at a million keys takes 2 s).
/// It holds the store weakly between jobs, and ends when the store is dropped (its last
/// handle closes the queue and waits for it: [`MaintenanceThread`]). One long-lived thread
/// rather than one per job: a thread's allocator heap outlives it when the base it allocated
/// does.
pub(super) fn maintenance_thread(store: &FileStore) -> Option<Arc<MaintenanceThread>> {
    let (jobs, queue) = std::sync::mpsc::channel::<Job>();
    let inner = Arc::downgrade(&store.inner);
    let maintenance = Arc::clone(&store.maintenance);
    let thread = std::thread::Builder::new()
        .name("kv-maintenance".into())
        .spawn(move || {
            while let Ok(job) = queue.recv() {
                run(job, &inner, &maintenance);
            }
        })
        .ok()?;
    Some(Arc::new(MaintenanceThread {
        jobs: Some(jobs),
        thread: Some(thread),
    }))
}

/// A merge of the index ([`index`]): the recent changes frozen under the lock, merged with
/// the runs [`index::runs_to_fold`] picks without it, the new run put in place under it. A
/// failure is logged; the frozen changes go back, and the next merge is tried after as many
/// changes again.
pub(super) fn merge_index(inner: &std::sync::Weak<Mutex<Inner>>, maintenance: &Mutex<()>) {
    let _one = maintenance.lock().unwrap_or_else(|p| p.into_inner());
    let Some(store) = inner.upgrade() else {
        return;
    };
    let frozen = {
        let mut guard = store.lock().unwrap_or_else(|p| p.into_inner());
        let frozen = guard.index.freeze().map(|f| (f, guard.dir.clone()));
        if frozen.is_none() {
            guard.merge_pending = false;
        }
        frozen
    };
    drop(store);
    let Some((frozen, dir)) = frozen else {
        return;
    };
    let mut pace = index::Pace::new(std::time::Instant::now());
    let merged = index::merge(
        &dir,
        &frozen,
        false,
        Some((&mut pace, &mut std::thread::sleep)),
    );
    drop(frozen);
    let Some(store) = inner.upgrade() else {
        return;
    };
    let mut guard = store.lock().unwrap_or_else(|p| p.into_inner());
    guard.merge_pending = false;
    let replaced = match merged {
        Ok(merged) => {
            guard.merge_retry_at = 0;
            Some(guard.index.install(merged))
        }
        Err(e) => {
            guard.index.thaw();
            guard.merge_retry_at = guard.index.recent.len() + guard.merge_at;
            crate::log::log_line(
                "error",
                "store index merge failed; its changes stay in memory",
                &[("error", e.to_string())],
            );
            None
        }
    };
    // The runs merged and the frozen changes are freed with the lock let go.
    drop(guard);
    drop(replaced);
}
