//! The chaos harness's process handling as a library: private Mosquitto, Redis and Postgres
//! instances and `skua serve` nodes on free loopback ports ([`procs`]). The `skua-chaos` binary
//! runs on it, and `skua_testkit::process` wraps its services for the fault tests.

pub mod procs;
