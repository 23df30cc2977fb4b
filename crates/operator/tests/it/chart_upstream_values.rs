//! The values of kubernetes-sigs/cluster-api-operator's chart, as this chart reads them
//! (`helm template`, no cluster): a values file written for that chart renders the operator and
//! the provider objects it asked for, `enabled: false` leaves a provider out, the providers that
//! chart adds by itself come only with `impliedProviders`, and values of both charts that
//! disagree fail with a message naming both. docs/migration-from-cluster-api-operator.md's table
//! is what these tests show.

use crate::support;

use capi_test_support::workspace_root;
use serde_json::Value;
use support::*;

/// A values file as a cluster-api-operator user writes it: operator values under that chart's
/// names, providers with `enabled` keys, global feature gates and fetchConfig.
const UPSTREAM_VALUES: &str = r#"
replicaCount: 3
logLevel: 4
leaderElection:
  enabled: true
image:
  manager:
    registry: mirror.example
    repository: platform/capi-provider-operator
    tag: v9.9.9
    pullPolicy: Always
env:
  manager:
  - name: HTTPS_PROXY
    value: http://proxy.example:3128
resources:
  manager:
    limits: {cpu: 200m, memory: 300Mi}
    requests: {cpu: 100m, memory: 100Mi}
containerSecurityContext:
  manager:
    runAsNonRoot: true
securityContext:
  runAsUser: 1000
volumes:
- name: ca
  configMap: {name: corporate-ca}
volumeMounts:
  manager:
  - {name: ca, mountPath: /etc/corporate-ca, readOnly: true}
tolerations:
- {effect: NoSchedule, key: node-role.kubernetes.io/control-plane}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: kubernetes.io/os, operator: In, values: [linux]}
imagePullSecrets: {}
diagnosticsAddress: ":8443"
insecureDiagnostics: false
profilerAddress: ":6060"
contentionProfiling: false
enableHelmHook: true
watchConfigSecret: true
watchConfigMap: false
configSecret:
  name: cloud-credentials
  namespace: capi-secrets
infrastructure:
  docker:
    enabled: true
    version: v1.10.0
  azure:
    enabled: true
  aws:
    enabled: false
manager:
  featureGates:
    docker:
      MachinePool: true
    kubeadm:
      ClusterTopology: true
fetchConfig:
  azure:
    url: https://releases.example/azure
"#;

/// `helm template x <chart> -n ops ARGS`: Ok(Ok(manifests)), Ok(Err(helm's error)), or Err when
/// CAPI_HELM does not name a helm.
fn template(args: &[&str]) -> Result<Result<String, String>, String> {
    let helm = std::env::var_os("CAPI_HELM")
        .filter(|h| !h.is_empty())
        .ok_or("CAPI_HELM is not set: build helm with e2e/scripts/helm.sh and set CAPI_HELM to the path it prints")?;
    let chart = workspace_root().join("manifests/helm/capi-provider-operator");
    let chart = chart.to_string_lossy().into_owned();
    let mut all = vec!["template", "x", &chart, "-n", "ops"];
    all.extend_from_slice(args);
    Ok(helm_run(&helm, &all))
}

/// `template` with `text` as a values file (`-f`) before ARGS.
fn template_values(
    test: &str,
    text: &str,
    args: &[&str],
) -> Result<Result<String, String>, String> {
    let file = std::env::temp_dir().join(format!("{test}-{}.yaml", std::process::id()));
    std::fs::write(&file, text).map_err(|e| format!("{}: {e}", file.display()))?;
    let path = file.to_string_lossy().into_owned();
    let mut all = vec!["-f", &path];
    all.extend_from_slice(args);
    let out = template(&all);
    let _ = std::fs::remove_file(&file);
    out
}

/// `--set` each of `sets`.
fn sets<'a>(sets: &[&'a str]) -> Vec<&'a str> {
    sets.iter().flat_map(|s| ["--set", *s]).collect()
}

fn documents(rendered: &str) -> Result<Vec<Value>, String> {
    capi_yaml::parse_documents(rendered, &capi_yaml::Limits::default()).map_err(|e| e.to_string())
}

/// Every provider object rendered, as "Kind namespace/name", sorted.
fn providers(rendered: &str) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = documents(rendered)?
        .iter()
        .filter(|d| d["kind"].as_str().is_some_and(|k| k.ends_with("Provider")))
        .map(|d| {
            let m = &d["metadata"];
            let (kind, ns, name) = (&d["kind"], &m["namespace"], &m["name"]);
            format!("{} {}/{}", str_of(kind), str_of(ns), str_of(name))
        })
        .collect();
    out.sort();
    Ok(out)
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or("?")
}

/// The spec of the provider object `kind` `name`.
fn spec(rendered: &str, kind: &str, name: &str) -> Result<Value, String> {
    documents(rendered)?
        .into_iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .map(|d| d["spec"].clone())
        .ok_or(format!("no {kind} {name}"))
}

/// The operator container of the Deployment, and the Deployment's spec.
fn operator(rendered: &str) -> Result<(Value, Value), String> {
    let d = documents(rendered)?
        .into_iter()
        .find(|d| d["kind"] == "Deployment")
        .ok_or("no Deployment")?;
    let container = d["spec"]["template"]["spec"]["containers"][0].clone();
    Ok((d["spec"].clone(), container))
}

/// Whether the container's arguments include `arg`.
fn has_arg(container: &Value, arg: &str) -> bool {
    container["args"]
        .as_array()
        .is_some_and(|args| args.iter().any(|a| a == arg))
}

/// The value of the container's environment variable `name`.
fn env<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str())
}

#[test]
fn an_upstream_values_file_renders_the_operator_it_asks_for() -> TestResult {
    let test = "an_upstream_values_file_renders_the_operator_it_asks_for";
    let out = template_values(test, UPSTREAM_VALUES, &[])??;
    let (deployment, c) = operator(&out)?;
    assert_eq!(deployment["replicas"], 3, "replicaCount");
    assert_eq!(
        c["image"], "mirror.example/platform/capi-provider-operator:v9.9.9",
        "image.manager.registry, repository and tag"
    );
    assert_eq!(c["imagePullPolicy"], "Always");
    assert_eq!(env(&c, "RUST_LOG"), Some("debug"), "logLevel 4: {c:#}");
    assert_eq!(env(&c, "HTTPS_PROXY"), Some("http://proxy.example:3128"));
    let want: Value = serde_json::json!({
        "limits": {"cpu": "200m", "memory": "300Mi"},
        "requests": {"cpu": "100m", "memory": "100Mi"},
    });
    assert_eq!(c["resources"], want, "resources.manager");
    // Merged over this chart's own: the root filesystem stays read-only.
    let security = &c["securityContext"];
    assert_eq!(security["runAsNonRoot"], true, "{security:#}");
    assert_eq!(security["readOnlyRootFilesystem"], true, "{security:#}");
    assert!(has_arg(&c, "--leader-elect"), "{c:#}");
    let pod = &deployment["template"]["spec"];
    assert!(
        pod.get("imagePullSecrets").is_none(),
        "imagePullSecrets: {{}} is none"
    );
    // securityContext is the pod's, merged over this chart's.
    assert_eq!(pod["securityContext"]["runAsUser"], 1000, "{pod:#}");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{pod:#}");
    assert_eq!(
        pod["volumes"][0]["configMap"]["name"], "corporate-ca",
        "{pod:#}"
    );
    assert_eq!(
        c["volumeMounts"][0]["mountPath"], "/etc/corporate-ca",
        "{c:#}"
    );
    assert_eq!(
        pod["tolerations"][0]["key"], "node-role.kubernetes.io/control-plane",
        "{pod:#}"
    );
    let term = &pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    assert_eq!(
        term["nodeSelectorTerms"][0]["matchExpressions"][0]["key"], "kubernetes.io/os",
        "{pod:#}"
    );

    // imagePullSecrets as a list is the same value in both charts.
    let out = template(&sets(&["imagePullSecrets[0].name=regcred"]))??;
    let pod = &operator(&out)?.0["template"]["spec"];
    assert_eq!(pod["imagePullSecrets"][0]["name"], "regcred", "{pod:#}");

    // leaderElection.enabled=false, with one replica: no election, no Lease Role.
    let out = template(&sets(&["replicaCount=1", "leaderElection.enabled=false"]))??;
    let (deployment, c) = operator(&out)?;
    assert_eq!(deployment["replicas"], 1);
    assert!(!has_arg(&c, "--leader-elect"), "{c:#}");
    assert!(
        !documents(&out)?.iter().any(|d| d["kind"] == "Role"),
        "a Lease Role without election"
    );

    // The levels between: klog's 2 is the default, info; from 5, trace.
    for (level, want) in [
        ("0", "info"),
        ("2", "info"),
        ("3", "debug"),
        ("5", "trace"),
        ("9", "trace"),
    ] {
        let out = template(&sets(&[&format!("logLevel={level}")]))??;
        assert_eq!(
            env(&operator(&out)?.1, "RUST_LOG"),
            Some(want),
            "logLevel {level}"
        );
    }
    // A digest pins the image; healthAddr's port is the health port.
    let out = template(&sets(&[
        "image.manager.repository=mirror.example/capi-provider-operator",
        &format!("image.manager.digest=sha256:{}", "a".repeat(64)),
        "healthAddr=:9440",
    ]))??;
    let c = operator(&out)?.1;
    assert_eq!(
        c["image"],
        format!(
            "mirror.example/capi-provider-operator@sha256:{}",
            "a".repeat(64)
        )
    );
    assert!(has_arg(&c, "--health-probe-bind-address=:9440"), "{c:#}");
    assert_eq!(c["ports"][1]["containerPort"], 9440, "{c:#}");
    Ok(())
}

#[test]
fn an_upstream_values_file_declares_its_providers_with_their_global_values() -> TestResult {
    let test = "an_upstream_values_file_declares_its_providers_with_their_global_values";
    let out = template_values(test, UPSTREAM_VALUES, &sets(&["impliedProviders=true"]))??;
    assert_eq!(
        providers(&out)?,
        [
            "BootstrapProvider capi-kubeadm-bootstrap-system/kubeadm",
            "ControlPlaneProvider capi-kubeadm-control-plane-system/kubeadm",
            "CoreProvider capi-system/cluster-api",
            "InfrastructureProvider azure-infrastructure-system/azure",
            "InfrastructureProvider docker-infrastructure-system/docker",
        ],
        "aws is enabled: false; core and kubeadm are implied"
    );
    let docker = spec(&out, "InfrastructureProvider", "docker")?;
    assert_eq!(docker["version"], "v1.10.0");
    assert_eq!(
        docker["manager"]["featureGates"]["MachinePool"], true,
        "{docker:#}"
    );
    let azure = spec(&out, "InfrastructureProvider", "azure")?;
    assert_eq!(
        azure["fetchConfig"]["url"], "https://releases.example/azure",
        "{azure:#}"
    );
    assert!(azure.get("version").is_none(), "{azure:#}");
    // manager.featureGates.kubeadm reaches the control plane provider, as in that chart.
    let cp = spec(&out, "ControlPlaneProvider", "kubeadm")?;
    assert_eq!(
        cp["manager"]["featureGates"]["ClusterTopology"], true,
        "{cp:#}"
    );
    let bootstrap = spec(&out, "BootstrapProvider", "kubeadm")?;
    assert!(bootstrap.get("manager").is_none(), "{bootstrap:#}");
    // The global configSecret reaches every one, the implied ones too.
    for (kind, name) in [
        ("CoreProvider", "cluster-api"),
        ("InfrastructureProvider", "azure"),
    ] {
        let s = spec(&out, kind, name)?;
        assert_eq!(s["secretName"], "cloud-credentials", "{kind} {s:#}");
        assert_eq!(s["secretNamespace"], "capi-secrets", "{kind} {s:#}");
    }
    let namespaces: Vec<String> = documents(&out)?
        .iter()
        .filter(|d| d["kind"] == "Namespace")
        .map(|d| str_of(&d["metadata"]["name"]).to_string())
        .collect();
    for ns in [
        "capi-system",
        "capi-kubeadm-bootstrap-system",
        "azure-infrastructure-system",
    ] {
        assert!(namespaces.iter().any(|n| n == ns), "{ns}: {namespaces:?}");
    }
    Ok(())
}

#[test]
fn implied_providers_come_only_with_implied_providers_and_as_upstream_implies_them() -> TestResult {
    let test = "implied_providers_come_only_with_implied_providers_and_as_upstream_implies_them";
    // Without the switch: exactly what the values name.
    let out = template_values(test, UPSTREAM_VALUES, &[])??;
    assert_eq!(
        providers(&out)?,
        [
            "InfrastructureProvider azure-infrastructure-system/azure",
            "InfrastructureProvider docker-infrastructure-system/docker",
        ]
    );
    let on = "impliedProviders=true";
    for (set, want) in [
        // A core provider given: only kubeadm is implied.
        (
            &[
                on,
                "infrastructure=docker",
                "core.cluster-api.version=v1.10.0",
            ][..],
            &[
                "BootstrapProvider capi-kubeadm-bootstrap-system/kubeadm",
                "ControlPlaneProvider capi-kubeadm-control-plane-system/kubeadm",
                "CoreProvider capi-system/cluster-api",
                "InfrastructureProvider docker-infrastructure-system/docker",
            ][..],
        ),
        // A bootstrap provider given: no kubeadm bootstrap provider.
        (
            &[on, "infrastructure=docker", "bootstrap=talos"],
            &[
                "BootstrapProvider talos-bootstrap-system/talos",
                "ControlPlaneProvider capi-kubeadm-control-plane-system/kubeadm",
                "CoreProvider capi-system/cluster-api",
                "InfrastructureProvider docker-infrastructure-system/docker",
            ],
        ),
        // No infrastructure provider: the core provider alone.
        (
            &[on, "addon=helm"],
            &[
                "AddonProvider helm-addon-system/helm",
                "CoreProvider capi-system/cluster-api",
            ],
        ),
        // A runtime extension does not imply one (that chart has no such kind).
        (
            &[on, "runtimeExtension=sample"],
            &["RuntimeExtensionProvider sample-runtime-extension-system/sample"],
        ),
        // kubeadm bootstrap disabled: none implied in its place.
        (
            &[
                on,
                "infrastructure=docker",
                "bootstrap.kubeadm.enabled=false",
            ],
            &[
                "ControlPlaneProvider capi-kubeadm-control-plane-system/kubeadm",
                "CoreProvider capi-system/cluster-api",
                "InfrastructureProvider docker-infrastructure-system/docker",
            ],
        ),
        // Every provider disabled: nothing to imply.
        (&[on, "infrastructure.docker.enabled=false"], &[]),
        // Nothing declared, nothing implied.
        (&[on], &[]),
    ] {
        let out = template(&sets(set))??;
        assert_eq!(providers(&out)?, want, "{set:?}");
    }
    Ok(())
}

#[test]
fn upstream_provider_forms_are_read() -> TestResult {
    // The string form of that chart before 0.19, the namespace first.
    let out = template(&sets(&["infrastructure=capd:docker:v1.10.0;azure"]))??;
    assert_eq!(
        providers(&out)?,
        [
            "InfrastructureProvider azure-infrastructure-system/azure",
            "InfrastructureProvider capd/docker",
        ]
    );
    assert_eq!(
        spec(&out, "InfrastructureProvider", "docker")?["version"],
        "v1.10.0"
    );
    // `enabled: true` declares, as a bare name does; `enabled: false` drops.
    let out = template(&sets(&[
        "infrastructure.docker.enabled=true",
        "infrastructure.aws.enabled=false",
        "ipam.in-cluster.enabled=true",
        "fetchConfig.in-cluster.url=https://releases.example/ipam",
        "additionalDeployments.extra.deployment.replicas=2",
        "manager.featureGates.in-cluster.Sample=true",
        "manager.featureGates.core.ClusterTopology=true",
        "core.cluster-api.version=v1.10.0",
    ]))??;
    assert_eq!(
        providers(&out)?,
        [
            "CoreProvider capi-system/cluster-api",
            "IPAMProvider in-cluster-ipam-system/in-cluster",
            "InfrastructureProvider docker-infrastructure-system/docker",
        ]
    );
    // manager.featureGates.core is the core provider's, whatever its name.
    let core = spec(&out, "CoreProvider", "cluster-api")?;
    assert_eq!(
        core["manager"]["featureGates"]["ClusterTopology"], true,
        "{core:#}"
    );
    assert!(core.get("additionalDeployments").is_none(), "{core:#}");
    let ipam = spec(&out, "IPAMProvider", "in-cluster")?;
    assert_eq!(
        ipam["fetchConfig"]["url"], "https://releases.example/ipam",
        "{ipam:#}"
    );
    assert_eq!(
        ipam["additionalDeployments"]["extra"]["deployment"]["replicas"], 2,
        "{ipam:#}"
    );
    assert_eq!(ipam["manager"]["featureGates"]["Sample"], true, "{ipam:#}");
    let docker = spec(&out, "InfrastructureProvider", "docker")?;
    assert!(
        docker.get("enabled").is_none() && docker.get("fetchConfig").is_none(),
        "{docker:#}"
    );
    assert_eq!(
        docker["additionalDeployments"]["extra"]["deployment"]["replicas"], 2,
        "{docker:#}"
    );

    // additionalManifests with the manifests written out: the chart creates the ConfigMap.
    let manifests = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: inner\n";
    let text = format!(
        "infrastructure:\n  docker:\n    additionalManifests:\n      name: docker-extra\n      manifests: {manifests:?}\n"
    );
    let out = template_values("upstream_provider_forms_are_read", &text, &[])??;
    let docker = spec(&out, "InfrastructureProvider", "docker")?;
    assert_eq!(
        docker["additionalManifests"],
        serde_json::json!({"name": "docker-extra"}),
        "{docker:#}"
    );
    let cm = documents(&out)?
        .into_iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "docker-extra")
        .ok_or("no ConfigMap docker-extra")?;
    assert_eq!(
        cm["metadata"]["namespace"], "docker-infrastructure-system",
        "{cm:#}"
    );
    assert_eq!(cm["data"]["manifests"], manifests, "{cm:#}");
    Ok(())
}

#[test]
fn values_of_both_charts_that_disagree_fail_with_a_message() -> TestResult {
    for (set, message) in [
        (
            &["replicas=4", "replicaCount=3"][..],
            "replicas (4) and cluster-api-operator's replicaCount (3) disagree",
        ),
        (
            &["image.tag=v1.0.0", "image.manager.tag=v2.0.0"],
            "image.tag (\"v1.0.0\") and cluster-api-operator's image.manager.tag (\"v2.0.0\") disagree",
        ),
        (
            &["image.pullPolicy=Never", "image.manager.pullPolicy=Always"],
            "image.pullPolicy",
        ),
        (
            &["healthPort=9000", "healthAddr=:9440"],
            "healthPort (9000) and cluster-api-operator's healthAddr (9440) disagree",
        ),
        (
            &["resources.limits.cpu=2", "resources.manager.limits.cpu=1"],
            "resources (",
        ),
        (
            &[
                "containerSecurityContext.runAsUser=1000",
                "containerSecurityContext.manager.runAsUser=2000",
            ],
            "containerSecurityContext.runAsUser and cluster-api-operator's containerSecurityContext.manager.runAsUser disagree",
        ),
        (
            &["logLevel=3", "env[0].name=RUST_LOG", "env[0].value=info"],
            "logLevel and an env RUST_LOG are both set",
        ),
        (
            &[
                "infrastructure.docker.manager.featureGates.MachinePool=false",
                "manager.featureGates.docker.MachinePool=true",
            ],
            "manager.featureGates.docker.MachinePool (true) and the provider's own manager.featureGates.MachinePool (false) disagree",
        ),
        (
            &[
                "infrastructure.docker.fetchConfig.url=https://a.example",
                "fetchConfig.docker.url=https://b.example",
            ],
            "the global fetchConfig for docker and the provider's own fetchConfig disagree",
        ),
        // Counted as the Deployment will be: replicaCount's 3 need leader election.
        (
            &["replicaCount=3", "leaderElection.enabled=false"],
            "at '/leaderElection/enabled': value must be true",
        ),
        (
            &["image.manager.repository=registry.k8s.io/capi-operator/cluster-api-operator"],
            "image.manager.repository registry.k8s.io/capi-operator/cluster-api-operator is cluster-api-operator's image",
        ),
    ] {
        let e = template(&sets(set))?
            .err()
            .ok_or(format!("{set:?} was accepted"))?;
        assert!(e.contains(message), "{set:?}: wanted {message:?} in {e}");
    }
    // The same value under both names is no disagreement; nor is ours at its default.
    for fine in [
        &["replicas=3", "replicaCount=3"][..],
        &["replicaCount=1", "leaderElection.enabled=false"],
        &["replicaCount=1", "leaderElection=false"],
        &["image.tag=v1.0.0", "image.manager.tag=v1.0.0"],
    ] {
        template(&sets(fine))?.map_err(|e| format!("{fine:?}: {e}"))?;
    }
    Ok(())
}

#[test]
fn upstream_values_this_operator_cannot_honour_are_refused() -> TestResult {
    for bad in [
        "leaderElection.leaseDuration=15s",
        "leaderElection.renewDeadline=10s",
        "leaderElection.retryPeriod=2s",
        "strategy.type=Recreate",
        "fullnameOverride=capi",
        "nameOverride=capi",
        "deploymentLabels.team=a",
        "deploymentAnnotations.team=a",
        "podDnsPolicy=None",
        "podDnsConfig.nameservers[0]=10.0.0.10",
        "infrastructure.docker.additionalManifests.namespace=elsewhere",
        "image.manager.tag=1",
        "image.manager.digest=latest",
        "image.manager.registry=mirror.example",
        "infrastructure=a:b:c:d",
        "infrastructure.docker.enabled=maybe",
    ] {
        let e = template(&["--set", bad])?
            .err()
            .ok_or(format!("--set {bad} was accepted"))?;
        assert!(
            e.contains("don't meet the specifications of the schema"),
            "{bad}: {e}"
        );
    }
    Ok(())
}

/// NOTES.txt as `helm install --dry-run=client` prints it (`helm template` renders no notes);
/// the cluster, with the CRDs, only answers helm's discovery; no release is written. A private
/// cluster of this area: helm still refuses objects that exist without its labels (the admission
/// policy, a provider's namespace), which the lane's shared cluster holds after other areas.
fn notes(test: &str, text: &str, args: &[&str]) -> Result<String, Box<dyn std::error::Error>> {
    let helm = std::env::var_os("CAPI_HELM")
        .filter(|h| !h.is_empty())
        .ok_or("CAPI_HELM is not set: build helm with e2e/scripts/helm.sh and set CAPI_HELM to the path it prints")?;
    let cluster = capi_test_support::private_cluster()?;
    cluster.install_crds()?;
    let kubeconfig = cluster.kubeconfig().to_string_lossy().into_owned();
    let chart = workspace_root().join("manifests/helm/capi-provider-operator");
    let chart = chart.to_string_lossy().into_owned();
    let file = std::env::temp_dir().join(format!("{test}-{}.yaml", std::process::id()));
    std::fs::write(&file, text)?;
    let path = file.to_string_lossy().into_owned();
    let mut all = vec![
        "--kubeconfig",
        &kubeconfig,
        "install",
        "x",
        &chart,
        "-n",
        "ops",
    ];
    all.extend_from_slice(&["--dry-run=client", "-f", &path]);
    all.extend_from_slice(args);
    let out = helm_run(&helm, &all);
    let _ = std::fs::remove_file(&file);
    let out = out?;
    let notes = out
        .split_once("NOTES:\n")
        .ok_or(format!("no NOTES in {out}"))?
        .1;
    Ok(notes.to_string())
}

#[test]
fn the_notes_name_the_implied_providers_not_declared_and_the_values_ignored() -> TestResult {
    let test = "the_notes_name_the_implied_providers_not_declared_and_the_values_ignored";
    let text = notes(test, UPSTREAM_VALUES, &[])?;
    let implied = "cluster-api-operator's chart would also declare, by itself:
  CoreProvider capi-system/cluster-api
  BootstrapProvider capi-kubeadm-bootstrap-system/kubeadm
  ControlPlaneProvider capi-kubeadm-control-plane-system/kubeadm
This chart declares only what the values name: set impliedProviders=true to declare them too.";
    assert!(text.contains(implied), "{text}");
    assert!(
        text.contains(
            "runtime; see values.schema.json): diagnosticsAddress, insecureDiagnostics, \
             profilerAddress, contentionProfiling, enableHelmHook, watchConfigSecret, watchConfigMap."
        ),
        "{text}"
    );
    let text = notes(test, UPSTREAM_VALUES, &["--set", "impliedProviders=true"])?;
    assert!(!text.contains("would also declare"), "{text}");
    assert!(
        text.contains("This release declares 5 provider(s)"),
        "{text}"
    );
    // This chart's own values: no line about the other chart.
    let text = notes(test, "infrastructure: docker\n", &[])?;
    assert!(!text.contains("ignored"), "{text}");
    Ok(())
}
