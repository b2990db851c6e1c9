//! The page directory of an append log whose entries are removed for good (the subscription
//! indexes): which pages a reader must read, so that a read costs what the entries still
//! there take, not the log's history of appends and removals.
//!
//! The directory (`P:d`, binary) holds `open`, a page number, and a sorted list of pages
//! below it. It lists every page from `open` on (the open end, where appends land), and the
//! pages below `open` in its list; a page below `open` that it does not list is **sealed**:
//! its value is the one byte `0xE2`, it has no entries, and an append that finds its page
//! sealed takes new numbers instead ([`AppendLog::append`]). So the rule a reader relies on,
//! "a page the directory does not list has no entries and never will", holds whenever the
//! directory is read: a page leaves it only after it was sealed, and a seal is never undone.
//! A directory that lists too much (a page emptied since, a change cut short) costs a read
//! one page more and is tidied by the next removal; one that lists too little cannot be
//! written.
//!
//! A removal that empties page `k` ([`AppendLog::remove`]) tidies it:
//! - below `open` (a listed page): seal `k`, then drop it from the list;
//! - at or above `open`, once every number of `k` has been handed out (the counter is past
//!   its end): look at the pages from `open` up to the first whose numbers are not all handed
//!   out (at most [`COMPACT_PAGES`] of them, in one batch), seal the empty ones (absent ones
//!   too: numbers reserved by an appender that stopped), then move `open` to the end of
//!   them, listing the ones that still hold entries.
//!
//! Each step is one compare-and-swap, so a tidy cut short anywhere leaves sealed pages the
//! directory still lists (read as empty) and nothing else. Concurrent tidies agree: a seal of
//! a page that gained an entry in between fails its compare-and-swap and the page stays
//! listed, and moving `open` merges with what another tidy wrote (`open` only grows, and a
//! page is added to the list only above the `open` it was read with).
//!
//! Cost: a read takes the directory in the batch of its first pages (two store operations,
//! as before); a tidy happens once per emptied page: two store operations for a page whose
//! numbers are not all handed out yet, about six otherwise.

use super::{AppendLog, SEALED_PAGE, decode_page, store_err};
use crate::codec::{Reader, Writer};
use crate::keys::{self, Key};
use crate::kv::{Kv, KvError, Update, update, update_seen};

/// Pages a read with a directory takes in its first batch, before it knows which the
/// directory lists (the ones a read of a log that lists all would take, up to this many).
pub const WINDOW: u64 = 4;

/// Pages a tidy examines at most in one go (the rest are left to the next).
pub const COMPACT_PAGES: u64 = 64;

/// The version byte of a directory.
const DIRECTORY: u8 = 0xE3;

/// A log's page directory (see the module docs).
#[derive(Debug, Default, PartialEq, Eq)]
struct Directory {
    /// Every page from here on is listed.
    open: u64,
    /// The pages below `open` that are listed, ascending.
    pages: Vec<u64>,
}

impl Directory {
    /// Reads a stored directory; none stored lists every page.
    fn decode(value: Option<&[u8]>) -> Result<Directory, KvError> {
        let Some(value) = value else {
            return Ok(Directory::default());
        };
        let damaged = || KvError::Corrupt("append-log directory".into());
        let mut r = Reader::new(value, DIRECTORY).ok_or_else(damaged)?;
        let open = r.u64().ok_or_else(damaged)?;
        let mut pages = Vec::new();
        while !r.is_empty() {
            pages.push(r.u64().ok_or_else(damaged)?);
        }
        Ok(Directory { open, pages })
    }

    fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new(DIRECTORY, 9 + 8 * self.pages.len());
        w.u64(self.open);
        for page in &self.pages {
            w.u64(*page);
        }
        w.finish()
    }
}

/// Whether a page holds no entry (empty, sealed, or absent). A damaged page counts as
/// holding some: it stays listed, and readers report it.
fn is_empty(value: Option<&[u8]>) -> bool {
    value.is_none_or(|v| decode_page(v).is_ok_and(|e| e.is_empty()))
}

impl AppendLog {
    /// The key of the log's page directory.
    fn directory_key(&self) -> Key {
        keys::log_directory(&self.prefix)
    }

    /// The first batch of a read with a directory: the directory, with pages `first..` (as
    /// many as a read without one would take, at most [`WINDOW`]) and the last two pages up
    /// to `last`. Returns the pages below `open` the directory lists, `open`, and the pages
    /// read with their values.
    #[allow(clippy::type_complexity)]
    pub(super) fn read_directory<K: Kv>(
        &self,
        kv: &K,
        first: u64,
        last: u64,
        want: u64,
    ) -> Result<(Vec<u64>, u64, Vec<(u64, Option<Vec<u8>>)>), KvError> {
        let end = last.min(first.saturating_add(want.min(WINDOW) - 1));
        // Plain loops: iterator adapters would cost code per use (the component is
        // size-budgeted).
        let mut pages = Vec::new();
        for range in [first..=end, last.saturating_sub(1).max(end + 1)..=last] {
            for page in range {
                pages.push(page);
            }
        }
        let mut keys = vec![self.directory_key()];
        for page in &pages {
            keys.push(self.page_key(*page));
        }
        let mut values = kv.get_many(&keys)?.into_iter();
        let directory = Directory::decode(values.next().flatten().as_deref())?;
        let mut fetched = Vec::with_capacity(pages.len());
        for page in pages {
            fetched.push((page, values.next().flatten()));
        }
        Ok((directory.pages, directory.open, fetched))
    }

    /// Tidies the directory after a removal emptied `page` (see the module docs).
    pub(super) fn emptied<K: Kv>(&self, kv: &K, page: u64) -> Result<(), KvError> {
        let full = self.len(kv)? / self.page;
        if page >= full {
            return Ok(()); // numbers of it may still be handed out
        }
        let directory = Directory::decode(kv.get(&self.directory_key())?.as_deref())?;
        if page < directory.open {
            if self.seal(kv, page, None)? {
                self.change_directory(kv, |d| {
                    let at = d.pages.iter().position(|p| *p == page)?;
                    d.pages.remove(at);
                    Some(())
                })?;
            }
            return Ok(());
        }
        let (from, to) = (directory.open, full.min(directory.open + COMPACT_PAGES));
        let mut keys = Vec::new();
        for p in from..to {
            keys.push(self.page_key(p));
        }
        let mut kept = Vec::new();
        for (i, value) in kv.get_many(&keys)?.into_iter().enumerate() {
            let p = from + i as u64;
            if !self.seal(kv, p, Some(value.as_deref()))? {
                kept.push(p);
            }
        }
        self.change_directory(kv, |d| {
            if d.open >= to {
                return None;
            }
            for p in &kept {
                if *p >= d.open {
                    d.pages.push(*p);
                }
            }
            d.open = to;
            Some(())
        })
    }

    /// Seals `page` if it holds no entry; returns whether it is sealed. `seen`: its value
    /// read earlier in a batch (a page seen holding entries is left as it is without a store
    /// operation).
    fn seal<K: Kv>(&self, kv: &K, page: u64, seen: Option<Option<&[u8]>>) -> Result<bool, KvError> {
        let mut decide = |current: Option<&[u8]>| {
            Ok::<_, ()>(match current {
                Some([SEALED_PAGE]) => Update::Keep(true),
                c if is_empty(c) => Update::Write(vec![SEALED_PAGE], true),
                _ => Update::Keep(false),
            })
        };
        let key = self.page_key(page);
        match seen {
            Some(seen) => update_seen(kv, &key, seen, &mut decide),
            None => update(kv, &key, &mut decide),
        }
        .map_err(store_err)
    }

    /// Changes the directory by compare-and-swap: `change` edits it, `None` writes nothing.
    fn change_directory<K: Kv>(
        &self,
        kv: &K,
        mut change: impl FnMut(&mut Directory) -> Option<()>,
    ) -> Result<(), KvError> {
        update(kv, &self.directory_key(), &mut |current| {
            let mut d = Directory::decode(current).map_err(|_| ())?;
            Ok::<_, ()>(match change(&mut d) {
                Some(()) => Update::Write(d.encode(), ()),
                None => Update::Keep(()),
            })
        })
        .map_err(store_err)
    }
}

/// The directory stored as `value`: `(open, listed pages below it)`.
#[cfg(test)]
pub(super) fn decode_for_tests(value: Option<&[u8]>) -> (u64, Vec<u64>) {
    let d = Directory::decode(value).expect("a readable directory");
    (d.open, d.pages)
}
