//! One shared copy of each name that many cached pods repeat: namespaces, node names, owner
//! kinds and names. A PodSet's ten pods then hold one copy of its name instead of ten.

use std::collections::HashSet;
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;

static NAMES: LazyLock<Mutex<HashSet<Arc<str>>>> = LazyLock::new(Mutex::default);

/// The shared copy of `s`.
pub fn name(s: &str) -> Arc<str> {
    let mut names = NAMES.lock();
    if let Some(shared) = names.get(s) {
        return shared.clone();
    }
    let shared: Arc<str> = s.into();
    names.insert(shared.clone());
    shared
}

/// Drops the names no cached pod holds any more (only the table holds them); the cache calls
/// it after a relist and as pods go.
pub fn purge() {
    let mut names = NAMES.lock();
    names.retain(|n| Arc::strong_count(n) > 1);
    names.shrink_to_fit();
}

#[cfg(test)]
pub fn is_interned(s: &str) -> bool {
    NAMES.lock().contains(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_copy_while_held_and_none_after() {
        let a = name("intern-test-only-name");
        let b = name("intern-test-only-name");
        assert!(Arc::ptr_eq(&a, &b));
        purge();
        assert!(is_interned("intern-test-only-name"), "still held");
        drop((a, b));
        purge();
        assert!(!is_interned("intern-test-only-name"));
    }
}
