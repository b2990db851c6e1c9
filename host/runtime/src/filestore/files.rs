//! The store's files on disk: owner-only modes, the directory lock, directory fsyncs.

use super::{LOCK_FILE, LOG_FILE};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Options for a file of the store: readable and writable by its owner only (the log holds
/// every signing secret).
pub(super) fn private_file() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.mode(0o600);
    options
}

/// Creates the store's directory (owner only), and takes what an earlier version created
/// with the default mode back to owner only.
pub(super) fn private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    for (path, mode) in [(dir.to_path_buf(), 0o700), (dir.join(LOG_FILE), 0o600)] {
        match std::fs::metadata(&path) {
            Ok(m) if m.permissions().mode() & 0o077 != 0 => {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Takes the store directory's lock, or says which process-level conflict stops us.
pub(super) fn lock_dir(dir: &Path) -> std::io::Result<File> {
    let lock = private_file()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(LOCK_FILE))?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(std::fs::TryLockError::WouldBlock) => Err(std::io::Error::new(
            std::io::ErrorKind::WouldBlock,
            format!(
                "{} is in use by another edgehook process (it holds {LOCK_FILE}); stop that \
                 one first, or give this one its own --data-dir",
                dir.display()
            ),
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// Makes a rename or a new file in `dir` durable (its directory entry fsynced).
pub(super) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}
