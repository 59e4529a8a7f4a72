//! Waits, each polled with a deadline, for what an install or uninstall leaves.

use super::*;

/// Waits for the objects (`kind/name`) in `ns` ("" for cluster-scoped) to exist, or be gone.
pub async fn wait_objects(kc: &Path, ns: &str, objects: &[String], present: bool) -> Result<()> {
    for obj in objects {
        let what = format!(
            "{obj} in {ns:?} {}",
            if present { "present" } else { "gone" }
        );
        poll(Duration::from_secs(90), &what, || async {
            let mut args = vec!["get", obj.as_str(), "--ignore-not-found", "-o", "name"];
            if !ns.is_empty() {
                args.extend_from_slice(&["-n", ns]);
            }
            let out = kubectl(kc, &args).await?;
            Ok(out.trim().is_empty() != present)
        })
        .await?;
    }
    Ok(())
}

/// Both replicas of the Deployment scheduled onto (hollow) nodes.
pub async fn wait_pods_scheduled(kc: &Path, ns: &str, selector: &str) -> Result<()> {
    poll(
        Duration::from_secs(120),
        &format!("2 pods {selector} in {ns} scheduled and Running"),
        || async {
            let out = kubectl(kc, &["get", "pods", "-n", ns, "-l", selector, "-o", "json"]).await?;
            let list: Value = serde_json::from_str(&out)?;
            let items = list["items"].as_array().cloned().unwrap_or_default();
            let running = items
                .iter()
                .filter(|p| {
                    p["spec"]["nodeName"]
                        .as_str()
                        .is_some_and(|n| !n.is_empty())
                        && p["status"]["phase"] == "Running"
                })
                .count();
            Ok(running == 2)
        },
    )
    .await
}

pub async fn wait_no_pods(kc: &Path, ns: &str, selector: &str) -> Result<()> {
    poll(
        Duration::from_secs(120),
        &format!("pods {selector} in {ns} gone"),
        || async {
            let out = kubectl(kc, &["get", "pods", "-n", ns, "-l", selector, "-o", "name"]).await?;
            Ok(out.trim().is_empty())
        },
    )
    .await
}

/// Both CRDs of the operator Established. Polled: `kubectl wait --for=condition=Established`
/// fails at once on a CRD created so recently that it has no conditions yet.
pub async fn wait_crds_established(kc: &Path) -> Result<()> {
    for crd in [
        "podsets.app.example.com",
        "ats.cnat.programming-kubernetes.info",
    ] {
        let crd = format!("crd/{crd}");
        let established = r#"-o=jsonpath={.status.conditions[?(@.type=="Established")].status}"#;
        poll(
            Duration::from_secs(60),
            &format!("{crd} Established"),
            || async {
                let out = kubectl(kc, &["get", &crd, "--ignore-not-found", established]).await?;
                Ok(out.trim() == "True")
            },
        )
        .await?;
    }
    Ok(())
}
