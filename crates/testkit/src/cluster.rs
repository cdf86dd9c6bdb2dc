//! `TestCluster`: several in-process nodes sharing backends — the embedded ones, or the
//! MQTT broker and Redis named by `SKUA_TEST_MQTT_URL` / `SKUA_TEST_REDIS_URL` under a fresh
//! namespace, so parallel tests and runs never see each other.

use skua_server::node::Embedded;

use crate::server::{TestServer, TestServerBuilder};

/// Several nodes of one cluster.
#[derive(Debug)]
pub struct TestCluster {
    /// The nodes, in start order.
    pub nodes: Vec<TestServer>,
    /// The namespace they share.
    pub namespace: String,
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
        Self { nodes, namespace }
    }

    /// `n` nodes on the external MQTT broker and Redis, or `None` when they are not configured
    /// (see [`external_urls`]).
    pub async fn external(n: usize, builder: TestServerBuilder) -> Option<Self> {
        let (mqtt, redis) = external_urls()?;
        let namespace = unique_namespace();
        let embedded = Embedded::default();
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let (ns, m, r) = (namespace.clone(), mqtt.clone(), redis.clone());
            let b = builder.clone().settings(move |s| {
                s.edge.namespace = Some(ns);
                s.node.node_id = Some(format!("node-{i}"));
                s.node.bus = Some(m);
                s.node.presence = Some(r);
            });
            nodes.push(b.spawn_with(&embedded).await);
        }
        Some(Self { nodes, namespace })
    }

    /// Node `i`.
    pub fn node(&self, i: usize) -> &TestServer {
        &self.nodes[i]
    }
}
