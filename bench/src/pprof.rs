//! The API server's CPU profile split by what it served (issue 48, item 2): each sampled
//! stack is put under the request handler it ran in (create, patch, watch, ...) and the kind
//! of object its frames name (pods, events, custom resources, ...), or under the server's
//! own work outside a request (the watch cache, garbage collection). Read with `go tool pprof
//! -traces`, which the bench finds wherever the Kubernetes build found Go.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The first of these that a stack's frames name is its kind of work: a watch is served from
/// a list handler, so it comes first.
const HANDLERS: &[(&str, &str)] = &[
    ("handlers.serveWatch", "watch"),
    ("handlers.handleWatch", "watch"),
    ("handlers.(*WatchServer)", "watch"),
    ("handlers.(*watchEncoder)", "watch"),
    ("handlers.(*watchEmbeddedEncoder)", "watch"),
    ("handlers.CreateResource", "create"),
    ("handlers.createHandler", "create"),
    ("handlers.(*namedCreaterAdapter)", "create"),
    ("restfulCreateResource", "create"),
    ("handlers.PatchResource", "patch"),
    ("handlers.(*patcher)", "patch"),
    ("restfulPatchResource", "patch"),
    ("handlers.UpdateResource", "update"),
    ("restfulUpdateResource", "update"),
    ("handlers.DeleteResource", "delete"),
    ("restfulDeleteResource", "delete"),
    ("handlers.ListResource", "list"),
    ("restfulListResource", "list"),
    ("handlers.GetResource", "get"),
    ("restfulGetResource", "get"),
    ("cacher.(*Cacher).dispatchEvents", "watch cache fan-out"),
    ("cacher.(*cacheWatcher)", "watch cache fan-out"),
    ("cacher.(*watchCache)", "watch cache from etcd"),
    ("etcd3.(*watchChan)", "watch cache from etcd"),
    ("client/v3.(*watchGRPCStream)", "watch cache from etcd"),
    ("google.golang.org/grpc", "etcd client (gRPC)"),
    // A request's goroutine outside its handler: authentication, authorization, priority
    // and fairness, audit, the handler chain's other filters.
    ("filters.(*timeoutHandler)", "request filters"),
    ("crypto/tls", "HTTP and TLS"),
    ("golang.org/x/net/http2", "HTTP and TLS"),
    ("net/http.(*conn)", "HTTP and TLS"),
    ("runtime.gcBgMarkWorker", "Go GC"),
    ("runtime.bgsweep", "Go GC"),
    ("runtime.mcall", "Go scheduler"),
];

/// A frame naming one of these is about that kind of object (its registry, conversion,
/// validation or protobuf code), checked in order; a sample in generic code alone (JSON,
/// storage) names none and is shown as "-".
const RESOURCES: &[(&str, &str)] = &[
    ("registry/core/event", "events"),
    ("_Event", "events"),
    ("(*Event)", "events"),
    ("ValidateEvent", "events"),
    ("registry/core/pod", "pods"),
    ("_Pod", "pods"),
    ("(*Pod)", "pods"),
    ("ValidatePod", "pods"),
    ("apiextensions-apiserver", "custom resources"),
    ("unstructured", "custom resources"),
    ("coordination", "leases"),
];

/// CPU seconds by (work, object kind), and the total.
#[derive(Debug, Default)]
pub struct Split {
    pub seconds: BTreeMap<(String, String), f64>,
    pub total: f64,
}

/// Splits the profile at `path` (see the module doc).
pub fn split(path: &Path) -> Result<Split> {
    let out = Command::new("go")
        .args(["tool", "pprof", "-traces"])
        .arg(path)
        .output()
        .context("go tool pprof (Go is on PATH after make kubernetes)")?;
    if !out.status.success() {
        bail!("go tool pprof: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(parse(&String::from_utf8_lossy(&out.stdout)))
}

/// `go tool pprof -traces` output: blocks between dashed lines, each a sample's value on its
/// first line before the leaf frame, then one frame a line toward the root.
fn parse(traces: &str) -> Split {
    let mut split = Split::default();
    for block in traces.split("-----------+") {
        let mut lines = block.lines().filter(|l| !l.trim().is_empty());
        let Some(first) = lines.find(|l| !l.starts_with('-')) else {
            continue;
        };
        let mut words = first.split_whitespace();
        let (Some(value), Some(leaf)) = (words.next(), words.next()) else {
            continue;
        };
        let Some(seconds) = seconds(value) else {
            continue;
        };
        let frames: Vec<&str> = std::iter::once(leaf).chain(lines.map(str::trim)).collect();
        *split.seconds.entry(classify(&frames)).or_default() += seconds;
        split.total += seconds;
    }
    split
}

/// A pprof duration ("10ms", "1.20s", "500us") in seconds.
fn seconds(value: &str) -> Option<f64> {
    let units = [
        ("ms", 1e-3),
        ("us", 1e-6),
        ("µs", 1e-6),
        ("ns", 1e-9),
        ("s", 1.0),
    ];
    let (number, scale) = units
        .iter()
        .find_map(|(unit, scale)| value.strip_suffix(unit).map(|n| (n, *scale)))?;
    Some(number.parse::<f64>().ok()? * scale)
}

fn classify(frames: &[&str]) -> (String, String) {
    let named = |name: &str| frames.iter().any(|f| f.contains(name));
    let work = HANDLERS
        .iter()
        .find(|(name, _)| named(name))
        .map_or("other", |(_, work)| work);
    let object = RESOURCES
        .iter()
        .find(|(name, _)| named(name))
        .map_or("-", |(_, object)| object);
    (work.to_string(), object.to_string())
}

/// The split as lines of a table, largest first, each with its share of the total.
pub fn table(split: &Split) -> Vec<String> {
    let mut rows: Vec<_> = split.seconds.iter().collect();
    rows.sort_by(|a, b| b.1.total_cmp(a.1));
    let share = |s: f64| 100.0 * s / split.total.max(f64::MIN_POSITIVE);
    let mut lines = vec![format!(
        "{:<24} {:<18} {:>8} {:>6}",
        "work", "object", "CPU s", "%"
    )];
    for ((work, object), s) in rows {
        lines.push(format!(
            "{work:<24} {object:<18} {s:>8.2} {:>5.1}%",
            share(*s)
        ));
    }
    lines.push(format!(
        "{:<24} {:<18} {:>8.2} 100.0%",
        "total", "", split.total
    ));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_go_under_their_handler_and_object() {
        let traces = "File: kube-apiserver\nType: cpu\n\
-----------+-------------------------------------------------------\n\
      20ms   encoding/json.(*decodeState).object\n\
             k8s.io/kubernetes/pkg/registry/core/pod.podStrategy.Validate\n\
             k8s.io/apiserver/pkg/endpoints/handlers.createHandler.func1\n\
             net/http.(*conn).serve\n\
-----------+-------------------------------------------------------\n\
     1.50s   runtime.scanobject\n\
             runtime.gcBgMarkWorker\n\
-----------+-------------------------------------------------------\n\
      30ms   sync.(*Mutex).Lock\n\
             k8s.io/apiserver/pkg/endpoints/handlers.handleWatch\n\
             k8s.io/apiserver/pkg/endpoints/handlers.ListResource.func1\n\
-----------+-------------------------------------------------------\n";
        let split = parse(traces);
        let at = |w: &str, o: &str| split.seconds.get(&(w.into(), o.into())).copied();
        assert_eq!(at("create", "pods"), Some(0.02));
        assert_eq!(at("Go GC", "-"), Some(1.5));
        assert_eq!(at("watch", "-"), Some(0.03));
        assert!((split.total - 1.55).abs() < 1e-9);
    }
}
