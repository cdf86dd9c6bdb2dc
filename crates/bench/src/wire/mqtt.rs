//! MQTT 3.1.1 over WebSocket (subprotocol `mqtt`), for Mosquitto: just CONNECT, SUBSCRIBE,
//! PUBLISH at QoS 0 or 1, PUBACK and PINGREQ, encoded by hand. The broker may split or join MQTT
//! packets across WebSocket frames, so the decoder buffers. The same packets, without the
//! WebSocket, are what the `devices` scenario's MQTT devices send over plain TCP ([`device`]).

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

    /// `ack` asks for QoS 1 with packet id [`packet_id`]`(ack)`; the `PUBACK` comes back as
    /// [`Event::Acked`] carrying that packet id (not the sequence number).
    fn publish(&self, topic: &str, payload: &[u8], ack: Option<u64>) -> Bytes {
        match ack {
            Some(seq) => device::publish(topic, payload, Some(packet_id(seq))),
            None => device::publish(topic, payload, None),
        }
    }

    fn heartbeat(&self) -> Bytes {
        Bytes::from_static(&[0xc0, 0x00])
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(MqttDecoder::default())
    }
}

/// The packet id (1 … 65535) of the QoS 1 publish with sequence number `seq`.
pub fn packet_id(seq: u64) -> u16 {
    u16::try_from(seq % 65_535 + 1).unwrap_or(1)
}

/// The packets of an MQTT 3.1.1 device over plain TCP (`devices`): the bytes of the WebSocket
/// adapter's frames, with credentials and QoS 1 where the device needs them.
pub mod device {
    use bytes::Bytes;

    use super::{KEEP_ALIVE_S, mqtt_str, packet};

    /// CONNECT with a clean session and an empty client id (the broker names the session);
    /// with `password`, user name `device` and that password (Skua takes the token there).
    pub fn connect(password: Option<&str>) -> Bytes {
        let mut body = Vec::with_capacity(32 + password.map_or(0, str::len));
        mqtt_str(&mut body, b"MQTT");
        body.push(4); // protocol level 3.1.1
        body.push(if password.is_some() { 0xc2 } else { 0x02 }); // user name + password, clean session
        body.extend_from_slice(&KEEP_ALIVE_S.to_be_bytes());
        mqtt_str(&mut body, b"");
        if let Some(p) = password {
            mqtt_str(&mut body, b"device");
            mqtt_str(&mut body, p.as_bytes());
        }
        packet(0x10, &body)
    }

    /// SUBSCRIBE to `topic` at `qos` (0 or 1), packet id 1.
    pub fn subscribe(topic: &str, qos: u8) -> Bytes {
        let mut body = Vec::with_capacity(topic.len() + 5);
        body.extend_from_slice(&1u16.to_be_bytes());
        mqtt_str(&mut body, topic.as_bytes());
        body.push(qos.min(1));
        packet(0x82, &body)
    }

    /// PUBLISH of `payload` to `topic`: QoS 1 with this packet id, or QoS 0 without one.
    pub fn publish(topic: &str, payload: &[u8], packet_id: Option<u16>) -> Bytes {
        let mut body = Vec::with_capacity(topic.len() + payload.len() + 4);
        mqtt_str(&mut body, topic.as_bytes());
        if let Some(id) = packet_id {
            body.extend_from_slice(&id.to_be_bytes());
        }
        body.extend_from_slice(payload);
        packet(if packet_id.is_some() { 0x32 } else { 0x30 }, &body)
    }

    /// PUBACK of the QoS 1 publish `packet_id`.
    pub fn puback(packet_id: u16) -> Bytes {
        let id = packet_id.to_be_bytes();
        Bytes::copy_from_slice(&[0x40, 0x02, id[0], id[1]])
    }

    /// DISCONNECT: the device leaves on purpose (no will).
    pub fn disconnect() -> Bytes {
        Bytes::from_static(&[0xe0, 0x00])
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
                // A QoS 1 delivery is acknowledged at once (we never subscribe at QoS 2).
                if qos == 1 {
                    let id = u16::from_be_bytes([body[2 + tlen], body[3 + tlen]]);
                    out(Event::Reply(device::puback(id)));
                }
            }
            4 => match body.get(..2) {
                Some(&[hi, lo]) => out(Event::Acked(u64::from(u16::from_be_bytes([hi, lo])))),
                _ => bail!("malformed MQTT PUBACK"),
            },
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
    fn qos1_deliveries_are_acked_and_pubacks_reported() {
        let mut stream = device::publish("bench/r0/t", b"abc", Some(7)).to_vec();
        stream.extend_from_slice(&device::puback(9));
        let (mut payloads, mut replies, mut acked) = (Vec::new(), Vec::new(), Vec::new());
        MqttDecoder::default()
            .feed(&stream, &mut |e| match e {
                Event::Payload(p) => payloads.push(p.to_vec()),
                Event::Reply(r) => replies.push(r),
                Event::Acked(id) => acked.push(id),
                _ => {}
            })
            .unwrap();
        assert_eq!(payloads, vec![b"abc".to_vec()]);
        assert_eq!(replies, vec![device::puback(7)]);
        assert_eq!(acked, vec![9]);
        assert_eq!(packet_id(0), 1);
        assert_eq!(packet_id(65_535), 1);
    }

    #[test]
    fn connect_carries_the_token_as_password() {
        let c = device::connect(Some("tok"));
        assert_eq!(c[9], 0xc2, "user name, password, clean session");
        assert!(c.ends_with(b"\x00\x06device\x00\x03tok"));
        assert_eq!(device::connect(None)[9], 0x02);
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
