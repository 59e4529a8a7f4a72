//! A request, as the operator's client sends it, carried out on the store: the REST verbs the
//! operator and kube's watcher use, with the API server's answers and refusals.

use std::collections::HashMap;
use std::time::Duration;

use http::Method;
use jiff::Timestamp;
use serde_json::{Value, json};

use super::error::ApiError;
use super::resource::{self, Target};
use super::selector::Selector;
use super::store::finalizers::Propagation;
use super::store::{Key, Preconditions, Store};
use super::versions;
use super::watch::WatchSpec;
use bytes::Bytes;
use tokio::sync::mpsc;

/// The answer to one request.
pub enum Answer {
    Reply(u16, Value),
    /// A watch: its events stream until `timeout`.
    Watch(mpsc::UnboundedReceiver<Bytes>, Duration),
}

impl From<ApiError> for Answer {
    fn from(e: ApiError) -> Self {
        Answer::Reply(e.code, e.status())
    }
}

/// What a request needs from outside the store: the time, and names for `generateName`.
pub struct Env<'a> {
    pub now: Timestamp,
    pub name_suffix: &'a mut dyn FnMut() -> String,
}

/// Whether a request changes state (what a fence must stop).
pub fn mutating(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether a request is a watch.
pub fn is_watch(query: &str) -> bool {
    is_watch_query(&parse_query(query))
}

pub fn handle(
    store: &mut Store,
    method: &Method,
    path: &str,
    query: &str,
    body: &[u8],
    env: Env<'_>,
) -> Answer {
    let Some(target) = resource::parse(path) else {
        return ApiError::new(404, "NotFound", format!("the server could not find {path}")).into();
    };
    let query = parse_query(query);
    let body: Value = match body.is_empty() {
        true => Value::Null,
        false => match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => return ApiError::bad_request(format!("invalid JSON: {e}")).into(),
        },
    };
    let Some(version) = target.version else {
        return route(store, method, &target, &query, body, env).unwrap_or_else(Answer::from);
    };
    // At another version than the stored one: converted, both ways (`versions`).
    let answer = match (method, key(&target)) {
        (&Method::GET, None) if is_watch_query(&query) => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            "the model serves watches at the storage version only",
        )),
        (&Method::PATCH, Some(key)) => {
            let sub = target.subresource.as_deref();
            versions::patch_as(store, &key, &body, sub, version).and_then(ok)
        }
        (&Method::POST | &Method::PUT, _) => {
            let body = versions::stored(body);
            route(store, method, &target, &query, body, env)
        }
        _ => route(store, method, &target, &query, body, env),
    };
    match answer {
        Ok(Answer::Reply(code, reply)) => Answer::Reply(code, versions::served(reply, version)),
        Ok(watch) => watch,
        Err(e) => e.into(),
    }
}

fn is_watch_query(query: &HashMap<String, String>) -> bool {
    matches!(query.get("watch").map(String::as_str), Some("true" | "1"))
}

fn route(
    store: &mut Store,
    method: &Method,
    t: &Target,
    query: &HashMap<String, String>,
    body: Value,
    env: Env<'_>,
) -> Result<Answer, ApiError> {
    let sub = t.subresource.as_deref();
    match (method, key(t)) {
        (&Method::GET, Some(key)) => match store.get(&key) {
            Some(o) => Ok(Answer::Reply(200, (**o).clone())),
            None => Err(ApiError::not_found(key.kind, &key.name)),
        },
        (&Method::GET, None) if is_watch_query(query) => watch(store, t, query),
        (&Method::GET, None) => list(store, t, query),
        (&Method::POST, None) => {
            let ns = t.namespace.as_deref().ok_or_else(|| {
                ApiError::new(405, "MethodNotAllowed", "create needs a namespace")
            })?;
            let object = store.create(t.kind, ns, body, env.name_suffix, env.now)?;
            Ok(Answer::Reply(201, (*object).clone()))
        }
        (&Method::PUT, Some(key)) => ok(store.replace(&key, body, sub)?),
        // A JSON patch is a list of operations; a merge patch, an object.
        (&Method::PATCH, Some(key)) if body.is_array() => ok(store.json_patch(&key, &body, sub)?),
        (&Method::PATCH, Some(key)) => ok(store.merge_patch(&key, &body, sub)?),
        (&Method::DELETE, Some(key)) => {
            let pre = Preconditions {
                uid: body["preconditions"]["uid"].as_str().map(String::from),
                resource_version: body["preconditions"]["resourceVersion"]
                    .as_str()
                    .map(String::from),
            };
            let grace = body["gracePeriodSeconds"].as_i64();
            let propagation = Propagation::of(&body);
            let gone = store.delete_propagating(&key, &pre, grace, propagation, env.now)?;
            match key.kind.returns_deleted_object() || !gone["metadata"]["finalizers"].is_null() {
                true => ok(gone),
                false => {
                    let uid = gone["metadata"]["uid"].as_str().unwrap_or_default();
                    Ok(Answer::Reply(
                        200,
                        ApiError::deleted(key.kind, &key.name, uid),
                    ))
                }
            }
        }
        _ => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            format!("{method} is not supported here"),
        )),
    }
}

fn ok(object: std::sync::Arc<Value>) -> Result<Answer, ApiError> {
    Ok(Answer::Reply(200, (*object).clone()))
}

fn key(t: &Target) -> Option<Key> {
    Some(Key {
        kind: t.kind,
        namespace: t.namespace.clone()?,
        name: t.name.clone()?,
    })
}

fn selectors(query: &HashMap<String, String>) -> Result<(Selector, Selector), ApiError> {
    let parse = |k: &str| {
        Selector::parse(query.get(k).map(String::as_str).unwrap_or_default())
            .map_err(ApiError::bad_request)
    };
    Ok((parse("labelSelector")?, parse("fieldSelector")?))
}

/// Every selected object in one page: the model never holds more than a page (500). As the
/// API server's, the items of a built-in kind's list name no kind, a custom resource's do, and
/// its list has an empty `continue`.
fn list(store: &Store, t: &Target, query: &HashMap<String, String>) -> Result<Answer, ApiError> {
    let (labels, fields) = selectors(query)?;
    let custom = t.kind.is_custom();
    let items: Vec<Value> = store
        .objects(t.kind, t.namespace.as_deref())
        .filter(|o| labels.matches_labels(o) && fields.matches_fields(o))
        .map(|o| {
            let mut item = (**o).clone();
            if let (false, Some(item)) = (custom, item.as_object_mut()) {
                item.remove("kind");
                item.remove("apiVersion");
            }
            item
        })
        .collect();
    let mut metadata = json!({"resourceVersion": store.resource_version().to_string()});
    if custom {
        metadata["continue"] = "".into();
    }
    Ok(Answer::Reply(
        200,
        json!({
            "kind": format!("{}List", t.kind.name()),
            "apiVersion": t.kind.api_version(),
            "metadata": metadata,
            "items": items,
        }),
    ))
}

fn watch(
    store: &mut Store,
    t: &Target,
    query: &HashMap<String, String>,
) -> Result<Answer, ApiError> {
    let (labels, fields) = selectors(query)?;
    let from = match query.get("resourceVersion").map(String::as_str) {
        None | Some("" | "0") => None,
        Some(v) => Some(
            v.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {v:?}")))?,
        ),
    };
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|s| s.parse().ok())
        .unwrap_or(1800);
    let spec = WatchSpec {
        kind: t.kind,
        namespace: t.namespace.clone(),
        labels,
        fields,
        from,
        bookmarks: query.get("allowWatchBookmarks").map(String::as_str) == Some("true"),
    };
    Ok(Answer::Watch(
        store.watch(spec)?,
        Duration::from_secs(timeout),
    ))
}

/// `a=1&b=x%3Dy` as a map, percent-decoded.
pub fn parse_query(query: &str) -> HashMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = |b: u8| (b as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(hi), Some(lo)) => {
                        out.push((hi * 16 + lo) as u8);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_decoded() {
        let q = parse_query(
            "labelSelector=app.kubernetes.io%2Fmanaged-by%3Dpodset-operator&watch=true&x",
        );
        assert_eq!(
            q["labelSelector"],
            "app.kubernetes.io/managed-by=podset-operator"
        );
        assert_eq!(q["watch"], "true");
        assert_eq!(q["x"], "");
        assert!(is_watch("resourceVersion=5&watch=1"));
        assert_eq!(decode("%4"), "%4");
    }
}
