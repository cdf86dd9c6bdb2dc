//! Fuzzing the frame handlers over a live connection: arbitrary bytes, mutated frames and
//! arbitrary msgpack maps built from the real frame types and field names. Every input is
//! answered or ignored, and the connection stays open (N3, N31); a second client is unaffected.
//!
//! All inputs stay far below 1 MiB, so no close at all is allowed (N4 would allow 1009 above it).

use std::cell::RefCell;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use rmpv::Value;
use skua_testkit::{Event, TestServer, WsClient, encode, frame};

const TOPIC: &str = "demo/general/messages";

const TYPES: &[&str] = &[
    "auth",
    "reauth",
    "subscribe",
    "unsubscribe",
    "publish",
    "setFilters",
    "presence",
    "getPresence",
    "ack",
    "batchAck",
    "lobbySubscribe",
    "lobbyUnsubscribe",
    "getLobbyPresence",
    // server frame types and junk
    "message",
    "error",
    "subscribed",
    "",
    "Publish",
    "publish\0",
    "ping",
];

const KEYS: &[&str] = &[
    "type",
    "topic",
    "data",
    "msgRef",
    "filter",
    "filters",
    "qos",
    "retain",
    "echo",
    "token",
    "protocolVersion",
    "reconnect",
    "clientId",
    "projectId",
    "loadBalance",
    "loadBalanceGroup",
    "roomId",
    "lobbyId",
    "msgId",
    "msgIds",
    "presence",
    "x",
];

/// Strings that mean something to the server, so handlers get past their first checks.
const MEANINGFUL: &[&str] = &[
    "demo/general/messages",
    "demo/random/status",
    "demo/ops/messages",
    "demo/nope/messages",
    "demo/general",
    "general",
    "random",
    "ops",
    "online",
    "dev-token-alice",
    "dev-token-bob",
    "worker-1",
    "red",
    "a/b",
    "#",
    "",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Nil),
        any::<bool>().prop_map(Value::Boolean),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (0i64..4).prop_map(Value::from),
        any::<f64>().prop_map(Value::F64),
        any::<f32>().prop_map(Value::F32),
        any::<String>().prop_map(Value::from),
        prop::sample::select(MEANINGFUL).prop_map(Value::from),
        prop::collection::vec(any::<u8>(), 0..64).prop_map(Value::Binary),
        (any::<i8>(), prop::collection::vec(any::<u8>(), 0..20)).prop_map(|(t, d)| Value::Ext(t, d)),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(6, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((inner.clone(), inner), 0..5).prop_map(Value::Map),
        ]
    })
}

/// A value nested `depth` arrays deep (beyond the server's nesting cap for large depths).
fn deep(depth: usize, wrap_in_map: bool) -> Value {
    let mut v = Value::from(1);
    for _ in 0..depth {
        v = Value::Array(vec![v]);
    }
    if wrap_in_map {
        frame! {"type" => "publish", "topic" => TOPIC, "data" => v}
    } else {
        v
    }
}

fn key() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => prop::sample::select(KEYS).prop_map(Value::from),
        1 => leaf(),
    ]
}

fn type_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => prop::sample::select(TYPES).prop_map(Value::from),
        1 => leaf(),
    ]
}

fn map_frame() -> impl Strategy<Value = Value> {
    (prop::option::weighted(0.9, type_value()), prop::collection::vec((key(), value()), 0..8)).prop_map(|(ty, rest)| {
        let mut entries = Vec::new();
        if let Some(t) = ty {
            entries.push((Value::from("type"), t));
        }
        entries.extend(rest);
        Value::Map(entries)
    })
}

/// A plausible value for the field `name`: mostly well-typed, sometimes anything.
fn field(name: &'static str) -> BoxedStrategy<Value> {
    let word = || prop::sample::select(MEANINGFUL).prop_map(Value::from);
    let one_of = |choices: &'static [&'static str]| {
        prop_oneof![12 => prop::sample::select(choices).prop_map(Value::from), 1 => leaf()].boxed()
    };
    match name {
        "topic" => one_of(&[
            "demo/general/messages",
            "demo/random/status",
            "demo/general/tasks",
            "demo/ops/messages",
            "demo/nope/messages",
            "demo/general",
        ]),
        "roomId" => one_of(&["general", "random", "ops", "nope"]),
        "lobbyId" => one_of(&["online", "nope"]),
        "token" => one_of(&["dev-token-alice", "dev-token-bob", "nope"]),
        "filter" => one_of(&["red", "Blue", "a/b", ""]),
        "msgRef" | "msgId" | "loadBalanceGroup" | "clientId" => one_of(MEANINGFUL),
        "filters" | "msgIds" => prop_oneof![
            10 => prop::collection::vec(
                prop_oneof![8 => word(), 2 => prop::collection::vec(word(), 0..4).prop_map(Value::Array), 1 => leaf()],
                0..5
            )
            .prop_map(Value::Array),
            1 => leaf(),
        ]
        .boxed(),
        "data" | "presence" => prop_oneof![
            6 => prop::collection::vec((prop::sample::select(KEYS).prop_map(Value::from), value()), 0..4).prop_map(Value::Map),
            1 => value(),
        ]
        .boxed(),
        "qos" | "protocolVersion" => prop_oneof![8 => (-1i64..4).prop_map(Value::from), 1 => leaf()].boxed(),
        "retain" | "echo" | "reconnect" | "loadBalance" => prop_oneof![8 => any::<bool>().prop_map(Value::Boolean), 1 => leaf()].boxed(),
        _ => value().boxed(),
    }
}

/// A frame of a real type with plausible fields, so the handlers get past their first checks.
fn structured_frame() -> impl Strategy<Value = Value> {
    let fields: Vec<BoxedStrategy<Option<(Value, Value)>>> = KEYS
        .iter()
        .filter(|k| **k != "type")
        .map(|k| {
            let p = match *k {
                "topic" | "data" | "token" | "roomId" | "lobbyId" | "msgId" | "msgIds" => 0.85,
                _ => 0.15,
            };
            prop::option::weighted(p, field(k).prop_map(move |v| (Value::from(*k), v))).boxed()
        })
        .collect();
    (prop::sample::select(&TYPES[..13]), fields).prop_map(|(ty, fields)| {
        let mut entries = vec![(Value::from("type"), Value::from(ty))];
        entries.extend(fields.into_iter().flatten());
        Value::Map(entries)
    })
}

/// One input frame: binary bytes or a text frame.
#[derive(Debug, Clone)]
enum Input {
    Binary(Vec<u8>),
    Text(String),
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        // arbitrary bytes (never empty: that is a heartbeat)
        2 => prop::collection::vec(any::<u8>(), 1..256).prop_map(Input::Binary),
        // frames of real types with plausible fields
        12 => structured_frame().prop_map(|v| Input::Binary(encode(&v))),
        // arbitrary maps of real types and field names
        4 => map_frame().prop_map(|v| Input::Binary(encode(&v))),
        // arbitrary non-map values
        1 => value().prop_map(|v| Input::Binary(encode(&v))).prop_filter("not a heartbeat", |i| !matches!(i, Input::Binary(b) if b.is_empty())),
        // a valid-looking map with a few bytes overwritten and maybe cut short
        2 => (map_frame(), prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4), any::<Option<prop::sample::Index>>())
            .prop_map(|(v, edits, cut)| {
                let mut b = encode(&v);
                for (i, byte) in edits {
                    let at = i.index(b.len());
                    b[at] = byte;
                }
                if let Some(c) = cut {
                    b.truncate(c.index(b.len()).max(1));
                }
                Input::Binary(b)
            }),
        // deep nesting, as a whole frame and inside data
        1 => (0usize..100, any::<bool>()).prop_map(|(d, m)| Input::Binary(encode(&deep(d, m)))),
        1 => any::<String>().prop_map(Input::Text),
    ]
}

/// Sends a heartbeat and waits for its echo, skipping whatever the inputs caused. Any close or
/// end of the connection fails the case.
async fn heartbeat_round_trip(c: &mut WsClient) -> Result<(), TestCaseError> {
    c.heartbeat().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match c.next_event_within(left).await {
            Some(Event::Heartbeat) => return Ok(()),
            Some(Event::Frame(f)) => {
                if f.ty() == "error" && f.get("error").as_str().is_none() {
                    return Err(TestCaseError::fail(format!("error frame without an error string: {f:?}")));
                }
                if f.ty().is_empty() {
                    return Err(TestCaseError::fail(format!("frame without a type: {f:?}")));
                }
            }
            Some(other) => return Err(TestCaseError::fail(format!("connection closed: {other:?}"))),
            None => return Err(TestCaseError::fail("no heartbeat echo within 5 s")),
        }
    }
}

#[test]
fn fuzzed_frames_are_answered_or_ignored_and_never_close_the_connection() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let server = rt.block_on(TestServer::start());
    let fuzzed = RefCell::new(Some(rt.block_on(server.auth("dev-token-alice"))));

    let config = Config {
        cases: 64,
        failure_persistence: None,
        // The cases share one connection: a shrunk case would run on a connection the failing
        // one already broke, so report the original input instead.
        max_shrink_iters: 0,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&prop::collection::vec(input(), 1..5), |inputs| {
        let Some(mut c) = fuzzed.borrow_mut().take() else {
            return Err(TestCaseError::fail("an earlier case broke the connection"));
        };
        let outcome = rt.block_on(async {
            for i in &inputs {
                match i {
                    Input::Binary(b) => c.send_bytes(b.clone()).await,
                    Input::Text(t) => c.send_text(t).await,
                }
            }
            heartbeat_round_trip(&mut c).await
        });
        if outcome.is_ok() {
            *fuzzed.borrow_mut() = Some(c);
        }
        outcome
    });
    if let Err(e) = result {
        panic!("{e}");
    }

    rt.block_on(async {
        // The fuzzed connection still serves requests.
        let mut c = fuzzed.borrow_mut().take().expect("fuzzed connection");
        c.send(frame! {"type" => "subscribe", "topic" => "demo/random/events"}).await;
        let sub = c.next_of("subscribed").await;
        assert_eq!(sub.str("topic"), "demo/random/events");
        // Two untouched clients still do a full round trip.
        let mut bob = server.auth("dev-token-bob").await;
        let mut carol = server.auth("dev-token-carol").await;
        bob.subscribe(TOPIC).await;
        carol.publish_acked(TOPIC, Value::from("after the fuzz")).await;
        // The fuzzed client may have left a retained message on TOPIC: bob gets it first.
        let m = loop {
            let m = bob.expect("message").await;
            if m.get("from").as_str() == Some("carol") {
                break m;
            }
        };
        assert_eq!(m.get("data").as_str(), Some("after the fuzz"));
        drop(c);
        drop(server);
    });
}
