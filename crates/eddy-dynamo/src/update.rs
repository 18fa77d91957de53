//! Typed update actions: `SET`, `REMOVE` and numeric `ADD` on top-level attributes.

use crate::error::ValidationError;
use crate::item::{parse_number, AttributeValue, Item};

/// One action of an update.
#[derive(Debug, Clone, PartialEq)]
pub enum UpdateAction {
    /// `SET name = value`
    Set(String, AttributeValue),
    /// `REMOVE name`
    Remove(String),
    /// `ADD name number`: adds to a number, or sets it when absent.
    Add(String, AttributeValue),
}

/// The actions of an update, applied in order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Update {
    /// The actions.
    pub actions: Vec<UpdateAction>,
}

impl Update {
    /// An update with no action.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `SET name = value`.
    pub fn set(mut self, name: impl Into<String>, value: AttributeValue) -> Self {
        self.actions.push(UpdateAction::Set(name.into(), value));
        self
    }

    /// Adds `REMOVE name`.
    pub fn remove(mut self, name: impl Into<String>) -> Self {
        self.actions.push(UpdateAction::Remove(name.into()));
        self
    }

    /// Adds `ADD name delta` for a number.
    pub fn add(mut self, name: impl Into<String>, delta: AttributeValue) -> Self {
        self.actions.push(UpdateAction::Add(name.into(), delta));
        self
    }

    /// Applies the actions to `item` (which already holds the key).
    pub fn apply(&self, item: &mut Item) -> Result<(), ValidationError> {
        for action in &self.actions {
            match action {
                UpdateAction::Set(name, value) => {
                    item.insert(name.clone(), value.clone());
                }
                UpdateAction::Remove(name) => {
                    item.remove(name);
                }
                UpdateAction::Add(name, AttributeValue::N(delta)) => {
                    let delta = parse_number(delta).ok_or_else(|| {
                        ValidationError::InvalidUpdate(format!("{delta} is not a number"))
                    })?;
                    let sum = match item.get(name) {
                        None => delta,
                        Some(AttributeValue::N(current)) => {
                            parse_number(current).ok_or_else(|| {
                                ValidationError::InvalidUpdate(format!(
                                    "{name} holds {current}, not a number"
                                ))
                            })? + delta
                        }
                        Some(_) => {
                            return Err(ValidationError::InvalidUpdate(format!(
                                "ADD to {name}, which is not a number"
                            )))
                        }
                    };
                    item.insert(
                        name.clone(),
                        AttributeValue::N(sum.normalized().to_plain_string()),
                    );
                }
                UpdateAction::Add(name, _) => {
                    return Err(ValidationError::InvalidUpdate(format!(
                        "ADD to {name} needs a number"
                    )))
                }
            }
        }
        Ok(())
    }

    /// The attribute names this update touches.
    pub fn attribute_names(&self) -> impl Iterator<Item = &str> {
        self.actions.iter().map(|a| match a {
            UpdateAction::Set(n, _) | UpdateAction::Remove(n) | UpdateAction::Add(n, _) => {
                n.as_str()
            }
        })
    }
}
