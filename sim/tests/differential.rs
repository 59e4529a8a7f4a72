//! The model checked against the real API server (issue 26): each sequence sends the same
//! requests, through a `kube::Client`, to the model of kube-apiserver (`podset_sim::model`)
//! and to a real kube-apiserver with the project's CRDs, in a namespace of the same name, and
//! the answers must agree once normalized: UIDs stand for the object they name, timestamps
//! are `<time>`, managedFields go, and resourceVersions become their rank among those the
//! sequence saw (the order matters, not the values).
//!
//! What the model leaves out on purpose, because the operator cannot tell, is said where a
//! sequence meets it: the pod fields the API server's defaulting and admission fill in
//! (`DEFAULTED_POD_SPEC`), the immutability of a pod's spec, the window a watch may start in,
//! and when bookmarks come.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use http::{Method, Request};
use jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, WatchEvent, WatchParams};
use serde_json::{Value, json};

use podset_operator::api::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use podset_sim::faults::Faults;
use podset_sim::model::http::{Env, handle};
use podset_sim::model::resource::Kind;
use podset_sim::model::service;
use podset_sim::model::store::Store;
use podset_sim::oracle::{Actor, Oracle};
use podset_sim::world::{Sim, World};
use testenv::{Cluster, Options};

/// The API server's alphabet for `generateName`.
const ALPHABET: &str = "bcdfghjklmnpqrstvwxz2456789";
/// Some API server writes (bootstrap objects) come before the first of a test's own.
const FIRST_VERSION: u64 = 1000;
/// How long a sequence waits for a watch event or the garbage collector.
const DEADLINE: Duration = Duration::from_secs(30);
/// The label of a step compared only if the real server answered it.
const OPTIONAL: &str = "(optional) ";
/// A UID no object has.
const WRONG_UID: &str = "00000000-0000-4000-8000-00000000dead";

async fn cluster() -> Result<Arc<Cluster>> {
    testenv::shared("differential", || Options {
        crds: Some(podset_operator::api::crds_yaml()),
        ..Options::default()
    })
    .await
}

/// One API server's side of a sequence: its client, and the answers it got.
struct Side {
    client: Client,
    /// The model's store, on the side of the model alone: the sequence sends its bookmarks.
    store: Option<Arc<Mutex<Store>>>,
    ns: String,
    steps: Vec<(String, Value)>,
    /// Strings that differ between the sides by nature (generated names), and what they stand
    /// for.
    aliases: Vec<(String, String)>,
}

impl Side {
    fn path(&self, kind: Kind, name: Option<&str>) -> String {
        kind.path(&self.ns, name)
    }

    /// Sends one request and records its answer: its status code and body.
    async fn call(
        &mut self,
        step: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        let content_type = match method {
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

    async fn create(&mut self, step: &str, kind: Kind, object: Value) -> Result<Value> {
        let path = self.path(kind, None);
        self.call(step, Method::POST, &path, Some(object)).await
    }

    async fn get(&mut self, step: &str, kind: Kind, name: &str) -> Result<Value> {
        let path = self.path(kind, Some(name));
        self.call(step, Method::GET, &path, None).await
    }

    async fn patch(&mut self, step: &str, kind: Kind, name: &str, patch: Value) -> Result<Value> {
        let path = self.path(kind, Some(name));
        self.call(step, Method::PATCH, &path, Some(patch)).await
    }

    async fn patch_status(
        &mut self,
        step: &str,
        kind: Kind,
        name: &str,
        patch: Value,
    ) -> Result<Value> {
        let path = format!("{}/status", self.path(kind, Some(name)));
        self.call(step, Method::PATCH, &path, Some(patch)).await
    }

    async fn put(&mut self, step: &str, kind: Kind, name: &str, object: Value) -> Result<Value> {
        let path = self.path(kind, Some(name));
        self.call(step, Method::PUT, &path, Some(object)).await
    }

    async fn delete(
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
    async fn list(&mut self, step: &str, kind: Kind, query: &str) -> Result<Value> {
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
    async fn watch(&self, kind: Kind, params: &WatchParams, version: &str) -> Result<Events> {
        let events = self.api(kind).watch(params, version).await?;
        Ok(events.map_err(anyhow::Error::from).boxed())
    }

    /// Reads `n` events of `events` (failing after [`DEADLINE`]) and records them.
    async fn events(&mut self, step: &str, events: &mut Events, n: usize) -> Result<Vec<Value>> {
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
    fn record_optional(&mut self, step: &str, answer: Option<Value>) {
        self.record(&format!("{OPTIONAL}{step}"), answer.unwrap_or_default());
    }

    /// Sends a BOOKMARK to the model's watches that asked for them (the real server sends its
    /// own, 2 s before a watch's timeout at the latest).
    fn bookmark(&self) {
        if let Some(store) = &self.store {
            store.lock().expect("store").bookmark();
        }
    }

    fn record(&mut self, step: &str, answer: Value) {
        self.steps.push((step.to_string(), answer));
    }

    /// `name` differs between the sides by nature; compare it as `stands_for`.
    fn alias(&mut self, name: &str, stands_for: &str) {
        self.aliases
            .push((name.to_string(), stands_for.to_string()));
    }

    /// Polls the server until `check` holds of the items of a LIST (without recording it).
    async fn until(&self, what: &str, kind: Kind, check: impl Fn(&[Value]) -> bool) -> Result<()> {
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

type Events = futures::stream::BoxStream<'static, Result<WatchEvent<DynamicObject>>>;

fn version(o: &Value) -> u64 {
    o["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_default()
}

fn name_of(o: &Value) -> String {
    o["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A side on the model's store alone.
fn model_side(ns: &str) -> Side {
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
fn world_side(ns: &str) -> Side {
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

async fn real_side(ns: &str) -> Result<Side> {
    let cluster = cluster().await?;
    cluster.create_namespace(ns).await?;
    let client = cluster.client().await?;
    Ok(side(client, None, ns))
}

fn side(client: Client, store: Option<Arc<Mutex<Store>>>, ns: &str) -> Side {
    Side {
        client,
        store,
        ns: ns.to_string(),
        steps: Vec::new(),
        aliases: Vec::new(),
    }
}

/// Runs `sequence` on the model (`model_side` or `world_side`) and on the real server, at
/// once, in a namespace of the same name, and compares what each saw.
async fn differential<F, Fut>(name: &str, model: fn(&str) -> Side, sequence: F) -> Result<()>
where
    F: Fn(Side) -> Fut,
    Fut: Future<Output = Result<Side>>,
{
    let ns = format!("diff-{name}-{}", std::process::id() % 10_000);
    let model = model(&ns);
    let real = real_side(&ns).await?;
    let (model, real) = tokio::join!(sequence(model), sequence(real));
    let (model, real) = (
        model.context("on the model")?,
        real.context("on the real API server")?,
    );
    let (model, real) = (normalized(&model), normalized(&real));
    let mut differences = Vec::new();
    for i in 0..model.len().max(real.len()) {
        let (m, r) = (model.get(i), real.get(i));
        let optional = r.is_some_and(|(step, v)| step.starts_with(OPTIONAL) && v.is_null());
        if m != r && !optional {
            let show = |s: Option<&(String, Value)>| {
                s.map_or("(none)".into(), |(step, v)| {
                    format!("{step}: {}", serde_json::to_string_pretty(v).expect("JSON"))
                })
            };
            differences.push(format!(
                "step {i}:\n  model: {}\n  real:  {}",
                show(m),
                show(r)
            ));
        }
    }
    if !differences.is_empty() {
        bail!(
            "{name}: the model and the API server disagree:\n{}",
            differences.join("\n")
        );
    }
    Ok(())
}

/// The pod fields the API server's defaulting and admission fill in (the ServiceAccount
/// token volume, default tolerations, ...). The model does not: the operator never reads
/// them.
const DEFAULTED_POD_SPEC: &[&str] = &[
    "dnsPolicy",
    "enableServiceLinks",
    "preemptionPolicy",
    "priority",
    "restartPolicy",
    "schedulerName",
    "securityContext",
    "serviceAccount",
    "serviceAccountName",
    "terminationGracePeriodSeconds",
    "tolerations",
    "volumes",
];
const DEFAULTED_CONTAINER: &[&str] = &[
    "imagePullPolicy",
    "resources",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "volumeMounts",
];

/// What a side saw, with what differs by nature made comparable.
fn normalized(side: &Side) -> Vec<(String, Value)> {
    let mut steps = side.steps.clone();
    // Each UID stands for the name of its object.
    let mut uids = BTreeMap::new();
    for (_, v) in &steps {
        visit(v, &mut |o| {
            if let (Some(uid), Some(name)) = (
                o["metadata"]["uid"].as_str(),
                o["metadata"]["name"].as_str(),
            ) {
                let name = side
                    .aliases
                    .iter()
                    .fold(name.to_string(), |n, (from, to)| n.replace(from, to));
                uids.insert(uid.to_string(), format!("<uid of {name}>"));
            }
        });
    }
    let mut versions = BTreeSet::new();
    for (_, v) in &mut steps {
        rewrite(v, &mut |key, v| match v {
            Value::String(s) => {
                for (from, to) in &side.aliases {
                    *s = s.replace(from, to);
                }
                for (from, to) in &uids {
                    *s = s.replace(from, to);
                }
                *s = masked_uuids(s);
                if is_timestamp(s) {
                    *s = "<time>".into();
                }
                if key == "message" {
                    *s = numbers_masked(s);
                }
                if key == "resourceVersion"
                    && let Ok(n) = s.parse::<u64>()
                {
                    versions.insert(n);
                }
            }
            Value::Object(o) => {
                o.remove("managedFields");
                if let Some(spec) = o.get_mut("spec").and_then(Value::as_object_mut)
                    && spec.contains_key("containers")
                {
                    for field in DEFAULTED_POD_SPEC {
                        spec.remove(*field);
                    }
                    for c in spec["containers"].as_array_mut().into_iter().flatten() {
                        for field in DEFAULTED_CONTAINER {
                            c.as_object_mut().map(|c| c.remove(*field));
                        }
                    }
                }
            }
            _ => {}
        });
    }
    let rank: BTreeMap<String, String> = versions
        .iter()
        .enumerate()
        .map(|(i, v)| (v.to_string(), format!("<rv {i}>")))
        .collect();
    for (_, v) in &mut steps {
        rewrite(v, &mut |key, v| {
            if key == "resourceVersion"
                && let Some(r) = v.as_str().and_then(|s| rank.get(s))
            {
                *v = r.clone().into();
            }
        });
    }
    steps
}

/// Calls `f` on every object in `v`.
fn visit(v: &Value, f: &mut impl FnMut(&Value)) {
    match v {
        Value::Object(o) => {
            f(v);
            o.values().for_each(|v| visit(v, f));
        }
        Value::Array(a) => a.iter().for_each(|v| visit(v, f)),
        _ => {}
    }
}

/// Calls `f` on every value in `v`, with the key it is under (`""` in arrays), the value
/// after its children.
fn rewrite(v: &mut Value, f: &mut impl FnMut(&str, &mut Value)) {
    fn walk(key: &str, v: &mut Value, f: &mut impl FnMut(&str, &mut Value)) {
        match v {
            Value::Object(o) => o.iter_mut().for_each(|(k, v)| walk(k, v, f)),
            Value::Array(a) => a.iter_mut().for_each(|v| walk("", v, f)),
            _ => {}
        }
        f(key, v);
    }
    walk("", v, f)
}

fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 20
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[10] == b'T'
        && s.ends_with('Z')
}

/// Every number in a message (a resourceVersion, a token's lifetime) as `N`.
fn numbers_masked(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        match c.is_ascii_digit() {
            true if out.ends_with('N') => {}
            true => out.push('N'),
            false => out.push(c),
        }
    }
    out
}

/// UUID-shaped substrings (UIDs of objects the sequence never saw) as `<uid>`.
fn masked_uuids(s: &str) -> String {
    let shape = |w: &[u8]| {
        w.len() == 36
            && w.iter().enumerate().all(|(i, c)| match i {
                8 | 13 | 18 | 23 => *c == b'-',
                _ => c.is_ascii_hexdigit(),
            })
    };
    let mut out = String::new();
    let mut rest = s;
    while rest.len() >= 36 {
        if shape(&rest.as_bytes()[..36]) {
            out.push_str("<uid>");
            rest = &rest[36..];
        } else {
            let c = rest.chars().next().expect("not empty");
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out + rest
}

fn pod(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]},
    })
}

fn managed() -> Value {
    json!({ MANAGED_BY_LABEL: MANAGED_BY_VALUE })
}

fn podset(name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "app.example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": name},
        "spec": {"replicas": replicas},
    })
}

fn at(name: &str) -> Value {
    json!({
        "apiVersion": "cnat.programming-kubernetes.info/v1alpha1", "kind": "At",
        "metadata": {"name": name},
        "spec": {"schedule": "2030-01-01T00:00:00Z", "command": "echo YAY"},
    })
}

fn lease(name: &str, holder: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
    })
}

/// 1. Creates: `generateName`, a name taken, a namespace that does not exist.
#[tokio::test]
async fn creates() -> Result<()> {
    differential("creates", model_side, |mut s| async move {
        let generated = s
            .create(
                "generateName",
                Kind::PodSet,
                json!({"apiVersion": "app.example.com/v1alpha1", "kind": "PodSet",
                    "metadata": {"generateName": "web-"}, "spec": {"replicas": 1}}),
            )
            .await?;
        let name = name_of(&generated);
        let suffix = name.strip_prefix("web-").context("the prefix")?;
        ensure!(
            suffix.len() == 5 && suffix.chars().all(|c| ALPHABET.contains(c)),
            "generated name {name}"
        );
        s.alias(&name, "web-<5 generated>");
        let long = "p".repeat(70);
        let cut = s
            .create(
                "generateName, a prefix too long for a label",
                Kind::Pod,
                json!({"metadata": {"generateName": long},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
            )
            .await?;
        let name = name_of(&cut);
        ensure!(name.len() == 63, "generated name {name}");
        s.alias(&name, "p x 58 + <5 generated>");
        s.create("a pod", Kind::Pod, pod("p", managed())).await?;
        s.create("the pod again", Kind::Pod, pod("p", managed()))
            .await?;
        s.create("a pod without a name", Kind::Pod, pod("", managed()))
            .await?;
        s.create("a PodSet", Kind::PodSet, podset("web", 1)).await?;
        s.create("the PodSet again", Kind::PodSet, podset("web", 1))
            .await?;
        let mut empty = podset("empty", 1);
        empty["metadata"]["labels"] = json!({});
        empty["metadata"]["annotations"] = json!({});
        empty["metadata"]["finalizers"] = json!([]);
        s.create("a PodSet with empty labels", Kind::PodSet, empty)
            .await?;
        let mut empty = pod("empty", json!({}));
        empty["metadata"]["annotations"] = json!({});
        empty["metadata"]["ownerReferences"] = json!([]);
        s.create("a pod with empty labels", Kind::Pod, empty)
            .await?;
        let mut versioned = pod("versioned", managed());
        versioned["metadata"]["resourceVersion"] = "5".into();
        s.create("a pod with a resourceVersion", Kind::Pod, versioned)
            .await?;
        let mut astray = pod("astray", managed());
        astray["metadata"]["namespace"] = "elsewhere".into();
        s.create("a pod of another namespace", Kind::Pod, astray)
            .await?;
        let elsewhere = Kind::Pod.path(&format!("{}-missing", s.ns), None);
        s.call(
            "in a namespace that does not exist",
            Method::POST,
            &elsewhere,
            Some(pod("p", managed())),
        )
        .await?;
        Ok(s)
    })
    .await
}

/// 2. Reads and writes under optimistic concurrency. (Unlike pods, Leases and custom
/// resources refuse a PUT that names no resourceVersion.)
#[tokio::test]
async fn concurrency() -> Result<()> {
    differential("concurrency", model_side, |mut s| async move {
        s.get("GET of a missing pod", Kind::Pod, "nobody").await?;
        let first = s.create("a Lease", Kind::Lease, lease("l", "a")).await?;
        let mut watch = s
            .watch(
                Kind::Lease,
                &WatchParams::default(),
                &version(&first).to_string(),
            )
            .await?;
        let mut second = first.clone();
        second["spec"]["holderIdentity"] = "b".into();
        s.put("PUT over its resourceVersion", Kind::Lease, "l", second)
            .await?;
        let mut stale = first.clone();
        stale["spec"]["holderIdentity"] = "c".into();
        s.put("PUT over a stale resourceVersion", Kind::Lease, "l", stale)
            .await?;
        s.put(
            "PUT of a Lease without a resourceVersion",
            Kind::Lease,
            "l",
            lease("l", "c"),
        )
        .await?;
        let mut empty = lease("l", "c");
        empty["metadata"]["resourceVersion"] = "".into();
        s.put("PUT with an empty resourceVersion", Kind::Lease, "l", empty)
            .await?;
        let stale = json!({"metadata": {"resourceVersion": first["metadata"]["resourceVersion"]},
            "spec": {"holderIdentity": "c"}});
        s.patch(
            "PATCH with a stale resourceVersion",
            Kind::Lease,
            "l",
            stale,
        )
        .await?;
        let change = json!({"spec": {"holderIdentity": "d"}});
        let changed = s.patch("PATCH", Kind::Lease, "l", change.clone()).await?;
        let same = s
            .patch("PATCH that changes nothing", Kind::Lease, "l", change)
            .await?;
        ensure!(
            version(&same) == version(&changed),
            "a PATCH that changed nothing wrote"
        );
        s.patch(
            "PATCH again",
            Kind::Lease,
            "l",
            json!({"spec": {"holderIdentity": "e"}}),
        )
        .await?;
        s.events("each change once, and nothing else", &mut watch, 3)
            .await?;
        s.create("a PodSet", Kind::PodSet, podset("web", 1)).await?;
        s.put(
            "PUT of a PodSet without a resourceVersion",
            Kind::PodSet,
            "web",
            podset("web", 2),
        )
        .await?;
        // Their spec is immutable but for a few fields, which the model does not enforce: the
        // operator never updates a pod (the simulation's kubelet binds pods with a PATCH).
        let mut p = s.create("a pod", Kind::Pod, pod("p", managed())).await?;
        p["metadata"]["labels"] = json!({"x": "y"});
        p["metadata"]
            .as_object_mut()
            .map(|m| m.remove("resourceVersion"));
        s.put("PUT of a pod without a resourceVersion", Kind::Pod, "p", p)
            .await?;
        Ok(s)
    })
    .await
}

/// 3. The status subresource of PodSets, Ats and pods, and `metadata.generation`.
#[tokio::test]
async fn status() -> Result<()> {
    differential("status", model_side, |mut s| async move {
        let mut with_status = podset("web", 2);
        with_status["status"] = json!({"availableReplicas": 2});
        s.create("a PodSet, with a status", Kind::PodSet, with_status)
            .await?;
        let status = json!({"status": {"availableReplicas": 1, "podNames": ["a"]},
            "spec": {"replicas": 5}});
        s.patch_status(
            "PATCH of its status, and its spec",
            Kind::PodSet,
            "web",
            status,
        )
        .await?;
        let spec = json!({"spec": {"replicas": 3}, "status": {"availableReplicas": 9}});
        s.patch(
            "PATCH of its spec, and its status",
            Kind::PodSet,
            "web",
            spec,
        )
        .await?;
        let labels = json!({"metadata": {"labels": {"tier": "front"}}});
        s.patch("PATCH of its labels", Kind::PodSet, "web", labels)
            .await?;
        let current = s.get("GET", Kind::PodSet, "web").await?;
        let mut stale = current.clone();
        stale["metadata"]["resourceVersion"] = "1".into();
        stale["status"]["availableReplicas"] = 0.into();
        let path = format!("{}/status", s.path(Kind::PodSet, Some("web")));
        s.call(
            "PUT of its status over a stale resourceVersion",
            Method::PUT,
            &path,
            Some(stale),
        )
        .await?;
        let mut replaced = current.clone();
        replaced["status"] = json!({"availableReplicas": 3, "podNames": ["a", "b", "c"]});
        replaced["spec"]["replicas"] = 4.into();
        s.call("PUT of its status", Method::PUT, &path, Some(replaced))
            .await?;
        s.patch_status(
            "PATCH of the status of a missing PodSet",
            Kind::PodSet,
            "gone",
            json!({"status": {}}),
        )
        .await?;

        s.create("an At", Kind::At, at("job")).await?;
        let phase = json!({"status": {"phase": "PENDING"}});
        s.patch_status("PATCH of an At's status", Kind::At, "job", phase)
            .await?;
        let main = json!({"status": {"phase": "DONE"}});
        s.patch(
            "PATCH of an At's status through the main resource",
            Kind::At,
            "job",
            main,
        )
        .await?;

        s.create("a pod", Kind::Pod, pod("p", managed())).await?;
        let running = json!({"status": {"phase": "Running"}});
        s.patch_status("PATCH of a pod's status", Kind::Pod, "p", running)
            .await?;
        let main = json!({"status": {"phase": "Failed"}, "metadata": {"labels": {"x": "y"}}});
        s.patch(
            "PATCH of a pod's status through the main resource",
            Kind::Pod,
            "p",
            main,
        )
        .await?;
        let deadline = json!({"spec": {"activeDeadlineSeconds": 600}});
        s.patch("PATCH of a pod's spec", Kind::Pod, "p", deadline)
            .await?;
        Ok(s)
    })
    .await
}

/// 4. Deletes: preconditions, a missing object, graceful deletion of pods, and the answers.
#[tokio::test]
async fn deletes() -> Result<()> {
    differential("deletes", model_side, |mut s| async move {
        let p = s.create("a pod", Kind::Pod, pod("p", managed())).await?;
        let version = version(&p).to_string();
        let mut watch = s
            .watch(Kind::Pod, &WatchParams::default(), &version)
            .await?;
        s.alias(WRONG_UID, "<the wrong UID>");
        let wrong = json!({"preconditions": {"uid": WRONG_UID}});
        s.delete(
            "DELETE with a UID that does not match",
            Kind::Pod,
            "p",
            wrong,
        )
        .await?;
        let wrong = json!({"preconditions": {"resourceVersion": "1"}});
        s.delete(
            "DELETE with a resourceVersion that does not match",
            Kind::Pod,
            "p",
            wrong,
        )
        .await?;
        s.delete("DELETE of a missing pod", Kind::Pod, "nobody", json!({}))
            .await?;
        let p = s.get("GET", Kind::Pod, "p").await?;
        let right = json!({"preconditions": {"uid": p["metadata"]["uid"]}});
        s.delete("DELETE of an unscheduled pod", Kind::Pod, "p", right)
            .await?;
        // Two writes: marked with no grace, then gone.
        s.events("its deletion, as a watch sees it", &mut watch, 2)
            .await?;
        s.get("GET of the deleted pod", Kind::Pod, "p").await?;

        let mut bound = pod("bound", managed());
        bound["spec"]["nodeName"] = "nowhere".into();
        bound["spec"]["terminationGracePeriodSeconds"] = 7.into();
        s.create("a pod bound to a node", Kind::Pod, bound).await?;
        s.delete("DELETE of a scheduled pod", Kind::Pod, "bound", json!({}))
            .await?;
        s.get("GET of the terminating pod", Kind::Pod, "bound")
            .await?;
        s.delete(
            "DELETE of the terminating pod",
            Kind::Pod,
            "bound",
            json!({}),
        )
        .await?;
        let shorter = json!({"gracePeriodSeconds": 3});
        s.delete(
            "DELETE with a shorter grace period",
            Kind::Pod,
            "bound",
            shorter,
        )
        .await?;
        let now = json!({"gracePeriodSeconds": 0});
        s.delete("DELETE with no grace period", Kind::Pod, "bound", now)
            .await?;
        s.get("GET of the deleted pod", Kind::Pod, "bound").await?;

        let mut done = pod("done", managed());
        done["spec"]["nodeName"] = "nowhere".into();
        s.create("another pod bound to a node", Kind::Pod, done)
            .await?;
        s.patch_status(
            "it succeeded",
            Kind::Pod,
            "done",
            json!({"status": {"phase": "Succeeded"}}),
        )
        .await?;
        s.delete(
            "DELETE of a pod that finished",
            Kind::Pod,
            "done",
            json!({}),
        )
        .await?;
        s.get("GET of the deleted pod", Kind::Pod, "done").await?;

        s.create("a PodSet", Kind::PodSet, podset("web", 1)).await?;
        s.delete("DELETE of a PodSet", Kind::PodSet, "web", json!({}))
            .await?;
        s.create("an At", Kind::At, at("job")).await?;
        let wrong = json!({"preconditions": {"uid": WRONG_UID}});
        s.delete(
            "DELETE of an At with a UID that does not match",
            Kind::At,
            "job",
            wrong,
        )
        .await?;
        s.delete("DELETE of an At", Kind::At, "job", json!({}))
            .await?;
        s.create("a Lease", Kind::Lease, lease("l", "a")).await?;
        s.delete("DELETE of a Lease", Kind::Lease, "l", json!({}))
            .await?;
        Ok(s)
    })
    .await
}

/// 5. Lists: their resourceVersion, and label and field selectors.
#[tokio::test]
async fn lists() -> Result<()> {
    differential("lists", model_side, |mut s| async move {
        s.create("a managed pod", Kind::Pod, pod("a", managed()))
            .await?;
        s.create(
            "a pod of someone else",
            Kind::Pod,
            pod("b", json!({"app": "b"})),
        )
        .await?;
        s.create("another managed pod", Kind::Pod, pod("x", managed()))
            .await?;
        s.list("every pod", Kind::Pod, "").await?;
        let managed = format!("labelSelector={MANAGED_BY_LABEL}%3D{MANAGED_BY_VALUE}");
        s.list("the managed pods", Kind::Pod, &managed).await?;
        s.list("pod x", Kind::Pod, "fieldSelector=metadata.name%3Dx")
            .await?;
        let both = format!("{managed}&fieldSelector=metadata.name%3Db");
        s.list("managed pod b: none", Kind::Pod, &both).await?;
        s.list("unmanaged pods", Kind::Pod, "labelSelector=app%3Db")
            .await?;
        s.create("a PodSet", Kind::PodSet, podset("web", 1)).await?;
        s.create("an At", Kind::At, at("job")).await?;
        s.list("PodSets", Kind::PodSet, "").await?;
        s.list("Ats", Kind::At, "fieldSelector=metadata.name%3Djob")
            .await?;
        s.list("Leases: none", Kind::Lease, "").await?;
        Ok(s)
    })
    .await
}

/// 6. Watches: the events of each write, in order; a label selector's transitions; a
/// version too old; bookmarks.
#[tokio::test]
async fn watches() -> Result<()> {
    differential("watches", model_side, |mut s| async move {
        let first = s.create("a pod", Kind::Pod, pod("w", json!({}))).await?;
        let from = version(&first).to_string();
        let mut all = s.watch(Kind::Pod, &WatchParams::default(), &from).await?;
        let selected =
            WatchParams::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"));
        let mut selecting = s.watch(Kind::Pod, &selected, &from).await?;
        s.create("another pod", Kind::Pod, pod("v", json!({})))
            .await?;
        let label = json!({"metadata": {"labels": managed()}});
        s.patch("labelled", Kind::Pod, "w", label).await?;
        let unlabel = json!({"metadata": {"labels": {MANAGED_BY_LABEL: null}}});
        s.patch("unlabelled", Kind::Pod, "w", unlabel).await?;
        let label = json!({"metadata": {"labels": managed()}});
        s.patch("labelled again", Kind::Pod, "w", label).await?;
        let running = json!({"status": {"phase": "Running"}});
        s.patch_status("its status", Kind::Pod, "w", running)
            .await?;
        s.delete("deleted", Kind::Pod, "w", json!({})).await?;
        s.create("a third pod", Kind::Pod, pod("a", json!({})))
            .await?;
        s.events("every event", &mut all, 8).await?;
        s.events("the selected pods' events", &mut selecting, 6)
            .await?;

        let mut current = s.watch(Kind::Pod, &WatchParams::default(), "0").await?;
        s.events("a watch from 0: the pods there are", &mut current, 2)
            .await?;

        // A version older than the window of changes kept: an ERROR event carrying a 410,
        // after an HTTP 200. On the real server the window is its watch cache's, for each
        // resource, which keeps the changes since it started (and recent ones): PodSets' started
        // once their CRD was, after version 1, but pods' with the API server, at version 1, so
        // a watch of pods from 1 is not too old on a fresh cluster. (Nor has etcd compacted
        // anything yet: the API server asks it to every 5 minutes.) The model's store starts
        // its versions after 1000 (`FIRST_VERSION`).
        let mut gone = s.watch(Kind::PodSet, &WatchParams::default(), "1").await?;
        s.events("a watch from a version too old", &mut gone, 1)
            .await?;
        let after = gone.next().await;
        ensure!(
            after.is_none(),
            "the watch went on after its error: {after:?}"
        );
        let path = format!(
            "{}?watch=true&resourceVersion=1&timeoutSeconds=5",
            s.path(Kind::PodSet, None)
        );
        s.call("the same, as it answers", Method::GET, &path, None)
            .await?;

        // The real server sends a watch a BOOKMARK 2 s before its timeout (and every minute),
        // but only at a version past the watch's last event, once its watch cache has seen
        // one: a write of anything (a Lease), then a consistent read (a LIST), for which the
        // cache asks etcd how far it is. The model sends one whenever the simulation says, at
        // its current version even if the watch saw that one already: harmless to a client,
        // which only resumes from it.
        let bookmarks = WatchParams::default().timeout(4);
        let mut quiet = s.watch(Kind::Pod, &bookmarks, &from).await?;
        s.events("the events before the bookmark", &mut quiet, 8)
            .await?;
        let written = s.create("a Lease", Kind::Lease, lease("l", "a")).await?;
        s.list("the pods", Kind::Pod, "").await?;
        s.bookmark();
        let bookmark = quiet.next().await.transpose()?;
        if let Some(WatchEvent::Bookmark(b)) = &bookmark {
            let at: u64 = b.metadata.resource_version.parse()?;
            ensure!(
                at >= version(&written),
                "a bookmark at {at}, before the Lease"
            );
        }
        s.record_optional(
            "a bookmark, if one came in time",
            bookmark.map(|b| {
                let mut b = serde_json::to_value(b).expect("JSON");
                b["object"]["metadata"]["resourceVersion"] = "<at least the Lease's>".into();
                b
            }),
        );
        Ok(s)
    })
    .await
}

/// 7. The garbage collector: a deleted PodSet's pods go, and so does a pod whose controller
/// does not exist. On the model's side this is the simulated world, whose kubelet also binds
/// and starts the pods (the real cluster has no node): only which pods are left is compared.
#[tokio::test]
async fn garbage_collection() -> Result<()> {
    differential("gc", world_side, |mut s| async move {
        let owner = s
            .create("a PodSet", Kind::PodSet, podset("owner", 2))
            .await?;
        let reference = |kind: &str, name: &str, uid: &Value| {
            json!([{"apiVersion": "app.example.com/v1alpha1", "kind": kind, "name": name,
                "uid": uid, "controller": true, "blockOwnerDeletion": true}])
        };
        for name in ["owned-1", "owned-2"] {
            let mut owned = pod(name, managed());
            owned["metadata"]["ownerReferences"] =
                reference("PodSet", "owner", &owner["metadata"]["uid"]);
            s.create("a pod it controls", Kind::Pod, owned).await?;
        }
        let mut orphan = pod("orphan", managed());
        orphan["metadata"]["ownerReferences"] = reference("PodSet", "ghost", &json!(WRONG_UID));
        s.alias(WRONG_UID, "<a UID no object has>");
        s.create("a pod whose controller does not exist", Kind::Pod, orphan)
            .await?;
        s.create("a pod of nobody's", Kind::Pod, pod("free", json!({})))
            .await?;
        s.delete("DELETE of the PodSet", Kind::PodSet, "owner", json!({}))
            .await?;
        let names = |pods: &[Value]| pods.iter().map(name_of).collect::<Vec<_>>();
        s.until("the garbage collector", Kind::Pod, |pods| {
            names(pods) == ["free"]
        })
        .await?;
        Ok(s)
    })
    .await
}
