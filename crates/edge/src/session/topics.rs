//! `subscribe`, `unsubscribe`, `setFilters` and `publish` (N11–N20, N29, N32–N34).

use std::sync::Arc;

use bytes::Bytes;
use skua_core::registry::Operation;
use skua_core::webhook::WebhookKind;
use skua_protocol::codes::{code, error};
use skua_protocol::filters::{FilterError, FilterSpec, is_valid_value};
use skua_protocol::{ErrorFrame, ServerFrame, SubscribeFrame};

use super::{Session, SessionSub};
use crate::clock::now_unix_s;
use crate::durable::Cmd;
use crate::hub::{LocalSub, bus_subscription};
use crate::hydrate::{Hold, HydrationRequest};
use crate::publish::Refused;

/// Longest load-balancing group name.
const MAX_GROUP_LEN: usize = 128;

impl Session {
    pub(super) fn local_sub(&mut self, actor: &skua_core::ActorId, echo: &str, s: &SessionSub) -> LocalSub {
        let mut local =
            LocalSub::new(self.conn.clone(), actor.clone(), Arc::from(echo), s.filters.clone(), s.group.clone());
        if let Some(c) = &s.consumer {
            local.durable = Some(self.durable().route(c));
        }
        local.history = s.tracker.clone();
        local
    }

    /// For a topic with history, a tracker at the topic's latest offset (a fresh subscription
    /// starts from now); `None` without history, or when the history is unreachable.
    pub(super) async fn fresh_tracker(
        &self,
        address: &skua_core::TopicAddress,
    ) -> Option<Arc<crate::history::Tracker>> {
        let history = self.st.history.as_ref()?;
        let config = self.st.registry.load().history(address)?;
        let now = crate::clock::now_unix_ms();
        match history.read(address, &config, skua_core::history::ReadFrom::Latest, 1, now).await {
            Ok(r) => Some(crate::history::Tracker::at(r.head, r.epoch)),
            Err(e) => {
                tracing::warn!(error = %e, "Reading a topic's history failed; this subscription cannot recover.");
                None
            }
        }
    }

    /// Starts replaying what a subscription with a replaying tracker missed (issue 19).
    pub(super) fn start_recovery(&self, echo: &str, s: &SessionSub, start: crate::history::Start, report: bool) {
        let (Some(history), Some(tracker), Some(a)) = (&self.st.history, &s.tracker, &self.auth) else { return };
        let Some(config) = self.st.registry.load().history(&s.address) else { return };
        let recovery = crate::history::Recovery {
            history: history.clone(),
            topic: s.address.clone(),
            config,
            conn: self.conn.clone(),
            tracker: tracker.clone(),
            echo: Arc::from(echo),
            actor: a.actor.id.clone(),
            filters: s.filters.clone(),
            start,
            max: self.st.config.history_max_replay,
            report_success: report,
        };
        self.st.tracker.spawn(recovery.run(self.st.metrics.clone()));
    }

    /// When the topic has a hydration webhook (and the node posts webhooks): the hold to put on the
    /// new local subscription and the request to make once it is inserted (N43).
    pub(super) fn prepare_hydration(&self, s: &SessionSub) -> Option<(Arc<Hold>, HydrationRequest)> {
        self.st.webhooks.as_ref()?;
        let a = self.auth.as_ref()?;
        let registry = self.st.registry.load();
        let call = registry.webhook(&s.address, WebhookKind::Hydration)?;
        let request = HydrationRequest {
            call,
            project_id: s.address.room.project.clone(),
            room: Arc::from(s.address.room.slug()),
            scope: skua_core::ScopeInfo::payload(registry.room_scope(&s.address.room)),
            topic_name: s.address.topic.clone(),
            actor_id: a.actor.id.clone(),
            actor_type: a.actor.actor_type,
            client_id: a.key.client_id.as_ref().map(|c| c.as_str().to_owned()),
        };
        let hold = Hold::new(self.st.config.outbound_queue_messages, self.st.config.outbound_queue_bytes);
        Some((hold, request))
    }

    /// Starts the hydration prepared by [`Self::prepare_hydration`], after the subscription is
    /// in the hub (its `subscribed` frame queued) and its durable delivery started held (so the
    /// resume cannot overtake the start on the durable task's queue).
    pub(super) fn start_hydration(&mut self, hold: &Arc<Hold>, request: HydrationRequest, s: &SessionSub) {
        let Some(poster) = self.st.webhooks.clone() else { return };
        let after = s.consumer.as_ref().map(|c| {
            let route = self.durable().route(c);
            Box::pin(async move { route.resume().await }) as crate::hydrate::AfterRelease
        });
        let max_data = self.st.config.max_message_size.min(skua_protocol::MAX_PAYLOAD_CEILING_BYTES);
        self.st.tracker.spawn(crate::hydrate::run(
            poster,
            request,
            self.conn.clone(),
            Arc::downgrade(hold),
            self.st.metrics.clone(),
            max_data,
            after,
        ));
    }

    /// The backlog a group member's replay covers, read before its subscription goes live
    /// (N26); `None` for other subscriptions, or when the store failed (then no replay: the
    /// messages stay pending for the next one).
    pub(super) async fn replay_backlog(&self, s: &SessionSub) -> Option<(u64, u64)> {
        let c = s.consumer.as_ref().filter(|_| s.group.is_some())?;
        match self.st.store.backlog(c.as_str()).await {
            Ok(b) => Some(b),
            Err(e) => {
                tracing::warn!(error = %e, "Reading a group's backlog failed; no replay now.");
                None
            }
        }
    }

    /// Starts delivering what is pending for a durable subscription (`replay`: a group's
    /// backlog from [`Self::replay_backlog`]); `held` while its hydration is under way.
    pub(super) async fn start_durable(&mut self, echo: &str, s: &SessionSub, replay: Option<(u64, u64)>, held: bool) {
        if let Some(c) = &s.consumer {
            let cmd = Cmd::Start { consumer: c.clone(), echo: Arc::from(echo), replay, held };
            // Never waits for the task (a door's reader would wait on its own writer).
            self.durable().change(cmd);
        }
    }

    /// Ends a durable subscription: a session's own consumer is forgotten, a group's stays.
    pub(super) async fn stop_durable(&mut self, s: &SessionSub) {
        if let Some(c) = &s.consumer {
            let cmd = Cmd::Stop { consumer: c.clone(), forget: s.group.is_none() };
            self.durable().change(cmd);
        }
    }

    fn store_unavailable(&self, topic: &str, msg_ref: Option<&str>) {
        self.st.metrics.store_failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.error(ErrorFrame {
            error: error::STORE_UNAVAILABLE,
            topic: Some(topic),
            hint: Some("the message store is unreachable; nothing was stored, retry shortly"),
            msg_ref,
            ..ErrorFrame::default()
        });
    }

    fn filter_error(&self, e: FilterError, topic: &str, msg_ref: Option<&str>) {
        self.error(ErrorFrame { error: e.as_wire_str(), topic: Some(topic), msg_ref, ..ErrorFrame::default() });
    }

    fn unavailable(&self, topic: &str, msg_ref: Option<&str>) {
        self.error(ErrorFrame {
            error: error::BROKER_UNAVAILABLE,
            topic: Some(topic),
            hint: Some("the message bus is unreachable; retry shortly"),
            msg_ref,
            ..ErrorFrame::default()
        });
    }

    pub(super) async fn on_subscribe(&mut self, s: SubscribeFrame) {
        let Some(a) = &self.auth else { return };
        let registry = self.st.registry.load();
        let resolved = match registry.resolve_topic(&a.actor, &s.topic, Operation::Subscribe, now_unix_s()) {
            Ok(r) => r,
            Err(e) => return self.access_error(&s.topic, None, e),
        };
        // A malformed `since` is refused before anything changes (issue 19).
        let since = match s.since.clone() {
            None => None,
            Some(Ok(since)) => Some(since),
            Some(Err(hint)) => return self.bad_history_request(&s.topic, hint),
        };
        // An invalid re-subscribe keeps the old subscription (N14).
        let filters = match s.filters {
            Ok(f) => f,
            Err(e) => return self.filter_error(e, &s.topic, None),
        };
        let group: Option<Arc<str>> = if s.load_balance {
            let g = s.load_balance_group.as_deref().unwrap_or(a.actor.id.as_str());
            if g.len() > MAX_GROUP_LEN || !is_valid_value(g) {
                return self.error(ErrorFrame {
                    error: error::INVALID_FRAME,
                    topic: Some(&s.topic),
                    hint: Some("loadBalanceGroup must be 1-128 characters without / # + |"),
                    ..ErrorFrame::default()
                });
            }
            Some(Arc::from(g))
        } else {
            None
        };
        if !self.subs.contains_key(&s.topic) && self.at_subscription_limit() {
            return self.error(ErrorFrame {
                error: error::TOO_MANY_SUBSCRIPTIONS,
                topic: Some(&s.topic),
                hint: Some("this connection holds the most subscriptions allowed"),
                ..ErrorFrame::default()
            });
        }
        let keys: Vec<String> = filters.iter().map(FilterSpec::key).map(str::to_owned).collect();
        let actor = a.actor.id.clone();
        let consumer = match self.open_consumer(&resolved.address, resolved.logged, group.as_ref(), &keys, s.qos).await
        {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "Opening a durable consumer failed; subscribe refused.");
                return self.store_unavailable(&s.topic, None);
            }
        };
        // A topic with history: a re-subscribe keeps what was delivered, a new one starts now.
        // With `since`, it recovers from there instead (and is told how that went).
        let has_history = self.st.history.is_some() && registry.history(&resolved.address).is_some();
        let tracked = has_history && group.is_none() && consumer.is_none();
        let recover = since.filter(|_| tracked);
        let tracker = match self.subs.get(&s.topic).filter(|o| o.address == resolved.address) {
            _ if !tracked => None,
            _ if recover.is_some() => Some(crate::history::Tracker::replaying()),
            Some(old) if old.tracker.is_some() => old.tracker.clone(),
            _ => self.fresh_tracker(&resolved.address).await,
        };
        let sub = SessionSub {
            address: resolved.address,
            qos: s.qos,
            group_as_sent: if s.load_balance { s.load_balance_group.clone() } else { None },
            group,
            filters: keys.into(),
            raw_filters: s.raw_filters.filter(|_| !filters.is_empty()),
            consumer,
            tracker,
        };
        let new_bus = bus_subscription(&sub.address, sub.group.as_ref());
        if self.st.hub.acquire(&new_bus).await.is_err() {
            return self.unavailable(&s.topic, None);
        }
        let subscribed = ServerFrame::Subscribed { topic: &s.topic, load_balance: sub.group.is_some() }.encode();
        let backlog = self.replay_backlog(&sub).await;
        let mut local = self.local_sub(&actor, &s.topic, &sub);
        let hydration = self.prepare_hydration(&sub);
        local.hold = hydration.as_ref().map(|(h, _)| h.clone());
        let old = self.subs.insert(s.topic.clone(), sub.clone());
        if let Some(old) = &old
            && old.address != sub.address
        {
            self.st.hub.remove(&old.address, self.conn.id);
        }
        let (_, deferred) = self.st.hub.insert(&sub.address, local, Some(subscribed), true);
        if let Some(d) = deferred {
            // A retained snapshot larger than half the queue: the rest goes paced (issue 12).
            self.st.tracker.spawn(d.send(self.st.metrics.clone()));
        }
        if let Some(old) = old {
            if old.consumer.is_some() && old.consumer != sub.consumer {
                self.stop_durable(&old).await;
            }
            self.st.hub.release(&bus_subscription(&old.address, old.group.as_ref())).await;
        }
        self.start_durable(&s.topic, &sub, backlog, hydration.is_some()).await;
        if let Some((hold, request)) = hydration {
            self.start_hydration(&hold, request, &sub);
        }
        if let Some(since) = recover {
            let start = crate::history::Start::After(since.offset, Arc::from(since.epoch));
            self.start_recovery(&s.topic, &sub, start, true);
        } else if s.since.is_some() {
            // Nothing to recover from: the topic keeps no history (or the subscription is
            // load balanced).
            let frame = ServerFrame::Recovery { topic: &s.topic, recovered: false, epoch: "", offset: 0 };
            self.push(&frame);
        }
        self.save_restore().await;
    }

    fn bad_history_request(&self, topic: &str, hint: &'static str) {
        self.error(ErrorFrame {
            error: error::INVALID_FRAME,
            topic: Some(topic),
            hint: Some(hint),
            ..ErrorFrame::default()
        });
    }

    /// `history`: one page of a topic's history (issue 19), capped by `history_max_page` and
    /// by the 1 MiB frame bound (a client pages on with `since` = the last offset it got).
    pub(super) async fn on_history(
        &mut self,
        topic: &str,
        since: Option<Result<skua_protocol::Since, &'static str>>,
        limit: Option<u64>,
    ) {
        let Some(a) = &self.auth else { return };
        let since = match since {
            None => None,
            Some(Ok(s)) => Some(s),
            Some(Err(hint)) => return self.bad_history_request(topic, hint),
        };
        let registry = self.st.registry.load();
        let resolved = match registry.resolve_topic(&a.actor, topic, Operation::Subscribe, now_unix_s()) {
            Ok(r) => r,
            Err(e) => return self.access_error(topic, None, e),
        };
        let (Some(history), Some(config)) = (self.st.history.clone(), registry.history(&resolved.address)) else {
            return self.bad_history_request(topic, "this topic keeps no history");
        };
        let max = self.st.config.history_max_page;
        let limit = limit.map_or(max, |l| usize::try_from(l).unwrap_or(usize::MAX).min(max));
        let from = match &since {
            Some(s) => skua_core::history::ReadFrom::After(s.offset),
            None => skua_core::history::ReadFrom::Latest,
        };
        let now = crate::clock::now_unix_ms();
        let mut read = match history.read(&resolved.address, &config, from, limit, now).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "Reading a topic's history failed.");
                return self.unavailable(topic, None);
            }
        };
        let mut complete = since.as_ref().is_none_or(|s| read.reaches_back_to(s.offset, &s.epoch));
        if let Some(s) = &since
            && s.epoch != *read.epoch
        {
            // Another epoch: the client's offset means nothing here; from the oldest kept.
            complete = false;
            let from = skua_core::history::ReadFrom::After(0);
            match history.read(&resolved.address, &config, from, limit, now).await {
                Ok(r) => read = r,
                Err(e) => {
                    tracing::warn!(error = %e, "Reading a topic's history failed.");
                    return self.unavailable(topic, None);
                }
            }
        }
        // Oldest first, as many as fit in one frame below 1 MiB. The first message always goes,
        // alone if need be (a payload of at most the ceiling plus its names fits one frame), so
        // paging with `since` passes every message (issue 33, item 9). One larger than the
        // ceiling (stored under an older, looser limit) can never be sent: it is skipped and the
        // reply says `complete: false`.
        let mut budget = skua_protocol::MAX_PAYLOAD_CEILING_BYTES;
        let mut items = Vec::with_capacity(read.entries.len());
        for e in &read.entries {
            if e.data.len() > skua_protocol::MAX_PAYLOAD_CEILING_BYTES {
                complete = false;
                continue;
            }
            let cost = 64 + e.data.len() + e.publisher.as_str().len() + e.filter.as_ref().map_or(0, String::len);
            if cost > budget && !items.is_empty() {
                break;
            }
            budget = budget.saturating_sub(cost);
            items.push(skua_protocol::HistoryItem {
                offset: e.offset,
                data: &e.data,
                from: e.publisher.as_str(),
                timestamp: e.timestamp_ms,
                filter: e.filter.as_deref(),
            });
        }
        let frame = ServerFrame::History { topic, epoch: &read.epoch, offset: read.head, complete, messages: &items };
        self.push(&frame);
    }

    pub(super) async fn on_unsubscribe(&mut self, topic: &str) {
        if let Some(sub) = self.subs.remove(topic) {
            self.st.hub.remove(&sub.address, self.conn.id);
            self.st.hub.release(&bus_subscription(&sub.address, sub.group.as_ref())).await;
            self.stop_durable(&sub).await;
            self.save_restore().await;
        }
        // Unsubscribing what is not subscribed is not an error: the end state is the same.
        self.push(&ServerFrame::Unsubscribed { topic });
    }

    pub(super) async fn on_set_filters(
        &mut self,
        topic: &str,
        filters: Result<Vec<FilterSpec>, FilterError>,
        raw: Option<Bytes>,
    ) {
        if !self.subs.contains_key(topic) {
            return self.error(ErrorFrame {
                error: error::NOT_SUBSCRIBED,
                topic: Some(topic),
                ..ErrorFrame::default()
            });
        }
        // An invalid list keeps the previous filter set (N34).
        let filters = match filters {
            Ok(f) => f,
            Err(e) => return self.filter_error(e, topic, None),
        };
        let keys: Arc<[String]> = filters.iter().map(FilterSpec::key).map(str::to_owned).collect();
        let Some(sub) = self.subs.get_mut(topic) else { return };
        sub.filters = keys.clone();
        // `nil` and `[]` both mean wildcard and are echoed as `[]`.
        sub.raw_filters = raw.filter(|_| !filters.is_empty());
        let echo = sub.raw_filters.clone();
        self.st.hub.set_filters(&sub.address, self.conn.id, keys.clone());
        if let Some(id) = &sub.consumer {
            let consumer = skua_core::Consumer {
                id: id.to_string(),
                topic: crate::durable::topic_key(&sub.address),
                actor: self.actor_id().map(|a| a.as_str().to_owned()).unwrap_or_default(),
                filters: keys.to_vec(),
            };
            let ttl = self.st.config.restore_ttl.as_secs();
            if let Err(e) = self.st.store.open_consumer(&consumer, now_unix_s(), ttl).await {
                tracing::warn!(error = %e, "Updating a durable consumer's filters failed; it keeps the old ones.");
            }
        }
        self.push(&ServerFrame::FiltersUpdated { topic, filters: echo.as_deref() });
        self.save_restore().await;
    }

    /// The error frame of a refused publish.
    pub(super) fn publish_refused(&self, refused: Refused, topic: &str, msg_ref: Option<&str>) {
        let e = ErrorFrame { topic: Some(topic), msg_ref, ..ErrorFrame::default() };
        match refused {
            Refused::RateLimited => self.error(ErrorFrame {
                error: error::RATE_LIMIT_EXCEEDED,
                code: Some(code::RATE_LIMIT_EXCEEDED),
                hint: Some("too many publishes on this connection; slow down"),
                ..e
            }),
            Refused::TooLarge { max_size_bytes } => self.error(ErrorFrame {
                error: error::MESSAGE_TOO_LARGE,
                code: Some(code::MESSAGE_TOO_LARGE),
                hint: Some("the payload exceeds the largest message size"),
                max_size_bytes: Some(max_size_bytes),
                ..e
            }),
            Refused::QuotaExceeded => self.error(ErrorFrame {
                error: error::MONTHLY_QUOTA_EXCEEDED,
                code: Some(code::MONTHLY_QUOTA_EXCEEDED),
                hint: Some("the project's monthly message quota is used up"),
                ..e
            }),
            Refused::Access(a) => self.access_error(topic, msg_ref, a),
            // Only server-side publishes name an address or data these refuse.
            Refused::Unknown(_) => self.access_error(
                topic,
                msg_ref,
                skua_core::registry::AccessError { hint: skua_core::registry::HINT_TOPIC_NOT_CONFIGURED },
            ),
            Refused::InvalidData => self.error(ErrorFrame {
                error: error::INVALID_FRAME,
                hint: Some("data must be exactly one MessagePack value"),
                ..e
            }),
            Refused::Filter(wire) => self.error(ErrorFrame { error: wire, ..e }),
            Refused::RetainedLimit(r) => {
                self.error(ErrorFrame { error: error::RETAINED_LIMIT_EXCEEDED, hint: Some(r.hint()), ..e });
            }
            Refused::Store(_) => self.store_unavailable(topic, msg_ref),
            Refused::Bus(_) => self.unavailable(topic, msg_ref),
            Refused::Idempotency(_) => self.error(ErrorFrame {
                error: error::BROKER_UNAVAILABLE,
                hint: Some("the idempotency store is unreachable; nothing was published; retry shortly"),
                ..e
            }),
            Refused::InvalidIdempotencyKey { max_length } => {
                let hint = format!("idempotencyKey must be 1 to {max_length} bytes");
                self.error(ErrorFrame { error: error::INVALID_IDEMPOTENCY_KEY, hint: Some(&hint), ..e });
            }
        }
    }
}
