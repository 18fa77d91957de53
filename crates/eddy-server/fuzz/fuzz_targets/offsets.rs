//! `cargo fuzz run offsets` (from `crates/eddy-server`): see the harness in
//! `eddy_server_fuzz::offsets`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| eddy_server_fuzz::offsets(data));
