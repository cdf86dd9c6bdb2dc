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
