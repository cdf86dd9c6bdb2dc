//! The presence conformance suite against [`MemoryPresence`]: every handle is the same instance.

use std::sync::Arc;

use skua_core::Presence;
use skua_presence::MemoryPresence;
use skua_testkit::conformance::presence::PresenceHarness;

struct MemoryHarness {
    presence: Arc<MemoryPresence>,
}

impl MemoryHarness {
    fn new() -> Self {
        Self { presence: Arc::new(MemoryPresence::new()) }
    }
}

impl PresenceHarness for MemoryHarness {
    async fn open(&self) -> Arc<dyn Presence> {
        self.presence.clone()
    }
}

skua_testkit::presence_conformance!(MemoryHarness::new());
