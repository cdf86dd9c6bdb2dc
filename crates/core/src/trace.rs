//! Trace-context propagation across the bus (W3C `traceparent` strings).
//!
//! The bus captures the context of the publishing task when it sends an envelope and hands it
//! to the receiving nodes with the delivery, so a publish and its deliveries on other nodes are
//! one trace. The server installs the capture function only when traces are exported; until
//! then [`capture`] returns `None` at the cost of one atomic load, and the bus carries nothing.

use std::sync::OnceLock;

static CAPTURE: OnceLock<fn() -> Option<String>> = OnceLock::new();

/// Installs the function that renders the current span's context as a `traceparent`; the
/// first installation wins.
pub fn install_capture(f: fn() -> Option<String>) {
    let _ = CAPTURE.set(f);
}

/// Whether traces are exported (a capture function is installed).
pub fn enabled() -> bool {
    CAPTURE.get().is_some()
}

/// The current span's `traceparent`, when tracing is exported and a span is active.
pub fn capture() -> Option<String> {
    CAPTURE.get().and_then(|f| f())
}
