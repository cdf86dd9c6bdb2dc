//! The gRPC door of the control plane: the `skua.control.v1.Control` trait mapped to the
//! service's handlers ([`rpc`](self)), serving it with health, reflection, TLS and the
//! admin-key check ([`server`]), and backing off addresses that fail that check ([`throttle`]).

mod rpc;
pub mod server;
pub mod throttle;
