//! `podset-operator check`: what the chart's `helm test` runs in a pod beside the operator.
//! It passes when the API server serves both CRDs (a list of each answers in the namespace)
//! and every ready operator pod answers `/readyz` on its probe port from another pod, the
//! way the kubelet asks it. Until then it asks again, up to its deadline, and then says what
//! was missing.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, Resource};

use crate::api::{At, PodSet};
use crate::pod::ready_condition;

/// What to check, and for how long.
#[derive(Clone, Debug, clap::Args)]
pub struct Check {
    /// The namespace of the operator's pods, where the CRDs' lists are made too.
    #[arg(long, env = "POD_NAMESPACE", value_parser = crate::flags::namespace)]
    pub namespace: String,
    /// The label selector of the operator's pods.
    #[arg(long)]
    pub selector: String,
    /// Their health probe port.
    #[arg(long, default_value_t = 8081)]
    pub probe_port: u16,
    /// How long the check may keep asking, in seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout_seconds: u64,
}

/// Asks until every part passes or the deadline comes, printing what passed; or says what did
/// not.
pub async fn main(check: Check) -> anyhow::Result<()> {
    let config = kube::Config::infer().await?;
    let client = Client::try_from(config)?;
    for line in run(client, &check).await? {
        println!("ok: {line}");
    }
    Ok(())
}

async fn run(client: Client, check: &Check) -> anyhow::Result<Vec<String>> {
    let deadline = Duration::from_secs(check.timeout_seconds);
    let until = tokio::time::Instant::now() + deadline;
    loop {
        match once(&client, check).await {
            Ok(passed) => return Ok(passed),
            Err(e) if tokio::time::Instant::now() >= until => {
                anyhow::bail!("after {deadline:?}: {e:#}")
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(2)).await,
        }
    }
}

async fn once(client: &Client, check: &Check) -> anyhow::Result<Vec<String>> {
    let mut passed = vec![
        served::<PodSet>(client, &check.namespace).await?,
        served::<At>(client, &check.namespace).await?,
    ];
    let pods: Api<Pod> = Api::namespaced(client.clone(), &check.namespace);
    let listed = pods
        .list(&ListParams::default().labels(&check.selector))
        .await?;
    let probed = targets(&listed.items, check.probe_port)?;
    let http = HttpClient::builder(TokioExecutor::new()).build_http::<String>();
    for (pod, addr) in probed {
        let url: http::Uri = format!("http://{addr}/readyz").parse()?;
        let answer = tokio::time::timeout(Duration::from_secs(5), http.get(url))
            .await
            .map_err(|_| anyhow::anyhow!("pod {pod} did not answer /readyz on {addr} in 5 s"))?
            .map_err(|e| anyhow::anyhow!("pod {pod} did not answer /readyz on {addr}: {e}"))?;
        anyhow::ensure!(
            answer.status() == http::StatusCode::OK,
            "pod {pod} answered /readyz on {addr} with {}",
            answer.status()
        );
        passed.push(format!("pod {pod} answers /readyz on {addr}"));
    }
    Ok(passed)
}

/// Whether the API server serves `K`'s resource: a list of one answers, or says why not.
async fn served<K>(client: &Client, namespace: &str) -> anyhow::Result<String>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let kind = K::kind(&());
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(format!("{kind}s are served ({})", K::api_version(&()))),
        Err(kube::Error::Api(s)) if s.code == 404 => anyhow::bail!(
            "{kind}s are not served: is the CRD {} installed?",
            K::plural(&()).to_string() + "." + &K::group(&())
        ),
        Err(e) => Err(anyhow::anyhow!("listing {kind}s: {e}")),
    }
}

/// The ready pods and their probe addresses; an error when none is ready, or a ready pod has
/// no IP yet (it is probed through its IP, as the kubelet does).
pub fn targets(pods: &[Pod], port: u16) -> anyhow::Result<Vec<(String, SocketAddr)>> {
    let ready: Vec<&Pod> = pods.iter().filter(|p| is_ready(p)).collect();
    anyhow::ensure!(
        !ready.is_empty(),
        "none of the {} operator pods is ready",
        pods.len()
    );
    ready
        .into_iter()
        .map(|p| {
            let name = p.metadata.name.clone().unwrap_or_default();
            let ip = p.status.as_ref().and_then(|s| s.pod_ip.as_deref());
            let ip: IpAddr = ip
                .ok_or_else(|| anyhow::anyhow!("pod {name} is ready but has no IP"))?
                .parse()?;
            Ok((name, SocketAddr::new(ip, port)))
        })
        .collect()
}

fn is_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && ready_condition(pod).is_some_and(|c| c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

    fn pod(name: &str, ip: Option<&str>, ready: bool) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.status = Some(PodStatus {
            pod_ip: ip.map(Into::into),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        pod
    }

    #[test]
    fn ready_pods_are_probed_on_their_ips_of_either_family() {
        let pods = [
            pod("a", Some("10.0.0.5"), true),
            pod("b", Some("fd00::7"), true),
            pod("standby-starting", Some("10.0.0.6"), false),
        ];
        let got = targets(&pods, 8081).unwrap();
        let got: Vec<String> = got.iter().map(|(n, a)| format!("{n} {a}")).collect();
        assert_eq!(got, ["a 10.0.0.5:8081", "b [fd00::7]:8081"]);
    }

    #[test]
    fn no_ready_pod_or_a_ready_pod_without_an_ip_fails_the_check() {
        let none = targets(&[pod("a", Some("10.0.0.5"), false)], 8081).unwrap_err();
        assert!(
            none.to_string()
                .contains("none of the 1 operator pods is ready")
        );
        let no_ip = targets(&[pod("a", None, true)], 8081).unwrap_err();
        assert!(no_ip.to_string().contains("pod a is ready but has no IP"));
    }
}
