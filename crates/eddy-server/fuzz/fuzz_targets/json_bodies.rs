//! `cargo fuzz run json_bodies` (from `crates/eddy-server`): see the harness in
//! `eddy_server_fuzz::json_bodies`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| eddy_server_fuzz::json_bodies(data));
