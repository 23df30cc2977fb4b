//! Unit tests of the contract checks on small hand-written CRDs.

use super::*;
use serde_json::json;

/// A schema declaring each dotted path with the given property schema.
fn schema(fields: &[(&str, Value)]) -> Value {
    let mut root = json!({"type": "object"});
    for (path, leaf) in fields {
        let mut s = &mut root;
        let parts: Vec<&str> = path.split('.').collect();
        for (i, p) in parts.iter().enumerate() {
            if s.get("type").is_none() {
                s["type"] = json!("object");
            }
            s = &mut s["properties"][*p];
            if i + 1 == parts.len() {
                *s = leaf.clone();
            }
        }
    }
    root
}

fn t(ty: &str) -> Value {
    json!({"type": ty})
}

fn endpoint() -> Value {
    json!({"type": "object", "properties": {"host": {"type": "string"}, "port": {"type": "integer"}}})
}

/// A CRD of `kind` in `group` serving `version` with `schema`, labelled for that contract.
fn crd(group: &str, kind: &str, version: &str, schema: Value) -> Value {
    let plural = pluralize(&kind.to_lowercase());
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}"),
                     "labels": {format!("cluster.x-k8s.io/{version}"): version}},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural},
            "versions": [{"name": version, "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": schema}}]
        }
    })
}

const INFRA: &str = "infrastructure.foo.example";

fn template(group: &str, kind: &str, version: &str) -> Value {
    crd(
        group,
        kind,
        version,
        schema(&[("spec.template.spec", t("object"))]),
    )
}

fn deployment() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "m"}})
}

fn good_release() -> Vec<Value> {
    let v = "v1beta2";
    vec![
        crd(
            INFRA,
            "FooCluster",
            v,
            schema(&[
                ("spec.controlPlaneEndpoint", endpoint()),
                ("status.initialization.provisioned", t("boolean")),
            ]),
        ),
        template(INFRA, "FooClusterTemplate", v),
        crd(
            INFRA,
            "FooMachine",
            v,
            schema(&[
                ("spec.providerID", t("string")),
                ("status.initialization.provisioned", t("boolean")),
            ]),
        ),
        template(INFRA, "FooMachineTemplate", v),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": "capi-foo-clusters", "labels": {AGGREGATE_TO_MANAGER_LABEL: "true"}},
               "rules": [{"apiGroups": [INFRA], "resources": ["fooclusters"],
                          "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}]}),
        deployment(),
    ]
}

fn worst(findings: &[Finding]) -> Severity {
    findings
        .iter()
        .map(|f| f.severity)
        .max()
        .unwrap_or(Severity::Ok)
}

fn errors(findings: &[Finding]) -> Vec<String> {
    findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .map(ToString::to_string)
        .collect()
}

/// The CRD of `kind` in `objects`.
fn crd_of<'a>(objects: &'a mut [Value], kind: &str) -> &'a mut Value {
    let i = objects
        .iter()
        .position(|o| o["spec"]["names"]["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in the test release"));
    &mut objects[i]
}

fn set_schema(objects: &mut [Value], kind: &str, s: Value) {
    crd_of(objects, kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = s;
}

#[test]
fn a_conforming_infrastructure_release_passes() {
    let f = verify(
        ProviderType::Infrastructure,
        Some("v1beta2"),
        &good_release(),
    );
    assert_eq!(worst(&f), Severity::Ok, "{f:#?}");
    for check in [
        "aggregate-to-manager",
        "infra-cluster-endpoint",
        "infra-machine-provider-id",
        "externally-managed",
        "infra-machine-template",
    ] {
        assert!(f.iter().any(|f| f.check == check), "{check}: {f:#?}");
    }
}

#[test]
fn contract_breaches_are_reported() {
    let mut objs = good_release();
    // Wrong CRD name, cluster-scoped, v1beta1 status only, no label, no template.
    objs[0]["metadata"]["name"] = json!("foocluster.infrastructure.foo.example");
    objs[0]["spec"]["scope"] = json!("Cluster");
    objs[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"] =
        json!({"type": "object", "properties": {"ready": {"type": "boolean"}}});
    objs[0]["metadata"]["labels"] = json!({});
    objs.remove(1);
    objs[3]["rules"][0]["verbs"] = json!(["get", "list"]);
    let f = verify(ProviderType::Infrastructure, Some("v1beta2"), &objs);
    let bad: Vec<(&str, Severity)> = f
        .iter()
        .filter(|f| f.severity != Severity::Ok)
        .map(|f| (f.check, f.severity))
        .collect();
    assert_eq!(
        bad,
        [
            ("crd-name", Severity::Error),
            ("contract-label", Severity::Error),
            ("infra-cluster", Severity::Error),
            ("infra-cluster-template", Severity::Warning),
            ("aggregate-to-manager", Severity::Error),
        ],
        "{f:#?}"
    );
    // status.ready stands in for status.initialization.provisioned under v1beta2 (the
    // contract's compatibility with v1beta1) and is the field itself under v1beta1.
    let ready = |contract: &str| {
        verify(ProviderType::Infrastructure, Some(contract), &objs)
            .into_iter()
            .find(|f| f.check == "infra-cluster-status")
            .map(|f| (f.severity, f.message))
    };
    let (severity, message) = ready("v1beta2").unwrap_or((Severity::Error, String::new()));
    assert_eq!(severity, Severity::Ok);
    assert!(message.contains("status.ready in place of"), "{message}");
    assert_eq!(ready("v1beta1").map(|r| r.0), Some(Severity::Ok));
}

#[test]
fn no_infra_cluster_and_skipped_names() {
    let mut objs = good_release();
    objs.retain(|o| o["kind"] != "CustomResourceDefinition");
    objs.push(crd(
        INFRA,
        "FooMachine",
        "v1beta2",
        json!({"type": "object"}),
    ));
    objs[2]["metadata"]["name"] = json!("foomachine.infrastructure.foo.example");
    objs[2]["metadata"]["annotations"] = json!({SKIP_CRD_NAME_CHECK_ANNOTATION: ""});
    let f = verify(ProviderType::Infrastructure, Some("v1beta2"), &objs);
    let by = |check: &str| {
        f.iter()
            .filter(|f| f.check == check)
            .map(|f| f.severity)
            .collect::<Vec<_>>()
    };
    assert_eq!(by("infra-cluster"), [Severity::Error]);
    assert_eq!(by("crd-name"), [Severity::Warning]);
    assert_eq!(by("infra-machine-provider-id"), [Severity::Error], "{f:#?}");
    assert_eq!(by("infra-machine-template"), [Severity::Error]);
    // Bootstrap providers have no InfraCluster to check.
    let f = verify(ProviderType::Bootstrap, None, &objs);
    assert!(f.iter().all(|f| !f.check.starts_with("infra-")));
}

#[test]
fn failure_domains_are_a_map_in_v1beta1_and_a_list_in_v1beta2() {
    let mut objs = good_release();
    let map = json!({"type": "object", "additionalProperties": {"type": "object"}});
    let s = schema(&[
        ("spec.controlPlaneEndpoint", endpoint()),
        ("status.ready", t("boolean")),
        ("status.initialization.provisioned", t("boolean")),
        ("status.failureDomains", map),
    ]);
    set_schema(&mut objs, "FooCluster", s);
    let v1 = verify(ProviderType::Infrastructure, Some("v1beta1"), &objs);
    let on_domains = |e: &Vec<String>| e.iter().filter(|e| e.contains("failureDomains")).count();
    assert_eq!(on_domains(&errors(&v1)), 0, "{v1:#?}");
    let v2 = verify(ProviderType::Infrastructure, Some("v1beta2"), &objs);
    let e = errors(&v2);
    assert!(
        e.iter()
            .any(|e| e.contains("InfraCluster contract v1beta2: FooCluster")
                && e.contains("status.failureDomains is declared but is not a list")),
        "{e:#?}"
    );
}

#[test]
fn the_crd_version_the_contract_label_names_is_checked() {
    let mut objs = good_release();
    let c = crd_of(&mut objs, "FooMachine");
    let old = json!({"name": "v1alpha9", "served": true, "storage": false,
                     "schema": {"openAPIV3Schema": schema(&[("spec.size", t("string"))])}});
    if let Some(v) = c["spec"]["versions"].as_array_mut() {
        v.insert(0, old);
    }
    c["metadata"]["labels"]["cluster.x-k8s.io/v1beta2"] = json!("v1alpha9");
    let e = errors(&verify(
        ProviderType::Infrastructure,
        Some("v1beta2"),
        &objs,
    ));
    assert!(
        e.iter().any(|e| e.contains(
            "InfraMachine contract v1beta2: FooMachine v1alpha9: required field spec.providerID"
        )),
        "{e:#?}"
    );
}

fn bootstrap_release(status: &[(&str, Value)]) -> Vec<Value> {
    let g = "bootstrap.foo.example";
    vec![
        crd(g, "FooConfig", "v1beta2", schema(status)),
        template(g, "FooConfigTemplate", "v1beta2"),
        deployment(),
    ]
}

#[test]
fn bootstrap_configs_need_the_data_secret_and_its_initialization() {
    let good = bootstrap_release(&[
        ("status.dataSecretName", t("string")),
        ("status.initialization.dataSecretCreated", t("boolean")),
    ]);
    let f = verify(ProviderType::Bootstrap, Some("v1beta2"), &good);
    assert_eq!(worst(&f), Severity::Ok, "{f:#?}");
    let bad = bootstrap_release(&[("status.initialization.dataSecretCreated", t("boolean"))]);
    let e = errors(&verify(ProviderType::Bootstrap, Some("v1beta2"), &bad));
    assert_eq!(
        e,
        [
            "ERROR   bootstrap-config-data-secret: BootstrapConfig contract v1beta2: FooConfig v1beta2: required field status.dataSecretName (string) is missing"
        ],
    );
    // The v1beta1 contract reads status.ready instead.
    let e = errors(&verify(ProviderType::Bootstrap, Some("v1beta1"), &good));
    assert!(
        e.iter()
            .any(|e| e.contains("BootstrapConfig contract v1beta1") && e.contains("status.ready")),
        "{e:#?}"
    );
    let mut no_template = good;
    no_template.remove(1);
    let e = errors(&verify(
        ProviderType::Bootstrap,
        Some("v1beta2"),
        &no_template,
    ));
    assert!(
        e.iter()
            .any(|e| e.contains("bootstrap-config-template") && e.contains("FooConfigTemplate")),
        "{e:#?}"
    );
}

fn control_plane(fields: &[(&str, Value)], scale: bool) -> Vec<Value> {
    let g = "controlplane.foo.example";
    let mut c = crd(g, "FooControlPlane", "v1beta2", schema(fields));
    if scale {
        c["spec"]["versions"][0]["subresources"] = json!({"status": {}, "scale": {
            "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector"}});
    }
    vec![
        c,
        template(g, "FooControlPlaneTemplate", "v1beta2"),
        deployment(),
    ]
}

#[test]
fn control_plane_counters_are_required_once_replicas_are_declared() {
    let init = (
        "status.initialization.controlPlaneInitialized",
        t("boolean"),
    );
    // A managed control plane with no replicas, version or machines needs none of them.
    let f = verify(
        ProviderType::ControlPlane,
        Some("v1beta2"),
        &control_plane(std::slice::from_ref(&init), false),
    );
    assert_eq!(worst(&f), Severity::Ok, "{f:#?}");
    let replicas = [
        init.clone(),
        ("spec.replicas", t("integer")),
        ("spec.version", t("string")),
        ("status.replicas", t("integer")),
        ("status.readyReplicas", t("integer")),
        ("status.availableReplicas", t("integer")),
        ("status.upToDateReplicas", t("integer")),
        ("status.selector", t("string")),
        ("status.versions", t("array")),
    ];
    let f = verify(
        ProviderType::ControlPlane,
        Some("v1beta2"),
        &control_plane(&replicas, true),
    );
    assert_eq!(worst(&f), Severity::Ok, "{f:#?}");
    let e = errors(&verify(
        ProviderType::ControlPlane,
        Some("v1beta2"),
        &control_plane(&replicas[..7], false),
    ));
    assert!(
        e.iter().any(|e| e.contains("status.selector")
            && e.contains("required once spec.replicas is declared")),
        "{e:#?}"
    );
    assert!(e.iter().any(|e| e.contains("subresources.scale")), "{e:#?}");
    assert!(
        e.iter().any(|e| e.contains("status.version (string)")
            && e.contains("required once spec.version is declared")),
        "{e:#?}"
    );
}

#[test]
fn ipam_providers_define_pools_and_the_core_its_claims() {
    let pool = crd(
        "ipam.foo.example",
        "FooIPPool",
        "v1beta2",
        schema(&[("status.conditions", t("array"))]),
    );
    let f = verify(ProviderType::Ipam, Some("v1beta2"), &[pool, deployment()]);
    assert_eq!(worst(&f), Severity::Ok, "{f:#?}");
    let e = errors(&verify(
        ProviderType::Ipam,
        Some("v1beta2"),
        &[deployment()],
    ));
    assert!(e.iter().any(|e| e.contains("no IPAM pool CRD")), "{e:#?}");

    let claim = |status: Value| {
        crd(
            rules::IPAM_GROUP,
            "IPAddressClaim",
            "v1beta2",
            schema(&[
                ("spec.poolRef.name", t("string")),
                ("spec.poolRef.kind", t("string")),
                ("spec.poolRef.apiGroup", t("string")),
                ("status", status),
            ]),
        )
    };
    let ok = claim(schema(&[("addressRef.name", t("string"))]));
    let f = verify(ProviderType::Core, Some("v1beta2"), &[ok, deployment()]);
    assert_eq!(worst(&f), Severity::Ok, "{f:#?}");
    let e = errors(&verify(
        ProviderType::Core,
        Some("v1beta2"),
        &[claim(t("object")), deployment()],
    ));
    assert_eq!(
        e,
        [
            "ERROR   ipam-claim: IPAM IPAddressClaim contract v1beta2: IPAddressClaim v1beta2: required field status.addressRef.name (string) is missing"
        ]
    );
}

#[test]
fn an_external_system_must_be_able_to_mark_the_infra_cluster_ready() {
    let mut objs = good_release();
    set_schema(
        &mut objs,
        "FooCluster",
        schema(&[
            ("spec.controlPlaneEndpoint", endpoint()),
            ("status", t("object")),
        ]),
    );
    let f = verify(ProviderType::Infrastructure, Some("v1beta2"), &objs);
    let e: Vec<&Finding> = f
        .iter()
        .filter(|f| f.check == "externally-managed" && f.severity == Severity::Error)
        .collect();
    assert_eq!(e.len(), 1, "{f:#?}");
    assert!(
        e[0].message.contains("status.initialization.provisioned"),
        "{e:#?}"
    );
    // A status the schema leaves open keeps whatever the external system writes.
    set_schema(
        &mut objs,
        "FooCluster",
        schema(&[
            ("spec.controlPlaneEndpoint", endpoint()),
            (
                "status",
                json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            ),
        ]),
    );
    let f = verify(ProviderType::Infrastructure, Some("v1beta2"), &objs);
    assert!(errors(&f).is_empty(), "{f:#?}");
    assert_eq!(worst(&f), Severity::Warning);
}

#[test]
fn an_unknown_contract_is_checked_as_the_version_that_fits() {
    let mut objs = good_release();
    for kind in ["FooCluster", "FooMachine"] {
        let c = crd_of(&mut objs, kind);
        let s = &mut c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
        *s = schema(&[("ready", t("boolean"))]);
    }
    let f = verify(ProviderType::Infrastructure, None, &objs);
    assert!(errors(&f).is_empty(), "{f:#?}");
    let f = verify(ProviderType::Infrastructure, Some("v1beta9"), &objs);
    assert!(
        f.iter().any(|f| f.severity == Severity::Warning
            && f.message.contains("no rules for contract v1beta9")),
        "{f:#?}"
    );
}
