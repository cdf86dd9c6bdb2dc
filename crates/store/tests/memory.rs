//! The store conformance suite against [`MemoryStore`] on a settable clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use skua_conformance::store::{StoreHarness, T0};
use skua_core::Store;
use skua_store::MemoryStore;

struct MemoryHarness {
    now: Arc<AtomicU64>,
    store: Arc<MemoryStore>,
}

impl MemoryHarness {
    fn new() -> Self {
        let now = Arc::new(AtomicU64::new(T0));
        let clock = now.clone();
        let store = Arc::new(MemoryStore::with_clock(Arc::new(move || clock.load(Ordering::SeqCst))));
        Self { now, store }
    }
}

impl StoreHarness for MemoryHarness {
    async fn open(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    fn set_now(&self, now_unix_s: u64) {
        self.now.store(now_unix_s, Ordering::SeqCst);
    }

    /// The in-memory store is one instance per process; embedded nodes share it by holding it.
    fn distinct_handles(&self) -> bool {
        false
    }
}

skua_conformance::store_conformance!(MemoryHarness::new());
