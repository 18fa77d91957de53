//! The `eddy` command line.
fn main() {}
