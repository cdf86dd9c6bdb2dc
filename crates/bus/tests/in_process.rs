//! The bus conformance suite against [`InProcessBus`]: all nodes of one harness share one broker.

use std::sync::Arc;

use skua_bus::InProcessBus;
use skua_conformance::bus::BusHarness;
use skua_core::{Bus, BusDelivery, NodeId};
use tokio::sync::mpsc::Receiver;

/// Small receivers, so the suite also exercises `publish` waiting on full ones.
const CAPACITY: usize = 8;

struct InProcessHarness {
    bus: InProcessBus,
}

impl InProcessHarness {
    fn new() -> Self {
        Self { bus: InProcessBus::new() }
    }
}

impl BusHarness for InProcessHarness {
    async fn node(&self, name: &str) -> (Arc<dyn Bus>, Receiver<BusDelivery>) {
        let node = NodeId::parse(name).expect("the suite names nodes with valid ids");
        self.bus.connect(node, CAPACITY)
    }
}

skua_conformance::bus_conformance!(InProcessHarness::new());
