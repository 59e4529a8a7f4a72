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

/// Answers by token, each until its expiry.
#[derive(Default)]
struct Cache {
    answers: HashMap<String, (Decision, Instant)>,
}

impl Cache {
    fn get(&self, token: &str, now: Instant) -> Option<Decision> {
        let (decision, expires) = self.answers.get(token)?;
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
        self.answers.insert(token.to_string(), (decision, expires));
    }
}

pub struct MetricsAuth {
    client: Client,
    cache: Mutex<Cache>,
}

impl MetricsAuth {
    pub fn new(client: Client) -> Arc<Self> {
        Arc::new(Self {
            client,
            cache: Mutex::default(),
        })
    }

    pub async fn check(&self, token: Option<&str>) -> Result<Decision, kube::Error> {
        let Some(token) = token else {
            return Ok(Decision::Unauthenticated);
        };
        if let Some(known) = self.cache().get(token, Instant::now()) {
            return Ok(known);
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
        Err(e) => {
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
mod tests {
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
        let mut cache = Cache::default();
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
        let mut cache = Cache::default();
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
}
