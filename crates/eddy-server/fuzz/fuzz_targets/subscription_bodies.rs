//! `cargo fuzz run subscription_bodies` (from `crates/eddy-server`): see the harness in
//! `eddy_server_fuzz::subscription_bodies`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| eddy_server_fuzz::subscription_bodies(data));
