//! One of our objects as a watch reads it: decoded, or kept as its metadata and why it could
//! not be. The API server admits what the CRD's schema allows, and that is more than the Rust
//! types hold: an int-or-string port past 32 bits, an object stored under an older schema, a
//! field another writer set. Decoded as a whole, one such object fails the list it is in,
//! and the watch of every object with it (kube-rs issue 774); decoded one by one, it is
//! reported and left alone while the others are served.

use std::borrow::Cow;
use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// What the watch read.
#[derive(Clone, Debug)]
pub enum Decoded<K> {
    Read(K),
    Unreadable(Box<Unreadable>),
}

/// An object the operator cannot read.
#[derive(Clone, Debug, Default)]
pub struct Unreadable {
    pub metadata: ObjectMeta,
    /// Where and why, as `spec.template.spec.containers[0].ports[0].containerPort: invalid
    /// value: ...`.
    pub error: String,
    /// Its `status.conditions` as stored, which a report adds to.
    pub conditions: Vec<Value>,
}

/// What a kind says about one of its objects it cannot read.
pub trait Reported: Resource<DynamicType = ()> + Sized {
    /// The condition that reports it, and the status that means "failed" for that type.
    const CONDITION: (&'static str, &'static str);
    /// An object with only `metadata`: what a store is told to drop when the object it held
    /// can no longer be read.
    fn placeholder(metadata: ObjectMeta) -> Self;
}

/// One of our kinds as its controller watches it: reported when unreadable, cached, and
/// shared between tasks.
pub trait Watched:
    Reported<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

impl<K> Watched for K where
    K: Reported<Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static
{
}

/// A good object is parsed once, straight into its type, from its own text (a raw value: the
/// JSON scanned, not built into a tree); only an object that fails is parsed again, as a
/// `Value`, for its metadata and conditions. The text is the object as the API server sent it,
/// in a list or a watch event (whose `type` the API server sends before its `object`, so serde
/// hands the object's own text on rather than a buffered copy).
impl<'de, K: DeserializeOwned> Deserialize<'de> for Decoded<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        let mut json = serde_json::Deserializer::from_str(raw.get());
        Ok(match serde_path_to_error::deserialize::<_, K>(&mut json) {
            Ok(object) => Decoded::Read(object),
            Err(e) => {
                let value = serde_json::from_str(raw.get()).map_err(serde::de::Error::custom)?;
                Decoded::Unreadable(Box::new(Unreadable::new(value, &e)))
            }
        })
    }
}

impl Unreadable {
    fn new(mut value: Value, error: &serde_path_to_error::Error<serde_json::Error>) -> Self {
        let metadata = value
            .get_mut("metadata")
            .map(Value::take)
            .and_then(|m| serde_json::from_value(m).ok())
            .unwrap_or_default();
        let conditions = value
            .pointer_mut("/status/conditions")
            .map(Value::take)
            .and_then(|c| serde_json::from_value(c).ok())
            .unwrap_or_default();
        Self {
            metadata,
            error: format!("{}: {}", error.path(), without_position(error.inner())),
            conditions,
        }
    }
}

/// serde_json's message without the " at line 1 column 345" it adds: a place in the object's
/// text, which the path already names for a reader.
fn without_position(e: &serde_json::Error) -> String {
    let message = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    match message.strip_suffix(&position) {
        Some(bare) => bare.to_string(),
        None => message,
    }
}

impl<K: Resource<DynamicType = ()>> Resource for Decoded<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        match self {
            Decoded::Read(object) => object.meta(),
            Decoded::Unreadable(u) => &u.metadata,
        }
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Decoded::Read(object) => object.meta_mut(),
            Decoded::Unreadable(u) => &mut u.metadata,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PodSet;
    use serde_json::json;

    fn podset(template_spec: Value) -> Value {
        json!({
            "apiVersion": "app.example.com/v1alpha1", "kind": "PodSet",
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
            "spec": {"replicas": 2, "template": {"spec": template_spec}},
            "status": {"conditions": [{"type": "Available", "status": "True", "reason": "R",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        })
    }

    /// As the client reads it: from the text the API server sent.
    fn read<T: DeserializeOwned>(value: &Value) -> T {
        serde_json::from_str(&value.to_string()).unwrap()
    }

    /// A watch event's object is read from its own text too: the API server sends `type`
    /// first (a `json!` map would sort `object` first, and serde would buffer it); a `Value`
    /// (as tests build objects) is read through its text.
    #[test]
    fn a_watch_event_and_a_value_are_read_alike() {
        let object = podset(json!({"containers": []}));
        let event = format!(r#"{{"type":"MODIFIED","object":{object}}}"#);
        let event: kube::core::WatchEvent<Decoded<PodSet>> = serde_json::from_str(&event).unwrap();
        assert!(matches!(
            event,
            kube::core::WatchEvent::Modified(Decoded::Read(_))
        ));
        let decoded: Decoded<PodSet> =
            serde_json::from_value(podset(json!({"containers": []}))).unwrap();
        assert!(matches!(decoded, Decoded::Read(_)));
    }

    /// The case of issue 31: admitted by the API server, not an i32.
    #[test]
    fn an_object_past_the_rust_types_is_kept_with_where_and_why() {
        let probe = json!({"containers": [{"name": "c", "readinessProbe":
            {"httpGet": {"port": 2147483648_i64}}}]});
        let decoded: Decoded<PodSet> = read(&podset(probe));
        let Decoded::Unreadable(u) = decoded else {
            panic!("decoded an i64 port as an IntOrString")
        };
        assert_eq!(u.metadata.name.as_deref(), Some("web"));
        assert_eq!(u.metadata.uid.as_deref(), Some("u1"));
        assert!(
            u.error
                .starts_with("spec.template.spec.containers[0].readinessProbe.httpGet.port"),
            "{}",
            u.error
        );
        assert!(u.error.contains("2147483648"), "{}", u.error);
        assert!(!u.error.contains("column"), "{}", u.error);
        assert_eq!(u.conditions.len(), 1);
    }

    #[test]
    fn a_readable_object_is_read() {
        let decoded: Decoded<PodSet> = read(&podset(json!({"containers": []})));
        let Decoded::Read(ps) = decoded else {
            panic!("a valid PodSet was not read")
        };
        assert_eq!(ps.spec.replicas, 2);
        assert_eq!(ps.meta().name.as_deref(), Some("web"));
    }

    /// A list is read item by item: one unreadable item leaves the others readable.
    #[test]
    fn one_unreadable_item_does_not_fail_its_list() {
        let bad =
            json!({"containers": [{"name": "c", "ports": [{"containerPort": 2147483648_i64}]}]});
        let list =
            json!({"metadata": {}, "items": [podset(bad), podset(json!({"containers": []}))]});
        let list: kube::core::ObjectList<Decoded<PodSet>> = read(&list);
        assert!(matches!(list.items[0], Decoded::Unreadable(_)));
        assert!(matches!(list.items[1], Decoded::Read(_)));
    }
}
