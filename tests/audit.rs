//! Least privilege, proven from the API server's audit log; and no deprecated API used.
//!
//! `make test` runs every other suite with `PODSET_AUDIT_DIR` set: each test control plane,
//! when it stops, leaves there what the operator's ServiceAccount asked of it (testenv's
//! `audit` module). `requests_match_the_generated_rules` then checks the union against the RBAC
//! rules generated from the code, in both directions: every request allowed and granted,
//! every grant used.
//!
//! One grant is checked by no request of its own: `update` on the owners' `finalizers`, which
//! the OwnerReferencesPermissionEnforcement admission plugin asks the authorizer about when a
//! pod's ownerReference sets `blockOwnerDeletion`. The test API servers enable that plugin,
//! and `blocking_owner_references_need_update_on_the_owners_finalizers` shows that pod
//! creation fails without the grant.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role};
use kube::ResourceExt;
use kube::api::{ListParams, ObjectMeta, PostParams};
use podset_operator::api::{At, AtPhase, AtSpec, PodSet};
use podset_operator::plan::at::{CONDITION_SCHEDULED, REASON_FAILED_CREATE};
use podset_operator::plan::podset::CONDITION_REPLICA_FAILURE;
use podset_operator::rbac;
use testenv::audit::{self, Record};
use testenv::harness::{
    PROMPTLY, TestNs, cluster_without_nodes, condition, podset, poll, poll_some,
};

/// Requests (verb, group, resource) that a suite gets refused by admission on purpose, with
/// the suite. The audit log does not say which plugin refused (see
/// `audit::REFUSED_BY_ADMISSION`); a pod create refused by OwnerReferencesPermissionEnforcement
/// under the full rules would also leave a PodSet short of pods, which its suite catches.
const EXPECTED_REFUSALS: &[(&str, &str, &str, &str)] = &[(
    "create",
    "",
    "pods",
    "podset::quota_refusal_is_reported_and_retried_with_backoff fills a ResourceQuota; \
     pod_security::... submits a template the restricted Pod Security Standard refuses",
)];

/// A 403, unless admission refused it and a suite does that on purpose, or a suite's API
/// server was restarting (its RBAC informers not yet synced; the operator retries).
fn unexpected_refusal(r: &Record) -> bool {
    let q = &r.request;
    if q.refusal == audit::REFUSED_BEFORE_READY {
        return false;
    }
    let expected = q.refusal == audit::REFUSED_BY_ADMISSION
        && EXPECTED_REFUSALS.iter().any(|(verb, group, resource, _)| {
            q.verb == *verb && q.api_group == *group && q.rbac_resource() == *resource
        });
    q.code == 403 && !expected
}

/// Non-resource URLs the operator may call, with the reason. None so far: kube's typed `Api`
/// needs no discovery.
const JUSTIFIED_PATHS: &[(&str, &str)] = &[];

/// One (group, resource, verb) that the generated RBAC grants.
#[derive(Debug)]
struct Grant {
    role: &'static str,
    group: String,
    /// As rules name it: `pods` or `pods/status`.
    resource: String,
    verb: String,
    /// The scopes it is bound at: true for a namespace, false for cluster-wide.
    scopes: &'static [bool],
}

impl Grant {
    fn covers(&self, r: &Record) -> bool {
        let q = &r.request;
        q.path.is_empty()
            && q.api_group == self.group
            && q.rbac_resource() == self.resource
            && q.verb == self.verb
            && self.scopes.contains(&q.namespaced)
    }

    /// Checked by the OwnerReferencesPermissionEnforcement admission plugin, never by a
    /// request: proven by `blocking_owner_references_need_update_on_the_owners_finalizers`.
    fn proven_by_admission(&self) -> bool {
        self.verb == "update" && is_finalizers(&self.resource)
    }
}

fn is_finalizers(resource: &str) -> bool {
    resource.ends_with("/finalizers")
}

/// Every grant of the generated roles, with the scopes each role is bound at.
fn grants() -> Vec<Grant> {
    let roles: [(&'static str, Vec<PolicyRule>, &'static [bool]); 6] = [
        // A RoleBinding per watched namespace, or one ClusterRoleBinding.
        (rbac::MANAGER_ROLE, rbac::rules(), &[true, false]),
        // A Role in the operator's own namespace.
        (
            rbac::LEADER_ELECTION_ROLE,
            rbac::leader_election_rules(),
            &[true],
        ),
        // TokenReviews and SubjectAccessReviews have no namespace.
        (
            rbac::METRICS_AUTH_ROLE,
            rbac::metrics_auth_rules(),
            &[false],
        ),
        // The webhook's certificate Secret, in the operator's own namespace.
        (rbac::WEBHOOK_CERT_ROLE, rbac::webhook_cert_rules(), &[true]),
        // CRDs have no namespace.
        (rbac::CONVERSION_ROLE, rbac::conversion_rules(), &[false]),
        (rbac::MIGRATION_ROLE, rbac::migration_rules(), &[false]),
    ];
    let mut grants = Vec::new();
    for (role, rules, scopes) in roles {
        for rule in rules {
            for group in rule.api_groups.iter().flatten() {
                for resource in rule.resources.iter().flatten() {
                    for verb in &rule.verbs {
                        grants.push(Grant {
                            role,
                            group: group.clone(),
                            resource: resource.clone(),
                            verb: verb.clone(),
                            scopes,
                        });
                    }
                }
            }
        }
    }
    grants
}

fn scope(namespaced: bool) -> &'static str {
    if namespaced { "namespaced" } else { "cluster" }
}

fn group(g: &str) -> &str {
    if g.is_empty() { "core" } else { g }
}

/// The records as a table, one line each.
fn table<'a>(records: impl IntoIterator<Item = &'a Record>) -> String {
    let mut out = format!(
        "  {:<7} {:<34} {:<20} {:<10} {:>4} {:>6}  {}\n",
        "VERB", "GROUP", "RESOURCE", "SCOPE", "CODE", "COUNT", "EXAMPLE / REFUSAL"
    );
    for r in records {
        let q = &r.request;
        let (group, what) = if q.path.is_empty() {
            (group(&q.api_group), q.rbac_resource())
        } else {
            ("-", q.path.clone())
        };
        let note = if q.refusal.is_empty() {
            r.example.clone()
        } else {
            format!("refused by {}", q.refusal)
        };
        let _ = writeln!(
            out,
            "  {:<7} {:<34} {:<20} {:<10} {:>4} {:>6}  {note}",
            q.verb,
            group,
            what,
            scope(q.namespaced),
            q.code,
            r.count,
        );
    }
    out
}

/// The records of every suite, or a clear error when there are none to check.
fn collected() -> Result<Vec<Record>> {
    let dir = PathBuf::from(std::env::var_os(audit::DIR_ENV).with_context(|| {
        format!(
            "{} is unset: `make test` sets it and runs every other suite first",
            audit::DIR_ENV
        )
    })?);
    let records = audit::read_records(&dir)?;
    if records.is_empty() {
        bail!(
            "no operator requests recorded in {}: run the other suites first with {} set",
            dir.display(),
            audit::DIR_ENV
        );
    }
    Ok(records)
}

/// What disagrees with the generated rules, as the sections of a report.
fn drift(records: &[Record], grants: &[Grant]) -> Vec<String> {
    let resource = |r: &&Record| r.request.path.is_empty();
    let refused = records.iter().filter(|r| unexpected_refusal(r));
    let ungranted = records
        .iter()
        .filter(resource)
        .filter(|r| !grants.iter().any(|g| g.covers(r)));
    let unjustified = records
        .iter()
        .filter(|r| !resource(r))
        .filter(|r| !JUSTIFIED_PATHS.iter().any(|(p, _)| *p == r.request.path));
    let deprecated = records.iter().filter(|r| r.request.deprecated);
    let mut sections: Vec<String> = [
        ("requests refused with 403", refused.collect::<Vec<_>>()),
        ("requests no generated rule grants", ungranted.collect()),
        ("non-resource URLs not justified", unjustified.collect()),
        ("requests to a deprecated API", deprecated.collect()),
    ]
    .into_iter()
    .filter(|(_, rows)| !rows.is_empty())
    .map(|(title, rows)| format!("{title}:\n{}", table(rows)))
    .collect();
    let unused = unused(records, grants);
    if !unused.is_empty() {
        let rows: String = unused
            .iter()
            .map(|g| {
                let (verb, group, resource) = (&g.verb, group(&g.group), &g.resource);
                format!("  {verb:<7} {group:<34} {resource:<20} (role {})\n", g.role)
            })
            .collect();
        sections.push(format!(
            "granted but never used: remove the rule, or test the path that needs it:\n{rows}"
        ));
    }
    sections
}

/// A request to a deprecated API version is reported, even granted and answered 200.
#[test]
fn a_request_to_a_deprecated_api_is_reported() {
    let record = |deprecated| Record {
        request: audit::Request {
            verb: "get".into(),
            api_group: "coordination.k8s.io".into(),
            resource: "leases".into(),
            subresource: String::new(),
            namespaced: true,
            path: String::new(),
            code: 200,
            refusal: String::new(),
            deprecated,
        },
        count: 1,
        example: "/apis/coordination.k8s.io/v1beta1/namespaces/ns/leases/l".into(),
    };
    let grants = grants();
    let reported = |deprecated| {
        drift(&[record(deprecated)], &grants)
            .iter()
            .any(|s| s.starts_with("requests to a deprecated API"))
    };
    assert!(reported(true));
    assert!(!reported(false));
}

/// The grants no request used (one refused by RBAC did not), but those proven by admission.
fn unused<'a>(records: &[Record], grants: &'a [Grant]) -> Vec<&'a Grant> {
    let used = |g: &Grant| {
        records
            .iter()
            .filter(|r| r.request.code != 403 || r.request.refusal == audit::REFUSED_BY_ADMISSION)
            .any(|r| g.covers(r))
    };
    grants
        .iter()
        .filter(|g| !g.proven_by_admission() && !used(g))
        .collect()
}

#[tokio::test]
#[ignore = "run by make test after every other suite: it reads their audit logs"]
async fn requests_match_the_generated_rules() -> Result<()> {
    let records = collected()?;
    let problems = drift(&records, &grants());
    if !problems.is_empty() {
        bail!(
            "the operator's requests and the generated RBAC differ:\n\n{}\nevery request seen:\n{}",
            problems.join("\n"),
            table(&records)
        );
    }
    println!(
        "the operator's requests, all granted, every grant used (update on */finalizers: \
         proven by admission):\n{}",
        table(&records)
    );
    Ok(())
}

/// Not `podset-operator`: testenv collects only the operator's own accounts, so the refusals
/// this account provokes on purpose stay out of `requests_match_the_generated_rules`.
const NO_FINALIZERS_SA: &str = "no-finalizers";

/// The generated manager rules without any `*/finalizers` resource.
fn without_finalizers() -> Role {
    let rules = rbac::rules()
        .into_iter()
        .filter_map(|mut rule| {
            let resources = rule.resources.take().unwrap_or_default();
            let kept: Vec<String> = resources
                .into_iter()
                .filter(|r| !is_finalizers(r))
                .collect();
            (!kept.is_empty()).then_some(PolicyRule {
                resources: Some(kept),
                ..rule
            })
        })
        .collect();
    Role {
        metadata: ObjectMeta {
            name: Some("podset-operator-manager-without-finalizers".into()),
            ..Default::default()
        },
        rules: Some(rules),
    }
}

/// The OwnerReferencesPermissionEnforcement refusal.
fn refused_for_finalizers(message: &str) -> bool {
    message.contains("cannot set blockOwnerDeletion") && message.contains("can't set finalizers on")
}

async fn wait_refusal_event(ns: &TestNs, name: &str) -> Result<()> {
    let events = ns.api::<Event>();
    poll(
        PROMPTLY,
        &format!("a FailedCreate Warning about {name} naming blockOwnerDeletion"),
        || async {
            let list = events.list(&ListParams::default()).await?;
            Ok(list.items.iter().any(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                    && e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some("FailedCreate")
                    && e.note.as_deref().is_some_and(refused_for_finalizers)
            }))
        },
    )
    .await
}

fn blocks_owner_deletion(pod: &Pod) -> bool {
    pod.owner_references()
        .iter()
        .any(|r| r.controller == Some(true) && r.block_owner_deletion == Some(true))
}

#[tokio::test]
async fn blocking_owner_references_need_update_on_the_owners_finalizers() -> Result<()> {
    let ns = TestNs::new_in(cluster_without_nodes().await?, "finalizers").await?;
    ns.create_service_account(NO_FINALIZERS_SA).await?;
    ns.grant_role(NO_FINALIZERS_SA, without_finalizers())
        .await?;
    let mut operator = ns.start_operator_as(NO_FINALIZERS_SA, &[]).await?;
    let podsets = ns.api::<PodSet>();
    let ats = ns.api::<At>();
    let ps = podsets
        .create(&PostParams::default(), &podset("ps-owner", 1))
        .await?;
    let spec = AtSpec::shell("2019-04-12T10:12:00Z", "echo YAY");
    let at = ats
        .create(&PostParams::default(), &At::new("at-owner", spec))
        .await?;

    // Without update on the owners' finalizers, admission refuses both controllers' pods.
    poll(PROMPTLY, "the PodSet's ReplicaFailure", || async {
        let ps = podsets.get("ps-owner").await?;
        Ok(
            condition(&ps, CONDITION_REPLICA_FAILURE).is_some_and(|(status, reason, message)| {
                status == "True" && reason == "FailedCreate" && refused_for_finalizers(&message)
            }),
        )
    })
    .await?;
    poll(
        PROMPTLY,
        "the At's Scheduled=False FailedCreate",
        || async {
            let status = ats.get("at-owner").await?.status.unwrap_or_default();
            Ok(status.conditions.iter().any(|c| {
                c.type_ == CONDITION_SCHEDULED
                    && c.status == "False"
                    && c.reason == REASON_FAILED_CREATE
                    && refused_for_finalizers(&c.message)
            }))
        },
    )
    .await?;
    wait_refusal_event(&ns, "ps-owner").await?;
    wait_refusal_event(&ns, "at-owner").await?;
    let pods = ns.api::<Pod>().list(&ListParams::default()).await?;
    assert!(pods.items.is_empty(), "a pod got through: {pods:?}");
    operator.assert_healthy();
    operator.kill();

    // Control: the generated rules, finalizers included, create the same pods.
    let _operator = ns.start_operator(&[]).await?;
    let ps_pods = poll_some(PROMPTLY, "the PodSet's pod", || async {
        let pods = ns.pods_of(&ps.uid().unwrap()).await?;
        Ok((pods.len() == 1).then_some(pods))
    })
    .await?;
    poll(PROMPTLY, "the At RUNNING", || async {
        let status = ats.get("at-owner").await?.status.unwrap_or_default();
        Ok(status.phase == Some(AtPhase::Running))
    })
    .await?;
    let at_pods = ns.pods_of(&at.uid().unwrap()).await?;
    assert_eq!(at_pods.len(), 1);
    for pod in ps_pods.iter().chain(&at_pods) {
        assert!(blocks_owner_deletion(pod), "{}", pod.name_any());
    }
    Ok(())
}
