//! Integration tests of `eddy-projection`.
