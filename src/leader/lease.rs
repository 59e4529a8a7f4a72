//! The Lease as one instance reads, writes and watches it: every observation recorded with
//! when it was made (never over a newer one), every write over the version observed.

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{Config as WatchConfig, Event, watcher};
use tokio::time::{Instant, timeout};

use super::record::{self, Observed};
use super::{Holder, LeaderElection, Wrote};

impl LeaderElection {
    /// Writes `record` of the Lease as last read, over its version, while it names this
    /// instance. A conflict is read again and written again only if the Lease still names
    /// this instance (someone changed something else, or a write of ours landed though its
    /// answer was lost). A deleted Lease is lost: whoever creates it again waits a lease
    /// duration.
    pub(super) async fn rewrite(
        &self,
        record: impl Fn(&LeaseSpec) -> LeaseSpec,
    ) -> kube::Result<Wrote> {
        loop {
            let Some(mine) = self.observed.lock().clone() else {
                return Ok(Wrote::Lost);
            };
            if mine.holder() != self.identity {
                return Ok(Wrote::Lost);
            }
            match self.write(Some(&mine), record(&mine.spec)).await? {
                Wrote::Landed(sent) => return Ok(Wrote::Landed(sent)),
                Wrote::Lost => {
                    self.read().await?;
                }
            }
        }
    }

    /// Who a fresh read says holds the Lease (a watch event can lag behind our own writes).
    pub(super) async fn holder_now(&self) -> Holder {
        match timeout(self.timing.retry_period, self.read()).await {
            Ok(Ok(Some(o))) if o.holder() == self.identity => Holder::Me,
            Ok(Ok(Some(_))) => Holder::Other,
            Ok(Ok(None)) => Holder::Nobody,
            // The renew deadline decides.
            _ => Holder::Unknown,
        }
    }

    /// GETs the Lease and records the observation; `None` if there is none.
    pub(super) async fn read(&self) -> kube::Result<Option<Observed>> {
        let lease = self.leases.get_opt(&self.name).await?;
        Ok(self.observe(lease, Instant::now()))
    }

    pub(super) fn observed_holder_is_me(&self) -> bool {
        let observed = self.observed.lock();
        observed
            .as_ref()
            .is_some_and(|o| o.holder() == self.identity)
    }

    /// Records `lease` as read at `now`, unless what is recorded is newer: a watch event can
    /// come after the answer of a later write, and a write over its older version would be
    /// refused (409), costing a read and a write more before the renew deadline.
    pub(super) fn observe(&self, lease: Option<Lease>, now: Instant) -> Option<Observed> {
        let mut observed = self.observed.lock();
        let version = lease
            .as_ref()
            .and_then(|l| l.metadata.resource_version.as_deref());
        if let (Some(version), Some(o)) = (version, observed.as_ref())
            && record::is_older(version, &o.version)
        {
            return observed.clone();
        }
        *observed = lease.map(|l| {
            let version = l.metadata.resource_version.unwrap_or_default();
            Observed::seen(observed.as_ref(), l.spec.unwrap_or_default(), version, now)
        });
        observed.clone()
    }

    /// Creates the Lease (nothing observed) or replaces it over the observed version. A write
    /// that lands says when it was sent: its renew deadline runs from then.
    pub(super) async fn write(
        &self,
        over: Option<&Observed>,
        spec: LeaseSpec,
    ) -> kube::Result<Wrote> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                resource_version: over.map(|o| o.version.clone()),
                ..Default::default()
            },
            spec: Some(spec),
        };
        let sending = self.fence.sending();
        let params = PostParams::default();
        let written = match over {
            None => self.leases.create(&params, &lease).await,
            Some(_) => self.leases.replace(&self.name, &params, &lease).await,
        };
        match written {
            Ok(lease) => {
                *self.written.lock() = lease.metadata.resource_version.clone();
                self.observe(Some(lease), Instant::now());
                Ok(Wrote::Landed(self.fence.sent_at(sending)))
            }
            // A 404 on a create is the namespace's, not the Lease's: see `needs_a_person`.
            Err(kube::Error::Api(s)) if s.code == 409 || (s.code == 404 && over.is_some()) => {
                Ok(Wrote::Lost)
            }
            Err(e) => Err(e),
        }
    }

    /// A wake-up each time the Lease's record changes or the Lease goes, as its watch shows it
    /// (a relist that shows the same record is no change).
    pub(super) fn changes(&self) -> impl Stream<Item = ()> + '_ {
        let config = WatchConfig::default().fields(&format!("metadata.name={}", self.name));
        // Whether the relist under way has shown the Lease.
        let mut listed = false;
        watcher(self.leases.clone(), config)
            .default_backoff()
            .filter_map(move |event| {
                let seen = match event {
                    Ok(Event::Apply(lease)) => Some(Some(lease)),
                    Ok(Event::InitApply(lease)) => {
                        listed = true;
                        Some(Some(lease))
                    }
                    Ok(Event::Delete(_)) => Some(None),
                    Ok(Event::Init) => {
                        listed = false;
                        None
                    }
                    Ok(Event::InitDone) => (!listed).then_some(None),
                    Err(_) => None,
                };
                let changed = seen.is_some_and(|lease| {
                    let before = self.observed.lock().clone().map(|b| b.spec);
                    self.observe(lease, Instant::now()).map(|o| o.spec) != before
                });
                async move { changed.then_some(()) }
            })
    }
}
