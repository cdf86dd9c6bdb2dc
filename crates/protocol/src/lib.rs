//! The NoLag client protocol as Skua speaks it: one MessagePack map per binary WebSocket frame.
//!
//! This crate is a pure codec: no tokio, no I/O, no domain types. It owns
//! - [`codes`]: every error string, error code and close code we send, with a doc line each;
//! - [`msgpack`]: a small bounded MessagePack reader (spans, skips) and an infallible writer;
//! - [`filters`]: filter validation and normalisation (PROTOCOL-NOTES N12, N32);
//! - [`client`]: decoding of client frames into [`ClientFrame`], keeping payloads as raw bytes (N2);
//! - [`server`]: encoding of server frames from [`ServerFrame`].
//!
//! Wire types become domain types in `skua-edge`; nothing here knows about rooms or actors.

pub mod client;
pub mod codes;
pub mod filters;
pub mod msgpack;
pub mod server;

pub use client::{AuthFrame, ClientFrame, ClientIdField, DecodeError, PublishFrame, SubscribeFrame};
pub use filters::{FilterError, FilterSpec};
pub use server::{
    ErrorFrame, LobbyRoomSnapshot, MessageFrame, PresenceEntryRef, PresenceEventKind, RestoredSubscription, ServerFrame,
};

/// Largest inbound WebSocket frame we accept; larger frames close the socket with 1009 (N4).
pub const MAX_INBOUND_FRAME_BYTES: usize = 1024 * 1024;
/// Largest frame we ever send to a client: the Python SDK closes on anything bigger (N4).
pub const MAX_OUTBOUND_FRAME_BYTES: usize = 1024 * 1024;
/// Default largest publish `data` (packed msgpack), the documented 900 KB (N4).
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 921_600;
/// Highest protocol version this server speaks (N6).
pub const MAX_PROTOCOL_VERSION: u32 = 2;
