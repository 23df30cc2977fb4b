//! metadata.yaml parsing never panics, whatever the text.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(m) = capi_components::metadata::Metadata::parse(text) {
        let _ = m.contract_for("v1.2.3");
    }
});
