//! Error formatting shared by the node and the command line: a floor below [`crate::node`], so
//! the modules the node wires up can use it without naming the node.

/// `a: b: c` for an error and its sources.
pub use skua_core::error::error_chain;
