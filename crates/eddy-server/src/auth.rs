//! Authorization, decided in one place.
//!
//! Every request passes [`authorize`] before it does anything: the
//! middleware asks it about the endpoint (is a token needed, and given),
//! and every handler asks it again about each stream the request names —
//! its target, a fork's source, a subscription's wake stream and watched
//! streams — with what the request would do to it. The rules:
//!
//! - With an auth token configured, every endpoint but the probes, the
//!   console page and the wake acknowledgements needs the auth token or
//!   the admin token. A wake's ack and release, and a webhook's callback,
//!   are authenticated by the wake's own token instead (the protocol
//!   sends it as the bearer token), which their handler checks.
//! - Streams under [`RESERVED_STREAM_PREFIX`] hold Eddy's own state
//!   (projection checkpoints). Anything that changes one or keeps it
//!   alive — a write, a fork from it, appends of wake events into it —
//!   needs the admin token; reading it does not.

use axum::http::{header, HeaderMap};
use subtle::ConstantTimeEq;

use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::protocol::RESERVED_STREAM_PREFIX;

/// Who a request comes from, by its bearer token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Caller {
    /// No token the server knows (or none configured).
    Anyone,
    /// The auth token.
    Client,
    /// The admin token.
    Admin,
}

impl Caller {
    /// The caller of a request with `headers`.
    pub(crate) fn of(config: &ServerConfig, headers: &HeaderMap) -> Caller {
        if config.auth_token.is_none() && config.admin_token.is_none() {
            return Caller::Anyone;
        }
        let sent = bearer(headers);
        if config.admin_token.as_deref().is_some_and(|t| same(sent, t)) {
            Caller::Admin
        } else if config.auth_token.as_deref().is_some_and(|t| same(sent, t)) {
            Caller::Client
        } else {
            Caller::Anyone
        }
    }
}

/// What a request does to a stream it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operation {
    /// Reads it: a read, `HEAD`, a listing, a subscription watching it.
    Read,
    /// Creates, appends to, closes or deletes it.
    Write,
    /// Forks from it: the fork keeps it alive (its delete only retires it).
    ForkFrom,
    /// Makes it a subscription's wake stream, which the server appends to.
    Wake,
}

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access<'a> {
    /// The probes and the console page: they hold no data.
    Open,
    /// A wake's ack or release, or a webhook's callback: the wake's own
    /// token, checked by the handler, authenticates it.
    WakeToken,
    /// Any other endpoint: the auth token when one is configured.
    Endpoint,
    /// `Operation` on the stream at this path (decoded, as the store
    /// names it).
    Stream(Operation, &'a str),
}

/// Decides whether `caller` may have `access`.
pub(crate) fn authorize(
    config: &ServerConfig,
    caller: Caller,
    access: Access<'_>,
) -> Result<(), ApiError> {
    let stream = match access {
        Access::Open | Access::WakeToken => return Ok(()),
        Access::Endpoint => None,
        Access::Stream(operation, path) => Some((operation, path)),
    };
    if config.auth_token.is_some() && caller == Caller::Anyone {
        return Err(ApiError::Unauthorized);
    }
    match stream {
        Some((operation, path))
            if operation != Operation::Read
                && path.starts_with(RESERVED_STREAM_PREFIX)
                && caller != Caller::Admin =>
        {
            Err(ApiError::Forbidden(format!(
                "streams under `{RESERVED_STREAM_PREFIX}` are Eddy's own (projection checkpoints): \
                 only requests with the admin token may change them, fork from them or wake into \
                 them (`{path}`)"
            )))
        }
        _ => Ok(()),
    }
}

/// The bearer token a request carries, or `""`.
pub(crate) fn bearer(headers: &HeaderMap) -> &str {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
}

/// Compares a sent token with a configured one without an early exit on
/// the first differing byte.
fn same(sent: &str, token: &str) -> bool {
    bool::from(sent.as_bytes().ct_eq(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ServerConfig {
        ServerConfig {
            auth_token: Some("client".into()),
            admin_token: Some("admin".into()),
            ..ServerConfig::default()
        }
    }

    /// The whole table: every caller, every operation, inside and outside
    /// the reserved prefix.
    #[test]
    fn decides_from_caller_operation_and_path() {
        let config = config();
        let ops = [
            Operation::Read,
            Operation::Write,
            Operation::ForkFrom,
            Operation::Wake,
        ];
        for caller in [Caller::Anyone, Caller::Client, Caller::Admin] {
            for op in ops {
                for path in ["orders", "__eddy/checkpoints/p/1/_/0", "__eddyish/x"] {
                    let decided =
                        authorize(&config, caller, Access::Stream(op, path)).map_err(|e| e.code());
                    let expected = if caller == Caller::Anyone {
                        Err("auth/unauthorized")
                    } else if op != Operation::Read
                        && path.starts_with("__eddy/")
                        && caller != Caller::Admin
                    {
                        Err("auth/forbidden")
                    } else {
                        Ok(())
                    };
                    assert_eq!(decided, expected, "{caller:?} {op:?} {path}");
                }
            }
            assert!(authorize(&config, caller, Access::Open).is_ok());
            assert!(authorize(&config, caller, Access::WakeToken).is_ok());
        }
        let open = ServerConfig::default();
        assert!(authorize(&open, Caller::Anyone, Access::Endpoint).is_ok());
        assert!(
            authorize(
                &open,
                Caller::Anyone,
                Access::Stream(Operation::Write, "__eddy/x")
            )
            .is_err(),
            "without an admin token nobody writes under the reserved prefix"
        );
    }

    #[test]
    fn the_caller_is_known_by_its_token() {
        let config = config();
        let with = |token: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::AUTHORIZATION,
                format!("Bearer {token}").parse().expect("header"),
            );
            Caller::of(&config, &headers)
        };
        assert_eq!(with("admin"), Caller::Admin);
        assert_eq!(with("client"), Caller::Client);
        assert_eq!(with("clien"), Caller::Anyone);
        assert_eq!(Caller::of(&config, &HeaderMap::new()), Caller::Anyone);
    }
}
