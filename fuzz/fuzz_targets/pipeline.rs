//! The whole manifest pipeline (substitution, parsing, namespace fixing, customizations,
//! labels, ordering) on arbitrary components never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

const METADATA: &str = "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- major: 1\n  minor: 0\n  contract: v1beta2\n";
const PROVIDER: &str = "{\"apiVersion\":\"management.cluster.x-k8s.io/v1alpha1\",\"kind\":\"InfrastructureProvider\",\"metadata\":{\"name\":\"fuzz\",\"namespace\":\"fuzz-system\"},\"spec\":{\"version\":\"v1.0.0\",\"manager\":{\"verbosity\":3,\"featureGates\":{\"A\":true}},\"deployment\":{\"replicas\":2,\"containers\":[{\"name\":\"manager\",\"image\":\"example.com/x:v1\",\"args\":{\"--flag\":\"v\"}}]},\"patches\":[{\"patch\":\"[{\\\"op\\\":\\\"add\\\",\\\"path\\\":\\\"/metadata/labels/fuzz\\\",\\\"value\\\":\\\"y\\\"}]\",\"target\":{\"kind\":\"Deployment\"}}]}}";

fuzz_target!(|components: &str| {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(PROVIDER) else {
        return;
    };
    let Ok(provider) = capi_operator_api::AnyProvider::from_value(value) else {
        return;
    };
    let release = capi_release::Release {
        version: "v1.0.0".into(),
        metadata: METADATA.into(),
        components: components.into(),
    };
    let _ = capi_components::render::render(&provider, &release, |k| {
        (k == "SET").then(|| "value".to_string())
    });
});
