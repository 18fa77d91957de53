//! Response compression (gzip, brotli, zstd through tower-http) of text
//! bodies over a threshold. See [`CompressionConfig`].

use axum::body::HttpBody;
use axum::http::{header, Response};
use tower_http::compression::{CompressionLayer, Predicate};

use crate::config::CompressionConfig;

/// The compression layer for `config`: gzip, brotli and zstd, whichever
/// the client's `Accept-Encoding` prefers.
pub(crate) fn layer(config: &CompressionConfig) -> CompressionLayer<Compressible> {
    CompressionLayer::new()
        .quality(config.level)
        .compress_when(Compressible {
            enabled: config.enabled,
            min_bytes: config.min_bytes,
        })
}

/// Which responses are compressed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Compressible {
    enabled: bool,
    min_bytes: u64,
}

impl Predicate for Compressible {
    fn should_compress<B>(&self, response: &Response<B>) -> bool
    where
        B: HttpBody,
    {
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let size = response
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .or_else(|| response.body().size_hint().exact());
        // A body of unknown size streams: compress it if it is text.
        self.enabled && compressible(content_type) && size.is_none_or(|size| size >= self.min_bytes)
    }
}

/// Whether a content type is text that compresses. SSE is text but is
/// never compressed: the encoder holds events back until its buffer
/// fills, and live readers need each event at once.
pub(crate) fn compressible(content_type: &str) -> bool {
    let media = eddy_streams::media_type(content_type);
    match media.as_str() {
        "text/event-stream" => false,
        "application/json"
        | "application/x-ndjson"
        | "application/ndjson"
        | "application/xml"
        | "application/javascript" => true,
        other => other.starts_with("text/") || other.ends_with("+json") || other.ends_with("+xml"),
    }
}

#[cfg(test)]
mod tests {
    use super::compressible;

    #[test]
    fn text_compresses_and_binary_and_sse_do_not() {
        for yes in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "text/plain",
            "application/x-ndjson",
            "application/jwk-set+json",
            "image/svg+xml",
        ] {
            assert!(compressible(yes), "{yes}");
        }
        for no in [
            "application/octet-stream",
            "application/x-protobuf",
            "image/png",
            "text/event-stream",
            "",
        ] {
            assert!(!compressible(no), "{no}");
        }
    }
}
