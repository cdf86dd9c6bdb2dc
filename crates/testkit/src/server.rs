//! `TestServer`: a real node, in process, on `127.0.0.1:0` (STYLE.md §8).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use skua_core::SharedRegistry;
use skua_edge::EdgeState;
use skua_server::{RunningNode, ServerConfig, Settings, fixtures, node};

use crate::client::WsClient;

/// Builds a [`TestServer`]: dev fixtures plus extra fixtures, with settings overridden.
#[derive(Debug, Default, Clone)]
pub struct TestServerBuilder {
    settings: Settings,
    extra_fixtures: Vec<String>,
    edge: Vec<fn(&mut skua_edge::EdgeConfig)>,
    grpc: bool,
    publish_observers: Vec<Arc<dyn skua_edge::publish::PublishObserver>>,
}

/// The admin API key of test servers started with [`TestServerBuilder::grpc`].
pub const TEST_ADMIN_KEY: &str = "test-admin-key-0123456789";

impl TestServerBuilder {
    /// Overrides settings as a config file would.
    pub fn settings(mut self, f: impl FnOnce(&mut Settings)) -> Self {
        f(&mut self.settings);
        self
    }

    /// Adds a fixtures file's text (loaded after the dev fixtures).
    pub fn fixtures(mut self, toml: &str) -> Self {
        self.extra_fixtures.push(toml.to_owned());
        self
    }

    /// Also serves the control plane's gRPC API on `127.0.0.1:0` ([`TestServer::grpc_addr`]),
    /// with the admin key [`TEST_ADMIN_KEY`].
    pub fn grpc(mut self) -> Self {
        self.grpc = true;
        self
    }

    /// Adjusts the resolved edge configuration directly (for values with no setting).
    pub fn edge(mut self, f: fn(&mut skua_edge::EdgeConfig)) -> Self {
        self.edge.push(f);
        self
    }

    /// Attaches a publish observer (told of every accepted publish).
    pub fn publish_observer(mut self, o: Arc<dyn skua_edge::publish::PublishObserver>) -> Self {
        self.publish_observers.push(o);
        self
    }

    /// Starts the server.
    ///
    /// # Panics
    /// When the configuration or fixtures are invalid, or the port cannot be bound.
    pub async fn spawn(self) -> TestServer {
        self.spawn_with(&node::Embedded::default()).await
    }

    /// Starts the server, taking its embedded slots from `embedded` (nodes sharing one
    /// `Embedded` form an in-process cluster).
    ///
    /// # Panics
    /// As [`Self::spawn`].
    pub async fn spawn_with(&self, embedded: &node::Embedded) -> TestServer {
        let mut settings = self.settings.clone();
        settings.node.listen = Some("127.0.0.1:0".into());
        if settings.node.store.is_none() {
            settings.node.store = Some("memory".into());
        }
        // As `--dev` does: the tests' webhook and wake receivers are local.
        if settings.webhooks.webhook_allow_loopback.is_none() {
            settings.webhooks.webhook_allow_loopback = Some(true);
        }
        if settings.members.wake_allowed_hosts.is_none() {
            settings.members.wake_allowed_hosts = Some(vec!["127.0.0.0/8".into(), "::1".into(), "localhost".into()]);
        }
        let mut config = ServerConfig::from_layers(&[&settings]).expect("test configuration");
        for f in &self.edge {
            f(&mut config.edge);
        }
        let mut sources = vec![("dev", fixtures::DEV_FIXTURES)];
        for f in &self.extra_fixtures {
            sources.push(("test", f));
        }
        let data = fixtures::load_data(&sources).expect("test fixtures");
        config.admin_key = Some(skua_server::config::AdminKey(TEST_ADMIN_KEY.into()));
        let listener = tokio::net::TcpListener::bind(config.listen).await.expect("bind 127.0.0.1:0");
        let grpc = if self.grpc {
            Some(tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0"))
        } else {
            None
        };
        let mut backends = node::backends(&config, embedded).await.expect("test backends");
        backends.publish_observers.extend(self.publish_observers.iter().cloned());
        let registry_store = node::registry_store(&config, embedded).await.expect("test registry store");
        let node = RunningNode::launch(&config, backends, registry_store, Some(&data), listener, grpc)
            .await
            .expect("start node");
        TestServer {
            addr: node.addr,
            metrics_addr: node.metrics_addr,
            mqtt_addr: node.mqtt_addr,
            mqtt_tls_addr: node.mqtt_tls_addr,
            grpc_addr: node.grpc_addr,
            state: node.state.clone(),
            registry: node.state.registry.clone(),
            node: Some(node),
        }
    }
}

/// A running in-process node. Dropping it starts its drain.
pub struct TestServer {
    /// HTTP address.
    pub addr: SocketAddr,
    /// The separate `/metrics` listener's address (`metrics_listen`), if any.
    pub metrics_addr: Option<SocketAddr>,
    /// The MQTT device listener's address (`mqtt_listen`), if any.
    pub mqtt_addr: Option<SocketAddr>,
    /// The MQTT-over-TLS device listener's address (`mqtt_tls_listen`), if any.
    pub mqtt_tls_addr: Option<SocketAddr>,
    /// The control plane's gRPC address, when started with [`TestServerBuilder::grpc`].
    pub grpc_addr: Option<SocketAddr>,
    /// The node's shared state (counters, config).
    pub state: Arc<EdgeState>,
    /// The registry the node reads.
    pub registry: Arc<SharedRegistry>,
    node: Option<RunningNode>,
}

impl std::fmt::Debug for TestServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestServer").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl TestServer {
    /// A builder with the dev fixtures and default settings.
    pub fn builder() -> TestServerBuilder {
        TestServerBuilder::default()
    }

    /// A server with the dev fixtures and default settings.
    pub async fn start() -> Self {
        Self::builder().spawn().await
    }

    /// `ws://…/ws`.
    pub fn url(&self) -> String {
        format!("ws://{}/ws", self.addr)
    }

    /// The registry store this node reads and the control plane writes.
    ///
    /// # Panics
    /// After [`Self::shutdown`].
    pub fn registry_store(&self) -> std::sync::Arc<dyn skua_core::RegistryStore> {
        let node = self.node.as_ref().expect("running node");
        node.propagator.as_ref().expect("launched with the control plane").store().clone()
    }

    /// A control-plane client with the test admin key.
    ///
    /// # Panics
    /// When the server was started without [`TestServerBuilder::grpc`] or does not answer.
    pub async fn control(&self) -> crate::control::Control {
        crate::control::connect(self.grpc_addr.expect("TestServer started without .grpc()"), Some(TEST_ADMIN_KEY)).await
    }

    /// `http://…`.
    pub fn http_base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A connected, unauthenticated client.
    pub async fn connect(&self) -> WsClient {
        WsClient::connect(&self.url()).await
    }

    /// A client authenticated with `token` at protocol version 2.
    pub async fn auth(&self, token: &str) -> WsClient {
        let mut c = self.connect().await;
        c.auth_ok(token, 2).await;
        c
    }

    /// Closes `c`, a client of this node, and waits until the node has finished with it (its
    /// cleanup ran: subscriptions and presence released, restore record ended). Watches the
    /// node's closed-connections counter, so other connections must not close meanwhile.
    ///
    /// # Panics
    /// When the node has not finished within 5 s.
    pub async fn close_settled(&self, c: WsClient) {
        use std::sync::atomic::Ordering;
        let closed = self.state.metrics.connections_closed.load(Ordering::Acquire);
        c.close().await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        // The counter is bumped after the connection's cleanup; nothing else signals it.
        while self.state.metrics.connections_closed.load(Ordering::Acquire) <= closed {
            assert!(tokio::time::Instant::now() < deadline, "the node did not finish closing the connection");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Drains the node (1012 to every socket) and waits for it; true if within the grace.
    pub async fn shutdown(mut self) -> bool {
        match self.node.take() {
            Some(n) => n.shutdown().await,
            None => true,
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if self.node.is_some() {
            self.state.begin_drain();
        }
    }
}

/// A client token (JWT) for a demo actor, signed with the dev secret, expiring `exp`.
pub fn dev_jwt(sub: &str, exp: u64) -> String {
    jwt_with_secret(sub, Some(exp), fixtures::DEV_JWT_SECRET)
}

/// A JWT for `sub` signed with `secret`; `exp` omitted when `None`.
pub fn jwt_with_secret(sub: &str, exp: Option<u64>, secret: &str) -> String {
    #[derive(serde::Serialize)]
    struct Claims<'a> {
        sub: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        exp: Option<u64>,
    }
    let key = jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()).expect("hmac key");
    jsonwebtoken::encode(&jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256), &Claims { sub, exp }, &key)
        .expect("sign jwt")
}

/// Unix seconds now.
pub fn now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}
