//! The way back to the previous release, as docs/versioning.md says: with this release still
//! running (its webhook converts), `podset-operator migrate --to v1alpha1` (the binary, with
//! the cluster's admin kubeconfig) stores every object at v1alpha1, which it refuses while a
//! pending At says what v1alpha1 cannot; then the previous operator (`helm rollback`, or its
//! install.yaml), then its CRDs (v1alpha1 alone). The previous operator then runs: every
//! PodSet keeps its pods, every DONE At stays DONE, and an At created before and due after the
//! way back runs once, in a pod the previous operator made.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use podset_operator::api::AtPhase;
use podset_operator::migrate::KINDS;

use crate::common::{self, operator_binary};
use crate::install::Install;
use crate::upgrade::{Kept, REPLICAS, rolled_out};
use crate::versions::{self, ALPHA};

/// How long after its creation the At that the previous operator is to run falls due: after
/// the migration, the rollback and the CRDs (checked: its pod is made after them).
const DUE_IN: Duration = Duration::from_secs(60);

/// `podset-operator migrate ARGS` as an admin runs it.
async fn migrate(install: &Install, args: &[&str]) -> Result<String> {
    let bin = operator_binary()?.display().to_string();
    let kc = install.cluster.kubeconfig().display().to_string();
    let args = [&["migrate"][..], args].concat();
    crate::run(&bin, &args, &[("KUBECONFIG", kc.as_str())]).await
}

/// Goes back to the previous release by `rollback`, which runs `previous_image`.
pub async fn to_previous(
    install: &Install,
    kept: &Kept,
    previous_image: &str,
    rollback: impl Future<Output = Result<()>>,
) -> Result<()> {
    let ns = &kept.ns;
    // An At not yet run whose deadline v1alpha1 cannot say: the migration names it and stops.
    let mut rich = common::at("rich", "2099-01-01T00:00:00Z", "echo rich");
    rich.spec.active_deadline_seconds = Some(600);
    let ats = ns.api::<podset_operator::api::At>();
    ats.create(&PostParams::default(), &rich).await?;
    let refused = migrate(install, &["--to", ALPHA]).await;
    let named = format!("{}/rich", ns.name);
    ensure!(
        refused
            .as_ref()
            .is_err_and(|e| format!("{e:#}").contains(&named)),
        "migrate --to v1alpha1 did not refuse naming {named}: {refused:?}"
    );
    ats.delete("rich", &DeleteParams::default()).await?;

    let due = jiff::Timestamp::now() + jiff::SignedDuration::try_from(DUE_IN)?;
    let schedule = due.round(jiff::Unit::Second)?.to_string();
    versions::create_at(ns, "after", &schedule, "echo after").await?;
    let began = Instant::now();
    let said = migrate(install, &["--to", ALPHA]).await?;
    let migrated = began.elapsed();
    rollback.await?;
    rolled_out(install).await?;
    crate::previous::apply_crds(&install.cluster).await?;
    let back = jiff::Timestamp::now();
    println!(
        "{}: migrate --to v1alpha1 took {migrated:?} ({}), back on the previous release {:?} after it began",
        install.deployment,
        said.trim().replace('\n', "; "),
        began.elapsed()
    );

    let crds: Api<CustomResourceDefinition> = Api::all(ns.client.clone());
    for kind in KINDS {
        let crd = crds.get(kind.crd).await?;
        let served: Vec<&str> = crd.spec.versions.iter().map(|v| v.name.as_str()).collect();
        ensure!(
            served == [ALPHA],
            "{} serves {served:?} after the way back",
            kind.crd
        );
    }
    versions::stored_only_at(&ns.client, ALPHA, Duration::from_secs(1)).await?;
    let deployment = install.api::<Deployment>().get(&install.deployment).await?;
    let image = deployment
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next())
        .and_then(|c| c.image);
    ensure!(
        image.as_deref() == Some(previous_image),
        "the way back runs {image:?}, not {previous_image}"
    );
    install.ready_with_leader().await?;

    let mut pods = std::collections::BTreeSet::new();
    for name in &kept.podsets {
        pods.extend(versions::running_pods(ns, name, REPLICAS).await?);
    }
    ensure!(
        pods == kept.pods,
        "PodSet pods were replaced on the way back"
    );
    for (name, pod) in &kept.done {
        let status = versions::at_in(ns, name, AtPhase::Done, Duration::from_secs(5)).await?;
        ensure!(
            status.pod_name == *pod,
            "{name} now names pod {:?}, not {pod:?}",
            status.pod_name
        );
    }
    let after = versions::at_in(
        ns,
        "after",
        AtPhase::Done,
        DUE_IN + Duration::from_secs(120),
    );
    let after = after.await?;
    ensure!(after.succeeded == Some(true), "At after failed: {after:?}");
    let ran: Vec<Pod> = ns
        .api::<Pod>()
        .list(&ListParams::default().labels("app=after"))
        .await?
        .items;
    ensure!(ran.len() == 1, "At after ran in {} pods", ran.len());
    let made = ran[0]
        .creation_timestamp()
        .context("a pod without a creation time")?;
    ensure!(
        made.0 >= back,
        "At after ran at {}, before the previous release was back ({back}): raise DUE_IN",
        made.0
    );
    println!(
        "{}: the previous release ran At after in pod {} at {}",
        install.deployment,
        ran[0].name_any(),
        made.0
    );
    Ok(())
}
