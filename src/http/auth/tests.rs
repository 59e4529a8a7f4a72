//! The metrics endpoint's authentication and authorization: reviews, their cache and its budget.

use super::*;
use k8s_openapi::api::authentication::v1::TokenReviewStatus;

#[test]
fn only_a_bearer_token_counts() {
    let with = |v: &str| {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, v.parse().unwrap());
        h
    };
    assert_eq!(bearer(&with("Bearer abc")), Some("abc"));
    assert_eq!(bearer(&with("bearer  abc ")), Some("abc"));
    assert_eq!(bearer(&with("Basic abc")), None);
    assert_eq!(bearer(&with("Bearer ")), None);
    assert_eq!(bearer(&HeaderMap::new()), None);
}

#[test]
fn answers_are_reused_until_they_expire() {
    let mut cache = Cache::new();
    let t0 = Instant::now();
    cache.put("yes", Decision::Allowed, t0);
    cache.put("no", Decision::Unauthenticated, t0);
    let later = t0 + DENIED_TTL;
    assert_eq!(cache.get("yes", later), Some(Decision::Allowed));
    assert_eq!(cache.get("no", later), None, "a denial is kept shorter");
    assert_eq!(cache.get("yes", t0 + ALLOWED_TTL), None);
    assert_eq!(cache.get("other", t0), None);
}

#[test]
fn the_cache_stays_bounded() {
    let mut cache = Cache::new();
    let t0 = Instant::now();
    for i in 0..MAX_CACHED + 10 {
        cache.put(&i.to_string(), Decision::Allowed, t0);
    }
    assert!(cache.answers.len() <= MAX_CACHED);
    let newest = (MAX_CACHED + 9).to_string();
    assert_eq!(cache.get(&newest, t0), Some(Decision::Allowed));
}

#[test]
fn the_access_review_asks_for_get_metrics_as_the_authenticated_user() {
    let user = UserInfo {
        username: Some("system:serviceaccount:monitoring:prometheus".into()),
        groups: Some(vec!["system:serviceaccounts".into()]),
        uid: Some("u1".into()),
        extra: None,
    };
    let reviewed = TokenReview {
        status: Some(TokenReviewStatus {
            authenticated: Some(true),
            user: Some(user.clone()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let user = authenticated(reviewed).expect("authenticated");
    let spec = access_review(&user).spec;
    assert_eq!(spec.user, user.username);
    assert_eq!(spec.groups, user.groups);
    assert_eq!(spec.uid.as_deref(), Some("u1"));
    let attrs = spec.non_resource_attributes.expect("non-resource");
    assert_eq!(attrs.path.as_deref(), Some("/metrics"));
    assert_eq!(attrs.verb.as_deref(), Some("get"));

    let refused = TokenReview {
        status: Some(TokenReviewStatus {
            authenticated: Some(false),
            error: Some("invalid bearer token".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(authenticated(refused), None);
    assert_eq!(authenticated(TokenReview::default()), None);
}

#[test]
fn review_starts_are_budgeted_per_second() {
    let t0 = Instant::now();
    let mut budget = Budget::full(t0);
    let burst = (0..100).take_while(|_| budget.take(t0)).count();
    assert_eq!(burst, REVIEWS_PER_SECOND as usize);
    assert!(
        !budget.take(t0 + Duration::from_millis(50)),
        "refilled too soon"
    );
    assert!(
        budget.take(t0 + Duration::from_millis(100)),
        "one start a tenth of a second"
    );
    let a_while_later = t0 + Duration::from_secs(60);
    let burst = (0..100).take_while(|_| budget.take(a_while_later)).count();
    assert_eq!(
        burst, REVIEWS_PER_SECOND as usize,
        "a quiet while refills only the burst"
    );
}

/// A flood of new tokens cannot become a flood of reviews: past the cap, callers with
/// unknown tokens are turned away at once, without a request to the API server.
#[tokio::test]
async fn reviews_in_flight_are_capped_and_the_rest_turned_away() {
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = sent.clone();
    // An API server that takes every review and answers none.
    let svc = tower::service_fn(move |_req: http::Request<kube::client::Body>| {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::future::pending::<Result<http::Response<kube::client::Body>, tower::BoxError>>()
    });
    let auth = MetricsAuth::new(Client::new(svc, "default"));
    let mut waiting = Vec::new();
    for i in 0..REVIEWS_IN_FLIGHT {
        let auth = auth.clone();
        waiting.push(tokio::spawn(async move {
            auth.check(Some(&format!("token-{i}"))).await.map(|_| ())
        }));
    }
    while sent.load(std::sync::atomic::Ordering::SeqCst) < REVIEWS_IN_FLIGHT {
        tokio::task::yield_now().await;
    }
    let turned_away = auth.check(Some("one-more")).await;
    assert!(
        matches!(turned_away, Err(ReviewError::Busy)),
        "{turned_away:?}"
    );
    assert_eq!(
        sent.load(std::sync::atomic::Ordering::SeqCst),
        REVIEWS_IN_FLIGHT
    );
    for w in waiting {
        w.abort();
    }
}
