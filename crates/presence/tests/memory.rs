//! The presence conformance suite against [`MemoryPresence`]: every handle is the same instance.

use std::sync::Arc;

use skua_conformance::presence::PresenceHarness;
use skua_core::Presence;
use skua_presence::MemoryPresence;

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

    /// Memory presence compares only the `now_unix_s` it is given: no need to wait.
    async fn wait_past(&self, now_unix_s: u64, ttl_s: u64) -> u64 {
        now_unix_s + ttl_s
    }
}

skua_conformance::presence_conformance!(MemoryHarness::new());
