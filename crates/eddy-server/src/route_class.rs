//! Route classes: the few kinds of request the HTTP metrics count
//! separately (a label with a bounded set of values, never the path).

use axum::http::{Method, Request};

use crate::{handlers, protocol, router};

/// What kind of request this is, for the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum RouteClass {
    /// `/readyz`, and `/healthz` other than a `GET` (a `GET /healthz` is
    /// answered before the middleware and not counted).
    Probe,
    /// `/metrics`.
    Metrics,
    /// The console page and its bindings endpoint.
    Console,
    /// A CORS preflight.
    Preflight,
    /// `/_eddy/streams`: the listing.
    List,
    /// The protocol's subscription API (`…/__ds/…`).
    Subscription,
    /// `PUT` on a stream: create or fork.
    Create,
    /// `POST` on a stream.
    Append,
    /// A catch-up `GET`.
    Read,
    /// A long-poll or SSE `GET`.
    LiveRead,
    /// `HEAD` on a stream.
    Head,
    /// `DELETE` on a stream.
    Delete,
    /// Any other method.
    Other,
}

impl RouteClass {
    /// The class of `request`.
    pub(crate) fn of<B>(request: &Request<B>) -> Self {
        let path = request.uri().path();
        let method = request.method();
        if method == Method::OPTIONS {
            return RouteClass::Preflight;
        }
        match path {
            router::HEALTHZ | router::READYZ => return RouteClass::Probe,
            router::METRICS => return RouteClass::Metrics,
            _ => {}
        }
        if crate::console::serves(path) {
            return RouteClass::Console;
        }
        let reserved = path.strip_prefix('/').unwrap_or(path);
        if reserved.starts_with(protocol::RESERVED_PREFIX) {
            return RouteClass::List;
        }
        if handlers::reserved(path).is_some() {
            return RouteClass::Subscription;
        }
        match *method {
            Method::PUT => RouteClass::Create,
            Method::POST => RouteClass::Append,
            Method::HEAD => RouteClass::Head,
            Method::DELETE => RouteClass::Delete,
            Method::GET if live(request.uri().query()) => RouteClass::LiveRead,
            Method::GET => RouteClass::Read,
            _ => RouteClass::Other,
        }
    }

    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RouteClass::Probe => "probe",
            RouteClass::Metrics => "metrics",
            RouteClass::Console => "console",
            RouteClass::Preflight => "preflight",
            RouteClass::List => "list",
            RouteClass::Subscription => "subscription",
            RouteClass::Create => "create",
            RouteClass::Append => "append",
            RouteClass::Read => "read",
            RouteClass::LiveRead => "live_read",
            RouteClass::Head => "head",
            RouteClass::Delete => "delete",
            RouteClass::Other => "other",
        }
    }
}

/// Whether a query asks for a live read (`live=long-poll`, `live=sse`).
fn live(query: Option<&str>) -> bool {
    query.is_some_and(|q| q.split('&').any(|pair| pair.starts_with("live=")))
}
