//! Objects at either version. Before the upgrade only v1alpha1 is served, so objects are
//! written and waited on there; after it, every object is listed and read (GET) at both
//! versions, and the leader's migration leaves both CRDs' `status.storedVersions` at
//! `["v1beta1"]` within a bound (docs/versioning.md, Upgrading to this release).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use podset_operator::api::at::v1alpha1;
use podset_operator::api::{At, AtPhase, AtStatus, PodSet};
use podset_operator::migrate::{KINDS, Kind};

use crate::common::{TestNs, alpha_at, poll_some};

pub const ALPHA: &str = "v1alpha1";
pub const BETA: &str = "v1beta1";

/// `kind`'s objects in `ns`, read and written at `version`.
pub fn api(ns: &TestNs, kind: Kind, version: &str) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: kind.group.into(),
        version: version.into(),
        api_version: format!("{}/{version}", kind.group),
        kind: kind.kind.into(),
        plural: kind.plural.into(),
    };
    Api::namespaced_with(ns.client.clone(), &ns.name, &resource)
}

/// Creates PodSet `name` at v1alpha1, as the previous release's users wrote it.
pub async fn create_podset(ns: &TestNs, name: &str, replicas: usize) -> Result<()> {
    let podset: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "app.example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": name}, "spec": {"replicas": replicas},
    }))?;
    let api = api(ns, KINDS[0], ALPHA);
    api.create(&PostParams::default(), &podset).await?;
    Ok(())
}

/// Creates At `name` at v1alpha1 (the book's): `command` at `schedule`.
pub async fn create_at(ns: &TestNs, name: &str, schedule: &str, command: &str) -> Result<()> {
    let at = alpha_at(name, schedule, command);
    ns.api::<v1alpha1::At>()
        .create(&PostParams::default(), &at)
        .await?;
    Ok(())
}

/// Waits until PodSet `name` (read at v1alpha1, which every release serves) has `n` Running
/// pods of its own; their UIDs.
pub async fn running_pods(ns: &TestNs, name: &str, n: usize) -> Result<BTreeSet<String>> {
    let api = api(ns, KINDS[0], ALPHA);
    let what = format!("PodSet {name} with {n} Running pods");
    poll_some(Duration::from_secs(90), &what, || async {
        let uid = api.get(name).await?.uid().unwrap_or_default();
        let pods = ns.pods_of(&uid).await?;
        let running = pods.iter().filter(|p| {
            p.metadata.deletion_timestamp.is_none() && crate::common::phase(p) == "Running"
        });
        let uids: BTreeSet<String> = running.filter_map(ResourceExt::uid).collect();
        Ok((uids.len() == n && pods.len() == n).then_some(uids))
    })
    .await
}

/// Waits until At `name` (read at v1alpha1) is in `phase`; its status.
pub async fn at_in(ns: &TestNs, name: &str, phase: AtPhase, within: Duration) -> Result<AtStatus> {
    let api = ns.api::<v1alpha1::At>();
    let what = format!("At {name} {phase:?}");
    poll_some(within, &what, || async {
        let status = api.get(name).await?.status.unwrap_or_default();
        Ok((status.phase == Some(phase)).then_some(status))
    })
    .await
}

/// Every PodSet and At of `ns` is listed at both versions, exactly `podsets` and the keys of
/// `ats`, and each is read (GET) at both; an At's command, written at v1alpha1, reads back
/// the same at v1alpha1 and as the `sh -c` line of its command container at v1beta1.
pub async fn readable_at_both(
    ns: &TestNs,
    podsets: &BTreeSet<String>,
    ats: &BTreeMap<String, String>,
) -> Result<()> {
    let at_names: BTreeSet<String> = ats.keys().cloned().collect();
    for (kind, want) in [(KINDS[0], podsets), (KINDS[1], &at_names)] {
        for version in [ALPHA, BETA] {
            let api = api(ns, kind, version);
            let listed: BTreeSet<String> = api
                .list(&ListParams::default())
                .await?
                .iter()
                .map(ResourceExt::name_any)
                .collect();
            ensure!(
                listed == *want,
                "{}s listed at {version}: {listed:?}, not {want:?}",
                kind.kind
            );
            for name in want {
                api.get(name).await?;
            }
        }
    }
    let (alpha, beta) = (ns.api::<v1alpha1::At>(), ns.api::<At>());
    for (name, command) in ats {
        let at = alpha.get(name).await?;
        ensure!(
            at.spec.command == *command,
            "At {name} at v1alpha1 runs {:?}, not {command:?}",
            at.spec.command
        );
        let at = beta.get(name).await?;
        ensure!(
            at.spec.shell_line() == Some(command.as_str()),
            "At {name} at v1beta1 runs {:?}, not sh -c {command:?}",
            at.spec.command_container()
        );
    }
    for ps in ns.api::<PodSet>().list(&ListParams::default()).await? {
        ensure!(
            podsets.contains(&ps.name_any()),
            "an unknown PodSet {}",
            ps.name_any()
        );
    }
    Ok(())
}

/// Waits until both CRDs' `status.storedVersions` is `[version]`, for at most `bound`; how
/// long that took.
pub async fn stored_only_at(
    client: &kube::Client,
    version: &str,
    bound: Duration,
) -> Result<Duration> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let began = Instant::now();
    let what = format!("both CRDs' storedVersions [{version}]");
    poll_some(bound, &what, || async {
        for kind in KINDS {
            let crd = crds.get(kind.crd).await?;
            let stored = crd.status.and_then(|s| s.stored_versions);
            if stored != Some(vec![version.to_string()]) {
                return Ok(None);
            }
        }
        Ok(Some(began.elapsed()))
    })
    .await
}
