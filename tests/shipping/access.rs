//! RBAC answers for the operator's ServiceAccount, by `kubectl auth can-i`.

use super::*;

/// `kubectl auth can-i` as the ServiceAccount `ns/sa`; `scope` is `-n NS` or `--all-namespaces`.
pub async fn can_i(
    kc: &Path,
    sa: (&str, &str),
    verb: &str,
    what: &str,
    scope: &[&str],
) -> Result<bool> {
    let user = format!("--as=system:serviceaccount:{}:{}", sa.0, sa.1);
    // `resource/subresource` becomes `resource --subresource=subresource`.
    let (resource, sub) = what.split_once('/').unwrap_or((what, ""));
    let sub = format!("--subresource={sub}");
    let mut args = vec!["auth", "can-i", verb, resource, user.as_str()];
    if sub.len() > "--subresource=".len() {
        args.push(&sub);
    }
    args.extend_from_slice(scope);
    let kc = kc.display().to_string();
    let mut full = vec!["--kubeconfig", kc.as_str()];
    full.extend_from_slice(&args);
    let out = tokio::process::Command::new(testenv::versions::kubectl())
        .args(&full)
        .output()
        .await?;
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
    match answer.as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => bail!(
            "kubectl {} answered {answer:?}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Polls until the ServiceAccount may do it (RBAC caches catch up in moments).
pub async fn assert_can(
    kc: &Path,
    sa: (&str, &str),
    verb: &str,
    what: &str,
    scope: &[&str],
) -> Result<()> {
    poll(
        Duration::from_secs(30),
        &format!("{}/{} may {verb} {what} {scope:?}", sa.0, sa.1),
        || can_i(kc, sa, verb, what, scope),
    )
    .await
}

pub async fn assert_cannot(
    kc: &Path,
    sa: (&str, &str),
    verb: &str,
    what: &str,
    scope: &[&str],
) -> Result<()> {
    ensure!(
        !can_i(kc, sa, verb, what, scope).await?,
        "{}/{} may {verb} {what} {scope:?}, and must not",
        sa.0,
        sa.1
    );
    Ok(())
}

/// What the operator must never be able to do, wherever it is installed.
pub async fn assert_least_privilege(
    kc: &Path,
    sa: (&str, &str),
    namespaces: &[&str],
) -> Result<()> {
    for ns in namespaces {
        let scope = ["-n", ns];
        for verb in ["get", "list", "watch"] {
            assert_cannot(kc, sa, verb, "secrets", &scope).await?;
        }
        for verb in ["get", "list", "create", "update", "patch", "delete"] {
            assert_cannot(kc, sa, verb, "deployments.apps", &scope).await?;
        }
        assert_cannot(kc, sa, "update", "pods", &scope).await?;
        assert_cannot(kc, sa, "create", "podsets.app.example.com", &scope).await?;
        assert_cannot(kc, sa, "delete", "podsets.app.example.com", &scope).await?;
    }
    for verb in ["create", "update", "patch", "delete"] {
        for what in [
            "customresourcedefinitions.apiextensions.k8s.io",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io",
            "validatingwebhookconfigurations.admissionregistration.k8s.io",
            "clusterroles.rbac.authorization.k8s.io",
            "clusterrolebindings.rbac.authorization.k8s.io",
        ] {
            assert_cannot(kc, sa, verb, what, &[]).await?;
        }
    }
    assert_cannot(kc, sa, "list", "secrets", &["--all-namespaces"]).await?;
    Ok(())
}

/// What the operator needs in a namespace it watches.
pub async fn assert_manager_rights(kc: &Path, sa: (&str, &str), ns: &str) -> Result<()> {
    let scope = ["-n", ns];
    for verb in ["get", "list", "watch", "create", "delete"] {
        assert_can(kc, sa, verb, "pods", &scope).await?;
    }
    for verb in ["list", "watch"] {
        assert_can(kc, sa, verb, "podsets.app.example.com", &scope).await?;
        assert_can(kc, sa, verb, "ats.cnat.programming-kubernetes.info", &scope).await?;
    }
    assert_can(kc, sa, "patch", "podsets.app.example.com/status", &scope).await?;
    assert_can(
        kc,
        sa,
        "patch",
        "ats.cnat.programming-kubernetes.info/status",
        &scope,
    )
    .await?;
    assert_can(
        kc,
        sa,
        "update",
        "podsets.app.example.com/finalizers",
        &scope,
    )
    .await?;
    assert_can(kc, sa, "create", "events.events.k8s.io", &scope).await
}

/// The editor and viewer roles for people are aggregated into the built-in ones: accounts
/// bound to `view` and to `edit` in `ns` may read, and edit, PodSets and Ats there.
pub async fn assert_user_roles_aggregated(kc: &Path, ns: &str) -> Result<()> {
    for (role, account) in [("view", "a-viewer"), ("edit", "an-editor")] {
        let subject = format!("--serviceaccount={ns}:{account}");
        let clusterrole = format!("--clusterrole={role}");
        let name = format!("{account}-{role}");
        kubectl(
            kc,
            &[
                "create",
                "rolebinding",
                &name,
                &clusterrole,
                &subject,
                "-n",
                ns,
            ],
        )
        .await?;
    }
    let scope = ["-n", ns];
    for what in [
        "podsets.app.example.com",
        "ats.cnat.programming-kubernetes.info",
    ] {
        let status = format!("{what}/status");
        let viewer = (ns, "a-viewer");
        assert_can(kc, viewer, "list", what, &scope).await?;
        assert_can(kc, viewer, "get", &status, &scope).await?;
        assert_cannot(kc, viewer, "create", what, &scope).await?;
        let editor = (ns, "an-editor");
        for verb in ["create", "update", "patch", "delete", "watch"] {
            assert_can(kc, editor, verb, what, &scope).await?;
        }
        assert_cannot(kc, editor, "patch", &status, &scope).await?;
    }
    Ok(())
}
