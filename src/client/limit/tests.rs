use super::*;
use http::Method;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tower::{Layer, ServiceExt};

fn at(s: u64) -> Instant {
    // Instants a test can order: a base and seconds after it.
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *BASE.get_or_init(Instant::now) + Duration::from_secs(s)
}

/// Serves `n` writes at `at(s)`; returns the slots the window grew by.
fn serve_at(w: &mut Window, n: usize, s: u64) -> usize {
    (0..n).map(|_| w.served(at(s))).sum()
}

fn serve(w: &mut Window, n: usize) -> usize {
    serve_at(w, n, 0)
}

#[test]
fn the_window_grows_by_half_per_window_served_until_the_cap() {
    let mut w = Window::new(64);
    assert_eq!(w.size, INITIAL);
    assert_eq!(serve(&mut w, 7), 0, "a window not yet served");
    assert_eq!(w.served(at(0)), 4);
    assert_eq!(w.size, 12);
    assert_eq!(serve(&mut w, 12), 6);
    let sizes: Vec<usize> = (0..4)
        .map(|_| {
            let size = w.size;
            serve(&mut w, size);
            w.size
        })
        .collect();
    assert_eq!(sizes, [27, 40, 60, 64]);
    assert_eq!(serve(&mut w, 1000), 0, "never past the cap");
    assert_eq!(Window::new(3).size, 3, "a cap below the start");
    assert_eq!(Window::new(0).size, 1, "at least one");
}

/// Answers that waited: slow start ends where they did, and the window is held there.
#[test]
fn the_window_stops_growing_where_writes_wait() {
    let mut w = Window::new(64);
    let pods = Kind::of(&post("/api/v1/namespaces/ns/pods"));
    let ms = Duration::from_millis;
    let mut round = |sent: Instant, answered: &[u64]| -> usize {
        let times = answered.iter().map(|&t| sent + ms(t));
        let grown = times.map(|now| {
            w.queueing.answered(&pods, sent, now);
            w.served(now)
        });
        grown.sum()
    };
    // 8 writes of 10 ms on 3 seats, sent at once: 2.3 waiting on average (`queueing`).
    assert_eq!(round(at(0), &[10, 10, 10, 20, 20, 20, 30, 30]), 0);
    // Still waiting a round later: held.
    assert_eq!(round(at(1), &[10, 20, 30, 40, 50, 60, 70, 80]), 0);
    // Answered as fast as the floor: one more.
    assert_eq!(round(at(2), &[10; 8]), 1);
    assert!(!w.slow_start, "over once writes waited");
    assert_eq!(w.size, 9);
}

#[test]
fn a_throttle_halves_the_window_once_and_it_then_grows_by_one() {
    let mut w = Window::new(64);
    serve(&mut w, 8 + 12);
    assert_eq!(w.size, 18);
    assert_eq!(w.throttled(0, at(1)), 9);
    assert_eq!(w.size, 9);
    // Sent under the window already cut: answered by that cut.
    assert_eq!(w.throttled(0, at(1)), 0);
    assert_eq!(w.size, 9);
    assert_eq!(serve_at(&mut w, 9, 2), 1, "one more per window served");
    assert_eq!(w.size, 10);
    assert_eq!(serve_at(&mut w, 10, 2), 1);
    // Sent under later windows: halved again, down to one at most.
    for s in 2..10 {
        w.throttled(w.generation, at(s));
    }
    assert_eq!(w.size, 1);
}

#[test]
fn after_a_throttle_the_window_stays_below_the_size_throttled_for_a_while() {
    let mut w = Window::new(64);
    serve(&mut w, 8 + 12 + 18);
    assert_eq!(w.size, 27);
    w.throttled(0, at(1));
    assert_eq!(w.size, 13);
    let grown: usize = (0..100).map(|_| serve_at(&mut w, 64, 2)).sum();
    assert_eq!((grown, w.size), (13, 26), "held just below 27");
    let later = 1 + HOLD.as_secs();
    assert_eq!(
        serve_at(&mut w, 26, later),
        1,
        "probes again once the hold is over"
    );
    assert_eq!(w.size, 27);
}

#[test]
fn slots_out_when_the_window_shrank_are_kept_as_they_come_back() {
    let mut w = Window::new(64);
    serve(&mut w, 8);
    let cut = w.throttled(0, at(1));
    assert_eq!((cut, w.size), (6, 6));
    // Two of the cut slots were free; four are out.
    w.owe(cut - 2);
    assert!((0..4).all(|_| w.repay()), "kept");
    assert!(!w.repay(), "given back once repaid");
    w.owe(3);
    assert_eq!(serve(&mut w, 6), 0, "growth repays the debt first");
    assert_eq!(w.debt, 2);
}

/// A service that counts the requests it holds at once, and answers each when told to.
struct Held {
    in_flight: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    release: Arc<tokio::sync::Notify>,
}

impl Held {
    fn new() -> Self {
        Self {
            in_flight: Arc::default(),
            peak: Arc::default(),
            release: Arc::default(),
        }
    }

    fn service(
        &self,
    ) -> impl tower::Service<Request<()>, Response = (), Error = BoxError, Future: Send> + Clone + use<>
    {
        let (in_flight, peak, release) = (
            self.in_flight.clone(),
            self.peak.clone(),
            self.release.clone(),
        );
        tower::service_fn(move |_req: Request<()>| {
            let (in_flight, peak, release) = (in_flight.clone(), peak.clone(), release.clone());
            async move {
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                release.notified().await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, BoxError>(())
            }
        })
    }

    /// Waits until `n` requests are held, and no more arrive.
    async fn until_held(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.in_flight.load(Ordering::SeqCst) < n {
            assert!(Instant::now() < deadline, "requests never arrived");
            tokio::task::yield_now().await;
        }
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(self.in_flight.load(Ordering::SeqCst), n);
    }

    async fn finish(&self, calls: Vec<tokio::task::JoinHandle<Result<(), BoxError>>>) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while calls.iter().any(|c| !c.is_finished()) {
            assert!(Instant::now() < deadline, "requests never finished");
            self.release.notify_waiters();
            tokio::task::yield_now().await;
        }
    }
}

fn request(m: Method) -> Request<()> {
    Request::builder().method(m).body(()).unwrap()
}

#[tokio::test]
async fn mutating_requests_wait_for_a_slot_and_reads_do_not() {
    let held = Held::new();
    let svc = MutatingLimit::new(2, Gauge::default()).layer(held.service());
    let mut calls = Vec::new();
    for m in [
        Method::POST,
        Method::PATCH,
        Method::DELETE,
        Method::GET,
        Method::GET,
    ] {
        calls.push(tokio::spawn(svc.clone().oneshot(request(m))));
    }
    // Two mutating requests and both reads reach the server; the third write waits.
    held.until_held(4).await;
    held.finish(calls).await;
    assert_eq!(held.peak.load(Ordering::SeqCst), 4);
}

/// Issue 28, item 4: after a throttle, no more writes are in flight than the halved window,
/// even while the slots taken under the larger one come back; the gauge says the window.
#[tokio::test]
async fn a_throttled_window_holds_back_writes_already_waiting() {
    let (held, gauge) = (Held::new(), Gauge::default());
    let limit = MutatingLimit::new(64, gauge.clone());
    let svc = limit.clone().layer(held.service());
    let calls: Vec<_> = (0..20)
        .map(|_| tokio::spawn(svc.clone().oneshot(request(Method::POST))))
        .collect();
    held.until_held(INITIAL).await;
    limit.throttled(limit.generation());
    assert_eq!(gauge.get(), (INITIAL / 2) as i64);
    held.release.notify_waiters();
    held.until_held(INITIAL / 2).await;
    held.finish(calls).await;
    assert_eq!(held.peak.load(Ordering::SeqCst), INITIAL);
}

fn post(path: &str) -> Request<()> {
    Request::builder()
        .method(Method::POST)
        .uri(path)
        .body(())
        .unwrap()
}

#[test]
fn events_are_told_apart_by_their_resource() {
    let limit = MutatingLimit::new(1, Gauge::default());
    let lane = |path: &str| limit.for_request(&post(path)).map(|l| l.lane);
    let event = Some(Lane::Event);
    assert_eq!(lane("/apis/events.k8s.io/v1/namespaces/ns/events"), event);
    assert_eq!(lane("/api/v1/namespaces/ns/events"), event);
    assert_eq!(lane("/api/v1/namespaces/events/pods"), Some(Lane::Work));
    assert_eq!(lane("/api/v1/namespaces/ns/pods/events"), Some(Lane::Work));
    let status = "/apis/app.example.com/v1alpha1/namespaces/ns/podsets/web/status";
    assert_eq!(lane(status), Some(Lane::Work));
    let read = Request::builder().uri("/api/v1/namespaces/ns/events");
    assert!(limit.for_request(&read.body(()).unwrap()).is_none());
}

/// Issue 28, item 1: an event waits while another write waits for a slot, though it came
/// first: the pods of Ats due at once are released before their events are published.
#[tokio::test]
async fn an_event_waits_for_the_other_writes_waiting() {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let release = Arc::new(tokio::sync::Notify::new());
    let service = {
        let (sent, release) = (sent.clone(), release.clone());
        tower::service_fn(move |req: Request<()>| {
            let (sent, release) = (sent.clone(), release.clone());
            async move {
                sent.lock().unwrap().push(req.uri().path().to_string());
                release.notified().await;
                Ok::<_, BoxError>(())
            }
        })
    };
    let svc = MutatingLimit::new(1, Gauge::default()).layer(service);
    let sent_count = || sent.lock().unwrap().len();
    let first = tokio::spawn(svc.clone().oneshot(post("/api/v1/namespaces/ns/pods")));
    while sent_count() < 1 {
        tokio::task::yield_now().await;
    }
    let event = tokio::spawn(svc.clone().oneshot(post("/api/v1/namespaces/ns/events")));
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let patch = "/api/v1/namespaces/ns/pods/a";
    let work = tokio::spawn(svc.clone().oneshot(post(patch)));
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    for call in [first, work, event] {
        while !call.is_finished() {
            assert!(Instant::now() < deadline, "writes never finished");
            release.notify_waiters();
            tokio::task::yield_now().await;
        }
    }
    let sent = sent.lock().unwrap().clone();
    assert_eq!(
        sent,
        [
            "/api/v1/namespaces/ns/pods",
            patch,
            "/api/v1/namespaces/ns/events"
        ]
    );
}

/// A server of `seats` seats serving each write in 10 ms, with room for `queued` more
/// waiting, and a 429 for any beyond: a level of API Priority and Fairness. Writes are sent
/// as the window allows, `n` in all; returns the 429s and the milliseconds it took.
fn against_a_level(w: &mut Window, seats: usize, queued: usize, n: usize) -> (usize, u64) {
    let ms = Duration::from_millis;
    let t0 = at(0);
    let kind = Kind::of(&post("/api/v1/namespaces/ns/pods"));
    let (mut serving, mut waiting) = (Vec::new(), std::collections::VecDeque::new());
    let (mut sent, mut done, mut throttled) = (0, 0, 0);
    for tick in 0.. {
        let now = t0 + ms(tick);
        // Answers first, then the queue moves up, then the client sends what the window allows.
        let (finished, going): (Vec<_>, Vec<_>) =
            serving.drain(..).partition(|&(end, _)| end <= now);
        serving = going;
        for (_, began) in finished {
            w.queueing.answered(&kind, began, now);
            w.served(now);
            done += 1;
        }
        while serving.len() < seats
            && let Some(began) = waiting.pop_front()
        {
            serving.push((now + ms(10), began));
        }
        while sent < n && serving.len() + waiting.len() < w.size {
            sent += 1;
            match (serving.len() < seats, waiting.len() < queued) {
                (true, _) => serving.push((now + ms(10), now)),
                (false, true) => waiting.push_back(now),
                (false, false) => {
                    throttled += 1;
                    sent -= 1;
                    let generation = w.generation;
                    w.throttled(generation, now);
                    break;
                }
            }
        }
        if done == n {
            return (throttled, tick);
        }
    }
    unreachable!()
}

/// Issue 28, item 4: the level queues before it rejects, so the answer times grow before
/// any 429; slow start stops there instead of doubling past the seats and the queues.
#[test]
fn a_tight_level_is_found_by_its_queues_before_any_429() {
    // 3 seats and a hand of 2 queues of 5: the bench's level.
    let (throttled, took) = against_a_level(&mut Window::new(64), 3, 10, 2000);
    assert_eq!(throttled, 0);
    // The seats' own pace: 2000 writes of 10 ms on 3 seats.
    assert!(
        took < 2000 * 10 / 3 * 11 / 10,
        "{took} ms: the seats left idle"
    );
}

/// A server with seats to spare: the window grows as before, to the cap.
#[test]
fn a_server_with_seats_to_spare_gets_the_whole_window() {
    let mut w = Window::new(64);
    let (throttled, took) = against_a_level(&mut w, 100, 0, 2000);
    assert_eq!((throttled, w.size), (0, 64));
    assert!(took < 2000 * 10 / 64 * 12 / 10, "{took} ms");
}
