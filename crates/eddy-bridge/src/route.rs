//! Which stream an effect goes to.

use std::sync::Arc;

use eddy_dynamo::{AttributeValue, BoxError, Effect};
use eddy_streams::StreamPath;

/// Which stream each effect is appended to.
#[derive(Clone)]
pub enum Route {
    /// Every effect of the projection to one stream.
    Projection(StreamPath),
    /// One stream per row: `<prefix>/<partition key>/<sort key>` of the
    /// row, each key escaped ([`row_path`]).
    Row {
        /// The streams' common prefix.
        prefix: StreamPath,
    },
    /// A function of the effect decides.
    By(Arc<RouteFn>),
}

/// A function that names an effect's stream.
pub type RouteFn = dyn Fn(&Effect) -> Result<StreamPath, BoxError> + Send + Sync;

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Route::Projection(path) => f.debug_tuple("Projection").field(path).finish(),
            Route::Row { prefix } => f.debug_struct("Row").field("prefix", prefix).finish(),
            Route::By(_) => f.write_str("By(..)"),
        }
    }
}

impl Route {
    /// A route decided by `route`.
    pub fn by(
        route: impl Fn(&Effect) -> Result<StreamPath, BoxError> + Send + Sync + 'static,
    ) -> Self {
        Route::By(Arc::new(route))
    }

    /// The stream `effect` goes to.
    pub fn path(&self, effect: &Effect) -> Result<StreamPath, BoxError> {
        match self {
            Route::Projection(path) => Ok(path.clone()),
            Route::Row { prefix } => Ok(row_path(prefix, effect)?),
            Route::By(route) => route(effect),
        }
    }
}

/// `<prefix>/<key>/<key>` of the effect's row, its key attributes in name
/// order (`pk`, then `sk`). Each key's
/// bytes other than ASCII letters, digits, `-`, `_` and `=` are written
/// as `%XX`, so distinct rows get distinct paths and every segment is a
/// valid one.
pub fn row_path(prefix: &StreamPath, effect: &Effect) -> Result<StreamPath, BoxError> {
    let key = escaped_key(effect);
    Ok(StreamPath::new(format!("{prefix}/{key}"))?)
}

/// The effect's row key as `<key>/<key>`, its attributes in name order
/// (`pk` before `sk` in the single-table layout), each escaped.
pub(crate) fn escaped_key(effect: &Effect) -> String {
    let mut values: Vec<(&String, &AttributeValue)> = effect.row.iter().collect();
    values.sort_by(|a, b| a.0.cmp(b.0));
    let mut key = String::new();
    for (n, (_, value)) in values.into_iter().enumerate() {
        if n > 0 {
            key.push('/');
        }
        match value {
            AttributeValue::S(text) => escape(text.as_bytes(), &mut key),
            AttributeValue::N(number) => escape(number.as_bytes(), &mut key),
            AttributeValue::B(bytes) => escape(bytes, &mut key),
            // Row keys hold only these; anything else still gets a name.
            other => escape(format!("{other:?}").as_bytes(), &mut key),
        }
    }
    key
}

pub(crate) fn escape(bytes: &[u8], out: &mut String) {
    if bytes.is_empty() {
        out.push_str("%00");
    }
    for &byte in bytes {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'=') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
}
