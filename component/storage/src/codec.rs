//! A small binary encoding for records the store holds many of and rewrites often (delivery
//! records): fixed-width little-endian integers, strings as a 4-byte length then UTF-8,
//! options as a 0/1 tag then the value. Nothing is escaped or parsed, so encoding is copying
//! and decoding is checking lengths. Reading is strict: a damaged record is `None`, never a
//! panic and never a record with a field silently defaulted.

/// Builds an encoded record.
#[derive(Debug, Default)]
pub struct Writer(Vec<u8>);

impl Writer {
    /// An empty record that starts with `version`, the byte that names its format.
    pub fn new(version: u8, capacity: usize) -> Self {
        let mut out = Vec::with_capacity(capacity);
        out.push(version);
        Writer(out)
    }

    /// One byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }

    /// A flag: 0 or 1.
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.u8(u8::from(v))
    }

    /// A `u16`.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// A `u32`.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// A `u64`.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// A string: its length, then its bytes.
    pub fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }

    /// Bytes: their length, then them.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        // Record fields are ids, types, short error texts and sealed secrets: far below 4 GiB.
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }

    /// A list: its length (`u32`), then each item as `put` writes it.
    pub fn list<T>(
        &mut self,
        items: &[T],
        put: impl for<'w> Fn(&'w mut Self, &T) -> &'w mut Self,
    ) -> &mut Self {
        // Lists in records are ids, types, attempts: far below 4 billion.
        self.u32(items.len() as u32);
        for item in items {
            put(self, item);
        }
        self
    }

    /// An optional value: 0, or 1 then the value.
    pub fn opt<T>(
        &mut self,
        v: Option<T>,
        put: impl FnOnce(&mut Self, T) -> &mut Self,
    ) -> &mut Self {
        match v {
            None => self.u8(0),
            Some(v) => put(self.u8(1), v),
        }
    }

    /// The encoded bytes.
    pub fn finish(self) -> Vec<u8> {
        self.0
    }
}

/// Reads an encoded record front to back; every read is `None` once the record is short.
#[derive(Debug)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Reads `bytes` if it starts with `version`.
    pub fn new(bytes: &'a [u8], version: u8) -> Option<Self> {
        match bytes.split_first() {
            Some((&v, rest)) if v == version => Some(Reader { rest }),
            _ => None,
        }
    }

    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.rest.split_first_chunk::<N>()?;
        self.rest = rest;
        Some(*head)
    }

    /// One byte.
    pub fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|[b]| b)
    }

    /// A flag; `None` for a byte other than 0 or 1.
    pub fn bool(&mut self) -> Option<bool> {
        match self.u8()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    /// A `u16`.
    pub fn u16(&mut self) -> Option<u16> {
        self.take().map(u16::from_le_bytes)
    }

    /// A `u32`.
    pub fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }

    /// A `u64`.
    pub fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }

    /// Bytes written with their length (4 bytes, little-endian) first.
    pub fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.u32()?).ok()?;
        let bytes = self.rest.get(..len)?;
        self.rest = &self.rest[len..];
        Some(bytes)
    }

    /// A typed id (written as its text), trusted as the component wrote it.
    pub fn id<I: crate::ids::TypedId>(&mut self) -> Option<I> {
        self.str().map(I::from_trusted)
    }

    /// A string (its length, then UTF-8).
    pub fn str(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?.to_vec()).ok()
    }

    /// Whether everything has been read.
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// A list written by [`Writer::list`], each item read by `get`. Room is made for what the
    /// record can hold (each item is at least `min_item` bytes), not for what its count
    /// claims, so a damaged count cannot make a reader allocate gigabytes.
    pub fn list<T>(
        &mut self,
        min_item: usize,
        mut get: impl FnMut(&mut Self) -> Option<T>,
    ) -> Option<Vec<T>> {
        let count = self.u32()? as usize;
        let mut items = Vec::with_capacity(count.min(self.rest.len() / min_item.max(1)));
        for _ in 0..count {
            items.push(get(self)?);
        }
        Some(items)
    }

    /// An optional value (0, or 1 then the value); `None` for any other tag.
    pub fn opt<T>(&mut self, get: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        match self.u8()? {
            0 => Some(None),
            1 => get(self).map(Some),
            _ => None,
        }
    }

    /// `Some(())` if the whole record has been read (trailing bytes are damage too).
    pub fn end(self) -> Option<()> {
        self.is_empty().then_some(())
    }
}

/// For tests of a record's reader: `reads` accepts `record`, and refuses every truncation of
/// it (down to no bytes at all) and `record` with one byte more.
#[cfg(any(test, feature = "testing"))]
pub fn assert_only_whole_records_read(record: &[u8], reads: impl Fn(&[u8]) -> bool) {
    assert!(reads(record), "the whole record");
    for cut in 0..record.len() {
        assert!(!reads(&record[..cut]), "cut at {cut}");
    }
    let mut longer = record.to_vec();
    longer.push(0);
    assert!(!reads(&longer), "a trailing byte");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut w = Writer::new(7, 0);
        w.u8(3)
            .bool(true)
            .u16(503)
            .u32(70_000)
            .u64(u64::MAX - 1)
            .str("dlv_é")
            .opt(None::<u64>, Writer::u64)
            .opt(Some("x"), Writer::str)
            .list(&[7u64, 8], |w, n| w.u64(*n));
        w.finish()
    }

    #[test]
    fn what_is_written_reads_back_in_order() {
        let bytes = sample();
        let mut r = Reader::new(&bytes, 7).expect("version");
        assert_eq!(r.u8(), Some(3));
        assert_eq!(r.bool(), Some(true));
        assert_eq!(r.u16(), Some(503));
        assert_eq!(r.u32(), Some(70_000));
        assert_eq!(r.u64(), Some(u64::MAX - 1));
        assert_eq!(r.str().as_deref(), Some("dlv_é"));
        assert_eq!(r.opt(Reader::u64), Some(None));
        assert_eq!(r.opt(Reader::str), Some(Some("x".to_owned())));
        assert_eq!(r.list(8, Reader::u64), Some(vec![7, 8]));
        assert_eq!(r.end(), Some(()));
    }

    #[test]
    fn damage_is_none_never_a_panic() {
        let bytes = sample();
        assert!(Reader::new(&bytes, 8).is_none(), "another version");
        assert!(Reader::new(b"{\"id\":1}", 7).is_none(), "JSON");
        assert!(Reader::new(&[], 7).is_none(), "empty");
        // Every truncation fails somewhere, and so does a trailing byte.
        let read_all = |b: &[u8]| -> Option<()> {
            let mut r = Reader::new(b, 7)?;
            r.u8()?;
            r.bool()?;
            r.u16()?;
            r.u32()?;
            r.u64()?;
            r.str()?;
            r.opt(Reader::u64)?;
            r.opt(Reader::str)?;
            r.list(8, Reader::u64)?;
            r.end()
        };
        assert_only_whole_records_read(&bytes, |b| read_all(b).is_some());
        // A flag that is neither 0 nor 1, a bad option tag, a length past the end, bytes that
        // are not UTF-8.
        assert_eq!(Reader::new(&[7, 2], 7).expect("version").bool(), None);
        let mut w = Writer::new(7, 0);
        w.u8(2);
        assert_eq!(
            Reader::new(&w.finish(), 7)
                .expect("version")
                .opt(Reader::u8),
            None
        );
        let mut w = Writer::new(7, 0);
        w.u32(u32::MAX);
        assert_eq!(Reader::new(&w.finish(), 7).expect("version").str(), None);
        let mut w = Writer::new(7, 0);
        w.u32(1).u8(0xff);
        assert_eq!(Reader::new(&w.finish(), 7).expect("version").str(), None);
    }
}
