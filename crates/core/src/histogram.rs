//! Prometheus-style histogram counts shared by the crates that keep one (the store's append
//! batches, the engine's backend latencies).

use std::sync::atomic::{AtomicU64, Ordering};

/// The cumulative count at each upper bound of `bounds`, from per-bucket `counts` (one per
/// bound, in order; extra counts, such as a `+Inf` bucket, are ignored).
pub fn cumulative<B: Copy>(bounds: &[B], counts: &[AtomicU64]) -> Vec<(B, u64)> {
    let mut acc = 0;
    bounds
        .iter()
        .zip(counts)
        .map(|(b, c)| {
            acc += c.load(Ordering::Relaxed);
            (*b, acc)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_bucket_by_bucket() {
        let counts = [AtomicU64::new(1), AtomicU64::new(0), AtomicU64::new(3), AtomicU64::new(9)];
        assert_eq!(cumulative(&[1, 2, 4], &counts), [(1, 1), (2, 1), (4, 4)]);
    }
}
