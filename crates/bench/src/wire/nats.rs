//! NATS client protocol over WebSocket, for nats-server's `websocket` listener: CONNECT, SUB,
//! PUB, MSG, PING and PONG. A `PING` after CONNECT and after SUB turns the server's `PONG` into
//! the login and subscription acknowledgements the scenarios wait for.

use anyhow::{Context, bail};
use bytes::Bytes;

use super::{Decoder, Event, Role, StreamBuf, TopicKey, Wire};

/// The NATS-over-WebSocket adapter.
#[derive(Debug, Clone, Copy, Default)]
pub struct NatsWs;

const CONNECT: &str = "CONNECT {\"verbose\":false,\"pedantic\":false,\"tls_required\":false,\"name\":\"skua-bench\",\
\"lang\":\"rust\",\"version\":\"0.1.0\",\"protocol\":1,\"echo\":false,\"headers\":false}\r\nPING\r\n";

impl Wire for NatsWs {
    fn name(&self) -> &'static str {
        "nats-ws"
    }

    fn topic(&self, key: TopicKey) -> String {
        match key {
            TopicKey::Fanout => "bench.fanout".into(),
            TopicKey::Logged => "bench.logged".into(),
            TopicKey::Pair(i) => format!("bench.r{i}.t"),
        }
    }

    fn hello(&self, _role: Role) -> Vec<Bytes> {
        vec![Bytes::from_static(CONNECT.as_bytes())]
    }

    fn subscribe(&self, topic: &str) -> Vec<Bytes> {
        vec![Bytes::from(format!("SUB {topic} 1\r\nPING\r\n"))]
    }

    fn publish(&self, topic: &str, payload: &[u8], _ack: Option<u64>) -> Bytes {
        let head = format!("PUB {topic} {}\r\n", payload.len());
        let mut f = Vec::with_capacity(head.len() + payload.len() + 2);
        f.extend_from_slice(head.as_bytes());
        f.extend_from_slice(payload);
        f.extend_from_slice(b"\r\n");
        Bytes::from(f)
    }

    fn heartbeat(&self) -> Bytes {
        Bytes::from_static(b"PING\r\n")
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(NatsDecoder::default())
    }
}

#[derive(Default)]
struct NatsDecoder {
    stream: StreamBuf,
    pongs: u64,
}

fn line_end(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

/// Parses whole operations from the front of `b`; returns the bytes used.
fn parse(b: &[u8], pongs: &mut u64, out: &mut dyn FnMut(Event<'_>)) -> anyhow::Result<usize> {
    let mut at = 0;
    loop {
        let rest = &b[at..];
        let Some(eol) = line_end(rest) else { return Ok(at) };
        let line = &rest[..eol];
        if let Some(args) = line.strip_prefix(b"MSG ") {
            // MSG <subject> <sid> [reply-to] <#bytes>
            let size: usize = std::str::from_utf8(args)?
                .rsplit(' ')
                .next()
                .and_then(|s| s.parse().ok())
                .context("malformed NATS MSG line")?;
            let start = eol + 2;
            let Some(payload) = rest.get(start..start + size) else { return Ok(at) };
            if rest.len() < start + size + 2 {
                return Ok(at);
            }
            out(Event::Payload(payload));
            at += start + size + 2;
            continue;
        }
        if line == b"PING" {
            out(Event::Reply(Bytes::from_static(b"PONG\r\n")));
        } else if line == b"PONG" {
            *pongs += 1;
            out(if *pongs == 1 { Event::Ready } else { Event::Subscribed });
        } else if line.starts_with(b"-ERR") {
            out(Event::Rejected(std::str::from_utf8(line).unwrap_or("-ERR")));
        } else if !(line.starts_with(b"INFO") || line == b"+OK") {
            bail!("unexpected NATS operation {:?}", String::from_utf8_lossy(&line[..line.len().min(40)]));
        }
        at += eol + 2;
    }
}

impl Decoder for NatsDecoder {
    fn feed(&mut self, frame: &[u8], out: &mut dyn FnMut(Event<'_>)) -> anyhow::Result<()> {
        let pongs = &mut self.pongs;
        self.stream.feed(frame, |b| parse(b, pongs, out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msgs_with_crlf_in_the_payload_and_split_frames_decode() {
        let payload = b"ab\r\ncd".to_vec();
        let mut stream = b"INFO {}\r\nPONG\r\n".to_vec();
        for _ in 0..2 {
            stream.extend_from_slice(format!("MSG bench.fanout 1 {}\r\n", payload.len()).as_bytes());
            stream.extend_from_slice(&payload);
            stream.extend_from_slice(b"\r\n");
        }
        stream.extend_from_slice(b"PING\r\n");
        let mut d = NatsDecoder::default();
        let (mut got, mut ready, mut replies) = (0, 0, 0);
        for chunk in stream.chunks(5) {
            d.feed(chunk, &mut |e| match e {
                Event::Payload(p) => {
                    assert_eq!(p, &payload[..]);
                    got += 1;
                }
                Event::Ready => ready += 1,
                Event::Reply(_) => replies += 1,
                _ => {}
            })
            .unwrap();
        }
        assert_eq!((got, ready, replies), (2, 1, 1));
    }
}
