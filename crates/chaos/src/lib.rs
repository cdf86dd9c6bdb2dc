//! The chaos harness's process handling as a library: private Mosquitto, Redis and Postgres
//! instances and `skua serve` nodes on free ports ([`procs`]), and the network namespaces that
//! let the harness partition a node from a service ([`netns`]). The `skua-chaos` binary runs on
//! it, and `skua_testkit::process` wraps its services for the fault tests.

pub mod netns;
pub mod procs;
