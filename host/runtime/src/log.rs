//! The process's log: `tracing` events (the host's own, and those wasmtime and h2 emit),
//! filtered by level in the RUST_LOG style ([`init`]), written as JSON lines or as short
//! human lines to stdout by one writer thread ([`Sink`]); and the component's log lines,
//! passed on to stderr as the component wrote them ([`guest_lines`]).
//!
//! A JSON line is `ts` (ms since the epoch), `level`, `msg`, then the event's fields in the
//! order given, each value a string, then `logger` (the event's target: where it came from),
//! e.g. `{"ts":1764650000000,"level":"info","msg":"request","method":"GET",...,"logger":"edgehook::request"}`.
//! The host's events use a few fixed targets, so that a filter can name them:
//! [`REQUESTS`] (a line per request answered), [`ATTEMPTS`] (a line per delivery attempt),
//! [`COMPONENT`] (the component's own lines); everything else is under `edgehook`.
//!
//! Every request `edgehook serve` answers and every delivery attempt it makes logs one line,
//! so the line is written off the request path. Each line used to be written by the task
//! that made it, with its own `write(2)` under the stdout lock: a system call per line and
//! the runtime's workers contending for the lock (8.7 % of `serve`'s CPU under load;
//! BENCHMARKS.md). Now a line is appended to a shared buffer and one thread writes whatever
//! has gathered, with one call. The first line of a batch wakes the thread, which then
//! gathers lines for [`LINGER`] (10 ms) before it writes: at most one wake-up and one write
//! per 10 ms under any load, and a line is on stdout within about 10 ms of being logged.
//! (Waking the writer for every line instead cost a context switch per line: more CPU than
//! the writes it saved, measured.)
//!
//! - Lines never mix: only the writer thread writes them, a batch at a time, and a batch
//!   holds whole lines.
//! - Lines from one thread keep their order.
//! - The buffer is bounded ([`MAX_PENDING`]): past it, a caller waits for the writer, as a
//!   caller of a blocking write waited for a slow reader of stdout before.
//! - [`flush`] waits until every line queued before it has been written; `edgehook` calls it
//!   before it exits. Lines queued in the last 10 ms before the process is killed
//!   (SIGKILL) can be lost, as with any logger that writes off the request path.
//!
//! Without [`init`] (a library user, a test, the bench) no subscriber is set: the host's
//! events go nowhere and the component's lines go straight to stderr, as they always did.
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

/// The target of the line logged for every request `serve` answers.
pub const REQUESTS: &str = "edgehook::request";

/// The target of the line logged for every delivery attempt (and every refused one).
pub const ATTEMPTS: &str = "edgehook::delivery";

/// The target of the component's own log lines (what it writes to `wasi:cli/stderr`).
pub const COMPONENT: &str = "edgehook::component";

/// The environment variable with the level filter, RUST_LOG style (`--log-level`).
pub const FILTER_ENV: &str = "EDGEHOOK_LOG";

/// The environment variable with the format, `text` or `json` (`--log-format`).
pub const FORMAT_ENV: &str = "EDGEHOOK_LOG_FORMAT";

/// The level filter when none is given: `info` for everything.
pub const DEFAULT_FILTER: &str = "info";

/// The filter of a tool that runs servers in process (the bench): their warnings and
/// errors, not a line per request, per attempt or of the component.
pub const QUIET_FILTER: &str =
    "warn,edgehook::request=off,edgehook::delivery=off,edgehook::component=off";

/// How lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Short human lines (time, level, target, message, fields), coloured on a terminal.
    Text,
    /// One JSON object a line (the module's doc says which fields).
    Json,
}

impl Format {
    /// `text` or `json`.
    pub fn parse(name: &str) -> Result<Format, String> {
        match name {
            "text" => Ok(Format::Text),
            "json" => Ok(Format::Json),
            other => Err(format!("{other:?}: expected text or json")),
        }
    }

    /// Text when stdout is a terminal, JSON otherwise (a pipe, a file, a log collector).
    pub fn for_stdout() -> Format {
        use std::io::IsTerminal as _;
        if std::io::stdout().is_terminal() {
            Format::Text
        } else {
            Format::Json
        }
    }
}

/// Sets the process's `tracing` subscriber: events that pass `filter` (RUST_LOG style, e.g.
/// `info` or `edgehook=debug,wasmtime=warn`) written to stdout in `format` by the writer
/// thread; the component's lines ([`COMPONENT`]) that pass it go to stderr as written.
/// Fails on a filter that does not parse, or if a subscriber is already set.
pub fn init(format: Format, filter: &str) -> Result<(), String> {
    use std::io::IsTerminal as _;
    let ansi = format == Format::Text && std::io::stdout().is_terminal();
    let subscriber = subscriber(format, filter, ansi, || StdoutLines)?;
    tracing::subscriber::set_global_default(subscriber).map_err(|e| e.to_string())
}

/// [`init`]'s subscriber, its lines written to `writer`'s writers.
fn subscriber<W>(
    format: Format,
    filter: &str,
    ansi: bool,
    writer: W,
) -> Result<impl tracing::Subscriber + Send + Sync + 'static, String>
where
    W: for<'a> tracing_subscriber::fmt::MakeWriter<'a> + Send + Sync + 'static,
{
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .map_err(|e| format!("log filter {filter:?}: {e}"))?;
    let host = tracing_subscriber::filter::filter_fn(|m| m.target() != COMPONENT);
    let lines = tracing_subscriber::fmt::layer().with_writer(writer);
    let lines = match format {
        Format::Json => lines.event_format(JsonLine).boxed(),
        Format::Text => lines.compact().with_ansi(ansi).boxed(),
    };
    Ok(tracing_subscriber::registry()
        .with(filter)
        .with(lines.with_filter(host))
        .with(GuestLines))
}

/// Passes on the component's stderr bytes (whole lines): each line an event of target
/// [`COMPONENT`] (level `warn` for a `store.error` or `secret.unreadable` line, `info` for
/// the rest) once [`init`] has set a subscriber, else straight to the process's stderr.
pub fn guest_lines(bytes: &[u8]) {
    if !tracing::dispatcher::has_been_set() {
        use std::io::Write as _;
        let _ = std::io::stderr().write_all(bytes);
        return;
    }
    for line in String::from_utf8_lossy(bytes).lines() {
        if line.starts_with("{\"type\":\"store.error\"")
            || line.starts_with("{\"type\":\"secret.unreadable\"")
        {
            tracing::warn!(target: COMPONENT, line);
        } else {
            tracing::info!(target: COMPONENT, line);
        }
    }
}

/// Writes the component's lines ([`COMPONENT`] events' `line`) to stderr, as written.
struct GuestLines;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for GuestLines {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() != COMPONENT {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        if let Some((_, line)) = fields.0.iter().find(|(k, _)| *k == "line") {
            use std::io::Write as _;
            let mut bytes = Vec::with_capacity(line.len() + 1);
            bytes.extend_from_slice(line.as_bytes());
            bytes.push(b'\n');
            let _ = std::io::stderr().write_all(&bytes);
        }
    }
}

/// The formatter's writer: each formatted line queued whole on stdout's [`Sink`].
struct StdoutLines;

impl std::io::Write for StdoutLines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        write_line(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An event's fields, each as a string, in the order given; `message` apart.
#[derive(Default)]
struct Fields(Vec<(&'static str, String)>, Option<String>);

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.put(field.name(), value.to_owned());
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        // `%x` fields arrive here as their Display text.
        self.put(field.name(), format!("{value:?}"));
    }
}

impl Fields {
    fn put(&mut self, name: &'static str, value: String) {
        if name == "message" {
            self.1 = Some(value);
        } else {
            self.0.push((name, value));
        }
    }
}

/// The JSON line format (the module's doc).
struct JsonLine;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for JsonLine
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let meta = event.metadata();
        let line = LogLine {
            ts: now_ms(),
            level: level_name(meta.level()),
            msg: fields.1.as_deref().unwrap_or(""),
            fields: &fields.0,
            target: meta.target(),
        };
        let text = serde_json::to_string(&line).map_err(|_| std::fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

fn level_name(level: &tracing::Level) -> &'static str {
    match *level {
        tracing::Level::ERROR => "error",
        tracing::Level::WARN => "warn",
        tracing::Level::INFO => "info",
        tracing::Level::DEBUG => "debug",
        tracing::Level::TRACE => "trace",
    }
}

/// One JSON line: `ts`, `level` and `msg` first, then the fields in the order given, then
/// `logger` (the event's target).
struct LogLine<'a> {
    ts: u64,
    level: &'a str,
    msg: &'a str,
    fields: &'a [(&'static str, String)],
    target: &'a str,
}

impl serde::Serialize for LogLine<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = s.serialize_map(Some(4 + self.fields.len()))?;
        map.serialize_entry("ts", &self.ts)?;
        map.serialize_entry("level", self.level)?;
        map.serialize_entry("msg", self.msg)?;
        for (k, v) in self.fields {
            map.serialize_entry(k, v)?;
        }
        map.serialize_entry("logger", self.target)?;
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
    fn json_lines_carry_ts_level_msg_the_fields_as_strings_and_the_target() {
        let out = Capture::default();
        let sink = Arc::new(Sink::new(out.clone(), MAX_PENDING));
        let writer = {
            let sink = sink.clone();
            move || SinkWriter(sink.clone())
        };
        let subscriber = subscriber(Format::Json, "info,edgehook::request=off", false, writer)
            .expect("subscriber");
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(addr = %"127.0.0.1:8080", dataDir = "d", n = 3u64, "listening");
            tracing::info!(target: REQUESTS, status = 201u16, "request");
            tracing::debug!("not at info");
            tracing::warn!(target: ATTEMPTS, deliveryId = "dlv_1", "delivery attempt");
        });
        sink.flush();
        let text = out.text();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            text.starts_with("{\"ts\":") && text.contains(",\"level\":\"info\",\"msg\":\"listening\",\"addr\":\"127.0.0.1:8080\",\"dataDir\":\"d\",\"n\":\"3\","),
            "{text}"
        );
        assert_eq!(lines[1]["level"], "warn");
        assert_eq!(lines[1]["msg"], "delivery attempt");
        assert_eq!(lines[1]["deliveryId"], "dlv_1");
        assert_eq!(lines[1]["logger"], ATTEMPTS);
    }

    #[test]
    fn the_quiet_filter_keeps_warnings_and_drops_requests_attempts_and_the_components_lines() {
        let out = Capture::default();
        let sink = Arc::new(Sink::new(out.clone(), MAX_PENDING));
        let writer = {
            let sink = sink.clone();
            move || SinkWriter(sink.clone())
        };
        let subscriber = subscriber(Format::Text, QUIET_FILTER, false, writer).expect("quiet");
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..100 {
                tracing::info!(target: REQUESTS, status = 200u16, "request");
                tracing::warn!(target: ATTEMPTS, "delivery attempt");
                tracing::warn!(target: COMPONENT, line = "{}", "component line");
                tracing::info!("tick");
            }
            tracing::warn!("accept failed");
        });
        sink.flush();
        let text = out.text();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.contains("WARN") && text.contains("accept failed"),
            "{text}"
        );
    }

    #[test]
    fn a_filter_that_does_not_parse_is_refused() {
        let made = subscriber(Format::Text, "edgehook=loud", false, || {
            SinkWriter(Arc::new(Sink::new(Capture::default(), 64)))
        });
        assert!(made.is_err());
    }

    /// A formatter's writer onto a test's own sink.
    struct SinkWriter(Arc<Sink>);

    impl Write for SinkWriter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.write_line(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn flush_of_a_sink_never_written_to_returns() {
        let sink = Sink::new(Capture::default(), MAX_PENDING);
        sink.flush();
    }
}
