//! The API server's storage, as the operator depends on it: one resourceVersion counter for
//! every write, optimistic concurrency (a write over a stale resourceVersion is a 409),
//! `generateName`, the status subresource, `metadata.generation`, graceful pod deletion,
//! UID preconditions, and a log of changes from which watches start, compacted like etcd's
//! (a watch from a compacted version is told 410 Gone).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use jiff::Timestamp;
use serde_json::Value;

use super::error::ApiError;
use super::resource::Kind;
use super::watch::Watcher;

mod deletes;
pub mod finalizers;
mod grace;
mod pods;
mod watches;

pub type Object = Arc<Value>;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

/// One write, as a watch sees it.
#[derive(Debug)]
pub struct Change {
    pub rv: u64,
    pub key: Key,
    pub old: Option<Object>,
    pub new: Option<Object>,
}

/// What a delete is conditioned on.
#[derive(Clone, Debug, Default)]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

/// Changes kept for watches to start from; older versions are compacted.
const LOG_LENGTH: usize = 4096;

#[derive(Default)]
pub struct Store {
    objects: BTreeMap<Key, Object>,
    rv: u64,
    log: VecDeque<Arc<Change>>,
    /// A watch may start at this version or later: every change after it is in the log.
    oldest: u64,
    namespaces: BTreeSet<String>,
    watchers: Vec<Watcher>,
    uids: u64,
    /// Committed since the caller last took them.
    committed: Vec<Arc<Change>>,
}

impl Store {
    /// A store whose versions start after `rv`, as a cluster's do after its own objects.
    pub fn starting_at(rv: u64) -> Self {
        Self {
            rv,
            oldest: rv,
            ..Self::default()
        }
    }

    pub fn add_namespace(&mut self, name: &str) {
        self.namespaces.insert(name.to_string());
    }

    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    pub fn get(&self, key: &Key) -> Option<&Object> {
        self.objects.get(key)
    }

    /// Every object of `kind` in `namespace` (all namespaces: `None`), in name order.
    pub fn objects(&self, kind: Kind, namespace: Option<&str>) -> impl Iterator<Item = &Object> {
        self.objects
            .iter()
            .filter(move |(k, _)| k.kind == kind && namespace.is_none_or(|ns| k.namespace == ns))
            .map(|(_, o)| o)
    }

    /// The object of `kind` in `namespace` whose UID is `uid`.
    pub fn by_uid(&self, kind: Kind, namespace: &str, uid: &str) -> Option<&Object> {
        self.objects(kind, Some(namespace))
            .find(|o| o["metadata"]["uid"] == uid)
    }

    /// The changes committed since the last call.
    pub fn take_committed(&mut self) -> Vec<Arc<Change>> {
        std::mem::take(&mut self.committed)
    }

    fn check_namespace(&self, namespace: &str) -> Result<(), ApiError> {
        match self.namespaces.contains(namespace) {
            true => Ok(()),
            false => Err(ApiError::namespace_not_found(namespace)),
        }
    }

    pub fn create(
        &mut self,
        kind: Kind,
        namespace: &str,
        mut body: Value,
        name_suffix: impl FnOnce() -> String,
        now: Timestamp,
    ) -> Result<Object, ApiError> {
        self.check_namespace(namespace)?;
        let meta = &body["metadata"];
        if meta["resourceVersion"]
            .as_str()
            .is_some_and(|v| !v.is_empty())
        {
            // etcd's refusal, which the API server passes on as its own failure.
            return Err(ApiError::new(
                500,
                "",
                "resourceVersion should not be set on objects to be created",
            ));
        }
        if meta["namespace"].as_str().is_some_and(|ns| ns != namespace) {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let name = match (meta["name"].as_str(), meta["generateName"].as_str()) {
            (Some(n), _) if !n.is_empty() => n.to_string(),
            (_, Some(prefix)) => format!("{}{}", generate_prefix(prefix), name_suffix()),
            _ => {
                return Err(ApiError::invalid(
                    kind,
                    "",
                    "metadata.name",
                    "FieldValueRequired",
                    "Required value: name or generateName is required",
                ));
            }
        };
        let key = Key {
            kind,
            namespace: namespace.into(),
            name: name.clone(),
        };
        if self.objects.contains_key(&key) {
            return Err(ApiError::already_exists(kind, &name));
        }
        self.uids += 1;
        let meta = body["metadata"].as_object_mut().ok_or_else(|| {
            ApiError::bad_request("Object 'metadata' is missing or not an object")
        })?;
        meta.insert("name".into(), name.into());
        meta.insert("namespace".into(), namespace.into());
        meta.insert("uid".into(), uid(self.uids).into());
        meta.insert("creationTimestamp".into(), seconds(now).into());
        for server_set in ["deletionTimestamp", "deletionGracePeriodSeconds"] {
            meta.remove(server_set);
        }
        if kind.has_generation() {
            meta.insert("generation".into(), 1.into());
        }
        omit_empty(meta);
        body["apiVersion"] = kind.api_version().into();
        body["kind"] = kind.name().into();
        match kind {
            Kind::Pod => body["status"] = pods::created_status(&body, now),
            k if k.has_status() => drop(body.as_object_mut().map(|o| o.remove("status"))),
            _ => {}
        }
        Ok(self.commit(key, Some(body)))
    }

    /// PUT: the whole object, over its resourceVersion; without one only where the kind allows
    /// it.
    pub fn replace(
        &mut self,
        key: &Key,
        body: Value,
        subresource: Option<&str>,
    ) -> Result<Object, ApiError> {
        let old = self.current(key)?;
        let wanted = body["metadata"]["resourceVersion"].as_str();
        match wanted.filter(|v| !v.is_empty()) {
            None if !key.kind.allows_unconditional_update() => {
                return Err(ApiError::version_required(key.kind, &key.name));
            }
            wanted => check_version(key, &old, wanted)?,
        }
        self.update(key, &old, body, subresource)
    }

    /// A JSON merge patch; a `metadata.resourceVersion` in it is a precondition.
    pub fn merge_patch(
        &mut self,
        key: &Key,
        patch: &Value,
        subresource: Option<&str>,
    ) -> Result<Object, ApiError> {
        let old = self.current(key)?;
        check_version(key, &old, patch["metadata"]["resourceVersion"].as_str())?;
        let mut patched = (*old).clone();
        json_patch::merge(&mut patched, patch);
        self.update(key, &old, patched, subresource)
    }

    /// A JSON patch (RFC 6902), as `application/json-patch+json`: a failed `test`, or a path
    /// that is not there, refuses the whole patch with 422, as kube-apiserver does.
    pub fn json_patch(
        &mut self,
        key: &Key,
        patch: &Value,
        subresource: Option<&str>,
    ) -> Result<Object, ApiError> {
        let old = self.current(key)?;
        let ops: json_patch::Patch = serde_json::from_value(patch.clone())
            .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
        let mut patched = (*old).clone();
        json_patch::patch(&mut patched, &ops).map_err(|_| ApiError::patch_not_applied())?;
        self.update(key, &old, patched, subresource)
    }

    /// A new version of `old` from `candidate`: only its status through `/status`, all but
    /// its status otherwise; fields the server owns are kept. An update that changes nothing
    /// is no write (no new resourceVersion, no watch event), as with the real server.
    fn update(
        &mut self,
        key: &Key,
        old: &Object,
        candidate: Value,
        subresource: Option<&str>,
    ) -> Result<Object, ApiError> {
        let mut new = match subresource {
            Some("status") => {
                let mut new = (**old).clone();
                match candidate.get("status") {
                    Some(status) if !status.is_null() => new["status"] = status.clone(),
                    _ => drop(new.as_object_mut().map(|o| o.remove("status"))),
                }
                new
            }
            Some(other) => {
                return Err(ApiError::not_found(
                    key.kind,
                    &format!("{}/{other}", key.name),
                ));
            }
            None => {
                let mut new = candidate;
                if key.kind.has_status() {
                    match old.get("status") {
                        Some(status) => new["status"] = status.clone(),
                        None => drop(new.as_object_mut().map(|o| o.remove("status"))),
                    }
                }
                new
            }
        };
        for kept in [
            "uid",
            "creationTimestamp",
            "namespace",
            "name",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match old["metadata"].get(kept) {
                Some(v) => new["metadata"][kept] = v.clone(),
                None => drop(new["metadata"].as_object_mut().map(|m| m.remove(kept))),
            }
        }
        new["apiVersion"] = key.kind.api_version().into();
        new["kind"] = key.kind.name().into();
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
        if let Some(meta) = new["metadata"].as_object_mut() {
            omit_empty(meta);
        }
        if key.kind == Kind::Pod {
            pods::check_update(key, old, &new)?;
            pods::default_status(&mut new);
            pods::omit_empty_gates(&mut new);
        }
        if key.kind.has_generation() && new.get("spec") != old.get("spec") {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            new["metadata"]["generation"] = generation.into();
        }
        if new == **old {
            return Ok(old.clone());
        }
        if finalizers::finalized(&new) {
            // Its last finalizer taken off: it goes, as it was stored.
            self.remove(key);
            return Ok(Arc::new(new));
        }
        Ok(self.commit(key.clone(), Some(new)))
    }

    /// Removes an object for good (a kubelet done with a pod, or a delete without grace); the
    /// object as its DELETED event carries it.
    pub fn remove(&mut self, key: &Key) -> Option<Object> {
        self.objects
            .contains_key(key)
            .then(|| self.commit(key.clone(), None))
    }

    fn current(&self, key: &Key) -> Result<Object, ApiError> {
        self.objects
            .get(key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(key.kind, &key.name))
    }

    /// Stores `new` (or removes the object) under the next resourceVersion, logs the change
    /// and sends it to the watches that select it. Returns the object as stored (or as it was
    /// when removed, at the removal's version).
    fn commit(&mut self, key: Key, new: Option<Value>) -> Object {
        self.rv += 1;
        let version = self.rv.to_string();
        let old = self.objects.get(&key).cloned();
        let new = new.map(|mut v| {
            v["metadata"]["resourceVersion"] = version.clone().into();
            Arc::new(v)
        });
        match &new {
            Some(v) => self.objects.insert(key.clone(), v.clone()),
            None => self.objects.remove(&key),
        };
        let change = Arc::new(Change {
            rv: self.rv,
            key,
            old: old.clone(),
            new: new.clone(),
        });
        self.watchers.retain(|w| w.send_change(&change));
        self.log.push_back(change.clone());
        if self.log.len() > LOG_LENGTH {
            self.compact(LOG_LENGTH / 2);
        }
        self.committed.push(change);
        new.unwrap_or_else(|| {
            let mut gone = (*old.expect("removed what was there")).clone();
            gone["metadata"]["resourceVersion"] = version.into();
            Arc::new(gone)
        })
    }
}

/// Metadata as the API server stores it: empty labels, annotations, owner references,
/// finalizers (and empty strings) are no such field.
fn omit_empty(meta: &mut serde_json::Map<String, Value>) {
    meta.retain(|_, v| match v {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        _ => true,
    });
}

fn check_version(key: &Key, old: &Value, wanted: Option<&str>) -> Result<(), ApiError> {
    match wanted {
        Some(w) if Some(w) != old["metadata"]["resourceVersion"].as_str() => {
            Err(ApiError::conflict(key.kind, &key.name))
        }
        _ => Ok(()),
    }
}

/// `generateName` as the API server cuts it, so that the name with its 5 characters fits a
/// label value (63 characters).
fn generate_prefix(prefix: &str) -> &str {
    const MAX: usize = 63 - 5;
    match prefix.char_indices().nth(MAX) {
        Some((cut, _)) => &prefix[..cut],
        None => prefix,
    }
}

/// A UUID-shaped UID, different for every object the store ever made.
fn uid(n: u64) -> String {
    format!("00000000-0000-4000-8000-{n:012x}")
}

/// A timestamp as the API server writes object times: to the second.
pub fn seconds(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}
