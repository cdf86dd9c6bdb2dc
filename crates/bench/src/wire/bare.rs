//! The `skua-bare` reference server's protocol, as small as a topic-aware fan-out can be:
//! - client → server `[0] topic`: subscribe; the server answers `[0]`;
//! - client → server `[n] topic(n bytes) payload`: forwarded verbatim to every other
//!   connection subscribed to `topic`;
//! - an empty frame is a heartbeat and is echoed.

use anyhow::ensure;
use bytes::Bytes;

use super::{Decoder, Event, Role, TopicKey, Wire};

/// The adapter for `skua-bare`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bare;

impl Wire for Bare {
    fn name(&self) -> &'static str {
        "bare"
    }

    fn topic(&self, key: TopicKey) -> String {
        match key {
            TopicKey::Fanout => "fanout".into(),
            TopicKey::Logged => "logged".into(),
            TopicKey::Pair(i) => format!("r{i}"),
        }
    }

    fn hello(&self, _role: Role) -> Vec<Bytes> {
        Vec::new()
    }

    fn subscribe(&self, topic: &str) -> Vec<Bytes> {
        let mut f = Vec::with_capacity(topic.len() + 1);
        f.push(0);
        f.extend_from_slice(topic.as_bytes());
        vec![Bytes::from(f)]
    }

    fn publish(&self, topic: &str, payload: &[u8], _ack: Option<u64>) -> Bytes {
        let t = &topic.as_bytes()[..topic.len().min(255)];
        let mut f = Vec::with_capacity(1 + t.len() + payload.len());
        f.push(t.len() as u8);
        f.extend_from_slice(t);
        f.extend_from_slice(payload);
        Bytes::from(f)
    }

    fn heartbeat(&self) -> Bytes {
        Bytes::new()
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(BareDecoder)
    }
}

struct BareDecoder;

impl Decoder for BareDecoder {
    fn feed(&mut self, frame: &[u8], out: &mut dyn FnMut(Event<'_>)) -> anyhow::Result<()> {
        match frame {
            [] => {}
            [0] => out(Event::Subscribed),
            [n, rest @ ..] => {
                let n = usize::from(*n);
                ensure!(rest.len() >= n, "bare frame shorter than its topic");
                out(Event::Payload(&rest[n..]));
            }
        }
        Ok(())
    }
}
