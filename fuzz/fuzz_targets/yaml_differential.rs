//! The fast YAML parser agrees with serde-saphyr: whenever it accepts an input, serde-saphyr
//! must parse it to the same values.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let limits = capi_yaml::Limits::default();
    if let Ok(fast) = capi_yaml::internals::parse_documents_fast(text, &limits) {
        let full = capi_yaml::internals::parse_documents_full(text, &limits);
        assert_eq!(Some(fast), full.ok(), "fast and full parsers disagree on {text:?}");
    }
});
