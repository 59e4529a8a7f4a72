//! Storage migration, as cert-manager's `cmctl upgrade migrate-api-version` does it: the API
//! server never rewrites what it stored at an older version by itself, and a version stays in
//! a CRD's `status.storedVersions` (and so cannot be dropped from the CRD) while anything may
//! be stored at it. Every object is written back unchanged at the storage version (a write
//! whose bytes differ from what is stored, since they are another version's, so the API
//! server stores it anew; one already at that version is left as it is), then
//! `storedVersions` is trimmed to that version alone: every object written since the storage
//! version changed is stored at it.
//!
//! The leader does this at the start of its term, for the namespaces it watches, and trims
//! `storedVersions` only when it watches them all; `podset-operator migrate` does it from a
//! user's kubeconfig, in either direction: `--to v1alpha1` first makes v1alpha1 the storage
//! version, the way back to a release that knows only it (docs/versioning.md).

use anyhow::{Context, Result, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use tracing::{info, warn};

use crate::api::{DEPRECATED_VERSION, STORAGE_VERSION, conversion};
use crate::scope::Scope;

/// A kind the operator serves, as its CRD and its resource name it.
#[derive(Clone, Copy, Debug)]
pub struct Kind {
    pub crd: &'static str,
    pub group: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
}

pub const KINDS: [Kind; 2] = [
    Kind {
        crd: "podsets.app.example.com",
        group: "app.example.com",
        kind: "PodSet",
        plural: "podsets",
    },
    Kind {
        crd: "ats.cnat.programming-kubernetes.info",
        group: "cnat.programming-kubernetes.info",
        kind: "At",
        plural: "ats",
    },
];

impl Kind {
    fn resource(self, version: &str) -> ApiResource {
        ApiResource {
            group: self.group.into(),
            version: version.into(),
            api_version: format!("{}/{version}", self.group),
            kind: self.kind.into(),
            plural: self.plural.into(),
        }
    }
}

/// What a migration did to one kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Migrated {
    /// Objects written back.
    pub rewritten: usize,
    /// `status.storedVersions` now names the version alone.
    pub trimmed: bool,
}

/// Whether `crd` may still hold objects stored at a version other than `version`.
pub fn needs(crd: &CustomResourceDefinition, version: &str) -> bool {
    let stored = crd
        .status
        .as_ref()
        .and_then(|s| s.stored_versions.as_deref());
    stored != Some(&[version.to_string()][..])
}

/// The version `crd` stores objects at.
fn storage(crd: &CustomResourceDefinition) -> Option<&str> {
    crd.spec
        .versions
        .iter()
        .find(|v| v.storage)
        .map(|v| v.name.as_str())
}

/// Migrates `kind` in `scope` to `version`, which must be its CRD's storage version; trims
/// `storedVersions` if `scope` is every namespace.
pub async fn migrate(
    client: &Client,
    kind: Kind,
    version: &str,
    scope: &Scope,
) -> Result<Migrated> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds
        .get(kind.crd)
        .await
        .with_context(|| format!("reading CRD {}", kind.crd))?;
    if !needs(&crd, version) {
        return Ok(Migrated::default());
    }
    if storage(&crd) != Some(version) {
        bail!(
            "CRD {} stores objects at {:?}, not {version}: install the CRDs of the release that stores {version} first",
            kind.crd,
            storage(&crd)
        );
    }
    let resource = kind.resource(version);
    let mut rewritten = 0;
    for namespace in scope.each() {
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        rewritten += rewrite_all(&api, client, &resource).await?;
    }
    let trimmed = matches!(scope, Scope::All);
    if trimmed {
        let status = serde_json::json!({"status": {"storedVersions": [version]}});
        crds.patch_status(kind.crd, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .with_context(|| format!("trimming the storedVersions of CRD {}", kind.crd))?;
    }
    info!(
        kind = kind.kind,
        version, rewritten, trimmed, "stored objects migrated"
    );
    Ok(Migrated { rewritten, trimmed })
}

/// Writes back every object `api` lists, a page at a time: each unchanged, over the version
/// read; one that changed meanwhile is read again and written; one gone is skipped.
async fn rewrite_all(
    api: &Api<DynamicObject>,
    client: &Client,
    resource: &ApiResource,
) -> Result<usize> {
    let mut rewritten = 0;
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api
            .list(&params)
            .await
            .context("listing objects to migrate")?;
        for object in &page.items {
            if rewrite(client, resource, object).await? {
                rewritten += 1;
            }
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(rewritten),
        }
    }
}

/// Writes `object` back unchanged; whether it was still there.
async fn rewrite(client: &Client, resource: &ApiResource, object: &DynamicObject) -> Result<bool> {
    let name = object.name_any();
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &object.namespace().unwrap_or_default(),
        resource,
    );
    let mut current = object.clone();
    for _ in 0..5 {
        current.metadata.managed_fields = None;
        match api.replace(&name, &PostParams::default(), &current).await {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
            Err(kube::Error::Api(s)) if s.code == 409 => match api.get_opt(&name).await? {
                Some(fresh) => current = fresh,
                None => return Ok(false),
            },
            Err(e) => {
                return Err(e).with_context(|| format!("writing {} {name} back", resource.kind));
            }
        }
    }
    bail!(
        "{} {name} kept changing while it was being written back",
        resource.kind
    )
}

/// Makes `version` the storage version of `kind`'s CRD: the first step back to a release that
/// knows only that version.
pub async fn store_at(client: &Client, kind: Kind, version: &str) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut crd = crds.get(kind.crd).await?;
    if !crd.spec.versions.iter().any(|v| v.name == version) {
        bail!("CRD {} serves no version {version}", kind.crd);
    }
    for v in &mut crd.spec.versions {
        v.storage = v.name == version;
    }
    crd.metadata.managed_fields = None;
    crds.replace(kind.crd, &PostParams::default(), &crd).await?;
    Ok(())
}

/// The Ats that would run otherwise under a release that knows only v1alpha1: those not yet
/// run whose spec v1alpha1 cannot express (it carries it in an annotation, which that release
/// does not read).
pub async fn richer_than_v1alpha1(client: &Client) -> Result<Vec<String>> {
    let kind = KINDS[1];
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.resource(DEPRECATED_VERSION));
    let ats: Vec<DynamicObject> = api.list(&ListParams::default()).await?.items;
    Ok(ats
        .into_iter()
        .filter(|at| {
            let pending = at.data["status"]["phase"]
                .as_str()
                .is_none_or(|p| p == "PENDING");
            pending && at.annotations().contains_key(conversion::SPEC_ANNOTATION)
        })
        .map(|at| format!("{}/{}", at.namespace().unwrap_or_default(), at.name_any()))
        .collect())
}

/// The leader's migration at the start of a term: to the storage version, in the namespaces
/// it watches. A failure is logged and left to the next term: nothing depends on it but the
/// day v1alpha1 is dropped.
pub async fn at_term_start(client: Client, scope: Scope) {
    for kind in KINDS {
        if let Err(e) = migrate(&client, kind, STORAGE_VERSION, &scope).await {
            warn!(
                kind = kind.kind,
                error = format!("{e:#}"),
                "migrating stored objects to {STORAGE_VERSION}; the next term tries again"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionStatus;

    fn stored(versions: &[&str]) -> CustomResourceDefinition {
        let mut crd = crate::api::at_crd();
        crd.status = Some(CustomResourceDefinitionStatus {
            stored_versions: Some(versions.iter().map(|v| v.to_string()).collect()),
            ..Default::default()
        });
        crd
    }

    /// Nothing to do once the storage version is the only one ever stored; anything else may
    /// still hold objects at another.
    #[test]
    fn a_crd_needs_migrating_until_it_has_stored_only_the_storage_version() {
        assert_eq!(storage(&stored(&[])), Some(STORAGE_VERSION));
        assert!(!needs(&stored(&["v1beta1"]), "v1beta1"));
        assert!(needs(&stored(&["v1alpha1", "v1beta1"]), "v1beta1"));
        assert!(needs(&stored(&["v1alpha1"]), "v1beta1"));
        assert!(needs(&stored(&["v1beta1"]), "v1alpha1"));
        let mut unknown = stored(&["v1beta1"]);
        unknown.status = None;
        assert!(
            needs(&unknown, "v1beta1"),
            "no status read: assume the worst"
        );
    }
}
