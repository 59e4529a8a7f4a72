//! conversion: the At conversion webhook under 1,000 conversions a second. The operator's own
//! binary serves it (a mounted certificate, the At CRD pointed at it, as cert-manager's
//! install would), and the harness reads Ats through the API server at a steady 1,000 GETs a
//! second: at v1alpha1 (the API server converts each from the stored v1beta1 through the
//! webhook) and then at v1beta1 (no conversion), the floor of the same reads measured in the
//! same run. Reported: each rate's latency (p50, p99, max), what was achieved, the failures,
//! and the v1alpha1 reads' p99 against the floor's; and the webhook called directly, one
//! object a review, at the same rate.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::ByteString;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use podset_operator::api::{At, AtSpec};
use podset_operator::webhook::certs::{self, CA_CRT, Need, TLS_CRT, TLS_KEY};
use serde_json::json;

use crate::NS;
use crate::cli::BenchArgs;
use crate::env::{Env, operator_launcher};
use crate::report::Sample;

pub const SCENARIO: &str = "At conversion webhook, 1000 reads/s";
const ATS: usize = 100;

/// A steady rate of reads for a while, and what each took.
struct Load {
    rate: u32,
    length: Duration,
}

impl Load {
    fn new(smoke: bool) -> Self {
        match smoke {
            true => Load {
                rate: 100,
                length: Duration::from_secs(1),
            },
            false => Load {
                rate: 1000,
                length: Duration::from_secs(20),
            },
        }
    }
}

pub async fn conversion_run(args: &BenchArgs) -> Result<Vec<(&'static str, String, Sample)>> {
    let load = Load::new(args.smoke);
    let env = Env::without_worker(&args.operator).await?;
    let dir = env.cluster.dir().join("webhook-certs");
    std::fs::create_dir_all(&dir)?;
    let Need::Write(stored) = certs::need(None, &["127.0.0.1".into()], jiff::Timestamp::now())?
    else {
        unreachable!("nothing found: certificates made")
    };
    std::fs::write(dir.join("tls.crt"), stored.get(TLS_CRT).unwrap_or_default())?;
    std::fs::write(dir.join("tls.key"), stored.get(TLS_KEY).unwrap_or_default())?;
    let port = testenv::free_port()?;
    let mut operator = operator_launcher(
        &env.cluster,
        env.cluster.kubeconfig(),
        &args.operator,
        "at",
        "conversion",
    )
    .args([
        format!("--webhook-cert-dir={}", dir.display()),
        format!("--webhook-bind-address=127.0.0.1:{port}"),
    ])
    .start()?;
    operator.wait_ready(Duration::from_secs(60)).await?;
    point_crd(&env, port, stored.get(CA_CRT).unwrap_or_default()).await?;
    let names = create_ats(&env).await?;

    let alpha = read(&env, &names, "v1alpha1", &load).await?;
    let beta = read(&env, &names, "v1beta1", &load).await?;
    let direct = direct(port, stored.get(CA_CRT).unwrap_or_default(), &load).await?;
    operator.process.stop();
    let ratio = alpha.quantile(0.99) / beta.quantile(0.99);
    Ok(vec![
        (
            SCENARIO,
            "GET at v1alpha1 (converted)".into(),
            alpha.sample(&[("x floor p99", ratio)]),
        ),
        (SCENARIO, "floor: GET at v1beta1".into(), beta.sample(&[])),
        (
            SCENARIO,
            "the webhook called directly".into(),
            direct.sample(&[]),
        ),
    ])
}

/// Points the At CRD's conversion at the operator's webhook on loopback, and waits until a
/// read at v1alpha1 goes through.
async fn point_crd(env: &Env, port: u16, ca: &[u8]) -> Result<()> {
    let patch = json!({"spec": {"conversion": {"webhook": {"clientConfig": {
        "service": null, "url": format!("https://127.0.0.1:{port}/convert"), "caBundle": ByteString(ca.to_vec()),
    }}}}});
    Api::<CustomResourceDefinition>::all(env.client.clone())
        .patch(
            "ats.cnat.programming-kubernetes.info",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    let converted: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), NS, &at_resource("v1alpha1"));
    testenv::poll(
        Duration::from_secs(30),
        "the API server to call the webhook",
        || async { Ok(converted.list(&Default::default()).await.is_ok()) },
    )
    .await
}

fn at_resource(version: &str) -> ApiResource {
    ApiResource {
        group: "cnat.programming-kubernetes.info".into(),
        version: version.into(),
        api_version: format!("cnat.programming-kubernetes.info/{version}"),
        kind: "At".into(),
        plural: "ats".into(),
    }
}

async fn create_ats(env: &Env) -> Result<Vec<String>> {
    let api: Api<At> = Api::namespaced(env.client.clone(), NS);
    let names: Vec<String> = (0..ATS).map(|i| format!("c-{i}")).collect();
    for name in &names {
        api.create(
            &PostParams::default(),
            &At::new(name, AtSpec::shell("3000-01-01T00:00:00Z", "echo YAY")),
        )
        .await?;
    }
    Ok(names)
}

/// Latencies, in seconds, and failures.
#[derive(Default)]
struct Seen {
    took: Vec<f64>,
    failed: usize,
    length: f64,
}

impl Seen {
    fn quantile(&self, q: f64) -> f64 {
        let mut sorted = self.took.clone();
        sorted.sort_by(f64::total_cmp);
        sorted
            .get(((sorted.len() as f64 - 1.0) * q) as usize)
            .copied()
            .unwrap_or(0.0)
    }

    fn sample(&self, more: &[(&'static str, f64)]) -> Sample {
        let ms = |s: f64| s * 1e3;
        let mut figures = vec![
            ("p50 ms", ms(self.quantile(0.5))),
            ("p99 ms", ms(self.quantile(0.99))),
            ("max ms", ms(self.quantile(1.0))),
            ("per s", self.took.len() as f64 / self.length),
            ("failed", self.failed as f64),
        ];
        figures.extend_from_slice(more);
        Sample {
            seconds: self.length,
            note: "reads, not pods".into(),
            figures,
            ..Sample::default()
        }
    }
}

/// `load`'s reads, one started every 1/rate s whatever the others do (an open loop), each by
/// `call`.
async fn paced<F, Fut>(load: &Load, call: F) -> Result<Seen>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = bool> + Send + 'static,
{
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut tick = tokio::time::interval(Duration::from_secs(1) / load.rate);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let began = Instant::now();
    let mut tasks = Vec::new();
    for i in 0.. {
        tick.tick().await;
        if began.elapsed() >= load.length {
            break;
        }
        let (seen, call) = (seen.clone(), call(i));
        tasks.push(tokio::spawn(async move {
            let start = Instant::now();
            let ok = call.await;
            let mut seen = seen.lock().expect("not poisoned");
            match ok {
                true => seen.took.push(start.elapsed().as_secs_f64()),
                false => seen.failed += 1,
            }
        }));
    }
    for task in tasks {
        task.await?;
    }
    let mut seen = std::mem::take(&mut *seen.lock().expect("not poisoned"));
    seen.length = began.elapsed().as_secs_f64();
    ensure!(!seen.took.is_empty(), "no read succeeded");
    Ok(seen)
}

/// Reads of the Ats at `version` through the API server.
async fn read(env: &Env, names: &[String], version: &str, load: &Load) -> Result<Seen> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), NS, &at_resource(version));
    let names = Arc::new(names.to_vec());
    paced(load, move |i| {
        let (api, names) = (api.clone(), names.clone());
        async move { api.get(&names[i % names.len()]).await.is_ok() }
    })
    .await
}

/// Reviews of one v1beta1 At each, sent to the webhook itself.
async fn direct(port: u16, ca: &[u8], load: &Load) -> Result<Seen> {
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca)?)
        .build()?;
    let at = json!({"apiVersion": "cnat.programming-kubernetes.info/v1beta1", "kind": "At",
        "metadata": {"name": "a", "namespace": NS},
        "spec": serde_json::to_value(AtSpec::shell("3000-01-01T00:00:00Z", "echo YAY"))?});
    let review = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "u", "desiredAPIVersion": "cnat.programming-kubernetes.info/v1alpha1", "objects": [at]}})
    .to_string();
    let url = format!("https://127.0.0.1:{port}/convert");
    paced(load, move |_| {
        let (client, url, review) = (client.clone(), url.clone(), review.clone());
        async move {
            let sent = client.post(&url).body(review).send().await;
            sent.is_ok_and(|r| r.status().is_success())
        }
    })
    .await
    .context("the webhook called directly")
}
