//! Declared inputs and outputs: a name, a route, and how items are coded.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use eddy_streams::{JsonStream, Route, StateMessage, StateStream};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::emits::{OutputItem, StateKind};

type Decoder<I> = Arc<dyn Fn(&[u8]) -> Result<I, String> + Send + Sync>;
type Validator = Arc<dyn Fn(&Value) -> Result<(), String> + Send + Sync>;

/// One named input: a stream route and a decoder into the projection's
/// item type.
pub struct Input<I> {
    pub(crate) name: String,
    pub(crate) route: Route,
    pub(crate) decode: Decoder<I>,
}

impl<I> Clone for Input<I> {
    fn clone(&self) -> Self {
        Input {
            name: self.name.clone(),
            route: self.route.clone(),
            decode: Arc::clone(&self.decode),
        }
    }
}

impl<I> fmt::Debug for Input<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Input")
            .field("name", &self.name)
            .field("route", &self.route.template())
            .finish()
    }
}

impl<I: 'static> Input<I> {
    /// An input from a typed JSON stream whose items convert into `I`.
    ///
    /// With several inputs of different types, make `I` an enum with a
    /// `From` impl per item type.
    pub fn json<T>(name: &str, stream: &JsonStream<T>) -> Self
    where
        T: Serialize + DeserializeOwned + Into<I> + 'static,
    {
        let stream = stream.clone();
        Input {
            name: name.to_owned(),
            route: stream.route().clone(),
            decode: Arc::new(move |bytes| {
                stream
                    .decode(bytes)
                    .map(Into::into)
                    .map_err(|e| e.to_string())
            }),
        }
    }

    /// An input at `route` whose messages decode straight into `I`.
    pub fn route(name: &str, route: Route) -> Self
    where
        I: DeserializeOwned,
    {
        Input {
            name: name.to_owned(),
            route,
            decode: Arc::new(|bytes| serde_json::from_slice(bytes).map_err(|e| e.to_string())),
        }
    }

    /// The input name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The input route.
    pub fn route_template(&self) -> &Route {
        &self.route
    }
}

#[derive(Clone)]
pub(crate) enum OutputKind {
    Json(Validator),
    State(StateStream),
}

/// One named output: a JSON route taking items, or a state route taking
/// row changes and controls.
#[derive(Clone)]
pub struct Output {
    pub(crate) name: String,
    pub(crate) route: Route,
    pub(crate) kind: OutputKind,
    pub(crate) foreign: bool,
}

impl fmt::Debug for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Output")
            .field("name", &self.name)
            .field("route", &self.route.template())
            .field("foreign", &self.foreign)
            .finish()
    }
}

/// Stream declarations that can be outputs: [`JsonStream`] and
/// [`StateStream`].
pub trait IntoOutput {
    /// The output named `name`.
    fn into_output(self, name: &str) -> Output;
}

impl<T: Serialize + DeserializeOwned + 'static> IntoOutput for &JsonStream<T> {
    fn into_output(self, name: &str) -> Output {
        Output {
            name: name.to_owned(),
            route: self.route().clone(),
            kind: OutputKind::Json(Arc::new(|value| {
                serde_json::from_value::<T>(value.clone())
                    .map(drop)
                    .map_err(|e| e.to_string())
            })),
            foreign: false,
        }
    }
}

impl IntoOutput for &StateStream {
    fn into_output(self, name: &str) -> Output {
        Output {
            name: name.to_owned(),
            route: self.route().clone(),
            kind: OutputKind::State(self.clone()),
            foreign: false,
        }
    }
}

impl Output {
    /// The output name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The output route.
    pub fn route(&self) -> &Route {
        &self.route
    }

    /// Whether the output lives on another owner and must already exist.
    pub fn is_foreign(&self) -> bool {
        self.foreign
    }

    /// Encodes a handler's items as messages, checking each against the
    /// output's declaration.
    pub(crate) fn encode(&self, items: &[OutputItem]) -> Result<Vec<Bytes>, String> {
        items.iter().map(|item| self.encode_one(item)).collect()
    }

    fn encode_one(&self, item: &OutputItem) -> Result<Bytes, String> {
        match (&self.kind, item) {
            (_, OutputItem::Invalid(reason)) => Err(reason.clone()),
            (OutputKind::Json(validate), OutputItem::Json(value)) => {
                validate(value).map_err(|e| format!("an item does not match the output: {e}"))?;
                serde_json::to_vec(value)
                    .map(Bytes::from)
                    .map_err(|e| e.to_string())
            }
            (OutputKind::State(stream), OutputItem::State(entry)) => {
                let message = match &entry.0 {
                    StateKind::Upsert { collection, row } => stream.upsert(collection, row),
                    StateKind::Remove { collection, key } => stream.remove(collection, key.clone()),
                    StateKind::Control(control) => Ok(StateMessage::Control(*control)),
                    StateKind::Invalid(reason) => return Err(reason.clone()),
                }
                .map_err(|e| e.to_string())?;
                message.encode().map_err(|e| e.to_string())
            }
            (OutputKind::Json(_), OutputItem::State(_)) => {
                Err("a JSON output takes items, not state entries".into())
            }
            (OutputKind::State(_), OutputItem::Json(_)) => {
                Err("a state output takes row changes and controls, not items".into())
            }
        }
    }
}
