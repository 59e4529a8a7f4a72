//! How many of the writes in flight wait in the API server's queues rather than being served,
//! from their answer times alone. API Priority and Fairness queues a flow's requests before it
//! rejects them, and a server short of CPU makes them wait too: the answer times grow before
//! the first 429, while a throttle says only that the limit was crossed.
//!
//! Each answer's time beyond the least that its kind of write (method, resource) took lately
//! is time it spent waiting. Those times summed over a spell, divided by the spell, are the
//! writes waiting on average over it (Little's law), whatever the writes cost to serve.

use std::time::Duration;

use http::{Method, Request};
use tokio::time::Instant;

/// How long a least answer time is remembered: between one and two of these. A server that
/// got slower for good (more tenants, a larger object) sets a new floor within a minute.
const FLOOR_SPELL: Duration = Duration::from_secs(30);
/// Kinds of writes told apart; the operator makes about ten. Answers of others are not
/// counted.
const KINDS: usize = 32;

/// A kind of write: its method and the resource it writes (with its subresource), without
/// the namespace and name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Kind(String);

impl Kind {
    pub fn of<B>(req: &Request<B>) -> Self {
        Self::from(req.method(), req.uri().path())
    }

    fn from(method: &Method, path: &str) -> Self {
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        // /api/v1 or /apis/<group>/<version>, then namespaces/<ns> or not, then
        // <resource>/<name>/<sub>.
        let version = match segments.first() {
            Some(&"apis") => 3,
            _ => 2,
        };
        let resource = segments.get(version..).unwrap_or_default();
        let resource = match resource {
            ["namespaces", _, rest @ ..] if !rest.is_empty() => rest,
            other => other,
        };
        let what = match resource {
            [resource, _name, sub, ..] => format!("{resource}/{sub}"),
            [resource, ..] => resource.to_string(),
            [] => String::new(),
        };
        Self(format!("{method} {what}"))
    }
}

/// The least answer time of one kind of write, over the current spell and the one before.
#[derive(Debug)]
struct Floor {
    kind: Kind,
    current: Duration,
    previous: Duration,
    spell_began: Instant,
}

impl Floor {
    /// Counts `took` at `now`; the floor it is measured against.
    fn answered(&mut self, took: Duration, now: Instant) -> Duration {
        if now >= self.spell_began + FLOOR_SPELL {
            self.previous = match now >= self.spell_began + 2 * FLOOR_SPELL {
                true => Duration::MAX,
                false => self.current,
            };
            (self.current, self.spell_began) = (Duration::MAX, now);
        }
        self.current = self.current.min(took);
        self.current.min(self.previous)
    }
}

/// The writes' waiting, summed since the last reading.
#[derive(Debug, Default)]
pub struct Queueing {
    floors: Vec<Floor>,
    waited: Duration,
    /// Since when `waited` counts: the earliest write answered since the last reading was
    /// sent, but not before that reading.
    since: Option<Instant>,
    last_read: Option<Instant>,
}

impl Queueing {
    /// A write of `kind` sent at `sent` was answered, and served, at `now`.
    pub fn answered(&mut self, kind: &Kind, sent: Instant, now: Instant) {
        let took = now.saturating_duration_since(sent);
        let Some(floor) = self.floor(kind, now) else {
            return;
        };
        let least = floor.answered(took, now);
        self.waited += took - least;
        let from = self.last_read.map_or(sent, |read| read.max(sent));
        self.since = Some(self.since.map_or(from, |since| since.min(from)));
    }

    fn floor(&mut self, kind: &Kind, now: Instant) -> Option<&mut Floor> {
        match self.floors.iter().position(|f| f.kind == *kind) {
            Some(i) => Some(&mut self.floors[i]),
            None if self.floors.len() < KINDS => {
                self.floors.push(Floor {
                    kind: kind.clone(),
                    current: Duration::MAX,
                    previous: Duration::MAX,
                    spell_began: now,
                });
                self.floors.last_mut()
            }
            None => None,
        }
    }

    /// The writes that waited on average since the last reading, and a new spell from `now`.
    pub fn read(&mut self, now: Instant) -> f64 {
        let waited = std::mem::take(&mut self.waited);
        let since = self.since.take();
        self.last_read = Some(now);
        match since {
            Some(since) if now > since => waited.as_secs_f64() / (now - since).as_secs_f64(),
            _ => 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn kind(m: Method, path: &str) -> String {
        Kind::from(&m, path).0
    }

    #[test]
    fn a_kind_is_the_method_and_the_resource_written() {
        assert_eq!(
            kind(Method::POST, "/api/v1/namespaces/ns/pods"),
            "POST pods"
        );
        assert_eq!(
            kind(Method::DELETE, "/api/v1/namespaces/ns/pods/web-pod-x"),
            "DELETE pods"
        );
        let status = "/apis/app.example.com/v1alpha1/namespaces/ns/podsets/web/status";
        assert_eq!(kind(Method::PATCH, status), "PATCH podsets/status");
        assert_eq!(
            kind(Method::POST, "/apis/events.k8s.io/v1/namespaces/ns/events"),
            "POST events"
        );
        assert_eq!(
            kind(
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"
            ),
            "PUT leases"
        );
        assert_eq!(
            kind(
                Method::POST,
                "/apis/authorization.k8s.io/v1/subjectaccessreviews"
            ),
            "POST subjectaccessreviews"
        );
    }

    /// Eight writes sent at once to a server that serves three at a time, 10 ms each: the
    /// answers come at 10, 20 and 30 ms; five waited, 70 ms in all over 30 ms.
    #[test]
    fn a_burst_beyond_the_servers_seats_shows_as_writes_waiting() {
        let t0 = Instant::now();
        let mut q = Queueing::default();
        for (n, after) in [(3, 10), (3, 20), (2, 30)] {
            for _ in 0..n {
                q.answered(&Kind("POST pods".into()), t0, t0 + ms(after));
            }
        }
        let waiting = q.read(t0 + ms(30));
        assert!((waiting - 70.0 / 30.0).abs() < 1e-9, "{waiting}");
        assert_eq!(q.read(t0 + ms(40)), 0.0, "nothing answered since");
    }

    /// Writes that cost different times to serve, none waiting: none counted as waiting.
    #[test]
    fn each_kind_is_measured_against_its_own_floor() {
        let t0 = Instant::now();
        let mut q = Queueing::default();
        for i in 0..10 {
            let sent = t0 + ms(10 * i);
            q.answered(&Kind("POST events".into()), sent, sent + ms(1));
            q.answered(&Kind("POST pods".into()), sent, sent + ms(6));
            q.answered(&Kind("PATCH podsets/status".into()), sent, sent + ms(3));
        }
        assert_eq!(q.read(t0 + ms(100)), 0.0);
    }

    /// A steady eight in flight on three seats, each write 10 ms: every answer takes 80/3 ms,
    /// so five wait all along. The floor was seen in a quiet moment before.
    #[test]
    fn writes_kept_waiting_all_along_are_counted_over_the_spell() {
        let t0 = Instant::now();
        let mut q = Queueing::default();
        let pods = Kind("POST pods".into());
        q.answered(&pods, t0, t0 + ms(10));
        q.read(t0 + ms(10));
        let took = Duration::from_secs_f64(0.080 / 3.0);
        // 3 answers every 10 ms, from 1 s on, each sent `took` before.
        let start = t0 + Duration::from_secs(1);
        for i in 0..30u32 {
            let answered = start + ms(10) * (i / 3 + 1);
            q.answered(&pods, answered - took, answered);
        }
        let waiting = q.read(start + ms(100));
        // 30 x 16.7 ms waited over 116.7 ms, from when the first of them was sent: 4.3 of
        // the 5 waiting, the spell taking in the first's own wait.
        assert!((4.28..4.29).contains(&waiting), "{waiting}");
    }

    #[test]
    fn a_floor_is_forgotten_after_two_spells() {
        let t0 = Instant::now();
        let mut f = Floor {
            kind: Kind(String::new()),
            current: Duration::MAX,
            previous: Duration::MAX,
            spell_began: t0,
        };
        assert_eq!(f.answered(ms(5), t0), ms(5));
        assert_eq!(f.answered(ms(9), t0 + FLOOR_SPELL), ms(5), "one spell back");
        assert_eq!(f.answered(ms(8), t0 + 2 * FLOOR_SPELL), ms(8));
        assert_eq!(f.answered(ms(7), t0 + 5 * FLOOR_SPELL), ms(7), "all gone");
    }
}
