//! Progress bars for the long benchmarks: drawn on stderr only when a person watches (stdout and
//! stderr are terminals) and the output is not `--json`.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

/// A bar of `steps` steps, or `None` when nobody watches or the output is JSON.
pub fn steps(steps: u64, json: bool) -> Option<ProgressBar> {
    if json || !std::io::stdout().is_terminal() || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new(steps);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    // fio runs take seconds each: keep the spinner and the clock moving meanwhile.
    bar.enable_steady_tick(Duration::from_millis(200));
    Some(bar)
}

/// Names the step now running.
pub fn step(bar: &Option<ProgressBar>, msg: impl Into<String>) {
    if let Some(b) = bar {
        b.set_message(msg.into());
    }
}

/// Counts a finished step.
pub fn done(bar: &Option<ProgressBar>) {
    if let Some(b) = bar {
        b.inc(1);
    }
}

/// Removes the bar before the results are printed.
pub fn finish(bar: Option<ProgressBar>) {
    if let Some(b) = bar {
        b.finish_and_clear();
    }
}
