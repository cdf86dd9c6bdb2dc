//! MQTT 3.1.1 over WebSocket (subprotocol `mqtt`), for Mosquitto: just CONNECT, SUBSCRIBE,
//! PUBLISH at QoS 0 and PINGREQ, encoded by hand. The broker may split or join MQTT packets
//! across WebSocket frames, so the decoder buffers.

use anyhow::bail;
use bytes::Bytes;

use super::{Decoder, Event, Role, StreamBuf, TopicKey, Wire};

/// The MQTT-over-WebSocket adapter.
#[derive(Debug, Clone, Copy, Default)]
pub struct MqttWs;

/// Keep-alive announced in CONNECT, seconds; heartbeats go every 20 s.
const KEEP_ALIVE_S: u16 = 60;

/// Appends MQTT's variable-length "remaining length".
fn remaining_length(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let mut b = (n % 128) as u8;
        n /= 128;
        if n > 0 {
            b |= 0x80;
        }
        out.push(b);
        if n == 0 {
            break;
        }
    }
}

fn packet(first: u8, body: &[u8]) -> Bytes {
    let mut p = Vec::with_capacity(body.len() + 5);
    p.push(first);
    remaining_length(&mut p, body.len());
    p.extend_from_slice(body);
    Bytes::from(p)
}

fn mqtt_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&u16::try_from(s.len()).unwrap_or(u16::MAX).to_be_bytes());
    out.extend_from_slice(s);
}

impl Wire for MqttWs {
    fn name(&self) -> &'static str {
        "mqtt-ws"
    }

    fn subprotocol(&self) -> Option<&'static str> {
        Some("mqtt")
    }

    fn topic(&self, key: TopicKey) -> String {
        match key {
            TopicKey::Fanout => "bench/fanout".into(),
            TopicKey::Logged => "bench/logged".into(),
            TopicKey::Pair(i) => format!("bench/r{i}/t"),
        }
    }

    fn hello(&self, _role: Role) -> Vec<Bytes> {
        let mut body = Vec::with_capacity(16);
        mqtt_str(&mut body, b"MQTT");
        body.push(4); // protocol level 3.1.1
        body.push(0x02); // clean session
        body.extend_from_slice(&KEEP_ALIVE_S.to_be_bytes());
        // An empty client id with a clean session: the broker assigns a unique one (3.1.1 §3.1.3.1).
        mqtt_str(&mut body, b"");
        vec![packet(0x10, &body)]
    }

    fn subscribe(&self, topic: &str) -> Vec<Bytes> {
        let mut body = Vec::with_capacity(topic.len() + 5);
        body.extend_from_slice(&1u16.to_be_bytes()); // packet id
        mqtt_str(&mut body, topic.as_bytes());
        body.push(0); // QoS 0
        vec![packet(0x82, &body)]
    }

    fn publish(&self, topic: &str, payload: &[u8], _ack: Option<u64>) -> Bytes {
        let mut body = Vec::with_capacity(topic.len() + payload.len() + 2);
        mqtt_str(&mut body, topic.as_bytes());
        body.extend_from_slice(payload);
        packet(0x30, &body)
    }

    fn heartbeat(&self) -> Bytes {
        Bytes::from_static(&[0xc0, 0x00])
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(MqttDecoder::default())
    }
}

#[derive(Default)]
struct MqttDecoder {
    stream: StreamBuf,
}

/// Parses whole packets from the front of `b`; returns the bytes used.
fn parse(b: &[u8], out: &mut dyn FnMut(Event<'_>)) -> anyhow::Result<usize> {
    let mut at = 0;
    loop {
        let rest = &b[at..];
        if rest.len() < 2 {
            return Ok(at);
        }
        let (mut len, mut mult, mut i) = (0usize, 1usize, 1usize);
        loop {
            let Some(&byte) = rest.get(i) else { return Ok(at) };
            len += usize::from(byte & 0x7f) * mult;
            i += 1;
            if byte & 0x80 == 0 {
                break;
            }
            mult *= 128;
            if i > 4 {
                bail!("malformed MQTT remaining length");
            }
        }
        let Some(body) = rest.get(i..i + len) else { return Ok(at) };
        match rest[0] >> 4 {
            2 if body.get(1) == Some(&0) => out(Event::Ready),
            2 => out(Event::Rejected("CONNACK refused the connection")),
            9 if body.get(2).is_some_and(|&rc| rc < 0x80) => out(Event::Subscribed),
            9 => out(Event::Rejected("SUBACK refused the subscription")),
            3 => {
                let qos = (rest[0] >> 1) & 3;
                let (Some(&hi), Some(&lo)) = (body.first(), body.get(1)) else {
                    bail!("malformed MQTT PUBLISH");
                };
                let tlen = usize::from(u16::from_be_bytes([hi, lo]));
                let start = 2 + tlen + if qos > 0 { 2 } else { 0 };
                match body.get(start..) {
                    Some(p) => out(Event::Payload(p)),
                    None => bail!("malformed MQTT PUBLISH"),
                }
            }
            _ => {} // PINGRESP and anything else
        }
        at += i + len;
    }
}

impl Decoder for MqttDecoder {
    fn feed(&mut self, frame: &[u8], out: &mut dyn FnMut(Event<'_>)) -> anyhow::Result<()> {
        self.stream.feed(frame, |b| parse(b, out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remaining_length_matches_the_spec_examples() {
        for (n, want) in [(0usize, vec![0u8]), (127, vec![0x7f]), (128, vec![0x80, 0x01]), (16_383, vec![0xff, 0x7f])] {
            let mut v = Vec::new();
            remaining_length(&mut v, n);
            assert_eq!(v, want, "{n}");
        }
    }

    #[test]
    fn publishes_split_across_frames_are_reassembled() {
        let w = MqttWs;
        let mut stream = Vec::new();
        for i in 0..3u8 {
            stream.extend_from_slice(&w.publish("bench/fanout", &[i; 200], None));
        }
        let mut d = MqttDecoder::default();
        let mut got = Vec::new();
        for chunk in stream.chunks(7) {
            d.feed(chunk, &mut |e| {
                if let Event::Payload(p) = e {
                    got.push(p.to_vec());
                }
            })
            .unwrap();
        }
        assert_eq!(got, (0..3u8).map(|i| vec![i; 200]).collect::<Vec<_>>());
    }
}
