//! The NoLag client protocol as Skua speaks it: one MessagePack map per binary WebSocket frame.
//!
//! This crate is a pure codec: no tokio, no I/O, no domain types. It owns
//! - [`codes`]: every error string, error code and close code we send, with a doc line each;
//! - [`msgpack`]: a small bounded MessagePack reader (spans, skips) and an infallible writer;
//! - [`filters`]: filter validation and normalisation (docs/protocol.md N12, N32);
//! - [`client`]: decoding of client frames into [`ClientFrame`], keeping payloads as raw bytes (N2);
//! - [`server`]: encoding of server frames from [`ServerFrame`].
//!
//! Wire types become domain types in `skua-edge`; nothing here knows about rooms or actors.

pub mod client;
pub mod codes;
pub mod filters;
pub mod msgpack;
pub mod server;

pub use client::{AuthFrame, ClientFrame, ClientIdField, DecodeError, PublishFrame, Since, SubscribeFrame};
pub use filters::{FilterError, FilterSpec};
pub use server::{
    ErrorFrame, HistoryItem, LobbyRoomSnapshot, MessageFrame, PersistentRef, PresenceEntryRef, PresenceEventKind,
    RestoredSubscription, ServerFrame, ServerFrameKind,
};

/// Largest inbound WebSocket frame we accept; larger frames close the socket with 1009 (N4).
pub const MAX_INBOUND_FRAME_BYTES: usize = 1024 * 1024;
/// Largest frame we ever send to a client: the Python SDK closes on anything bigger (N4).
pub const MAX_OUTBOUND_FRAME_BYTES: usize = 1024 * 1024;
/// Default largest publish `data` (packed msgpack), the documented 900 KB (N4).
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 921_600;
/// Longest string a client may send in a field the server echoes or forwards (`topic`,
/// `msgRef`, `roomId`, `lobbyId`, `loadBalanceGroup`, `msgId`, `clientId`); longer gets
/// `invalid_frame` and is never echoed (issue 12: no outbound frame above 1 MiB).
pub const MAX_NAME_BYTES: usize = 1024;
/// Longest `token` an `auth`/`reauth` may carry; longer gets `invalid_frame`.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// Room every outbound frame keeps next to its payload: the echoed names, the filter key and
/// the frame's own fields fit in it, so a payload of at most
/// `MAX_OUTBOUND_FRAME_BYTES - FRAME_OVERHEAD_BYTES` never makes a frame above the cap.
pub const FRAME_OVERHEAD_BYTES: usize = 64 * 1024;
/// Largest `data` a publish (or presence) may carry whatever the configuration says.
pub const MAX_PAYLOAD_CEILING_BYTES: usize = MAX_OUTBOUND_FRAME_BYTES - FRAME_OVERHEAD_BYTES;
/// Highest protocol version this server speaks (N6).
pub const MAX_PROTOCOL_VERSION: u32 = 2;
