//! Integration tests of the edge crate.

mod module_graph;
