//! End-to-end on a private local control plane with the operator running, using the project's
//! sample releases (v0.1.x follow contract v1beta1, v0.2.x contract v1beta2):
//! `init` (operator CRDs and policy, providers from a local repository, variables from a file
//! and the environment, refusal of missing variables), `preload --apply` and `init --preloaded
//! --wait`, `upgrade plan`, and `upgrade apply --contract v1beta2` running pause → upgrade →
//! unpause.

use crate::support;

use std::time::Duration;

use capi_test_support::{TestCluster, private_cluster, wait_for};
use serde_json::Value;
use support::*;

const T: Duration = Duration::from_secs(120);

const PROVIDERS: [(&str, &str, &str, &str); 3] = [
    (
        "CoreProvider",
        "sample-core-system",
        "cluster-api",
        "sample-core-controller-manager",
    ),
    (
        "BootstrapProvider",
        "sample-bootstrap-system",
        "sample",
        "sample-bootstrap-controller-manager",
    ),
    (
        "InfrastructureProvider",
        "sample-infra-system",
        "sample",
        "sample-infra-controller-manager",
    ),
];

async fn all_ready(cluster: &TestCluster, version: &str) -> Result<(), String> {
    for (kind, ns, name, _) in PROVIDERS {
        wait_for(T, || async move {
            provider(cluster, kind, ns, name)
                .filter(|p| ready_at(p, version))
                .map(|_| ())
        })
        .await
        .ok_or_else(|| {
            format!(
                "{kind} {ns}/{name} not Ready at {version}: {}",
                provider(cluster, kind, ns, name)
                    .and_then(|p| p.get("status").cloned())
                    .unwrap_or(Value::Null)
            )
        })?;
        // The samples a newcomer meets first follow the provider contracts.
        let verified = provider(cluster, kind, ns, name)
            .and_then(|p| condition(&p, "ContractVerified").cloned())
            .unwrap_or(Value::Null);
        if verified["status"] != "True" {
            return Err(format!(
                "{kind} {ns}/{name} at {version}: ContractVerified is not True: {verified}"
            ));
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_preload_and_upgrade_across_a_contract() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let start = std::time::Instant::now();
    let step = |what: &str| eprintln!("[{:>5.1}s] {what}", start.elapsed().as_secs_f64());
    let cluster = private_cluster()?;
    step("cluster up");
    let repo = sample_repository()?;
    let r = repo.s();
    let files = TempDir::new("capi-plugin-vars")?;
    let vars = files.0.join("vars.env");
    std::fs::write(&vars, "# the greeting\nSAMPLE_GREETING=hello from a file\n")?;
    let vars = vars.to_string_lossy().into_owned();

    // A release with a required variable: refused before anything is written.
    let needy = repo.0.join("addon-needy/v0.1.0");
    std::fs::create_dir_all(&needy)?;
    std::fs::write(
        needy.join("metadata.yaml"),
        "releaseSeries:\n- {major: 0, minor: 1, contract: v1beta1}\n",
    )?;
    std::fs::write(
        needy.join("addon-components.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: needy, namespace: needy-system}\ndata: {token: \"${NEEDY_TOKEN}\"}\n",
    )?;
    let refused = plugin_env(
        Some(cluster),
        &[
            "init",
            "--skip-cert-manager",
            "--repository",
            &r,
            "--core",
            "cluster-api:v0.1.0",
            "--addon",
            "needy",
            "--no-default-providers",
        ],
        &[],
    )?;
    assert!(!refused.ok, "{}", refused.all());
    assert!(
        refused
            .stderr
            .contains("AddonProvider needy v0.1.0: NEEDY_TOKEN"),
        "{}",
        refused.all()
    );
    assert!(provider(cluster, "CoreProvider", "sample-core-system", "cluster-api").is_none());
    // Refused before anything is installed, the operator included.
    assert!(
        !cluster
            .kubectl(&["get", "namespace", "capi-operator-system"])?
            .0,
        "the operator was installed before the refusal"
    );

    // init from nothing: the operator's release manifest built into the plugin (CRDs, policy,
    // its Deployment, available on kwok), namespaces, ConfigMaps, Secret, objects.
    let init = plugin_ok_env(
        Some(cluster),
        &[
            "init",
            "--skip-cert-manager",
            "--repository",
            &r,
            "--core",
            "cluster-api:v0.1.0",
            "--infrastructure",
            "sample:v0.1.0",
            "--variables",
            &vars,
            "--no-default-providers",
        ],
        &[
            ("EXP_SAMPLE_FEATURE", "true"),
            ("UNRELATED_SECRET", "not-for-the-cluster"),
        ],
    )?;
    assert!(
        !init.all().contains("hello from a file"),
        "a variable value was printed:\n{}",
        init.all()
    );
    cluster.kubectl_ok(&[
        "get",
        "crd",
        "infrastructureproviders.management.cluster.x-k8s.io",
    ])?;
    cluster.kubectl_ok(&[
        "get",
        "validatingadmissionpolicy",
        "capi-provider-managed-by-one-way",
    ])?;
    let operator = get_json(
        cluster,
        &[
            "deployment",
            "-n",
            "capi-operator-system",
            "capi-provider-operator",
        ],
    )?;
    assert_eq!(
        operator["spec"]["template"]["spec"]["containers"][0]["image"],
        concat!(
            "ghcr.io/capi-provider-operator/capi-provider-operator:v",
            env!("CARGO_PKG_VERSION")
        )
    );
    assert!(
        init.stderr
            .contains("operator Deployment capi-operator-system/capi-provider-operator: available"),
        "{}",
        init.all()
    );
    let secret = get_json(
        cluster,
        &[
            "secret",
            "-n",
            "sample-infra-system",
            "infrastructure-sample-variables",
        ],
    )?;
    let keys: Vec<&String> = secret["data"]
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    assert_eq!(
        keys,
        ["EXP_SAMPLE_FEATURE", "SAMPLE_GREETING"],
        "only the file's and the used variables"
    );
    let infra = provider(
        cluster,
        "InfrastructureProvider",
        "sample-infra-system",
        "sample",
    )
    .ok_or("no InfrastructureProvider")?;
    assert_eq!(infra["spec"]["version"], "v0.1.0");
    assert_eq!(
        infra["spec"]["secretName"],
        "infrastructure-sample-variables"
    );
    assert_eq!(
        infra["spec"]["fetchConfig"]["selector"]["matchLabels"]["provider.cluster.x-k8s.io/type"],
        "infrastructure"
    );
    cluster.kubectl_ok(&[
        "get",
        "configmap",
        "-n",
        "sample-infra-system",
        "release-infrastructure-sample-v0.1.0",
    ])?;

    step("init done");
    let operator = start_operator(cluster, &["--config-retry-seconds", "2"])?;
    step("operator started");
    let log = |e: Box<dyn std::error::Error>| -> Box<dyn std::error::Error> {
        format!("{e}\n--- operator log ---\n{}", operator.logs()).into()
    };

    // The bootstrap provider air-gapped: preloaded, then installed from the ConfigMaps.
    plugin_ok(
        Some(cluster),
        &[
            "preload",
            "--apply",
            "--repository",
            &r,
            "--bootstrap",
            "sample:v0.1.0",
        ],
    )?;
    let wait = plugin_ok(
        Some(cluster),
        &[
            "init",
            "--skip-cert-manager",
            "--skip-operator",
            "--preloaded",
            "--bootstrap",
            "sample:v0.1.0",
            "--wait",
            "--timeout",
            "120s",
        ],
    )
    .map_err(log)?;
    assert!(
        wait.stderr.contains("the providers to be Ready: done"),
        "{}",
        wait.all()
    );
    assert!(
        wait.stdout
            .contains("BootstrapProvider sample-bootstrap-system/sample v0.1.0 from ConfigMaps"),
        "{}",
        wait.all()
    );
    step("init --preloaded --wait done");
    all_ready(cluster, "v0.1.0")
        .await
        .map_err(|e| log(e.into()))?;
    let d = get_json(
        cluster,
        &[
            "deployment",
            "-n",
            "sample-infra-system",
            "sample-infra-controller-manager",
        ],
    )?;
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert!(
        c["args"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "--feature-gates=SampleFeature=true")),
        "{c}"
    );
    assert!(
        c["env"]
            .as_array()
            .is_some_and(|e| e.iter().any(|x| x["value"] == "hello from a file")),
        "{c}"
    );

    // Installed providers are left alone by a second init.
    let again = plugin_ok(
        Some(cluster),
        &[
            "init",
            "--skip-cert-manager",
            "--repository",
            &r,
            "--core",
            "cluster-api:v0.2.0",
        ],
    )?;
    assert!(
        again.stdout.contains("is already installed"),
        "{}",
        again.all()
    );
    assert!(
        again.stderr.contains(
            "operator already installed (Deployment capi-operator-system/capi-provider-operator)"
        ),
        "{}",
        again.all()
    );

    // The plan from the cluster's ConfigMaps (v0.1.0 only), then with the repository.
    let plan = plugin_ok(Some(cluster), &["upgrade", "plan"])?;
    assert!(
        plan.stdout
            .contains("Every provider is up to date within contract v1beta1"),
        "{}",
        plan.all()
    );
    unreachable_source_spares_the_rest_of_the_plan(cluster)?;
    let plan = plugin_ok(Some(cluster), &["upgrade", "plan", "--repository", &r])?;
    assert!(
        plan.stdout.contains("Already up to date") && plan.stdout.contains("v0.2.0 (v1beta2)"),
        "{}",
        plan.all()
    );
    assert!(
        plan.stdout.contains("upgrade apply --contract v1beta2"),
        "{}",
        plan.all()
    );
    // The same plan as data (-o json and -o yaml agree).
    let json = plugin_ok(
        Some(cluster),
        &["upgrade", "plan", "--repository", &r, "-o", "json"],
    )?;
    let rows: Value = serde_json::from_str(&json.stdout)?;
    let yaml = plugin_ok(
        Some(cluster),
        &["upgrade", "plan", "--repository", &r, "-o", "yaml"],
    )?;
    assert_eq!(
        capi_yaml::parse_documents(&yaml.stdout, &Default::default())?,
        std::slice::from_ref(&rows)
    );
    let rows = rows.as_array().ok_or("the plan is not a list")?;
    assert_eq!(rows.len(), PROVIDERS.len(), "{json:?}");
    for row in rows {
        assert_eq!(row["contract"], "v1beta1", "{row}");
        assert_eq!(row["nextVersion"], Value::Null, "{row}");
        assert_eq!(row["latest"]["version"], "v0.2.0", "{row}");
        assert_eq!(row["latest"]["contract"], "v1beta2", "{row}");
    }
    let same = plugin_ok(Some(cluster), &["upgrade", "apply", "--repository", &r])?;
    assert!(
        same.stdout
            .contains("every provider is up to date for contract v1beta1"),
        "{}",
        same.all()
    );
    let dry = plugin_ok(
        Some(cluster),
        &[
            "upgrade",
            "apply",
            "--repository",
            &r,
            "--contract",
            "v1beta2",
            "--dry-run",
        ],
    )?;
    assert!(
        dry.stdout.contains("every provider would be paused"),
        "{}",
        dry.all()
    );
    assert_eq!(
        provider(cluster, "CoreProvider", "sample-core-system", "cluster-api")
            .map(|p| p["spec"]["version"].clone()),
        Some(Value::from("v0.1.0"))
    );

    step("plans done");
    // The contract change: pause → upgrade (core first) → unpause.
    let apply = plugin_ok(
        Some(cluster),
        &[
            "upgrade",
            "apply",
            "--repository",
            &r,
            "--contract",
            "v1beta2",
            "--timeout",
            "150s",
        ],
    )
    .map_err(log)?;
    for step in [
        "every provider to be paused: done",
        "the core provider to be upgraded: done",
        "the other providers to be upgraded: done",
        "the providers to be Ready: done",
    ] {
        assert!(
            apply.stderr.contains(step),
            "missing {step:?}\n{}",
            apply.all()
        );
    }
    step("upgrade apply --contract v1beta2 done");
    eprintln!("{}", apply.stderr);
    all_ready(cluster, "v0.2.0")
        .await
        .map_err(|e| log(e.into()))?;
    for (kind, ns, name, deployment) in PROVIDERS {
        let p = provider(cluster, kind, ns, name).ok_or("provider gone")?;
        assert_eq!(
            p.pointer("/status/contract"),
            Some(&Value::from("v1beta2")),
            "{kind}"
        );
        assert!(
            p.pointer("/spec/paused").is_none_or(|v| v == false),
            "{kind} still paused"
        );
        assert!(
            p.pointer("/metadata/annotations/management.cluster.x-k8s.io~1paused-by-upgrade")
                .is_none(),
            "{kind}: pause annotation left behind"
        );
        let d = get_json(cluster, &["deployment", "-n", ns, deployment])?;
        assert_eq!(d["spec"]["replicas"], 1, "{kind}");
    }
    let done = plugin_ok(Some(cluster), &["upgrade", "apply", "--repository", &r])?;
    assert!(
        done.stdout
            .contains("every provider is up to date for contract v1beta2"),
        "{}",
        done.all()
    );
    Ok(())
}

/// A provider whose source cannot be reached (a GitHub API nothing listens at) next to the
/// providers reading ConfigMaps: the plan shows every other provider, marks that one with the
/// reason, and exits non-zero only at the end. The provider is removed afterwards.
fn unreachable_source_spares_the_rest_of_the_plan(cluster: &TestCluster) -> TestResult {
    let unreachable = "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: AddonProvider\nmetadata: {name: unreachable, namespace: sample-core-system}\nspec:\n  version: v0.1.0\n  fetchConfig: {url: https://github.com/capi-provider-operator/unreachable/releases}\n";
    let dir = TempDir::new("capi-plugin-unreachable")?;
    let file = dir.0.join("addon.yaml");
    std::fs::write(&file, unreachable)?;
    let file = file.to_string_lossy().into_owned();
    cluster.kubectl_ok(&["apply", "-f", &file])?;
    // Port 9 (discard): nothing listens, every connection is refused.
    let api = ["upgrade", "plan", "--github-api-url", "http://127.0.0.1:9"];
    let plan = plugin_env(Some(cluster), &api, &[]);
    let json = plugin_env(Some(cluster), &[&api[..], &["-o", "json"]].concat(), &[]);
    cluster.kubectl_ok(&["delete", "--wait", "--timeout=60s", "-f", &file])?;
    let (plan, json) = (plan?, json?);
    assert!(!plan.ok, "the plan must fail at the end:\n{}", plan.all());
    for (kind, ns, name, _) in PROVIDERS {
        let row = plan
            .stdout
            .lines()
            .find(|l| l.starts_with(name) && l.contains(ns) && l.contains(kind));
        assert!(
            row.is_some_and(|l| l.contains("v0.1.0") && l.contains("Already up to date")),
            "{kind} {ns}/{name} is planned:\n{}",
            plan.all()
        );
    }
    let row = plan.stdout.lines().find(|l| l.starts_with("unreachable"));
    assert!(
        row.is_some_and(|l| l.contains("unknown (see below)")),
        "{}",
        plan.all()
    );
    assert!(
        plan.stdout
            .contains("AddonProvider sample-core-system/unreachable: listing versions from")
            && plan.stdout.contains("temporary failure"),
        "the reason is shown:\n{}",
        plan.all()
    );
    assert!(
        plan.stderr
            .contains("1 of 4 providers could not be planned"),
        "{}",
        plan.all()
    );
    // As data: the three plans and the one error.
    assert!(!json.ok, "{}", json.all());
    let rows: Value = serde_json::from_str(&json.stdout)?;
    let rows = rows.as_array().ok_or("the plan is not a list")?;
    assert_eq!(rows.len(), PROVIDERS.len() + 1, "{}", json.all());
    let failed: Vec<&Value> = rows.iter().filter(|r| r.get("error").is_some()).collect();
    assert_eq!(failed.len(), 1, "{}", json.all());
    assert_eq!(failed[0]["name"], "unreachable");
    Ok(())
}
