//! [`WebhookSender`]: the node's pooled HTTP clients for webhooks (one per kind, each with its
//! address rule), the per-target concurrency limit and retries. It is the node's
//! [`skua_core::webhook::Poster`]: every trigger, hydration and wake request goes through it.
//!
//! Two ways to send, both on the caller's task:
//! - attempts within a deadline ([`Attempts::Within`], [`WebhookSender::call`]): the caller
//!   waits for the outcome (hydration, wake), all attempts within one overall budget (the
//!   target's timeout);
//! - one attempt ([`Attempts::Once`], [`WebhookSender::post_once`]), for a caller that runs
//!   its own retries and queue (triggers: the engine's trigger queue).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::header::HeaderValue;
use skua_core::webhook::{
    Answer, Attempts, Post, PostFailure, Poster, RecentWebhook, WebhookKind, WebhookSecret, WebhookTarget,
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument as _;

use crate::client::{Client, IDLE_TIMEOUT};
use crate::config::{RetrySchedule, WebhookConfig};
use crate::metrics::{Outcome, WebhookMetrics};
use crate::outcome::{DeliveryError, WebhookResponse};
use crate::request::{SIGNATURE_LEN, WebhookRequest, sign_bytes};
use crate::rule::AddressRule;

struct Inner {
    /// One client per kind ([`WebhookKind::ALL`] order): each has its own address rule, pool
    /// and routes, so a URL allowed for one kind is never reached through another's.
    clients: [Client; 3],
    config: WebhookConfig,
    metrics: Arc<WebhookMetrics>,
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
    /// A sender whose idle-connection sweep runs on `tracker` and stops with `shutdown`
    /// (deliveries run on their callers' tasks). Installs ring as the process's
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
        let recent = crate::recent::RecentDeliveries::new(config.recent_deliveries);
        let inner = Arc::new(Inner { clients, config, metrics: Arc::new(WebhookMetrics::default()), recent });
        let sender = Self { inner };
        tracker.spawn(sender.clone().sweep(shutdown));
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
        let c = &request.call;
        let delivery_id = request.delivery_id.to_string();
        self.post_within(
            c.kind,
            &c.target,
            c.secret.as_ref(),
            &delivery_id,
            request.body.clone(),
            &schedule.delays,
            budget,
        )
        .await
    }

    /// Attempts `delays` apart within `budget` overall, each bounded by what is left of it and
    /// by the target's timeout; counted as one delivery of `kind`, in a `webhook` span.
    #[allow(clippy::too_many_arguments)]
    async fn post_within(
        &self,
        kind: WebhookKind,
        target: &WebhookTarget,
        secret: Option<&WebhookSecret>,
        delivery_id: &str,
        body: Bytes,
        delays: &[Duration],
        budget: Duration,
    ) -> Result<WebhookResponse, DeliveryError> {
        let span = tracing::info_span!("webhook", kind = kind.as_str(), delivery_id);
        async {
            let started = Instant::now();
            let result = self.deliver(kind, target, secret, body, delays, started + budget).await;
            self.finish(kind, &target.url, started, &result);
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

    /// Attempts `delays` apart, every attempt and wait before `deadline`.
    async fn deliver(
        &self,
        kind: WebhookKind,
        target: &WebhookTarget,
        secret: Option<&WebhookSecret>,
        body: Bytes,
        delays: &[Duration],
        deadline: Instant,
    ) -> Result<WebhookResponse, DeliveryError> {
        let per_attempt = target.timeout(kind);
        let mut attempt = 0u32;
        loop {
            let timeout = deadline.saturating_duration_since(Instant::now()).min(per_attempt);
            self.inner.metrics.attempt(kind, attempt > 0);
            let result = match tokio::time::timeout(timeout, self.post_signed(kind, target, secret, body.clone())).await
            {
                Ok(r) => r,
                Err(_) => Err(DeliveryError::Timeout { after: timeout }),
            };
            attempt += 1;
            let err = match result {
                Ok(r) => return Ok(r),
                Err(e) => e,
            };
            let Some(delay) = delays.get(attempt as usize - 1).copied().filter(|_| err.is_retryable()) else {
                return Err(err);
            };
            if Instant::now() + delay >= deadline {
                return Err(err);
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
}

/// The node's one webhook seam: [`Attempts::Once`] is [`WebhookSender::post_once`],
/// [`Attempts::Within`] a call with retries like [`WebhookSender::call`].
#[async_trait::async_trait]
impl Poster for WebhookSender {
    async fn post(&self, post: Post<'_>, attempts: Attempts<'_>) -> Result<Answer, PostFailure> {
        let Post { kind, target, secret, delivery_id, body } = post;
        let result = match attempts {
            Attempts::Once { retry } => self.post_once(kind, target, secret, delivery_id, body, retry).await,
            Attempts::Within { delays, budget } => {
                self.post_within(kind, target, secret, delivery_id, body, delays, budget).await
            }
        };
        result.map(|r| Answer { status: r.status, body: r.body }).map_err(|e| PostFailure {
            outcome: e.outcome().as_str(),
            error: skua_core::error::error_chain(&e),
            retryable: e.is_retryable(),
        })
    }

    fn recent(&self) -> Vec<RecentWebhook> {
        self.inner
            .recent
            .list()
            .into_iter()
            .map(|d| RecentWebhook {
                kind: d.kind.as_str(),
                host: d.host,
                outcome: d.outcome.as_str(),
                status: d.status,
                latency_ms: u64::try_from(d.latency.as_millis()).unwrap_or(u64::MAX),
                at_unix_ms: d.at_unix_ms,
            })
            .collect()
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
