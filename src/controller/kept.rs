//! What the controllers' stores keep of each object: only what a reconcile reads, and no
//! field that can be large for nothing. Managed fields and `kubectl apply`'s copy of the whole
//! object go (a PodSet's template a second time); a PodSet's pod names, read only to see
//! whether the status changed, are kept as a digest: about 560 bytes a PodSet of 10 pods,
//! 5 MiB at 10,000 PodSets (BENCHMARKS.md).

use std::hash::{DefaultHasher, Hash, Hasher};

use kube::{Resource, ResourceExt};

use crate::api::{At, PodSet, PodSetStatus};

pub(super) const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// An object as its store keeps it.
pub trait Kept: Resource + Sized {
    fn keep(&mut self) {
        slim(self);
    }
}

fn slim(o: &mut impl Resource) {
    o.managed_fields_mut().clear();
    if let Some(annotations) = o.meta_mut().annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

impl Kept for At {}

impl Kept for PodSet {
    fn keep(&mut self) {
        slim(self);
        if let Some(status) = self.status.as_mut() {
            status.pod_names = digest(&status.pod_names);
        }
    }
}

/// A digest starts with this, which no pod name can.
const DIGEST: char = '#';

/// The pod names as the store keeps them: one digest of them all (a digest stays as it is).
fn digest(names: &[String]) -> Vec<String> {
    match names {
        [] => Vec::new(),
        [one] if one.starts_with(DIGEST) => names.to_vec(),
        _ => {
            let mut hasher = DefaultHasher::new();
            names.hash(&mut hasher);
            vec![format!("{DIGEST}{:016x}", hasher.finish())]
        }
    }
}

/// `status` as the store keeps it.
pub fn kept(status: &PodSetStatus) -> PodSetStatus {
    PodSetStatus {
        pod_names: digest(&status.pod_names),
        ..status.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether two statuses are the same as the store keeps them (as the status write compares
    /// them), either of them read from the store or written whole.
    fn same(a: Option<&PodSetStatus>, b: &PodSetStatus) -> bool {
        a.is_some_and(|a| kept(a) == kept(b))
    }

    fn status(names: &[&str]) -> PodSetStatus {
        PodSetStatus {
            pod_names: names.iter().map(|n| n.to_string()).collect(),
            available_replicas: names.len() as i32,
            ..PodSetStatus::default()
        }
    }

    #[test]
    fn a_kept_status_is_the_same_only_as_one_with_the_same_names() {
        let whole = status(&["web-poda", "web-podb"]);
        let mut ps = crate::plan::fixtures::podset(2);
        ps.status = Some(whole.clone());
        ps.keep();
        let stored = ps.status.as_ref();
        assert_eq!(stored.unwrap().pod_names.len(), 1);
        assert!(same(stored, &whole));
        assert!(same(Some(&whole), &whole));
        assert!(!same(stored, &status(&["web-poda", "web-podc"])));
        assert!(!same(stored, &status(&["web-poda"])));
        assert!(!same(None, &whole));
        ps.keep();
        assert!(same(ps.status.as_ref(), &whole), "kept twice");
        assert!(same(Some(&status(&[])), &status(&[])));
    }
}
