//! The leader election against an in-memory Lease API that keeps resourceVersions as the
//! API server does (a write over a stale one is a 409), and fails requests on demand. Its
//! watches never deliver: what is tested here holds without them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::Method;

use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

mod lease_api;

use super::*;
use crate::fence::suspended::Suspended;
use lease_api::{ApiState, api};

const NAME: &str = "lead";
const LEASE: Duration = Duration::from_secs(3);

fn election(state: &ApiState, me: &str) -> LeaderElection {
    election_with(state, me, Fence::closed())
}

fn election_with(state: &ApiState, me: &str, fence: Fence) -> LeaderElection {
    let election = Election {
        namespace: "ns".into(),
        name: NAME.into(),
        duration: LEASE,
    };
    LeaderElection::new(
        api(state.clone()),
        &election,
        me,
        fence,
        Default::default(),
        Default::default(),
    )
}

fn holding(holder: &str, renewed: jiff::Timestamp) -> Value {
    json!({"holderIdentity": holder, "leaseDurationSeconds": LEASE.as_secs(),
        "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string(), "leaseTransitions": 0})
}

async fn acquire_within(election: &LeaderElection, within: Duration) -> bool {
    let shutdown = CancellationToken::new();
    tokio::time::timeout(within, election.acquire(&shutdown))
        .await
        .unwrap_or(false)
}

fn puts(state: &ApiState) -> usize {
    let s = state.lock();
    s.seen.iter().filter(|(m, _)| *m == Method::PUT).count()
}

/// Issue 26, fault 7: a missing Lease cannot say who held it last; its creator keeps it
/// renewed, with its fence closed, for a lease duration, and only then leads.
#[tokio::test(start_paused = true)]
async fn a_missing_lease_is_created_and_led_a_lease_duration_later() {
    let state = ApiState::default();
    let me = election(&state, "me");
    assert!(!me.fence.is_open());
    let began = Instant::now();
    assert!(acquire_within(&me, LEASE * 2).await);
    assert!(began.elapsed() >= LEASE, "led after {:?}", began.elapsed());
    assert_eq!(state.lock().holder().as_deref(), Some("me"));
    assert!(
        puts(&state) >= 2,
        "renewed while waiting: {:?}",
        state.lock().seen
    );
    assert!(me.fence.is_open());
}

/// Issue 19, item 6: a standby whose reads fail (an API server restarting, a leader's release
/// under way) keeps trying and takes the lease once it can.
#[tokio::test(start_paused = true)]
async fn a_standby_whose_reads_fail_keeps_trying_and_takes_the_lease() {
    let state = ApiState::default();
    state.lock().fail = 3;
    let me = election(&state, "me");
    assert!(acquire_within(&me, Duration::from_secs(10)).await);
    assert_eq!(state.lock().holder().as_deref(), Some("me"));
}

/// Issue 19, item 5: the holder's renewTime says an hour ago (its clock, or a record written
/// long ago): a standby still waits a whole lease from when it first saw the record.
#[tokio::test(start_paused = true)]
async fn a_standby_times_the_lease_from_its_own_observation() {
    let state = ApiState::default();
    let an_hour_ago = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1);
    state.lock().write(holding("other", an_hour_ago));
    let me = election(&state, "me");
    let began = Instant::now();
    assert!(acquire_within(&me, LEASE * 3).await);
    assert!(
        began.elapsed() >= LEASE,
        "taken after {:?}",
        began.elapsed()
    );
    assert_eq!(state.lock().holder().as_deref(), Some("me"));
}

/// Issue 19, item 3, and issue 26, fault 7: a leader whose Lease was deleted steps down at
/// its next renewal, and creates it again like anyone else; a standby creates a deleted
/// Lease at once, and leads a lease duration later.
#[tokio::test(start_paused = true)]
async fn a_deleted_lease_is_created_again_and_led_a_lease_duration_later() {
    let state = ApiState::default();
    let leader = election(&state, "me");
    assert!(acquire_within(&leader, LEASE * 2).await);
    state.lock().lease = None;
    let held = tokio::time::timeout(LEASE, leader.hold());
    assert!(held.await.is_ok(), "the leader did not step down");
    assert!(!leader.fence.is_open());
    assert!(acquire_within(&leader, LEASE * 2).await);
    assert_eq!(state.lock().holder().as_deref(), Some("me"));

    let standby = election(&state, "standby");
    let waiting = tokio::spawn(async move {
        let deleted = Instant::now() + Duration::from_millis(300);
        acquire_within(&standby, LEASE * 3).await && Instant::now() >= deleted + LEASE
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    state.lock().lease = None;
    assert!(waiting.await.unwrap(), "the standby led too soon or never");
    assert_eq!(state.lock().holder().as_deref(), Some("standby"));
}

/// Issue 19, item 4: a leader that learns of another holder only when its renewal is refused
/// steps down, closes its fence, and its release leaves the other holder in place.
#[tokio::test(start_paused = true)]
async fn a_leader_never_overwrites_another_holder() {
    let state = ApiState::default();
    let me = election(&state, "me");
    assert!(acquire_within(&me, LEASE * 2).await);
    let before = puts(&state);
    state
        .lock()
        .write(holding("usurper", jiff::Timestamp::now()));
    let stepped_down = tokio::time::timeout(LEASE, me.hold()).await;
    assert!(stepped_down.is_ok(), "still holding");
    assert!(!me.fence.is_open());
    me.release().await;
    assert_eq!(state.lock().holder().as_deref(), Some("usurper"));
    // The renewal that met the 409 only: no write after it.
    assert!(puts(&state) - before <= 1, "{:?}", state.lock().seen);
}

/// The leader renews every third of the lease, over the version it last wrote, and a
/// renewal that cannot land closes the fence by the renew deadline.
#[tokio::test(start_paused = true)]
async fn renewals_come_every_third_of_the_lease_and_the_fence_closes_without_them() {
    let state = ApiState::default();
    let me = election(&state, "me");
    assert!(acquire_within(&me, LEASE * 2).await);
    let before = puts(&state);
    let held = tokio::time::timeout(LEASE * 2, me.hold()).await;
    assert!(held.is_err(), "stepped down while renewals landed");
    let renewals = puts(&state) - before;
    assert!(
        (5..=7).contains(&renewals),
        "{renewals} renewals in two leases"
    );
    assert!(me.fence.is_open());

    state.lock().fail = usize::MAX;
    let began = Instant::now();
    tokio::time::timeout(LEASE * 2, me.hold())
        .await
        .expect("stepped down");
    let timing = record::timing(LEASE);
    assert!(began.elapsed() <= timing.renew_deadline + Duration::from_millis(500));
    assert!(!me.fence.is_open());
}

/// Found by the search (seed 6710754656613301520): a record naming this instance that no
/// write of it this instance saw land made (the container before it in the pod, or its own
/// create held at the server past its answer) is renewed at once and led a lease duration
/// later; one that is its own last write it saw land is led again at once.
#[tokio::test(start_paused = true)]
async fn a_record_naming_this_instance_is_led_at_once_only_if_it_saw_its_write_land() {
    let state = ApiState::default();
    state.lock().write(holding("me", jiff::Timestamp::now()));
    let me = election(&state, "me");
    let began = Instant::now();
    assert!(acquire_within(&me, LEASE * 2).await);
    assert!(began.elapsed() >= LEASE, "led after {:?}", began.elapsed());
    assert!(
        puts(&state) >= 2,
        "renewed while waiting: {:?}",
        state.lock().seen
    );

    state.lock().fail = usize::MAX;
    tokio::time::timeout(LEASE * 2, me.hold())
        .await
        .expect("stepped down");
    state.lock().fail = 0;
    let again = Instant::now();
    assert!(acquire_within(&me, LEASE).await);
    assert!(
        again.elapsed() < LEASE / 2,
        "led again after {:?}",
        again.elapsed()
    );
}

/// Found by the search (seed 3894941002268962771): a create of the Lease held at the server
/// may land after a person deleted the Lease under its holder, which acts on until its renew
/// deadline. Its creator leads a lease duration after the create's answer, by when it surely
/// landed, not after its send: whether the hold outlasted the renew deadline (the wait was
/// then over at once, and the Lease naming the creator was taken for its own renewal) or not.
#[tokio::test(start_paused = true)]
async fn a_create_of_the_lease_held_at_the_server_is_led_a_lease_duration_after_its_answer() {
    let timing = record::timing(LEASE);
    let past_the_deadline = timing.renew_deadline + Duration::from_millis(500);
    for held in [past_the_deadline, timing.renew_deadline / 2] {
        let state = ApiState::default();
        state.lock().hold_create = held;
        let me = election(&state, "me");
        let began = Instant::now();
        assert!(acquire_within(&me, LEASE * 4).await);
        let led = began.elapsed();
        assert!(led >= held + LEASE, "held {held:?}, led after {led:?}");
    }
}

/// The in-cluster rolling upgrade once went leaderless for a whole lease: a renewal that
/// landed but whose answer the leader never saw (the term ended while it was in flight)
/// left the leader with a stale version, and its release met a 409 and gave up. Still
/// named holder, it reads the Lease again and releases it.
#[tokio::test(start_paused = true)]
async fn a_release_over_a_renewal_whose_answer_was_lost_still_releases() {
    let state = ApiState::default();
    let me = election(&state, "me");
    assert!(acquire_within(&me, LEASE * 2).await);
    state.lock().write(holding("me", jiff::Timestamp::now()));
    me.release().await;
    let holder = state.lock().holder();
    assert_eq!(holder, None, "{:?}", state.lock().seen);
}

/// A write of the term still being answered when the controllers stop lands before the
/// release, not after a successor acted: the release waits for it, then hands over at once.
/// One dropped unanswered may land any time: the Lease is left to expire.
#[tokio::test(start_paused = true)]
async fn a_release_waits_for_writes_in_flight_and_skips_after_one_was_dropped() {
    let state = ApiState::default();
    let me = Arc::new(election(&state, "me"));
    assert!(acquire_within(&me, LEASE * 2).await);
    let in_flight = me.fence.let_through();
    let releasing = tokio::spawn({
        let me = me.clone();
        async move { me.release().await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        state.lock().holder().as_deref(),
        Some("me"),
        "released too soon"
    );
    in_flight.answered();
    releasing.await.unwrap();
    assert_eq!(state.lock().holder(), None);

    assert!(acquire_within(&me, LEASE * 2).await);
    drop(me.fence.let_through());
    me.release().await;
    assert_eq!(state.lock().holder().as_deref(), Some("me"));
}

/// A leader whose host's suspends are told by the returned counter (milliseconds), holding.
async fn leading_with_suspends(state: &ApiState) -> (LeaderElection, Arc<AtomicU64>) {
    let asleep = Arc::new(AtomicU64::new(0));
    let told = asleep.clone();
    let suspended = Suspended::new(move || Duration::from_millis(told.load(Ordering::SeqCst)));
    let me = election_with(state, "me", Fence::counting(suspended));
    assert!(acquire_within(&me, LEASE * 2).await);
    assert!(me.fence.is_open());
    (me, asleep)
}

/// Issue 45, fault 11: the host was suspended for a lease duration (its monotonic clock did
/// not move, the standbys' clocks did): on waking, the fence is closed at once.
#[tokio::test(start_paused = true)]
async fn a_leader_whose_host_was_suspended_past_its_renew_deadline_is_fenced_on_waking() {
    let state = ApiState::default();
    let (me, asleep) = leading_with_suspends(&state).await;
    asleep.fetch_add(LEASE.as_millis() as u64, Ordering::SeqCst);
    assert!(!me.fence.is_open(), "writes may leave after the suspend");
    assert!(me.fence.deadline().unwrap() <= Instant::now());
}

/// Issue 45, fault 11: a renewal in flight while the host slept opens the fence only for what
/// was left of its renew deadline, counted with the sleep: here nothing, so the leader steps
/// down instead of acting on a lease a standby may have taken meanwhile.
#[tokio::test(start_paused = true)]
async fn a_renewal_answered_after_a_suspend_counts_the_suspend() {
    let state = ApiState::default();
    let (me, asleep) = leading_with_suspends(&state).await;
    let renew_deadline = me.timing.renew_deadline.as_millis() as u64;
    state.lock().on_put = Some(Box::new(move || {
        asleep.fetch_add(renew_deadline, Ordering::SeqCst);
    }));
    let held = tokio::time::timeout(LEASE, me.hold()).await;
    assert!(
        held.is_ok(),
        "still holding after a renewal that slept its deadline away"
    );
    assert!(!me.fence.is_open());
}
