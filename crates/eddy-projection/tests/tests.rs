//! Integration tests of `eddy-projection`: one binary, one module per area.

mod support;

mod attach_load;
mod checkpoints;
mod compaction;
mod declare;
mod durability;
mod durable;
mod examples;
mod follow;
mod inspect;
mod metrics;
mod properties;
mod retention;
mod run;
mod sizes;
mod spec;
mod terminal;
mod transaction;
mod transaction_sqlite;
mod wake;
