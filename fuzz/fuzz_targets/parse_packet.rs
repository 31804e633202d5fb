//! Any bytes as a frame of any supported link type.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    wirelab_trace::fuzzing::parse_any(data);
});
