//! Spans for trace export (OTLP). The server installs [`Hooks`] when an OTLP endpoint is
//! configured; until then every span function here returns [`Span::none`] and costs nothing,
//! so a node without an endpoint does no tracing work on the data path.
//!
//! Spans: `skua.connection` (one per WebSocket, for its lifetime), `skua.publish` (a root per
//! client publish), `skua.<slot>.<op>` (each bus, store and presence operation, children of
//! whatever is current), and `skua.deliver` (on every node the publication reaches, a child of
//! the publisher's `bus.publish` span through the context the bus carries). The control plane's
//! `skua.rpc` spans come from `skua-control`, gated on `skua_core::trace::enabled`.

use std::sync::OnceLock;

use tracing::Span;

/// What the server's tracing layer provides.
#[derive(Debug, Clone, Copy)]
pub struct Hooks {
    /// Makes `span` a child of the remote context `traceparent` (a W3C trace context).
    pub set_parent: fn(&Span, &str),
    /// The trace id of `span` (32 hex digits), if it has a valid trace context.
    pub trace_id: fn(&Span) -> Option<String>,
}

/// Records the span's trace id in its `trace_id` field, so that every log line inside it
/// carries the id of the trace it belongs to (log and trace correlation).
fn record_trace_id(hooks: &Hooks, span: &Span) {
    if let Some(id) = (hooks.trace_id)(span) {
        span.record("trace_id", id.as_str());
    }
}

static HOOKS: OnceLock<Hooks> = OnceLock::new();

/// Installs the hooks; the first installation wins.
pub fn install(hooks: Hooks) {
    let _ = HOOKS.set(hooks);
}

/// Whether spans are exported.
pub fn enabled() -> bool {
    HOOKS.get().is_some()
}

/// The span of one WebSocket connection. Its log lines carry `conn` (and, with trace export,
/// `trace_id`).
pub fn connection_span(conn: skua_core::ConnId, node: &skua_core::NodeId) -> Span {
    if let Some(hooks) = HOOKS.get() {
        let span =
            tracing::info_span!("skua.connection", conn = conn.0, node = %node, trace_id = tracing::field::Empty);
        record_trace_id(hooks, &span);
        span
    } else {
        tracing::debug_span!("conn", conn = %conn, node = %node)
    }
}

/// The root span of one client publish.
pub fn publish_span(node: &skua_core::NodeId) -> Span {
    let Some(hooks) = HOOKS.get() else { return Span::none() };
    let span = tracing::info_span!(parent: None, "skua.publish", node = %node, trace_id = tracing::field::Empty);
    record_trace_id(hooks, &span);
    span
}

/// The span of one backend operation.
pub fn backend_span(slot: &'static str, op: &'static str) -> Span {
    if enabled() {
        tracing::info_span!("skua.backend", otel.name = format!("skua.{slot}.{op}"), slot, op)
    } else {
        Span::none()
    }
}

/// The span of a publication's local fan-out, continuing the publisher's trace.
pub fn delivery_span(trace_parent: &str) -> Span {
    let Some(hooks) = HOOKS.get() else { return Span::none() };
    let span = tracing::info_span!(
        parent: None,
        "skua.deliver",
        delivered = tracing::field::Empty,
        trace_id = tracing::field::Empty
    );
    (hooks.set_parent)(&span, trace_parent);
    record_trace_id(hooks, &span);
    span
}
