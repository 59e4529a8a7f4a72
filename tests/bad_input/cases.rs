//! The malformed objects the bad-input test submits, and what must become of each.

use serde_json::{Value, json};

pub use testenv::harness::Kind;

mod ats;
mod podsets;

/// What must become of a malformed object.
#[derive(Debug)]
pub enum Expect {
    /// The API server refuses it with this code, its message naming this.
    Refused(u16, &'static str),
    /// Stored; the PodSet then has this many (Pending) pods and says so.
    Available(i32),
    /// Stored; the PodSet reports ReplicaFailure with this in the message, and a Warning.
    ReplicaFailure(&'static str),
    /// Stored; the At runs (RUNNING), its pod's command exactly the spec's.
    Running,
    /// Stored; the At waits for its schedule.
    Pending,
}

pub struct Case {
    pub what: &'static str,
    pub kind: Kind,
    pub name: String,
    /// The request body, sent as is.
    pub body: String,
    pub expect: Expect,
    /// JSON pointers that must be gone from the stored object (pruned unknown fields).
    pub pruned: &'static [&'static str],
    /// Whether a failure must also show as a Warning event.
    pub event: bool,
}

/// The version the cases are written at: the PodSets' stored one, and the book's for the Ats
/// (the command a string, converted by the operator's webhook to v1beta1's template).
pub fn api_version(kind: Kind) -> &'static str {
    match kind {
        Kind::PodSet => kind.api_version(),
        Kind::At => "cnat.programming-kubernetes.info/v1alpha1",
    }
}

pub fn case(what: &'static str, kind: Kind, name: &str, obj: Value, expect: Expect) -> Case {
    let mut obj = obj;
    let defaults = json!({
        "apiVersion": api_version(kind),
        "kind": format!("{kind:?}"),
        "metadata": {"name": name},
    });
    for (k, v) in defaults.as_object().unwrap() {
        obj.as_object_mut()
            .unwrap()
            .entry(k.clone())
            .or_insert(v.clone());
    }
    Case {
        what,
        kind,
        name: name.to_string(),
        body: obj.to_string(),
        expect,
        pruned: &[],
        event: true,
    }
}

pub fn ps(what: &'static str, i: usize, spec: Value, expect: Expect) -> Case {
    case(
        what,
        Kind::PodSet,
        &format!("bad-ps-{i}"),
        json!({"spec": spec}),
        expect,
    )
}

pub fn at(what: &'static str, i: usize, spec: Value, expect: Expect) -> Case {
    case(
        what,
        Kind::At,
        &format!("bad-at-{i}"),
        json!({"spec": spec}),
        expect,
    )
}

pub fn when(schedule: &str) -> Value {
    json!({"schedule": schedule, "command": "echo hi"})
}

/// A name of `n` letters `a`.
pub fn long(n: usize) -> String {
    "a".repeat(n)
}

/// Every case: the PodSets', then the Ats'.
pub fn cases() -> Vec<Case> {
    let mut cases = podsets::cases();
    cases.extend(ats::cases());
    cases
}
