//! clusterctl-compatible substitution never panics, and a text without `$` comes back as is.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let lookup = |k: &str| match k {
        "SET" => Some("value".to_string()),
        "EMPTY" => Some(String::new()),
        _ => None,
    };
    let out = capi_envsubst::process(text, lookup);
    if !text.contains('$') {
        assert_eq!(out.ok().as_deref(), Some(text));
    }
});
