//! Control-plane helpers: a gRPC client that sends an admin key, and [`eventually`], which
//! polls a condition until a deadline (propagation tests measure "within 1 s" with it).

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

/// Polls `check` every 10 ms until it returns `Some`, and returns it with the time taken.
///
/// # Panics
/// When `within` passes first, naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, mut check: F) -> (T, Duration)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return (v, start.elapsed());
        }
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
