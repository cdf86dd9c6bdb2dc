//! Counters, gauges and latency histograms the node keeps; a door renders them (the edge at
//! `/metrics`). Label values come from fixed sets (frame types, error strings, close reasons,
//! backend operations) or are project ids; never topic, actor or connection ids.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use skua_protocol::ServerFrameKind;

/// Node-wide counters. Labels never carry topic, actor or connection ids.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Connections accepted (upgrades).
    pub connections_opened: AtomicU64,
    /// Connections closed.
    pub connections_closed: AtomicU64,
    /// Frames queued for clients.
    pub frames_out: AtomicU64,
    /// Frames received from clients.
    pub frames_in: AtomicU64,
    /// Publishes accepted.
    pub publishes_accepted: AtomicU64,
    /// Publishes refused (any error frame).
    pub publishes_refused: AtomicU64,
    /// Publishes answered as duplicates of an idempotency key, not published again (issue 19).
    pub publishes_duplicate: AtomicU64,
    /// Message frames delivered to local subscribers.
    pub deliveries: AtomicU64,
    /// Connections closed 4008 because their outbound queue overflowed.
    pub slow_consumer_closes: AtomicU64,
    /// Frames dropped for slow consumers: the one that overflowed a queue, those still queued
    /// then, and those refused while the 4008 close was under way.
    pub slow_consumer_drops: AtomicU64,
    /// Bus deliveries the hub could not route (no local subscription left).
    pub undeliverable: AtomicU64,
    /// Messages of logged topics written to the store.
    pub logged_appends: AtomicU64,
    /// Publishes or subscribes refused because the store failed.
    pub store_failures: AtomicU64,
    /// Acks that ended a pending message.
    pub acks: AtomicU64,
    /// Logged messages delivered again after their connection left without acking.
    pub redeliveries: AtomicU64,
    /// Catch-ups from the store after a connection's durable queue was full (live messages
    /// were left pending and delivered from the store, in order).
    pub durable_overflows: AtomicU64,
    /// Group replays run (N26).
    pub replays: AtomicU64,
    /// Messages delivered by group replays.
    pub replayed_messages: AtomicU64,
    /// Messages announced by `replayStart` but not replayed (pruned meanwhile, or taken by
    /// another member).
    pub replay_shortfall: AtomicU64,
    /// Logged messages deleted by retention.
    pub log_pruned: AtomicU64,
    /// `auth`s delayed because their source address kept failing (issue 12, item 6).
    pub auths_throttled: AtomicU64,
    /// Frames other than `publish` refused by their per-connection rate limit
    /// (`presence_rate_limit`, `subscribe_rate_limit`, `query_rate_limit`; issue 33).
    pub frames_rate_limited: AtomicU64,
    /// Messages of a history topic given an offset but not kept, because their project's
    /// history was at `history_max_bytes_per_project` (issue 33).
    pub history_not_kept: AtomicU64,
    /// `reconnect:true` auths that waited for a node suspected dead to release a restore
    /// record (`restore_wait`, issue 19).
    pub restore_waits: AtomicU64,
    /// Connection tasks (reader, writer or cleanup) that panicked; each closed its connection
    /// 1011. Anything but 0 is a defect to report.
    pub connection_panics: AtomicU64,
    /// Frames received, by client frame `type` (plus `heartbeat` and `invalid`).
    pub frames_in_by_type: Family,
    /// Frames queued for clients, by server frame `type` (plus `heartbeat`).
    pub frames_out_by_type: FrameTypes,
    /// `auth` replies, by result: `ok` or the auth failure string.
    pub auths: Family,
    /// Publishes refused, by the error string sent back.
    pub publishes_refused_by_reason: Family,
    /// Connections closed, by close reason (`peer_gone` when the client went first).
    pub closes: Family,
    /// Retained publications refused (at publish) or not kept (received), by cap:
    /// `topic_keys`, `topic_bytes`, `node_bytes`.
    pub retained_refused: Family,
    /// Replays, by kind: `retained` (a retained message replayed to a new subscription) and
    /// `restored_subscription` (a subscription restored by `reconnect:true`).
    pub replays_by_kind: Family,
    /// Latency of bus, store and presence operations, by (slot, operation).
    pub backend_latency: HistogramFamily,
    /// Failed bus, store and presence operations, by (slot, operation).
    pub backend_errors: PairFamily,
    /// Hydrations of new subscriptions (N43), by result: `ok`, `gone` (the subscription or
    /// connection ended first), or why no frame was sent (`timeout`, `status`, `transport`,
    /// `refused`, `too_large`, `not_json`, `shutdown`).
    pub hydrations: Family,
    /// Sockets and requests refused or closed at the front door, by reason
    /// (the edge's `front::reason`, `ip_connections`, `ip_rate`).
    pub front_refusals: Family,
}

impl Metrics {
    /// Counts a refused publish, by the error string sent back.
    pub fn publish_refused(&self, reason: &'static str) {
        self.publishes_refused.fetch_add(1, Ordering::Relaxed);
        self.publishes_refused_by_reason.inc(reason);
    }
}

/// A source of further series (e.g. the webhook engine's), rendered by the edge's `prom` after
/// the edge's own on every scrape.
pub trait MetricsSource: Send + Sync + 'static {
    /// Appends complete `# HELP` / `# TYPE` / sample lines to `out`.
    fn render(&self, out: &mut String);
}

/// A counter per label value, for label values from a small fixed set.
#[derive(Debug, Default)]
pub struct Family {
    // RwLock: a new label value takes the write lock once; every later count is a read lock
    // and an atomic add. Never held across an await.
    values: RwLock<BTreeMap<&'static str, AtomicU64>>,
}

impl Family {
    /// Adds one to `label`'s counter.
    pub fn inc(&self, label: &'static str) {
        self.add(label, 1);
    }

    /// Adds `n` to `label`'s counter.
    pub fn add(&self, label: &'static str, n: u64) {
        if let Some(c) = self.values.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(label) {
            c.fetch_add(n, Ordering::Relaxed);
            return;
        }
        let mut w = self.values.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        w.entry(label).or_default().fetch_add(n, Ordering::Relaxed);
    }

    /// The counter of `label` (0 when never counted).
    pub fn get(&self, label: &str) -> u64 {
        let r = self.values.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        r.get(label).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Every (label, count), in label order.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let r = self.values.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        r.iter().map(|(k, v)| (*k, v.load(Ordering::Relaxed))).collect()
    }
}

/// A counter per pair of label values (slot, operation).
#[derive(Debug, Default)]
pub struct PairFamily {
    // As in `Family`.
    values: RwLock<BTreeMap<(&'static str, &'static str), AtomicU64>>,
}

impl PairFamily {
    /// Adds one to the counter of `(a, b)`.
    pub fn inc(&self, a: &'static str, b: &'static str) {
        if let Some(c) = self.values.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(&(a, b)) {
            c.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut w = self.values.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        w.entry((a, b)).or_default().fetch_add(1, Ordering::Relaxed);
    }

    /// Every ((a, b), count), in label order.
    pub fn snapshot(&self) -> Vec<((&'static str, &'static str), u64)> {
        let r = self.values.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        r.iter().map(|(k, v)| (*k, v.load(Ordering::Relaxed))).collect()
    }
}

/// Upper bounds (seconds) of the latency histograms' buckets; `+Inf` is implied.
pub const LATENCY_BUCKETS_S: [f64; 14] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// A latency histogram with the [`LATENCY_BUCKETS_S`] buckets.
#[derive(Debug, Default)]
pub struct Histogram {
    // Non-cumulative counts per bucket; the last one is +Inf.
    buckets: [AtomicU64; LATENCY_BUCKETS_S.len() + 1],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

/// A histogram's cumulative view, as Prometheus exposes it.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// (upper bound in seconds, observations at or below it), ascending; `+Inf` excluded.
    pub buckets: Vec<(f64, u64)>,
    /// Every observation.
    pub count: u64,
    /// Sum of the observations, in seconds.
    pub sum_s: f64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = LATENCY_BUCKETS_S.iter().position(|b| s <= *b).unwrap_or(LATENCY_BUCKETS_S.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// The cumulative counts.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let buckets = skua_core::histogram::cumulative(&LATENCY_BUCKETS_S, &self.buckets);
        #[allow(clippy::cast_precision_loss)] // nanosecond sums far below 2^52 s are exact enough
        let sum_s = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        HistogramSnapshot { buckets, count: self.count.load(Ordering::Relaxed), sum_s }
    }
}

/// A latency histogram per (slot, operation).
#[derive(Debug, Default)]
pub struct HistogramFamily {
    // As in `Family`.
    values: RwLock<BTreeMap<(&'static str, &'static str), Arc<Histogram>>>,
}

impl HistogramFamily {
    /// Records one observation of operation `op` of `slot`.
    pub fn observe(&self, slot: &'static str, op: &'static str, d: Duration) {
        if let Some(h) = self.values.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(&(slot, op)) {
            h.observe(d);
            return;
        }
        self.get(slot, op).observe(d);
    }

    /// The histogram of operation `op` of `slot`, created (empty) if missing: for a caller that
    /// observes it often, without the family's lock and look-up each time.
    pub fn get(&self, slot: &'static str, op: &'static str) -> Arc<Histogram> {
        let mut w = self.values.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        w.entry((slot, op)).or_default().clone()
    }

    /// Every ((slot, op), histogram), in label order.
    pub fn snapshot(&self) -> Vec<((&'static str, &'static str), HistogramSnapshot)> {
        let r = self.values.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        r.iter().map(|(k, h)| (*k, h.snapshot())).collect()
    }
}

/// A counter per server frame kind, plus heartbeats: a fixed array indexed by
/// [`ServerFrameKind::index`], no lock, no map and no parsing on the delivery path.
#[derive(Debug, Default)]
pub struct FrameTypes {
    counts: [AtomicU64; ServerFrameKind::ALL.len()],
    heartbeats: AtomicU64,
}

/// The label of heartbeats (empty frames) in [`FrameTypes`].
const HEARTBEAT: &str = "heartbeat";

impl FrameTypes {
    /// Counts one frame of `kind`.
    pub fn inc(&self, kind: ServerFrameKind) {
        self.add(kind, 1);
    }

    /// Counts `n` frames of `kind` (the hub counts a whole fan-out at once).
    pub fn add(&self, kind: ServerFrameKind, n: u64) {
        self.counts[kind.index()].fetch_add(n, Ordering::Relaxed);
    }

    /// Counts one heartbeat.
    pub fn inc_heartbeat(&self) {
        self.heartbeats.fetch_add(1, Ordering::Relaxed);
    }

    /// The counter of `label` (0 when never counted or unknown).
    pub fn get(&self, label: &str) -> u64 {
        if label == HEARTBEAT {
            return self.heartbeats.load(Ordering::Relaxed);
        }
        ServerFrameKind::ALL
            .iter()
            .find(|k| k.as_str() == label)
            .map_or(0, |k| self.counts[k.index()].load(Ordering::Relaxed))
    }

    /// Every (label, count) counted at least once, in label order.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let mut out: Vec<(&'static str, u64)> = ServerFrameKind::ALL
            .iter()
            .map(|k| (k.as_str(), self.counts[k.index()].load(Ordering::Relaxed)))
            .chain(std::iter::once((HEARTBEAT, self.heartbeats.load(Ordering::Relaxed))))
            .filter(|(_, n)| *n > 0)
            .collect();
        out.sort_unstable_by_key(|(t, _)| *t);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skua_protocol::ServerFrame;

    #[test]
    fn frames_are_counted_by_kind_and_heartbeats_apart() {
        let t = FrameTypes::default();
        for f in [
            ServerFrame::AuthFailed { error: "access_denied" },
            ServerFrame::Subscribed { topic: "a/b/c", load_balance: false },
            ServerFrame::ReplayEnd { replayed: 3 },
        ] {
            t.inc(f.kind());
        }
        t.add(ServerFrameKind::Message, 5);
        t.inc_heartbeat();
        assert_eq!(
            t.snapshot(),
            vec![("auth", 1), ("heartbeat", 1), ("message", 5), ("replayEnd", 1), ("subscribed", 1)]
        );
        assert_eq!((t.get("message"), t.get("error"), t.get("nope")), (5, 0, 0));
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(50));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(10));
        let s = h.snapshot();
        assert_eq!(s.count, 3);
        assert_eq!(s.buckets[0], (0.0001, 1));
        assert_eq!(s.buckets.iter().find(|(b, _)| *b == 0.005).map(|b| b.1), Some(2));
        assert_eq!(s.buckets.last().map(|b| b.1), Some(2), "10 s is only in +Inf");
        assert!((s.sum_s - 10.00305).abs() < 1e-9);
    }

    #[test]
    fn families_count_per_label() {
        let f = Family::default();
        f.inc("ok");
        f.add("ok", 2);
        f.inc("access_denied");
        assert_eq!(f.get("ok"), 3);
        assert_eq!(f.snapshot(), vec![("access_denied", 1), ("ok", 3)]);
    }
}
