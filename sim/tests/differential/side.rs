//! One API server's side of a sequence, and one helper per side: the model's store, the
//! simulated world, the real API server.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use http::{Method, Request};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, WatchEvent, WatchParams};
use serde_json::{Value, json};

use podset_operator::client;
use podset_sim::faults::Faults;
use podset_sim::model::http::{Env, handle};
use podset_sim::model::resource::Kind;
use podset_sim::model::service;
use podset_sim::model::store::Store;
use podset_sim::oracle::{Actor, Oracle};
use podset_sim::world::{Sim, World};
use testenv::{Cluster, Options};

use crate::{DEADLINE, FIRST_VERSION, OPTIONAL};

async fn cluster() -> Result<Arc<Cluster>> {
    testenv::shared("differential", || Options {
        crds: Some(podset_operator::api::crds_yaml()),
        ..Options::default()
    })
    .await
}

/// One API server's side of a sequence: its client, and the answers it got.
pub(crate) struct Side {
    client: Client,
    /// The model's store, on the side of the model alone: the sequence sends its bookmarks.
    store: Option<Arc<Mutex<Store>>>,
    pub(crate) ns: String,
    /// The real API server's side.
    real: bool,
    pub(crate) steps: Vec<(String, Value)>,
    /// Strings that differ between the sides by nature (generated names), and what they stand
    /// for.
    pub(crate) aliases: Vec<(String, String)>,
}

impl Side {
    pub(crate) fn path(&self, kind: Kind, name: Option<&str>) -> String {
        kind.path(&self.ns, name)
    }

    /// Sends one request and records its answer: its status code and body.
    pub(crate) async fn call(
        &mut self,
        step: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        let content_type = match method {
            // A list of operations is a JSON patch; an object, a merge patch.
            Method::PATCH if body.as_ref().is_some_and(Value::is_array) => {
                "application/json-patch+json"
            }
            Method::PATCH => "application/merge-patch+json",
            _ => "application/json",
        };
        let body = body.map_or_else(Vec::new, |b| serde_json::to_vec(&b).expect("JSON"));
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::CONTENT_TYPE, content_type)
            .body(kube::client::Body::from(body))?;
        let response = self.client.send(request).await?;
        let code = response.status().as_u16();
        let bytes = http_body_util::BodyExt::collect(response.into_body())
            .await?
            .to_bytes();
        let body: Value = serde_json::from_slice(&bytes)
            .with_context(|| format!("{step}: {}", String::from_utf8_lossy(&bytes)))?;
        self.record(step, json!({"code": code, "body": body.clone()}));
        Ok(body)
    }

    pub(crate) async fn create(&mut self, step: &str, kind: Kind, object: Value) -> Result<Value> {
        let path = self.path(kind, None);
        self.call(step, Method::POST, &path, Some(object)).await
    }

    pub(crate) async fn get(&mut self, step: &str, kind: Kind, name: &str) -> Result<Value> {
        let path = self.path(kind, Some(name));
        self.call(step, Method::GET, &path, None).await
    }

    pub(crate) async fn patch(
        &mut self,
        step: &str,
        kind: Kind,
        name: &str,
        patch: Value,
    ) -> Result<Value> {
        let path = self.path(kind, Some(name));
        self.call(step, Method::PATCH, &path, Some(patch)).await
    }

    pub(crate) async fn patch_status(
        &mut self,
        step: &str,
        kind: Kind,
        name: &str,
        patch: Value,
    ) -> Result<Value> {
        let path = format!("{}/status", self.path(kind, Some(name)));
        self.call(step, Method::PATCH, &path, Some(patch)).await
    }

    pub(crate) async fn put(
        &mut self,
        step: &str,
        kind: Kind,
        name: &str,
        object: Value,
    ) -> Result<Value> {
        let path = self.path(kind, Some(name));
        self.call(step, Method::PUT, &path, Some(object)).await
    }

    pub(crate) async fn delete(
        &mut self,
        step: &str,
        kind: Kind,
        name: &str,
        options: Value,
    ) -> Result<Value> {
        let path = self.path(kind, Some(name));
        let mut body = json!({"kind": "DeleteOptions", "apiVersion": "v1"});
        json_patch::merge(&mut body, &options);
        self.call(step, Method::DELETE, &path, Some(body)).await
    }

    /// A LIST: its resourceVersion must be at least every item's, and is recorded as that
    /// (the real server's may be any later write of the cluster's).
    pub(crate) async fn list(&mut self, step: &str, kind: Kind, query: &str) -> Result<Value> {
        let path = format!("{}?{query}", self.path(kind, None));
        let mut list = self.call(step, Method::GET, &path, None).await?;
        let list_version = version(&list);
        let items = list["items"].as_array().context("no items")?;
        for item in items {
            ensure!(
                version(item) <= list_version,
                "{step}: the list's resourceVersion {list_version} is older than an item's: {item}"
            );
        }
        list["metadata"]["resourceVersion"] = "<at least every item's>".into();
        let recorded = self.steps.last_mut().expect("recorded");
        recorded.1["body"] = list.clone();
        Ok(list)
    }

    /// The operator's paged list of pods' metadata (`client::list_metadata_paged`), recorded
    /// as it reads it. The real server answers it in protobuf, as it must for the cache check
    /// to be cheap (checked here); the model in JSON, which the operator reads as well.
    pub(crate) async fn list_metadata(&mut self, step: &str, selector: &str) -> Result<()> {
        let api = Api::<Pod>::namespaced(self.client.clone(), &self.ns);
        let params = ListParams::default().labels(selector);
        let mut items = Vec::new();
        client::list_metadata_paged(&api, &params, |page| items.extend(page)).await?;
        let items: Vec<Value> = items
            .into_iter()
            .map(|p| {
                let owner = p.controller.map(|o| json!({"kind": o.kind, "uid": o.uid}));
                json!({"metadata": {"name": p.name, "uid": p.uid},
                    "deleting": p.deleting, "controller": owner})
            })
            .collect();
        if self.real {
            let request = kube::core::Request::new(api.resource_url());
            let mut request = request.list_metadata(&params.limit(1))?;
            let accept = http::HeaderValue::from_static(client::ACCEPT_METADATA);
            request.headers_mut().insert(http::header::ACCEPT, accept);
            let response = self.client.send(request.map(Into::into)).await?;
            let encoding = response.headers().get(http::header::CONTENT_TYPE);
            ensure!(
                encoding.is_some_and(|e| e == "application/vnd.kubernetes.protobuf"),
                "{step}: pods' metadata came as {encoding:?}, not protobuf"
            );
        }
        self.record(step, json!({"items": items}));
        Ok(())
    }

    fn api(&self, kind: Kind) -> Api<DynamicObject> {
        let (group, version) = kind.api_version().split_once('/').unwrap_or(("", "v1"));
        let resource = ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: kind.api_version().into(),
            kind: kind.name().into(),
            plural: kind.plural().into(),
        };
        Api::namespaced_with(self.client.clone(), &self.ns, &resource)
    }

    /// Starts a watch of `kind` from `version`.
    pub(crate) async fn watch(
        &self,
        kind: Kind,
        params: &WatchParams,
        version: &str,
    ) -> Result<Events> {
        let events = self.api(kind).watch(params, version).await?;
        Ok(events.map_err(anyhow::Error::from).boxed())
    }

    /// Reads `n` events of `events` (failing after [`DEADLINE`]) and records them.
    pub(crate) async fn events(
        &mut self,
        step: &str,
        events: &mut Events,
        n: usize,
    ) -> Result<Vec<Value>> {
        let mut seen = Vec::new();
        while seen.len() < n {
            let event = tokio::time::timeout(DEADLINE, events.next())
                .await
                .with_context(|| format!("{step}: {} of {n} events in {DEADLINE:?}", seen.len()))?
                .with_context(|| {
                    format!("{step}: the watch ended after {} events", seen.len())
                })??;
            seen.push(serde_json::to_value(&event)?);
        }
        self.record(step, Value::Array(seen.clone()));
        Ok(seen)
    }

    /// Records what may not come from the real server, and is compared only if it does.
    pub(crate) fn record_optional(&mut self, step: &str, answer: Option<Value>) {
        self.record(&format!("{OPTIONAL}{step}"), answer.unwrap_or_default());
    }

    /// Sends a BOOKMARK to the model's watches that asked for them (the real server sends its
    /// own, 2 s before a watch's timeout at the latest).
    pub(crate) fn bookmark(&self) {
        if let Some(store) = &self.store {
            store.lock().expect("store").bookmark();
        }
    }

    fn record(&mut self, step: &str, answer: Value) {
        self.steps.push((step.to_string(), answer));
    }

    /// `name` differs between the sides by nature; compare it as `stands_for`.
    pub(crate) fn alias(&mut self, name: &str, stands_for: &str) {
        self.aliases
            .push((name.to_string(), stands_for.to_string()));
    }

    /// Polls the server until `check` holds of the items of a LIST (without recording it).
    pub(crate) async fn until(
        &self,
        what: &str,
        kind: Kind,
        check: impl Fn(&[Value]) -> bool,
    ) -> Result<()> {
        let api = self.api(kind);
        let check = &check;
        testenv::poll(DEADLINE, what, || {
            let api = api.clone();
            async move {
                let list = api.list(&Default::default()).await?;
                let items: Vec<Value> = list
                    .items
                    .iter()
                    .map(serde_json::to_value)
                    .collect::<Result<_, _>>()?;
                Ok(check(&items))
            }
        })
        .await
    }
}

pub(crate) type Events = futures::stream::BoxStream<'static, Result<WatchEvent<DynamicObject>>>;

pub(crate) fn version(o: &Value) -> u64 {
    o["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_default()
}

pub(crate) fn name_of(o: &Value) -> String {
    o["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A side on the model's store alone.
pub(crate) fn model_side(ns: &str) -> Side {
    let store = Arc::new(Mutex::new(Store::starting_at(FIRST_VERSION)));
    store.lock().expect("store").add_namespace(ns);
    let served = store.clone();
    let client = service::client(move |method, path, query, body: &Bytes| {
        let mut suffix = || podset_operator::plan::name::random("");
        let env = Env {
            now: Timestamp::now(),
            name_suffix: &mut suffix,
        };
        let mut store = served.lock().expect("store");
        handle(&mut store, method, path, query, body, env)
    });
    side(client, Some(store), ns)
}

/// A side on the simulated world: the model's store with the simulation's kubelet and garbage
/// collector, on this test's (real) time.
pub(crate) fn world_side(ns: &str) -> Side {
    let mut store = Store::starting_at(FIRST_VERSION);
    store.add_namespace(ns);
    let world = World {
        store,
        oracle: Oracle::default(),
        faults: Faults::new(fastrand::Rng::with_seed(26), Some(&[])),
        rng: fastrand::Rng::with_seed(26),
        requests: 0,
    };
    let sim = Sim::new(world);
    let client = service::client(move |method, path, query, body: &Bytes| {
        sim.serve(Actor::User, Duration::ZERO, method, path, query, body)
    });
    side(client, None, ns)
}

pub(crate) async fn real_side(ns: &str) -> Result<Side> {
    let cluster = cluster().await?;
    cluster.create_namespace(ns).await?;
    let client = cluster.client().await?;
    Ok(Side {
        real: true,
        ..side(client, None, ns)
    })
}

fn side(client: Client, store: Option<Arc<Mutex<Store>>>, ns: &str) -> Side {
    Side {
        client,
        store,
        ns: ns.to_string(),
        real: false,
        steps: Vec::new(),
        aliases: Vec::new(),
    }
}
