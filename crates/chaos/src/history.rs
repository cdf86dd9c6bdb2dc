//! The recorded history: every operation and observation of the run, with its time in
//! milliseconds since the start. Written as JSON lines next to the run's logs.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::json;

/// Which topic a publish went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// The logged topic (durable, with triggers).
    Logged,
    /// The plain topic.
    Plain,
}

impl Kind {
    /// One letter, as in the payload.
    pub fn letter(self) -> char {
        match self {
            Kind::Logged => 'L',
            Kind::Plain => 'P',
        }
    }
}

/// A message's identity: kind, publisher index, sequence number. Encoded as the payload
/// `"L:3:17"`.
pub type MsgKey = (Kind, usize, u64);

/// Encodes a key as its payload string.
pub fn encode_key(k: MsgKey) -> String {
    format!("{}:{}:{}", k.0.letter(), k.1, k.2)
}

/// Decodes a payload string.
pub fn decode_key(s: &str) -> Option<MsgKey> {
    let mut it = s.split(':');
    let kind = match it.next()? {
        "L" => Kind::Logged,
        "P" => Kind::Plain,
        _ => return None,
    };
    let p = it.next()?.parse().ok()?;
    let seq = it.next()?.parse().ok()?;
    if it.next().is_some() {
        return None;
    }
    Some((kind, p, seq))
}

/// A publish's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `published`.
    Acked,
    /// An error frame with this `error`.
    Refused(String),
    /// No answer (the connection died or stayed silent).
    Unknown,
}

/// One history entry.
#[derive(Debug, Clone)]
pub enum Ev {
    /// A publish was sent on the publisher's connection `conn` (order is promised per
    /// publishing connection: contract 4 is per publishing node).
    Sent { key: MsgKey, conn: u64, t: u64 },
    /// Its outcome.
    Outcome { key: MsgKey, outcome: Outcome, t: u64 },
    /// A consumer (group member or plain subscriber) connection got `subscribed`.
    Subscribed { consumer: String, conn: u64, node: usize, t: u64 },
    /// That connection ended (closed, failed, or went silent).
    Disconnected { consumer: String, conn: u64, why: String, t: u64 },
    /// A message reached a consumer connection. `raw` is the payload as received.
    Delivered {
        consumer: String,
        conn: u64,
        raw: String,
        key: Option<MsgKey>,
        msg_id: Option<String>,
        replay: bool,
        t: u64,
    },
    /// A trigger webhook request arrived.
    Trigger { raw: String, key: Option<MsgKey>, delivery_id: String, t: u64 },
    /// A fault began.
    FaultStart { what: String, t: u64 },
    /// That fault was healed (the process is back and listening, or resumed).
    FaultEnd { what: String, t: u64 },
    /// A presence client's intended state changed (joined or not, with a live connection):
    /// `how` is `announce`, `leave` (`data: null`) or `disconnect`, on node `node`.
    PresenceIntent { actor: String, joined: bool, how: &'static str, node: usize, t: u64 },
    /// A presence snapshot one node answered at the end.
    PresenceSeen { node: usize, actors: Vec<String>, t: u64 },
}

impl Ev {
    /// Its time.
    pub fn t(&self) -> u64 {
        match self {
            Ev::Sent { t, .. }
            | Ev::Outcome { t, .. }
            | Ev::Subscribed { t, .. }
            | Ev::Disconnected { t, .. }
            | Ev::Delivered { t, .. }
            | Ev::Trigger { t, .. }
            | Ev::FaultStart { t, .. }
            | Ev::FaultEnd { t, .. }
            | Ev::PresenceIntent { t, .. }
            | Ev::PresenceSeen { t, .. } => *t,
        }
    }

    /// One JSON line.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Ev::Sent { key, conn, t } => json!({"t": t, "ev": "sent", "msg": encode_key(*key), "conn": conn}),
            Ev::Outcome { key, outcome, t } => {
                let o = match outcome {
                    Outcome::Acked => "published".to_owned(),
                    Outcome::Refused(e) => format!("error:{e}"),
                    Outcome::Unknown => "unknown".to_owned(),
                };
                json!({"t": t, "ev": "outcome", "msg": encode_key(*key), "outcome": o})
            }
            Ev::Subscribed { consumer, conn, node, t } => {
                json!({"t": t, "ev": "subscribed", "consumer": consumer, "conn": conn, "node": node})
            }
            Ev::Disconnected { consumer, conn, why, t } => {
                json!({"t": t, "ev": "disconnected", "consumer": consumer, "conn": conn, "why": why})
            }
            Ev::Delivered { consumer, conn, raw, msg_id, replay, t, .. } => {
                json!({"t": t, "ev": "delivered", "consumer": consumer, "conn": conn, "msg": raw, "msgId": msg_id, "isReplay": replay})
            }
            Ev::Trigger { raw, delivery_id, t, .. } => {
                json!({"t": t, "ev": "trigger", "msg": raw, "deliveryId": delivery_id})
            }
            Ev::FaultStart { what, t } => json!({"t": t, "ev": "fault-start", "what": what}),
            Ev::FaultEnd { what, t } => json!({"t": t, "ev": "fault-end", "what": what}),
            Ev::PresenceIntent { actor, joined, how, node, t } => {
                json!({"t": t, "ev": "presence-intent", "actor": actor, "joined": joined, "how": how, "node": node})
            }
            Ev::PresenceSeen { node, actors, t } => {
                json!({"t": t, "ev": "presence-seen", "node": node, "actors": actors})
            }
        }
    }
}

/// The shared recorder.
#[derive(Debug, Clone)]
pub struct History {
    start: Instant,
    events: Arc<Mutex<Vec<Ev>>>,
}

impl History {
    /// A new, empty history whose clock starts now.
    pub fn new() -> Self {
        Self { start: Instant::now(), events: Arc::new(Mutex::new(Vec::new())) }
    }

    /// Milliseconds since the start.
    pub fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Appends an entry.
    pub fn push(&self, ev: Ev) {
        self.events.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(ev);
    }

    /// A copy of every entry so far.
    pub fn snapshot(&self) -> Vec<Ev> {
        self.events.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

impl Default for History {
    fn default() -> Self {
        Self::new()
    }
}
