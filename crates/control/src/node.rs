//! The node interface: what the control plane needs from the node it runs in ([`NodeAdmin`],
//! implemented by the node's engine) and the types it passes. Declared in `skua_core::node`
//! (hooks39), re-exported here so the control plane's doors name them in one place.

pub use skua_core::node::{ConnectionInfo, NodeAdmin, NodeStats, ServerPublish, ServerPublished, TopicWatch};
/// Why the node refused a server-side publish: the publish pipeline's one typed refusal,
/// which each door maps once (`tonic::Status`, HTTP).
pub use skua_core::refusal::Refused as PublishRefused;
pub use skua_core::webhook::RecentWebhook;
