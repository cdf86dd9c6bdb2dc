//! Logging and trace export: the `tracing` subscriber (`RUST_LOG`, `SKUA_LOG_FORMAT`), and, when
//! an OTLP endpoint is configured (`--otlp-endpoint`, else `OTEL_EXPORTER_OTLP_ENDPOINT`), an
//! OpenTelemetry layer exporting spans over OTLP/gRPC in batches. Without an endpoint no
//! OpenTelemetry code runs: the edge's span functions return disabled spans and the bus carries
//! no trace context. With export, the connection, publish and delivery spans record their
//! `trace_id`, which every log line inside them shows (text and JSON formats alike).

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// The standard variable read when `--otlp-endpoint` is not given.
pub const OTEL_ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// Keeps the trace exporter alive; [`Telemetry::shutdown`] flushes what is still batched.
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Flushes and stops the trace exporter (a no-op without one).
    pub fn shutdown(self) {
        if let Some(p) = self.provider
            && let Err(e) = p.shutdown()
        {
            tracing::warn!(error = %e, "Flushing the trace exporter failed.");
        }
    }
}

/// The endpoint to export to: the setting, else the standard variable; empty means none.
pub fn endpoint(setting: Option<&str>) -> Option<String> {
    let from_env = std::env::var(OTEL_ENDPOINT_VAR).ok();
    setting.map(str::to_owned).or(from_env).filter(|e| !e.trim().is_empty())
}

/// Installs the global subscriber: logs to stderr, plus OTLP export of Skua's spans when
/// `otlp_endpoint` is set. Must run inside the tokio runtime (the gRPC channel lives on it).
///
/// # Errors
/// When the OTLP exporter cannot be built from `otlp_endpoint`.
pub fn init(otlp_endpoint: Option<&str>, node: &str) -> anyhow::Result<Telemetry> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let json = std::env::var("SKUA_LOG_FORMAT").is_ok_and(|v| v == "json");
    // Logs go to stderr; stdout carries only the `skua listening on` line and the dev banner.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi);
    let fmt = if json { fmt.json().boxed() } else { fmt.boxed() };
    let registry = tracing_subscriber::registry().with(fmt.with_filter(filter));

    let Some(endpoint) = otlp_endpoint else {
        registry.init();
        return Ok(Telemetry { provider: None });
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint_checked(endpoint)?
        .build()
        .map_err(|e| anyhow::anyhow!("while building the OTLP exporter for {endpoint}: {e}"))?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("skua")
        .with_attribute(opentelemetry::KeyValue::new("service.instance.id", node.to_owned()))
        .with_attribute(opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
    // Only Skua's own spans (`skua.*`, at info) are exported, whatever RUST_LOG says for logs.
    let spans = tracing_subscriber::filter::filter_fn(|m| m.is_span() && m.name().starts_with("skua."));
    let otel = tracing_opentelemetry::layer().with_tracer(provider.tracer("skua")).with_filter(spans);
    registry.with(otel).init();
    skua_core::trace::install_capture(capture);
    skua_edge::trace::install(skua_edge::trace::Hooks { set_parent, trace_id });
    tracing::info!(%endpoint, "Exporting traces over OTLP.");
    Ok(Telemetry { provider: Some(provider) })
}

/// The current span's context as a W3C `traceparent`.
fn capture() -> Option<String> {
    let cx = tracing::Span::current().context();
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    carrier.remove("traceparent")
}

/// The trace id of `span`'s OpenTelemetry context, in hex, when it is valid.
fn trace_id(span: &tracing::Span) -> Option<String> {
    use opentelemetry::trace::TraceContextExt as _;
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| sc.trace_id().to_string())
}

/// Makes `span` a child of the remote context `traceparent`.
fn set_parent(span: &tracing::Span, traceparent: &str) {
    let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    if let Err(e) = span.set_parent(cx) {
        tracing::debug!(error = %e, "A delivery span could not join its publisher's trace.");
    }
}

/// `with_endpoint`, refusing what is not an `http://host:port` URL up front (this build has no
/// TLS for the exporter: run the collector beside the node, or a local agent).
trait EndpointChecked: Sized {
    fn with_endpoint_checked(self, endpoint: &str) -> anyhow::Result<Self>;
}

impl<T: opentelemetry_otlp::WithExportConfig> EndpointChecked for T {
    fn with_endpoint_checked(self, endpoint: &str) -> anyhow::Result<Self> {
        if !endpoint.starts_with("http://") {
            anyhow::bail!("the OTLP endpoint must be an http://host:port URL, got {endpoint:?}");
        }
        Ok(self.with_endpoint(endpoint))
    }
}
