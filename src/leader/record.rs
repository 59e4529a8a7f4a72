//! The decisions of leader election, without I/O: client-go's leaderelection semantics.
//!
//! - A lease is timed from when **this** instance observed its record change (its own clock,
//!   monotonic), never from the holder's `renewTime`: clocks differ between machines, and a
//!   record that reads the same twice (a relist, a repeated GET) is the same observation.
//!   Unlike client-go, a record also changed when its `resourceVersion` did: a holder whose
//!   clock stepped back can write the very record it wrote before, a renewal all the same.
//! - Whoever writes the Lease writes it over the `resourceVersion` it read, so of two writers
//!   one wins and the other learns it lost (409), whatever the order their writes arrive in.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use tokio::time::Instant;

/// The Lease as this instance last saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    pub spec: LeaseSpec,
    /// The `resourceVersion` it was read at: a write goes over it.
    pub version: String,
    /// When the record was first seen as it is now.
    pub at: Instant,
}

impl Observed {
    /// What this instance knows after reading `spec` at `version` at `now`: the time of the
    /// observation moves only when the record changed, or was written again.
    pub fn seen(before: Option<&Observed>, spec: LeaseSpec, version: String, now: Instant) -> Self {
        let at = match before {
            Some(b) if b.spec == spec && b.version == version => b.at,
            _ => now,
        };
        Self { spec, version, at }
    }

    pub fn holder(&self) -> &str {
        self.spec.holder_identity.as_deref().unwrap_or_default()
    }

    /// When the record expires for an instance that observed it at `self.at`, whose own
    /// lease is `own`: after the duration the record gives, as client-go times it, and never
    /// before `own`. A record someone else wrote with a shorter lease (another deployment, a
    /// person) does not end this deployment's holder sooner: that holder acts until its own
    /// renew deadline after its last renewal, which came before that write (found by seed
    /// 318721: two leaders at once, after a Lease written for 2 s over a 15 s one).
    fn expiry(&self, own: Duration) -> Instant {
        let seconds = self.spec.lease_duration_seconds.map(|s| s.max(0) as u64);
        self.at + seconds.map_or(own, Duration::from_secs).max(own)
    }
}

/// Whether `version` is older than `than`. Versions are opaque to clients, but the API
/// server's are etcd revisions, which grow: compared as numbers when both are, and otherwise
/// never older (the record read is taken as it comes).
pub fn is_older(version: &str, than: &str) -> bool {
    match (version.parse::<u64>(), than.parse::<u64>()) {
        (Ok(v), Ok(t)) => v < t,
        _ => false,
    }
}

/// What to do with the Lease, given what was observed of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// There is no Lease: create it, naming this instance.
    Create,
    /// Free or expired: write it over the observed version, naming this instance.
    Take,
    /// This instance holds it, by the last write of it this instance saw land: write the
    /// renewal over the observed version.
    Renew,
    /// The record names this instance, but no write of it this instance saw land made it: a
    /// create of its own, held at the server past its answer (or sent by the incarnation
    /// before), may have landed after a person deleted the Lease under a holder that acts on
    /// until its renew deadline. Renew it, and lead only then: a lease duration after it was
    /// first seen.
    Reclaim(Instant),
    /// Someone else holds it until then (as this instance times it).
    WaitUntil(Instant),
}

/// A missing Lease is created at once; its creator leads only a lease duration later (see
/// `LeaderElection::acquire`). `written` is the `resourceVersion` of the last write of the
/// Lease this instance saw land.
pub fn decide(
    observed: Option<&Observed>,
    me: &str,
    written: Option<&str>,
    duration: Duration,
    now: Instant,
) -> Decision {
    let Some(observed) = observed else {
        return Decision::Create;
    };
    match observed.holder() {
        holder if holder == me && written == Some(observed.version.as_str()) => Decision::Renew,
        holder if holder == me => Decision::Reclaim(observed.at + duration),
        "" => Decision::Take,
        _ => match observed.expiry(duration) {
            expiry if expiry <= now => Decision::Take,
            expiry => Decision::WaitUntil(expiry),
        },
    }
}

/// The record naming `me` as holder, renewed `now`: a renewal keeps the acquire time and
/// transitions, a takeover starts its own and counts one transition more.
pub fn claim(
    before: Option<&LeaseSpec>,
    me: &str,
    duration: Duration,
    now: Timestamp,
) -> LeaseSpec {
    let mine = before.and_then(|b| b.holder_identity.as_deref()) == Some(me);
    let transitions = before.and_then(|b| b.lease_transitions).unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(me.to_string()),
        lease_duration_seconds: Some(duration.as_secs().max(1) as i32),
        acquire_time: match mine {
            true => before.and_then(|b| b.acquire_time.clone()),
            false => Some(MicroTime(now)),
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(match (mine, before) {
            (true, _) | (false, None) => transitions,
            (false, Some(_)) => transitions + 1,
        }),
        ..before.cloned().unwrap_or_default()
    }
}

/// The record a leader leaves when it stops: no holder, so a standby takes over at once (as
/// client-go's ReleaseOnCancel writes it).
pub fn released(before: &LeaseSpec, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        ..before.clone()
    }
}

/// How a lease of a given duration is kept.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    /// The lease duration a standby waits from its observation of the last change.
    pub lease: Duration,
    /// How often the holder renews: a third of the lease, so that one late or lost renewal
    /// never lets it lapse.
    pub renew_every: Duration,
    /// How long the holder acts after the last renewal it sent that landed: two thirds of the
    /// lease, so a third of the lease separates a holder that stops from a standby that takes
    /// over (client-go's 10 s of 15).
    pub renew_deadline: Duration,
    /// How long a failed Lease request waits before the next: five tries within the deadline
    /// (client-go's 2 s of its 10).
    pub retry_period: Duration,
}

pub fn timing(duration: Duration) -> Timing {
    let lease = Duration::from_secs(duration.as_secs().max(2));
    let renew_deadline = lease * 2 / 3;
    Timing {
        lease,
        renew_every: lease / 3,
        renew_deadline,
        retry_period: renew_deadline / 5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_numerically_smaller_version_is_older() {
        assert!(is_older("99", "104"));
        assert!(!is_older("104", "104"));
        assert!(!is_older("105", "104"));
        assert!(!is_older("abc", "104"), "opaque versions are never older");
    }

    const LEASE: Duration = Duration::from_secs(15);

    fn spec(holder: &str, renewed: Timestamp) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()).filter(|h: &String| !h.is_empty()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(3),
            ..Default::default()
        }
    }

    fn observed(spec: LeaseSpec, at: Instant) -> Observed {
        Observed::seen(None, spec, "7".into(), at)
    }

    /// Another holder's record is waited out for the lease it gives, and never for less
    /// than this instance's own: a shorter one does not end this deployment's leader sooner.
    #[test]
    fn another_holders_lease_is_waited_out_for_its_duration_and_at_least_ours() {
        let now = Instant::now();
        for (given, waited) in [(60, 60), (2, 15)] {
            let mut other = spec("someone-else", Timestamp::now());
            other.lease_duration_seconds = Some(given);
            let seen = observed(other, now);
            let wait = Decision::WaitUntil(now + Duration::from_secs(waited));
            assert_eq!(
                decide(Some(&seen), "me", None, LEASE, now),
                wait,
                "{given} s given"
            );
        }
    }

    /// The holder's renewTime says an hour ago (its clock, or a record written long ago and
    /// only now seen): a standby still waits a whole lease from when it saw it.
    #[test]
    fn a_lease_is_timed_from_its_observation_not_the_holders_timestamps() {
        let now = Instant::now();
        let an_hour_ago = Timestamp::now() - jiff::SignedDuration::from_hours(1);
        let seen = observed(spec("other", an_hour_ago), now);
        assert_eq!(
            decide(Some(&seen), "me", None, LEASE, now),
            Decision::WaitUntil(now + LEASE)
        );
        let later = now + LEASE - Duration::from_millis(1);
        assert_eq!(
            decide(Some(&seen), "me", None, LEASE, later),
            Decision::WaitUntil(now + LEASE)
        );
        assert_eq!(
            decide(Some(&seen), "me", None, LEASE, now + LEASE),
            Decision::Take
        );
    }

    /// The same record read again (a relist, a poll) is not a renewal: the expiry stays; a
    /// changed one (a renewal, whatever its timestamps say) starts it again.
    #[test]
    fn only_a_changed_record_moves_the_observation() {
        let t0 = Instant::now();
        let record = spec("other", Timestamp::now());
        let first = observed(record.clone(), t0);
        let again = Observed::seen(Some(&first), record.clone(), "7".into(), t0 + LEASE);
        assert_eq!(again.at, t0);
        assert_eq!(
            decide(Some(&again), "me", None, LEASE, t0 + LEASE),
            Decision::Take
        );
        // Sim seed 1007716: the holder's clock stepped back 6 s, so its renewal wrote the
        // renewTime it wrote 6 s before; client-go, comparing records only, takes that for
        // no renewal and takes the lease from a live holder. A new resourceVersion is a write.
        let rewritten = Observed::seen(Some(&first), record.clone(), "8".into(), t0 + LEASE);
        assert_eq!(rewritten.at, t0 + LEASE);
        let renewed = LeaseSpec {
            renew_time: Some(MicroTime(
                Timestamp::now() - jiff::SignedDuration::from_hours(5),
            )),
            ..record
        };
        let moved = Observed::seen(Some(&again), renewed, "9".into(), t0 + LEASE);
        assert_eq!(moved.at, t0 + LEASE);
        assert_eq!(moved.version, "9");
    }

    #[test]
    fn a_missing_lease_is_created_a_free_one_taken_and_ours_renewed() {
        let now = Instant::now();
        assert_eq!(decide(None, "me", None, LEASE, now), Decision::Create);
        let free = observed(spec("", Timestamp::now()), now);
        assert_eq!(decide(Some(&free), "me", None, LEASE, now), Decision::Take);
        let ours = observed(spec("me", Timestamp::now()), now);
        assert_eq!(
            decide(Some(&ours), "me", Some("7"), LEASE, now),
            Decision::Renew
        );
    }

    /// Found by the search (seed 6710754656613301520): a create held at the server past its
    /// answer landed after the Lease was deleted again under another holder. A record naming
    /// this instance that is not its last write it saw land is led a lease duration after it
    /// was first seen, whenever it is looked at again.
    #[test]
    fn a_record_naming_this_instance_but_not_its_own_landed_write_is_led_a_lease_later() {
        let t0 = Instant::now();
        let ours = observed(spec("me", Timestamp::now()), t0);
        for written in [None, Some("6")] {
            for now in [t0, t0 + LEASE / 2] {
                assert_eq!(
                    decide(Some(&ours), "me", written, LEASE, now),
                    Decision::Reclaim(t0 + LEASE)
                );
            }
        }
    }

    #[test]
    fn a_claim_counts_transitions_and_keeps_the_acquire_time_of_a_renewal() {
        let t1 = Timestamp::from_second(1_000).unwrap();
        let t2 = Timestamp::from_second(2_000).unwrap();
        let theirs = spec("other", t1);
        let taken = claim(Some(&theirs), "me", LEASE, t2);
        assert_eq!(taken.holder_identity.as_deref(), Some("me"));
        assert_eq!(taken.lease_transitions, Some(4));
        assert_eq!(taken.acquire_time, Some(MicroTime(t2)));
        let t3 = Timestamp::from_second(3_000).unwrap();
        let renewed = claim(Some(&taken), "me", LEASE, t3);
        assert_eq!(renewed.lease_transitions, Some(4));
        assert_eq!(renewed.acquire_time, Some(MicroTime(t2)));
        assert_eq!(renewed.renew_time, Some(MicroTime(t3)));
        assert_eq!(claim(None, "me", LEASE, t3).lease_transitions, Some(0));
        let gone = released(&renewed, t3);
        assert_eq!(gone.holder_identity, None);
        assert_eq!(gone.lease_transitions, Some(4));
    }

    #[test]
    fn a_leader_renews_then_steps_down_before_its_lease_can_expire() {
        for seconds in [1, 2, 3, 8, 15] {
            let t = timing(Duration::from_secs(seconds));
            assert!(t.renew_every < t.renew_deadline, "{t:?}");
            assert!(t.renew_deadline < t.lease, "{t:?}");
            assert!(t.retry_period > Duration::ZERO, "{t:?}");
        }
        assert_eq!(
            timing(LEASE),
            Timing {
                lease: LEASE,
                renew_every: Duration::from_secs(5),
                renew_deadline: Duration::from_secs(10),
                retry_period: Duration::from_secs(2),
            }
        );
    }
}
