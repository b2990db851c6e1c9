//! Everything the core gets from outside, passed in explicitly: the time, randomness, the
//! store and the settings. The core never reads a clock or a random source by itself; the
//! shell fills an [`Env`] from the WASI imports and tests fill it with fixed values.

use crate::config::Settings;
use edgehook_storage::kv::Kv;

/// A source of random bytes. The shell reads `wasi:random`; tests use [`SeededEntropy`].
pub trait Entropy {
    /// Fills `buf` with random bytes.
    fn fill(&self, buf: &mut [u8]);
}

/// Where the core writes its structured log lines: one JSON object per line, for events an
/// operator acts on (a subscription disabled or enabled). The shell writes them to stderr,
/// which every host keeps as the component's log; tests collect them.
pub trait Log {
    /// Writes one line (without its line break).
    fn line(&self, line: &str);

    /// Writes one metrics event (one JSON object, without its line break): what a run of
    /// attempts did, for the host's metrics. The shell writes them to stdout, apart from the
    /// log; `edgehook serve` turns them into its Prometheus metrics. Dropped by default.
    fn event(&self, _line: &str) {}
}

/// A [`Log`] that drops every line: the default of [`Env::new`].
pub struct NoLog;

impl Log for NoLog {
    fn line(&self, _: &str) {}
}

/// A [`Log`] that keeps every line, for tests.
#[derive(Default)]
pub struct Lines(pub std::cell::RefCell<Vec<String>>);

impl Log for Lines {
    fn line(&self, line: &str) {
        self.0.borrow_mut().push(line.to_owned());
    }
}

/// The world as one call of the core sees it.
pub struct Env<'a, K: Kv> {
    /// Wall-clock time of this call, in milliseconds since the Unix epoch.
    pub now_ms: u64,
    /// The key-value bucket.
    pub kv: &'a K,
    /// The bucket of the per-minute counters of the rate limits, which need no durability
    /// (a count lost with a restart only restarts its minute): a host may keep it in memory.
    /// [`Env::kv`] unless [`Env::with_counters`] says otherwise.
    pub counters: &'a K,
    /// The parsed settings.
    pub settings: &'a Settings,
    /// Randomness for ids, secrets and jitter.
    pub entropy: &'a dyn Entropy,
    /// Where structured log lines go ([`NoLog`] unless [`Env::with_log`] says otherwise).
    pub log: &'a dyn Log,
    /// The W3C `traceparent` of the request this call answers, when it came with a valid one
    /// ([`crate::trace`]): a publish keeps it with its event.
    pub trace: Option<&'a str>,
}

impl<'a, K: Kv> Env<'a, K> {
    /// The environment of a call at `now_ms`.
    pub fn new(now_ms: u64, kv: &'a K, settings: &'a Settings, entropy: &'a dyn Entropy) -> Self {
        Env {
            now_ms,
            kv,
            counters: kv,
            settings,
            entropy,
            log: &NoLog,
            trace: None,
        }
    }

    /// The same environment, keeping the rate limits' counters in `counters`.
    pub fn with_counters(self, counters: &'a K) -> Env<'a, K> {
        Env { counters, ..self }
    }

    /// The same environment, writing its log lines to `log`.
    pub fn with_log(self, log: &'a dyn Log) -> Env<'a, K> {
        Env { log, ..self }
    }

    /// The same environment, in the trace `traceparent` names (kept only if valid).
    pub fn with_trace(self, traceparent: Option<&'a str>) -> Env<'a, K> {
        let trace = traceparent.filter(|t| crate::trace::valid(t));
        Env { trace, ..self }
    }

    /// The same store, settings and randomness at another time: a long call's later steps,
    /// or a test's next moment.
    pub fn at(&self, now_ms: u64) -> Env<'a, K> {
        Env { now_ms, ..*self }
    }

    /// The result of a store operation the caller goes on without (a cleanup, a count, a
    /// mark that a later call makes again): a failure is written to the log with `what` (the
    /// operation and the kind of key it writes), never dropped unseen.
    pub fn best_effort<T, E: std::fmt::Display>(
        &self,
        what: &str,
        result: Result<T, E>,
    ) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(e) => {
                self.log.line(&format!(
                    "{{\"type\":\"store.error\",\"op\":{},\"error\":{}}}",
                    crate::error::quoted(what),
                    crate::error::quoted(&e.to_string())
                ));
                None
            }
        }
    }

    /// `n` random bytes.
    pub fn random_bytes<const N: usize>(&self) -> [u8; N] {
        let mut buf = [0u8; N];
        self.entropy.fill(&mut buf);
        buf
    }

    /// A uniformly distributed number in `0..bound` (`bound` > 0).
    pub fn random_below(&self, bound: u64) -> u64 {
        u64::from_le_bytes(self.random_bytes::<8>()) % bound.max(1)
    }
}

/// Deterministic randomness for tests (SplitMix64). Not for production use.
pub struct SeededEntropy(std::cell::Cell<u64>);

impl SeededEntropy {
    /// A generator that always produces the same bytes for the same seed.
    pub fn new(seed: u64) -> Self {
        Self(std::cell::Cell::new(seed))
    }
}

impl Entropy for SeededEntropy {
    fn fill(&self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let mut z = self.0.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
            self.0.set(z);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
        }
    }
}
