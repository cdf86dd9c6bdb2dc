//! Reading the NoLag frames a session queues, for the device's writer: only the fields the
//! MQTT side needs, borrowed from the frame (no value tree, no re-encoding: a delivery's
//! payload is the `data` bytes as the publisher packed them).

use skua_protocol::msgpack::{Kind, Reader};

/// What the writer does with a queued NoLag frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// `message`: a delivery.
    Message {
        /// The topic as the device subscribed it (a concrete address).
        topic: &'a str,
        /// The packed `data` value.
        data: &'a [u8],
        /// The stored message's id, for a durable delivery (acked by the device's `PUBACK`).
        msg_id: Option<&'a str>,
        /// A redelivery (`isReplay`): sent with `DUP`.
        replay: bool,
    },
    /// `auth` with `success: true`.
    AuthOk,
    /// `auth` with `success: false` and its error string.
    AuthFailed(&'a str),
    /// `published`: a publish was accepted.
    Published {
        /// Its msgRef.
        msg_ref: &'a str,
    },
    /// `error`.
    Error {
        /// The error string.
        error: &'a str,
        /// The msgRef, for a publish's refusal.
        msg_ref: Option<&'a str>,
    },
    /// `disconnect` (token expiry) with its reason.
    Disconnect(&'a str),
    /// Anything the device does not get (`subscribed`, presence, ...), or not a frame.
    Other,
}

/// Reads `frame`'s type and the fields the MQTT side needs.
pub fn parse(frame: &[u8]) -> Frame<'_> {
    parse_inner(frame).unwrap_or(Frame::Other)
}

fn parse_inner(frame: &[u8]) -> Option<Frame<'_>> {
    let mut r = Reader::new(frame);
    let n = r.read_map_len().ok()?;
    let (mut kind, mut topic, mut data, mut success, mut error, mut msg_ref, mut reason) =
        (None, None, None, None, None, None, None);
    let (mut msg_id, mut replay) = (None, false);
    for _ in 0..n {
        let key = r.read_str().ok()?;
        match key {
            "type" => kind = Some(r.read_str().ok()?),
            "topic" if r.peek_kind().ok()? == Kind::Str => topic = Some(r.read_str().ok()?),
            "data" => data = Some(r.skip_value().ok()?),
            "success" if r.peek_kind().ok()? == Kind::Bool => success = Some(r.read_bool().ok()?),
            "error" if r.peek_kind().ok()? == Kind::Str => error = Some(r.read_str().ok()?),
            "msgRef" if r.peek_kind().ok()? == Kind::Str => msg_ref = Some(r.read_str().ok()?),
            "reason" if r.peek_kind().ok()? == Kind::Str => reason = Some(r.read_str().ok()?),
            "msgId" if r.peek_kind().ok()? == Kind::Str => msg_id = Some(r.read_str().ok()?),
            "isReplay" if r.peek_kind().ok()? == Kind::Bool => replay = r.read_bool().ok()?,
            _ => {
                r.skip_value().ok()?;
            }
        }
    }
    Some(match kind? {
        "message" => Frame::Message { topic: topic?, data: data?, msg_id, replay },
        "auth" if success == Some(true) => Frame::AuthOk,
        "auth" => Frame::AuthFailed(error.unwrap_or("access_denied")),
        "published" => Frame::Published { msg_ref: msg_ref? },
        "error" => Frame::Error { error: error?, msg_ref },
        "disconnect" => Frame::Disconnect(reason.unwrap_or("")),
        _ => Frame::Other,
    })
}

#[cfg(test)]
mod tests {
    use skua_protocol::{ErrorFrame, MessageFrame, ServerFrame};

    use super::*;

    #[test]
    fn the_frames_the_writer_needs_are_read() {
        let m = ServerFrame::Message(MessageFrame {
            topic: "demo/general/messages",
            data: &[0x81, 0xa1, b'a', 0x01],
            from: "alice",
            timestamp: 1,
            msg_id: Some("m1"),
            ..MessageFrame::default()
        })
        .encode();
        assert_eq!(
            parse(&m),
            Frame::Message {
                topic: "demo/general/messages",
                data: &[0x81, 0xa1, b'a', 0x01],
                msg_id: Some("m1"),
                replay: false
            }
        );
        let m = ServerFrame::Message(MessageFrame {
            topic: "a/b/c",
            data: &[0x01],
            from: "alice",
            timestamp: 1,
            msg_id: Some("m2"),
            is_replay: true,
            ..MessageFrame::default()
        })
        .encode();
        assert_eq!(parse(&m), Frame::Message { topic: "a/b/c", data: &[0x01], msg_id: Some("m2"), replay: true });
        let p = ServerFrame::Published { topic: "a/b/c", msg_ref: "mqtt:3", duplicate: false }.encode();
        assert_eq!(parse(&p), Frame::Published { msg_ref: "mqtt:3" });
        let e = ServerFrame::Error(ErrorFrame {
            error: "unknown_topic",
            code: Some(42940),
            topic: Some("a/b/c"),
            msg_ref: Some("mqtt:4"),
            ..ErrorFrame::default()
        })
        .encode();
        assert_eq!(parse(&e), Frame::Error { error: "unknown_topic", msg_ref: Some("mqtt:4") });
        assert_eq!(
            parse(&ServerFrame::AuthFailed { error: "token_expired" }.encode()),
            Frame::AuthFailed("token_expired")
        );
        let s = ServerFrame::Subscribed { topic: "a/b/c", load_balance: false }.encode();
        assert_eq!(parse(&s), Frame::Other);
        assert_eq!(parse(&[0x20, 2, 0, 0]), Frame::Other);
        assert_eq!(parse(&[]), Frame::Other);
    }
}
