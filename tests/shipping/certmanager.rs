//! The webhook's certificate from cert-manager, as the chart (`webhook.certManager.enabled`)
//! and the kustomize overlay (`config/certmanager`) ask for it: a Certificate for the webhook
//! Service's names (from a self-signed Issuer unless one is named), its Secret mounted where
//! the operator reads it (`WEBHOOK_CERT_DIR`), and no rights on Secrets for the operator. The
//! overlay has cert-manager's CA injector annotate the At CRD; the chart, whose CRDs Helm does
//! not template, has the operator keep the CRD trusting the Secret's `ca.crt`
//! (`tests/at/webhook.rs` runs that mode).

use super::*;

/// The operator reads its webhook certificate from `certificate`'s Secret, mounted where
/// `WEBHOOK_CERT_DIR` says, and has no rights on Secrets.
fn serves_the_certificate_without_secret_rights(docs: &[Value], certificate: &Value) -> Result<()> {
    let deploy = find(docs, "Deployment", "")?;
    assert_eq!(
        mounted(deploy),
        (
            Some("/tmp/k8s-webhook-server/serving-certs"),
            certificate["spec"]["secretName"].as_str()
        )
    );
    no_secret_rights(docs);
    Ok(())
}

/// The manager container's `WEBHOOK_CERT_DIR`, and the Secret its webhook certificates are
/// mounted from.
fn mounted(deploy: &Value) -> (Option<&str>, Option<&str>) {
    let pod = &deploy["spec"]["template"]["spec"];
    let dir = pod["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "WEBHOOK_CERT_DIR")
        .and_then(|e| e["value"].as_str());
    let secret = pod["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == "webhook-certs")
        .and_then(|v| v["secret"]["secretName"].as_str());
    (dir, secret)
}

fn no_secret_rights(docs: &[Value]) {
    for role in docs
        .iter()
        .filter(|d| d["kind"] == "Role" || d["kind"] == "ClusterRole")
    {
        let rules = role["rules"].as_array().into_iter().flatten();
        let secrets = rules.flat_map(|r| r["resources"].as_array().into_iter().flatten());
        assert!(!secrets.into_iter().any(|r| r == "secrets"), "{role}");
    }
}

#[tokio::test]
async fn the_chart_takes_the_webhook_certificate_from_cert_manager_when_asked() -> Result<()> {
    let docs = render(&["--set", "webhook.certManager.enabled=true"]).await?;
    let certificate = find(&docs, "Certificate", "-webhook")?;
    assert_eq!(
        certificate["spec"]["dnsNames"],
        json!([
            "ps-podset-operator-webhook.ops.svc",
            "ps-podset-operator-webhook.ops.svc.cluster.local"
        ])
    );
    assert_eq!(
        certificate["spec"]["issuerRef"]["name"],
        "ps-podset-operator-selfsigned"
    );
    find(&docs, "Issuer", "-selfsigned")?;
    serves_the_certificate_without_secret_rights(&docs, certificate)?;

    let named = r#"webhook.certManager.issuerRef={"kind":"ClusterIssuer","name":"corp-ca"}"#;
    let docs = render(&[
        "--set",
        "webhook.certManager.enabled=true",
        "--set-json",
        named,
    ])
    .await?;
    assert_eq!(
        find(&docs, "Certificate", "-webhook")?["spec"]["issuerRef"],
        json!({"kind": "ClusterIssuer", "name": "corp-ca"})
    );
    assert!(
        find(&docs, "Issuer", "").is_err(),
        "an Issuer made though one is named"
    );
    Ok(())
}

#[tokio::test]
async fn the_kustomize_overlay_takes_the_webhook_certificate_from_cert_manager() -> Result<()> {
    let kubectl = testenv::versions::kubectl();
    let out = run(
        &kubectl.to_string_lossy(),
        &["kustomize", "config/certmanager"],
    )
    .await?;
    let docs = documents(&out)?;
    let certificate = find(&docs, "Certificate", "-webhook")?;
    let service = find(&docs, "Service", "-webhook-service")?;
    let svc = service["metadata"]["name"].as_str().unwrap_or_default();
    assert_eq!(
        certificate["spec"]["dnsNames"][0],
        format!("{svc}.podset-operator-system.svc")
    );
    let crd = find(
        &docs,
        "CustomResourceDefinition",
        "ats.cnat.programming-kubernetes.info",
    )?;
    assert_eq!(
        crd["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "podset-operator-system/podset-operator-webhook"
    );
    serves_the_certificate_without_secret_rights(&docs, certificate)?;
    Ok(())
}
