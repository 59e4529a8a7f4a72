//! Who may scrape `/metrics`: a caller whose bearer token the API server authenticates
//! (TokenReview) and authorizes for `get` on the non-resource URL `/metrics`
//! (SubjectAccessReview), as kubebuilder's secure metrics do. Answers are cached briefly, so a
//! scrape every few seconds costs two API calls a minute, not two a scrape.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};
use parking_lot::Mutex;
use ring::hmac;
use tracing::warn;

/// The path and verb a scraper must be allowed, as the `metrics-reader` ClusterRole grants.
const PATH: &str = "/metrics";
const VERB: &str = "get";

/// How long an answer is reused. A revoked binding takes effect within `ALLOWED_TTL`; a new
/// one within `DENIED_TTL`.
const ALLOWED_TTL: Duration = Duration::from_secs(60);
const DENIED_TTL: Duration = Duration::from_secs(10);
/// Bounds the cache against a caller sending a new token each time.
const MAX_CACHED: usize = 1024;
/// Reviews in flight at once: each is two requests to the API server, and a flood of new
/// tokens (no credentials needed to send one) must not become a flood of those. More callers
/// with unknown tokens are turned away with 503 until one finishes.
pub const REVIEWS_IN_FLIGHT: usize = 4;
/// Reviews started per second, on average (and at most this many at once after a quiet
/// while): bounds what a flood costs the API server, whose time the controllers need too.
pub const REVIEWS_PER_SECOND: f64 = 10.0;
/// How long a caller turned away waits for its 503 (its `Retry-After`).
const BUSY_ANSWER_AFTER: Duration = Duration::from_secs(1);

/// Why a caller could not be reviewed.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error(
        "reviews are at their cap ({REVIEWS_IN_FLIGHT} at once, {REVIEWS_PER_SECOND} a second)"
    )]
    Busy,
    #[error(transparent)]
    Api(#[from] kube::Error),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// Authenticated, but not allowed `get /metrics`.
    Forbidden {
        user: String,
    },
    /// No token, or one the API server does not accept.
    Unauthenticated,
}

impl Decision {
    fn ttl(&self) -> Duration {
        match self {
            Decision::Allowed => ALLOWED_TTL,
            _ => DENIED_TTL,
        }
    }
}

/// Answers by token, each until its expiry. Keyed by an HMAC of the token, as the API server's
/// token cache is: an entry costs the same whatever the token's size, so a caller sending a
/// new large token each time cannot make the cache hold them (issue 31: 1,100 tokens of
/// 300 KB took the process from 11 to 313 MiB).
struct Cache {
    key: hmac::Key,
    answers: HashMap<Digest, (Decision, Instant)>,
}

type Digest = [u8; 32];

impl Cache {
    fn new() -> Self {
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &ring::rand::SystemRandom::new())
            .expect("the system's random source works");
        Self {
            key,
            answers: HashMap::new(),
        }
    }

    fn digest(&self, token: &str) -> Digest {
        let tag = hmac::sign(&self.key, token.as_bytes());
        tag.as_ref().try_into().expect("HMAC-SHA256 is 32 bytes")
    }

    fn get(&self, token: &str, now: Instant) -> Option<Decision> {
        let (decision, expires) = self.answers.get(&self.digest(token))?;
        (now < *expires).then(|| decision.clone())
    }

    fn put(&mut self, token: &str, decision: Decision, now: Instant) {
        if self.answers.len() >= MAX_CACHED {
            self.answers.retain(|_, (_, expires)| now < *expires);
        }
        if self.answers.len() >= MAX_CACHED {
            self.answers.clear();
        }
        let expires = now + decision.ttl();
        self.answers.insert(self.digest(token), (decision, expires));
    }
}

pub struct MetricsAuth {
    client: Client,
    cache: Mutex<Cache>,
    reviews: tokio::sync::Semaphore,
    budget: Mutex<Budget>,
}

/// A token bucket of review starts: [`REVIEWS_PER_SECOND`] refilled, as many held at most.
#[derive(Debug)]
struct Budget {
    left: f64,
    at: Instant,
}

impl Budget {
    fn full(now: Instant) -> Self {
        Self {
            left: REVIEWS_PER_SECOND,
            at: now,
        }
    }

    /// Takes one start if the budget has it.
    fn take(&mut self, now: Instant) -> bool {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * REVIEWS_PER_SECOND;
        self.left = (self.left + refill).min(REVIEWS_PER_SECOND);
        self.at = now;
        let has = self.left >= 1.0;
        if has {
            self.left -= 1.0;
        }
        has
    }
}

impl MetricsAuth {
    /// `client` should be one whose requests wait behind no pod write (see `client::build`).
    pub fn new(client: Client) -> Arc<Self> {
        Arc::new(Self {
            client,
            cache: Mutex::new(Cache::new()),
            reviews: tokio::sync::Semaphore::new(REVIEWS_IN_FLIGHT),
            budget: Mutex::new(Budget::full(Instant::now())),
        })
    }

    pub async fn check(&self, token: Option<&str>) -> Result<Decision, ReviewError> {
        let Some(token) = token else {
            return Ok(Decision::Unauthenticated);
        };
        if let Some(known) = self.cache().get(token, Instant::now()) {
            return Ok(known);
        }
        let _slot = self.reviews.try_acquire().map_err(|_| ReviewError::Busy)?;
        if !self.budget.lock().take(Instant::now()) {
            return Err(ReviewError::Busy);
        }
        let decision = self.review(token).await?;
        self.cache().put(token, decision.clone(), Instant::now());
        Ok(decision)
    }

    fn cache(&self) -> parking_lot::MutexGuard<'_, Cache> {
        self.cache.lock()
    }

    async fn review(&self, token: &str) -> Result<Decision, kube::Error> {
        let params = PostParams::default();
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&params, &token_review(token))
            .await?;
        let Some(user) = authenticated(reviewed) else {
            return Ok(Decision::Unauthenticated);
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&params, &access_review(&user))
            .await?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        Ok(if allowed {
            Decision::Allowed
        } else {
            Decision::Forbidden {
                user: user.username.unwrap_or_default(),
            }
        })
    }
}

fn token_review(token: &str) -> TokenReview {
    TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_string()),
            audiences: None,
        },
        ..Default::default()
    }
}

/// The user behind an accepted token.
fn authenticated(review: TokenReview) -> Option<UserInfo> {
    let status = review.status?;
    if status.authenticated == Some(true) {
        status.user
    } else {
        None
    }
}

/// May `user` get `/metrics`? Asked with every attribute the API server authenticated, so
/// group and extra-based bindings count.
fn access_review(user: &UserInfo) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups.clone(),
            uid: user.uid.clone(),
            extra: user.extra.clone(),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(PATH.into()),
                verb: Some(VERB.into()),
            }),
            resource_attributes: None,
        },
        ..Default::default()
    }
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Middleware: lets the request through only for an allowed caller.
pub async fn require(State(auth): State<Arc<MetricsAuth>>, req: Request, next: Next) -> Response {
    match auth.check(bearer(req.headers())).await {
        Ok(Decision::Allowed) => next.run(req).await,
        Ok(Decision::Unauthenticated) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "Unauthorized: send a Kubernetes bearer token\n",
        )
            .into_response(),
        Ok(Decision::Forbidden { user }) => (
            StatusCode::FORBIDDEN,
            format!("Forbidden: {user} may not {VERB} {PATH}\n"),
        )
            .into_response(),
        Err(ReviewError::Busy) => {
            // Held for the Retry-After it asks for: a client that ignores it cannot turn the
            // cheap refusal into a flood that takes the CPU the controllers need.
            tokio::time::sleep(BUSY_ANSWER_AFTER).await;
            (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "1")],
                "Too many scrapers being reviewed; retry\n",
            )
                .into_response()
        }
        Err(ReviewError::Api(e)) => {
            warn!(error = %e, "could not review a metrics scraper's token");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "Could not review the token with the API server\n",
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests;
