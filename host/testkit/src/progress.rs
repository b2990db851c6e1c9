//! Progress of long commands (`edgehook-bench`, `edgehook-soak`, `edgehook-sim`): on a
//! terminal, one line on stderr rewritten in place (`\r`); anywhere else (a pipe, a file, CI)
//! no progress line at all, so a log never holds carriage returns or half-drawn lines. Each
//! command prints its summary at the end as ordinary output.

use std::io::{IsTerminal as _, Write};
use std::time::{Duration, Instant};

/// How often a count is redrawn at most.
const REDRAW: Duration = Duration::from_millis(100);

/// A progress line: a label and a count out of a total.
pub struct Progress {
    /// Where the line is drawn; `None`: nowhere (not a terminal).
    out: Option<Box<dyn Write + Send>>,
    label: String,
    total: u64,
    drawn: Option<Instant>,
    /// Whether a line is on screen (to clear before other output).
    visible: bool,
}

impl Progress {
    /// Drawn on stderr when stderr is a terminal; silent otherwise.
    pub fn stderr() -> Self {
        let out = std::io::stderr()
            .is_terminal()
            .then(|| Box::new(std::io::stderr()) as Box<dyn Write + Send>);
        Self::to(out)
    }

    /// Never drawn.
    pub fn silent() -> Self {
        Self::to(None)
    }

    /// Drawn on `out` (`None`: never drawn).
    pub fn to(out: Option<Box<dyn Write + Send>>) -> Self {
        Progress {
            out,
            label: String::new(),
            total: 0,
            drawn: None,
            visible: false,
        }
    }

    /// Whether anything is drawn.
    pub fn is_shown(&self) -> bool {
        self.out.is_some()
    }

    /// Starts a phase: `label`, counting up to `total` (0: no total).
    pub fn phase(&mut self, label: &str, total: u64) {
        self.label = label.to_owned();
        self.total = total;
        self.drawn = None;
        self.set(0);
    }

    /// Shows `done` of the phase's total (redrawn at most every 100 ms, and at the end).
    pub fn set(&mut self, done: u64) {
        let Some(out) = self.out.as_mut() else {
            return;
        };
        let finished = self.total > 0 && done >= self.total;
        if self.drawn.is_some_and(|t| t.elapsed() < REDRAW) && !finished {
            return;
        }
        self.drawn = Some(Instant::now());
        let count = match self.total {
            0 if done == 0 => String::new(),
            0 => format!(" {done}"),
            total => format!(" {done}/{total} ({}%)", done.min(total) * 100 / total),
        };
        // `\x1b[K` erases what a longer earlier line left on the right.
        let _ = write!(out, "\r{}{count}\x1b[K", self.label).and_then(|()| out.flush());
        self.visible = true;
    }

    /// Takes the line off the screen (before other output, and at the end).
    pub fn clear(&mut self) {
        if let Some(out) = self.out.as_mut().filter(|_| self.visible) {
            let _ = write!(out, "\r\x1b[K").and_then(|()| out.flush());
            self.visible = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A writer whose bytes the test can read.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn on_a_terminal_one_line_is_redrawn_and_cleared() {
        let screen = Shared::default();
        let mut p = Progress::to(Some(Box::new(screen.clone())));
        assert!(p.is_shown());
        p.phase("events", 4);
        p.set(1); // within 100 ms of the last draw: skipped
        p.set(4); // the end is always drawn
        p.clear();
        let text = String::from_utf8(screen.0.lock().expect("lock").clone()).expect("utf-8");
        assert_eq!(
            text,
            "\revents 0/4 (0%)\x1b[K\revents 4/4 (100%)\x1b[K\r\x1b[K"
        );
    }

    #[test]
    fn silent_progress_draws_nothing() {
        let mut p = Progress::silent();
        assert!(!p.is_shown());
        p.phase("events", 10);
        p.set(10);
        p.clear();
    }
}
