//! TLS: the certificate and key from PEM files (reloadable while the
//! server runs), ALPN for HTTP/2, and a clear answer to plain HTTP sent to
//! the TLS port.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Why a certificate or key could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A PEM file could not be read or parsed.
    #[error("cannot read the PEM file {path}: {source}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    /// The certificate file holds no certificate.
    #[error("the certificate file {0} holds no certificate")]
    NoCertificate(PathBuf),
    /// rustls refused the configuration.
    #[error("cannot configure TLS: {0}")]
    Config(#[source] rustls::Error),
    /// The key is not usable, or does not belong to the certificate.
    #[error("the key {key} does not fit the certificate {certificate}: {source}")]
    Key {
        /// The certificate file.
        certificate: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why.
        #[source]
        source: rustls::Error,
    },
}

/// The server's certificate chain and private key, read from PEM files.
///
/// [`reload`](Self::reload) reads the files again (after a renewal); new
/// connections get the new certificate, open ones keep theirs. A reload
/// that fails keeps the certificate in use.
#[derive(Debug)]
pub struct TlsCertificates {
    certificate_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
}

impl TlsCertificates {
    /// Reads a PEM certificate chain (leaf first) and a PEM private key
    /// (PKCS#8, PKCS#1 or SEC1).
    pub fn from_pem_files(
        certificate: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Result<Arc<Self>, TlsError> {
        let certificate_path = certificate.into();
        let key_path = key.into();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let current = load(&certificate_path, &key_path, &provider)?;
        Ok(Arc::new(TlsCertificates {
            certificate_path,
            key_path,
            provider,
            current: RwLock::new(Arc::new(current)),
        }))
    }

    /// Reads the files again; on success new connections use them.
    pub fn reload(&self) -> Result<(), TlsError> {
        let fresh = load(&self.certificate_path, &self.key_path, &self.provider)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(fresh);
        Ok(())
    }

    /// The rustls configuration: these certificates, ALPN `h2` then
    /// `http/1.1`.
    pub(crate) fn server_config(self: &Arc<Self>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Config)?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(self) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

impl ResolvesServerCert for TlsCertificates {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(
            &self.current.read().unwrap_or_else(|e| e.into_inner()),
        ))
    }
}

fn load(
    certificate: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain = CertificateDer::pem_file_iter(certificate)
        .map_err(pem(certificate))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem(certificate))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate(certificate.to_owned()));
    }
    let private_key = PrivateKeyDer::from_pem_file(key).map_err(pem(key))?;
    CertifiedKey::from_der(chain, private_key, provider).map_err(|source| TlsError::Key {
        certificate: certificate.to_owned(),
        key: key.to_owned(),
        source,
    })
}

/// The error of a PEM file that could not be read.
fn pem(path: &Path) -> impl Fn(rustls_pki_types::pem::Error) -> TlsError + '_ {
    move |source| TlsError::Pem {
        path: path.to_owned(),
        source,
    }
}

/// The first byte of every TLS connection: a handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// What the first byte of a connection says it is.
pub(crate) enum Opening {
    /// A TLS handshake.
    Tls,
    /// Something else: most likely plain HTTP.
    Plain,
    /// The client went away or sent nothing in time.
    Nothing,
}

/// Looks at the first byte without consuming it.
pub(crate) async fn opening(stream: &TcpStream, within: Duration) -> Opening {
    let mut first = [0u8; 1];
    match tokio::time::timeout(within, stream.peek(&mut first)).await {
        Ok(Ok(1)) if first[0] == TLS_HANDSHAKE => Opening::Tls,
        Ok(Ok(1)) => Opening::Plain,
        _ => Opening::Nothing,
    }
}

/// Answers a plain HTTP request on the TLS port with a 400 that says to use
/// `https://`, then closes the connection.
///
/// The request head is read first (within `within`, up to 16 KiB), so the
/// client gets the answer rather than a reset for unread data.
pub(crate) async fn refuse_plain_http(mut stream: TcpStream, within: Duration) {
    let mut head = Vec::with_capacity(1024);
    let read_head = async {
        let mut buffer = [0u8; 4096];
        while head.len() < 16 * 1024 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buffer[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(within, read_head).await;
    let body = serde_json::json!({
        "code": "http/tls-required",
        "message": "this port speaks HTTPS only: send the request over TLS (https://)",
        "details": {},
    })
    .to_string();
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n\
         eddy-error: http/tls-required\r\ncache-control: no-store\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(within, async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}
