//! What a test reads and writes around the typed API: objects raw (the typed API cannot hold
//! every object a test submits), the events about an object, and kubectl.

use anyhow::Result;
use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;

use super::TestNs;

/// Our two kinds, for requests made raw (objects the typed API cannot hold).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    PodSet,
    At,
}

impl Kind {
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::PodSet => "app.example.com/v1beta1",
            Kind::At => "cnat.programming-kubernetes.info/v1beta1",
        }
    }

    pub fn plural(self) -> &'static str {
        match self {
            Kind::PodSet => "podsets",
            Kind::At => "ats",
        }
    }
}

impl TestNs {
    /// The URL of this namespace's objects of `kind`.
    pub fn url_of(&self, kind: Kind) -> String {
        self.url_at(kind, kind.api_version())
    }

    /// The collection of `kind` in this namespace, served at `api_version` (group/version).
    pub fn url_at(&self, kind: Kind, api_version: &str) -> String {
        let plural = kind.plural();
        format!("/apis/{api_version}/namespaces/{}/{plural}", self.name)
    }

    /// POSTs `body` as is, an object of `kind`, into this namespace at `api_version`: raw,
    /// because the typed API cannot hold every object a test submits. The API server's
    /// refusal, if any.
    pub async fn post_raw(
        &self,
        kind: Kind,
        api_version: &str,
        body: Vec<u8>,
    ) -> Result<Option<(u16, String)>> {
        let url = self.url_at(kind, api_version);
        self.send_raw(http::Method::POST, url, body).await
    }

    /// Sends `body` (JSON) to `url` by `method`, as is: the API server's refusal, if any.
    pub async fn send_raw(
        &self,
        method: http::Method,
        url: String,
        body: Vec<u8>,
    ) -> Result<Option<(u16, String)>> {
        let request = http::Request::builder()
            .method(method)
            .uri(url)
            .header("content-type", "application/json")
            .body(body)?;
        match self.client.request_text(request).await {
            Ok(_) => Ok(None),
            Err(kube::Error::Api(s)) => Ok(Some((s.code, s.message))),
            Err(e) => Err(e.into()),
        }
    }

    /// The object `name` as stored, whatever the Rust types can hold.
    pub async fn get_raw(&self, kind: Kind, name: &str) -> Result<serde_json::Value> {
        let url = format!("{}/{name}", self.url_of(kind));
        let request = http::Request::get(url).body(Vec::new())?;
        Ok(self.client.request(request).await?)
    }

    /// Whether a Warning event with `reason`, its note containing `part`, names `name`.
    pub async fn warned(&self, name: &str, reason: &str, part: &str) -> Result<bool> {
        self.has_event("Warning", name, reason, part).await
    }

    /// Whether a Normal event with `reason` names `name`.
    pub async fn told(&self, name: &str, reason: &str) -> Result<bool> {
        self.has_event("Normal", name, reason, "").await
    }

    async fn has_event(&self, type_: &str, name: &str, reason: &str, part: &str) -> Result<bool> {
        let events = self.api::<Event>().list(&ListParams::default()).await?;
        Ok(events.items.iter().any(|e| {
            e.type_.as_deref() == Some(type_)
                && e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.note.as_deref().is_some_and(|n| n.contains(part))
        }))
    }

    /// Runs kubectl of the cluster's version in this namespace; its output.
    pub fn kubectl(&self, args: &[&str]) -> Result<String> {
        let out = std::process::Command::new(crate::versions::kubectl())
            .arg(format!(
                "--kubeconfig={}",
                self.cluster.kubeconfig().display()
            ))
            .arg(format!("--namespace={}", self.name))
            .args(args)
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8(out.stdout)?)
    }
}
