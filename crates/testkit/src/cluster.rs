//! `TestCluster`: several in-process nodes sharing backends — the embedded ones, or the
//! production trio: the MQTT broker and Redis named by `SKUA_TEST_MQTT_URL` /
//! `SKUA_TEST_REDIS_URL` under a fresh namespace, so parallel tests and runs never see each
//! other, and a fresh database on `SKUA_TEST_POSTGRES_URL`.

use skua_server::node::Embedded;

use crate::server::{TestServer, TestServerBuilder};

/// Several nodes of one cluster.
#[derive(Debug)]
pub struct TestCluster {
    /// The nodes, in start order.
    pub nodes: Vec<TestServer>,
    /// The namespace they share.
    pub namespace: String,
    /// The external cluster's database (dropped after the nodes, with the cluster).
    pub database: Option<crate::postgres::TestDatabase>,
}

/// The external services' URLs, or `None` (after a loud line) when a variable is unset.
///
/// # Panics
/// When a variable is unset and `CI=true`: under CI a missing service is a failure.
pub fn external_urls() -> Option<(String, String)> {
    let mqtt = std::env::var("SKUA_TEST_MQTT_URL").ok().filter(|s| !s.is_empty());
    let redis = std::env::var("SKUA_TEST_REDIS_URL").ok().filter(|s| !s.is_empty());
    match (mqtt, redis) {
        (Some(m), Some(r)) => Some((m, r)),
        _ => {
            crate::skip::skip("cluster test needs SKUA_TEST_MQTT_URL and SKUA_TEST_REDIS_URL");
            None
        }
    }
}

/// A fresh namespace for one test.
pub fn unique_namespace() -> String {
    format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..16])
}

impl TestCluster {
    /// `n` nodes on shared embedded backends (one process, no services needed).
    pub async fn embedded(n: usize, builder: TestServerBuilder) -> Self {
        let embedded = Embedded::default();
        let namespace = unique_namespace();
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let ns = namespace.clone();
            let b = builder.clone().settings(move |s| {
                s.edge.namespace = Some(ns);
                s.node.node_id = Some(format!("node-{i}"));
            });
            nodes.push(b.spawn_with(&embedded).await);
        }
        Self { nodes, namespace, database: None }
    }

    /// `n` nodes on the external MQTT broker and Redis and a fresh migrated Postgres database
    /// (unless `builder` names a store), as production runs a cluster (issue 35: not a shared
    /// in-memory store, which production refuses), or `None` when they are not configured (see
    /// [`external_urls`] and [`crate::postgres::TestDatabase::migrated`]).
    pub async fn external(n: usize, builder: TestServerBuilder) -> Option<Self> {
        let (mqtt, redis) = external_urls()?;
        let database = crate::postgres::TestDatabase::migrated().await?;
        let namespace = unique_namespace();
        let embedded = Embedded::default();
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let (ns, m, r, store) = (namespace.clone(), mqtt.clone(), redis.clone(), database.url.clone());
            let b = builder.clone().settings(move |s| {
                s.edge.namespace = Some(ns);
                s.node.node_id = Some(format!("node-{i}"));
                s.node.bus = Some(m);
                s.node.presence = Some(r);
                s.node.store.get_or_insert(store);
            });
            nodes.push(b.spawn_with(&embedded).await);
        }
        Some(Self { nodes, namespace, database: Some(database) })
    }

    /// Node `i`.
    pub fn node(&self, i: usize) -> &TestServer {
        &self.nodes[i]
    }
}

impl Drop for TestCluster {
    /// An external cluster's retained messages are cleared from the shared broker once its
    /// nodes are gone (issue 35: they accumulated there, one namespace per test).
    fn drop(&mut self) {
        if self.database.is_none() {
            return;
        }
        let Some((mqtt, _)) = external_urls() else { return };
        self.nodes.clear();
        let namespace = self.namespace.clone();
        // Drop may run inside the test's runtime: the clearing gets a runtime of its own.
        let cleared = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(clear_retained(&mqtt, &namespace))
        })
        .join();
        match cleared {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => eprintln!("clearing the retained messages of namespace {}: {e}", self.namespace),
            Err(_) => eprintln!("clearing the retained messages of namespace {} panicked", self.namespace),
        }
    }
}

/// Clears every retained message under `<namespace>/#` on the broker at `url` (mqtt://host:port)
/// and returns how many. The broker sends the retained messages when the subscription is made;
/// a marker published after the SUBACK comes back behind them (one connection, in order), so no
/// quiet window decides when all were seen.
///
/// # Errors
/// When the broker cannot be reached or does not answer within 10 s.
pub async fn clear_retained(url: &str, namespace: &str) -> Result<usize, String> {
    use rumqttc::v5::mqttbytes::QoS;
    use rumqttc::v5::mqttbytes::v5::Packet;
    use rumqttc::v5::{AsyncClient, Event, MqttOptions};

    let rest = url.strip_prefix("mqtt://").ok_or_else(|| format!("not an mqtt:// url: {url}"))?;
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) => (h, p.trim_end_matches('/').parse::<u16>().map_err(|e| format!("port of {url}: {e}"))?),
        None => (rest, 1883),
    };
    let id = format!("clear-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let (client, mut events) = AsyncClient::new(MqttOptions::new(id, host, port), 64);
    let marker = format!("{namespace}/testkit-clear/{}", uuid::Uuid::new_v4().simple());
    let work = async {
        let mut topics = std::collections::BTreeSet::new();
        client.subscribe(format!("{namespace}/#"), QoS::AtLeastOnce).await.map_err(|e| e.to_string())?;
        loop {
            match events.poll().await.map_err(|e| e.to_string())? {
                Event::Incoming(Packet::SubAck(_)) => {
                    client
                        .publish(marker.clone(), QoS::AtMostOnce, false, "marker")
                        .await
                        .map_err(|e| e.to_string())?;
                }
                Event::Incoming(Packet::Publish(p)) => {
                    let topic = String::from_utf8_lossy(&p.topic).into_owned();
                    if topic == marker {
                        break;
                    }
                    if p.retain && !p.payload.is_empty() {
                        topics.insert(topic);
                    }
                }
                _ => {}
            }
        }
        for topic in &topics {
            client.publish(topic.clone(), QoS::AtLeastOnce, true, Vec::<u8>::new()).await.map_err(|e| e.to_string())?;
        }
        // Each clear is acknowledged before the connection goes.
        let mut acked = 0;
        while acked < topics.len() {
            if let Event::Incoming(Packet::PubAck(_)) = events.poll().await.map_err(|e| e.to_string())? {
                acked += 1;
            }
        }
        let _ = client.disconnect().await;
        Ok::<usize, String>(topics.len())
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), work)
        .await
        .map_err(|_| "no answer within 10 s".to_owned())?
}
