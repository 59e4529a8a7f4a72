//! The versions an At is served at, as kube-apiserver serves a CRD's: stored at the hub
//! (v1beta1, [`Kind::api_version`]), v1alpha1 converted to and from it by the CRD's conversion
//! webhook, which is the operator's own code (`podset_operator::api::conversion::convert`). A
//! request at v1alpha1 is carried out on the stored object converted to v1alpha1, the result
//! converted back and stored (over the version it was read at), and answered at v1alpha1.
//! Watches are served at the storage version only (nothing watches at another).

use serde_json::Value;

use podset_operator::api::conversion;

use super::error::ApiError;
use super::resource::Kind;
use super::store::{Key, Object, Store};

/// The At's served version besides the stored one: the book's.
pub const AT_ALPHA: &str = "cnat.programming-kubernetes.info/v1alpha1";

/// The versions `kind` is served at besides the one it is stored at.
pub fn others(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::At => &[AT_ALPHA],
        _ => &[],
    }
}

/// `object`, an At at any served version, at `version`: what the webhook answers (it never
/// fails for an At).
pub fn at(object: Value, version: &str) -> Value {
    conversion::convert(object, version).expect("an At converts")
}

/// `object`, sent at another version, as stored.
pub fn stored(object: Value) -> Value {
    at(object, Kind::At.api_version())
}

/// A patch sent at `version` (a merge patch, or a JSON patch: a list of operations), as the
/// API server carries it out: on the stored object converted to `version`, converted back and
/// written over the version read; a resourceVersion in the patch is a precondition.
pub fn patch_as(
    store: &mut Store,
    key: &Key,
    patch: &Value,
    subresource: Option<&str>,
    version: &str,
) -> Result<Object, ApiError> {
    let old = store
        .get(key)
        .ok_or_else(|| ApiError::not_found(key.kind, &key.name))?;
    let mut served = at((**old).clone(), version);
    match patch.is_array() {
        true => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            json_patch::patch(&mut served, &ops).map_err(|_| ApiError::patch_not_applied())?;
        }
        false => json_patch::merge(&mut served, patch),
    }
    store.replace(key, stored(served), subresource)
}

/// A reply of the API server (an At, a list of them, or a `Status`) as served at `version`.
pub fn served(mut reply: Value, version: &str) -> Value {
    match reply["kind"].as_str() {
        Some("At") => at(reply, version),
        Some("AtList") => {
            let items = reply["items"].as_array_mut().into_iter().flatten();
            for item in items {
                *item = at(std::mem::take(item), version);
            }
            reply["apiVersion"] = version.into();
            reply
        }
        _ => reply,
    }
}
