//! `/metrics`: the node's [`Metrics`](crate::metrics::Metrics) in the Prometheus text exposition
//! format (version 0.0.4). Rendered on each scrape from the counters the data path keeps; no
//! registry, no background task. Every series is described in `docs/operations.md`.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use crate::state::EdgeState;

/// The `Content-Type` of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub use crate::metrics::MetricsSource;

/// Accumulates one exposition.
struct Out(String);

impl Out {
    fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{k}=\"");
                escape_into(&mut self.0, v);
                self.0.push('"');
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
    }

    fn scalar(&mut self, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
        self.header(name, kind, help);
        self.sample(name, &[], value);
    }

    fn family(&mut self, name: &str, label: &str, help: &str, values: &[(&str, u64)]) {
        self.header(name, "counter", help);
        for (v, n) in values {
            self.sample(name, &[(label, v)], n);
        }
    }
}

/// Label values escaped as the format requires: backslash, double quote and newline.
fn escape_into(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Renders every metric of the node.
pub fn render(st: &EdgeState) -> String {
    let m = &st.metrics;
    let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let mut o = Out(String::with_capacity(8 * 1024));

    let ready = u8::from(st.not_ready_now().is_none());
    o.scalar(
        "skua_ready",
        "gauge",
        "1 when /readyz answers 200 (not draining, and not cut off from a bus its peers reach; a full node stays ready and refuses upgrades 503).",
        ready,
    );
    o.scalar("skua_draining", "gauge", "1 once the node started draining.", u8::from(st.is_draining()));
    o.scalar(
        "skua_drain_seconds",
        "gauge",
        "Seconds since the node started draining (0 when not); scraped on metrics_listen until the process exits.",
        st.drain_seconds(),
    );
    let slots = st.backends_up();
    o.header(
        "skua_backend_up",
        "gauge",
        "1 when the backend (bus, presence, store) is reachable; readiness ignores it.",
    );
    for (backend, up) in slots {
        o.sample("skua_backend_up", &[("backend", backend)], u8::from(up));
    }
    o.header("skua_backend_available", "gauge", "1 when the backend slot is reachable (as skua_backend_up, by slot).");
    for (slot, up) in slots {
        o.sample("skua_backend_available", &[("slot", slot)], u8::from(up));
    }

    let opened = load(&m.connections_opened);
    let closed = load(&m.connections_closed);
    o.scalar("skua_connections_opened_total", "counter", "WebSocket connections accepted.", opened);
    o.scalar("skua_connections_closed_total", "counter", "WebSocket connections closed.", closed);
    o.scalar("skua_connections_open", "gauge", "WebSocket connections open now.", opened.saturating_sub(closed));
    o.scalar(
        "skua_auths_throttled_total",
        "counter",
        "auths delayed because their source address kept failing (auth_backoff_after).",
        load(&m.auths_throttled),
    );
    o.scalar(
        "skua_frames_rate_limited_total",
        "counter",
        "presence, subscription and query frames refused by their per-connection rate limit.",
        load(&m.frames_rate_limited),
    );
    o.scalar(
        "skua_restore_waits_total",
        "counter",
        "reconnects that waited for a node suspected dead to release a restore record (restore_wait).",
        load(&m.restore_waits),
    );
    o.scalar(
        "skua_connection_panics_total",
        "counter",
        "Connection tasks that panicked (each closed its connection 1011; a defect).",
        load(&m.connection_panics),
    );
    o.header("skua_connections", "gauge", "Authenticated connections open now, by project.");
    for (project, n) in st.connections_by_project() {
        o.sample("skua_connections", &[("project", project.as_str())], n);
    }
    o.scalar(
        "skua_max_connections",
        "gauge",
        "Connection slots of the node (max_connections): upgrades beyond get 503 with Retry-After.",
        st.config.max_connections,
    );
    o.scalar(
        "skua_connection_slots_used",
        "gauge",
        "Connection slots (max_connections) held by sockets, pending HTTP or upgraded.",
        st.slots_used(),
    );
    if let Some(n) = st.fd_budget {
        o.scalar(
            "skua_fd_budget",
            "gauge",
            "Connection slots the open-file limit leaves room for (soft limit less fd_reserve); upgrades beyond get 503.",
            n,
        );
    }
    if let Some(n) = crate::fds::open_count() {
        o.scalar("process_open_fds", "gauge", "Number of open file descriptors.", n);
    }
    if let Some(n) = crate::fds::soft_limit() {
        // Unlimited is exported as the largest integer a float holds exactly.
        let n = n.min(1 << 53);
        o.scalar("process_max_fds", "gauge", "Maximum number of open file descriptors.", n);
    }
    if let Some(n) = crate::process::resident_memory_bytes() {
        o.scalar("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", n);
    }
    o.family(
        "skua_front_refusals_total",
        "reason",
        "Sockets and requests refused or closed before a WebSocket existed, by reason.",
        &m.front_refusals.snapshot(),
    );
    o.family("skua_auths_total", "result", "auth replies, by result (ok or the failure string).", &m.auths.snapshot());
    o.family("skua_frames_in_total", "type", "Frames received from clients, by type.", &m.frames_in_by_type.snapshot());
    o.family("skua_frames_out_total", "type", "Frames queued for clients, by type.", &m.frames_out_by_type.snapshot());

    o.header("skua_publishes_total", "counter", "Client publishes, by result (ok or the error string sent back).");
    o.sample("skua_publishes_total", &[("result", "ok")], load(&m.publishes_accepted));
    o.sample("skua_publishes_total", &[("result", "duplicate")], load(&m.publishes_duplicate));
    for (reason, n) in m.publishes_refused_by_reason.snapshot() {
        o.sample("skua_publishes_total", &[("result", reason)], n);
    }
    o.scalar("skua_deliveries_total", "counter", "Message frames queued for local subscribers.", load(&m.deliveries));
    o.header("skua_drops_total", "counter", "Messages dropped, by reason.");
    o.sample("skua_drops_total", &[("reason", "undeliverable")], load(&m.undeliverable));
    o.sample("skua_drops_total", &[("reason", "slow_consumer")], load(&m.slow_consumer_drops));
    o.scalar(
        "skua_slow_consumer_disconnects_total",
        "counter",
        "Connections closed 4008 slow_consumer because their outbound queue overflowed.",
        load(&m.slow_consumer_closes),
    );
    o.family("skua_closes_total", "reason", "Connections closed, by close reason.", &m.closes.snapshot());
    o.scalar(
        "skua_retained_bytes",
        "gauge",
        "Bytes charged for the retained messages this node keeps account of (data, filter key, 128 per entry).",
        st.hub.retained_bytes() as u64,
    );
    o.family(
        "skua_retained_refused_total",
        "cap",
        "Retained publications refused at publish or not kept when received, by the cap they hit.",
        &m.retained_refused.snapshot(),
    );
    o.family(
        "skua_hydrations_total",
        "result",
        "Hydrations of new subscriptions (N43), by result: ok, gone, or why no frame was sent.",
        &m.hydrations.snapshot(),
    );
    o.scalar(
        "skua_history_not_kept_total",
        "counter",
        "Messages of history topics delivered but not kept: their project's history was at history_max_bytes_per_project.",
        load(&m.history_not_kept),
    );
    let mut replays = m.replays_by_kind.snapshot();
    replays.push(("group", load(&m.replays)));
    replays.sort_unstable();
    o.family("skua_replays_total", "kind", "Replays to subscribers, by kind.", &replays);
    o.scalar(
        "skua_replayed_messages_total",
        "counter",
        "Messages delivered by group replays.",
        load(&m.replayed_messages),
    );
    o.scalar(
        "skua_replay_shortfall_total",
        "counter",
        "Messages announced by replayStart but not replayed (pruned or taken by another member).",
        load(&m.replay_shortfall),
    );
    o.scalar(
        "skua_logged_appends_total",
        "counter",
        "Messages of logged topics written to the store.",
        load(&m.logged_appends),
    );
    if let Some(t) = &st.triggers {
        let (queue_bytes, overflow_bytes) = t.queued_bytes();
        o.scalar(
            "skua_trigger_queue_bytes",
            "gauge",
            "Bytes of trigger bodies queued or being delivered on this node (trigger_queue_bytes).",
            queue_bytes as u64,
        );
        o.scalar(
            "skua_trigger_overflow_bytes",
            "gauge",
            "Bytes of trigger bodies waiting to be written as dead letters (trigger_overflow_bytes).",
            overflow_bytes as u64,
        );
        let t = &t.metrics;
        o.family(
            "skua_trigger_budget_refusals_total",
            "budget",
            "Triggers a byte budget refused: queue (trigger_queue_bytes), project (trigger_queue_bytes_per_project), \
             overflow (trigger_overflow_bytes).",
            &[
                ("queue", load(&t.over_queue_bytes)),
                ("project", load(&t.over_project_bytes)),
                ("overflow", load(&t.over_overflow_bytes)),
            ],
        );
        o.family(
            "skua_triggers_total",
            "outcome",
            "Trigger webhooks by outcome: queued, delivered, dead_lettered (failed for good), overflowed (queue full, \
             dead-lettered), deferred (queue full, left in the outbox), lost (dropped: overflow queue full, or its dead letter not written), taken_over (claimed from the outbox), \
             no_target (outbox trigger whose webhook was removed), too_large (body beyond trigger_max_body_bytes: \
             dead-lettered with data omitted, not sent).",
            &[
                ("queued", load(&t.queued)),
                ("delivered", load(&t.delivered)),
                ("dead_lettered", load(&t.dead_lettered)),
                ("overflowed", load(&t.overflowed)),
                ("deferred", load(&t.deferred)),
                ("lost", load(&t.lost)),
                ("taken_over", load(&t.taken_over)),
                ("no_target", load(&t.no_target)),
                ("too_large", load(&t.too_large)),
            ],
        );
        o.scalar(
            "skua_trigger_attempts_failed_total",
            "counter",
            "Trigger delivery attempts that failed (each retry counts).",
            load(&t.attempts_failed),
        );
        o.scalar(
            "skua_webhook_dead_letters_dropped_total",
            "counter",
            "Dead letters dropped because their project had webhook_dead_letters_per_project or \
             webhook_dead_letter_bytes_per_project already.",
            load(&t.dead_letters_dropped),
        );
    }
    o.scalar(
        "skua_store_failures_total",
        "counter",
        "Publishes or subscribes refused because the store failed.",
        load(&m.store_failures),
    );
    o.scalar("skua_acks_total", "counter", "Acks that ended a pending logged message.", load(&m.acks));
    o.scalar(
        "skua_redeliveries_total",
        "counter",
        "Logged messages delivered again after their connection left without acking.",
        load(&m.redeliveries),
    );
    o.scalar(
        "skua_durable_overflows_total",
        "counter",
        "Catch-ups from the store after a connection's durable queue was full.",
        load(&m.durable_overflows),
    );
    o.scalar("skua_log_pruned_total", "counter", "Logged messages deleted by retention.", load(&m.log_pruned));
    // Summed over the authenticated connections at scrape time, so the delivery path pays
    // nothing for it (the queues of connections still authenticating hold a frame or two).
    let (frames, bytes) = st
        .connections
        .all()
        .iter()
        .fold((0usize, 0usize), |(f, b), (_, e)| (f + e.handle.queued_frames(), b + e.handle.queued_bytes()));
    o.scalar(
        "skua_outbound_queue_frames",
        "gauge",
        "Frames waiting in the authenticated connections' outbound queues.",
        frames,
    );
    o.scalar(
        "skua_outbound_queue_bytes",
        "gauge",
        "Bytes waiting in the authenticated connections' outbound queues.",
        bytes,
    );
    o.scalar(
        "skua_outbound_budget_bytes",
        "gauge",
        "The node-wide bound on queued outbound bytes (outbound_budget_bytes; 0: none).",
        st.outbound_budget.limit(),
    );
    o.scalar(
        "skua_outbound_budget_queued_bytes",
        "gauge",
        "Bytes queued in the outbound queues of connections that are not closing, as the budget counts them.",
        st.outbound_budget.queued(),
    );
    o.scalar(
        "skua_outbound_budget_closes_total",
        "counter",
        "Connections closed 4008 slow_consumer, largest queue first, because the node's queued bytes passed outbound_budget_bytes.",
        st.outbound_budget.closes(),
    );

    let name = "skua_backend_operation_duration_seconds";
    o.header(name, "histogram", "Latency of bus, store and presence operations, by slot and operation.");
    for ((slot, op), h) in m.backend_latency.snapshot() {
        let bucket = format!("{name}_bucket");
        for (le, n) in &h.buckets {
            o.sample(&bucket, &[("slot", slot), ("op", op), ("le", &le.to_string())], n);
        }
        o.sample(&bucket, &[("slot", slot), ("op", op), ("le", "+Inf")], h.count);
        o.sample(&format!("{name}_sum"), &[("slot", slot), ("op", op)], h.sum_s);
        o.sample(&format!("{name}_count"), &[("slot", slot), ("op", op)], h.count);
    }
    o.header(
        "skua_backend_errors_total",
        "counter",
        "Failed bus, store and presence operations, by slot and operation.",
    );
    for ((slot, op), n) in m.backend_errors.snapshot() {
        o.sample("skua_backend_errors_total", &[("slot", slot), ("op", op)], n);
    }
    if let Some(b) = st.store.append_batches() {
        let name = "skua_store_append_batch_messages";
        o.header(
            name,
            "histogram",
            "Logged messages per transaction (group commit) of the store's append writers; many small batches at a high publish rate mean the store's commits, not the publishers, set the pace.",
        );
        let bucket = format!("{name}_bucket");
        for (le, n) in &b.buckets {
            o.sample(&bucket, &[("le", &le.to_string())], n);
        }
        o.sample(&bucket, &[("le", "+Inf")], b.count);
        o.sample(&format!("{name}_sum"), &[], b.sum);
        o.sample(&format!("{name}_count"), &[], b.count);
    }
    for source in st.metrics_sources() {
        source.render(&mut o.0);
    }
    o.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        let mut s = String::new();
        escape_into(&mut s, "a\"b\\c\nd");
        assert_eq!(s, "a\\\"b\\\\c\\nd");
    }
}
