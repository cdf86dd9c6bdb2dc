//! Control-plane helpers: a gRPC client that sends an admin key, and [`Deadline`], for polling
//! a condition until a deadline (propagation tests measure "within 1 s" with it).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use skua_control::pb::control_client::ControlClient;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// Adds `authorization: Bearer <key>` (when a key is given) to every call.
#[derive(Clone, Debug)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// A control-plane client.
pub type Control = ControlClient<InterceptedService<Channel, Bearer>>;

/// Connects to the control plane at `addr`, presenting `key`.
///
/// # Panics
/// When the server does not answer or the key is not ASCII.
pub async fn connect(addr: SocketAddr, key: Option<&str>) -> Control {
    let channel = Channel::from_shared(format!("http://{addr}")).expect("uri").connect().await.expect("connect gRPC");
    let key = key.map(|k| format!("Bearer {k}").parse().expect("ascii key"));
    ControlClient::with_interceptor(channel, Bearer(key))
}

/// A deadline for polling a condition ("visible within 1 s"): check, then [`Self::tick`],
/// until the check passes.
#[derive(Debug)]
pub struct Deadline {
    what: String,
    start: Instant,
    within: Duration,
}

impl Deadline {
    /// Starts the clock for `what`, which must happen within `within`.
    pub fn new(what: &str, within: Duration) -> Self {
        Self { what: what.to_owned(), start: Instant::now(), within }
    }

    /// Fails the test if the deadline passed, else waits 10 ms before the next check.
    ///
    /// # Panics
    /// When the deadline has passed.
    pub async fn tick(&self) {
        assert!(self.start.elapsed() < self.within, "{}: not within {:?}", self.what, self.within);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    /// Time since [`Self::new`].
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }
}

/// Demo fixtures: gives `bob` a grant on the private room `ops` (so the room stays private)
/// and deletes `alice`'s, revoking her access.
///
/// # Panics
/// When a call fails or the demo grant of alice is missing.
pub async fn revoke_alices_ops_grant(control: &mut Control) {
    use skua_control::pb;
    control
        .create_grant(pb::CreateGrantRequest {
            app: "demo".into(),
            room: "ops".into(),
            actor_id: "bob".into(),
            permission: "pubSub".into(),
            ..Default::default()
        })
        .await
        .expect("grant bob ops");
    let grants = control
        .list_grants(pb::ListGrantsRequest { app: "demo".into(), room: "ops".into(), ..Default::default() })
        .await
        .expect("list ops grants")
        .into_inner();
    let alices = grants.grants.iter().find(|g| g.actor_id == "alice").expect("the demo grant");
    control.delete_grant(pb::DeleteGrantRequest { grant_id: alices.id.clone() }).await.expect("delete alice's grant");
}
