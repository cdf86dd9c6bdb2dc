//! Other doors into the same broker core (issue 37: MQTT devices): a connection speaking
//! another protocol drives the very [`Session`](crate::session) a WebSocket connection does,
//! with [`ClientFrame`]s it builds from its own packets. Auth, throttling, topic resolution and
//! permissions, the publish pipeline, hub subscriptions, revalidation and the N16 no-echo rule
//! are therefore the WebSocket connection's, not a copy. What the session answers arrives on
//! the connection's [`ConnHandle`] as encoded NoLag frames, which the door translates.
//!
//! A door may also be served over WebSocket on the client listener ([`WsDoor`], given in
//! [`crate::ApiRoutes::mqtt_ws`]): the upgrade is checked and admitted as a `/ws` one, and the door
//! gets the binary messages as a byte stream ([`WsIo`]).

mod ws_io;

pub use ws_io::{WsIo, WsReader, WsWriter};

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use skua_core::registry::Actor;
use skua_protocol::ClientFrame;
use tokio::sync::OwnedSemaphorePermit;

use crate::front::{IpLimits, IpSlot};
use crate::outbound::ConnHandle;
use crate::session::Session;
use crate::state::EdgeState;

/// One connection's protocol session, for a door other than the WebSocket one.
pub struct DoorSession {
    session: Session,
}

/// How a door's client asked for its session (MQTT: client identifier, clean session or clean
/// start, session expiry; docs/protocol.md N54).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoorAuth {
    /// The credential: an access token or a client JWT (N49).
    pub token: String,
    /// The session's client id, a slug (1–64 of letters, digits, `-`, `_`): a newer connection
    /// of the same actor and client id takes the session over, on any node of the cluster.
    pub client_id: Option<String>,
    /// Keep the session while the client is away: its subscriptions, and for each QoS 1/2
    /// subscription to a logged topic the messages published meanwhile (until `restore_ttl`).
    pub persistent: bool,
    /// Discard what an earlier connection of the session kept.
    pub clean: bool,
    /// How long the session is kept after the connection ends, in seconds, when the client
    /// asked for less than `restore_ttl` (MQTT 5.0 session expiry); `None`: `restore_ttl`.
    pub expiry_s: Option<u32>,
}

pub use crate::session::DoorRestored;

/// A publish in flight that finished waiting (see [`DoorSession::next_publish`]).
pub struct PublishOutcome(crate::session::Outcome);

impl DoorSession {
    /// A new unauthenticated session of `conn`, whose client is at `client_ip`.
    pub fn new(st: Arc<EdgeState>, conn: Arc<ConnHandle>, client_ip: IpAddr) -> Self {
        Self { session: Session::new(st, conn, client_ip) }
    }

    /// The session of a connection that came through `protocol`'s door (the connection lists
    /// show it).
    #[must_use]
    pub fn with_protocol(mut self, protocol: crate::revalidate::ConnProtocol) -> Self {
        self.session.protocol = protocol;
        self
    }

    /// Handles one frame exactly as a WebSocket connection's reader would.
    pub async fn handle(&mut self, frame: ClientFrame) {
        Box::pin(self.session.handle(frame)).await;
        self.session.sync_subscription_count();
    }

    /// Authenticates with a door session's options; `on_restored` learns what was resumed before
    /// the auth reply is queued. Without a client id, or with one that is not a slug, the
    /// session is neither kept nor taken over.
    pub async fn authenticate(
        &mut self,
        auth: DoorAuth,
        on_restored: impl FnOnce(DoorRestored) + Send + Sync + 'static,
    ) {
        let client_id = auth.client_id.filter(|c| skua_core::ids::is_slug(c));
        self.session.door = Some(crate::session::DoorState {
            persistent: auth.persistent && client_id.is_some(),
            clean: auth.clean,
            expiry_s: auth.expiry_s,
            filters: Vec::new(),
            present: false,
            on_restored: Some(Box::new(on_restored)),
        });
        let frame = skua_protocol::AuthFrame {
            token: auth.token,
            protocol_version: 2,
            reconnect: false,
            client_id: client_id.map_or(skua_protocol::ClientIdField::Absent, skua_protocol::ClientIdField::Given),
        };
        self.handle(ClientFrame::Auth(frame)).await;
    }

    /// Records the door's filters as its client made them (saved with a persistent session's
    /// restore record, given back by the next [`DoorRestored`]).
    pub async fn set_filters(&mut self, filters: Vec<(String, u8)>) {
        let Some(d) = &mut self.session.door else { return };
        if d.filters == filters {
            return;
        }
        d.filters = filters;
        Box::pin(self.session.save_door_filters()).await;
    }

    /// Sets how long a persistent session is kept after the connection ends, in seconds (an
    /// MQTT 5.0 `DISCONNECT`'s session expiry; at most `restore_ttl`); 0 discards it at the end.
    pub fn set_expiry(&mut self, expiry_s: u32) {
        if let Some(d) = &mut self.session.door {
            d.expiry_s = Some(expiry_s);
        }
    }

    /// Acknowledges deliveries by msgId, as an `ack` frame does (N24), without waiting for
    /// publishes in flight nor for the connection's durable task (when its queue is full the
    /// acks are stored at once).
    pub async fn ack(&mut self, msg_ids: Vec<String>) {
        Box::pin(self.session.ack_now(msg_ids)).await;
    }

    /// Whether the connection has authenticated.
    pub fn is_authed(&self) -> bool {
        self.session.is_authed()
    }

    /// When the credential expires (unix seconds), if it does.
    pub fn expires_at(&self) -> Option<u64> {
        self.session.expires_at()
    }

    /// The authenticated actor.
    pub fn actor(&self) -> Option<Arc<Actor>> {
        self.session.actor()
    }

    /// Whether the session holds a subscription to `topic` (as sent).
    pub fn is_subscribed(&self, topic: &str) -> bool {
        self.session.is_subscribed(topic)
    }

    /// Whether publishes are in flight.
    pub fn publishing(&self) -> bool {
        self.session.publishing()
    }

    /// Whether the publish pipeline is full: read nothing more until one finished.
    pub fn pipeline_full(&self) -> bool {
        self.session.pipeline_full()
    }

    /// Waits for the oldest publish in flight (cancel safe; never resolves with none in flight).
    pub async fn next_publish(&mut self) -> PublishOutcome {
        PublishOutcome(self.session.next_publish().await)
    }

    /// Finishes a publish [`Self::next_publish`] handed out: bus publish, then its receipt.
    pub async fn finish_publish(&mut self, outcome: PublishOutcome) {
        Box::pin(self.session.finish_publish(outcome.0)).await;
    }

    /// Finishes every publish in flight, in order.
    pub async fn drain_publishes(&mut self) {
        Box::pin(self.session.drain_publishes()).await;
    }

    /// Finishes every publish in flight, in order, as the connection ends (a will): receipts
    /// do not wait for room in the outbound queue.
    pub async fn drain_publishes_closing(&mut self) {
        Box::pin(self.session.drain_publishes_closing()).await;
    }

    /// Applies control-plane changes (grants, revocation, deactivation: issue 5).
    pub async fn revalidate(&mut self, delta: &skua_core::RegistryDelta) {
        Box::pin(self.session.revalidate(delta)).await;
    }

    /// Releases everything the connection holds (subscriptions, presence, restore record).
    pub async fn cleanup(&mut self) {
        Box::pin(self.session.cleanup()).await;
    }
}

/// Queues an already encoded packet of the door's own protocol on `conn`, in order with the
/// session's frames (the door's writer tells them apart). Returns whether it was queued.
pub fn push_raw(conn: &ConnHandle, packet: Bytes) -> bool {
    conn.push_uncounted(packet)
}

/// What a door's socket holds for its lifetime: a connection slot (`max_connections`, shared
/// with WebSocket connections) and its address's count.
#[derive(Debug)]
pub struct DoorAdmission {
    /// The client's address.
    pub client_ip: IpAddr,
    _slot: OwnedSemaphorePermit,
    _ip: Option<IpSlot>,
}

impl From<crate::front::Admitted> for DoorAdmission {
    fn from(a: crate::front::Admitted) -> Self {
        let (client_ip, slot, ip) = a.into_parts();
        Self { client_ip, _slot: slot, _ip: ip }
    }
}

/// A door served over WebSocket on the client listener (MQTT over WebSocket at `/mqtt`).
pub trait WsDoor: Send + Sync + 'static {
    /// The subprotocol a client must offer (`Sec-WebSocket-Protocol`), named in the 101.
    fn subprotocol(&self) -> &'static str;

    /// Serves one upgraded connection of the node `st` to its end; it holds `admitted`
    /// meanwhile. Runs on the node's connection tracker (a drain waits for it).
    fn serve(
        &self,
        st: Arc<EdgeState>,
        io: WsIo,
        admitted: DoorAdmission,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'static>>;
}

/// The node's per-address limits (`max_connections_per_ip`,
/// `max_new_connections_per_ip_per_second`), as a door's listener takes them: one count per
/// address for every door, the WebSocket one included.
#[derive(Debug, Clone)]
pub struct DoorLimits(Arc<IpLimits>);

/// Why a door refused a socket at accept; counted in `skua_front_refusals_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoorRefusal {
    /// The node is draining.
    Draining,
    /// No connection slot (`max_connections`) or open-file room left.
    Full,
    /// The address is over a per-address limit.
    Address,
    /// With `proxy_protocol`: a peer not in `trusted_proxies`, or no valid PROXY header within
    /// the header timeout.
    ProxyHeader,
}

impl DoorLimits {
    /// The node's limits, shared with its other doors.
    pub fn new(st: &EdgeState) -> Self {
        Self(st.ip_limits.clone())
    }

    /// Admits a socket accepted from `peer`: a connection slot and the address's count, as the
    /// WebSocket front takes them (trusted proxies are not counted).
    ///
    /// # Errors
    /// [`DoorRefusal`] when the node is draining, full, or the address over a limit.
    pub fn admit(&self, st: &EdgeState, peer: SocketAddr) -> Result<DoorAdmission, DoorRefusal> {
        if st.is_draining() {
            return Err(DoorRefusal::Draining);
        }
        if st.over_fd_budget() {
            st.metrics.front_refusals.inc(crate::front::reason::FD_LIMIT);
            return Err(DoorRefusal::Full);
        }
        let client_ip = crate::config::canonical(peer.ip());
        // Behind a PROXY protocol load balancer only it may connect; the client's address
        // comes with the header ([`Self::readmit`]).
        let trusted = st.config.trusted_proxies.iter().any(|r| r.contains(client_ip));
        if st.config.proxy_protocol && !trusted {
            st.metrics.front_refusals.inc(crate::front::reason::PROXY_HEADER);
            return Err(DoorRefusal::ProxyHeader);
        }
        let Ok(slot) = st.conn_slots.clone().try_acquire_owned() else {
            st.metrics.front_refusals.inc(crate::front::reason::MAX_CONNECTIONS);
            return Err(DoorRefusal::Full);
        };
        let ip = self.count(st, client_ip, trusted)?;
        Ok(DoorAdmission { client_ip, _slot: slot, _ip: ip })
    }
}

impl DoorLimits {
    /// With `proxy_protocol`: reads the PROXY header (versions 1 and 2) at the start of `io`
    /// and admits the client it names in place of the proxy that connected (`admitted`, a
    /// trusted proxy, holds the connection slot): its address, counted against the
    /// per-address limits unless it is trusted too. A header naming no client (a health
    /// check: v1 `UNKNOWN`, v2 `LOCAL`) keeps the proxy's address. Reads nothing past the
    /// header. Without `proxy_protocol`, `admitted` as it is.
    ///
    /// # Errors
    /// [`DoorRefusal::ProxyHeader`] for a malformed or cut header, [`DoorRefusal::Address`]
    /// when the client's address is over a limit.
    pub async fn readmit<R: tokio::io::AsyncRead + Unpin>(
        &self,
        st: &EdgeState,
        io: &mut R,
        admitted: DoorAdmission,
    ) -> Result<DoorAdmission, DoorRefusal> {
        if !st.config.proxy_protocol {
            return Ok(admitted);
        }
        let source = match crate::front::read_proxy_header(io).await {
            Ok(Some(source)) => source,
            Ok(None) => return Ok(admitted),
            Err(e) => {
                tracing::debug!(error = %e, "PROXY header refused on a door's listener; closed.");
                st.metrics.front_refusals.inc(crate::front::reason::PROXY_HEADER);
                return Err(DoorRefusal::ProxyHeader);
            }
        };
        let client_ip = crate::config::canonical(source.ip());
        let trusted = st.config.trusted_proxies.iter().any(|r| r.contains(client_ip));
        let ip = self.count(st, client_ip, trusted)?;
        Ok(DoorAdmission { client_ip, _slot: admitted._slot, _ip: ip })
    }

    /// `client_ip` counted against the per-address limits (nothing for a trusted proxy); a
    /// refusal is counted in `skua_front_refusals_total` with its reason.
    fn count(&self, st: &EdgeState, client_ip: IpAddr, trusted: bool) -> Result<Option<IpSlot>, DoorRefusal> {
        if trusted {
            return Ok(None);
        }
        self.0.admit(client_ip).map(Some).map_err(|r| {
            st.metrics.front_refusals.inc(r.label());
            DoorRefusal::Address
        })
    }
}

/// Runs `fut`, turning a panic into `None` (logged, counted in `skua_connection_panics_total`),
/// as the WebSocket connection tasks do.
pub async fn contained<F: std::future::Future>(fut: F, st: &EdgeState, part: &str) -> Option<F::Output> {
    crate::contain::contained(fut, &st.metrics, part).await
}
