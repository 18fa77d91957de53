//! A TCP proxy between a store and PostgreSQL that counts the store's
//! round trips: every message the client sends that PostgreSQL answers
//! with `ReadyForQuery` (a `Sync` of the extended protocol, or a simple
//! `Query`). A statement the driver has prepared on its connection costs
//! one (`Bind`, `Execute`, `Sync`); preparing it costs one more, once per
//! connection; the driver's pings are round trips too. It also counts the
//! bytes PostgreSQL sends back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The frontend's `SSLRequest` and `GSSENCRequest` codes: untyped
/// messages after which the startup message is still to come.
const NEGOTIATIONS: [u32; 2] = [80_877_103, 80_877_104];

/// A running proxy; stops when dropped.
pub struct Proxy {
    url: String,
    counts: Arc<Counts>,
    task: JoinHandle<()>,
}

#[derive(Default)]
struct Counts {
    round_trips: AtomicU64,
    received: AtomicU64,
}

impl Proxy {
    /// Starts a proxy on a free loopback port in front of the database at
    /// `url` (`postgres://user@host:port/db`).
    pub async fn start(url: &str) -> Proxy {
        let rest = url.strip_prefix("postgres://").expect("a postgres:// URL");
        let (user, rest) = rest.split_once('@').expect("user@host");
        let (address, database) = rest.split_once('/').expect("host:port/database");
        let database = database.split('?').next().unwrap_or(database);
        let upstream = address.to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let counts = Arc::new(Counts::default());
        let counted = Arc::clone(&counts);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let counted = Arc::clone(&counted);
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&upstream).await {
                        relay(client, server, counted).await;
                    }
                });
            }
        });
        Proxy {
            url: format!("postgres://{user}@127.0.0.1:{port}/{database}?sslmode=disable"),
            counts,
            task,
        }
    }

    /// The URL a store connects to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Round trips counted so far, over every connection.
    pub fn round_trips(&self) -> u64 {
        self.counts.round_trips.load(Ordering::SeqCst)
    }

    /// Bytes PostgreSQL sent so far, over every connection.
    pub fn received(&self) -> u64 {
        self.counts.received.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies both ways, counting the client's round trips.
async fn relay(client: TcpStream, server: TcpStream, counts: Arc<Counts>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = async {
        let mut frames = Frames::default();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let ends = frames.feed(&buf[..n]);
            // Counted before PostgreSQL can answer them.
            counts.round_trips.fetch_add(ends, Ordering::SeqCst);
            if server_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = server_write.shutdown().await;
    };
    let downstream = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            counts.received.fetch_add(n as u64, Ordering::SeqCst);
            if client_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = client_write.shutdown().await;
    };
    tokio::join!(upstream, downstream);
}

/// The frontend's message stream, cut into messages.
#[derive(Default)]
struct Frames {
    pending: Vec<u8>,
    /// Whether the startup message is behind us (messages are typed).
    typed: bool,
}

impl Frames {
    /// Takes more bytes; returns how many round trips they end.
    fn feed(&mut self, bytes: &[u8]) -> u64 {
        self.pending.extend_from_slice(bytes);
        let mut ends = 0;
        loop {
            let header = if self.typed { 5 } else { 4 };
            if self.pending.len() < header {
                break;
            }
            let at = header - 4;
            let length =
                u32::from_be_bytes(self.pending[at..at + 4].try_into().expect("four bytes"))
                    as usize;
            let total = at + length;
            if self.pending.len() < total {
                break;
            }
            if self.typed {
                if matches!(self.pending[0], b'S' | b'Q') {
                    ends += 1;
                }
            } else {
                let code = self
                    .pending
                    .get(4..8)
                    .map(|b| u32::from_be_bytes(b.try_into().expect("four bytes")));
                self.typed = !code.is_some_and(|code| NEGOTIATIONS.contains(&code));
            }
            self.pending.drain(..total);
        }
        ends
    }
}
