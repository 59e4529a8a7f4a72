//! One shared copy of what many cached pods repeat: namespaces, node names, owner kinds and
//! names, and each pod's [`Home`] (its namespace and controlling owner). A PodSet's ten pods
//! then point at one copy of where they are instead of holding ten.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;

use super::Home;

type Table<T> = LazyLock<Mutex<HashSet<Arc<T>>>>;

static NAMES: Table<str> = LazyLock::new(Mutex::default);
static HOMES: Table<Home> = LazyLock::new(Mutex::default);

/// The shared copy of `value`, made by `make` the first time.
fn shared<T: Hash + Eq + ?Sized>(
    table: &Mutex<HashSet<Arc<T>>>,
    value: &T,
    make: impl FnOnce() -> Arc<T>,
) -> Arc<T> {
    let mut table = table.lock();
    if let Some(shared) = table.get(value) {
        return shared.clone();
    }
    let shared = make();
    table.insert(shared.clone());
    shared
}

/// The shared copy of `s`.
pub fn name(s: &str) -> Arc<str> {
    shared(&NAMES, s, || s.into())
}

/// The shared copy of `home`.
pub(super) fn home(home: Home) -> Arc<Home> {
    shared(&HOMES, &home, || Arc::new(home.clone()))
}

/// Drops what no cached pod holds any more (only the tables hold it); the cache calls it
/// after a relist and as pods go. Homes first: they hold names.
pub fn purge() {
    drop_unheld(&HOMES);
    drop_unheld(&NAMES);
}

fn drop_unheld<T: Hash + Eq + ?Sized>(table: &Mutex<HashSet<Arc<T>>>) {
    let mut table = table.lock();
    table.retain(|n| Arc::strong_count(n) > 1);
    table.shrink_to_fit();
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

    #[test]
    fn the_pods_of_one_owner_share_one_home_and_its_names() {
        let owner = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            kind: "PodSet".into(),
            name: "intern-test-only-owner".into(),
            uid: "owner-uid".into(),
            controller: Some(true),
            ..Default::default()
        };
        let a = Home::shared("intern-test-only-ns", Some(&owner));
        let b = Home::shared("intern-test-only-ns", Some(&owner));
        assert!(Arc::ptr_eq(&a, &b));
        let elsewhere = Home::shared("intern-test-only-ns-2", Some(&owner));
        assert!(!Arc::ptr_eq(&a, &elsewhere));
        drop((a, b, elsewhere));
        purge();
        assert!(!is_interned("intern-test-only-owner"), "the home held it");
        assert!(!is_interned("intern-test-only-ns"));
    }
}
