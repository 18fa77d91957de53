//! Bindings: a declaration with its parameters, every stream path resolved.

use std::collections::BTreeSet;
use std::fmt;

use eddy_streams::StreamPath;
use serde_json::{Map, Value};

use crate::checkpoint::CheckpointKey;
use crate::declare::{Params, State};
use crate::{Projection, ProjectionError, Result};

/// A projection bound to one set of parameters: the unit a runner executes
/// and a checkpoint is kept for.
pub struct Bound<P, S> {
    pub(crate) projection: Projection<P, S>,
    pub(crate) params: P,
    pub(crate) params_value: Value,
    pub(crate) inputs: Vec<StreamPath>,
    pub(crate) outputs: Vec<StreamPath>,
    pub(crate) key: CheckpointKey,
}

impl<P: Clone, S> Clone for Bound<P, S> {
    fn clone(&self) -> Self {
        Bound {
            projection: self.projection.clone(),
            params: self.params.clone(),
            params_value: self.params_value.clone(),
            inputs: self.inputs.clone(),
            outputs: self.outputs.clone(),
            key: self.key.clone(),
        }
    }
}

impl<P, S> fmt::Debug for Bound<P, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bound")
            .field("projection", &self.projection)
            .field("params", &self.params_value)
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .finish()
    }
}

impl<P: Params, S: State> Projection<P, S> {
    /// Binds the declaration to `params`, rendering every input and output
    /// path. Streams whose routes use fewer parameters are shared by every
    /// binding. Fails with `load/invalid-options` when a route cannot be
    /// rendered or two outputs (or an output and an input) resolve to the
    /// same stream.
    pub fn at(&self, params: P) -> Result<Bound<P, S>> {
        let invalid = |reason: String| {
            ProjectionError::invalid(format!("projection `{}`: {reason}", self.id()))
        };
        let params_value = serde_json::to_value(&params)
            .map_err(|e| invalid(format!("the parameters do not encode: {e}")))?;
        if !matches!(params_value, Value::Object(_) | Value::Null) {
            return Err(invalid(
                "the parameters must encode as a struct or a map".into(),
            ));
        }
        let render = |what: &str, name: &str, route: &eddy_streams::Route| {
            route
                .render_value(&params_value)
                .map_err(|e| invalid(format!("{what} `{name}`: {e}")))
        };
        let inputs = self
            .inputs()
            .iter()
            .map(|i| render("input", &i.name, &i.route))
            .collect::<Result<Vec<_>>>()?;
        let outputs = self
            .outputs()
            .iter()
            .map(|o| render("output", &o.name, &o.route))
            .collect::<Result<Vec<_>>>()?;
        let mut seen: BTreeSet<&str> = inputs.iter().map(StreamPath::as_str).collect();
        for (output, path) in self.outputs().iter().zip(&outputs) {
            if !seen.insert(path.as_str()) {
                return Err(invalid(format!(
                    "output `{}` resolves to `{path}`, which another output or an input already uses",
                    output.name
                )));
            }
        }
        let key = CheckpointKey::new(self.id(), self.version(), &params_value)?;
        Ok(Bound {
            projection: self.clone(),
            params,
            params_value,
            inputs,
            outputs,
            key,
        })
    }

    /// Finds the parameters a stream path carries: tries the input routes in
    /// declaration order and decodes the first match. Fails with
    /// `load/invalid-options` when no input route matches or the matching
    /// route does not supply every parameter.
    pub fn parse(&self, path: &str) -> Result<P> {
        for input in self.inputs() {
            let Ok(captured) = input.route.parse_value(path) else {
                continue;
            };
            // A route without parameters captures nothing: that is the
            // parameters of a projection that has none (`()`), which do
            // not decode from an empty map.
            return input.route.parse::<P>(path).or_else(|e| {
                let unit = captured
                    .is_empty()
                    .then(|| serde_json::from_value(Value::Null));
                unit.and_then(std::result::Result::ok).ok_or_else(|| {
                    ProjectionError::invalid(format!(
                        "projection `{}`: input `{}` matches `{path}` but {e}",
                        self.id(),
                        input.name
                    ))
                })
            });
        }
        Err(ProjectionError::invalid(format!(
            "projection `{}`: no input route matches `{path}`",
            self.id()
        )))
    }

    /// Like [`parse`](Projection::parse), but gives the captured subset of
    /// parameters (as strings) of the first matching input route.
    pub fn parse_subset(&self, path: &str) -> Option<Map<String, Value>> {
        self.inputs()
            .iter()
            .find_map(|i| i.route.parse_value(path).ok())
    }
}

impl<P: Params, S: State> Bound<P, S> {
    /// The declaration.
    pub fn projection(&self) -> &Projection<P, S> {
        &self.projection
    }

    /// The parameters.
    pub fn params(&self) -> &P {
        &self.params
    }

    /// The input paths, in input declaration order.
    pub fn input_paths(&self) -> &[StreamPath] {
        &self.inputs
    }

    /// The output paths, in output declaration order.
    pub fn output_paths(&self) -> &[StreamPath] {
        &self.outputs
    }

    /// The key of this binding's checkpoint.
    pub fn checkpoint_key(&self) -> &CheckpointKey {
        &self.key
    }

    /// The path of the stream that holds this binding's checkpoint.
    pub fn checkpoint_path(&self) -> &StreamPath {
        &self.key.path
    }
}
