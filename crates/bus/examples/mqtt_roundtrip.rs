//! Measures one node → one node through a broker: round-trip latency (publish, then wait for
//! the delivery at the other node) and sustained throughput.
//!
//! ```text
//! cargo run --release -p skua-bus --example mqtt_roundtrip -- [mqtt://127.0.0.1:1883] [messages]
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use skua_bus::{MqttBus, MqttBusConfig};
use skua_core::{
    ActorId, AppId, Bus, BusSubscription, ConnId, Envelope, EnvelopeId, NodeId, ProjectId, Publication, RoomKey,
    TopicAddress,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args.next().unwrap_or_else(|| "mqtt://127.0.0.1:1883".to_owned());
    let messages: usize = args.next().map_or(Ok(50_000), |n| n.parse())?;
    let namespace = format!("bench{}", std::process::id());
    let mut config = MqttBusConfig::new(url.clone(), namespace.clone());
    config.client_id_prefix = namespace;
    let (a, _a_rx) = MqttBus::open(config.clone(), NodeId::parse("a")?, 1024).await?;
    let (b, mut b_rx) = MqttBus::open(config, NodeId::parse("b")?, 1024).await?;
    let topic = TopicAddress {
        room: RoomKey { project: ProjectId::parse("p")?, app: AppId::parse("a")?, room: Arc::from("r") },
        topic: Arc::from("t"),
    };
    b.subscribe(&BusSubscription::Topic(topic.clone())).await?;
    println!("broker {url}");

    // Every packet on the hop is MQTT QoS 1, whatever the envelope's `qos`.
    let qos = 1;
    for size in [64usize, 1024, 16 * 1024] {
        // Round trips, one at a time.
        let mut rtts = Vec::with_capacity(2000);
        for i in 0..2000u64 {
            let start = Instant::now();
            a.publish(envelope(&topic, i, qos, size)).await?;
            b_rx.recv().await.ok_or("receiver closed")?;
            rtts.push(start.elapsed());
        }
        rtts.sort();
        let pct = |p: f64| rtts[((rtts.len() as f64 * p) as usize).min(rtts.len() - 1)];
        println!("{size} B: round trip p50 {:?}, p99 {:?}, max {:?}", pct(0.50), pct(0.99), rtts[rtts.len() - 1]);

        // Throughput: publish as fast as `publish` accepts while the other node drains. A broker
        // that falls too far behind drops messages (Mosquitto: `max_queued_messages`), so the
        // drain stops after a second without deliveries and reports what is missing.
        let start = Instant::now();
        let drain = async {
            let mut got = 0usize;
            let mut last = start.elapsed();
            while got < messages {
                match tokio::time::timeout(Duration::from_secs(1), b_rx.recv()).await {
                    Ok(Some(_)) => {
                        got += 1;
                        last = start.elapsed();
                    }
                    Ok(None) | Err(_) => break,
                }
            }
            (got, last)
        };
        let publish = async {
            for i in 0..messages as u64 {
                a.publish(envelope(&topic, 1_000_000 + i, qos, size)).await?;
            }
            Ok::<Duration, skua_core::BusError>(start.elapsed())
        };
        let (published, (got, delivered)) = tokio::join!(publish, drain);
        let published = published?;
        println!(
            "{size} B: {messages} messages published in {published:?}, {got} delivered in {delivered:?}: {:.0} msg/s end to end{}",
            got as f64 / delivered.as_secs_f64(),
            if got < messages { format!(" ({} dropped by the broker)", messages - got) } else { String::new() }
        );
    }
    let (a, b) = (a.stats(), b.stats());
    println!(
        "publisher: {} published, {} held; subscriber: {} delivered, {} duplicates",
        a.published, a.held, b.delivered, b.duplicates
    );
    Ok(())
}

fn envelope(topic: &TopicAddress, i: u64, qos: u8, size: usize) -> Arc<Envelope> {
    Arc::new(Envelope::Publication(Publication {
        history: None,
        id: EnvelopeId((u128::from(std::process::id()) << 64) | u128::from(i)),
        topic: topic.clone(),
        filter: None,
        publisher: ActorId::parse("bench").expect("valid id"),
        publisher_conn: ConnId(1),
        node: NodeId::parse("a").expect("valid id"),
        timestamp_ms: 0,
        msg_id: None,
        retain: false,
        qos,
        data: Bytes::from(vec![0x42; size]),
    }))
}
