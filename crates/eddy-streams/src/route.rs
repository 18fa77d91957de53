//! Route templates: `facts/:workspaceId` ↔ a path and its parameters.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::{StreamError, StreamPath};

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param(String),
}

/// A path template whose `:name` segments are parameters.
///
/// Parameters come from and go to serde types: [`Route::render`] takes any
/// value that serializes to a map of strings or numbers, and
/// [`Route::parse`] decodes the captured segments into the caller's type
/// (a captured segment that the type wants as a number is read as one).
///
/// ```
/// use eddy_streams::Route;
/// #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
/// #[serde(rename_all = "camelCase")]
/// struct Workspace { workspace_id: String }
///
/// let route = Route::new("facts/:workspaceId")?;
/// let path = route.render(&Workspace { workspace_id: "ws-42".into() })?;
/// assert_eq!(path.as_str(), "facts/ws-42");
/// assert_eq!(route.parse::<Workspace>("facts/ws-42")?, Workspace { workspace_id: "ws-42".into() });
/// assert!(route.parse::<Workspace>("totals/ws-42").is_err());
/// # Ok::<(), eddy_streams::StreamError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    template: String,
    segments: Vec<Segment>,
}

impl Route {
    /// Parses a template. Each segment is a literal or `:name`; names are
    /// unique.
    pub fn new(template: impl Into<String>) -> Result<Self, StreamError> {
        let template = template.into();
        let error = |reason: &str| StreamError::Route {
            route: template.clone(),
            reason: reason.to_owned(),
        };
        let mut segments = Vec::new();
        for segment in template.split('/') {
            match segment.strip_prefix(':') {
                Some("") => return Err(error("a parameter segment needs a name after `:`")),
                Some(name) => {
                    if segments.contains(&Segment::Param(name.to_owned())) {
                        return Err(error("a parameter name appears twice"));
                    }
                    segments.push(Segment::Param(name.to_owned()));
                }
                None => {
                    StreamPath::new(segment)
                        .map_err(|_| error("a literal segment is not a valid path segment"))?;
                    segments.push(Segment::Literal(segment.to_owned()));
                }
            }
        }
        Ok(Route { template, segments })
    }

    /// The template text.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// The parameter names, in template order.
    pub fn params(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Param(name) => Some(name.as_str()),
            Segment::Literal(_) => None,
        })
    }

    /// Renders the path for `params`. Fields the route does not name are
    /// ignored, so a projection's parameters render every route that uses a
    /// subset of them.
    pub fn render<P: Serialize + ?Sized>(&self, params: &P) -> Result<StreamPath, StreamError> {
        let value = serde_json::to_value(params)
            .map_err(|e| self.error(format!("cannot encode the parameters: {e}")))?;
        self.render_value(&value)
    }

    /// Renders the path from parameters held as a JSON object.
    pub fn render_value(&self, params: &Value) -> Result<StreamPath, StreamError> {
        let empty = Map::new();
        let map = match params {
            Value::Object(map) => map,
            Value::Null => &empty,
            _ => return Err(self.error("the parameters must be a struct or a map".into())),
        };
        let mut parts = Vec::with_capacity(self.segments.len());
        for segment in &self.segments {
            match segment {
                Segment::Literal(text) => parts.push(text.clone()),
                Segment::Param(name) => {
                    let text = match map.get(name) {
                        Some(Value::String(s)) => s.clone(),
                        Some(Value::Number(n)) => n.to_string(),
                        Some(Value::Bool(b)) => b.to_string(),
                        Some(_) => {
                            return Err(self.error(format!(
                                "parameter `{name}` must be a string, number or boolean"
                            )))
                        }
                        None => return Err(self.error(format!("parameter `{name}` is missing"))),
                    };
                    if text.is_empty() || text.contains('/') || text == "." || text == ".." {
                        return Err(self.error(format!(
                            "parameter `{name}` = `{text}` cannot be a path segment"
                        )));
                    }
                    parts.push(text);
                }
            }
        }
        StreamPath::new(parts.join("/"))
    }

    /// Parses a path into parameters, if the path matches the template.
    pub fn parse<P: DeserializeOwned>(&self, path: &str) -> Result<P, StreamError> {
        let captured = self.parse_value(path)?;
        match serde_json::from_value(Value::Object(captured.clone())) {
            Ok(params) => Ok(params),
            Err(first) => {
                let coerced = captured
                    .into_iter()
                    .map(|(k, v)| {
                        let v = match &v {
                            Value::String(s) => serde_json::from_str::<Value>(s)
                                .ok()
                                .filter(|p| p.is_number() || p.is_boolean())
                                .unwrap_or(v),
                            _ => v,
                        };
                        (k, v)
                    })
                    .collect();
                serde_json::from_value(Value::Object(coerced)).map_err(|_| {
                    self.error(format!(
                        "path `{path}` does not decode into the parameters: {first}"
                    ))
                })
            }
        }
    }

    /// Parses a path into a JSON object of the captured segments (strings).
    pub fn parse_value(&self, path: &str) -> Result<Map<String, Value>, StreamError> {
        let parts: Vec<&str> = path.split('/').collect();
        if parts.len() != self.segments.len() {
            return Err(self.error(format!("path `{path}` does not match")));
        }
        let mut captured = Map::new();
        for (segment, part) in self.segments.iter().zip(parts) {
            match segment {
                Segment::Literal(text) if text == part => {}
                Segment::Param(name) if !part.is_empty() => {
                    captured.insert(name.clone(), Value::String(part.to_owned()));
                }
                _ => return Err(self.error(format!("path `{path}` does not match"))),
            }
        }
        Ok(captured)
    }

    fn error(&self, reason: String) -> StreamError {
        StreamError::Route {
            route: self.template.clone(),
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Numbered {
        tenant: String,
        shard: u32,
    }

    #[test]
    fn numbers_round_trip() {
        let route = Route::new("t/:tenant/s/:shard").ok();
        let route = route.as_ref();
        let params = Numbered {
            tenant: "7".into(),
            shard: 3,
        };
        let path = route.map(|r| r.render(&params));
        assert_eq!(
            path.and_then(|p| p.ok()).map(|p| p.to_string()),
            Some("t/7/s/3".into())
        );
        assert_eq!(
            route.and_then(|r| r.parse::<Numbered>("t/7/s/3").ok()),
            Some(params)
        );
    }

    #[test]
    fn rejects_bad_templates_and_values() {
        assert!(Route::new("a/:").is_err());
        assert!(Route::new("a/:x/:x").is_err());
        assert!(Route::new("a//b").is_err());
        let route = Route::new("a/:x").ok();
        let bad = route.map(|r| r.render(&serde_json::json!({"x": "b/c"})).is_err());
        assert_eq!(bad, Some(true));
    }
}
