//! Scenario failover's reading of a leader-election Lease: who holds it, which candidate that
//! is, and a watch that tells when it changes hands.

use std::time::Instant;

use anyhow::{Context, Result, bail};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

/// The index of the live candidate holding the Lease as `holder`, given each candidate's name
/// (None: not known yet) and whether it is live; None while nobody, or a dead one, holds it.
pub fn whose(known: &[(Option<String>, bool)], holder: &str) -> Option<usize> {
    if holder.is_empty() {
        return None;
    }
    if let Some(i) = known
        .iter()
        .position(|(id, _)| id.as_deref() == Some(holder))
    {
        return known[i].1.then_some(i);
    }
    let mut unnamed = (0..known.len()).filter(|&i| known[i].0.is_none() && known[i].1);
    match (unnamed.next(), unnamed.next()) {
        (Some(i), None) => Some(i),
        _ => None,
    }
}

/// Who holds `lease` ("" for nobody, or no Lease).
pub fn holder_of(lease: Option<&Lease>) -> String {
    let spec = lease.and_then(|l| l.spec.as_ref());
    spec.and_then(|s| s.holder_identity.clone())
        .unwrap_or_default()
}

/// A Lease as a watch sees it: when its holder changes.
pub struct LeaseWatch {
    events: BoxStream<'static, Result<Lease, watcher::Error>>,
    holder: String,
}

impl LeaseWatch {
    /// Watches the Lease, which `holder` holds; returns once the watch's list showed it, so
    /// that every change from then on is seen.
    pub async fn start(
        client: &Client,
        (namespace, name): (&str, &str),
        holder: String,
    ) -> Result<Self> {
        let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut events = watcher(leases, config)
            .default_backoff()
            .applied_objects()
            .boxed();
        let first = events.try_next().await?.context("the Lease watch ended")?;
        if holder_of(Some(&first)) != holder {
            bail!("the Lease changed hands before the measurement");
        }
        Ok(Self { events, holder })
    }

    /// When the holder first changed, and whether to nobody (a release) rather than to
    /// another candidate.
    pub async fn changed(&mut self) -> Result<(Instant, bool)> {
        while let Some(lease) = self.events.try_next().await? {
            let now = holder_of(Some(&lease));
            if now != self.holder {
                return Ok((Instant::now(), now.is_empty()));
            }
        }
        bail!("the Lease watch ended")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_is_a_live_candidate_by_name_or_the_one_unnamed() {
        let (a, b) = (Some("a".to_string()), Some("b".to_string()));
        let named = [(a.clone(), false), (b.clone(), true)];
        assert_eq!(whose(&named, "b"), Some(1));
        // A dead holder's lease has not expired yet; nobody holds it.
        assert_eq!(whose(&named, "a"), None);
        assert_eq!(whose(&named, ""), None);
        // kube-controller-manager: the holder is the one live candidate not named.
        let learning = [(a.clone(), false), (None, true)];
        assert_eq!(whose(&learning, "host_1234"), Some(1));
        assert_eq!(whose(&learning, "a"), None);
        let two_unnamed = [(None, true), (None, true)];
        assert_eq!(whose(&two_unnamed, "host_1234"), None);
        let dead_unnamed = [(None, false), (b, true)];
        assert_eq!(whose(&dead_unnamed, "host_1234"), None);
    }
}
