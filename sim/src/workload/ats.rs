//! What the users do with Ats: the book's, written at v1alpha1 (`job-N`), and v1beta1's
//! (`cron-N`, drawn by [`BetaAt::draw`]), each due before, during or after the faults, and
//! then now and then edited at v1alpha1, its pod deleted, unlabelled or ungated, the At
//! deleted, or held by another controller's finalizer.

use std::time::Duration;

use super::{Action, BetaAt, hold, policy};
use crate::model::resource::Kind;

type Plan = Vec<(Duration, Action)>;

/// Which Ats a user writes: the book's (`job-N`, one to three, at v1alpha1, a `sh -c` command
/// that succeeds or fails) or v1beta1's (`cron-N`, none to two, with what v1alpha1 cannot say:
/// see [`BetaAt`]).
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Version {
    Book,
    Beta,
}

/// The Ats of `version`, and what happens to them.
pub(super) fn draw(
    rng: &mut fastrand::Rng,
    plan: &mut Plan,
    (span, version): (Duration, Version),
    at: &impl Fn(&mut fastrand::Rng, f64, f64) -> Duration,
    ns: &impl Fn(&mut fastrand::Rng) -> &'static str,
) {
    let limit = span.as_secs() as i64;
    let (count, prefix) = match version {
        Version::Book => (rng.usize(1..=3), "job"),
        Version::Beta => (rng.usize(0..=2), "cron"),
    };
    for i in 0..count {
        let (ns, name) = (ns(rng), format!("{prefix}-{i}"));
        let due_in = rng.i64(-60..limit / 2);
        let (when, create) = match version {
            Version::Book => {
                let command = match rng.f64() {
                    x if x < 0.2 => "echo no; exit 3",
                    _ => "echo YAY",
                };
                let name = name.clone();
                let command = command.to_string();
                let create = Action::CreateAt {
                    ns,
                    name,
                    due_in,
                    command,
                };
                (at(rng, 0.0, 0.4), create)
            }
            Version::Beta => {
                let beta = Box::new(BetaAt::draw(rng, due_in));
                let name = name.clone();
                let create = Action::CreateBetaAt { ns, name, at: beta };
                (at(rng, 0.0, 0.4), create)
            }
        };
        plan.push((when, create));
        let keep_schedule = version == Version::Beta;
        follow_ups(rng, plan, (ns, &name, i), (when, due_in), keep_schedule, at);
    }
}

/// What may happen to At `name` (the `i`-th of its kind) of namespace `ns`, made at `when`
/// and due `due_in` seconds later. Its v1alpha1 edits keep its schedule (and time zone) in
/// one of two if `keep_schedule`.
fn follow_ups(
    rng: &mut fastrand::Rng,
    plan: &mut Plan,
    (ns, name, i): (&'static str, &str, usize),
    (when, due_in): (Duration, i64),
    keep_schedule: bool,
    at: &impl Fn(&mut fastrand::Rng, f64, f64) -> Duration,
) {
    let after_due = when + Duration::from_secs(due_in.max(0) as u64);
    if rng.f64() < 0.15 {
        // Around the old due time, so that copies of either spec meet.
        let near = (after_due + Duration::from_millis(rng.u64(0..3000)))
            .saturating_sub(Duration::from_millis(1500));
        let due_in = rng.i64(-5..60);
        let edit = Action::EditAt {
            ns,
            at: name.to_string(),
            due_in: (!keep_schedule || rng.bool()).then_some(due_in),
            command: format!("echo EDITED-{i}"),
        };
        plan.push((near, edit));
    }
    if rng.f64() < 0.15 {
        let later = after_due + Duration::from_millis(rng.u64(0..4000));
        let at = name.to_string();
        plan.push((later, Action::DeleteAtPod { ns, at }));
    }
    if rng.f64() < 0.1 {
        let later = after_due + Duration::from_millis(rng.u64(500..2500));
        let at = name.to_string();
        plan.push((later, Action::UnlabelAtPod { ns, at }));
    }
    if rng.f64() < 0.05 {
        // About when the operator makes its pod, before or after it records it.
        let near = after_due + Duration::from_millis(rng.u64(0..1500));
        let at = name.to_string();
        plan.push((near, Action::UngateAtPod { ns, at }));
    }
    if rng.f64() < 0.1 {
        // Before it is due, or about when it runs.
        let when = when + Duration::from_millis(rng.u64(0..(due_in.max(1) as u64 + 4) * 1000));
        let (at, policy) = (name.to_string(), policy(rng));
        plan.push((when, Action::DeleteAt { ns, at, policy }));
    }
    hold(rng, plan, Kind::At, ns, name, at);
}
