//! Writing a whole body to a `wasi:io` output stream, within what the host permits.
//!
//! `blocking-write-and-flush` takes at most 4096 bytes a call, and each call waits until the
//! host has taken the bytes before it returns. A longer body (a list of 50 subscriptions is
//! 5-15 KB) goes out in writes of what each `check-write` permits instead: `wasmtime-wasi-http`
//! permits 1 MiB (one write), Node.js's preview2-shim its stream's free buffer (16-64 KiB),
//! and a host may permit nothing until its `subscribe` pollable is ready. The shell
//! ([`crate`]'s `shell.rs`) implements [`Permits`] for the generated `OutputStream`; the loop
//! lives here so that it runs natively, against hosts the tests script.

/// What [`write_all`] uses of an output stream (the `wasi:io/streams` calls of the same names).
pub(crate) trait Permits {
    /// The stream's error.
    type Error;
    /// Bytes the next `write` may take (0: none until [`Permits::wait`] returns).
    fn check_write(&self) -> Result<u64, Self::Error>;
    /// Writes at most what the last `check_write` permitted.
    fn write(&self, bytes: &[u8]) -> Result<(), Self::Error>;
    /// Blocks until the stream may permit a write again (its `subscribe` pollable).
    fn wait(&self);
    /// Writes up to 4096 bytes and waits until they are flushed.
    fn blocking_write_and_flush(&self, bytes: &[u8]) -> Result<(), Self::Error>;
    /// Flushes and waits until done.
    fn blocking_flush(&self) -> Result<(), Self::Error>;
}

/// The most `blocking-write-and-flush` takes in one call (WASI's limit).
const ONE_CALL: usize = 4096;

/// Writes `bytes` whole: one `blocking-write-and-flush` when they fit its 4096 bytes, else
/// as much as each `check-write` permits at a time, then one flush.
pub(crate) fn write_all<S: Permits>(stream: &S, mut bytes: &[u8]) -> Result<(), S::Error> {
    if bytes.len() <= ONE_CALL {
        return stream.blocking_write_and_flush(bytes);
    }
    while !bytes.is_empty() {
        let permit = usize::try_from(stream.check_write()?).unwrap_or(usize::MAX);
        if permit == 0 {
            stream.wait();
            continue;
        }
        let (now, rest) = bytes.split_at(permit.min(bytes.len()));
        stream.write(now)?;
        bytes = rest;
    }
    stream.blocking_flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A host that permits `permits` in turn (the last one from then on), and records what
    /// it was asked.
    struct Host {
        permits: RefCell<Vec<u64>>,
        /// The permit the last `check_write` gave.
        given: RefCell<u64>,
        calls: RefCell<Vec<String>>,
        got: RefCell<Vec<u8>>,
        /// Fails every `write` from this byte on (a closed connection).
        closed_at: Option<usize>,
    }

    impl Host {
        fn new(permits: &[u64]) -> Self {
            Host {
                permits: RefCell::new(permits.iter().rev().copied().collect()),
                given: RefCell::new(0),
                calls: RefCell::new(Vec::new()),
                got: RefCell::new(Vec::new()),
                closed_at: None,
            }
        }

        fn calls(&self) -> Vec<String> {
            self.calls.borrow().clone()
        }
    }

    impl Permits for Host {
        type Error = &'static str;

        fn check_write(&self) -> Result<u64, Self::Error> {
            let mut permits = self.permits.borrow_mut();
            let permit = match permits.len() {
                1 => permits[0],
                _ => permits.pop().unwrap_or(0),
            };
            *self.given.borrow_mut() = permit;
            self.calls.borrow_mut().push(format!("check {permit}"));
            Ok(permit)
        }

        fn write(&self, bytes: &[u8]) -> Result<(), Self::Error> {
            assert!(
                bytes.len() as u64 <= *self.given.borrow(),
                "wrote past the permit"
            );
            *self.given.borrow_mut() = 0;
            if self
                .closed_at
                .is_some_and(|at| self.got.borrow().len() >= at)
            {
                return Err("closed");
            }
            self.got.borrow_mut().extend_from_slice(bytes);
            self.calls
                .borrow_mut()
                .push(format!("write {}", bytes.len()));
            Ok(())
        }

        fn wait(&self) {
            self.calls.borrow_mut().push("wait".into());
        }

        fn blocking_write_and_flush(&self, bytes: &[u8]) -> Result<(), Self::Error> {
            assert!(bytes.len() <= ONE_CALL);
            self.got.borrow_mut().extend_from_slice(bytes);
            self.calls
                .borrow_mut()
                .push(format!("blocking {}", bytes.len()));
            Ok(())
        }

        fn blocking_flush(&self) -> Result<(), Self::Error> {
            self.calls.borrow_mut().push("flush".into());
            Ok(())
        }
    }

    fn body(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn a_body_of_up_to_4096_bytes_is_one_blocking_call() {
        for len in [0, 1, 4096] {
            let host = Host::new(&[1 << 20]);
            write_all(&host, &body(len)).expect("written");
            assert_eq!(host.calls(), [format!("blocking {len}")]);
            assert_eq!(*host.got.borrow(), body(len));
        }
    }

    #[test]
    fn a_longer_body_is_one_write_where_the_host_permits_it_then_a_flush() {
        let host = Host::new(&[1 << 20]);
        write_all(&host, &body(15_000)).expect("written");
        assert_eq!(host.calls(), ["check 1048576", "write 15000", "flush"]);
        assert_eq!(*host.got.borrow(), body(15_000));
    }

    #[test]
    fn small_permits_and_none_at_all_are_waited_out_and_never_exceeded() {
        // Node.js's shim permits its stream's free buffer; a full buffer permits nothing.
        let host = Host::new(&[4000, 0, 0, 3000, 0, 2500]);
        write_all(&host, &body(10_000)).expect("written");
        assert_eq!(
            host.calls(),
            [
                "check 4000",
                "write 4000",
                "check 0",
                "wait",
                "check 0",
                "wait",
                "check 3000",
                "write 3000",
                "check 0",
                "wait",
                "check 2500",
                "write 2500",
                "check 2500",
                "write 500",
                "flush",
            ]
        );
        assert_eq!(*host.got.borrow(), body(10_000));
    }

    #[test]
    fn a_write_that_fails_ends_the_body_with_its_error() {
        let mut host = Host::new(&[3000]);
        host.closed_at = Some(3000);
        assert_eq!(write_all(&host, &body(10_000)), Err("closed"));
        assert_eq!(host.got.borrow().len(), 3000);
        assert!(!host.calls().contains(&"flush".to_owned()));
    }
}
