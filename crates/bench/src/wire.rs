//! Protocol adapters: what goes into and comes out of the WebSocket frames of each server.
//!
//! A [`Wire`] builds the frames a connection sends (login, subscribe, publish, heartbeat) and
//! makes a [`Decoder`] per connection that turns received frames into [`Event`]s. Stream
//! protocols (MQTT, NATS) may split or join their packets across WebSocket frames, so decoders
//! are stateful. The scenarios only ever see this trait.

pub mod bare;
pub mod mqtt;
pub mod nats;
pub mod nolag;

use bytes::Bytes;

/// What a connection does in a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Sends messages, subscribes to nothing.
    Publisher,
    /// Subscribes, never publishes.
    Subscriber,
}

/// A scenario's name for a topic; each adapter maps it to its own topic syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicKey {
    /// The one topic of `fanout`, `idle` and `churn`.
    Fanout,
    /// The logged (stored) topic of `logged`.
    Logged,
    /// Topic `i` of `pairs`.
    Pair(usize),
}

/// Something a received frame said.
#[derive(Debug)]
pub enum Event<'a> {
    /// The login was accepted (NoLag `auth` success, MQTT CONNACK 0, NATS first PONG).
    Ready,
    /// A subscription is in effect (NoLag `subscribed`, MQTT SUBACK, NATS PONG after SUB).
    Subscribed,
    /// A delivered message's payload, exactly the bytes the publisher sent.
    Payload(&'a [u8]),
    /// The message just reported came from the store (NoLag `msgId` + `requiresAck`); its id.
    Stored(&'a str),
    /// The server accepted the publish with this sequence number (NoLag `published`).
    Acked(u64),
    /// The server refused something: a login, a subscription or a publish.
    Rejected(&'a str),
    /// A frame to send back at once (NATS `PONG` to a server `PING`).
    Reply(Bytes),
}

/// Turns one connection's received frames into events.
pub trait Decoder: Send {
    /// Feeds one binary (or text) WebSocket frame's payload.
    ///
    /// # Errors
    /// The bytes are not this protocol: the connection is unusable.
    fn feed(&mut self, frame: &[u8], out: &mut dyn FnMut(Event<'_>)) -> anyhow::Result<()>;
}

/// One protocol adapter.
pub trait Wire: Send + Sync + 'static {
    /// Short name: `nolag`, `mqtt-ws`, `nats-ws` or `bare`.
    fn name(&self) -> &'static str;
    /// The `Sec-WebSocket-Protocol` to ask for, if the server needs one.
    fn subprotocol(&self) -> Option<&'static str> {
        None
    }
    /// This adapter's topic string for `key`.
    fn topic(&self, key: TopicKey) -> String;
    /// Frames sent right after the upgrade; when not empty, the connection then waits for
    /// [`Event::Ready`].
    fn hello(&self, role: Role) -> Vec<Bytes>;
    /// Frames that subscribe to `topic`; the connection then waits for [`Event::Subscribed`].
    fn subscribe(&self, topic: &str) -> Vec<Bytes>;
    /// One publish of `payload` to `topic`. `ack` asks for an acceptance receipt carrying this
    /// sequence number, where the protocol has one (NoLag `msgRef`).
    fn publish(&self, topic: &str, payload: &[u8], ack: Option<u64>) -> Bytes;
    /// A keep-alive frame, sent every [`HEARTBEAT_EVERY`] by long-lived connections.
    fn heartbeat(&self) -> Bytes;
    /// One frame acknowledging the stored deliveries `msg_ids` ([`Event::Stored`]), where the
    /// protocol has acks (NoLag `batchAck`); `None` otherwise.
    fn ack(&self, msg_ids: &[String]) -> Option<Bytes> {
        let _ = msg_ids;
        None
    }
    /// A fresh decoder for one connection.
    fn decoder(&self) -> Box<dyn Decoder>;
}

/// How often connections send [`Wire::heartbeat`]; well inside every server's idle timeout.
pub const HEARTBEAT_EVERY: std::time::Duration = std::time::Duration::from_secs(20);

/// Buffers a stream protocol's bytes across WebSocket frames: `parse` consumes whole packets
/// from the front of a slice and returns how many bytes it used. When nothing is buffered the
/// frame is parsed in place, so the common case copies nothing.
#[derive(Debug, Default)]
pub struct StreamBuf {
    buf: Vec<u8>,
}

/// Most bytes of an incomplete packet a stream decoder keeps (a payload never needs more).
pub const MAX_PARTIAL: usize = 8 * 1024 * 1024;

impl StreamBuf {
    /// Runs `parse` over the buffered bytes followed by `frame`.
    ///
    /// # Errors
    /// What `parse` returns, or an incomplete packet larger than [`MAX_PARTIAL`].
    pub fn feed<F>(&mut self, frame: &[u8], mut parse: F) -> anyhow::Result<()>
    where
        F: FnMut(&[u8]) -> anyhow::Result<usize>,
    {
        if self.buf.is_empty() {
            let used = parse(frame)?;
            self.buf.extend_from_slice(&frame[used..]);
        } else {
            self.buf.extend_from_slice(frame);
            let used = parse(&self.buf)?;
            self.buf.drain(..used);
        }
        anyhow::ensure!(self.buf.len() <= MAX_PARTIAL, "incomplete packet larger than {MAX_PARTIAL} bytes");
        Ok(())
    }
}

/// The adapter for a protocol name given on the command line.
///
/// # Errors
/// An unknown name.
pub fn by_name(name: &str, nolag: nolag::Nolag) -> anyhow::Result<std::sync::Arc<dyn Wire>> {
    Ok(match name {
        "nolag" => std::sync::Arc::new(nolag),
        "mqtt-ws" => std::sync::Arc::new(mqtt::MqttWs),
        "nats-ws" => std::sync::Arc::new(nats::NatsWs),
        "bare" => std::sync::Arc::new(bare::Bare),
        other => anyhow::bail!("unknown protocol {other:?} (nolag, mqtt-ws, nats-ws, bare)"),
    })
}
