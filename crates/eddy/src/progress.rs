//! Progress bars of `eddy streams export` and `import` on standard error
//! (indicatif draws nothing when standard error is not a terminal).

use std::time::Duration;

use eddy_streams::BackupProgress;
use indicatif::{ProgressBar, ProgressStyle};

/// A bar of message bytes copied, naming the stream being copied.
pub struct Bar(ProgressBar);

impl Bar {
    /// A bar whose total is unknown until [`BackupProgress::start`].
    pub fn new() -> Self {
        let bar = ProgressBar::new_spinner();
        bar.enable_steady_tick(Duration::from_millis(200));
        Bar(bar)
    }

    /// Clears the bar and prints `message` in its place.
    pub fn done(self, message: String) {
        self.0.finish_and_clear();
        eprintln!("{message}");
    }
}

impl BackupProgress for Bar {
    fn start(&mut self, streams: u64, bytes: u64) {
        self.0.set_length(bytes);
        let style = ProgressStyle::with_template(
            "{bar:30} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}  {msg}",
        );
        if let Ok(style) = style {
            self.0.set_style(style);
        }
        self.0.println(format!("{streams} streams, {bytes} bytes"));
    }

    fn copied(&mut self, path: &str, bytes: u64) {
        self.0.set_message(path.to_owned());
        self.0.inc(bytes);
    }
}
