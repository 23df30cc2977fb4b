//! The Helm chart's values admins reach for, checked by `operator_image`'s one install on the
//! real node (no cluster of their own): `helm lint` and `helm template` with every one of them
//! set (the rendered objects checked field by field), the defaults, the refusals, a server dry
//! run of what every value renders, and the release values that put a GITHUB_TOKEN from a Secret
//! into the operator process's environment and declare a core provider.

use crate::support;

use capi_test_support::{TestCluster, workspace_root};
use serde_json::{Value, json};
use support::{real::*, *};

/// Every value of the chart that changes the rendered objects, set at once.
const ALL_VALUES: &str = r#"replicas: 3
env:
- name: GITHUB_TOKEN
  valueFrom: {secretKeyRef: {name: github, key: token}}
- {name: HTTPS_PROXY, value: "http://proxy.example:3128"}
envFrom:
- secretRef: {name: proxy-env}
extraVolumes:
- {name: ca, configMap: {name: corp-ca}}
extraVolumeMounts:
- {name: ca, mountPath: /etc/corp-ca, readOnly: true}
podSecurityContext: {fsGroup: 65532}
containerSecurityContext: {runAsUser: 65533}
topologySpreadConstraints:
- {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}
podDisruptionBudget: {maxUnavailable: "50%", unhealthyPodEvictionPolicy: AlwaysAllow}
networkPolicy:
  enabled: true
  apiServer: {cidrs: [10.0.0.1/32]}
  dns: {to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}}]}
  metricsFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]
argocd: {syncWaves: true}
configSecret: {name: capi-vars}
core:
  cluster-api: {version: v1.12.0}
bootstrap: "kubeadm:v1.12.0"
infrastructure:
  docker:
    namespace: capd-system
    fetchConfig: {url: "https://github.com/kubernetes-sigs/cluster-api/releases"}
    configSecret: {name: docker-vars, namespace: secrets}
    manager: {verbosity: 5}
    spec: {paused: true}
ipam:
  in-cluster: {createNamespace: false}
"#;

/// The rendered objects of `kind` (and `name`, when given).
fn objects<'a>(docs: &'a [Value], kind: &str, name: Option<&str>) -> Vec<&'a Value> {
    docs.iter()
        .filter(|d| d["kind"] == kind && name.is_none_or(|n| d["metadata"]["name"] == n))
        .collect()
}

/// The one rendered object `kind` `name`.
fn one<'a>(docs: &'a [Value], kind: &str, name: &str) -> Result<&'a Value, String> {
    match objects(docs, kind, Some(name)).as_slice() {
        [o] => Ok(o),
        other => Err(format!(
            "{} {kind} {name} rendered, expected 1",
            other.len()
        )),
    }
}

fn render(
    helm: &dyn Fn(&[&str]) -> Result<String, String>,
    args: &[&str],
) -> Result<Vec<Value>, Box<dyn std::error::Error>> {
    let chart = workspace_root().join("manifests/helm/capi-provider-operator");
    let chart = chart.to_string_lossy();
    let mut all = vec!["template", "capi-operator", &chart, "--namespace", "ops"];
    all.extend_from_slice(args);
    let text = helm(&all)?;
    let docs = capi_yaml::parse_documents(&text, &capi_yaml::Limits::default())?;
    Ok(docs
        .into_iter()
        .filter(serde_json::Value::is_object)
        .collect())
}

/// The operator Deployment's pod spec and its container.
fn pod_and_container(docs: &[Value]) -> Result<(Value, Value), String> {
    let pod = one(docs, "Deployment", "capi-operator")?["spec"]["template"]["spec"].clone();
    let container = pod["containers"][0].clone();
    Ok((pod, container))
}

/// Every value set at once: each lands where the README says.
fn check_all_values(docs: &[Value]) -> TestResult {
    let (pod, c) = pod_and_container(docs)?;
    let env = c["env"].as_array().ok_or("no env")?;
    assert!(env.contains(&json!({"name": "GITHUB_TOKEN", "valueFrom": {"secretKeyRef": {"name": "github", "key": "token"}}})), "{env:?}");
    assert!(env.contains(&json!({"name": "HTTPS_PROXY", "value": "http://proxy.example:3128"})));
    assert!(
        env.iter().any(|e| e["name"] == "POD_NAMESPACE"),
        "the chart's own variables stay"
    );
    assert_eq!(c["envFrom"], json!([{"secretRef": {"name": "proxy-env"}}]));
    assert_eq!(
        pod["volumes"],
        json!([{"name": "ca", "configMap": {"name": "corp-ca"}}])
    );
    assert_eq!(
        c["volumeMounts"],
        json!([{"name": "ca", "mountPath": "/etc/corp-ca", "readOnly": true}])
    );
    // Set keys merge into the secure defaults, which stay.
    assert_eq!(pod["securityContext"]["fsGroup"], 65532);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(c["securityContext"]["runAsUser"], 65533);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    let spread = &pod["topologySpreadConstraints"][0];
    assert_eq!(spread["topologyKey"], "topology.kubernetes.io/zone");
    assert_eq!(
        spread["labelSelector"]["matchLabels"]["app.kubernetes.io/instance"], "capi-operator",
        "{spread}"
    );

    let pdb = one(docs, "PodDisruptionBudget", "capi-operator")?;
    assert_eq!(pdb["spec"]["maxUnavailable"], "50%");
    assert!(
        pdb["spec"].get("minAvailable").is_none(),
        "both minAvailable and maxUnavailable"
    );
    assert_eq!(pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"],
        "capi-operator"
    );

    check_network_policy(docs)?;
    check_providers(docs)?;
    check_waves(docs)
}

/// The NetworkPolicy: ingress to the metrics and health ports only; egress to DNS, the API
/// server and the release hosts.
fn check_network_policy(docs: &[Value]) -> TestResult {
    let np = &one(docs, "NetworkPolicy", "capi-operator")?["spec"];
    assert_eq!(np["policyTypes"], json!(["Ingress", "Egress"]));
    let ingress = np["ingress"].as_array().ok_or("no ingress")?;
    assert_eq!(
        ingress.len(),
        2,
        "ingress to the metrics and health ports only: {ingress:?}"
    );
    assert_eq!(
        ingress[0]["ports"],
        json!([{"port": 8080, "protocol": "TCP"}])
    );
    assert_eq!(
        ingress[0]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "monitoring"
    );
    assert_eq!(
        ingress[1]["ports"],
        json!([{"port": 8081, "protocol": "TCP"}])
    );
    let egress = np["egress"].as_array().ok_or("no egress")?;
    assert_eq!(
        egress.len(),
        3,
        "DNS, API server, release hosts: {egress:?}"
    );
    assert_eq!(
        egress[0]["ports"],
        json!([{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}])
    );
    assert!(egress[0]["to"].is_array());
    assert_eq!(
        egress[1]["ports"],
        json!([{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}])
    );
    assert_eq!(
        egress[1]["to"],
        json!([{"ipBlock": {"cidr": "10.0.0.1/32"}}])
    );
    assert_eq!(
        egress[2]["ports"],
        json!([{"port": 443, "protocol": "TCP"}])
    );
    assert!(
        egress[2].get("to").is_none(),
        "release hosts: any address when no CIDR is given"
    );
    Ok(())
}

/// The provider objects and namespaces the per-kind values declare.
fn check_providers(docs: &[Value]) -> TestResult {
    let kinds = [
        "CoreProvider",
        "BootstrapProvider",
        "InfrastructureProvider",
        "IPAMProvider",
    ];
    let providers: Vec<&Value> = kinds.iter().flat_map(|k| objects(docs, k, None)).collect();
    assert_eq!(providers.len(), 4, "{providers:?}");
    let spec = |kind: &str, ns: &str, name: &str| -> Result<Value, String> {
        let o = one(docs, kind, name)?;
        assert_eq!(o["metadata"]["namespace"], ns, "{kind} {name}");
        assert_eq!(o["apiVersion"], "management.cluster.x-k8s.io/v1alpha1");
        assert_eq!(
            o["metadata"]["annotations"]["helm.sh/resource-policy"], "keep",
            "{kind} {name}"
        );
        Ok(o["spec"].clone())
    };
    assert_eq!(
        spec("CoreProvider", "capi-system", "cluster-api")?,
        json!({"version": "v1.12.0", "secretName": "capi-vars"})
    );
    assert_eq!(
        spec("BootstrapProvider", "kubeadm-bootstrap-system", "kubeadm")?,
        json!({"version": "v1.12.0", "secretName": "capi-vars"})
    );
    assert_eq!(
        spec("InfrastructureProvider", "capd-system", "docker")?,
        json!({
            "fetchConfig": {"url": "https://github.com/kubernetes-sigs/cluster-api/releases"},
            "manager": {"verbosity": 5},
            "paused": true,
            "secretName": "docker-vars",
            "secretNamespace": "secrets",
        })
    );
    assert_eq!(
        spec("IPAMProvider", "in-cluster-ipam-system", "in-cluster")?,
        json!({"secretName": "capi-vars"})
    );
    let mut namespaces: Vec<&str> = objects(docs, "Namespace", None)
        .iter()
        .filter_map(|n| n["metadata"]["name"].as_str())
        .collect();
    namespaces.sort_unstable();
    assert_eq!(
        namespaces,
        ["capd-system", "capi-system", "kubeadm-bootstrap-system"],
        "createNamespace: false is honoured"
    );
    Ok(())
}

/// Argo CD: CRDs unannotated (wave 0, first), the operator's objects in wave 1, providers and
/// their namespaces in wave 2 with the dry run skipped while their CRD is new.
fn check_waves(docs: &[Value]) -> TestResult {
    for d in docs {
        let kind = d["kind"].as_str().unwrap_or_default();
        let a = &d["metadata"]["annotations"];
        let wave = a["argocd.argoproj.io/sync-wave"].as_str();
        let provider = kind.ends_with("Provider") || kind == "Namespace";
        let want = match kind {
            "CustomResourceDefinition" => None,
            _ if provider => Some("2"),
            _ => Some("1"),
        };
        assert_eq!(wave, want, "{kind} {}", d["metadata"]["name"]);
        if provider {
            assert_eq!(
                a["argocd.argoproj.io/sync-options"],
                "SkipDryRunOnMissingResource=true"
            );
        }
    }
    Ok(())
}

/// The defaults: today's secure contexts, a budget only over more than one replica, no
/// NetworkPolicy, no Argo CD annotation, no provider.
fn check_defaults(docs: &[Value], one_replica: &[Value]) -> TestResult {
    let (pod, c) = pod_and_container(docs)?;
    assert_eq!(
        pod["securityContext"],
        json!({"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}})
    );
    assert_eq!(
        c["securityContext"],
        json!({"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}})
    );
    for key in ["envFrom", "volumeMounts"] {
        assert!(c.get(key).is_none(), "{key} rendered by default");
    }
    assert!(pod.get("volumes").is_none() && pod.get("topologySpreadConstraints").is_none());
    assert_eq!(
        one(docs, "PodDisruptionBudget", "capi-operator")?["spec"]["minAvailable"],
        1
    );
    assert!(
        objects(one_replica, "PodDisruptionBudget", None).is_empty(),
        "a budget over one replica blocks drains"
    );
    assert!(objects(docs, "NetworkPolicy", None).is_empty());
    assert!(objects(docs, "Namespace", None).is_empty());
    assert!(docs.iter().all(|d| {
        d["metadata"]
            .get("annotations")
            .is_none_or(|a| a.get("argocd.argoproj.io/sync-wave").is_none())
    }));
    Ok(())
}

/// `helm lint` and `helm template` with every value, the defaults and the refusals (no cluster).
pub(super) fn check_values(helm: &std::ffi::OsStr) -> TestResult {
    let helm = |args: &[&str]| helm_run(helm, args);
    let chart = workspace_root().join("manifests/helm/capi-provider-operator");
    let chart = chart.to_string_lossy();
    let values = tempfile(ALL_VALUES)?;
    helm(&["lint", "--strict", &chart, "-f", &values])?;
    check_all_values(&render(&helm, &["-f", &values, "--include-crds"])?)?;
    check_defaults(
        &render(&helm, &[])?,
        &render(&helm, &["--set", "replicas=1"])?,
    )?;
    check_provider_forms(&helm)?;
    check_refusals(&helm)
}

/// Helm, as `render` runs it.
type Helm<'a> = &'a dyn Fn(&[&str]) -> Result<String, String>;

/// Providers named as the Go chart names them, and the global configSecret.
fn check_provider_forms(helm: Helm) -> TestResult {
    let docs = render(
        helm,
        &[
            "--set",
            "infrastructure=docker",
            "--set",
            "core=cluster-api:v1.12.0",
        ],
    )?;
    assert_eq!(
        one(&docs, "InfrastructureProvider", "docker")?["metadata"]["namespace"],
        "docker-infrastructure-system"
    );
    assert_eq!(
        one(&docs, "CoreProvider", "cluster-api")?["spec"],
        json!({"version": "v1.12.0"})
    );

    // The global configSecret fills in only for providers naming no Secret.
    let docs = render(
        helm,
        &[
            "--set",
            "configSecret.name=global",
            "--set",
            "core.cluster-api.spec.secretName=own",
            "--set",
            "infrastructure=docker",
        ],
    )?;
    assert_eq!(
        one(&docs, "CoreProvider", "cluster-api")?["spec"]["secretName"],
        "own"
    );
    assert_eq!(
        one(&docs, "InfrastructureProvider", "docker")?["spec"]["secretName"],
        "global"
    );
    Ok(())
}

/// Values the templates refuse (the schema cannot express these).
fn check_refusals(helm: Helm) -> TestResult {
    for (args, error) in [
        (
            vec!["--set", "podDisruptionBudget.minAvailable=2"],
            "must be below replicas",
        ),
        (
            vec!["--set", "argocd.providerWave=0"],
            "must not be below argocd.operatorWave",
        ),
        (
            vec![
                "--set",
                "core.cluster-api.version=v1.12.0",
                "--set",
                "providers[0].kind=CoreProvider,providers[0].name=cluster-api,providers[0].namespace=capi-system",
            ],
            "declare the CoreProvider capi-system/cluster-api twice",
        ),
        (
            vec!["--set", "infrastructure=docker;AWS"],
            "does not match pattern",
        ),
    ] {
        let e = render(helm, &args)
            .err()
            .ok_or(format!("{args:?} was accepted"))?;
        assert!(e.to_string().contains(error), "{args:?}: {e}");
    }
    Ok(())
}

/// What every value renders is accepted by the API server, namespaces first (the CRDs exist:
/// the chart's install created them).
pub(super) fn apply_dry_run(cluster: &TestCluster, helm: &std::ffi::OsStr) -> TestResult {
    let helm = |args: &[&str]| helm_run(helm, args);
    let docs = render(&helm, &["-f", &tempfile(ALL_VALUES)?])?;
    for ns in [
        "ops",
        "capi-system",
        "kubeadm-bootstrap-system",
        "capd-system",
        "in-cluster-ipam-system",
    ] {
        cluster.ensure_namespace(ns)?;
    }
    cluster.install_crds()?;
    let text: Vec<String> = docs.iter().map(Value::to_string).collect();
    let file = tempfile(&text.join("\n---\n"))?;
    let out = cluster.kubectl_ok(&["apply", "--server-side", "--dry-run=server", "-f", &file])?;
    for want in [
        "networkpolicy.networking.k8s.io/capi-operator serverside-applied",
        "poddisruptionbudget.policy/capi-operator serverside-applied",
        "infrastructureprovider.management.cluster.x-k8s.io/docker serverside-applied",
        "deployment.apps/capi-operator serverside-applied",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    Ok(())
}

/// The Secrets the release's operator reads its environment from (created in `ns`), and the
/// release's values: the default two replicas on the real node, that environment, and the real
/// core provider at `version` (its release loaded in capi-system) on the real node.
pub(super) fn release_values(
    cluster: &TestCluster,
    ns: &str,
    token: &str,
    version: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    let secrets = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: github, namespace: {ns}}}\nstringData: {{token: {token}}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: proxy-env, namespace: {ns}}}\nstringData: {{NO_PROXY: \".svc,10.0.0.0/8\"}}\n"
    );
    cluster.ensure_namespace(ns)?;
    apply(cluster, &secrets)?;
    let deployment = capi_test_support::indent(ON_REAL_NODE, 2);
    tempfile(&format!(
        r#"nodeSelector: {{{REAL_NODE_LABEL}: "true"}}
tolerations: [{{key: {REAL_NODE_LABEL}, operator: Exists, effect: NoSchedule}}]
env:
- name: GITHUB_TOKEN
  valueFrom: {{secretKeyRef: {{name: github, key: token}}}}
envFrom:
- secretRef: {{name: proxy-env}}
core:
  cluster-api:
    namespace: capi-system
    createNamespace: false
    version: {version}
    fetchConfig: {{selector: {{matchLabels: {{provider.cluster.x-k8s.io/name: cluster-api}}}}}}
{deployment}"#
    ))
}

/// The operator process `pid` of `pod` has GITHUB_TOKEN from its Secret and NO_PROXY from
/// envFrom.
pub(super) fn check_operator_env(pod: &str, pid: u32, token: &str) -> TestResult {
    let environ = std::fs::read(format!("/proc/{pid}/environ"))?;
    let environ: Vec<String> = environ
        .split(|b| *b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect();
    assert!(
        environ.contains(&format!("GITHUB_TOKEN={token}")),
        "{pod}: GITHUB_TOKEN from the Secret is not in the operator's environment"
    );
    assert!(
        environ.iter().any(|v| v == "NO_PROXY=.svc,10.0.0.0/8"),
        "{pod}: envFrom did not reach the operator"
    );
    assert!(
        cmdline(pid).iter().any(|a| a == "--leader-elect"),
        "{pod} is not the operator"
    );
    Ok(())
}
