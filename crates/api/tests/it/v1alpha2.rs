//! The `operator.cluster.x-k8s.io/v1alpha2` API of kubernetes-sigs/cluster-api-operator: its
//! documented example objects deserialize and mean the same in this operator's own API, field
//! names and types match that API, the CRDs carry its names, columns and validations, and the
//! status written in its vocabulary keeps `kubectl wait --for=condition=Ready` working.

use std::collections::BTreeMap;

use capi_operator_api::{
    self as api, ContainerImage, ImageMeta, ProviderType,
    v1alpha2::{self, ConversionError, Provider as _},
};
use capi_test_support::{
    cluster,
    go_examples::{
        AWS_FLAGS, AWS_IMAGE, CUSTOM_AZURE_URL, KUBEADM_RESOURCES, QUICKSTART_AWS, QUICKSTART_CORE,
        VSPHERE_DEFAULT,
    },
};
use k8s_openapi::apimachinery::pkg::{apis::meta::v1::Condition, util::intstr::IntOrString};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

type TestResult = Result<(), Box<dyn std::error::Error>>;
type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn yaml<T: DeserializeOwned>(text: &str) -> Res<T> {
    Ok(capi_yaml::from_str(text)?)
}

// The spec in this operator's API; the examples set nothing the conversion ignores.
fn convert(s: &v1alpha2::ProviderSpec) -> Res<api::ProviderSpec> {
    let converted = s.to_v1alpha1()?;
    assert_eq!(converted.ignored, Vec::<String>::new());
    Ok(converted.spec)
}

// The conversion of a spec written as JSON: the converted spec (nothing ignored) or the error.
fn convert_json(spec: Value) -> Res<Result<api::ProviderSpec, ConversionError>> {
    let s: v1alpha2::ProviderSpec = serde_json::from_value(spec)?;
    Ok(s.to_v1alpha1().map(|c| {
        assert_eq!(c.ignored, Vec::<String>::new());
        c.spec
    }))
}

// Whether a conversion error is the one a case expects.
type Expected = fn(&ConversionError) -> bool;

// A whole-image override as the conversion writes it.
fn image(repository: &str, name: &str, tag: &str) -> Option<ContainerImage> {
    Some(ContainerImage::Meta(ImageMeta {
        repository: Some(repository.into()),
        name: Some(name.into()),
        tag: Some(tag.into()),
    }))
}

// Container args as this operator's API holds them.
fn args(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, IntOrString>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), IntOrString::String(v.to_string())))
            .collect(),
    )
}

// A string map from pairs.
fn strings<V: Clone>(pairs: &[(&str, V)]) -> BTreeMap<String, V> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Test data: the other operator's published examples (`capi_test_support::go_examples`, as
// published), and objects as its air-gapped, patching and additional-manifests pages show them
// (shortened, in our own layout).

const AZURE_CONFIGMAPS: &str = r"
apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: InfrastructureProvider
metadata:
  name: azure
  namespace: capz-system
spec:
  version: v1.9.3
  configSecret:
    name: azure-variables
  fetchConfig:
    selector:
      matchLabels:
        provider-components: azure
";

const AZURE_OCI: &str = r#"
apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: InfrastructureProvider
metadata:
  name: azure
  namespace: capz-system
spec:
  version: v1.9.3
  configSecret:
    name: azure-variables
  fetchConfig:
    oci: "my-oci-registry.example.com/my-provider:v1.9.3"
"#;

const AZURE_OCI_HTTP: &str = r#"
apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: InfrastructureProvider
metadata:
  name: azure
  namespace: capz-system
spec:
  version: v1.9.3
  fetchConfig:
    oci: "http://my-oci-registry.example.com/my-provider:v1.9.3"
"#;

// The provider spec reference page, with its container flag written as a flag ("--").
const SPEC_REFERENCE: &str = r#"
apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: InfrastructureProvider
metadata:
  name: example
  namespace: capi-system
spec:
  version: "v0.1.0"
  manager:
    profilerAddress: "localhost:6060"
    maxConcurrentReconciles: 5
    verbosity: 1
    featureGates:
      FeatureA: true
      FeatureB: false
  deployment:
    replicas: 2
    nodeSelector:
      disktype: ssd
    tolerations:
    - key: "example"
      operator: "Exists"
      effect: "NoSchedule"
    affinity:
      nodeAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
          - matchExpressions:
            - key: "example"
              operator: "In"
              values:
              - "true"
    containers:
    - name: "example-container"
      imageUrl: "example.com/repo/image-name:v1.0.0"
      args:
        "--example-arg": "value"
      env:
      - name: "EXAMPLE_ENV"
        value: "example-value"
      resources:
        limits:
          cpu: "1"
          memory: "1Gi"
        requests:
          cpu: "500m"
          memory: "500Mi"
      command:
      - "/bin/bash"
  configSecret:
    name: "provider-secret"
    namespace: capa-system
  fetchConfig:
    url: "https://github.com/owner/repo/releases"
"#;

const MANIFEST_PATCHES: &str = r"
apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: CoreProvider
metadata:
  name: cluster-api
  namespace: capi-system
spec:
  manifestPatches:
  - |
    apiVersion: v1
    kind: Service
    metadata:
      labels:
          test-label: test-value
";

const TARGETED_PATCHES: &str = r#"
apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: CoreProvider
metadata:
  name: cluster-api
  namespace: capi-system
spec:
  patches:
  - patch: |
      apiVersion: v1
      kind: Service
      metadata:
        labels:
          test-label: test-value
    target:
      kind: Service
  - patch: |
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: --additional-sync-machine-labels=topology.kubernetes.io/.*
    target:
      group: apps
      version: v1
      kind: Deployment
      name: capi-controller-manager
      namespace: capi-system
      labelSelector: "cluster.x-k8s.io/provider=cluster-api"
"#;

const ADDITIONAL_MANIFESTS: &str = r"
apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: CoreProvider
metadata:
  name: cluster-api
  namespace: capi-system
spec:
  additionalManifests:
    name: additional-manifests
";

// Every spec field of the API set once, in the API's JSON names.
fn full_spec() -> Value {
    json!({
        "version": "v1.10.0",
        "manager": {
            "syncPeriod": "10m",
            "leaderElection": {
                "leaderElect": true,
                "leaseDuration": "15s",
                "renewDeadline": "10s",
                "retryPeriod": "2s",
                "resourceLock": "leases",
                "resourceName": "controller-leader-election-capi",
                "resourceNamespace": "capi-system"
            },
            "cacheNamespace": "watched",
            "gracefulShutDown": "30s",
            "controller": { "groupKindConcurrency": { "Cluster.cluster.x-k8s.io": 7, "Machine": 3 } },
            "metrics": { "bindAddress": ":8080", "diagnosticsAddress": ":8443", "insecureDiagnostics": true },
            "health": { "healthProbeBindAddress": ":9440", "readinessEndpointName": "ready", "livenessEndpointName": "live" },
            "webhook": { "port": 9443, "host": "0.0.0.0", "certDir": "/certs" },
            "profilerAddress": "localhost:6060",
            "maxConcurrentReconciles": 10,
            "verbosity": 4,
            "featureGates": { "ClusterTopology": true, "MachinePool": false },
            "additionalArgs": { "--bootstrap-token-ttl": "20m" }
        },
        "deployment": {
            "replicas": 3,
            "nodeSelector": { "role": "infra" },
            "tolerations": [{ "key": "infra", "operator": "Exists", "effect": "NoSchedule" }],
            "affinity": { "podAntiAffinity": { "preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 1,
                "podAffinityTerm": { "topologyKey": "kubernetes.io/hostname", "labelSelector": { "matchLabels": { "app": "capi" } } }
            }] } },
            "containers": [{
                "name": "manager",
                "imageUrl": "registry.example/capi/cluster-api-controller:v1.10.0",
                "args": { "--cluster-concurrency": "4" },
                "env": [{ "name": "HTTP_PROXY", "value": "http://proxy:3128" }],
                "resources": { "limits": { "cpu": "1", "memory": "512Mi" } },
                "command": ["/manager"]
            }],
            "serviceAccountName": "capi-manager",
            "imagePullSecrets": [{ "name": "pull" }]
        },
        "configSecret": { "name": "capi-variables", "namespace": "secrets" },
        "fetchConfig": { "url": "https://github.com/kubernetes-sigs/cluster-api/releases" },
        "additionalManifests": { "name": "extra", "namespace": "manifests" },
        "patches": [{ "patch": "[]", "target": { "group": "apps", "version": "v1", "kind": "Deployment", "name": "x", "namespace": "y", "labelSelector": "a=b" } }],
        "additionalDeployments": {
            "capi-addon-controller": {
                "manager": { "verbosity": 2 },
                "deployment": { "replicas": 0 }
            }
        },
        "deletionPolicy": "Purge"
    })
}

// ---------------------------------------------------------------------------------------------
// Examples mean what the other operator's documentation says, in this operator's API.

#[test]
fn quick_start_objects_convert() -> TestResult {
    let core: v1alpha2::CoreProvider = yaml(QUICKSTART_CORE)?;
    assert_eq!(core.api_version, "operator.cluster.x-k8s.io/v1alpha2");
    assert_eq!(core.metadata.name.as_deref(), Some("cluster-api"));
    assert_eq!(core.spec, v1alpha2::ProviderSpec::default());
    assert_eq!(convert(&core.spec)?, api::ProviderSpec::default());

    let aws: v1alpha2::InfrastructureProvider = yaml(QUICKSTART_AWS)?;
    let spec = convert(&aws.spec)?;
    assert_eq!(spec.version.as_deref(), Some("v2.1.4"));
    assert_eq!(spec.secret_name.as_deref(), Some("credentials-secret"));
    assert_eq!(spec.secret_namespace, None);
    assert_eq!(spec.fetch_config, None);
    assert_eq!(spec.manager, None);
    assert_eq!(spec.deployment, None);
    Ok(())
}

#[test]
fn controller_flags_example_converts() -> TestResult {
    let p: v1alpha2::InfrastructureProvider = yaml(AWS_FLAGS)?;
    assert_eq!(p.kind, "InfrastructureProvider");
    let spec = convert(&p.spec)?;
    assert_eq!(spec.version.as_deref(), Some("v2.1.4"));
    assert_eq!(spec.secret_name.as_deref(), Some("aws-variables"));
    let manager = spec.manager.clone().ok_or("manager missing")?;
    assert_eq!(
        manager.sync_period,
        Some(IntOrString::String("500s".into()))
    );
    assert_eq!(
        manager.metrics.and_then(|m| m.bind_address).as_deref(),
        Some(":8181")
    );
    assert_eq!(manager.verbosity, None);
    assert_eq!(manager.max_concurrent_reconciles, None);
    assert_eq!(
        spec.fetch_config.as_ref().and_then(|f| f.url.as_deref()),
        Some("https://github.com/kubernetes-sigs/cluster-api-provider-aws/releases")
    );
    let deployment = spec.deployment.clone().ok_or("deployment missing")?;
    assert_eq!(deployment.containers.len(), 1);
    let c = &deployment.containers[0];
    assert_eq!(c.name, "manager");
    assert_eq!(c.image, None);
    let args = c.args.clone().ok_or("args missing")?;
    assert_eq!(
        args,
        BTreeMap::from([
            (
                "awscluster-concurrency".to_string(),
                IntOrString::String("12".into())
            ),
            (
                "awsmachine-concurrency".to_string(),
                IntOrString::String("11".into())
            ),
        ])
    );
    // The converted spec is already canonical for this operator.
    assert_eq!(spec.normalized(), spec);
    Ok(())
}

#[test]
fn image_override_replaces_the_whole_image() -> TestResult {
    let p: v1alpha2::InfrastructureProvider = yaml(AWS_IMAGE)?;
    // A reference without a tag means :latest, a bare name Docker Hub's library, as for the
    // container runtime the other operator hands the string to.
    for (url, want) in [
        (
            None,
            image("gcr.io/myregistry", "capa-controller", "v2.1.4-foo"),
        ),
        (
            Some("busybox"),
            image("docker.io/library", "busybox", "latest"),
        ),
        (
            Some("registry.example:5000/team/capa@sha256:abc"),
            image("registry.example:5000/team", "capa", "@sha256:abc"),
        ),
    ] {
        let mut s = p.spec.clone();
        if let Some(url) = url {
            s.deployment
                .as_mut()
                .ok_or("deployment missing")?
                .containers[0]
                .image_url = Some(url.into());
        }
        let d = convert(&s)?.deployment.ok_or("deployment missing")?;
        assert_eq!(d.containers[0].image, want, "{url:?}");
    }
    let mut s = p.spec.clone();
    s.deployment
        .as_mut()
        .ok_or("deployment missing")?
        .containers[0]
        .image_url = Some(" ".into());
    assert!(matches!(
        s.to_v1alpha1(),
        Err(ConversionError::Empty { field }) if field == "spec.deployment.containers[0].imageUrl"
    ));
    Ok(())
}

#[test]
fn resources_example_converts() -> TestResult {
    let p: v1alpha2::ControlPlaneProvider = yaml(KUBEADM_RESOURCES)?;
    let spec = convert(&p.spec)?;
    assert_eq!(spec.version.as_deref(), Some("v1.4.3"));
    assert_eq!(spec.secret_name.as_deref(), Some("capi-variables"));
    let c = &spec.deployment.ok_or("deployment missing")?.containers[0];
    let r = c.resources.clone().ok_or("resources missing")?;
    let limits = r.limits.ok_or("limits missing")?;
    let requests = r.requests.ok_or("requests missing")?;
    assert_eq!(limits["cpu"].0, "100m");
    assert_eq!(limits["memory"].0, "30Mi");
    assert_eq!(requests["memory"].0, "20Mi");
    assert_eq!(c.args, None);
    assert_eq!(c.env, None);
    assert_eq!(c.command, None);
    Ok(())
}

#[test]
fn fetch_config_examples_convert() -> TestResult {
    let p: v1alpha2::InfrastructureProvider = yaml(CUSTOM_AZURE_URL)?;
    let f = convert(&p.spec)?.fetch_config.ok_or("fetchConfig")?;
    assert_eq!(
        f.url.as_deref(),
        Some("https://github.com/myorg/awesome-azure-provider/releases")
    );
    assert_eq!((f.oci, f.selector), (None, None));

    let p: v1alpha2::InfrastructureProvider = yaml(VSPHERE_DEFAULT)?;
    let spec = convert(&p.spec)?;
    assert_eq!(spec.fetch_config, None);
    assert_eq!(spec.version.as_deref(), Some("v1.6.1"));
    assert_eq!(spec.secret_name.as_deref(), Some("vsphere-variables"));

    let p: v1alpha2::InfrastructureProvider = yaml(AZURE_CONFIGMAPS)?;
    let f = convert(&p.spec)?.fetch_config.ok_or("fetchConfig")?;
    let labels = f
        .selector
        .and_then(|s| s.match_labels)
        .ok_or("matchLabels")?;
    assert_eq!(
        labels.get("provider-components").map(String::as_str),
        Some("azure")
    );
    assert_eq!((f.url, f.oci), (None, None));

    for (text, want) in [
        (AZURE_OCI, "my-oci-registry.example.com/my-provider:v1.9.3"),
        (
            AZURE_OCI_HTTP,
            "http://my-oci-registry.example.com/my-provider:v1.9.3",
        ),
    ] {
        let p: v1alpha2::InfrastructureProvider = yaml(text)?;
        let f = convert(&p.spec)?.fetch_config.ok_or("fetchConfig")?;
        assert_eq!(f.oci.as_deref(), Some(want));
        assert_eq!((f.url, f.selector), (None, None));
    }

    // Empty strings count as absent; a plain-HTTP release URL cannot be fetched by either
    // operator; the scheme is case-insensitive.
    let mut spec = v1alpha2::ProviderSpec {
        fetch_config: Some(v1alpha2::FetchConfiguration {
            url: Some(String::new()),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(convert(&spec)?.fetch_config, None);
    spec.fetch_config = Some(v1alpha2::FetchConfiguration {
        url: Some("http://github.com/o/r/releases".into()),
        ..Default::default()
    });
    assert!(matches!(
        spec.to_v1alpha1(),
        Err(ConversionError::UnsupportedUrl { .. })
    ));
    spec.fetch_config = Some(v1alpha2::FetchConfiguration {
        url: Some("HTTPS://github.com/o/r/releases".into()),
        ..Default::default()
    });
    assert_eq!(
        convert(&spec)?.fetch_config.and_then(|f| f.url),
        Some("https://github.com/o/r/releases".to_string())
    );
    spec.fetch_config = Some(v1alpha2::FetchConfiguration {
        url: Some("https://github.com/o/r/releases".into()),
        oci: Some("r.example/p".into()),
        selector: None,
    });
    assert_eq!(spec.to_v1alpha1(), Err(ConversionError::ConflictingSources));
    Ok(())
}

#[test]
fn spec_reference_example_converts() -> TestResult {
    let p: v1alpha2::InfrastructureProvider = yaml(SPEC_REFERENCE)?;
    let spec = convert(&p.spec)?;
    assert_eq!(spec.version.as_deref(), Some("v0.1.0"));
    assert_eq!(spec.secret_name.as_deref(), Some("provider-secret"));
    assert_eq!(spec.secret_namespace.as_deref(), Some("capa-system"));
    let m = spec.manager.clone().ok_or("manager")?;
    assert_eq!(m.profiler_address.as_deref(), Some("localhost:6060"));
    assert_eq!(m.max_concurrent_reconciles, Some(5));
    // Verbosity 1 leaves --v as the release has it, as with the other operator.
    assert_eq!(m.verbosity, None);
    assert_eq!(
        m.feature_gates,
        Some(BTreeMap::from([
            ("FeatureA".to_string(), true),
            ("FeatureB".to_string(), false)
        ]))
    );
    // maxConcurrentReconciles never becomes the --max-concurrent-reconciles flag.
    assert_eq!(m.additional_args, None);
    let d = spec.deployment.clone().ok_or("deployment")?;
    assert_eq!(d.replicas, Some(2));
    assert_eq!(
        d.node_selector,
        Some(BTreeMap::from([(
            "disktype".to_string(),
            "ssd".to_string()
        )]))
    );
    let t = d.tolerations.clone().ok_or("tolerations")?;
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].key.as_deref(), Some("example"));
    assert_eq!(t[0].operator.as_deref(), Some("Exists"));
    assert_eq!(t[0].effect.as_deref(), Some("NoSchedule"));
    let terms = d
        .affinity
        .clone()
        .and_then(|a| a.node_affinity)
        .and_then(|n| n.required_during_scheduling_ignored_during_execution)
        .ok_or("nodeAffinity")?
        .node_selector_terms;
    let expr = &terms[0].match_expressions.clone().ok_or("expressions")?[0];
    assert_eq!(
        (expr.key.as_str(), expr.operator.as_str()),
        ("example", "In")
    );
    let c = &d.containers[0];
    assert_eq!(c.name, "example-container");
    assert_eq!(
        c.image,
        Some(ContainerImage::Meta(ImageMeta {
            repository: Some("example.com/repo".into()),
            name: Some("image-name".into()),
            tag: Some("v1.0.0".into()),
        }))
    );
    assert_eq!(
        c.args,
        Some(BTreeMap::from([(
            "example-arg".to_string(),
            IntOrString::String("value".into())
        )]))
    );
    let env = c.env.clone().ok_or("env")?;
    assert_eq!(
        (env[0].name.as_str(), env[0].value.as_deref()),
        ("EXAMPLE_ENV", Some("example-value"))
    );
    assert_eq!(
        c.resources
            .clone()
            .and_then(|r| r.requests)
            .ok_or("requests")?["cpu"]
            .0,
        "500m"
    );
    assert_eq!(c.command, Some(vec!["/bin/bash".to_string()]));
    assert_eq!(
        spec.fetch_config.and_then(|f| f.url).as_deref(),
        Some("https://github.com/owner/repo/releases")
    );

    // As the page literally writes the arg (no dashes), the other operator passes
    // "exampleArg=value" as a positional argument: no flag, so no equivalent here.
    let mut s = p.spec.clone();
    let d = s.deployment.as_mut().ok_or("deployment")?;
    d.containers[0].args = BTreeMap::from([("exampleArg".to_string(), "value".to_string())]);
    assert_eq!(
        s.to_v1alpha1(),
        Err(ConversionError::NotAFlag {
            field: "spec.deployment.containers[0].args".into(),
            key: "exampleArg".into()
        })
    );
    Ok(())
}

#[test]
fn patch_examples_convert() -> TestResult {
    let p: v1alpha2::CoreProvider = yaml(MANIFEST_PATCHES)?;
    let spec = convert(&p.spec)?;
    assert_eq!(spec.manifest_patches.len(), 1);
    assert!(spec.manifest_patches[0].starts_with("apiVersion: v1\nkind: Service\n"));
    assert!(spec.patches.is_empty());

    let p: v1alpha2::CoreProvider = yaml(TARGETED_PATCHES)?;
    let spec = convert(&p.spec)?;
    assert!(spec.manifest_patches.is_empty());
    assert_eq!(spec.patches.len(), 2);
    assert!(spec.patches[0].patch.contains("test-label: test-value"));
    assert_eq!(
        spec.patches[0].target,
        Some(api::PatchSelector {
            kind: Some("Service".into()),
            ..Default::default()
        })
    );
    assert!(spec.patches[1].patch.starts_with("- op: add\n"));
    assert_eq!(
        spec.patches[1].target,
        Some(api::PatchSelector {
            group: Some("apps".into()),
            version: Some("v1".into()),
            kind: Some("Deployment".into()),
            name: Some("capi-controller-manager".into()),
            namespace: Some("capi-system".into()),
            label_selector: Some("cluster.x-k8s.io/provider=cluster-api".into()),
        })
    );
    // No target: every object, in both APIs.
    let s = v1alpha2::ProviderSpec {
        patches: vec![v1alpha2::Patch {
            patch: "{}".into(),
            target: None,
        }],
        ..Default::default()
    };
    assert_eq!(convert(&s)?.patches[0].target, None);

    let p: v1alpha2::CoreProvider = yaml(ADDITIONAL_MANIFESTS)?;
    let spec = convert(&p.spec)?;
    assert_eq!(
        spec.additional_manifests,
        Some(api::ConfigMapReference {
            name: "additional-manifests".into(),
            namespace: None
        })
    );
    Ok(())
}

#[test]
fn every_field_maps() -> TestResult {
    let s: v1alpha2::ProviderSpec = serde_json::from_value(full_spec())?;
    let spec = convert(&s)?;
    assert_eq!(spec.version.as_deref(), Some("v1.10.0"));
    assert!(!spec.paused);
    assert_eq!(spec.deletion_policy, api::DeletionPolicy::Purge);
    let m = spec.manager.clone().ok_or("manager")?;
    assert_eq!(m.sync_period, Some(IntOrString::String("600s".into())));
    assert_eq!(
        m.leader_election,
        Some(api::LeaderElectionConfiguration {
            leader_elect: Some(true),
            lease_duration: Some("15s".into()),
            renew_deadline: Some("10s".into()),
            retry_period: Some("2s".into()),
            resource_lock: Some("leases".into()),
            resource_name: Some("controller-leader-election-capi".into()),
            resource_namespace: Some("capi-system".into()),
        })
    );
    assert_eq!(m.cache_namespace.as_deref(), Some("watched"));
    assert_eq!(m.graceful_shutdown.as_deref(), Some("30s"));
    assert_eq!(
        m.metrics,
        Some(api::ControllerMetrics {
            bind_address: Some(":8080".into()),
            diagnostics_address: Some(":8443".into()),
            insecure_diagnostics: Some(true),
        })
    );
    assert_eq!(
        m.health,
        Some(api::ControllerHealth {
            health_probe_bind_address: Some(":9440".into()),
            readiness_endpoint_name: Some("ready".into()),
            liveness_endpoint_name: Some("live".into()),
        })
    );
    assert_eq!(
        m.webhook,
        Some(api::ControllerWebhook {
            port: Some(9443),
            host: Some("0.0.0.0".into()),
            cert_dir: Some("/certs".into()),
        })
    );
    assert_eq!(m.profiler_address.as_deref(), Some("localhost:6060"));
    assert_eq!(m.max_concurrent_reconciles, Some(10));
    assert_eq!(m.verbosity, Some(4));
    assert_eq!(m.debug, None);
    assert_eq!(m.metrics_address, None);
    assert_eq!(
        m.feature_gates,
        Some(BTreeMap::from([
            ("ClusterTopology".to_string(), true),
            ("MachinePool".to_string(), false)
        ]))
    );
    // groupKindConcurrency becomes the managers' real --{kind}-concurrency flags.
    assert_eq!(
        m.additional_args,
        Some(BTreeMap::from([
            ("bootstrap-token-ttl".to_string(), "20m".to_string()),
            ("cluster-concurrency".to_string(), "7".to_string()),
            ("machine-concurrency".to_string(), "3".to_string()),
        ]))
    );
    let d = spec.deployment.clone().ok_or("deployment")?;
    assert_eq!(d.replicas, Some(3));
    assert_eq!(d.service_account_name.as_deref(), Some("capi-manager"));
    assert_eq!(
        d.image_pull_secrets
            .clone()
            .ok_or("pull secrets")?
            .first()
            .map(|s| s.name.as_str()),
        Some("pull")
    );
    assert!(
        d.affinity
            .as_ref()
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .is_some()
    );
    let c = &d.containers[0];
    assert_eq!(
        c.args,
        Some(BTreeMap::from([(
            "cluster-concurrency".to_string(),
            IntOrString::String("4".into())
        )]))
    );
    assert_eq!(c.command, Some(vec!["/manager".to_string()]));
    assert_eq!(
        c.env.as_ref().map(|e| e[0].name.as_str()),
        Some("HTTP_PROXY")
    );
    assert_eq!(spec.secret_name.as_deref(), Some("capi-variables"));
    assert_eq!(spec.secret_namespace.as_deref(), Some("secrets"));
    assert_eq!(
        spec.additional_manifests,
        Some(api::ConfigMapReference {
            name: "extra".into(),
            namespace: Some("manifests".into())
        })
    );
    assert_eq!(
        spec.fetch_config.and_then(|f| f.url).as_deref(),
        Some("https://github.com/kubernetes-sigs/cluster-api/releases")
    );
    assert_eq!(spec.patches[0].patch, "[]");
    let extra = &spec.additional_deployments["capi-addon-controller"];
    assert_eq!(extra.manager.as_ref().and_then(|m| m.verbosity), Some(2));
    assert_eq!(extra.deployment.as_ref().and_then(|d| d.replicas), Some(0));
    Ok(())
}

#[test]
fn manager_settings_follow_the_other_operators_rendering() -> TestResult {
    let manager = |m: Value| -> Res<Result<Option<api::ManagerSpec>, ConversionError>> {
        Ok(convert_json(json!({ "manager": m }))?.map(|s| s.manager))
    };
    // Only the defaulted verbosity: nothing changes on the manager.
    assert_eq!(manager(json!({ "verbosity": 1 }))??, None);
    assert_eq!(manager(json!({}))??, None);
    // Verbosity 0 is passed as --v=0.
    assert_eq!(
        manager(json!({ "verbosity": 0 }))??.and_then(|m| m.verbosity),
        Some(0)
    );
    // Durations in whole seconds; zero (or rounding to zero) leaves the release's setting.
    assert_eq!(
        manager(json!({ "syncPeriod": "1h30m" }))??.and_then(|m| m.sync_period),
        Some(IntOrString::String("5400s".into()))
    );
    assert_eq!(manager(json!({ "syncPeriod": "0s" }))??, None);
    assert_eq!(manager(json!({ "syncPeriod": "400ms" }))??, None);
    // insecureDiagnostics false is not passed at all.
    assert_eq!(
        manager(json!({ "metrics": { "insecureDiagnostics": false } }))??,
        None
    );
    // Settings the other operator silently ignored are ignored too, but named.
    for (controller, field) in [
        (
            json!({ "cacheSyncTimeout": 120000000000_i64 }),
            "spec.manager.controller.cacheSyncTimeout",
        ),
        (
            json!({ "recoverPanic": true }),
            "spec.manager.controller.recoverPanic",
        ),
    ] {
        let s: v1alpha2::ProviderSpec =
            serde_json::from_value(json!({ "manager": { "controller": controller } }))?;
        let converted = s.to_v1alpha1()?;
        assert_eq!(converted.spec.manager, None);
        assert_eq!(converted.ignored.len(), 1);
        assert!(
            converted.ignored[0].starts_with(&format!("{field} is ignored")),
            "{converted:?}"
        );
    }
    // Values that cannot be expressed are errors: malformed durations, free-form flags
    // without their dashes, the same flag twice with different values, out-of-range numbers.
    let errors: [(Value, Expected); 8] = [
        (
            json!({ "syncPeriod": "ten minutes" }),
            |e| matches!(e, ConversionError::InvalidDuration { field, .. } if field == "spec.manager.syncPeriod"),
        ),
        (
            json!({ "gracefulShutDown": "soon" }),
            |e| matches!(e, ConversionError::InvalidDuration { field, .. } if field == "spec.manager.gracefulShutDown"),
        ),
        (
            json!({ "additionalArgs": { "foo": "1" } }),
            |e| matches!(e, ConversionError::NotAFlag { key, .. } if key == "foo"),
        ),
        (json!({ "additionalArgs": { "--": "1" } }), |e| {
            matches!(e, ConversionError::InvalidFlagName { .. })
        }),
        (
            json!({
                "controller": { "groupKindConcurrency": { "Cluster": 2 } },
                "additionalArgs": { "--cluster-concurrency": "5" }
            }),
            |e| matches!(e, ConversionError::ConflictingFlag { flag, .. } if flag == "cluster-concurrency"),
        ),
        (
            json!({ "cacheNamespace": "a", "additionalArgs": { "--namespace": "b" } }),
            |e| matches!(e, ConversionError::ConflictingFlag { flag, .. } if flag == "namespace"),
        ),
        (json!({ "webhook": { "port": 70000 } }), |e| {
            matches!(e, ConversionError::OutOfRange { value: 70000, .. })
        }),
        (json!({ "maxConcurrentReconciles": 3000000000_i64 }), |e| {
            matches!(e, ConversionError::OutOfRange { .. })
        }),
    ];
    for (m, expected) in errors {
        let result = manager(m.clone())?;
        assert!(matches!(&result, Err(e) if expected(e)), "{m}: {result:?}");
    }
    assert_eq!(
        manager(json!({ "additionalArgs": { "--v": "3", "-v": "3" } }))??
            .and_then(|m| m.additional_args),
        Some(strings(&[("v", "3".to_string())]))
    );
    // A namespace flag becomes cacheNamespace, which this operator turns into --namespace.
    assert_eq!(
        manager(json!({ "additionalArgs": { "--namespace": "team-a" } }))??
            .and_then(|m| m.cache_namespace),
        Some("team-a".to_string())
    );
    // Leader election off: only --leader-elect=false; zero durations stay unset.
    assert_eq!(
        manager(json!({ "leaderElection": {
            "leaderElect": false, "leaseDuration": "0s", "renewDeadline": "0s", "retryPeriod": "0s",
            "resourceLock": "", "resourceName": "", "resourceNamespace": ""
        } }))??
        .and_then(|m| m.leader_election),
        Some(api::LeaderElectionConfiguration {
            leader_elect: Some(false),
            ..Default::default()
        })
    );
    Ok(())
}

#[test]
fn container_namespace_flag_moves_to_the_manager() -> TestResult {
    let convert = |d: Value, m: Option<Value>| {
        let mut spec = json!({ "deployment": d });
        if let Some(m) = m {
            spec["manager"] = m;
        }
        convert_json(spec)
    };
    let manager_args = json!({ "containers": [{ "name": "manager", "args": { "--namespace": "ns1", "--v": "2" } }] });
    let spec = convert(manager_args.clone(), None)??;
    assert_eq!(
        spec.manager.and_then(|m| m.cache_namespace).as_deref(),
        Some("ns1")
    );
    assert_eq!(
        spec.deployment.ok_or("deployment")?.containers[0].args,
        args(&[("v", "2")])
    );
    // manager.cacheNamespace is applied after the container args, so it wins.
    let spec = convert(
        manager_args.clone(),
        Some(json!({ "cacheNamespace": "ns2" })),
    )??;
    assert_eq!(
        spec.manager.and_then(|m| m.cache_namespace).as_deref(),
        Some("ns2")
    );
    // An additional arg repeating a flag the container already sets is refused there too.
    assert!(matches!(
        convert(
            manager_args,
            Some(json!({ "additionalArgs": { "--namespace": "ns3" } }))
        )?,
        Err(ConversionError::ConflictingFlag { .. })
    ));
    // Other containers have no manager setting to carry it.
    assert!(matches!(
        convert(json!({ "containers": [{ "name": "sidecar", "args": { "--namespace": "x" } }] }), None)?,
        Err(ConversionError::NamespaceFlag { field }) if field == "spec.deployment.containers[0].args"
    ));
    Ok(())
}

#[test]
fn invalid_values_are_errors() -> TestResult {
    assert_eq!(
        convert_json(json!({ "version": " 1.2.3-rc.1+b5 " }))??.version,
        Some("v1.2.3-rc.1+b5".to_string())
    );
    let errors: [(Value, Expected); 7] = [
        (json!({ "version": "latest" }), |e| {
            matches!(e, ConversionError::InvalidVersion { .. })
        }),
        (json!({ "version": "v1.2" }), |e| {
            matches!(e, ConversionError::InvalidVersion { .. })
        }),
        (json!({ "configSecret": { "name": "" } }), |e| {
            *e == ConversionError::Empty {
                field: "spec.configSecret.name".into(),
            }
        }),
        (json!({ "additionalManifests": { "name": " " } }), |e| {
            *e == ConversionError::Empty {
                field: "spec.additionalManifests.name".into(),
            }
        }),
        (
            json!({ "deployment": { "replicas": 4294967296_i64 } }),
            |e| matches!(e, ConversionError::OutOfRange { field, .. } if field == "spec.deployment.replicas"),
        ),
        (
            json!({ "deployment": { "containers": [{ "name": "" }] } }),
            |e| matches!(e, ConversionError::Empty { field } if field == "spec.deployment.containers[0].name"),
        ),
        // Errors in an additional Deployment name it.
        (
            json!({ "additionalDeployments": { "extra": { "manager": { "webhook": { "port": 0 } } } } }),
            |e| matches!(e, ConversionError::OutOfRange { field, .. } if field == "spec.additionalDeployments[extra].manager.webhook.port"),
        ),
    ];
    for (spec, expected) in errors {
        let result = convert_json(spec.clone())?;
        assert!(
            matches!(&result, Err(e) if expected(e)),
            "{spec}: {result:?}"
        );
    }
    // Ignored settings in an additional Deployment name it too.
    let s: v1alpha2::ProviderSpec = serde_json::from_value(
        json!({ "additionalDeployments": { "extra": { "manager": { "controller": { "recoverPanic": false } } } } }),
    )?;
    let ignored = s.to_v1alpha1()?.ignored;
    assert!(
        matches!(ignored.as_slice(), [note] if note.starts_with("spec.additionalDeployments[extra].manager.controller.recoverPanic is ignored")),
        "{ignored:?}"
    );
    // The messages say what to change.
    let msg = ConversionError::NotAFlag {
        field: "spec.manager.additionalArgs".into(),
        key: "foo".into(),
    }
    .to_string();
    assert!(msg.contains("\"--foo\""), "{msg}");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Serde: JSON names and round trips.

#[test]
fn json_round_trip_keeps_every_field_and_name() -> TestResult {
    let input = full_spec();
    let s: v1alpha2::ProviderSpec = serde_json::from_value(input.clone())?;
    assert_eq!(serde_json::to_value(&s)?, input);
    let again: v1alpha2::ProviderSpec = serde_json::from_value(serde_json::to_value(&s)?)?;
    assert_eq!(again, s);

    // Whole objects of every example, through YAML and JSON.
    for text in examples() {
        let value: Value = yaml(text)?;
        let kind = value["kind"].as_str().ok_or("kind")?;
        let back = match ProviderType::from_kind(kind).ok_or("unknown kind")? {
            ProviderType::Core => round_trip::<v1alpha2::CoreProvider>(&value)?,
            ProviderType::Bootstrap => round_trip::<v1alpha2::BootstrapProvider>(&value)?,
            ProviderType::ControlPlane => round_trip::<v1alpha2::ControlPlaneProvider>(&value)?,
            ProviderType::Infrastructure => round_trip::<v1alpha2::InfrastructureProvider>(&value)?,
            ProviderType::Ipam => round_trip::<v1alpha2::IPAMProvider>(&value)?,
            ProviderType::RuntimeExtension => {
                round_trip::<v1alpha2::RuntimeExtensionProvider>(&value)?
            }
            ProviderType::Addon => round_trip::<v1alpha2::AddonProvider>(&value)?,
        };
        // What went in comes out (an absent spec comes out as {}).
        let mut want = value.clone();
        if want.get("spec").is_none() {
            want["spec"] = json!({});
        }
        assert_eq!(back, want, "{text}");
    }

    // Presence is kept where it carries meaning: an explicitly empty node selector,
    // toleration list or pull-secret list replaces the release's, and an empty url still
    // counts for the CRD's "exactly one source" rule.
    let s: v1alpha2::ProviderSpec = serde_json::from_value(json!({
        "deployment": { "nodeSelector": {}, "tolerations": [], "imagePullSecrets": [] },
        "fetchConfig": { "url": "" }
    }))?;
    let back = serde_json::to_value(&s)?;
    assert_eq!(back["deployment"]["nodeSelector"], json!({}));
    assert_eq!(back["deployment"]["tolerations"], json!([]));
    assert_eq!(back["deployment"]["imagePullSecrets"], json!([]));
    assert_eq!(back["fetchConfig"], json!({ "url": "" }));
    let d = convert(&s)?.deployment.ok_or("deployment")?;
    assert_eq!(d.node_selector, Some(BTreeMap::new()));
    assert_eq!(d.tolerations, Some(vec![]));
    assert_eq!(d.image_pull_secrets, Some(vec![]));
    Ok(())
}

fn round_trip<P: v1alpha2::Provider>(value: &Value) -> Res<Value> {
    let p: P = serde_json::from_value(value.clone())?;
    let back = serde_json::to_value(&p)?;
    let again: P = serde_json::from_value(back.clone())?;
    assert_eq!(serde_json::to_value(&again)?, back);
    Ok(back)
}

fn examples() -> [&'static str; 14] {
    [
        QUICKSTART_CORE,
        QUICKSTART_AWS,
        AWS_FLAGS,
        AWS_IMAGE,
        KUBEADM_RESOURCES,
        CUSTOM_AZURE_URL,
        VSPHERE_DEFAULT,
        AZURE_CONFIGMAPS,
        AZURE_OCI,
        AZURE_OCI_HTTP,
        SPEC_REFERENCE,
        MANIFEST_PATCHES,
        TARGETED_PATCHES,
        ADDITIONAL_MANIFESTS,
    ]
}

#[test]
fn kinds_are_typed_resources() {
    use kube::Resource;
    assert_eq!(
        v1alpha2::CoreProvider::api_version(&()),
        "operator.cluster.x-k8s.io/v1alpha2"
    );
    assert_eq!(v1alpha2::IPAMProvider::kind(&()), "IPAMProvider");
    assert_eq!(
        v1alpha2::RuntimeExtensionProvider::plural(&()),
        "runtimeextensionproviders"
    );
    let p = v1alpha2::AddonProvider::new("helm", "caaph-system", Default::default());
    assert_eq!(p.kind, "AddonProvider");
    assert_eq!(p.api_version, v1alpha2::API_VERSION);
    assert_eq!(
        <v1alpha2::AddonProvider as v1alpha2::Provider>::TYPE,
        ProviderType::Addon
    );
}

// ---------------------------------------------------------------------------------------------
// Status in the other operator's vocabulary.

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Res<Condition> {
    Ok(serde_json::from_value(json!({
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2025-01-01T00:00:00Z",
        "observedGeneration": 3,
    }))?)
}

fn our_status() -> Res<api::ProviderStatus> {
    use api::conditions::{self as c, reason as r};
    Ok(api::ProviderStatus {
        contract: Some("v1beta2".into()),
        conditions: vec![
            condition(c::PREFLIGHT_CHECK_PASSED, "True", r::PASSED, "")?,
            condition(c::PROVIDER_INSTALLED, "True", r::INSTALLED, "installed")?,
            condition(c::PROVIDER_UPGRADED, "True", r::UPGRADED, "")?,
            condition(c::READY, "True", r::AVAILABLE, "all available")?,
            condition(c::RECONCILING, "False", r::RECONCILED, "")?,
            condition(c::MANAGER_CONFIGURED, "False", "", &"x".repeat(40000))?,
            condition(c::READY, "False", r::NOT_AVAILABLE, "duplicate")?,
        ],
        observed_generation: Some(3),
        installed_version: Some("v1.10.0".into()),
        release_digests: [("v1.10.0".to_string(), "ab12".to_string())].into(),
        summary: Some("ComponentsFetchError: wanted v1.10.1, installed v1.10.0".into()),
        available_versions: None,
    })
}

#[test]
fn status_speaks_the_other_operators_vocabulary() -> TestResult {
    use v1alpha2::conditions::{self as go, reason as gr};
    let ours = our_status()?;
    let s = v1alpha2::go_status(&ours);
    assert_eq!(s.contract.as_deref(), Some("v1beta2"));
    assert_eq!(s.installed_version.as_deref(), Some("v1.10.0"));
    assert_eq!(s.observed_generation, Some(3));
    // One condition per type (the first one wins), the other operator's reasons.
    assert_eq!(s.conditions.len(), 6);
    let reason = |t: &str| s.condition(t).map(|c| c.reason.clone());
    assert_eq!(
        reason(go::PREFLIGHT_CHECK_PASSED).as_deref(),
        Some(gr::PREFLIGHT_CHECKS_PASSED)
    );
    assert_eq!(
        reason(go::PROVIDER_INSTALLED).as_deref(),
        Some(gr::PROVIDER_INSTALLED)
    );
    assert_eq!(
        reason(go::PROVIDER_UPGRADED).as_deref(),
        Some(gr::PROVIDER_UPGRADED)
    );
    assert_eq!(
        reason(go::READY).as_deref(),
        Some(gr::MINIMUM_REPLICAS_AVAILABLE)
    );
    assert!(s.is_true(go::READY));
    assert_eq!(reason("Reconciling").as_deref(), Some("Reconciled"));
    // An empty reason becomes the type; an overlong message is cut to metav1's limit.
    let mc = s
        .condition("ManagerConfigured")
        .ok_or("ManagerConfigured")?;
    assert_eq!(mc.reason, "ManagerConfigured");
    assert_eq!(mc.message.len(), v1alpha2::MAX_CONDITION_MESSAGE_BYTES);
    // Everything else is kept.
    let ready = s.condition(go::READY).ok_or("Ready")?;
    assert_eq!(ready.message, "all available");
    assert_eq!(ready.observed_generation, Some(3));
    assert_eq!(
        ready.last_transition_time,
        ours.conditions[3].last_transition_time
    );

    // Failure reasons.
    use api::conditions::{self as c, reason as r};
    let failing = api::ProviderStatus {
        conditions: vec![
            condition(
                c::PREFLIGHT_CHECK_PASSED,
                "False",
                r::MORE_THAN_ONE_CORE,
                "m",
            )?,
            condition(c::PROVIDER_INSTALLED, "False", r::INVALID_PATCHES, "m")?,
            condition(c::READY, "False", r::NO_DEPLOYMENT, "m")?,
        ],
        ..Default::default()
    };
    let s = v1alpha2::go_status(&failing);
    let reasons: Vec<&str> = s.conditions.iter().map(|c| c.reason.as_str()).collect();
    assert_eq!(
        reasons,
        [
            gr::MORE_THAN_ONE_EXISTS,
            gr::COMPONENTS_PATCH_ERROR,
            gr::NO_DEPLOYMENT_AVAILABLE_CONDITION
        ]
    );
    assert_eq!(
        v1alpha2::conditions::go_reason(c::PREFLIGHT_CHECK_PASSED, r::DUPLICATE_NAME),
        gr::MORE_THAN_ONE_EXISTS
    );
    assert_eq!(
        v1alpha2::conditions::go_reason(c::PREFLIGHT_CHECK_PASSED, r::WAITING_FOR_CORE),
        gr::WAITING_FOR_CORE_PROVIDER_READY
    );
    assert_eq!(
        v1alpha2::conditions::go_reason(c::PREFLIGHT_CHECK_PASSED, r::INCORRECT_VERSION),
        gr::INCORRECT_VERSION_FORMAT
    );

    // Serialized as metav1.Conditions, every required field present.
    let v = serde_json::to_value(&s)?;
    for c in v["conditions"].as_array().ok_or("conditions")? {
        for key in ["type", "status", "reason", "message", "lastTransitionTime"] {
            assert!(c.get(key).is_some(), "{key} missing in {c}");
        }
    }
    // The fields this operator reads when adopting a provider are kept.
    let back = v1alpha2::go_status(&ours);
    assert_eq!(back.installed_version, ours.installed_version);
    assert_eq!(back.contract, ours.contract);
    Ok(())
}

#[test]
fn status_written_by_the_other_operator_deserializes() -> TestResult {
    // A status as the other operator writes it since v0.24, and one as it wrote it before
    // (Cluster API v1beta1 conditions: severity, no reason on True conditions).
    let s: v1alpha2::ProviderStatus = yaml(
        r#"
conditions:
- lastTransitionTime: "2025-06-01T10:00:00Z"
  message: Deployment has minimum availability.
  reason: MinimumReplicasAvailable
  status: "True"
  type: Ready
- lastTransitionTime: "2025-06-01T09:59:00Z"
  message: Provider installed successfully
  reason: ProviderInstalled
  status: "True"
  type: ProviderInstalled
contract: v1beta1
installedVersion: v1.9.5
observedGeneration: 2
"#,
    )?;
    assert!(s.is_true("Ready"));
    assert_eq!(s.installed_version.as_deref(), Some("v1.9.5"));
    let old: v1alpha2::ProviderStatus = yaml(
        r#"
conditions:
- lastTransitionTime: "2024-06-01T10:00:00Z"
  status: "True"
  type: Ready
- lastTransitionTime: "2024-06-01T10:00:00Z"
  severity: Info
  reason: WaitingForCoreProviderReady
  status: "False"
  type: PreflightCheckPassed
"#,
    )?;
    assert!(old.is_true("Ready"));
    assert_eq!(old.conditions[0].reason, "");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Facts about the other operator's objects.

#[test]
fn names_of_the_other_operators_objects() {
    assert_eq!(
        v1alpha2::release_configmap_name(ProviderType::Infrastructure, "aws", "v2.1.4"),
        "infrastructure-aws-v2.1.4"
    );
    assert_eq!(
        v1alpha2::cache_secret_name(ProviderType::RuntimeExtension, "x", "v0.1.0"),
        "runtimeextension-x-v0.1.0-cache"
    );
    assert_eq!(
        v1alpha2::go_type_word(ProviderType::ControlPlane),
        "control-plane"
    );
    let labels =
        v1alpha2::release_configmap_labels(ProviderType::Core, "cluster-api", "v1.10.0", true);
    assert_eq!(
        labels,
        BTreeMap::from([
            (
                "provider.cluster.x-k8s.io/version".to_string(),
                "v1.10.0".to_string()
            ),
            (
                "provider.cluster.x-k8s.io/type".to_string(),
                "core".to_string()
            ),
            (
                "provider.cluster.x-k8s.io/name".to_string(),
                "cluster-api".to_string()
            ),
            (
                "managed-by.operator.cluster.x-k8s.io".to_string(),
                "true".to_string()
            ),
            (
                "provider.cluster.x-k8s.io/source".to_string(),
                "oci".to_string()
            ),
        ])
    );
}

// ---------------------------------------------------------------------------------------------
// CRDs.

fn crd_json(t: ProviderType) -> Res<Value> {
    Ok(serde_json::to_value(v1alpha2::crd(t)?)?)
}

fn schema_root(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
}

fn keys(schema: &Value) -> Vec<String> {
    let mut k: Vec<String> = schema["properties"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    k.sort();
    k
}

#[test]
fn crds_have_the_other_operators_names_and_columns() -> TestResult {
    let crds = v1alpha2::all_crds()?;
    assert_eq!(crds.len(), 7);
    let want = [
        ("coreproviders", "CoreProvider", "cacp"),
        ("bootstrapproviders", "BootstrapProvider", "cabp"),
        ("controlplaneproviders", "ControlPlaneProvider", "cacpp"),
        ("infrastructureproviders", "InfrastructureProvider", "caip"),
        ("ipamproviders", "IPAMProvider", "caipamp"),
        (
            "runtimeextensionproviders",
            "RuntimeExtensionProvider",
            "carep",
        ),
        ("addonproviders", "AddonProvider", "caap"),
    ];
    for (crd, (plural, kind, short)) in crds.iter().zip(want) {
        let v = serde_json::to_value(crd)?;
        assert_eq!(
            v["metadata"]["name"],
            format!("{plural}.operator.cluster.x-k8s.io")
        );
        assert_eq!(v["spec"]["group"], "operator.cluster.x-k8s.io");
        assert_eq!(
            v["spec"]["names"],
            json!({
                "kind": kind,
                "listKind": format!("{kind}List"),
                "plural": plural,
                "singular": kind.to_lowercase(),
                "categories": ["capi-providers"],
            })
        );
        // The short name is answered by this operator's group alone: kubectl would resolve a
        // name both groups claim to either one.
        let own = serde_json::to_value(capi_operator_api::crd::all_crds()?)?;
        let own = own
            .as_array()
            .and_then(|l| l.iter().find(|c| c["spec"]["names"]["kind"] == *kind))
            .ok_or("no v1alpha1 CRD of the kind")?;
        assert_eq!(own["spec"]["names"]["shortNames"], json!([short]));
        assert_eq!(v["spec"]["scope"], "Namespaced");
        // Explicitly none: the conversion webhook of cluster-api-operator's CRDs must not
        // survive their takeover.
        assert_eq!(v["spec"]["conversion"], json!({"strategy": "None"}));
        let versions = v["spec"]["versions"].as_array().ok_or("versions")?;
        assert_eq!(versions.len(), 1);
        let ver = &versions[0];
        assert_eq!(
            (&ver["name"], &ver["served"], &ver["storage"]),
            (&json!("v1alpha2"), &json!(true), &json!(true))
        );
        assert_eq!(ver["subresources"], json!({ "status": {} }));
        assert_eq!(
            ver["additionalPrinterColumns"],
            json!([
                { "name": "InstalledVersion", "type": "string", "jsonPath": ".status.installedVersion" },
                { "name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Ready')].status" },
                // This operator's addition: why the provider is not where its spec says.
                { "name": "Summary", "type": "string", "jsonPath": ".status.summary" },
                // And what deleting the object does (spec.deletionPolicy, also an addition).
                { "name": "Deletion", "type": "string", "jsonPath": ".spec.deletionPolicy" },
            ])
        );
        let annotations = v["metadata"]["annotations"]
            .as_object()
            .ok_or("annotations")?;
        assert!(annotations.contains_key(api::crd::HASH_ANNOTATION));
        // Our own API's CRDs are separate and unchanged.
        assert_ne!(v["spec"]["group"], api::GROUP);
    }
    assert_eq!(api::crd::all_crds()?.len(), 7);
    Ok(())
}

#[test]
fn crd_schema_has_the_apis_fields_types_and_rules() -> TestResult {
    let crd = crd_json(ProviderType::Core)?;
    let root = schema_root(&crd);
    assert_eq!(
        keys(root),
        ["apiVersion", "kind", "metadata", "spec", "status"]
    );
    let spec = &root["properties"]["spec"];
    assert_eq!(
        keys(spec),
        [
            "additionalDeployments",
            "additionalManifests",
            "configSecret",
            "deletionPolicy",
            "deployment",
            "fetchConfig",
            "manager",
            "manifestPatches",
            "patches",
            "version"
        ]
    );
    // No default for spec and no nullable anywhere, as in the other operator's CRDs.
    assert!(spec.get("default").is_none());
    assert!(!serde_json::to_string(root)?.contains("\"nullable\""));
    let p = &spec["properties"];
    let manager = &p["manager"];
    assert_eq!(
        keys(manager),
        [
            "additionalArgs",
            "cacheNamespace",
            "controller",
            "featureGates",
            "gracefulShutDown",
            "health",
            "leaderElection",
            "maxConcurrentReconciles",
            "metrics",
            "profilerAddress",
            "syncPeriod",
            "verbosity",
            "webhook"
        ]
    );
    let mp = &manager["properties"];
    assert_eq!(
        keys(&mp["controller"]),
        ["cacheSyncTimeout", "groupKindConcurrency", "recoverPanic"]
    );
    assert_eq!(
        mp["controller"]["properties"]["groupKindConcurrency"]["additionalProperties"]["type"],
        "integer"
    );
    assert_eq!(
        mp["controller"]["properties"]["cacheSyncTimeout"]["type"],
        "integer"
    );
    let le = &mp["leaderElection"];
    let le_fields = [
        "leaderElect",
        "leaseDuration",
        "renewDeadline",
        "resourceLock",
        "resourceName",
        "resourceNamespace",
        "retryPeriod",
    ];
    assert_eq!(keys(le), le_fields);
    let mut required: Vec<String> = serde_json::from_value(le["required"].clone())?;
    required.sort();
    assert_eq!(required, le_fields);
    assert_eq!(
        keys(&mp["metrics"]),
        ["bindAddress", "diagnosticsAddress", "insecureDiagnostics"]
    );
    assert_eq!(
        keys(&mp["health"]),
        [
            "healthProbeBindAddress",
            "livenessEndpointName",
            "readinessEndpointName"
        ]
    );
    assert_eq!(keys(&mp["webhook"]), ["certDir", "host", "port"]);
    assert_eq!(mp["syncPeriod"]["type"], "string");
    assert_eq!(mp["gracefulShutDown"]["type"], "string");
    assert_eq!(mp["maxConcurrentReconciles"]["type"], "integer");
    assert_eq!(mp["maxConcurrentReconciles"]["minimum"].as_f64(), Some(1.0));
    assert_eq!(mp["verbosity"]["type"], "integer");
    assert_eq!(mp["verbosity"]["minimum"].as_f64(), Some(0.0));
    assert_eq!(mp["verbosity"]["default"], 1);
    assert_eq!(
        mp["featureGates"]["additionalProperties"]["type"],
        "boolean"
    );
    assert_eq!(
        mp["additionalArgs"]["additionalProperties"]["type"],
        "string"
    );

    let deployment = &p["deployment"];
    assert_eq!(
        keys(deployment),
        [
            "affinity",
            "containers",
            "imagePullSecrets",
            "nodeSelector",
            "replicas",
            "serviceAccountName",
            "tolerations"
        ]
    );
    assert_eq!(
        deployment["properties"]["replicas"]["minimum"].as_f64(),
        Some(0.0)
    );
    let container = &deployment["properties"]["containers"]["items"];
    assert_eq!(
        keys(container),
        ["args", "command", "env", "imageUrl", "name", "resources"]
    );
    assert_eq!(container["required"], json!(["name"]));
    assert_eq!(
        container["properties"]["args"]["additionalProperties"]["type"],
        "string"
    );
    for r in ["configSecret", "additionalManifests"] {
        assert_eq!(keys(&p[r]), ["name", "namespace"], "{r}");
        assert_eq!(p[r]["required"], json!(["name"]), "{r}");
    }
    assert_eq!(keys(&p["fetchConfig"]), ["oci", "selector", "url"]);
    assert_eq!(p["manifestPatches"]["items"]["type"], "string");
    assert_eq!(keys(&p["patches"]["items"]), ["patch", "target"]);
    assert!(p["patches"]["items"].get("required").is_none());
    assert_eq!(
        keys(&p["patches"]["items"]["properties"]["target"]),
        [
            "group",
            "kind",
            "labelSelector",
            "name",
            "namespace",
            "version"
        ]
    );
    assert_eq!(
        keys(&p["additionalDeployments"]["additionalProperties"]),
        ["deployment", "manager"]
    );
    assert_eq!(p["version"]["type"], "string");
    // A LocalObjectReference's name defaults to "" as in the other operator's CRDs.
    let pull_secret = &deployment["properties"]["imagePullSecrets"]["items"];
    assert!(pull_secret.get("required").is_none());
    assert_eq!(pull_secret["properties"]["name"]["default"], "");
    let value_from =
        &container["properties"]["env"]["items"]["properties"]["valueFrom"]["properties"];
    for r in ["secretKeyRef", "configMapKeyRef"] {
        assert_eq!(value_from[r]["required"], json!(["key"]), "{r}");
        assert_eq!(value_from[r]["properties"]["name"]["default"], "", "{r}");
    }

    // The other operator's validations, as CEL.
    assert_eq!(
        spec["x-kubernetes-validations"][0]["rule"],
        "!(has(self.manifestPatches) && has(self.patches))"
    );
    assert_eq!(
        p["fetchConfig"]["x-kubernetes-validations"][0]["rule"],
        "[has(self.oci), has(self.url), has(self.selector)].exists_one(x,x)"
    );
    for rules in [
        &spec["x-kubernetes-validations"],
        &p["fetchConfig"]["x-kubernetes-validations"],
    ] {
        assert_eq!(rules.as_array().map(Vec::len), Some(1));
        assert!(rules[0]["message"].as_str().is_some_and(|m| !m.is_empty()));
    }

    // The other operator's status fields, and this operator's release digests (what lets its
    // release cache be trusted; the other operator never reads them), summary (the Summary
    // column of `kubectl get`) and the newer releases the source offers.
    let status = &root["properties"]["status"];
    assert_eq!(
        keys(status),
        [
            "availableVersions",
            "conditions",
            "contract",
            "installedVersion",
            "observedGeneration",
            "releaseDigests",
            "summary"
        ]
    );
    let conditions = &status["properties"]["conditions"];
    assert_eq!(conditions["x-kubernetes-list-type"], "map");
    assert_eq!(conditions["x-kubernetes-list-map-keys"], json!(["type"]));
    let item = &conditions["items"];
    assert_eq!(
        item["required"],
        json!(["lastTransitionTime", "message", "reason", "status", "type"])
    );
    assert_eq!(
        item["properties"]["status"]["enum"],
        json!(["True", "False", "Unknown"])
    );
    assert_eq!(
        item["properties"]["reason"]["pattern"],
        "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
    );
    Ok(())
}

// A small structural validator: types, declared fields (an undeclared one is an error, as with
// kubectl's strict validation), required fields, enums, minimum and maximum, string lengths.
fn validate(schema: &Value, v: &Value, path: &str, errs: &mut Vec<String>) {
    if schema["x-kubernetes-int-or-string"] == json!(true) {
        if !(v.is_string() || v.is_i64() || v.is_u64()) {
            errs.push(format!("{path}: not an int or string"));
        }
        return;
    }
    if let Some(e) = schema["enum"].as_array()
        && !e.contains(v)
    {
        errs.push(format!("{path}: {v} not in {e:?}"));
    }
    let ok = match schema["type"].as_str() {
        Some("object") => v.is_object(),
        Some("array") => v.is_array(),
        Some("string") => v.is_string(),
        Some("integer") => v.is_i64() || v.is_u64(),
        Some("number") => v.is_number(),
        Some("boolean") => v.is_boolean(),
        _ => true,
    };
    if !ok {
        errs.push(format!("{path}: {v} is not of type {}", schema["type"]));
        return;
    }
    if let Some(n) = v.as_f64() {
        if schema["minimum"].as_f64().is_some_and(|m| n < m) {
            errs.push(format!("{path}: {n} below minimum"));
        }
        if schema["maximum"].as_f64().is_some_and(|m| n > m) {
            errs.push(format!("{path}: {n} above maximum"));
        }
    }
    if let Some(s) = v.as_str() {
        let len = s.chars().count() as u64;
        if schema["maxLength"].as_u64().is_some_and(|m| len > m)
            || schema["minLength"].as_u64().is_some_and(|m| len < m)
        {
            errs.push(format!("{path}: length {len} out of bounds"));
        }
    }
    if let Some(obj) = v.as_object() {
        for r in schema["required"].as_array().into_iter().flatten() {
            if let Some(r) = r.as_str()
                && !obj.contains_key(r)
            {
                errs.push(format!("{path}.{r}: required"));
            }
        }
        let preserve = schema["x-kubernetes-preserve-unknown-fields"] == json!(true);
        for (k, child) in obj {
            let p = format!("{path}.{k}");
            if let Some(s) = schema["properties"].get(k) {
                validate(s, child, &p, errs);
            } else if schema["additionalProperties"].is_object() {
                validate(&schema["additionalProperties"], child, &p, errs);
            } else if !(preserve || (path.ends_with(".metadata") && schema["properties"].is_null()))
            {
                errs.push(format!("{p}: field not declared in schema"));
            }
        }
    }
    if let Some(items) = v.as_array() {
        for (i, item) in items.iter().enumerate() {
            validate(&schema["items"], item, &format!("{path}[{i}]"), errs);
        }
    }
}

fn schema_errors(object: &Value) -> Res<Vec<String>> {
    let kind = object["kind"].as_str().ok_or("kind")?;
    let t = ProviderType::from_kind(kind).ok_or("kind")?;
    let crd = crd_json(t)?;
    let mut errs = vec![];
    validate(schema_root(&crd), object, "", &mut errs);
    Ok(errs)
}

#[test]
fn crd_schemas_accept_the_examples_and_refuse_mistakes() -> TestResult {
    for text in examples() {
        let v: Value = yaml(text)?;
        assert_eq!(schema_errors(&v)?, Vec::<String>::new(), "{text}");
    }
    let full = json!({
        "apiVersion": v1alpha2::API_VERSION,
        "kind": "BootstrapProvider",
        "metadata": { "name": "kubeadm", "namespace": "x" },
        "spec": full_spec(),
        "status": serde_json::to_value(v1alpha2::go_status(&our_status()?))?,
    });
    assert_eq!(schema_errors(&full)?, Vec::<String>::new());

    let object = |spec: Value| {
        json!({ "apiVersion": v1alpha2::API_VERSION, "kind": "CoreProvider",
                "metadata": { "name": "cluster-api" }, "spec": spec })
    };
    for (spec, want) in [
        (
            json!({ "versoin": "v1.0.0" }),
            ".spec.versoin: field not declared",
        ),
        (
            json!({ "deployment": { "containers": [{ "name": "manager", "imageURL": "x" }] } }),
            "imageURL: field not declared",
        ),
        (
            json!({ "configSecret": { "namespace": "x" } }),
            ".spec.configSecret.name: required",
        ),
        (
            json!({ "manager": { "maxConcurrentReconciles": 0 } }),
            "below minimum",
        ),
        (json!({ "manager": { "verbosity": -1 } }), "below minimum"),
        (json!({ "deployment": { "replicas": -1 } }), "below minimum"),
        (
            json!({ "manager": { "leaderElection": { "leaderElect": true } } }),
            ".spec.manager.leaderElection.leaseDuration: required",
        ),
        (
            json!({ "manager": { "syncPeriod": 600 } }),
            "is not of type \"string\"",
        ),
        (
            json!({ "deployment": { "containers": [{ "name": "m", "args": { "--x": 1 } }] } }),
            "is not of type \"string\"",
        ),
    ] {
        let errs = schema_errors(&object(spec.clone()))?;
        assert!(
            errs.iter().any(|e| e.contains(want)),
            "{spec}: expected {want:?} in {errs:?}"
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// On a real API server: the CRDs install, every example is accepted, the CEL rules and bounds
// refuse what the other operator's CRDs refuse, defaults apply, and a converted status is
// accepted and satisfies `kubectl wait --for=condition=Ready`.

// Field manager of every change the API server test makes.
const MANAGER: &str = "--field-manager=capi-tests-v1alpha2";

#[test]
fn crds_on_an_api_server() -> TestResult {
    let c = cluster()?;
    let dir = std::env::temp_dir().join(format!("capi-v1alpha2-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let crds = dir.join("crds.yaml");
    std::fs::write(&crds, capi_yaml::to_multi_doc(&v1alpha2::all_crds()?)?)?;
    let crds = crds.to_string_lossy();
    c.kubectl_ok(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        MANAGER,
        "-f",
        &crds,
    ])?;
    c.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "-f",
        &crds,
    ])?;
    // The namespaces the examples are in.
    for text in examples() {
        let example: Value = yaml(text)?;
        if let Some(ns) = example["metadata"]["namespace"].as_str() {
            c.ensure_namespace(ns)?;
        }
    }
    let write = |name: &str, text: &str| -> Res<String> {
        let f = dir.join(format!("{name}.yaml"));
        std::fs::write(&f, text)?;
        Ok(f.to_string_lossy().into_owned())
    };
    let dry_run = |file: &str| {
        c.kubectl(&[
            "apply",
            "--server-side",
            "--dry-run=server",
            MANAGER,
            "-f",
            file,
        ])
    };
    for (i, text) in examples().into_iter().enumerate() {
        let f = write(&format!("example-{i}"), text)?;
        let (ok, _, err) = dry_run(&f)?;
        assert!(ok, "example {i} was refused: {err}\n{text}");
    }

    let core = |spec: &str| {
        format!(
            "apiVersion: operator.cluster.x-k8s.io/v1alpha2\nkind: CoreProvider\nmetadata:\n  name: cluster-api\n  namespace: capi-system\nspec:\n  {spec}\n"
        )
    };
    let patches_msg = "patches and manifestPatches cannot be used together";
    let fetch_msg = "fetchConfig needs exactly one of oci, url and selector";
    for (i, (spec, want)) in [
        (
            "{manifestPatches: ['{kind: Service}'], patches: [{patch: '{}'}]}",
            patches_msg,
        ),
        // Present but empty lists count too, as in the other operator's rule.
        ("{manifestPatches: [], patches: []}", patches_msg),
        ("fetchConfig: {}", fetch_msg),
        (
            "fetchConfig: {url: 'https://github.com/o/r/releases', selector: {matchLabels: {a: b}}}",
            fetch_msg,
        ),
        (
            "fetchConfig: {oci: 'r.example/p', url: 'https://github.com/o/r/releases'}",
            fetch_msg,
        ),
        (
            "manager: {maxConcurrentReconciles: 0}",
            "should be greater than or equal to 1",
        ),
        (
            "manager: {verbosity: -1}",
            "should be greater than or equal to 0",
        ),
        (
            "deployment: {replicas: -1}",
            "should be greater than or equal to 0",
        ),
        (
            "manager: {leaderElection: {leaderElect: true}}",
            "spec.manager.leaderElection.leaseDuration: Required value",
        ),
        ("versoin: v1.0.0", ".spec.versoin: field not declared in schema"),
    ]
    .into_iter()
    .enumerate()
    {
        let f = write(&format!("invalid-{i}"), &core(spec))?;
        let (ok, _, err) = dry_run(&f)?;
        assert!(!ok, "{spec} was accepted");
        assert!(err.contains(want), "{spec}: expected {want:?} in\n{err}");
    }

    // Accepted as by the other operator's CRDs: a pull secret and a secretKeyRef without a
    // name (both default to "").
    let f = write(
        "unnamed-references",
        &core(
            "deployment: {imagePullSecrets: [{}], containers: [{name: manager, env: [{name: A, valueFrom: {secretKeyRef: {key: k}}}]}]}",
        ),
    )?;
    let (ok, _, err) = dry_run(&f)?;
    assert!(ok, "unnamed references were refused: {err}");

    // The API server fills in verbosity 1 when manager is given, as for the other operator.
    let f = write("defaulted", &core("manager: {syncPeriod: 10m}"))?;
    let out = c.kubectl_ok(&[
        "apply",
        "--server-side",
        "--dry-run=server",
        MANAGER,
        "-o",
        "jsonpath={.spec.manager.verbosity}",
        "-f",
        &f,
    ])?;
    assert_eq!(out.trim(), "1");

    // A provider with this operator's status in the other operator's vocabulary.
    let ns = format!("capi-v1alpha2-{}", std::process::id());
    c.ensure_namespace(&ns)?;
    let f = write(
        "live",
        &format!(
            "apiVersion: operator.cluster.x-k8s.io/v1alpha2\nkind: CoreProvider\nmetadata:\n  name: cluster-api\n  namespace: {ns}\nspec:\n  version: v1.10.0\n"
        ),
    )?;
    c.kubectl_ok(&["apply", "--server-side", MANAGER, "-f", &f])?;
    let status = json!({ "status": v1alpha2::go_status(&our_status()?) });
    c.kubectl_ok(&[
        "patch",
        "-n",
        &ns,
        "coreproviders.operator.cluster.x-k8s.io/cluster-api",
        "--subresource=status",
        "--type=merge",
        "-p",
        &status.to_string(),
    ])?;
    c.kubectl_ok(&[
        "wait",
        "-n",
        &ns,
        "--for=condition=Ready",
        "--timeout=30s",
        "coreproviders.operator.cluster.x-k8s.io/cluster-api",
    ])?;
    let table = c.kubectl_ok(&["get", "coreproviders.operator.cluster.x-k8s.io", "-n", &ns])?;
    let header = table.lines().next().unwrap_or_default();
    for col in ["NAME", "INSTALLEDVERSION", "READY"] {
        assert!(header.contains(col), "column {col} missing: {table}");
    }
    let row = table.lines().nth(1).unwrap_or_default();
    assert!(
        row.contains("v1.10.0") && row.contains("True"),
        "row: {table}"
    );
    // The short names are this operator's own group's (one group per name); the category
    // lists this group's kinds too, so `kubectl get capi-providers -A` shows every provider.
    let resources = c.kubectl_ok(&["api-resources", "--api-group=operator.cluster.x-k8s.io"])?;
    for short in ["cacp", "cabp", "cacpp", "caip", "caipamp", "carep", "caap"] {
        assert!(
            !resources.split_whitespace().any(|w| w == short),
            "{short} claimed by the v1alpha2 group too: {resources}"
        );
    }
    let category = c.kubectl_ok(&["api-resources", "--categories=capi-providers", "-o", "name"])?;
    for plural in [
        "coreproviders",
        "bootstrapproviders",
        "controlplaneproviders",
        "infrastructureproviders",
        "ipamproviders",
        "runtimeextensionproviders",
        "addonproviders",
    ] {
        let name = format!("{plural}.operator.cluster.x-k8s.io");
        assert!(
            category.lines().any(|l| l.trim() == name),
            "{name} not in the capi-providers category: {category}"
        );
    }
    c.kubectl_ok(&["delete", "namespace", &ns, "--wait=false"])?;
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
