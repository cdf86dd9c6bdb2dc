//! A node answers no route before it serves it (issue 31, item 1): from the moment its client
//! port is bound, every `/v1` request either waits or is answered by the REST API (never the
//! edge's bare 404), and `/readyz` says ready only once `/v1` is in place.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use skua_server::{RunningNode, ServerConfig, Settings, fixtures, node};
use skua_testkit::TEST_ADMIN_KEY;
use skua_testkit::postgres::TestDatabase;

use super::{KEY, raw};

/// Asks `path` (with the dev key) on `addr` in a tight loop until `stop`, returning every
/// status seen; each request waits for its reply before the next one starts.
async fn hammer(addr: SocketAddr, path: &'static str, stop: Arc<AtomicBool>) -> Vec<(u16, String)> {
    let mut seen = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let r = raw(addr, "GET", path, Some(KEY), None).await;
        seen.push((r.status, r.text));
    }
    seen
}

/// Launches a node on `store` while `/v1/apps` and `/readyz` are asked in tight loops from
/// the moment the port is bound; checks that no `/v1` reply is the edge's 404 and that once
/// `/readyz` answered 200, `/v1/apps` does too.
async fn launch_under_load(store: &str) {
    let settings = {
        let mut layer = Settings::default();
        layer.node.listen = Some("127.0.0.1:0".into());
        layer.node.store = Some(store.into());
        layer.node.admin_key = Some(TEST_ADMIN_KEY.into());
        layer.edge.max_new_connections_per_ip_per_second = Some(1_000_000);
        layer.control.rest_rate_limit = Some(1_000_000);
        layer
    };
    let config = ServerConfig::from_layers(&[&settings]).unwrap();
    let data = fixtures::load_data(&[("dev", fixtures::DEV_FIXTURES)]).unwrap();
    let embedded = node::Embedded::default();
    let listener = tokio::net::TcpListener::bind(config.listen).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let backends = node::backends(&config, &embedded).await.unwrap();
    let registry_store = node::registry_store(&config, &embedded).await.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let api = tokio::spawn(hammer(addr, "/v1/apps", stop.clone()));
    let ready = tokio::spawn(hammer(addr, "/readyz", stop.clone()));
    let node = RunningNode::launch(&config, backends, registry_store, Some(&data), listener, None).await.unwrap();
    // A few rounds after the launch returned, so both loops have seen the node serving.
    let after = super::call(addr, "GET", "/v1/apps", None).await;
    assert_eq!(after.status, 200, "{after:?}");
    stop.store(true, Ordering::Relaxed);
    let api = api.await.unwrap();
    let ready = ready.await.unwrap();
    assert!(!api.is_empty() && !ready.is_empty());
    let early: Vec<_> = api.iter().filter(|(status, _)| *status != 200).collect();
    assert!(early.is_empty(), "/v1/apps answered before the API was in place: {early:?}");
    assert!(ready.iter().all(|(status, _)| *status == 200), "{ready:?}");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn v1_never_answers_404_while_the_node_starts_on_the_embedded_store() {
    for _ in 0..5 {
        launch_under_load("memory").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn v1_never_answers_404_while_the_node_starts_on_postgres() {
    let Some(db) = TestDatabase::migrated().await else { return };
    for _ in 0..3 {
        launch_under_load(&db.url).await;
    }
}
