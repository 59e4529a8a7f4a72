//! The shape the client's guards share: the request deadline ([`RequestDeadline`]), the
//! leader's fence ([`FenceLayer`]) and the cap on writes in flight ([`MutatingLimit`]). Each
//! keeps some requests (not watches; writes) and runs their answer under a rule of its own; a
//! [`Guarded`] service does the rest, once for all three.
//!
//! The HTTP client sends nothing until its future is polled, and a guard's future is first
//! polled when the request's is: its check comes after any wait outside its layer (a write
//! slot, a retry's back-off), and before the request is sent.

use std::future::Future;

use futures::TryFutureExt as _;
use futures::future::BoxFuture;
use http::{Method, Request};
use tower::{BoxError, Service};

use super::counted::Counted;
use super::deadline::RequestDeadline;
use super::fence::FenceLayer;
use super::limit::MutatingLimit;

/// Whether a request changes state: what the fence stops and the write slots count.
pub fn mutating(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// A rule that some requests are sent under.
pub trait Guard: Clone + Send + 'static {
    /// Whether this guard keeps `req`; the others pass untouched.
    fn keeps<B>(&self, req: &Request<B>) -> bool;

    /// The guard `req` passes under, if this one keeps it: itself, or a variant of itself for
    /// this kind of request.
    fn for_request<B>(&self, req: &Request<B>) -> Option<Self> {
        self.keeps(req).then(|| self.clone())
    }

    /// The answer to a request this guard keeps, under its rule.
    fn around<T: Reply>(self, answer: impl Answer<T>) -> impl Answer<T>;
}

/// What a guard may read of an answer.
pub trait Reply: Send + 'static {
    /// Whether the server did what was asked (2xx).
    fn succeeded(&self) -> bool;

    /// The answer's HTTP status code.
    fn code(&self) -> Option<u16>;
}

impl<B: Send + 'static> Reply for http::Response<B> {
    fn succeeded(&self) -> bool {
        self.status().is_success()
    }

    fn code(&self) -> Option<u16> {
        Some(self.status().as_u16())
    }
}

/// The guards' tests answer with nothing.
#[cfg(test)]
impl Reply for () {
    fn succeeded(&self) -> bool {
        true
    }

    fn code(&self) -> Option<u16> {
        None
    }
}

/// A request's answer, to come: the request is sent when this is first polled, and not before.
pub trait Answer<T>: Future<Output = Result<T, BoxError>> + Send + 'static {}

impl<T, F: Future<Output = Result<T, BoxError>> + Send + 'static> Answer<T> for F {}

/// A service whose requests pass `guard` on their way to `inner`.
#[derive(Clone)]
pub struct Guarded<S, G> {
    inner: S,
    guard: G,
}

impl<S, G, B> Service<Request<B>> for Guarded<S, G>
where
    S: Service<Request<B>>,
    S::Response: Reply,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    G: Guard,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let guard = self.guard.for_request(&req);
        let answer = self.inner.call(req).err_into();
        match guard {
            Some(guard) => Box::pin(guard.around(answer)),
            None => Box::pin(answer),
        }
    }
}

/// Makes each guard a layer that puts its service under it.
macro_rules! layers {
    ($($guard:ty),+) => {$(
        impl<S> tower::Layer<S> for $guard {
            type Service = Guarded<S, $guard>;

            fn layer(&self, inner: S) -> Self::Service {
                Guarded {
                    inner,
                    guard: self.clone(),
                }
            }
        }
    )+};
}

layers!(RequestDeadline, FenceLayer, MutatingLimit, Counted);
