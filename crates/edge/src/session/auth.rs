//! `auth` and `reauth` (N6–N10, N23, N27, N38).

use std::sync::Arc;

use skua_core::{BusSubscription, ClientId, ConnectionRecord, RecordId, RestoreKey, SessionKey};
use skua_protocol::codes::{auth as auth_err, error};
use skua_protocol::filters::parse_subscription_filters;
use skua_protocol::{
    AuthFrame, ClientIdField, ErrorFrame, MAX_PROTOCOL_VERSION, RestoredSubscription, ServerFrame, ServerFrameKind,
};

use super::{Authed, Session, SessionSub};
use crate::auth::verify;
use crate::clock::now_unix_s;
use crate::hub::bus_subscription;
use crate::ratelimit::TokenBucket;

/// How often a reconnect waiting for a dead node's release checks for it again.
const RESTORE_WAIT_RETRY: std::time::Duration = std::time::Duration::from_millis(300);

/// Most holders of an actor's records in use one reconnect looks up (one presence read each).
const MAX_RESTORE_HOLDERS: usize = 8;

impl Session {
    pub(super) async fn on_auth(&mut self, a: AuthFrame) {
        if self.auth.is_some() {
            // Never a second `auth` reply: it kills the Python SDK's receive loop (N8).
            self.push(&ServerFrame::Error(ErrorFrame { error: error::ALREADY_AUTHENTICATED, ..ErrorFrame::default() }));
            return;
        }
        let version = a.protocol_version.clamp(1, MAX_PROTOCOL_VERSION);
        let fail = |s: &Self, e: &'static str| {
            s.st.metrics.auths.inc(e);
            s.push(&ServerFrame::AuthFailed { error: e });
        };
        if !self.st.hub.bus().is_available() {
            return fail(self, auth_err::BROKER_UNAVAILABLE);
        }
        let registry = self.st.registry.load();
        let cred = match verify(&registry, &a.token, now_unix_s(), &self.st.config.jwt_audiences) {
            Ok(c) => c,
            Err(e) => {
                // An address that keeps failing gets each further failure answered late, and
                // this connection reads nothing meanwhile (issue 12, item 6). A valid credential
                // is never delayed: clients sharing the address (a NAT) are not held up by
                // another's failures (issue 33, item 10).
                let delay = self.st.auth_throttle.delay(self.client_ip);
                if !delay.is_zero() {
                    self.st.metrics.auths_throttled.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = self.st.shutdown.cancelled() => return,
                        () = self.conn.closed() => return,
                    }
                }
                fail(self, e);
                return self.auth_failed();
            }
        };
        let client_id = match &a.client_id {
            ClientIdField::Absent => None,
            ClientIdField::Given(s) => match ClientId::parse(s) {
                Ok(c) => Some(c),
                Err(_) => return fail(self, auth_err::INVALID_CLIENT_ID),
            },
            ClientIdField::NotAString => return fail(self, auth_err::INVALID_CLIENT_ID),
        };
        let actor = cred.actor;
        let Some(project) = registry.project(&actor.project) else { return fail(self, auth_err::ACCESS_DENIED) };
        let Some(slot) = self.st.claim_project_slot(&project.id, project.limits.max_connections) else {
            return fail(self, auth_err::CONNECTION_LIMIT_REACHED);
        };
        // clientId only names sessions of persistent actor types (N9, N23).
        let key = SessionKey {
            project: project.id.clone(),
            actor: actor.id.clone(),
            // Another door's client id names a session of any actor type (N54).
            client_id: client_id.filter(|_| actor.actor_type.has_persistent_sessions() || self.door.is_some()),
        };
        let rate = actor.rate_limit.or(project.limits.rate_limit).unwrap_or(self.st.config.rate_limit);
        // Never above the ceiling, whatever a stored project limit says: a `message` frame stays
        // within 1 MiB (N4, issue 12).
        let max_message_size = project
            .limits
            .max_message_size
            .unwrap_or(self.st.config.max_message_size)
            .min(skua_protocol::MAX_PAYLOAD_CEILING_BYTES);
        let (registration, subscriptions) = self.register(&actor, key.client_id.as_ref(), cred.token_digest);
        // Without a clientId each connection keeps a record of its own, so another tab's fresh
        // `auth` never overwrites it; a reconnect below may take over an ended one instead.
        let restore = match key.client_id {
            Some(_) => RestoreKey::Session(key.clone()),
            None => RestoreKey::Connection(ConnectionRecord {
                project: key.project.clone(),
                actor: key.actor.clone(),
                id: new_record_id(),
            }),
        };
        self.auth = Some(Authed {
            actor: actor.clone(),
            version,
            expires_at: cred.expires_at,
            key,
            restore,
            bucket: TokenBucket::new(rate, self.st.config.rate_limit_window),
            frame_buckets: super::FrameBuckets::new(&self.st.config),
            max_message_size,
            _slot: slot,
            registration,
            subscriptions,
            topics: crate::publish::TopicCache::new(self.st.config.publish_topic_cache),
        });
        self.claim_session().await;
        // A door's persistent session resumes what it kept; a clean one drops it (N54).
        let (door_resume, door_discard) = match (&self.door, &self.auth) {
            (Some(d), Some(a)) if a.key.client_id.is_some() => (d.persistent && !d.clean, d.clean),
            _ => (false, false),
        };
        if door_discard {
            self.discard_door_session().await;
        }
        let (restored, recoveries) =
            if a.reconnect || door_resume { self.restore_subscriptions().await } else { (Vec::new(), Vec::new()) };
        if let Some(d) = &mut self.door
            && let Some(tell) = d.on_restored.take()
        {
            tell(crate::session::DoorRestored {
                topics: restored.iter().map(|(pattern, s)| (pattern.clone(), s.qos)).collect(),
                filters: d.filters.clone(),
                present: d.present,
            });
        }
        let namespace = &self.st.config.namespace;
        let internal: Vec<String> = restored.iter().map(|(_, s)| s.address.internal_topic(namespace)).collect();
        let entries: Vec<RestoredSubscription<'_>> = restored
            .iter()
            .zip(&internal)
            .map(|((pattern, s), topic)| RestoredSubscription {
                pattern,
                topic,
                load_balance: s.group.is_some(),
                load_balance_group: s.group_as_sent.as_deref().or(s.group.as_deref()),
                filters: s.raw_filters.as_deref(),
            })
            .collect();
        // Every restored subscription is restored; the list telling the client about them is
        // cut to what fits in one frame (N4).
        let reply = super::presence::capped("restoredSubscriptions", entries.len(), |n| {
            ServerFrame::AuthOk {
                actor_token_id: actor.id.as_str(),
                project_id: project.id.as_str(),
                actor_type: actor.actor_type.as_str(),
                protocol_version: version,
                restored: &entries[..n],
            }
            .encode()
        });
        self.conn.push(ServerFrameKind::Auth, reply);
        drop(entries);
        self.st.metrics.auths.inc("ok");
        if !restored.is_empty() {
            self.st.metrics.replays_by_kind.add("restored_subscription", restored.len() as u64);
        }
        // Bus subscriptions were taken before the reply; the local subscriptions start after
        // it, so nothing arrives before `auth`. Restored subscriptions get no `subscribed`
        // frame and no retained replay.
        for (pattern, sub) in restored {
            let backlog = self.replay_backlog(&sub).await;
            let mut local = self.local_sub(&actor.id, &pattern, &sub);
            let hydration = self.prepare_hydration(&sub);
            local.hold = hydration.as_ref().map(|(h, _)| h.clone());
            let _ = self.st.hub.insert(&sub.address, local, None, false);
            self.start_durable(&pattern, &sub, backlog, hydration.is_some()).await;
            if let Some((hold, request)) = hydration {
                self.start_hydration(&hold, request, &sub);
            }
            self.subs.insert(pattern, sub);
        }
        // Missed messages of history topics, after the auth reply, before anything live.
        for (pattern, start) in recoveries {
            if let Some(sub) = self.subs.get(&pattern) {
                self.start_recovery(&pattern, sub, start, false);
            }
        }
        self.restore_lobbies().await;
        self.save_restore_after_restore().await;
    }

    /// A clientId session (N25) belongs to one connection: the newest. Older ones close with
    /// 4009 `session_taken_over`, on this node at once and on others through the project's
    /// control channel.
    async fn claim_session(&mut self) {
        let Some(a) = &self.auth else { return };
        if a.key.client_id.is_none() {
            return;
        }
        let session = a.key.clone();
        for older in self.st.register_session(&session, &self.conn) {
            older.request_close(crate::outbound::CloseRequest::TAKEN_OVER);
        }
        let control = BusSubscription::Control(session.project.clone());
        let held = match self.st.hub.acquire(&control).await {
            Ok(()) => Some(control),
            Err(e) => {
                tracing::warn!(error = %e, "Control topic unavailable; older connections on other nodes stay open.");
                None
            }
        };
        let msg = skua_core::ControlMessage::Takeover { session: session.clone(), conn: self.conn.id };
        self.st.durable.publish_control(msg).await;
        // What an earlier connection of this session held (and did not ack) is this one's now:
        // released before anything is restored, so replays count it (N25, N37).
        // A door's clean session holds nothing durable (what an earlier one kept is discarded).
        if self.door.as_ref().is_none_or(|d| d.persistent) {
            let holder = session.holder_key();
            let me = skua_core::Holder { session: &holder, node: self.st.node.as_str(), conn: self.conn.id.0 };
            if let Err(e) = self.st.store.release(skua_core::Release::SessionExcept(me)).await {
                tracing::warn!(error = %e, "Releasing an earlier connection's messages failed; they wait for the next one.");
            }
        }
        self.persistent = Some((session, held));
    }

    /// Drops what an earlier connection of a door's session kept (a clean session, N54): the
    /// durable consumers of its subscriptions (with the messages they kept) and its restore
    /// record's subscriptions. A consumer whose topic the actor can no longer resolve expires
    /// by itself (`restore_ttl`).
    pub(super) async fn discard_door_session(&mut self) {
        let Some(a) = &self.auth else { return };
        let record = match self.st.store.load_restore(&a.restore).await {
            // Nothing kept (or discarded before): nothing to write.
            Ok(Some(r)) if r.topics.is_empty() && r.door_filters.is_empty() && r.lobbies.is_empty() => return,
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "Loading a session to discard failed; its consumers expire by themselves.");
                return;
            }
        };
        let registry = self.st.registry.load();
        let now = now_unix_s();
        for t in &record.topics {
            let Ok(r) = registry.resolve_topic(&a.actor, &t.pattern, skua_core::registry::Operation::Subscribe, now)
            else {
                continue;
            };
            if !r.logged || t.load_balance {
                continue;
            }
            let id = skua_core::ConsumerId::session(&r.address, &a.key);
            if let Err(e) = self.st.store.drop_consumer(id.as_str()).await {
                tracing::warn!(error = %e, "Dropping a discarded session's consumer failed; it expires by itself.");
            }
        }
        if let Err(e) =
            self.st.store.save_restore(&a.restore, &self.st.node, &skua_core::RestoreRecord::default()).await
        {
            tracing::warn!(error = %e, "Clearing a discarded session's record failed.");
        }
    }

    /// Loads the restore record (a clientId session's) or claims one (the actor's connection
    /// record that ended last, which becomes this connection's), and takes the bus
    /// subscriptions of every entry that is still valid (address accessible, filters valid,
    /// bus reachable).
    async fn restore_subscriptions(&mut self) -> (Vec<(String, SessionSub)>, Vec<(String, crate::history::Start)>) {
        let mut recoveries = Vec::new();
        let subs = self.restore_subscriptions_into(&mut recoveries).await;
        (subs, recoveries)
    }

    async fn restore_subscriptions_into(
        &mut self,
        recoveries: &mut Vec<(String, crate::history::Start)>,
    ) -> Vec<(String, SessionSub)> {
        let Some(a) = &mut self.auth else { return Vec::new() };
        let loaded = match &mut a.restore {
            RestoreKey::Session(_) => self.st.store.load_restore(&a.restore).await,
            RestoreKey::Connection(mine) => {
                let (project, actor) = (mine.project.clone(), mine.actor.clone());
                let cap = self.st.config.max_subscriptions_per_connection;
                self.claim_connection_record(&project, &actor).await.map(|claimed| {
                    claimed.map(|c| {
                        if let Some(Authed { restore: RestoreKey::Connection(mine), .. }) = &mut self.auth {
                            mine.id = c.id;
                        }
                        // As stored: a restore that merged records ended together differs
                        // from it, so the merged record is saved (the next claim finds it).
                        self.claimed = Some(c.record.clone());
                        merge_together(c.record, c.together, cap)
                    })
                })
            }
        };
        let record = match loaded {
            Ok(Some(r)) => r,
            Ok(None) => return Vec::new(),
            Err(e) => {
                tracing::warn!(error = %e, "Loading the restore record failed; restoring nothing.");
                return Vec::new();
            }
        };
        let Some(a) = &self.auth else { return Vec::new() };
        self.pending_lobbies = record.lobbies.clone();
        if let Some(d) = &mut self.door {
            d.present = !record.topics.is_empty() || !record.door_filters.is_empty();
            d.filters = record.door_filters.clone();
        }
        // Released for a node that died (issue 19): its offsets are older than what it
        // delivered; what history stamped before it was last seen alive, less the margin, is
        // taken as delivered (docs/recovery.md).
        let margin_ms = u64::try_from(self.st.config.history_recovery_margin.as_millis()).unwrap_or(u64::MAX);
        let lost_since = record.holder_last_seen_ms.map(|seen| seen.saturating_sub(margin_ms));
        let registry = self.st.registry.load();
        let mut out = Vec::new();
        for t in record.topics {
            let Ok(resolved) =
                registry.resolve_topic(&a.actor, &t.pattern, skua_core::registry::Operation::Subscribe, now_unix_s())
            else {
                continue;
            };
            let filters = match t.raw_filters.as_deref().map(parse_subscription_filters) {
                None => Vec::new(),
                Some(Ok(f)) => f,
                Some(Err(_)) => continue,
            };
            let group: Option<Arc<str>> =
                t.load_balance.then(|| Arc::from(t.load_balance_group.as_deref().unwrap_or(a.actor.id.as_str())));
            let keys: Vec<String> = filters.iter().map(|f| f.key().to_owned()).collect();
            let consumer =
                match self.open_consumer(&resolved.address, resolved.logged, group.as_ref(), &keys, t.qos).await {
                    Ok(c) => c,
                    Err(e) => {
                        // Restored live; what was stored meanwhile waits for the next reconnect.
                        tracing::warn!(error = %e, "Reopening a durable consumer failed; restored without durability.");
                        None
                    }
                };
            // A topic with history recovers from the offset the record kept (issue 19); not a
            // load-balanced or durable subscription (their messages go to the group, the store).
            let has_history = self.st.history.is_some()
                && registry.history(&resolved.address).is_some()
                && group.is_none()
                && consumer.is_none();
            let (tracker, start) = match (has_history, t.history) {
                (false, _) => (None, None),
                (true, Some((offset, epoch))) => (
                    Some(crate::history::Tracker::replaying()),
                    Some(match lost_since {
                        Some(since) => crate::history::Start::Lost(offset, Arc::from(epoch), since),
                        None => crate::history::Start::After(offset, Arc::from(epoch)),
                    }),
                ),
                (true, None) => (self.fresh_tracker(&resolved.address).await, None),
            };
            let sub = SessionSub {
                address: resolved.address,
                qos: t.qos,
                group,
                group_as_sent: t.load_balance_group,
                filters: keys.into(),
                raw_filters: t.raw_filters,
                consumer,
                tracker,
            };
            if let Some(start) = start {
                recoveries.push((t.pattern.clone(), start));
            }
            if self.st.hub.acquire(&bus_subscription(&sub.address, sub.group.as_ref())).await.is_ok() {
                out.push((t.pattern, sub));
            }
        }
        out
    }

    /// Claims the actor's connection record that ended last. First, while a node suspected dead
    /// (not seen alive for over `node_refresh` + 1 s) still holds one of the actor's records,
    /// waits for that node's release, checking every `RESTORE_WAIT_RETRY`, until no holder is
    /// suspected any more (released, or alive after all), `restore_wait` passes or the
    /// connection ends (issue 19): a client reconnecting right after its node died then claims
    /// the record of that connection, not nothing or an older one that ended before.
    async fn claim_connection_record(
        &self,
        project: &skua_core::ProjectId,
        actor: &skua_core::ActorId,
    ) -> Result<Option<skua_core::ClaimedRecord>, skua_core::StoreError> {
        let wait = self.st.config.restore_wait;
        if !wait.is_zero() {
            let deadline = tokio::time::Instant::now() + wait;
            let mut waited = false;
            while self.a_holder_is_suspected(project, actor).await {
                if tokio::time::Instant::now() >= deadline {
                    tracing::info!(%actor, ?wait, "No restore record was released within restore_wait; claiming without it.");
                    break;
                }
                if !waited {
                    waited = true;
                    self.st.metrics.restore_waits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::debug!(%actor, "A node suspected dead holds this actor's restore record; waiting for its release.");
                }
                let next = (tokio::time::Instant::now() + RESTORE_WAIT_RETRY).min(deadline);
                tokio::select! {
                    () = tokio::time::sleep_until(next) => {}
                    () = self.st.shutdown.cancelled() => return Ok(None),
                    () = self.conn.closed() => return Ok(None),
                }
            }
        }
        let window = self.st.config.restore_merge_window;
        let together_s = (!window.is_zero()).then(|| window.as_secs().max(1));
        self.st.store.claim_restore(project, actor, &self.st.node, together_s).await
    }

    /// Whether a node other than this one holds one of the actor's connection records in use
    /// and was last seen alive over `node_refresh` + 1 s ago. A node the presence backend does
    /// not know is not suspected; a failed look-up suspects nothing (logged).
    async fn a_holder_is_suspected(&self, project: &skua_core::ProjectId, actor: &skua_core::ActorId) -> bool {
        let holders = match self.st.store.restore_holders(project, actor, &self.st.node, MAX_RESTORE_HOLDERS).await {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(error = %e, "Listing the holders of restore records failed; not waiting for a release.");
                return false;
            }
        };
        let stale_ms = u64::try_from(self.st.config.node_refresh.as_millis()).unwrap_or(u64::MAX).saturating_add(1000);
        for node in holders {
            match self.st.presence.node_last_seen(&node).await {
                Ok(Some(seen)) if crate::clock::now_unix_ms().saturating_sub(seen) > stale_ms => return true,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "Asking when a node was last seen failed; not waiting for its release.");
                    return false;
                }
            }
        }
        false
    }

    /// Counts a failed credential on this connection and its address; the connection closes
    /// 1008 once it made `max_auth_failures` of them.
    fn auth_failed(&mut self) {
        self.auth_failures = self.auth_failures.saturating_add(1);
        self.st.auth_throttle.failed(self.client_ip);
        if self.auth_failures >= self.st.config.max_auth_failures {
            self.conn.request_close(crate::outbound::CloseRequest::TOO_MANY_AUTH_FAILURES);
        }
    }

    pub(super) fn on_reauth(&mut self, token: &str) {
        let registry = self.st.registry.load();
        let audiences = &self.st.config.jwt_audiences;
        let Some(a) = &mut self.auth else { return };
        let mut failed = false;
        let reply = match verify(&registry, token, now_unix_s(), audiences) {
            Err(e) => {
                failed = true;
                ServerFrame::ReauthFailed { error: e }
            }
            Ok(c) if c.actor.id != a.actor.id => ServerFrame::ReauthFailed { error: auth_err::ACTOR_MISMATCH },
            Ok(c) => {
                a.expires_at = c.expires_at;
                a.actor = c.actor;
                // Revalidation now checks the credential just presented (issue 5).
                a.registration.set_token_digest(c.token_digest);
                ServerFrame::ReauthOk { auth_expires_at: c.expires_at }
            }
        };
        self.conn.send(&reply);
        if failed {
            self.auth_failed();
        }
    }
}

/// The claimed record with the plain subscriptions (and lobbies) of the records that ended
/// together with it added after its own, each address once, up to `cap` entries in all (issue 31):
/// two tabs of one actor that dropped at the same moment cannot be told apart, so each
/// reconnect gets the union rather than maybe the other tab's set, and no tab's handlers listen
/// on a topic its socket lacks. Load-balanced memberships stay with their own record: a union
/// would put the actor in the group twice.
fn merge_together(
    mut record: skua_core::RestoreRecord,
    together: Vec<skua_core::RestoreRecord>,
    cap: usize,
) -> skua_core::RestoreRecord {
    for other in together {
        for t in other.topics {
            if record.topics.len() + record.lobbies.len() >= cap {
                return record;
            }
            if !t.load_balance && !record.topics.iter().any(|mine| mine.pattern == t.pattern) {
                record.topics.push(t);
            }
        }
        for l in other.lobbies {
            if record.topics.len() + record.lobbies.len() >= cap {
                return record;
            }
            if !record.lobbies.contains(&l) {
                record.lobbies.push(l);
            }
        }
    }
    record
}

/// A fresh connection record id: a random UUID, so ids never repeat across nodes and restarts.
fn new_record_id() -> RecordId {
    let id = uuid::Uuid::new_v4().simple().to_string();
    // Invariant: 32 hex digits are a slug.
    RecordId::parse(&id).expect("a UUID's hex digits are a slug")
}

#[cfg(test)]
mod tests {
    use skua_core::{RestoreRecord, RestoredTopic};

    use super::merge_together;

    fn topic(pattern: &str, load_balance: bool) -> RestoredTopic {
        RestoredTopic {
            pattern: pattern.to_owned(),
            qos: 0,
            load_balance,
            load_balance_group: None,
            raw_filters: None,
            history: None,
        }
    }

    fn record(topics: &[(&str, bool)], lobbies: &[&str]) -> RestoreRecord {
        RestoreRecord {
            topics: topics.iter().map(|(p, lb)| topic(p, *lb)).collect(),
            lobbies: lobbies.iter().map(|l| (*l).to_owned()).collect(),
            holder_last_seen_ms: None,
            door_filters: Vec::new(),
        }
    }

    fn patterns(r: &RestoreRecord) -> Vec<(&str, bool)> {
        r.topics.iter().map(|t| (t.pattern.as_str(), t.load_balance)).collect()
    }

    #[test]
    fn together_adds_plain_subscriptions_and_lobbies_once_never_load_balanced_ones() {
        let mine = record(&[("a/r/x", false), ("a/r/jobs", true)], &["l1"]);
        let other = record(&[("a/r/y", false), ("a/r/x", false), ("a/r/work", true)], &["l1", "l2"]);
        let third = record(&[("a/r/z", false), ("a/r/y", false)], &[]);
        let merged = merge_together(mine, vec![other, third], 100);
        assert_eq!(patterns(&merged), [("a/r/x", false), ("a/r/jobs", true), ("a/r/y", false), ("a/r/z", false)]);
        assert_eq!(merged.lobbies, ["l1", "l2"]);
    }

    #[test]
    fn together_stops_at_the_subscription_cap_with_the_claimed_record_first() {
        let mine = record(&[("a/r/x", false), ("a/r/w", false)], &[]);
        let other = record(&[("a/r/y", false), ("a/r/z", false)], &["l"]);
        let merged = merge_together(mine.clone(), vec![other.clone()], 3);
        assert_eq!(patterns(&merged), [("a/r/x", false), ("a/r/w", false), ("a/r/y", false)]);
        assert!(merged.lobbies.is_empty());
        assert_eq!(merge_together(mine.clone(), vec![other], 1), mine, "over the cap already: unchanged");
        assert_eq!(merge_together(mine.clone(), Vec::new(), 100), mine, "nothing ended together");
    }
}
