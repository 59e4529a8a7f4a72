//! A hot loop, found in the API server's audit log: the writes about each object the search
//! submitted, against what acting on it and retrying with backoff may take.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::finding;
use crate::generate::Generated;

/// Writes about each object beyond what acting on it and retrying with backoff may take: a
/// hot loop. Pods created by generateName carry no name yet: they count for all PodSets,
/// with `canary_pods` more.
pub fn too_many_writes(
    admitted: &[&Generated],
    writes: &BTreeMap<(String, String), u64>,
    elapsed: Duration,
    canary_pods: u64,
) -> Vec<String> {
    // Backoff doubles from 1 s: retries within `elapsed` are about log2 of it.
    let retries = 2 + (elapsed.as_secs_f64() + 1.0).log2().ceil() as u64;
    let mut per_object: BTreeMap<&str, u64> = BTreeMap::new();
    let mut unnamed_pods = 0;
    for ((resource, name), n) in writes {
        let about = match resource.as_str() {
            "events" => name.rsplit_once('.').map_or(name.as_str(), |(o, _)| o),
            "pods" if name.is_empty() => {
                unnamed_pods += n;
                continue;
            }
            "pods" => name.strip_suffix("-pod").unwrap_or(name),
            _ => name,
        };
        *per_object.entry(about).or_insert(0) += n;
    }
    let replicas = |g: &Generated| g.body["spec"]["replicas"].as_u64().unwrap_or(1).min(10);
    let mut found = Vec::new();
    let mut pod_budget = 0;
    for g in admitted {
        let budget = replicas(g) + 4 + 3 * retries;
        pod_budget += replicas(g) + retries;
        let sent = per_object.get(g.name.as_str()).copied().unwrap_or(0);
        if sent > budget {
            found.push(finding(g, &format!("{sent} writes in {elapsed:.0?}")));
        }
    }
    if unnamed_pods > pod_budget + canary_pods {
        found.push(format!(
            "{unnamed_pods} pod creates in {elapsed:.0?} for a batch that needs {pod_budget}"
        ));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CANARY_PODS;
    use testenv::harness::Kind;

    fn podset(seed: u64, replicas: u64) -> Generated {
        let name = format!("in-{seed:x}");
        Generated {
            seed,
            kind: Kind::PodSet,
            version: podset_operator::api::STORAGE_VERSION,
            body: serde_json::json!({"metadata": {"name": name}, "spec": {"replicas": replicas}}),
            name,
            how: "test".into(),
        }
    }

    fn writes(list: &[(&str, &str, u64)]) -> BTreeMap<(String, String), u64> {
        list.iter()
            .map(|(r, n, c)| ((r.to_string(), n.to_string()), *c))
            .collect()
    }

    #[test]
    fn writes_are_counted_for_the_object_they_are_about_and_a_hot_loop_is_found() {
        let (a, b) = (podset(10, 3), podset(11, 1));
        let elapsed = Duration::from_secs(5);
        let acting = writes(&[
            ("pods", "", 4),
            ("podsets", "in-a", 2),
            ("events", "in-a.18b2f", 1),
            ("events", "in-b.18b2f", 6),
            ("podsets", "in-b", 6),
        ]);
        assert!(too_many_writes(&[&a, &b], &acting, elapsed, CANARY_PODS).is_empty());
        let looping = writes(&[("podsets", "in-b", 40), ("events", "in-b.1", 1)]);
        let found = too_many_writes(&[&a, &b], &looping, elapsed, CANARY_PODS);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("seed 11 "), "{found:?}");
        let creating = writes(&[("pods", "", 60)]);
        assert_eq!(
            too_many_writes(&[&a, &b], &creating, elapsed, CANARY_PODS).len(),
            1
        );
    }
}
