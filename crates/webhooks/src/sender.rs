//! [`WebhookSender`]: the node's pooled HTTP clients for webhooks (one per kind, each with its
//! address rule), the per-target concurrency limit, retries, and the bounded fire-and-forget
//! queue.
//!
//! Two ways to send:
//! - [`WebhookSender::call`]: the caller waits for the outcome (hydration): attempts on the
//!   request's retry schedule, all within one overall budget (the target's timeout).
//! - [`WebhookSender::enqueue`]: the request goes on the node's bounded queue (triggers): a
//!   dispatcher delivers it on its schedule, each attempt with the target's timeout, and hands
//!   the final [`DeliveryReport`] to the request's [`OnDone`]. A full queue refuses at once
//!   ([`QueueFull`] gives the request back) and nothing blocks the caller.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::header::HeaderValue;
use skua_core::webhook::{WebhookKind, WebhookSecret, WebhookTarget};
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument as _;

use crate::client::{Client, IDLE_TIMEOUT, TransportError};
use crate::metrics::{Outcome, WebhookMetrics};
use crate::request::{SIGNATURE_LEN, WebhookRequest, sign_bytes};
use crate::rule::AddressRule;

/// The engine's settings, checked from [`WebhookSettings`](crate::WebhookSettings) (declared
/// there with their defaults; `Default` gives the same values, a server test checks it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    /// Fire-and-forget requests waiting for delivery on this node; when full, `enqueue`
    /// refuses (the caller dead-letters or counts it).
    pub queue: usize,
    /// Queued requests being delivered at once, including those waiting for a retry.
    pub max_pending: usize,
    /// Requests in flight at once to one target (scheme, host and port).
    pub concurrency_per_target: usize,
    /// Most bytes of an answer read; a longer answer fails `TooLarge` and is not read further.
    pub max_response_bytes: usize,
    /// Connection establishment timeout (within the call's own timeout).
    pub connect_timeout: Duration,
    /// Allow link-local and cloud-metadata addresses (169.254.0.0/16, fe80::/10, …).
    pub allow_link_local: bool,
    /// When not empty, only these hosts (`name`, `*.parent`, an address) are called.
    pub allowed_hosts: Vec<String>,
    /// Allow hydration webhooks on loopback addresses (127.0.0.0/8, ::1, `localhost`): a
    /// hydration answer reaches clients, so a loopback service could be read through it.
    pub allow_loopback: bool,
    /// The exceptions to the rule of wake URLs (a client's): exact host names, addresses and
    /// CIDR ranges whose internal addresses (loopback, private, …) may be called.
    pub wake_allowed_hosts: Vec<String>,
    /// The retry schedule of queued trigger requests.
    pub trigger_retry: RetrySchedule,
    /// Deliveries whose outcome the node keeps for the admin dashboard (the last ones).
    pub recent_deliveries: usize,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            queue: 10_000,
            max_pending: 1024,
            concurrency_per_target: 16,
            max_response_bytes: 1 << 20,
            connect_timeout: Duration::from_secs(5),
            allow_link_local: false,
            allowed_hosts: Vec::new(),
            allow_loopback: false,
            wake_allowed_hosts: Vec::new(),
            trigger_retry: RetrySchedule::trigger(),
            recent_deliveries: 100,
        }
    }
}

/// Delays between attempts; attempts = delays + 1. Only 5xx answers, timeouts and transport
/// errors are retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrySchedule {
    /// The wait before attempt 2, 3, …
    pub delays: Vec<Duration>,
}

impl RetrySchedule {
    /// Hydration (N43): 3 attempts, 1 s then 2 s apart (within the call's timeout).
    pub fn hydration() -> Self {
        Self { delays: vec![Duration::from_secs(1), Duration::from_secs(2)] }
    }

    /// Triggers (N44): 5 attempts over about a minute: 4 s, 8 s, 16 s, 32 s apart
    /// ([`skua_core::webhook::trigger_retry_delays`], the defaults' one source).
    pub fn trigger() -> Self {
        Self { delays: skua_core::webhook::trigger_retry_delays() }
    }

    /// `attempts` attempts, the first delay `first`, each next one doubled.
    pub fn exponential(attempts: u32, first: Duration) -> Self {
        Self { delays: skua_core::webhook::exponential_delays(attempts, first) }
    }

    /// How many attempts at most.
    pub fn attempts(&self) -> usize {
        self.delays.len() + 1
    }
}

/// A 2xx answer.
#[derive(Debug, Clone)]
pub struct WebhookResponse {
    /// Status code.
    pub status: u16,
    /// The body, at most `max_response_bytes`.
    pub body: Bytes,
    /// Whether `Content-Type` says JSON (`application/json` or `+json`).
    pub json_content_type: bool,
}

/// Why a delivery failed (after its last attempt).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeliveryError {
    /// The URL's address is refused (link-local or metadata, not allow-listed, unparsable).
    #[error("refused: {reason}")]
    Refused {
        /// Why.
        reason: String,
    },
    /// No complete answer within the timeout.
    #[error("timed out after {after:?}")]
    Timeout {
        /// The timeout.
        after: Duration,
    },
    /// A non-2xx answer.
    #[error("answered HTTP {status}")]
    Status {
        /// The status code.
        status: u16,
    },
    /// Connection or protocol failure.
    #[error("transport error")]
    Transport(#[source] TransportError),
    /// The answer was longer than `max_response_bytes`.
    #[error("answer longer than {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// The node is stopping.
    #[error("the node is shutting down")]
    Shutdown,
}

impl DeliveryError {
    /// Whether another attempt may succeed: 5xx, timeouts and transport errors.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Status { status } => *status >= 500,
            Self::Timeout { .. } | Self::Transport(_) => true,
            Self::Refused { .. } | Self::TooLarge { .. } | Self::Shutdown => false,
        }
    }

    /// The metric outcome.
    pub fn outcome(&self) -> Outcome {
        match self {
            Self::Refused { .. } => Outcome::Refused,
            Self::Timeout { .. } => Outcome::Timeout,
            Self::Status { .. } => Outcome::Status,
            Self::Transport(_) => Outcome::Transport,
            Self::TooLarge { .. } => Outcome::TooLarge,
            Self::Shutdown => Outcome::Shutdown,
        }
    }
}

/// The end of a queued delivery.
#[derive(Debug)]
pub struct DeliveryReport {
    /// The request (its `deliveryId` and body unchanged, ready for a dead letter).
    pub request: WebhookRequest,
    /// How it ended.
    pub result: Result<WebhookResponse, DeliveryError>,
    /// Attempts made.
    pub attempts: u32,
}

/// What a queued request's owner runs with its final report (on the delivery task: keep it
/// short, e.g. send on a channel).
pub type OnDone = Box<dyn FnOnce(DeliveryReport) + Send + 'static>;

/// The queue was full; the request is given back.
#[derive(Debug, thiserror::Error)]
#[error("the webhook queue is full")]
pub struct QueueFull(pub Box<WebhookRequest>);

struct Job {
    request: WebhookRequest,
    schedule: RetrySchedule,
    on_done: Option<OnDone>,
}

struct Inner {
    /// One client per kind ([`WebhookKind::ALL`] order): each has its own address rule, pool
    /// and routes, so a URL allowed for one kind is never reached through another's.
    clients: [Client; 3],
    config: WebhookConfig,
    metrics: Arc<WebhookMetrics>,
    queue: mpsc::Sender<Job>,
    recent: crate::recent::RecentDeliveries,
}

/// The node's webhook sender; cheap to clone.
#[derive(Clone)]
pub struct WebhookSender {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for WebhookSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookSender").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

/// Why the sender could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the webhook HTTP client")]
pub struct BuildError(#[source] crate::client::ClientError);

impl WebhookSender {
    /// A sender whose queue dispatcher and deliveries run on `tracker` and stop with `shutdown`
    /// (queued requests then end [`DeliveryError::Shutdown`]). Installs ring as the process's
    /// rustls provider if none is (idempotent).
    ///
    /// # Errors
    /// [`BuildError`] when the HTTP client cannot be built.
    pub fn new(config: WebhookConfig, tracker: &TaskTracker, shutdown: CancellationToken) -> Result<Self, BuildError> {
        // Err means a provider is installed already, which is what we want.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let wake = skua_core::webhook::InternalAllowList::parse(&config.wake_allowed_hosts)
            .map_err(|e| BuildError(crate::client::ClientError(format!("wake_allowed_hosts: {e}"))))?;
        let hydration = if config.allow_loopback { AddressRule::Open } else { AddressRule::NoLoopback };
        let clients = [
            Client::new(&config, hydration).map_err(BuildError)?,
            Client::new(&config, AddressRule::Open).map_err(BuildError)?,
            Client::new(&config, AddressRule::NoInternal(wake)).map_err(BuildError)?,
        ];
        let (tx, rx) = mpsc::channel(config.queue.max(1));
        let recent = crate::recent::RecentDeliveries::new(config.recent_deliveries);
        let inner =
            Arc::new(Inner { clients, config, metrics: Arc::new(WebhookMetrics::default()), queue: tx, recent });
        let sender = Self { inner };
        tracker.spawn(sender.clone().sweep(shutdown.clone()));
        tracker.spawn(sender.clone().dispatch(rx, tracker.clone(), shutdown));
        Ok(sender)
    }

    /// The engine's counters.
    pub fn metrics(&self) -> &Arc<WebhookMetrics> {
        &self.inner.metrics
    }

    /// The last `recent_deliveries` deliveries' outcomes, newest first.
    pub fn recent(&self) -> Vec<crate::recent::RecentDelivery> {
        self.inner.recent.list()
    }

    /// The settings.
    pub fn config(&self) -> &WebhookConfig {
        &self.inner.config
    }

    /// Sends `request` now and waits for the answer: attempts on `schedule` (normally
    /// [`RetrySchedule::hydration`]) within `budget` overall, each attempt bounded by what is
    /// left of it. Counted under the request's kind.
    ///
    /// # Errors
    /// The last attempt's [`DeliveryError`].
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future abandons the request.
    pub async fn call(
        &self,
        request: &WebhookRequest,
        schedule: &RetrySchedule,
        budget: Duration,
    ) -> Result<WebhookResponse, DeliveryError> {
        let span = delivery_span(request);
        async {
            let started = Instant::now();
            let deadline = started + budget;
            let (result, _) = self.deliver(request, schedule, Some(deadline)).await;
            self.finish(request.call.kind, &request.call.target.url, started, &result);
            result
        }
        .instrument(span)
        .await
    }

    /// One attempt on the caller's task, for a caller that runs its own retries (triggers):
    /// `body` (whose `deliveryId` is `delivery_id`) posted to `target` with its headers and its
    /// timeout for `kind`, signed with `secret` (N42), counted as one attempt (a retry when
    /// `retry`: an earlier attempt of this delivery was made) and one delivery of `kind`. Unlike [`Self::call`] it builds no
    /// [`WebhookRequest`] and opens a `webhook` span only when traces are exported
    /// ([`skua_core::trace::enabled`]): it runs once per publish on a topic with a trigger.
    ///
    /// # Errors
    /// The attempt's [`DeliveryError`].
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future abandons the request.
    pub async fn post_once(
        &self,
        kind: WebhookKind,
        target: &WebhookTarget,
        secret: Option<&WebhookSecret>,
        delivery_id: &str,
        body: Bytes,
        retry: bool,
    ) -> Result<WebhookResponse, DeliveryError> {
        let attempt = async {
            let (timeout, started) = (target.timeout(kind), Instant::now());
            self.inner.metrics.attempt(kind, retry);
            let result = match tokio::time::timeout(timeout, self.post_signed(kind, target, secret, body)).await {
                Ok(r) => r,
                Err(_) => Err(DeliveryError::Timeout { after: timeout }),
            };
            self.finish(kind, &target.url, started, &result);
            result
        };
        if skua_core::trace::enabled() {
            attempt.instrument(tracing::info_span!("webhook", kind = kind.as_str(), delivery_id)).await
        } else {
            attempt.await
        }
    }

    async fn post_signed(
        &self,
        kind: WebhookKind,
        target: &WebhookTarget,
        secret: Option<&WebhookSecret>,
        body: Bytes,
    ) -> Result<WebhookResponse, DeliveryError> {
        let signature = secret.map(|s| signature_value(&sign_bytes(s.expose(), &body)));
        let headers = crate::client::headers(&target.headers, signature, signature_v2(secret, &body))?;
        self.client(kind).post(&target.url, headers, body, self.inner.config.max_response_bytes).await
    }

    /// The client of `kind`.
    fn client(&self, kind: WebhookKind) -> &Client {
        match kind {
            WebhookKind::Hydration => &self.inner.clients[0],
            WebhookKind::Trigger => &self.inner.clients[1],
            WebhookKind::Wake => &self.inner.clients[2],
        }
    }

    /// Puts `request` on the node's queue, delivered on `schedule` (normally
    /// `config().trigger_retry`), each attempt with the target's timeout; `on_done` gets the
    /// final report.
    ///
    /// # Errors
    /// [`QueueFull`] (with the request) when the queue is full or the node is stopping; the
    /// caller decides (N45: dead letter).
    pub fn enqueue(
        &self,
        request: WebhookRequest,
        schedule: RetrySchedule,
        on_done: Option<OnDone>,
    ) -> Result<(), QueueFull> {
        let kind = request.call.kind;
        match self.inner.queue.try_send(Job { request, schedule, on_done }) {
            Ok(()) => {
                self.inner.metrics.queue_pushed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok(())
            }
            Err(mpsc::error::TrySendError::Full(job) | mpsc::error::TrySendError::Closed(job)) => {
                self.inner.metrics.delivered(kind, Outcome::QueueFull);
                self.remember(kind, &job.request.call.target.url, Instant::now(), Outcome::QueueFull, None);
                Err(QueueFull(Box::new(job.request)))
            }
        }
    }

    /// Closes kept connections unused for their idle timeout, every third of it.
    async fn sweep(self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval_at(Instant::now() + IDLE_TIMEOUT / 3, IDLE_TIMEOUT / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => self.inner.clients.iter().for_each(Client::sweep),
            }
        }
    }

    /// Takes jobs off the queue while fewer than `max_pending` are being delivered.
    async fn dispatch(self, mut rx: mpsc::Receiver<Job>, tracker: TaskTracker, shutdown: CancellationToken) {
        let pending = Arc::new(Semaphore::new(self.inner.config.max_pending.max(1)));
        loop {
            let permit = tokio::select! {
                () = shutdown.cancelled() => break,
                p = pending.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            };
            let job = tokio::select! {
                () = shutdown.cancelled() => break,
                j = rx.recv() => match j { Some(j) => j, None => break },
            };
            self.inner.metrics.queue_popped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let this = self.clone();
            let stop = shutdown.clone();
            let span = delivery_span(&job.request);
            tracker.spawn(
                async move {
                    let _permit = permit;
                    let started = Instant::now();
                    let (result, attempts) = tokio::select! {
                        r = this.deliver(&job.request, &job.schedule, None) => r,
                        () = stop.cancelled() => (Err(DeliveryError::Shutdown), 0),
                    };
                    this.finish(job.request.call.kind, &job.request.call.target.url, started, &result);
                    if let Some(done) = job.on_done {
                        done(DeliveryReport { request: job.request, result, attempts });
                    }
                }
                .instrument(span),
            );
        }
        // Whatever is still queued ends `Shutdown`, so its owner can keep or dead-letter it.
        rx.close();
        while let Ok(job) = rx.try_recv() {
            self.inner.metrics.queue_popped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let result = Err(DeliveryError::Shutdown);
            self.finish(job.request.call.kind, &job.request.call.target.url, Instant::now(), &result);
            if let Some(done) = job.on_done {
                done(DeliveryReport { request: job.request, result, attempts: 0 });
            }
        }
    }

    /// Counts a delivery's outcome and keeps it among the recent ones.
    fn finish(&self, kind: WebhookKind, url: &str, started: Instant, result: &Result<WebhookResponse, DeliveryError>) {
        let (outcome, status) = match result {
            Ok(r) => (Outcome::Ok, Some(r.status)),
            Err(DeliveryError::Status { status }) => (Outcome::Status, Some(*status)),
            Err(e) => (e.outcome(), None),
        };
        self.inner.metrics.delivered(kind, outcome);
        self.remember(kind, url, started, outcome, status);
        match result {
            Ok(r) => tracing::debug!(status = r.status, bytes = r.body.len(), "Webhook delivered."),
            Err(e) => tracing::debug!(error = e as &dyn std::error::Error, "Webhook failed."),
        }
    }

    /// Keeps a delivery among the recent ones (its host only: a URL may carry a secret).
    fn remember(&self, kind: WebhookKind, url: &str, started: Instant, outcome: Outcome, status: Option<u16>) {
        let at_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let latency = started.elapsed();
        self.inner.recent.record_at(url, |host| crate::recent::RecentDelivery {
            kind,
            host,
            outcome,
            status,
            latency,
            at_unix_ms,
        });
    }

    /// Attempts on `schedule`; with a `deadline`, every attempt and wait fits before it.
    async fn deliver(
        &self,
        request: &WebhookRequest,
        schedule: &RetrySchedule,
        deadline: Option<Instant>,
    ) -> (Result<WebhookResponse, DeliveryError>, u32) {
        let per_attempt = request.call.target.timeout(request.call.kind);
        let mut attempt = 0u32;
        loop {
            let timeout =
                deadline.map_or(per_attempt, |d| d.saturating_duration_since(Instant::now()).min(per_attempt));
            self.inner.metrics.attempt(request.call.kind, attempt > 0);
            let result = match tokio::time::timeout(timeout, self.attempt(request)).await {
                Ok(r) => r,
                Err(_) => Err(DeliveryError::Timeout { after: timeout }),
            };
            attempt += 1;
            let err = match result {
                Ok(r) => return (Ok(r), attempt),
                Err(e) => e,
            };
            let Some(delay) = schedule.delays.get(attempt as usize - 1).copied().filter(|_| err.is_retryable()) else {
                return (Err(err), attempt);
            };
            if deadline.is_some_and(|d| Instant::now() + delay >= d) {
                return (Err(err), attempt);
            }
            tracing::debug!(
                attempt,
                error = &err as &dyn std::error::Error,
                ?delay,
                "Webhook attempt failed; retrying."
            );
            tokio::time::sleep(delay).await;
        }
    }

    /// One HTTP request (the client applies the address rules, the per-target limit, no
    /// redirects, no proxy, and the bound on the answer).
    async fn attempt(&self, request: &WebhookRequest) -> Result<WebhookResponse, DeliveryError> {
        let target = &request.call.target;
        let signature = match request.signature.as_deref() {
            Some(s) => Some(
                HeaderValue::from_str(s)
                    .map_err(|_| DeliveryError::Refused { reason: "the signature is not a valid header".into() })?,
            ),
            None => None,
        };
        let v2 = signature_v2(request.call.secret.as_ref(), &request.body);
        let headers = crate::client::headers(&target.headers, signature, v2)?;
        let limit = self.inner.config.max_response_bytes;
        self.client(request.call.kind).post(&target.url, headers, request.body.clone(), limit).await
    }
}

/// The `X-NoLag-Signature-V2` value of `body` now (made per attempt: its time is the
/// attempt's), when there is a secret.
fn signature_v2(secret: Option<&WebhookSecret>, body: &[u8]) -> Option<HeaderValue> {
    let secret = secret?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    // Digits, `t=`, `,v1=` and hex: always a valid value.
    HeaderValue::from_str(&crate::request::sign_v2(secret.expose(), now, body)).ok()
}

/// The signature's header value (hex digits and `sha256=`: always a valid value).
fn signature_value(bytes: &[u8; SIGNATURE_LEN]) -> HeaderValue {
    HeaderValue::from_bytes(bytes).unwrap_or(HeaderValue::from_static(""))
}

fn delivery_span(request: &WebhookRequest) -> tracing::Span {
    tracing::info_span!(
        "webhook",
        kind = request.call.kind.as_str(),
        delivery_id = %request.delivery_id,
    )
}
