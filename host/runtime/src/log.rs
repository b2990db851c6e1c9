//! The process's log sink: whole lines, written to stdout by one writer thread; and
//! [`log_line`], the one structured (JSON) line every part of the host writes through.
//!
//! Every request `edgehook serve` answers and every delivery attempt it makes logs one line.
//! Each line used to be written by the task that made it, with its own `write(2)` under the
//! stdout lock: a system call per line and the runtime's workers contending for the lock
//! (8.7 % of `serve`'s CPU under load; BENCHMARKS.md). Now a line is appended to a shared
//! buffer and one thread writes whatever has gathered, with one call. The first line of a
//! batch wakes the thread, which then gathers lines for [`LINGER`] (10 ms) before it writes:
//! at most one wake-up and one write per 10 ms under any load, and a line is on stdout
//! within about 10 ms of being logged. (Waking the writer for every line instead cost a
//! context switch per line: more CPU than the writes it saved, measured.)
//!
//! - Lines never mix: only the writer thread writes them, a batch at a time, and a batch
//!   holds whole lines.
//! - Lines from one thread keep their order.
//! - The buffer is bounded ([`MAX_PENDING`]): past it, a caller waits for the writer, as a
//!   caller of a blocking write waited for a slow reader of stdout before.
//! - [`flush`] waits until every line queued before it has been written; `edgehook` calls it
//!   before it exits. Lines queued in the last 10 ms before the process is killed
//!   (SIGKILL) can be lost, as with any logger that writes off the request path.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Bytes that may wait for the writer before callers wait too.
pub const MAX_PENDING: usize = 1 << 20;

/// How long the writer gathers lines after the first of a batch: at most one wake-up and
/// one write per this much time, however many lines are logged.
pub const LINGER: Duration = Duration::from_millis(10);

/// A log sink: a buffer and the thread that empties it into a writer.
pub struct Sink {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when lines are queued into an empty buffer (wakes the writer), and when
    /// someone starts waiting for the writer (ends its gathering).
    queued: Condvar,
    /// Signalled when a batch has been written (wakes flushers and callers over the cap).
    written: Condvar,
    cap: usize,
    /// Where lines go: the writer thread's, or the callers' if it could not start.
    out: Mutex<Box<dyn Write + Send>>,
}

#[derive(Default)]
struct State {
    pending: Vec<u8>,
    /// Bytes queued since the sink was made.
    queued_total: u64,
    /// Bytes the writer has handed to its writer since the sink was made.
    written_total: u64,
    /// Callers waiting on `written`.
    waiting: usize,
    /// The writer thread could not be started: callers write their lines to `out`.
    no_writer: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `bytes` to `out`. A failed write (stdout closed) drops them, as a failed
    /// `println!` to a closed stdout would have dropped its line.
    fn write_out(&self, bytes: &[u8]) {
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let _ = out.write_all(bytes).and_then(|()| out.flush());
    }

    fn wait_written<'a>(&self, mut state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        state.waiting += 1;
        // The writer may be gathering a batch: it stops when someone waits.
        self.queued.notify_one();
        let mut state = self.written.wait(state).unwrap_or_else(|p| p.into_inner());
        state.waiting -= 1;
        state
    }
}

impl Sink {
    /// A sink writing to `out` from a thread of its own; callers wait once `cap` bytes are
    /// pending.
    pub fn new(out: impl Write + Send + 'static, cap: usize) -> Sink {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            queued: Condvar::new(),
            written: Condvar::new(),
            cap,
            out: Mutex::new(Box::new(out)),
        });
        let writer = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("edgehook-log".into())
            .spawn(move || {
                let mut batch = Vec::new();
                loop {
                    let mut state = writer.lock();
                    while state.pending.is_empty() {
                        state = writer.queued.wait(state).unwrap_or_else(|p| p.into_inner());
                    }
                    // Woken by the first line of a batch: gather the lines of the next
                    // moments too, unless someone waits for the writer or the batch is big.
                    let until = Instant::now() + LINGER;
                    while state.waiting == 0 && state.pending.len() < writer.cap / 2 {
                        let left = until.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            break;
                        }
                        state = writer
                            .queued
                            .wait_timeout(state, left)
                            .unwrap_or_else(|p| p.into_inner())
                            .0;
                    }
                    std::mem::swap(&mut batch, &mut state.pending);
                    drop(state);
                    writer.write_out(&batch);
                    let mut state = writer.lock();
                    state.written_total += batch.len() as u64;
                    if state.waiting > 0 {
                        writer.written.notify_all();
                    }
                    drop(state);
                    batch.clear();
                }
            });
        if let Err(e) = spawned {
            // No thread: lines are written by their callers, as before there was a sink,
            // so nothing waits for a writer that does not exist.
            eprintln!("could not start the log writer: {e}");
            shared.lock().no_writer = true;
        }
        Sink { shared }
    }

    /// Queues one whole line (its newline included).
    pub fn write_line(&self, line: &[u8]) {
        let shared = &self.shared;
        let mut state = shared.lock();
        if state.no_writer {
            drop(state);
            shared.write_out(line);
            return;
        }
        while !state.pending.is_empty() && state.pending.len() + line.len() > shared.cap {
            state = shared.wait_written(state);
        }
        let was_empty = state.pending.is_empty();
        state.pending.extend_from_slice(line);
        state.queued_total += line.len() as u64;
        drop(state);
        if was_empty {
            // The writer is asleep, or will see these bytes before it sleeps again.
            shared.queued.notify_one();
        }
    }

    /// Waits until every line queued before this call has been written.
    pub fn flush(&self) {
        let shared = &self.shared;
        let mut state = shared.lock();
        let target = state.queued_total;
        while state.written_total < target {
            state = shared.wait_written(state);
        }
    }
}

fn stdout_sink() -> &'static OnceLock<Sink> {
    static SINK: OnceLock<Sink> = OnceLock::new();
    &SINK
}

/// Queues one whole line (newline included) for stdout.
pub fn write_line(line: &[u8]) {
    stdout_sink()
        .get_or_init(|| Sink::new(std::io::stdout(), MAX_PENDING))
        .write_line(line);
}

/// Waits until every line queued for stdout so far has been written.
pub fn flush() {
    if let Some(sink) = stdout_sink().get() {
        sink.flush();
    }
}

/// Writes one structured (JSON) log line to stdout (through this sink).
pub fn log_line(level: &str, msg: &str, fields: &[(&str, String)]) {
    let line = LogLine {
        ts: now_ms(),
        level,
        msg,
        fields,
    };
    // Encoded whole, then queued whole: lines from concurrent requests never mix.
    let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
    bytes.push(b'\n');
    write_line(&bytes);
}

/// One log line: `ts`, `level` and `msg` first, then the fields in the order given.
struct LogLine<'a> {
    ts: u64,
    level: &'a str,
    msg: &'a str,
    fields: &'a [(&'a str, String)],
}

impl serde::Serialize for LogLine<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = s.serialize_map(Some(3 + self.fields.len()))?;
        map.serialize_entry("ts", &self.ts)?;
        map.serialize_entry("level", self.level)?;
        map.serialize_entry("msg", self.msg)?;
        for (k, v) in self.fields {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// Wall time, ms since the epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A writer into a shared buffer, counting its calls.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<(Vec<u8>, usize)>>);

    impl Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let mut c = self.0.lock().unwrap_or_else(|p| p.into_inner());
            c.0.extend_from_slice(buf);
            c.1 += 1;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Capture {
        fn text(&self) -> String {
            let c = self.0.lock().unwrap_or_else(|p| p.into_inner());
            String::from_utf8(c.0.clone()).expect("utf-8")
        }
    }

    #[test]
    fn lines_from_many_threads_arrive_whole_and_in_each_threads_order() {
        let out = Capture::default();
        let sink = Arc::new(Sink::new(out.clone(), 4096));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let sink = sink.clone();
                std::thread::spawn(move || {
                    for i in 0..2000 {
                        sink.write_line(
                            format!("t{t} line {i} {}\n", "x".repeat(i % 50)).as_bytes(),
                        );
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("writer thread");
        }
        sink.flush();
        let text = out.text();
        let mut next = [0usize; 4];
        for line in text.lines() {
            let mut parts = line.split(' ');
            let t: usize = parts.next().expect("t")[1..].parse().expect("thread");
            assert_eq!(parts.next(), Some("line"), "{line:?}");
            let i: usize = parts.next().expect("i").parse().expect("index");
            assert_eq!(i, next[t], "thread {t} out of order or a line lost");
            assert_eq!(parts.next(), Some("x".repeat(i % 50).as_str()), "{line:?}");
            next[t] += 1;
        }
        assert_eq!(next, [2000; 4], "every line arrives");
        // The small cap (4 KiB) made callers wait for the writer many times over; and
        // lines were batched: fewer writes than lines.
        let writes = out.0.lock().expect("capture").1;
        assert!(writes < 8000, "{writes} writes for 8000 lines");
    }

    /// A writer that signals when it is entered and then waits to be let go.
    struct Gated {
        entered: mpsc::Sender<()>,
        gate: Arc<Mutex<mpsc::Receiver<()>>>,
        out: Capture,
    }

    impl Write for Gated {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let _ = self.entered.send(());
            let _ = self.gate.lock().expect("gate").recv();
            self.out.write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn flush_returns_only_when_what_was_queued_before_it_is_written() {
        let (entered_tx, entered) = mpsc::channel();
        let (open, gate) = mpsc::channel();
        let out = Capture::default();
        let sink = Sink::new(
            Gated {
                entered: entered_tx,
                gate: Arc::new(Mutex::new(gate)),
                out: out.clone(),
            },
            MAX_PENDING,
        );
        sink.write_line(b"first\n");
        // The writer is inside its write, held at the gate, when flush begins.
        entered.recv().expect("the writer began");
        let opener = std::thread::spawn(move || {
            let _ = open.send(());
        });
        sink.flush();
        assert_eq!(out.text(), "first\n");
        opener.join().expect("opener");
    }

    #[test]
    fn flush_of_a_sink_never_written_to_returns() {
        let sink = Sink::new(Capture::default(), MAX_PENDING);
        sink.flush();
    }
}
