#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fabrik_fuzz_targets::patch(data);
});
