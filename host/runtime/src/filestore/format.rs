//! The log's format: records, reading them back, replaying a log, scanning one.

use super::{LOG_FILE, Slot};
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

/// A record that sets a key.
pub(super) const OP_SET: u8 = 1;
/// A record that deletes a key.
pub(super) const OP_DELETE: u8 = 2;

pub(super) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

pub(super) fn encode(op: u8, key: &str, value: &[u8]) -> Vec<u8> {
    let mut rec = Vec::with_capacity(17 + key.len() + value.len());
    encode_into(&mut rec, op, key, value);
    rec
}

/// Appends the record [`encode`] makes to `out`; returns its length. A batch's records are
/// encoded one after the other into one buffer, which is appended to the log as it is.
pub(super) fn encode_into(out: &mut Vec<u8>, op: u8, key: &str, value: &[u8]) -> u64 {
    let start = out.len();
    out.push(op);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(value);
    let sum = fnv1a(&out[start..]);
    out.extend_from_slice(&sum.to_le_bytes());
    (out.len() - start) as u64
}

/// One record of a log at `pos`: `(is_set, key, value, end)`, or `None` if the bytes there
/// are not a whole, valid record.
pub(super) fn record_at(bytes: &[u8], pos: usize) -> Option<(bool, &str, &[u8], usize)> {
    let read_u32 = |at: usize| -> Option<usize> {
        Some(u32::from_le_bytes(bytes.get(at..at.checked_add(4)?)?.try_into().ok()?) as usize)
    };
    let op = *bytes.get(pos)?;
    let klen = read_u32(pos + 1)?;
    let kstart = pos + 5;
    let vlen = read_u32(kstart.checked_add(klen)?)?;
    let vstart = kstart + klen + 4;
    let end = vstart.checked_add(vlen)?;
    let sum = u64::from_le_bytes(bytes.get(end..end.checked_add(8)?)?.try_into().ok()?);
    if fnv1a(&bytes[pos..end]) != sum {
        return None;
    }
    let key = std::str::from_utf8(&bytes[kstart..kstart + klen]).ok()?;
    match op {
        OP_SET => Some((true, key, &bytes[vstart..end], end + 8)),
        OP_DELETE => Some((false, key, &[], end + 8)),
        _ => None,
    }
}

/// The value in `record`, the bytes of a set record of `key` read back whole from the log,
/// or `None` if they are not one (damage since the store wrote it).
pub(super) fn value_in(record: &[u8], key: &str) -> Option<Vec<u8>> {
    match record_at(record, 0)? {
        (true, k, value, end) if k == key && end == record.len() => Some(value.to_vec()),
        _ => None,
    }
}

/// How a log reads: the length of its valid prefix, and, if what follows that prefix is not
/// a torn tail but damage (a whole record follows the bad bytes), where that record starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LogRead {
    valid: u64,
    resumes_at: Option<u64>,
}

/// Walks the valid records of a log, calling `f(is_set, key, value, slot)` for each (`slot`:
/// where the record is), up to the first bad record; then looks past it for a whole record
/// (damage) or none (a torn tail).
pub(super) fn read_records(bytes: &[u8], mut f: impl FnMut(bool, &str, &[u8], Slot)) -> LogRead {
    let mut pos = 0usize;
    while pos < bytes.len() {
        let Some((set, key, value, next)) = record_at(bytes, pos) else {
            break;
        };
        let slot = Slot {
            at: pos as u64,
            len: (next - pos) as u64,
        };
        f(set, key, value, slot);
        pos = next;
    }
    let resumes_at = (pos + 1..bytes.len())
        .find(|at| record_at(bytes, *at).is_some())
        .map(|at| at as u64);
    LogRead {
        valid: pos as u64,
        resumes_at,
    }
}

/// The whole log file (empty if there is none yet).
pub(super) fn read_log(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(file) => {
            BufReader::new(file).read_to_end(&mut bytes)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(bytes)
}

/// Replays a log: calls `apply(is_set, key, slot)` for each valid record in order (`slot`:
/// where the record is), and returns the length of the valid prefix (a torn tail after it
/// is cut off by the caller). Damage is an error: nothing is cut. The log is read as a
/// stream (a buffer and one record in memory at a time, not the whole log); only past the
/// valid prefix is the rest read whole, to tell a torn tail (no whole record follows) from
/// damage (one does).
pub(super) fn replay(
    path: &Path,
    mut apply: impl FnMut(bool, &str, Slot) -> std::io::Result<()>,
) -> std::io::Result<u64> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    let mut log = BufReader::with_capacity(1 << 20, file);
    let mut pos = 0u64;
    let mut rec = Vec::new();
    while let Some(slot) = next_record(&mut log, pos, len, &mut rec)? {
        match record_at(&rec, 0) {
            Some((set, key, _, _)) => apply(set, key, slot)?,
            None => unreachable!("next_record returns whole, valid records only"),
        }
        pos += slot.len;
    }
    if pos < len {
        let mut rest = Vec::new();
        let mut file = log.into_inner();
        file.seek(SeekFrom::Start(pos))?;
        file.read_to_end(&mut rest)?;
        if let Some(at) = (1..rest.len()).find(|at| record_at(&rest, *at).is_some()) {
            let resumes_at = pos + at as u64;
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{} is damaged: the record at byte {pos} is unreadable, and whole records \
                     follow from byte {resumes_at} (of {len}). Nothing was changed. To start \
                     from the records before the damage, keep a copy and cut the file to {pos} \
                     bytes (truncate -s {pos} {}); to start empty, move it aside",
                    path.display(),
                    path.display(),
                ),
            ));
        }
    }
    Ok(pos)
}

/// Reads the record at `pos` of a log of `len` bytes into `rec`: its place, if it is whole
/// and valid; `None` (the stream left anywhere) if it is not, or at the end.
fn next_record(
    log: &mut impl Read,
    pos: u64,
    len: u64,
    rec: &mut Vec<u8>,
) -> std::io::Result<Option<Slot>> {
    // Reads `n` more bytes onto `rec` if the log holds them.
    let mut more = |rec: &mut Vec<u8>, n: u64| -> std::io::Result<bool> {
        if pos + rec.len() as u64 + n > len {
            return Ok(false);
        }
        let from = rec.len();
        rec.resize(from + n as usize, 0);
        log.read_exact(&mut rec[from..])?;
        Ok(true)
    };
    let u32_at = |rec: &[u8], at: usize| {
        u64::from(u32::from_le_bytes([
            rec[at],
            rec[at + 1],
            rec[at + 2],
            rec[at + 3],
        ]))
    };
    rec.clear();
    if !more(rec, 5)? {
        return Ok(None);
    }
    let klen = u32_at(rec, 1);
    if !more(rec, klen + 4)? {
        return Ok(None);
    }
    let vlen = u32_at(rec, 5 + klen as usize);
    if !more(rec, vlen + 8)? {
        return Ok(None);
    }
    Ok(match record_at(rec, 0) {
        Some((_, _, _, end)) if end == rec.len() => Some(Slot {
            at: pos,
            len: rec.len() as u64,
        }),
        _ => None,
    })
}

/// What a store's log holds, read from disk without opening the store (a running server may
/// be appending to it): the live keys and their size as the store counts it (key + value +
/// 17 bytes of record framing per key), and the length of the log file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Live keys.
    pub keys: u64,
    /// Live data, in bytes.
    pub live_bytes: u64,
    /// Length of the log file (live data plus superseded records until compaction).
    pub log_bytes: u64,
}

/// Reads the log of the store in `dir` (as [`FileStore::open`] would, without opening it).
pub fn scan(dir: &Path) -> std::io::Result<LogStats> {
    let bytes = read_log(&dir.join(LOG_FILE))?;
    let mut sizes: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
    let _ = read_records(&bytes, |set, key, value, _| {
        if set {
            let size = (key.len() + value.len() + 17) as u64;
            match sizes.get_mut(key) {
                Some(s) => *s = size,
                None => {
                    sizes.insert(key.to_owned(), size);
                }
            }
        } else {
            sizes.remove(key);
        }
    });
    Ok(LogStats {
        keys: sizes.len() as u64,
        live_bytes: sizes.values().sum(),
        log_bytes: bytes.len() as u64,
    })
}
