//! [`SmallMap`]: a map kept as a vector of pairs, for the handful of entries a connection holds
//! (its subscriptions). A `BTreeMap`'s first insert allocates a whole 11-slot node (about 2 KiB
//! for a connection's subscriptions); this allocates what is used. Lookups are linear, which
//! beats a tree at these sizes; the per-connection subscription limit bounds the worst case.

/// A map from `K` to `V` in insertion order.
#[derive(Debug, Clone)]
pub struct SmallMap<K, V> {
    entries: Vec<(K, V)>,
}

impl<K, V> Default for SmallMap<K, V> {
    fn default() -> Self {
        Self { entries: Vec::new() }
    }
}

impl<K: PartialEq, V> SmallMap<K, V> {
    /// An empty map (no allocation).
    pub fn new() -> Self {
        Self::default()
    }

    fn position<Q>(&self, key: &Q) -> Option<usize>
    where
        K: std::borrow::Borrow<Q>,
        Q: PartialEq + ?Sized,
    {
        self.entries.iter().position(|(k, _)| k.borrow() == key)
    }

    /// The value of `key`.
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: std::borrow::Borrow<Q>,
        Q: PartialEq + ?Sized,
    {
        self.position(key).map(|i| &self.entries[i].1)
    }

    /// The value of `key`, mutably.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: std::borrow::Borrow<Q>,
        Q: PartialEq + ?Sized,
    {
        self.position(key).map(|i| &mut self.entries[i].1)
    }

    /// Whether `key` is present.
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: std::borrow::Borrow<Q>,
        Q: PartialEq + ?Sized,
    {
        self.position(key).is_some()
    }

    /// Sets `key` to `value` (in place when present) and returns the value it replaced.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.position(&key) {
            Some(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            None => {
                // A `Vec`'s first push reserves four entries; most connections hold one or two
                // subscriptions, so the first two grow one at a time (measured: 800 bytes for
                // a single subscription otherwise).
                if self.entries.len() < 2 {
                    self.entries.reserve_exact(1);
                }
                self.entries.push((key, value));
                None
            }
        }
    }

    /// Removes `key`, returning its value; the others keep their order.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: PartialEq + ?Sized,
    {
        self.position(key).map(|i| self.entries.remove(i).1)
    }

    /// Keeps the entries `f` approves of.
    pub fn retain(&mut self, mut f: impl FnMut(&K, &mut V) -> bool) {
        self.entries.retain_mut(|(k, v)| f(k, v));
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    /// The entries in insertion order, values mutable.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> {
        self.entries.iter_mut().map(|(k, v)| (&*k, v))
    }

    /// The keys in insertion order.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.entries.iter().map(|(k, _)| k)
    }

    /// The values in insertion order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter().map(|(_, v)| v)
    }
}

impl<K, V> IntoIterator for SmallMap<K, V> {
    type Item = (K, V);
    type IntoIter = std::vec::IntoIter<(K, V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_like_a_map_in_insertion_order() {
        let mut m: SmallMap<String, u32> = SmallMap::new();
        assert!(m.is_empty());
        assert_eq!(m.insert("b".into(), 1), None);
        assert_eq!(m.insert("a".into(), 2), None);
        assert_eq!(m.insert("b".into(), 3), Some(1), "replaced in place");
        assert_eq!(m.keys().map(String::as_str).collect::<Vec<_>>(), ["b", "a"]);
        assert_eq!(m.get("b"), Some(&3));
        assert!(m.contains_key("a") && !m.contains_key("c"));
        *m.get_mut("a").unwrap() += 10;
        assert_eq!(m.values().copied().collect::<Vec<_>>(), [3, 12]);
        m.insert("c".into(), 4);
        assert_eq!(m.remove("b"), Some(3));
        assert_eq!(m.remove("b"), None);
        m.retain(|k, _| k != "c");
        assert_eq!(m.into_iter().collect::<Vec<_>>(), [("a".to_owned(), 12)]);
    }
}
