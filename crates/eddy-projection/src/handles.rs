//! Typed handles to a declaration's inputs and outputs, and what the
//! declaration keeps about each stream behind them.
//!
//! A handle is a small `Copy` value that names one input or output of one
//! declaration and carries its item type, so a handler reads an input's
//! items and writes an output's items with the compiler checking the types.

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;
use eddy_streams::{Route, StateStream};

/// Decodes one input slice's messages into a boxed `Vec<T>`; an error names
/// the message that does not decode.
pub(crate) type Decoder =
    Arc<dyn Fn(&[Bytes]) -> Result<Box<dyn Any + Send + Sync>, (usize, String)> + Send + Sync>;

/// Which declaration, and which of its inputs or outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Place {
    pub declaration: u64,
    pub index: usize,
}

/// A typed handle to an input of a declaration, returned by
/// [`Declare::input`](crate::Declare::input): its items are `T`.
///
/// Hand it to [`on`](crate::Entries::on) to handle the input's entries, or
/// to [`Batch::items`](crate::Batch::items) in a batch handler. A handler
/// that takes the input's items as another type does not compile:
///
/// ```compile_fail
/// # use eddy_projection::Declare;
/// # use eddy_streams::JsonStream;
/// # let numbers = JsonStream::<u32>::new("Test/N", "n").unwrap();
/// let declare = Declare::<()>::new("lengths");
/// let input = declare.input("n", &numbers);
/// let lengths = declare
///     .fold(0usize)
///     .on(input, |sum, entry, _| sum + entry.item.len())
///     .build();
/// ```
pub struct Input<T> {
    pub(crate) place: Place,
    item: PhantomData<fn() -> T>,
}

/// A typed handle to a JSON output of a declaration, returned by
/// [`Declare::output`](crate::Declare::output): it takes `T` items through
/// [`Emits::push`](crate::Emits::push).
pub struct Output<T> {
    pub(crate) place: Place,
    item: PhantomData<fn(T)>,
}

/// A handle to a state output of a declaration, returned by
/// [`Declare::state_output`](crate::Declare::state_output): it takes
/// controls, and its [`Collection`]s take row changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StateOutput {
    pub(crate) place: Place,
}

/// A typed handle to one collection of a state output, returned by
/// [`Declare::collection`](crate::Declare::collection): its rows are `R`.
pub struct Collection<R> {
    pub(crate) output: StateOutput,
    pub(crate) index: usize,
    row: PhantomData<fn(R)>,
}

macro_rules! copy_handle {
    ($name:ident) => {
        impl<T> Clone for $name<T> {
            fn clone(&self) -> Self {
                *self
            }
        }

        impl<T> Copy for $name<T> {}

        impl<T> fmt::Debug for $name<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("index", &self.place().index)
                    .field("item", &std::any::type_name::<T>())
                    .finish()
            }
        }
    };
}

copy_handle!(Input);
copy_handle!(Output);
copy_handle!(Collection);

impl<T> Input<T> {
    pub(crate) fn new(place: Place) -> Self {
        Input {
            place,
            item: PhantomData,
        }
    }

    fn place(&self) -> Place {
        self.place
    }
}

impl<T> Output<T> {
    pub(crate) fn new(place: Place) -> Self {
        Output {
            place,
            item: PhantomData,
        }
    }

    fn place(&self) -> Place {
        self.place
    }
}

impl<R> Collection<R> {
    pub(crate) fn new(output: StateOutput, index: usize) -> Self {
        Collection {
            output,
            index,
            row: PhantomData,
        }
    }

    fn place(&self) -> Place {
        self.output.place
    }
}

/// What a declaration keeps about one input: its name, route and decoder.
#[derive(Clone)]
pub(crate) struct InputSpec {
    pub name: String,
    pub route: Route,
    pub decode: Decoder,
    /// Whether a binding goes on from the earliest message kept when
    /// retention dropped messages it had not read
    /// ([`Declare::accept_dropped_history`](crate::Declare::accept_dropped_history)).
    pub accepts_dropped: bool,
    /// Whether a binding reads ranges that compaction thinned
    /// ([`Declare::accept_compaction`](crate::Declare::accept_compaction)).
    pub accepts_compaction: bool,
}

impl fmt::Debug for InputSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Input")
            .field("name", &self.name)
            .field("route", &self.route.template())
            .finish()
    }
}

/// How one output's items are written.
#[derive(Clone)]
pub(crate) enum OutputKind {
    /// A JSON stream: items arrive encoded.
    Json,
    /// A state stream, with its collection names in handle order.
    State {
        stream: StateStream,
        collections: Vec<String>,
    },
}

/// What a declaration keeps about one output.
#[derive(Clone)]
pub(crate) struct OutputSpec {
    pub name: String,
    pub route: Route,
    pub kind: OutputKind,
    /// Lives on another owner: must exist before the first append.
    pub foreign: bool,
}

impl fmt::Debug for OutputSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Output")
            .field("name", &self.name)
            .field("route", &self.route.template())
            .field("foreign", &self.foreign)
            .finish()
    }
}
