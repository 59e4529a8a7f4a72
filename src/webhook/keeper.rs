//! The provisioned certificates' I/O: every replica watches the one Secret, writes it when it
//! needs renewing (a create, or an update over the version read: when two replicas race,
//! one wins and the other serves what it wrote), serves what it holds, and keeps the At CRD's
//! conversion pointed at the webhook Service with the CA as its `caBundle`. Its rights are
//! that Secret and that CRD, by name.

use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::certs::{self, Need, Stored};
use crate::api::CONVERT_PATH;
use crate::http::tls::Held;

/// The At CRD, whose conversion the webhook serves.
pub const AT_CRD: &str = "ats.cnat.programming-kubernetes.info";
/// How often the certificates' expiry and the CRD are looked at without a change to the
/// Secret: someone re-applying the CRD from its manifest empties its `caBundle`.
pub const RECHECK: Duration = Duration::from_secs(60);
/// How long after a failed round the next is tried.
const RETRY: Duration = Duration::from_secs(2);

/// Certificates the operator provisions in a Secret of its namespace.
#[derive(Clone, Debug)]
pub struct Provisioned {
    pub secret: String,
    pub service: Service,
}

/// The webhook Service, in the operator's namespace: the At CRD's conversion points at it.
#[derive(Clone, Debug)]
pub struct Service {
    pub namespace: String,
    pub name: String,
}

impl Service {
    /// The names a serving certificate must cover: the Service's, as the API server dials it.
    pub fn hosts(&self) -> Vec<String> {
        let (svc, ns) = (&self.name, &self.namespace);
        vec![
            format!("{svc}.{ns}.svc"),
            format!("{svc}.{ns}.svc.cluster.local"),
        ]
    }
}

/// The first certificate to serve, once one is in the Secret (made if need be): retried
/// until it is, or `shutdown`.
pub async fn first(
    client: &Client,
    provisioned: &Provisioned,
    shutdown: &CancellationToken,
) -> Option<Held> {
    loop {
        match round(client, provisioned, None).await {
            Ok(held) => return Some(held),
            Err(e) => {
                warn!(error = format!("{e:#}"), secret = %provisioned.secret, "provisioning the webhook certificate; trying again")
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            _ = tokio::time::sleep(RETRY) => {}
        }
    }
}

/// Keeps `held` and the CRD current until `shutdown`: a round at every change of the Secret
/// and every [`RECHECK`].
pub async fn keep(
    client: Client,
    provisioned: Provisioned,
    held: Held,
    shutdown: CancellationToken,
) {
    let api: Api<Secret> = Api::namespaced(client.clone(), &provisioned.service.namespace);
    let config =
        watcher::Config::default().fields(&format!("metadata.name={}", provisioned.secret));
    let mut changes = watcher(api, config).boxed();
    let mut tick = tokio::time::interval(RECHECK);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
            change = changes.next() => if change.is_none() { return },
        }
        if let Err(e) = round(&client, &provisioned, Some(&held)).await {
            warn!(
                error = format!("{e:#}"),
                "keeping the webhook certificate current"
            );
            tick.reset_after(RETRY);
        }
    }
}

/// One look: the Secret read, written if it needs to be, served, and the CRD pointed at it.
async fn round(client: &Client, p: &Provisioned, held: Option<&Held>) -> anyhow::Result<Held> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &p.service.namespace);
    let found = api.get_opt(&p.secret).await?;
    let mut stored = found.as_ref().map(stored);
    let hosts = p.service.hosts();
    if let Need::Write(new) = certs::need(stored.as_ref(), &hosts, jiff::Timestamp::now())? {
        info!(secret = %p.secret, "writing a new webhook certificate");
        let secret = secret(p, found.as_ref(), &new);
        match &found {
            Some(_) => {
                api.replace(&p.secret, &PostParams::default(), &secret)
                    .await?
            }
            None => api.create(&PostParams::default(), &secret).await?,
        };
        stored = Some(new);
    }
    let stored = stored.expect("read or written");
    let (crt, key, _) = stored
        .serving()
        .ok_or_else(|| anyhow::anyhow!("the Secret holds no certificate"))?;
    let held = match held {
        Some(held) => {
            if held.replace(crt, key)? {
                info!("serving the webhook's renewed certificate");
            }
            held.clone()
        }
        None => Held::new(crt, key)?,
    };
    point_crd(
        client,
        &p.service,
        &certs::bundle(&stored, jiff::Timestamp::now()),
    )
    .await?;
    Ok(held)
}

/// Keeps the At CRD's conversion pointed at `service`, trusting the CA mounted beside a
/// mounted certificate (`ca.crt`, as cert-manager writes it; its CA injector may write the
/// same), until `stop`: looked at every [`RECHECK`].
pub async fn keep_pointed(client: Client, service: Service, dir: PathBuf, stop: CancellationToken) {
    let mut tick = tokio::time::interval(RECHECK);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let pointed = match std::fs::read(dir.join(certs::CA_CRT)) {
            Ok(bundle) => point_crd(&client, &service, &bundle).await,
            Err(e) => Err(anyhow::anyhow!(
                "reading {}: {e}",
                dir.join(certs::CA_CRT).display()
            )),
        };
        if let Err(e) = pointed {
            warn!(
                error = format!("{e:#}"),
                "pointing the At CRD's conversion at this webhook"
            );
            tick.reset_after(RETRY);
        }
    }
}

/// The At CRD's conversion, pointed at the webhook Service and trusting `bundle`, unless it
/// already is.
async fn point_crd(client: &Client, p: &Service, bundle: &[u8]) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = api.get(AT_CRD).await?;
    let config = crd
        .spec
        .conversion
        .as_ref()
        .and_then(|c| c.webhook.as_ref())
        .and_then(|w| w.client_config.as_ref());
    let service = config.and_then(|c| c.service.as_ref());
    let pointed = service.is_some_and(|s| {
        s.namespace == p.namespace && s.name == p.name && s.path.as_deref() == Some(CONVERT_PATH)
    }) && config.is_some_and(|c| c.url.is_none());
    let trusted = config
        .and_then(|c| c.ca_bundle.as_ref())
        .is_some_and(|b| b.0 == bundle);
    if pointed && trusted {
        return Ok(());
    }
    info!(crd = AT_CRD, service = %p.name, "pointing the At CRD's conversion at this webhook");
    let patch = serde_json::json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {
        "conversionReviewVersions": ["v1"],
        "clientConfig": {
            "url": null,
            "service": {"namespace": p.namespace, "name": p.name, "path": CONVERT_PATH, "port": 443},
            "caBundle": ByteString(bundle.to_vec()),
        },
    }}}});
    api.patch(AT_CRD, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

fn stored(secret: &Secret) -> Stored {
    Stored {
        data: secret
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect(),
        annotations: secret.annotations().clone(),
    }
}

/// The Secret to write: `new`'s data and annotations, over `found` (its version and the rest
/// of its metadata kept).
fn secret(p: &Provisioned, found: Option<&Secret>, new: &Stored) -> Secret {
    let mut secret = found.cloned().unwrap_or_default();
    secret.metadata.name = Some(p.secret.clone());
    secret.metadata.namespace = Some(p.service.namespace.clone());
    secret.metadata.managed_fields = None;
    secret.annotations_mut().extend(new.annotations.clone());
    secret.type_ = Some("kubernetes.io/tls".into());
    secret.data = Some(
        new.data
            .iter()
            .map(|(k, v)| (k.clone(), ByteString(v.clone())))
            .collect(),
    );
    secret
}
