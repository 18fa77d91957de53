//! Route templates: `facts/:workspaceId` ↔ a path and its parameters.

use serde::de::value::MapDeserializer;
use serde::de::{DeserializeOwned, IntoDeserializer, Visitor};
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
        let segments = captured
            .into_iter()
            .filter_map(|(name, value)| match value {
                Value::String(text) => Some((name, SegmentDeserializer(text))),
                _ => None,
            });
        P::deserialize(MapDeserializer::new(segments)).map_err(|e: serde::de::value::Error| {
            self.error(format!(
                "path `{path}` does not decode into the parameters: {e}"
            ))
        })
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

/// One captured segment: a string that also reads as a number or a
/// boolean when the parameter type asks for one.
struct SegmentDeserializer(String);

impl<'de> IntoDeserializer<'de, serde::de::value::Error> for SegmentDeserializer {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

macro_rules! parse_as {
    ($($method:ident => $visit:ident: $ty:ty),* $(,)?) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
                match self.0.parse::<$ty>() {
                    Ok(v) => visitor.$visit(v),
                    Err(_) => visitor.visit_string(self.0),
                }
            }
        )*
    };
}

impl<'de> serde::Deserializer<'de> for SegmentDeserializer {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_string(self.0)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    parse_as!(
        deserialize_bool => visit_bool: bool,
        deserialize_i8 => visit_i8: i8,
        deserialize_i16 => visit_i16: i16,
        deserialize_i32 => visit_i32: i32,
        deserialize_i64 => visit_i64: i64,
        deserialize_u8 => visit_u8: u8,
        deserialize_u16 => visit_u16: u16,
        deserialize_u32 => visit_u32: u32,
        deserialize_u64 => visit_u64: u64,
        deserialize_f32 => visit_f32: f32,
        deserialize_f64 => visit_f64: f64,
    );

    serde::forward_to_deserialize_any! {
        i128 u128 char str string bytes byte_buf unit unit_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
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
