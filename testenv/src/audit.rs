//! The API server's audit log, reduced to the requests of the operator's ServiceAccounts.
//!
//! Every test API server logs the metadata of every request (JSON lines in
//! `<cluster dir>/audit.log`). When a [`Cluster`](crate::Cluster) stops and
//! `$PODSET_AUDIT_DIR` is set, the operator's requests are aggregated into
//! `$PODSET_AUDIT_DIR/audit-<pid>-<api port>-<n>.json`: one [`Record`] per kind of request,
//! as RBAC sees it. The `audit` test suite checks the union of those files, after every other
//! suite ran, against the RBAC rules generated from the code.

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// The directory that receives the aggregates; nothing is collected without it.
pub const DIR_ENV: &str = "PODSET_AUDIT_DIR";

/// Metadata (who, what, answer; no bodies) of every request. RequestReceived is left out: it
/// would log each request twice.
const POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
";

/// Writes the audit policy into `dir`; returns the kube-apiserver flags that log there.
pub(crate) fn apiserver_args(dir: &Path) -> Result<Vec<String>> {
    let policy = dir.join("audit-policy.yaml");
    std::fs::write(&policy, POLICY)?;
    Ok(vec![
        format!("--audit-policy-file={}", policy.display()),
        format!("--audit-log-path={}", dir.join("audit.log").display()),
        "--audit-log-format=json".into(),
        // An idle cluster with hollow nodes logs ~2 MB a minute: this bounds a long-running
        // `make cluster-up` to 400 MB, and a test cluster stays within the first file.
        // Rotated files (audit-<time>.log) are read as well.
        "--audit-log-maxsize=100".into(),
        "--audit-log-maxbackup=3".into(),
    ])
}

/// Whether `username` is an operator's ServiceAccount, in any namespace: one named
/// `podset-operator` (the tests' harness, the kustomize install, a Helm release whose name
/// contains the chart's) or `<release>-podset-operator` (any other Helm release). Requests
/// made by impersonation (`kubectl auth can-i --as=...`) carry the impersonator here, so they
/// never count.
pub fn is_operator_account(username: &str) -> bool {
    username
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
        .is_some_and(|(_, name)| name == "podset-operator" || name.ends_with("-podset-operator"))
}

/// One kind of request, as RBAC sees it, and how it was answered.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Request {
    pub verb: String,
    /// `""` for the core group.
    pub api_group: String,
    pub resource: String,
    pub subresource: String,
    /// Whether the request was in a namespace (false: cluster-wide).
    pub namespaced: bool,
    /// The path of a non-resource URL (no resource fields then).
    pub path: String,
    /// The HTTP status code.
    pub code: u16,
    /// For a 403: [`REFUSED_BY_RBAC`] or [`REFUSED_BY_ADMISSION`]. Empty otherwise.
    pub refusal: String,
    /// The API server marked the API deprecated (the `k8s.io/deprecated` annotation, the
    /// same decision its `apiserver_requested_deprecated_apis` metric counts).
    #[serde(default)]
    pub deprecated: bool,
}

impl Request {
    /// `resource` or `resource/subresource`, as RBAC rules name it.
    pub fn rbac_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// A 403 from the authorizer: the account lacks a rule.
pub const REFUSED_BY_RBAC: &str = "RBAC";
/// A 403 from an admission plugin after the authorizer allowed the request: a ResourceQuota,
/// say, or OwnerReferencesPermissionEnforcement. A 1.20 audit event at `Metadata` level keeps
/// only the status code and reason, not the message, so which plugin refused is not known.
pub const REFUSED_BY_ADMISSION: &str = "admission";

/// How many requests of one kind, with an example.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    #[serde(flatten)]
    pub request: Request,
    pub count: u64,
    /// The requestURI of one of them.
    pub example: String,
}

/// From the (re)start of an API server, or of its etcd, to its next `/readyz` 200. A
/// restarted API server serves requests before its RBAC informers have synced, and refuses
/// them as if no binding existed; a client retries, and the same request is allowed moments
/// later.
pub type NotReady = (SystemTime, SystemTime);

/// The times of a cluster that the audit reads apart.
pub(crate) struct Windows<'a> {
    /// When the API server was starting: its 403s are told apart.
    pub not_ready: &'a [NotReady],
    /// When another release ran under the operator's ServiceAccount: left out.
    pub other_release: &'a [NotReady],
    /// The operator pods that ran another release: their requests are left out.
    pub other_pods: &'a [String],
}

/// A 403 from the authorizer of an API server that was still starting (see [`NotReady`]).
pub const REFUSED_BEFORE_READY: &str = "RBAC, API server not ready";

/// The fields of an audit event (audit.k8s.io/v1 Event) that matter here.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    #[serde(rename = "auditID")]
    audit_id: String,
    stage: String,
    #[serde(rename = "requestURI")]
    request_uri: String,
    verb: String,
    user: User,
    object_ref: Option<ObjectRef>,
    response_status: Option<Status>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    request_received_timestamp: String,
    #[serde(default)]
    user_agent: String,
}

#[derive(Deserialize)]
struct User {
    #[serde(default)]
    username: String,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    api_group: String,
}

#[derive(Default, Deserialize)]
struct Status {
    #[serde(default)]
    code: u16,
}

impl Event {
    fn record(self, not_ready: &[NotReady]) -> Record {
        let starting = self.received_in(not_ready);
        let status = self.response_status.unwrap_or_default();
        let refusal = match (status.code, self.annotations.get(DECISION)) {
            (403, Some(d)) if d == "forbid" && starting => REFUSED_BEFORE_READY,
            (403, Some(d)) if d == "forbid" => REFUSED_BY_RBAC,
            (403, _) => REFUSED_BY_ADMISSION,
            _ => "",
        };
        // Only a non-resource URL (no objectRef) is identified by its path.
        let path = match &self.object_ref {
            Some(_) => String::new(),
            None => self
                .request_uri
                .split('?')
                .next()
                .unwrap_or_default()
                .to_string(),
        };
        let o = self.object_ref.unwrap_or_default();
        Record {
            request: Request {
                verb: self.verb,
                api_group: o.api_group,
                resource: o.resource,
                subresource: o.subresource,
                namespaced: !o.namespace.is_empty(),
                path,
                code: status.code,
                refusal: refusal.to_string(),
                deprecated: self
                    .annotations
                    .get(DEPRECATED)
                    .is_some_and(|v| v == "true"),
            },
            count: 1,
            example: self.request_uri,
        }
    }
}

impl Event {
    fn received_in(&self, windows: &[NotReady]) -> bool {
        let Ok(at) = self.request_received_timestamp.parse::<jiff::Timestamp>() else {
            return false;
        };
        let at = SystemTime::from(at);
        windows.iter().any(|(from, to)| *from <= at && at <= *to)
    }
}

/// The annotation the authorizer leaves on every event: `allow` or `forbid`.
const DECISION: &str = "authorization.k8s.io/decision";
/// The annotation the API server leaves on a request to a deprecated API version.
const DEPRECATED: &str = "k8s.io/deprecated";

/// The audit log files in `dir`, oldest first: rotated ones (`audit-<time>.log`) sort before
/// the current `audit.log`.
fn log_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("audit") && n.ends_with(".log"))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// The operator's requests in the audit log of the cluster in `dir`, one event per request:
/// the last stage logged. That is ResponseComplete, except for a watch still open when the
/// API server stopped, which has only ResponseStarted.
fn operator_events(dir: &Path) -> Result<Vec<Event>> {
    let mut by_id: HashMap<String, Event> = HashMap::new();
    for file in log_files(dir)? {
        let reader = std::io::BufReader::new(std::fs::File::open(&file)?);
        for line in reader.lines() {
            // A line cut short by a killed API server is not a request worth failing over.
            let Ok(event) = serde_json::from_str::<Event>(&line?) else {
                continue;
            };
            if is_operator_account(&event.user.username) {
                let stale = by_id
                    .get(&event.audit_id)
                    .is_some_and(|seen| seen.stage != "ResponseStarted");
                if !stale {
                    by_id.insert(event.audit_id.clone(), event);
                }
            }
        }
    }
    Ok(by_id.into_values().collect())
}

/// The operator's requests so far in the audit log of the cluster in `dir` sent with User-Agent
/// `agent` (the operator names its instance there), merged by kind.
pub fn requests_of_agent(dir: &Path, agent: &str) -> Result<Vec<Record>> {
    let events = operator_events(dir)?;
    let theirs = events.into_iter().filter(|e| e.user_agent == agent);
    Ok(merge(theirs.map(|e| e.record(&[]))))
}

/// The operator's requests in the audit log of the cluster in `dir` sent with User-Agent
/// `agent` that the API server received at `since` or later, merged by kind.
pub fn requests_of_agent_since(dir: &Path, agent: &str, since: SystemTime) -> Result<Vec<Record>> {
    let events = operator_events(dir)?;
    let theirs = events
        .into_iter()
        .filter(|e| e.user_agent == agent && e.received_in(&[(since, SystemTime::now())]));
    Ok(merge(theirs.map(|e| e.record(&[]))))
}

/// How many writes (anything but get, list and watch) the operator sent with User-Agent `agent`
/// from `since` on, by the object written: `(resource, name)`. A create by `generateName`
/// has no name yet; an event is named for the object it is about (`<object>.<suffix>`).
pub fn writes_by_object(
    dir: &Path,
    agent: &str,
    since: SystemTime,
) -> Result<BTreeMap<(String, String), u64>> {
    let mut writes = BTreeMap::new();
    let events = operator_events(dir)?;
    for e in events.into_iter().filter(|e| {
        e.user_agent == agent
            && !matches!(e.verb.as_str(), "get" | "list" | "watch")
            && e.received_in(&[(since, SystemTime::now())])
    }) {
        let o = e.object_ref.unwrap_or_default();
        *writes.entry((o.resource, o.name)).or_insert(0) += 1;
    }
    Ok(writes)
}

/// Adds up records of the same kind of request, keeping the first example.
pub fn merge(records: impl IntoIterator<Item = Record>) -> Vec<Record> {
    let mut merged: BTreeMap<Request, Record> = BTreeMap::new();
    for r in records {
        match merged.get_mut(&r.request) {
            Some(m) => m.count += r.count,
            None => {
                merged.insert(r.request.clone(), r);
            }
        }
    }
    merged.into_values().collect()
}

/// Writes the aggregate of the operator's requests in the audit log of the cluster in `dir`
/// into `out`, one file per cluster: the test process, the API server's port and a count name
/// it (a process that starts clusters one after another may get the same port twice).
pub(crate) fn collect(dir: &Path, out: &Path, api_port: u16, windows: Windows) -> Result<PathBuf> {
    static COLLECTED: AtomicUsize = AtomicUsize::new(0);
    let events = operator_events(dir)?;
    let this_release = events.into_iter().filter(|e| {
        let other_pod =
            (windows.other_pods.iter()).any(|p| e.user_agent.ends_with(&format!("({p})")));
        !other_pod && !e.received_in(windows.other_release)
    });
    let records = merge(this_release.map(|e| e.record(windows.not_ready)));
    std::fs::create_dir_all(out)?;
    let n = COLLECTED.fetch_add(1, Ordering::Relaxed);
    let file = out.join(format!("audit-{}-{api_port}-{n}.json", std::process::id()));
    std::fs::write(&file, serde_json::to_vec_pretty(&records)?)?;
    Ok(file)
}

/// Every record written into `dir`, merged across clusters.
pub fn read_records(dir: &Path) -> Result<Vec<Record>> {
    let mut records = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read(&path)?;
            let file: Vec<Record> = serde_json::from_slice(&text)
                .with_context(|| format!("parsing {}", path.display()))?;
            records.extend(file);
        }
    }
    Ok(merge(records))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_accounts_are_recognised_precisely() {
        assert!(is_operator_account(
            "system:serviceaccount:ns-1:podset-operator"
        ));
        assert!(is_operator_account(
            "system:serviceaccount:ps-cw:ps-cw-podset-operator"
        ));
        for other in [
            "system:serviceaccount:ns:default",
            "system:serviceaccount:ns:podset-operator-without-finalizers",
            "system:serviceaccount:podset-operator:default",
            "podset-operator",
            "testenv-admin",
        ] {
            assert!(!is_operator_account(other), "{other}");
        }
    }

    fn event(id: &str, stage: &str, verb: &str, code: u16, decision: &str) -> String {
        event_at(
            id,
            stage,
            verb,
            code,
            decision,
            "2026-11-23T10:00:00.000000Z",
        )
    }

    fn event_at(
        id: &str,
        stage: &str,
        verb: &str,
        code: u16,
        decision: &str,
        received: &str,
    ) -> String {
        serde_json::json!({
            "requestReceivedTimestamp": received,
            "kind": "Event", "level": "Metadata", "auditID": id, "stage": stage,
            "requestURI": format!("/api/v1/namespaces/n/pods?{verb}"), "verb": verb,
            "user": {"username": "system:serviceaccount:n:podset-operator"},
            "objectRef": {"resource": "pods", "namespace": "n", "apiVersion": "v1"},
            "responseStatus": {"metadata": {}, "code": code},
            "annotations": {DECISION: decision},
        })
        .to_string()
    }

    /// (verb, refusal) of each record.
    fn refusals(records: &[Record]) -> Vec<(&str, &str)> {
        records
            .iter()
            .map(|r| (r.request.verb.as_str(), r.request.refusal.as_str()))
            .collect()
    }

    fn records_of(log: &[String]) -> Vec<Record> {
        records_with(log, &[])
    }

    fn records_with(log: &[String], not_ready: &[NotReady]) -> Vec<Record> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("audit.log"), log.join("\n")).unwrap();
        let events = operator_events(dir.path()).unwrap();
        merge(events.into_iter().map(|e| e.record(not_ready)))
    }

    #[test]
    fn rbac_refusals_of_a_starting_api_server_are_told_apart() {
        let at = |s: &str| SystemTime::from(s.parse::<jiff::Timestamp>().unwrap());
        let starting = (at("2026-11-23T10:00:00Z"), at("2026-11-23T10:00:05Z"));
        let records = records_with(
            &[
                event_at(
                    "a1",
                    "ResponseComplete",
                    "watch",
                    403,
                    "forbid",
                    "2026-11-23T10:00:04.5Z",
                ),
                event_at(
                    "a2",
                    "ResponseComplete",
                    "list",
                    403,
                    "forbid",
                    "2026-11-23T10:00:06Z",
                ),
            ],
            &[starting],
        );
        assert_eq!(
            refusals(&records),
            [("list", REFUSED_BY_RBAC), ("watch", REFUSED_BEFORE_READY)]
        );
    }

    #[test]
    fn events_become_requests_as_rbac_sees_them() {
        let records = records_of(&[
            event("a1", "ResponseStarted", "watch", 200, "allow"),
            event("a1", "ResponseComplete", "watch", 200, "allow"),
            "{\"kind\":\"Event\",\"trunc".to_string(),
        ]);
        assert_eq!(records.len(), 1, "one request, not one per stage");
        let r = &records[0];
        assert_eq!(
            (r.request.verb.as_str(), r.request.rbac_resource()),
            ("watch", "pods".to_string())
        );
        assert!(r.request.namespaced);
        assert_eq!(r.example, "/api/v1/namespaces/n/pods?watch");
    }

    #[test]
    fn refusals_say_who_refused() {
        let records = records_of(&[
            event("a1", "ResponseComplete", "create", 403, "forbid"),
            event("a2", "ResponseComplete", "list", 403, "allow"),
            event("a3", "ResponseComplete", "delete", 200, "allow"),
        ]);
        assert_eq!(
            refusals(&records),
            [
                ("create", REFUSED_BY_RBAC),
                ("delete", ""),
                ("list", REFUSED_BY_ADMISSION)
            ]
        );
    }
}
