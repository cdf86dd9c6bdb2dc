//! Error strings, error codes and close codes of the NoLag protocol.
//!
//! Every string here is sent byte for byte; tests compare against these constants and against
//! literal copies of the reference documents. A retired code is never reused.

/// Error strings carried in the `error` field of `error` frames.
pub mod error {
    /// A publish over the per-connection rate limit (code 42910).
    pub const RATE_LIMIT_EXCEEDED: &str = "rate_limit_exceeded";
    /// The project's monthly message quota is used up (code 42920).
    pub const MONTHLY_QUOTA_EXCEEDED: &str = "monthly_quota_exceeded";
    /// A publish payload above the size limit (code 42930, carries `maxSizeBytes`).
    pub const MESSAGE_TOO_LARGE: &str = "message_too_large";
    /// The room/topic is unknown or not accessible (code 42940, protocol v2 only).
    pub const UNKNOWN_TOPIC: &str = "unknown_topic";
    /// What a v1 client gets instead of `unknown_topic`; also an unreachable lobby (N7, N35).
    pub const NOT_AUTHORIZED: &str = "not_authorized";
    /// Any frame other than `auth` before a successful auth.
    pub const NOT_AUTHENTICATED: &str = "not_authenticated";
    /// `setFilters` on a topic this connection has not subscribed.
    pub const NOT_SUBSCRIBED: &str = "not_subscribed";
    /// A filter value is empty, malformed or contains a reserved character (N12).
    pub const INVALID_FILTER_CHARS: &str = "invalid_filter_chars (/, #, +, | not allowed)";
    /// A filter value above 256 bytes or a filter list above 32 KiB (Skua addition, issue 12:
    /// filters are echoed and forwarded, so they are bounded).
    pub const FILTER_TOO_LONG: &str = "filter_too_long (max 256 bytes per value, 32768 per list)";
    /// More than 100 filters on one subscription or publish (N12).
    pub const TOO_MANY_FILTERS: &str = "too_many_filters (max 100)";
    /// An undecodable or malformed frame (N3, N31).
    pub const INVALID_FRAME: &str = "invalid_frame";
    /// An `auth` frame on an already authenticated connection (N8).
    pub const ALREADY_AUTHENTICATED: &str = "already_authenticated";
    /// The message bus is unreachable and the publish could not be accepted.
    pub const BROKER_UNAVAILABLE: &str = "broker_unavailable";
    /// A subscribe beyond the per-connection subscription limit (Skua addition; see docs/protocol.md).
    pub const TOO_MANY_SUBSCRIPTIONS: &str = "too_many_subscriptions";
    /// Skua addition: a retained publish beyond the topic's or the node's retained caps
    /// (`max_retained_per_topic`, `max_retained_bytes_per_topic`, `max_retained_bytes`);
    /// nothing was published. The hint names the cap.
    pub const RETAINED_LIMIT_EXCEEDED: &str = "retained_limit_exceeded";
    /// Skua addition (issue 33): a `persistent: true` presence that would add a stored member
    /// while its project holds `presence_max_members_per_project`; nothing was announced or
    /// stored. Replacing a member's own record is never refused.
    pub const PRESENCE_LIMIT_EXCEEDED: &str = "presence_limit_exceeded";
    /// Skua addition: the message store is unreachable, so a logged-topic publish (or a
    /// persistent session's subscribe to one) was refused; nothing was stored.
    pub const STORE_UNAVAILABLE: &str = "store_unavailable";
    /// Skua addition (issue 19): a publish's `idempotencyKey` is empty or longer than
    /// `idempotency_max_key_length`; nothing was published.
    pub const INVALID_IDEMPOTENCY_KEY: &str = "invalid_idempotency_key";
    /// A wake request caused by a publish failed (N47); the publish itself stands.
    pub const WAKE_FAILED: &str = "wake_failed";
}

/// Numeric error codes carried in the `code` field (N7: sent to every protocol version).
pub mod code {
    /// `rate_limit_exceeded`.
    pub const RATE_LIMIT_EXCEEDED: u32 = 42910;
    /// `monthly_quota_exceeded`.
    pub const MONTHLY_QUOTA_EXCEEDED: u32 = 42920;
    /// `message_too_large`.
    pub const MESSAGE_TOO_LARGE: u32 = 42930;
    /// `unknown_topic` (v2 only).
    pub const UNKNOWN_TOPIC: u32 = 42940;
    /// `wake_failed` (N47).
    pub const WAKE_FAILED: u32 = 42950;
}

/// Failure strings of the `auth` and `reauth` replies.
pub mod auth {
    /// Unknown token, bad signature, unknown actor, deactivated actor (N38).
    pub const ACCESS_DENIED: &str = "access_denied";
    /// The credential could not be checked (backend failure).
    pub const AUTHENTICATION_FAILED: &str = "authentication_failed";
    /// The connection could not be set up after the credential was accepted.
    pub const CONNECTION_FAILED: &str = "connection_failed";
    /// The client token (JWT) is expired (N38).
    pub const TOKEN_EXPIRED: &str = "token_expired";
    /// The project is at its connection limit.
    pub const CONNECTION_LIMIT_REACHED: &str = "connection_limit_reached";
    /// The message bus is unreachable.
    pub const BROKER_UNAVAILABLE: &str = "broker_unavailable";
    /// The `clientId` is not letters, digits, `-`, `_` of at most 64 characters (N9).
    pub const INVALID_CLIENT_ID: &str = "invalid_client_id";
    /// `reauth` with a token of another actor.
    pub const ACTOR_MISMATCH: &str = "actor_mismatch";
}

/// WebSocket close codes we send (N28). Grouped by what the client should do next.
pub mod close {
    /// Reconnect: the node is draining (SIGTERM). Reason `server_restart`.
    pub const SERVER_RESTART: u16 = 1012;
    /// Terminal for this frame: an inbound frame above 1 MiB (N4).
    pub const MESSAGE_TOO_BIG: u16 = 1009;
    /// Terminal: too many failed `auth`s on this connection, or no `auth` within
    /// `auth_timeout` (Skua additions; the reason says which).
    pub const POLICY_VIOLATION: u16 = 1008;
    /// Reconnect: the server hit an internal error handling this connection (a defect, logged).
    pub const INTERNAL_ERROR: u16 = 1011;
    /// Terminal: the client broke RFC 6455 framing (unmasked frame, reserved bits or opcode,
    /// fragmented or oversized control frame, a continuation with nothing to continue).
    /// Reason `protocol_error`.
    pub const PROTOCOL_ERROR: u16 = 1002;
    /// Terminal: a text frame or a close reason that is not valid UTF-8. Reason `invalid_payload`.
    pub const INVALID_PAYLOAD: u16 = 1007;
    /// Reconnect: 60 s (configurable) without any inbound frame. Reason `idle_timeout`.
    pub const IDLE_TIMEOUT: u16 = 4000;
    /// Terminal: periodic revalidation of the actor failed; the reason says why.
    pub const REVALIDATION_FAILED: u16 = 4001;
    /// Terminal: the project is over its connection limit.
    pub const CONNECTION_LIMIT: u16 = 4002;
    /// Reconnect with a fresh token: the client token expired. A `disconnect` frame precedes it.
    pub const TOKEN_EXPIRED: u16 = 4003;
    /// Reconnect: the connection's outbound queue overflowed. Reason `slow_consumer`.
    pub const SLOW_CONSUMER: u16 = 4008;
    /// Skua addition: a newer connection claimed this clientId session.
    pub const SESSION_TAKEN_OVER: u16 = 4009;
}

/// Reasons sent in close frames and `disconnect` frames.
pub mod reason {
    /// With close 1012.
    pub const SERVER_RESTART: &str = "server_restart";
    /// With close 4000.
    pub const IDLE_TIMEOUT: &str = "idle_timeout";
    /// With close 4003 and in the preceding `disconnect` frame.
    pub const TOKEN_EXPIRED: &str = "token_expired";
    /// With close 4008.
    pub const SLOW_CONSUMER: &str = "slow_consumer";
    /// Skua addition: a newer connection claimed this clientId session.
    pub const SESSION_TAKEN_OVER: &str = "session_taken_over";
    /// With close 1009.
    pub const MESSAGE_TOO_BIG: &str = "message_too_big";
    /// With close 1008: the connection made more than `max_auth_failures` failed auths.
    pub const TOO_MANY_AUTH_FAILURES: &str = "too_many_auth_failures";
    /// With close 1008: no successful auth within `auth_timeout`.
    pub const AUTH_TIMEOUT: &str = "auth_timeout";
    /// With close 1011.
    pub const INTERNAL_ERROR: &str = "internal_error";
    /// With close 1002.
    pub const PROTOCOL_ERROR: &str = "protocol_error";
    /// With close 1007.
    pub const INVALID_PAYLOAD: &str = "invalid_payload";
    /// With close 4002.
    pub const CONNECTION_LIMIT_REACHED: &str = "connection_limit_reached";
    /// With close 4001: the actor's token no longer exists.
    pub const TOKEN_NOT_FOUND: &str = "token_not_found";
    /// With close 4001: the actor's token was revoked (actor deactivated).
    pub const TOKEN_REVOKED: &str = "token_revoked";
    /// With close 4001: the actor's project no longer exists.
    pub const PROJECT_NOT_FOUND: &str = "project_not_found";
    /// With close 4001: the actor's access scope was deactivated.
    pub const SCOPE_INACTIVE: &str = "scope_inactive";
}

/// The `type` strings of client frames.
pub mod client_type {
    /// `auth`.
    pub const AUTH: &str = "auth";
    /// `reauth`.
    pub const REAUTH: &str = "reauth";
    /// `subscribe`.
    pub const SUBSCRIBE: &str = "subscribe";
    /// `unsubscribe`.
    pub const UNSUBSCRIBE: &str = "unsubscribe";
    /// `publish`.
    pub const PUBLISH: &str = "publish";
    /// `setFilters`.
    pub const SET_FILTERS: &str = "setFilters";
    /// `presence`.
    pub const PRESENCE: &str = "presence";
    /// `getPresence`.
    pub const GET_PRESENCE: &str = "getPresence";
    /// `ack`.
    pub const ACK: &str = "ack";
    /// `batchAck`.
    pub const BATCH_ACK: &str = "batchAck";
    /// `lobbySubscribe`.
    pub const LOBBY_SUBSCRIBE: &str = "lobbySubscribe";
    /// `lobbyUnsubscribe`.
    pub const LOBBY_UNSUBSCRIBE: &str = "lobbyUnsubscribe";
    /// `getLobbyPresence`.
    pub const GET_LOBBY_PRESENCE: &str = "getLobbyPresence";
    /// `history` (issue 19).
    pub const HISTORY: &str = "history";
}
