//! Store errors reach [`RemoteStorage`] callers as the very errors the
//! store raised, and a refused token fails at once instead of being
//! retried.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use eddy_projection::{Declare, FollowOptions, Host};
use eddy_server::{RemoteStorage, Server, ServerConfig};
use eddy_streams::{
    Append, Appended, Created, ErrorKind, JsonStream, MemoryStorage, Notifier, Payload, ReadChunk,
    ReadFrom, Storage, StreamConfig, StreamError, StreamInfo, StreamPath,
};
use futures::StreamExt;

#[path = "../../eddy-streams/tests/errors/samples.rs"]
#[allow(dead_code)] // `every_code` is for the tests that check coverage.
mod samples;

/// A store whose every call fails with one error.
struct Refusing {
    error: StreamError,
    notifier: Notifier,
}

#[async_trait]
impl Storage for Refusing {
    async fn create(
        &self,
        _: &StreamPath,
        _: StreamConfig,
        _: Payload,
    ) -> Result<Created, StreamError> {
        Err(self.error.clone())
    }

    async fn append(&self, _: &StreamPath, _: Append) -> Result<Appended, StreamError> {
        Err(self.error.clone())
    }

    async fn read(&self, _: &StreamPath, _: ReadFrom, _: usize) -> Result<ReadChunk, StreamError> {
        Err(self.error.clone())
    }

    async fn head(&self, _: &StreamPath) -> Result<StreamInfo, StreamError> {
        Err(self.error.clone())
    }

    async fn delete(&self, _: &StreamPath) -> Result<(), StreamError> {
        Err(self.error.clone())
    }

    async fn list(&self, _: &str) -> Result<Vec<StreamInfo>, StreamError> {
        Err(self.error.clone())
    }

    fn notifier(&self) -> &Notifier {
        &self.notifier
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Every store error a read raises comes back from the remote client
/// equal, fields included; a `HEAD`, which has no body, keeps at least its
/// kind and retryability.
///
/// Regression: a bodiless answer lost the kind of most codes
/// (`limit/producers`, the conflicts, the invalid requests) to an
/// internal error, because the client mapped only a few codes from the
/// `eddy-error` header.
#[test]
fn store_errors_cross_http_losslessly() {
    runtime().block_on(async {
        let path = StreamPath::new("a/b").expect("path");
        for error in samples::one_of_each() {
            let store = Refusing {
                error: error.clone(),
                notifier: Notifier::default(),
            };
            let server = Server::bind(
                ([127, 0, 0, 1], 0).into(),
                Arc::new(store),
                ServerConfig::default(),
            )
            .await
            .expect("bind")
            .spawn();
            let remote = RemoteStorage::new(&server.url()).expect("client");
            let read = remote.read(&path, ReadFrom::Beginning, 1024).await;
            assert_eq!(read.err(), Some(error.clone()));
            let head = remote.head(&path).await.err();
            assert_eq!(
                head.map(|e| (e.kind(), e.is_retryable())),
                Some((error.kind(), error.is_retryable())),
                "{error:?}"
            );
            server.stop().await.expect("stop");
        }
    });
}

/// Regression: a follower over a remote store with a wrong token retried
/// the server's 401 for ever, as if the store were down.
#[test]
fn a_follower_with_a_refused_token_fails_at_once() {
    runtime().block_on(async {
        let config = ServerConfig {
            auth_token: Some("right".into()),
            ..ServerConfig::default()
        };
        let server = Server::bind(
            ([127, 0, 0, 1], 0).into(),
            Arc::new(MemoryStorage::new()),
            config,
        )
        .await
        .expect("bind")
        .spawn();
        let remote = RemoteStorage::new(&server.url())
            .expect("client")
            .with_token("wrong");
        let head = remote.head(&StreamPath::new("events").expect("path")).await;
        let err = head.expect_err("refused");
        assert_eq!(
            (err.kind(), err.is_retryable()),
            (ErrorKind::Unauthorized, false)
        );

        let events = JsonStream::<serde_json::Value>::new("events", "events").expect("route");
        let declare = Declare::<()>::new("count");
        let input = declare.input("events", &events);
        let count = declare
            .fold(0u64)
            .on(input, |n, _, _| n + 1)
            .build()
            .expect("declare");
        let host = Host::new(Arc::new(remote));
        let bound = count.at(()).expect("bind");
        let mut follow = host.follow(&bound, FollowOptions::default());
        let first = tokio::time::timeout(Duration::from_secs(10), follow.next()).await;
        let failed = first
            .expect("answered without retrying")
            .expect("an element");
        assert_eq!(failed.err().map(|e| e.code()), Some("auth/unauthorized"));
        server.stop().await.expect("stop");
    });
}
