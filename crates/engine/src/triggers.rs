//! Trigger webhooks (docs/protocol.md N44, N45; docs/webhooks.md): after every accepted publish,
//! the node that accepted it posts the topic's trigger.
//!
//! - A **logged** topic's trigger is written to the store's outbox in the message's transaction
//!   ([`Triggers::lease_for`] gives the publish pipeline the lease to write), held by this node
//!   run ([`Triggers::owner`]) for `lease`. The run sends it from memory and removes it once
//!   delivered; before each attempt it renews the lease. A trigger whose lease ran out (its node
//!   died, or its queue was full) is taken over by whichever node's outbox scan claims it first,
//!   so an acknowledged logged publish's trigger is delivered at least once across crashes.
//! - Any other topic's trigger is best effort: it lives in this node's bounded queue only; one
//!   that does not fit goes to the bounded overflow queue, whose writer stores them as dead
//!   letters in batches (one store transaction per batch); one that does not fit that either is
//!   dropped and counted (`lost`). Neither logs a line per trigger: a WARN at most every
//!   [`LOG_EVERY`] with the count since the last one.
//! - Both queues are bounded in entries and in bytes of bodies ([`budget`]): the delivery queue
//!   by `queue_bytes` for the node and `queue_bytes_per_project` per project (a trigger holds
//!   its bytes until it is delivered or dead-lettered), the overflow queue by `overflow_bytes`.
//!   A trigger beyond a byte budget is treated as one beyond the entry count.
//! - A body is built only up to `max_body_bytes` ([`payload::body_bounded`]: a small
//!   MessagePack value can expand a lot as JSON). A trigger whose body would be longer is not
//!   sent: it goes through the overflow queue to a dead letter whose body has its `data`
//!   omitted ([`payload::omitted_body`]), counted as `too_large`; the publish still succeeds.
//!
//! Delivery: one task per node (the pump) takes triggers off the queue and drives their
//! deliveries, at most `in_flight` at once (including those waiting between attempts). It
//! starts them in batches: the first trigger to arrive opens a window of `batch_window`, and
//! every trigger queued by its end starts with it, so at a steady publish rate the node wakes up
//! once per window rather than once per trigger (one HTTP request per trigger still, N44; see
//! docs/benchmarks.md "Issue 14" for what that saves). Each trigger tries up to
//! `retry_delays.len() + 1` times, waiting `retry_delays[i]` after failed attempt `i + 1`. A
//! final failure is a dead letter in the store ([`skua_core::TriggerStore::dead_letter`]),
//! which operators list, retry (same `deliveryId`) and purge. Nothing on the publish path waits:
//! [`Triggers::accepted`], which the publish pipeline calls after its observers, only tries to queue.
//!
//! Each attempt is one [`Poster::post`] of [`Attempts::Once`] through the node's webhook seam
//! (the server gives `skua-webhooks`' sender: signing, the HTTP client): this module decides
//! what, where (the topic's trigger entry, N41), when and how often.

pub mod budget;
pub mod payload;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use skua_core::webhook::{Attempts, Post, PostFailure, Poster, WebhookKind, WebhookTarget};
use skua_core::{
    AppId, DeadLetterFilter, NewDeadLetter, OutboxLease, OutboxTrigger, ProjectId, Publication, Registry, RoomKey,
    SharedRegistry, Store, TopicAddress,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::now_unix_ms;
pub use crate::config::TriggerConfig;

/// The `kind` of trigger dead letters.
pub const KIND: &str = "trigger";

/// Dead letters of overflows written in one store transaction at most.
const OVERFLOW_BATCH: usize = 256;

/// The overload WARNs (overflows kept as dead letters, triggers dropped) log at most one line
/// this often, with the count since the previous line.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// A WARN at most every [`LOG_EVERY`], carrying how many events happened since the last one.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    /// Events not yet logged.
    pending: AtomicU64,
    /// Unix ms of the last line (0: none yet).
    last_ms: AtomicU64,
}

impl Throttle {
    /// Counts `n` events; `Some(count)` when a line is due now (the caller logs it).
    pub(crate) fn note(&self, n: u64) -> Option<u64> {
        self.pending.fetch_add(n, Ordering::Relaxed);
        let now = now_unix_ms();
        let last = self.last_ms.load(Ordering::Relaxed);
        if last != 0 && now < last.saturating_add(millis(LOG_EVERY)) {
            return None;
        }
        self.last_ms.compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed).ok()?;
        Some(self.pending.swap(0, Ordering::Relaxed))
    }
}

/// Dead letters an operator's retry posts at once.
const RETRIES_AT_ONCE: usize = 16;

/// Outbox triggers claimed per scan at most.
const MAX_CLAIM: u32 = 256;

/// Where a topic's triggers go.
#[derive(Debug, Clone)]
struct TriggerTarget {
    /// The URL.
    url: Arc<str>,
    /// How long one attempt may take (the entry's `timeoutMs`, or the default).
    timeout: Duration,
}

/// Trigger counters (`skua_webhook_triggers_total{outcome}` and friends on `/metrics`).
#[derive(Debug, Default)]
pub struct TriggerMetrics {
    /// Triggers queued for delivery (from publishes and from outbox scans).
    pub queued: AtomicU64,
    /// Triggers delivered (a 2xx answer).
    pub delivered: AtomicU64,
    /// Attempts that failed (each retry counts).
    pub attempts_failed: AtomicU64,
    /// Triggers that failed for good and became dead letters.
    pub dead_lettered: AtomicU64,
    /// Non-logged triggers that did not fit the queue (then dead-lettered in a batch, or lost).
    pub overflowed: AtomicU64,
    /// Logged triggers that did not fit the queue (left in the outbox for a later scan).
    pub deferred: AtomicU64,
    /// Triggers lost: a dead letter that could not be written, or an overflow beyond the
    /// dead-letter queue too.
    pub lost: AtomicU64,
    /// Dead letters dropped by the per-project cap.
    pub dead_letters_dropped: AtomicU64,
    /// Outbox triggers taken over from a node run whose lease ran out.
    pub taken_over: AtomicU64,
    /// Outbox triggers whose topic no longer has a trigger webhook (removed, not sent).
    pub no_target: AtomicU64,
    /// Triggers whose body would exceed `max_body_bytes` (dead-lettered with `data` omitted).
    pub too_large: AtomicU64,
    /// Triggers refused by the node's queue byte budget (`trigger_queue_bytes`).
    pub over_queue_bytes: AtomicU64,
    /// Triggers refused by their project's queue byte budget (`trigger_queue_bytes_per_project`).
    pub over_project_bytes: AtomicU64,
    /// Triggers refused by the overflow byte budget (`trigger_overflow_bytes`; then lost).
    pub over_overflow_bytes: AtomicU64,
}

/// One trigger to deliver.
#[derive(Debug)]
struct Job {
    delivery_id: String,
    topic: TopicAddress,
    url: Arc<str>,
    /// How long one attempt may take.
    timeout: Duration,
    body: Bytes,
    /// In the outbox (a logged topic's).
    logged: bool,
    /// Attempts made before (by an earlier owner).
    attempts: u32,
    /// Its body would exceed `max_body_bytes`: `body` is [`payload::omitted_body`], and it goes
    /// to a dead letter without being sent.
    too_large: bool,
    /// The bytes it holds of a queue's budget.
    charge: Option<budget::Charge>,
}

/// A node's trigger sender: the publish observer, the delivery tasks and the outbox scan.
pub struct Triggers {
    owner: String,
    registry: Arc<SharedRegistry>,
    store: Arc<dyn Store>,
    poster: Arc<dyn Poster>,
    config: TriggerConfig,
    queue: mpsc::Sender<Job>,
    overflow: mpsc::Sender<Job>,
    receivers: Mutex<Option<(mpsc::Receiver<Job>, mpsc::Receiver<Job>)>>,
    /// Bytes of bodies queued or being delivered.
    queue_bytes: Arc<budget::ByteBudget>,
    /// Bytes of bodies waiting in the overflow queue.
    overflow_bytes: Arc<budget::ByteBudget>,
    /// The dead letter's error of a trigger whose body was too large.
    too_large_error: String,
    /// WARNs of triggers whose body was too large.
    too_large_log: Throttle,
    /// WARNs of overflows kept as dead letters.
    overflow_log: Throttle,
    /// WARNs of dropped triggers (and of overflow batches the store refused).
    lost_log: Throttle,
    /// Counters.
    pub metrics: TriggerMetrics,
}

impl std::fmt::Debug for Triggers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Triggers").field("owner", &self.owner).finish_non_exhaustive()
    }
}

/// The outcome of retrying one dead letter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryOutcome {
    /// The delivery.
    pub delivery_id: String,
    /// `None`: delivered (and the record deleted); otherwise why it failed again (the record
    /// stays, with this error and one more attempt).
    pub error: Option<String>,
}

impl Triggers {
    /// A sender for node `node`, this run (a fresh owner id: a restarted node does not renew
    /// what its previous run held), posting through `poster`. Start its tasks with [`Self::run`].
    pub fn new(
        node: &skua_core::NodeId,
        registry: Arc<SharedRegistry>,
        store: Arc<dyn Store>,
        poster: Arc<dyn Poster>,
        config: TriggerConfig,
    ) -> Arc<Self> {
        let (queue, rx) = mpsc::channel(config.queue.max(1));
        let (overflow, orx) = mpsc::channel(config.overflow_queue.max(1));
        Arc::new(Self {
            owner: format!("{node}#{}", uuid::Uuid::new_v4().simple()),
            registry,
            store,
            poster,
            queue,
            overflow,
            receivers: Mutex::new(Some((rx, orx))),
            queue_bytes: budget::ByteBudget::new(config.queue_bytes, config.queue_bytes_per_project),
            overflow_bytes: budget::ByteBudget::new(config.overflow_bytes, config.overflow_bytes),
            too_large_error: format!(
                "the trigger body would exceed trigger_max_body_bytes ({} bytes); not sent, data omitted",
                config.max_body_bytes
            ),
            too_large_log: Throttle::default(),
            config,
            overflow_log: Throttle::default(),
            lost_log: Throttle::default(),
            metrics: TriggerMetrics::default(),
        })
    }

    /// This node run's owner id in the outbox.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Triggers waiting now: in the delivery queue, and in the overflow queue (to become dead
    /// letters).
    pub fn queued(&self) -> (usize, usize) {
        let waiting = |q: &mpsc::Sender<Job>| q.max_capacity().saturating_sub(q.capacity());
        (waiting(&self.queue), waiting(&self.overflow))
    }

    /// Bytes of bodies held now: queued or being delivered, and in the overflow queue.
    pub fn queued_bytes(&self) -> (usize, usize) {
        (self.queue_bytes.used(), self.overflow_bytes.used())
    }

    /// Bytes of bodies `project`'s triggers hold in the delivery queue (or in delivery) now.
    pub fn queued_bytes_of(&self, project: &ProjectId) -> usize {
        self.queue_bytes.used_by(project)
    }

    /// The outbox lease a logged message of `topic` is appended with, or `None` when the topic
    /// has no trigger webhook.
    pub fn lease_for(&self, registry: &Registry, topic: &TopicAddress) -> Option<OutboxLease<'_>> {
        target(registry, topic)?;
        let lease_until_ms = now_unix_ms().saturating_add(millis(self.config.lease));
        Some(OutboxLease { owner: &self.owner, lease_until_ms })
    }

    /// Starts the pump, the dead-letter writer of overflows and the outbox scan on
    /// `tasks`, until `stop`. With `expire_others` (a single node on a durable store: nobody
    /// else will send them), first ends every other owner's leases, so what an earlier run of
    /// this node left in the outbox is sent at once.
    pub fn run(self: &Arc<Self>, tasks: &TaskTracker, stop: CancellationToken, expire_others: bool) {
        let Some((rx, orx)) = self.receivers.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() else {
            return;
        };
        tasks.spawn(self.clone().pump(rx, stop.clone()));
        tasks.spawn(self.clone().write_overflows(orx, stop.clone()));
        tasks.spawn(self.clone().scan(stop, expire_others));
    }

    /// Takes triggers off the queue in batches (a window of `batch_window` from the first one)
    /// and drives their deliveries, at most `in_flight` at once, until `stop` (which abandons
    /// those in flight: a logged one stays in the outbox for the next run or another node).
    async fn pump(self: Arc<Self>, mut rx: mpsc::Receiver<Job>, stop: CancellationToken) {
        use futures_util::StreamExt as _;
        let this: &Self = &self;
        let in_flight = self.config.in_flight.max(1);
        let mut delivering = futures_util::stream::FuturesUnordered::new();
        let mut batch: Vec<Job> = Vec::new();
        let window = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(window);
        let mut open = false;
        loop {
            let room = in_flight.saturating_sub(delivering.len() + batch.len());
            tokio::select! {
                biased;
                () = stop.cancelled() => return,
                Some(()) = delivering.next(), if !delivering.is_empty() => {}
                () = &mut window, if open => {
                    open = false;
                    for job in batch.drain(..) {
                        delivering.push(this.deliver(job));
                    }
                }
                n = rx.recv_many(&mut batch, room), if room > 0 => {
                    if n == 0 {
                        return;
                    }
                    if !open {
                        open = true;
                        window.as_mut().reset(tokio::time::Instant::now() + self.config.batch_window);
                    }
                }
            }
        }
    }

    /// Delivers one trigger: attempts with waits between them, then a dead letter.
    async fn deliver(&self, job: Job) {
        let max_attempts = u32::try_from(self.config.retry_delays.len() + 1).unwrap_or(u32::MAX);
        let mut attempts = job.attempts;
        let mut last_error = String::from("no attempt made");
        while attempts < max_attempts {
            let wait = self.config.retry_delays.get(attempts as usize).copied().unwrap_or_default();
            if job.logged {
                let hold = job.timeout.min(self.config.attempt_timeout) + wait + self.config.lease;
                match self.store.renew_outbox(&job.delivery_id, &self.owner, now_unix_ms() + millis(hold)).await {
                    Ok(Some(n)) => attempts = n,
                    Ok(None) => {
                        // Another node run took it over, or it left the outbox: not ours to send.
                        tracing::debug!(delivery_id = %job.delivery_id, "Trigger no longer held by this node.");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "Renewing a trigger's outbox lease failed; sending anyway.");
                        attempts += 1;
                    }
                }
            } else {
                attempts += 1;
            }
            let registry = self.registry.load();
            let retry = attempts > 1;
            match self.post(&registry, &job.topic, &job.url, &job.delivery_id, job.body.clone(), retry).await {
                Ok(()) => {
                    self.metrics.delivered.fetch_add(1, Ordering::Relaxed);
                    if job.logged
                        && let Err(e) = self.store.finish_outbox(&job.delivery_id).await
                    {
                        // It stays in the outbox and is sent again once its lease runs out.
                        tracing::warn!(error = %e, "Removing a delivered trigger from the outbox failed.");
                    }
                    return;
                }
                Err(e) => {
                    self.metrics.attempts_failed.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(delivery_id = %job.delivery_id, attempt = attempts, error = %e.error, "Trigger attempt failed.");
                    last_error = e.error;
                    if !e.retryable {
                        break;
                    }
                }
            }
            if attempts < max_attempts {
                tokio::time::sleep(wait).await;
            }
        }
        self.dead_letter(&job, attempts, &last_error).await;
    }

    async fn dead_letter(&self, job: &Job, attempts: u32, error: &str) {
        let letter = NewDeadLetter {
            delivery_id: &job.delivery_id,
            project: job.topic.room.project.as_str(),
            kind: KIND,
            topic: &job.topic.log_key(),
            target: &job.url,
            body: &job.body,
            last_error: error,
            attempts,
            failed_at_ms: now_unix_ms(),
        };
        match self.store.dead_letter(&letter, self.config.dead_letter_cap()).await {
            Ok(dropped) => {
                self.metrics.dead_lettered.fetch_add(1, Ordering::Relaxed);
                self.metrics.dead_letters_dropped.fetch_add(dropped, Ordering::Relaxed);
                tracing::warn!(delivery_id = %job.delivery_id, attempts, error, "Trigger failed for good; kept as a dead letter.");
            }
            Err(e) => {
                // A logged trigger stays in the outbox and is tried again after its lease.
                self.metrics.lost.fetch_add(u64::from(!job.logged), Ordering::Relaxed);
                tracing::error!(error = %e, delivery_id = %job.delivery_id, "Writing a trigger's dead letter failed.");
            }
        }
    }

    /// Writes the overflow queue's triggers as dead letters, up to [`OVERFLOW_BATCH`] per store
    /// transaction (whatever is waiting when the previous batch is done). Writing one also
    /// takes it out of the outbox (a logged trigger whose body was too large).
    async fn write_overflows(self: Arc<Self>, mut rx: mpsc::Receiver<Job>, stop: CancellationToken) {
        const ERROR: &str = "the node's trigger queue was full";
        let this: &Self = &self;
        let mut jobs = Vec::with_capacity(OVERFLOW_BATCH);
        loop {
            jobs.clear();
            let n = tokio::select! {
                () = stop.cancelled() => return,
                n = rx.recv_many(&mut jobs, OVERFLOW_BATCH) => n,
            };
            if n == 0 {
                return;
            }
            let failed_at_ms = now_unix_ms();
            let topics: Vec<String> = jobs.iter().map(|j| j.topic.log_key()).collect();
            let letters: Vec<NewDeadLetter<'_>> = jobs
                .iter()
                .zip(&topics)
                .map(|(job, topic)| NewDeadLetter {
                    delivery_id: &job.delivery_id,
                    project: job.topic.room.project.as_str(),
                    kind: KIND,
                    topic,
                    target: &job.url,
                    body: &job.body,
                    last_error: if job.too_large { &this.too_large_error } else { ERROR },
                    attempts: 0,
                    failed_at_ms,
                })
                .collect();
            let count = n as u64;
            let full = jobs.iter().filter(|j| !j.too_large).count() as u64;
            match self.store.dead_letters(&letters, self.config.dead_letter_cap()).await {
                Ok(dropped) => {
                    self.metrics.dead_lettered.fetch_add(count, Ordering::Relaxed);
                    self.metrics.dead_letters_dropped.fetch_add(dropped, Ordering::Relaxed);
                    if full > 0
                        && let Some(since) = self.overflow_log.note(full)
                    {
                        tracing::warn!(
                            triggers = since,
                            "Trigger queue full: triggers of non-logged topics kept as dead letters (count since the last such line)."
                        );
                    }
                }
                Err(e) => {
                    // A logged one stays in the outbox and is tried again after its lease.
                    let lost = jobs.iter().filter(|j| !j.logged).count() as u64;
                    self.metrics.lost.fetch_add(lost, Ordering::Relaxed);
                    if let Some(since) = self.lost_log.note(count) {
                        tracing::error!(error = %e, triggers = since, "Writing overflowed triggers as dead letters failed; they were dropped (count since the last such line).");
                    }
                }
            }
        }
    }

    /// Queues `job`; a full queue (in entries, or in bytes for the node or for its project)
    /// defers a logged trigger to the outbox scan and turns any other into a dead letter.
    fn enqueue(&self, mut job: Job) {
        match self.queue_bytes.charge(&job.topic.room.project, job.body.len()) {
            Ok(charge) => {
                job.charge = Some(charge);
                match self.queue.try_send(job) {
                    Ok(()) => {
                        self.metrics.queued.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    Err(mpsc::error::TrySendError::Full(back)) => job = back,
                    Err(mpsc::error::TrySendError::Closed(_)) => return,
                }
                job.charge = None;
            }
            Err(budget::Over::Node) => {
                self.metrics.over_queue_bytes.fetch_add(1, Ordering::Relaxed);
            }
            Err(budget::Over::Project) => {
                self.metrics.over_project_bytes.fetch_add(1, Ordering::Relaxed);
            }
        }
        if job.logged {
            self.metrics.deferred.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.metrics.overflowed.fetch_add(1, Ordering::Relaxed);
        self.to_overflow(job);
    }

    /// Puts `job` on the overflow queue (to become a dead letter), or drops it (counted as
    /// `lost` unless the outbox still has it) when that is full in entries or in bytes.
    fn to_overflow(&self, mut job: Job) {
        match self.overflow_bytes.charge(&job.topic.room.project, job.body.len()) {
            Ok(charge) => {
                job.charge = Some(charge);
                match self.overflow.try_send(job) {
                    Ok(()) => return,
                    Err(mpsc::error::TrySendError::Full(back) | mpsc::error::TrySendError::Closed(back)) => job = back,
                }
            }
            Err(_) => {
                self.metrics.over_overflow_bytes.fetch_add(1, Ordering::Relaxed);
            }
        }
        if job.logged {
            return;
        }
        self.metrics.lost.fetch_add(1, Ordering::Relaxed);
        if let Some(since) = self.lost_log.note(1) {
            tracing::warn!(
                triggers = since,
                "Trigger queue and overflow queue full: triggers dropped (count since the last such line; skua_triggers_total{{outcome=\"lost\"}})."
            );
        }
    }

    /// A trigger whose body would exceed `max_body_bytes`: counted, logged (throttled) and
    /// sent to the overflow queue to become a dead letter with `data` omitted.
    fn too_large(&self, job: Job) {
        self.metrics.too_large.fetch_add(1, Ordering::Relaxed);
        if let Some(since) = self.too_large_log.note(1) {
            tracing::warn!(
                triggers = since,
                max_body_bytes = self.config.max_body_bytes,
                "Trigger bodies longer than trigger_max_body_bytes: not sent, kept as dead letters with data omitted (count since the last such line)."
            );
        }
        self.to_overflow(job);
    }

    /// Every `scan_interval`: claims outbox triggers whose lease ran out, as many as the queue
    /// has room for, and queues them.
    async fn scan(self: Arc<Self>, stop: CancellationToken, expire_others: bool) {
        if expire_others {
            match self.store.expire_outbox_leases(&self.owner).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(triggers = n, "Taking over the triggers an earlier run of this node left."),
                Err(e) => tracing::warn!(error = %e, "Ending an earlier run's trigger leases failed."),
            }
        }
        let mut tick = tokio::time::interval(self.config.scan_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            self.scan_once().await;
        }
    }

    /// One outbox scan; returns how many triggers it queued.
    pub async fn scan_once(&self) -> usize {
        let room = u32::try_from(self.queue.capacity()).unwrap_or(u32::MAX).min(MAX_CLAIM);
        if room == 0 {
            return 0;
        }
        let now = now_unix_ms();
        let until = now.saturating_add(millis(self.config.lease));
        let claimed = match self.store.claim_outbox(&self.owner, now, until, room).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "Claiming outbox triggers failed.");
                return 0;
            }
        };
        let registry = self.registry.load();
        let mut queued = 0;
        for t in claimed {
            self.metrics.taken_over.fetch_add(1, Ordering::Relaxed);
            let Some(job) = self.outbox_job(&registry, &t) else {
                self.metrics.no_target.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = self.store.finish_outbox(&t.msg_id).await {
                    tracing::warn!(error = %e, "Removing a trigger without webhook from the outbox failed.");
                }
                continue;
            };
            if job.too_large {
                self.too_large(job);
                continue;
            }
            self.enqueue(job);
            queued += 1;
        }
        queued
    }

    fn outbox_job(&self, registry: &Registry, t: &OutboxTrigger) -> Option<Job> {
        let topic = parse_topic_key(&t.topic)?;
        let target = target(registry, &topic)?;
        let facts = payload::TriggerFacts {
            delivery_id: &t.msg_id,
            topic: &topic,
            publisher: &t.publisher,
            timestamp_ms: t.timestamp_ms,
            filter: t.filter.as_deref(),
            msg_id: Some(&t.msg_id),
            data: &t.data,
        };
        let (body, too_large) = self.body(registry, &facts);
        Some(Job {
            delivery_id: t.msg_id.clone(),
            topic,
            url: target.url,
            timeout: target.timeout,
            body,
            logged: true,
            attempts: t.attempts,
            too_large,
            charge: None,
        })
    }

    /// The body of `facts`, or when it would exceed `max_body_bytes` its body with `data`
    /// omitted and `true`.
    fn body(&self, registry: &Registry, facts: &payload::TriggerFacts<'_>) -> (Bytes, bool) {
        match payload::body_bounded(registry, facts, self.config.max_body_bytes) {
            Ok(body) => (Bytes::from(body), false),
            Err(payload::TooLarge) => (Bytes::from(payload::omitted_body(registry, facts)), true),
        }
    }

    /// Retries the dead letters `filter` selects (at most `limit`), one attempt each (16 at
    /// once), answered in store order, with their stored body (same `deliveryId`) to their
    /// stored URL. A delivered one is deleted; one that fails again stays, with the new error
    /// and one more attempt.
    ///
    /// # Errors
    /// [`skua_core::StoreError`] when listing them failed.
    pub async fn retry_dead_letters(
        &self,
        filter: DeadLetterFilter<'_>,
        limit: u32,
    ) -> Result<Vec<RetryOutcome>, skua_core::StoreError> {
        use futures_util::StreamExt as _;
        let letters = self.store.list_dead_letters(filter, 0, limit).await?;
        // A few at once (each may take its whole timeout), answered in store order.
        let outcomes: Vec<Result<RetryOutcome, skua_core::StoreError>> =
            futures_util::stream::iter(letters).map(|d| self.retry_one(d)).buffered(RETRIES_AT_ONCE).collect().await;
        outcomes.into_iter().collect()
    }

    async fn retry_one(&self, d: skua_core::DeadLetter) -> Result<RetryOutcome, skua_core::StoreError> {
        let error = match parse_topic_key(&d.topic) {
            None => Some(format!("the topic key {:?} is not <project>/<app>/<room>/<topic>", d.topic)),
            Some(topic) => {
                let registry = self.registry.load();
                self.post(&registry, &topic, &d.target, &d.delivery_id, d.body.clone(), true)
                    .await
                    .err()
                    .map(|f| f.error)
            }
        };
        match &error {
            None => {
                self.metrics.delivered.fetch_add(1, Ordering::Relaxed);
                let ids = [d.delivery_id.clone()];
                let only = DeadLetterFilter { project: Some(&d.project), delivery_ids: &ids };
                self.store.delete_dead_letters(only).await?;
            }
            Some(e) => {
                self.metrics.attempts_failed.fetch_add(1, Ordering::Relaxed);
                let again = NewDeadLetter {
                    delivery_id: &d.delivery_id,
                    project: &d.project,
                    kind: &d.kind,
                    topic: &d.topic,
                    target: &d.target,
                    body: &d.body,
                    last_error: e,
                    attempts: d.attempts.saturating_add(1),
                    failed_at_ms: now_unix_ms(),
                };
                let dropped = self.store.dead_letter(&again, self.config.dead_letter_cap()).await?;
                self.metrics.dead_letters_dropped.fetch_add(dropped, Ordering::Relaxed);
            }
        }
        Ok(RetryOutcome { delivery_id: d.delivery_id, error })
    }

    /// One attempt: posts `body` (whose `deliveryId` is `delivery_id`) to `url` for `topic`,
    /// signed with its app's secret (N42) and with the headers and timeout of its trigger entry
    /// in `registry` (none when the configured URL is no longer `url`: a dead letter's retry
    /// after a change); `retry` when an earlier attempt of this delivery was made. `Ok` on a
    /// 2xx answer.
    async fn post(
        &self,
        registry: &Registry,
        topic: &TopicAddress,
        url: &str,
        delivery_id: &str,
        body: Bytes,
        retry: bool,
    ) -> Result<(), PostFailure> {
        let kind = WebhookKind::Trigger;
        // The app's secret, whether or not the entry is still the one the trigger was made for.
        let secret = registry
            .project(&topic.room.project)
            .and_then(|p| p.apps.iter().find(|a| a.id == topic.room.app))
            .and_then(|a| a.webhook_secret.as_ref());
        let unchanged = registry.webhook_target(topic, kind).map(|(t, _)| t).filter(|t| t.url == url);
        let stored;
        let target: &WebhookTarget = match unchanged {
            Some(t) => t,
            None => {
                stored = WebhookTarget { url: url.to_owned(), headers: Vec::new(), timeout_ms: None };
                &stored
            }
        };
        let post = Post { kind, target, secret, delivery_id, body };
        self.poster.post(post, Attempts::Once { retry }).await.map(drop)
    }

    /// The store (for listing and purging dead letters).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }
}

impl Triggers {
    /// The publish pipeline accepted `p` on this node: queues its trigger, if its topic has a
    /// trigger webhook. Never waits (like a [`PublishObserver`](crate::publish::PublishObserver)).
    pub fn accepted(self: &Arc<Self>, registry: &Registry, p: &Publication) {
        let Some(target) = target(registry, &p.topic) else { return };
        let delivery_id = p.msg_id.clone().unwrap_or_else(|| {
            let mut buf = uuid::Uuid::encode_buffer();
            uuid::Uuid::now_v7().hyphenated().encode_lower(&mut buf).to_owned()
        });
        let facts = payload::TriggerFacts {
            delivery_id: &delivery_id,
            topic: &p.topic,
            publisher: p.publisher.as_str(),
            timestamp_ms: p.timestamp_ms,
            filter: p.filter.as_deref(),
            msg_id: p.msg_id.as_deref(),
            data: &p.data,
        };
        let (body, too_large) = self.body(registry, &facts);
        let logged = p.msg_id.is_some();
        let (url, timeout) = (target.url, target.timeout);
        let job = Job {
            delivery_id,
            topic: p.topic.clone(),
            url,
            timeout,
            body,
            logged,
            attempts: 0,
            too_large,
            charge: None,
        };
        if too_large {
            self.too_large(job);
        } else {
            self.enqueue(job);
        }
    }
}

/// The trigger webhook of `topic` (its `onPublish` entry, else its app's `triggerWebhook`,
/// N41), or `None`. Called on the publish path: cheap.
fn target(registry: &Registry, topic: &TopicAddress) -> Option<TriggerTarget> {
    let kind = WebhookKind::Trigger;
    let (target, _) = registry.webhook_target(topic, kind)?;
    Some(TriggerTarget { url: Arc::from(target.url.as_str()), timeout: target.timeout(kind) })
}

/// `<project>/<app>/<room>/<topic>` (a log key) as an address.
pub fn parse_topic_key(key: &str) -> Option<TopicAddress> {
    let mut parts = key.splitn(4, '/');
    let project = ProjectId::parse(parts.next()?).ok()?;
    let app = AppId::parse(parts.next()?).ok()?;
    let room = parts.next()?;
    let topic = parts.next()?;
    Some(TopicAddress { room: RoomKey { project, app, room: Arc::from(room) }, topic: Arc::from(topic) })
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
