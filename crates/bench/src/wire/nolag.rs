//! NoLag (Skua): MessagePack maps in binary frames. Payloads travel as msgpack `bin` in `data`,
//! which the server forwards untouched (N2).

use anyhow::{Context, bail};
use bytes::Bytes;
use skua_protocol::msgpack::{Reader, Writer};

use super::{Decoder, Event, Role, TopicKey, Wire};

/// The NoLag adapter: which tokens each role uses and which topics the scenarios map to.
#[derive(Debug, Clone)]
pub struct Nolag {
    /// Token of publishing connections.
    pub pub_token: String,
    /// Token of subscribing connections; must be another actor than [`Self::pub_token`], since
    /// the publishing actor never receives its own messages (N16).
    pub sub_token: String,
    /// Topic of `fanout`, `idle` and `churn`.
    pub fanout_topic: String,
    /// Topic of `logged`.
    pub logged_topic: String,
    /// `logged --durable`: subscribers log in with this prefix plus a number as `clientId`
    /// (persistent sessions, each with its own durable subscription, docs/durable.md).
    pub sub_client_ids: Option<String>,
    /// The next subscriber's number (shared by the clones of this adapter).
    pub next_client: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Default for Nolag {
    /// The demo fixtures of `skua serve --dev`: bob publishes, alice subscribes.
    fn default() -> Self {
        Self {
            pub_token: "dev-token-bob".into(),
            sub_token: "dev-token-alice".into(),
            fanout_topic: "demo/general/messages".into(),
            logged_topic: "demo/general/tasks".into(),
            sub_client_ids: None,
            next_client: std::sync::Arc::default(),
        }
    }
}

/// Appends a msgpack `bin` holding `b`.
fn bin(w: &mut Writer, b: &[u8]) {
    let mut head = Vec::with_capacity(5);
    if let Ok(n) = u8::try_from(b.len()) {
        head.extend_from_slice(&[0xc4, n]);
    } else if let Ok(n) = u16::try_from(b.len()) {
        head.push(0xc5);
        head.extend_from_slice(&n.to_be_bytes());
    } else {
        head.push(0xc6);
        head.extend_from_slice(&u32::try_from(b.len()).unwrap_or(u32::MAX).to_be_bytes());
    }
    w.raw(&head).raw(b);
}

/// The contents of a msgpack `bin` value's encoding.
fn unbin(raw: &[u8]) -> anyhow::Result<&[u8]> {
    let be = |n: usize| -> anyhow::Result<usize> {
        let b = raw.get(1..1 + n).context("truncated bin")?;
        Ok(b.iter().fold(0usize, |acc, x| (acc << 8) | usize::from(*x)))
    };
    let (len, at) = match raw.first() {
        Some(0xc4) => (be(1)?, 2),
        Some(0xc5) => (be(2)?, 3),
        Some(0xc6) => (be(4)?, 5),
        _ => bail!("message data is not bin: the server re-encoded the payload"),
    };
    raw.get(at..at + len).context("truncated bin")
}

impl Wire for Nolag {
    fn name(&self) -> &'static str {
        "nolag"
    }

    fn topic(&self, key: TopicKey) -> String {
        match key {
            TopicKey::Fanout => self.fanout_topic.clone(),
            TopicKey::Logged => self.logged_topic.clone(),
            TopicKey::Pair(i) => format!("{}/r{i}/{}", crate::fixtures::APP, crate::fixtures::TOPIC),
        }
    }

    fn hello(&self, role: Role) -> Vec<Bytes> {
        let token = match role {
            Role::Publisher => &self.pub_token,
            Role::Subscriber => &self.sub_token,
        };
        let mut w = Writer::with_capacity(96);
        match (&self.sub_client_ids, role) {
            (Some(prefix), Role::Subscriber) => {
                let n = self.next_client.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                w.map(4).str("type").str("auth").str("token").str(token).str("protocolVersion").uint(2);
                w.str("clientId").str(&format!("{prefix}{n}"));
            }
            _ => {
                w.map(3).str("type").str("auth").str("token").str(token).str("protocolVersion").uint(2);
            }
        }
        vec![Bytes::from(w.into_vec())]
    }

    fn subscribe(&self, topic: &str) -> Vec<Bytes> {
        let mut w = Writer::with_capacity(64);
        w.map(3).str("type").str("subscribe").str("topic").str(topic).str("qos").uint(0);
        vec![Bytes::from(w.into_vec())]
    }

    fn publish(&self, topic: &str, payload: &[u8], ack: Option<u64>) -> Bytes {
        let mut w = Writer::with_capacity(payload.len() + topic.len() + 48);
        w.map(if ack.is_some() { 5 } else { 4 }).str("type").str("publish").str("topic").str(topic).str("qos").uint(0);
        if let Some(seq) = ack {
            w.str("msgRef").str(&seq.to_string());
        }
        w.str("data");
        bin(&mut w, payload);
        Bytes::from(w.into_vec())
    }

    fn heartbeat(&self) -> Bytes {
        Bytes::new()
    }

    fn ack(&self, msg_ids: &[String]) -> Option<Bytes> {
        let mut w = Writer::with_capacity(32 + msg_ids.iter().map(|m| m.len() + 2).sum::<usize>());
        w.map(2).str("type").str("batchAck").str("msgIds").array(msg_ids.len());
        for m in msg_ids {
            w.str(m);
        }
        Some(Bytes::from(w.into_vec()))
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(NolagDecoder)
    }
}

/// Stateless: every NoLag frame is one complete map.
struct NolagDecoder;

impl Decoder for NolagDecoder {
    fn feed(&mut self, frame: &[u8], out: &mut dyn FnMut(Event<'_>)) -> anyhow::Result<()> {
        if frame.is_empty() {
            return Ok(()); // heartbeat echo
        }
        let mut r = Reader::new(frame);
        let n = r.read_map_len()?;
        let (mut ty, mut data, mut success, mut error, mut msg_ref) = ("", None, false, None, None);
        let (mut requires_ack, mut msg_id) = (false, None);
        for _ in 0..n {
            let key = r.read_str()?;
            let value = r.skip_value()?;
            match key {
                "type" => ty = Reader::new(value).read_str()?,
                "data" => data = Some(value),
                "success" => success = Reader::new(value).read_bool().unwrap_or(false),
                "error" => error = Reader::new(value).read_str().ok(),
                "msgRef" => msg_ref = Reader::new(value).read_str().ok(),
                "requiresAck" => requires_ack = Reader::new(value).read_bool().unwrap_or(false),
                "msgId" => msg_id = Reader::new(value).read_str().ok(),
                _ => {}
            }
        }
        match ty {
            "message" => {
                out(Event::Payload(unbin(data.context("message without data")?)?));
                if requires_ack {
                    out(Event::Stored(msg_id.unwrap_or("")));
                }
            }
            "auth" if success => out(Event::Ready),
            "auth" => out(Event::Rejected(error.unwrap_or("auth failed"))),
            "subscribed" => out(Event::Subscribed),
            "published" => {
                if let Some(seq) = msg_ref.and_then(|s| s.parse().ok()) {
                    out(Event::Acked(seq));
                }
            }
            "error" => out(Event::Rejected(error.unwrap_or("error"))),
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_frames_carry_the_payload_as_bin() {
        let w = Nolag::default();
        for len in [20usize, 100, 300, 70_000] {
            let payload = vec![7u8; len];
            let f = w.publish("demo/general/messages", &payload, Some(3));
            let mut r = Reader::new(&f);
            assert_eq!(r.read_map_len().unwrap(), 5);
            let mut seen = 0;
            for _ in 0..5 {
                let k = r.read_str().unwrap();
                let v = r.skip_value().unwrap();
                if k == "data" {
                    assert_eq!(unbin(v).unwrap(), &payload[..]);
                    seen += 1;
                }
            }
            assert_eq!(seen, 1);
        }
    }

    #[test]
    fn message_frames_decode_to_their_payload() {
        let mut w = Writer::default();
        w.map(4).str("type").str("message").str("topic").str("t").str("data");
        bin(&mut w, b"abc");
        w.str("from").str("bob");
        let f = w.into_vec();
        let mut got = Vec::new();
        NolagDecoder
            .feed(&f, &mut |e| {
                if let Event::Payload(p) = e {
                    got.push(p.to_vec());
                }
            })
            .unwrap();
        assert_eq!(got, vec![b"abc".to_vec()]);
    }
}
