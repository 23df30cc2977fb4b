//! Checks of a release's components against the Cluster API provider contracts: CRD names as
//! Cluster API's `contract.CalculateCRDName` computes them (flect's pluralization of the
//! lower-cased kind, then the group), the contract version labels on provider CRDs, and for
//! infrastructure providers the InfraCluster contract: a namespaced InfraCluster CRD with
//! `spec.controlPlaneEndpoint {host, port}` and `status.ready` (v1beta1) or
//! `status.initialization.provisioned` (v1beta2), a matching InfraClusterTemplate CRD with
//! `spec.template.spec`, and a ClusterRole with the `cluster.x-k8s.io/aggregate-to-manager`
//! label granting the core controller full access to the InfraCluster resource.
//!
//! Everything here is pure: objects in, findings out.

use std::{collections::BTreeSet, fmt};

use capi_operator_api::ProviderType;
use serde_json::Value;

/// Annotation that exempts a CRD from the CRD name check (as in clusterctl).
pub const SKIP_CRD_NAME_CHECK_ANNOTATION: &str =
    "clusterctl.cluster.x-k8s.io/skip-crd-name-preflight-check";
/// Label that aggregates a ClusterRole into the core controller's role.
pub const AGGREGATE_TO_MANAGER_LABEL: &str = "cluster.x-k8s.io/aggregate-to-manager";
/// API group of the Cluster API infrastructure providers sponsored by SIG Cluster Lifecycle,
/// which the core controller's own role covers.
pub const SIG_INFRASTRUCTURE_GROUP: &str = "infrastructure.cluster.x-k8s.io";

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// The check passed.
    Ok,
    /// Works today but deviates from the contract (or cannot be checked fully).
    Warning,
    /// Breaks the contract.
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Severity::Ok => "OK",
            Severity::Warning => "WARNING",
            Severity::Error => "ERROR",
        })
    }
}

/// One result of a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Severity.
    pub severity: Severity,
    /// Short name of the check (e.g. `crd-name`).
    pub check: &'static str,
    /// What was found.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<7} {}: {}", self.severity, self.check, self.message)
    }
}

fn finding(severity: Severity, check: &'static str, message: impl Into<String>) -> Finding {
    Finding {
        severity,
        check,
        message: message.into(),
    }
}

// flect's dictionary (v1.0): singular, plural, alternative plural, unidirectional, exact.
// Uncountable words are listed with plural == singular.
struct Word {
    singular: &'static str,
    plural: &'static str,
    alternative: &'static str,
    unidirectional: bool,
    exact: bool,
}

const fn w(singular: &'static str, plural: &'static str) -> Word {
    Word {
        singular,
        plural,
        alternative: "",
        unidirectional: false,
        exact: false,
    }
}

const fn wa(singular: &'static str, plural: &'static str, alternative: &'static str) -> Word {
    Word {
        singular,
        plural,
        alternative,
        unidirectional: false,
        exact: false,
    }
}

const fn wu(singular: &'static str, plural: &'static str, alternative: &'static str) -> Word {
    Word {
        singular,
        plural,
        alternative,
        unidirectional: true,
        exact: false,
    }
}

const fn wx(singular: &'static str, plural: &'static str) -> Word {
    Word {
        singular,
        plural,
        alternative: "",
        unidirectional: false,
        exact: true,
    }
}

const DICTIONARY: &[Word] = &[
    w("aircraft", "aircraft"),
    wa("beef", "beef", "beefs"),
    w("bison", "bison"),
    wu("blues", "blues", ""),
    w("chassis", "chassis"),
    w("deer", "deer"),
    wa("fish", "fish", "fishes"),
    w("moose", "moose"),
    w("police", "police"),
    wa("salmon", "salmon", "salmons"),
    w("series", "series"),
    w("sheep", "sheep"),
    wa("shrimp", "shrimp", "shrimps"),
    w("species", "species"),
    wa("swine", "swine", "swines"),
    wa("trout", "trout", "trouts"),
    wa("tuna", "tuna", "tunas"),
    w("you", "you"),
    w("child", "children"),
    wx("ox", "oxen"),
    w("foot", "feet"),
    w("goose", "geese"),
    w("man", "men"),
    w("human", "humans"),
    wx("louse", "lice"),
    w("mouse", "mice"),
    w("tooth", "teeth"),
    w("woman", "women"),
    wx("die", "dice"),
    w("person", "people"),
    wa("adieu", "adieux", "adieus"),
    w("fabliau", "fabliaux"),
    wa("bureau", "bureaus", "bureaux"),
    w("criterion", "criteria"),
    wa("ganglion", "ganglia", "ganglions"),
    wa("lexicon", "lexica", "lexicons"),
    wa("mitochondrion", "mitochondria", "mitochondrions"),
    w("noumenon", "noumena"),
    w("phenomenon", "phenomena"),
    w("taxon", "taxa"),
    w("media", "media"),
    wu("medium", "media", "mediums"),
    wa("stadium", "stadiums", "stadia"),
    wa("aquarium", "aquaria", "aquariums"),
    wa("auditorium", "auditoria", "auditoriums"),
    wa("symposium", "symposia", "symposiums"),
    wa("curriculum", "curriculums", "curricula"),
    w("quota", "quotas"),
    wa("alumnus", "alumni", "alumnuses"),
    w("bacillus", "bacilli"),
    wa("cactus", "cacti", "cactuses"),
    w("coccus", "cocci"),
    wa("focus", "foci", "focuses"),
    wa("locus", "loci", "locuses"),
    wa("nucleus", "nuclei", "nucleuses"),
    wa("octopus", "octupuses", "octopi"),
    wa("radius", "radii", "radiuses"),
    w("syllabus", "syllabi"),
    wa("corpus", "corpora", "corpuses"),
    w("genus", "genera"),
    w("alumna", "alumnae"),
    w("vertebra", "vertebrae"),
    w("differentia", "differentiae"),
    w("minutia", "minutiae"),
    w("vita", "vitae"),
    w("larva", "larvae"),
    w("postcava", "postcavae"),
    w("praecava", "praecavae"),
    w("uva", "uvae"),
    wa("apex", "apices", "apexes"),
    wa("codex", "codices", "codexes"),
    wa("index", "indices", "indexes"),
    wa("latex", "latices", "latexes"),
    wa("vertex", "vertices", "vertexes"),
    wa("vortex", "vortices", "vortexes"),
    wa("appendix", "appendices", "appendixes"),
    wa("radix", "radices", "radixes"),
    wa("helix", "helices", "helixes"),
    wx("axis", "axes"),
    w("crisis", "crises"),
    wu("ellipsis", "ellipses", ""),
    w("genesis", "geneses"),
    w("oasis", "oases"),
    w("thesis", "theses"),
    w("testis", "testes"),
    w("base", "bases"),
    wu("basis", "bases", ""),
    wx("alias", "aliases"),
    w("vedalia", "vedalias"),
    wx("use", "uses"),
    w("abuse", "abuses"),
    w("cause", "causes"),
    w("clause", "clauses"),
    w("cruse", "cruses"),
    w("excuse", "excuses"),
    w("fuse", "fuses"),
    w("house", "houses"),
    w("misuse", "misuses"),
    w("muse", "muses"),
    w("pause", "pauses"),
    w("ache", "aches"),
    w("topaz", "topazes"),
    wa("buffalo", "buffaloes", "buffalos"),
    w("potato", "potatoes"),
    w("tomato", "tomatoes"),
    w("equipment", "equipment"),
    w("information", "information"),
    w("jeans", "jeans"),
    w("money", "money"),
    w("news", "news"),
    w("rice", "rice"),
    wa("dwarf", "dwarfs", "dwarves"),
    wa("hoof", "hoofs", "hooves"),
    w("thief", "thieves"),
    w("chive", "chives"),
    w("hive", "hives"),
    w("move", "moves"),
    w("movie", "movies"),
    w("cookie", "cookies"),
    w("pretorium", "pretoriums"),
    w("agenda", "agendas"),
    wa("formula", "formulas", "formulae"),
    w("shoe", "shoes"),
    wx("toe", "toes"),
    w("graffiti", "graffiti"),
    wx("ID", "IDs"),
];

// flect's suffix rules, in priority order (singular suffix, plural suffix).
const SUFFIXES: &[(&str, &str)] = &[
    ("tive", "tives"),
    ("eaf", "eaves"),
    ("oaf", "oaves"),
    ("afe", "aves"),
    ("arf", "arves"),
    ("rfe", "rves"),
    ("rf", "rves"),
    ("lf", "lves"),
    ("fe", "ves"),
    ("ay", "ays"),
    ("ey", "eys"),
    ("oy", "oys"),
    ("quy", "quies"),
    ("uy", "uys"),
    ("y", "ies"),
    ("eau", "eaux"),
    ("bula", "bulae"),
    ("dula", "bulae"),
    ("lula", "bulae"),
    ("nula", "bulae"),
    ("vula", "bulae"),
    ("hedron", "hedra"),
    ("ium", "ia"),
    ("seum", "seums"),
    ("eum", "ea"),
    ("oum", "oa"),
    ("stracum", "straca"),
    ("dum", "da"),
    ("elum", "ela"),
    ("ilum", "ila"),
    ("olum", "ola"),
    ("ulum", "ula"),
    ("llum", "lla"),
    ("ylum", "yla"),
    ("imum", "ima"),
    ("ernum", "erna"),
    ("gnum", "gna"),
    ("brum", "bra"),
    ("crum", "cra"),
    ("terum", "tera"),
    ("serum", "sera"),
    ("trum", "tra"),
    ("antum", "anta"),
    ("atum", "ata"),
    ("entum", "enta"),
    ("etum", "eta"),
    ("itum", "ita"),
    ("otum", "ota"),
    ("utum", "uta"),
    ("ctum", "cta"),
    ("ovum", "ova"),
    ("trix", "trices"),
    ("iasis", "iases"),
    ("mesis", "meses"),
    ("kinesis", "kineses"),
    ("resis", "reses"),
    ("gnosis", "gnoses"),
    ("opsis", "opses"),
    ("ysis", "yses"),
    ("ouse", "ouses"),
    ("lause", "lauses"),
    ("us", "uses"),
    ("ch", "ches"),
    ("io", "ios"),
    ("sh", "shes"),
    ("ss", "sses"),
    ("ez", "ezzes"),
    ("iz", "izzes"),
    ("tz", "tzes"),
    ("zz", "zzes"),
    ("ano", "anos"),
    ("lo", "los"),
    ("to", "tos"),
    ("oo", "oos"),
    ("o", "oes"),
    ("x", "xes"),
    ("S", "Ses"),
];

/// The plural of a single word, as `github.com/gobuffalo/flect` v1 computes it (the
/// pluralization Kubernetes tooling and Cluster API use for resource names): whole-word
/// dictionary entries first, then suffix rules (dictionary words as suffixes, in reverse order,
/// then the irregular suffixes), then "s" unless the word already ends in "s".
pub fn pluralize(word: &str) -> String {
    if word.is_empty() {
        return String::new();
    }
    if let Some(d) = DICTIONARY.iter().find(|d| d.singular == word) {
        return d.plural.to_string();
    }
    let is_plural = |s: &str| {
        DICTIONARY.iter().any(|d| {
            !d.unidirectional
                && (d.plural == s || (!d.alternative.is_empty() && d.alternative == s))
        })
    };
    if is_plural(word) {
        return word.to_string();
    }
    let lower = word.to_lowercase();
    if is_plural(&lower) {
        return word.to_string();
    }
    if let Some(d) = DICTIONARY.iter().find(|d| d.singular == lower) {
        return replace_suffix(word, word.len(), d.plural);
    }
    let dict_rules = DICTIONARY
        .iter()
        .rev()
        .filter(|d| !d.exact)
        .map(|d| (d.singular, d.plural));
    for (singular, plural) in dict_rules.chain(SUFFIXES.iter().copied()) {
        if word.ends_with(plural) {
            return word.to_string();
        }
        if word.ends_with(singular) {
            return replace_suffix(word, singular.len(), plural);
        }
    }
    if lower.ends_with('s') {
        return word.to_string();
    }
    format!("{word}s")
}

fn replace_suffix(word: &str, suffix_len: usize, with: &str) -> String {
    let keep = word.len().saturating_sub(suffix_len);
    format!("{}{with}", word.get(..keep).unwrap_or(""))
}

/// The CRD name Cluster API expects for `kind` in `group`
/// (`contract.CalculateCRDName`): the flect plural of the lower-cased kind, a dot, the group.
pub fn calculate_crd_name(group: &str, kind: &str) -> String {
    format!("{}.{group}", pluralize(&kind.to_lowercase()))
}

// Accessors over a CRD as JSON.

fn str_at<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

fn crds(objects: &[Value]) -> impl Iterator<Item = &Value> {
    objects.iter().filter(|o| {
        o.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition")
            && o.get("apiVersion")
                .and_then(Value::as_str)
                .is_some_and(|a| a.starts_with("apiextensions.k8s.io/"))
    })
}

fn crd_kind(crd: &Value) -> &str {
    str_at(crd, "/spec/names/kind")
}

fn crd_group(crd: &Value) -> &str {
    str_at(crd, "/spec/group")
}

fn crd_name(crd: &Value) -> &str {
    str_at(crd, "/metadata/name")
}

fn served_versions(crd: &Value) -> Vec<&str> {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| v.get("served").and_then(Value::as_bool) != Some(false))
                .filter_map(|v| v.get("name").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}

/// The schema of the CRD version stored (else the last one listed), with that version's name.
fn storage_schema(crd: &Value) -> Option<(&str, &Value)> {
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array)?;
    let v = versions
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .or_else(|| versions.last())?;
    let name = v.get("name").and_then(Value::as_str).unwrap_or("");
    Some((name, v.pointer("/schema/openAPIV3Schema")?))
}

/// The schema of the property at `path` (property names), if declared.
fn property<'a>(schema: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut s = schema;
    for p in path {
        s = s.pointer("/properties")?.get(*p)?;
    }
    Some(s)
}

fn has_type(schema: Option<&Value>, ty: &str) -> bool {
    schema
        .and_then(|s| s.get("type"))
        .and_then(Value::as_str)
        .is_some_and(|t| t == ty)
}

/// Whether an object schema at `path` leaves its content open (so a field cannot be checked).
fn open_at(schema: &Value, path: &[&str]) -> bool {
    (0..=path.len()).any(|n| {
        let Some(s) = property(schema, path.get(..n).unwrap_or(&[])) else {
            return false;
        };
        s.get("x-kubernetes-preserve-unknown-fields")
            .and_then(Value::as_bool)
            == Some(true)
            && s.get("properties").is_none()
    })
}

/// Checks `objects` (the release's rendered or parsed components) of a provider of type `t`
/// following `contract` (`v1beta1`, `v1beta2`; `None` when unknown) against the contracts.
/// Returns every finding, passed checks included, in a stable order.
pub fn verify(t: ProviderType, contract: Option<&str>, objects: &[Value]) -> Vec<Finding> {
    let mut out = Vec::new();
    check_crd_names(objects, &mut out);
    if t != ProviderType::Core {
        check_contract_labels(contract, objects, &mut out);
    }
    if t == ProviderType::Infrastructure {
        check_infra_cluster(contract, objects, &mut out);
    }
    if !objects.iter().any(|o| {
        matches!(
            o.get("kind").and_then(Value::as_str),
            Some("Deployment" | "DaemonSet")
        )
    }) {
        out.push(finding(
            Severity::Warning,
            "controller",
            "the release has no Deployment or DaemonSet: nothing would run its controllers",
        ));
    }
    out
}

fn check_crd_names(objects: &[Value], out: &mut Vec<Finding>) {
    let mut any = false;
    for crd in crds(objects) {
        any = true;
        let (name, group, kind) = (crd_name(crd), crd_group(crd), crd_kind(crd));
        let want = calculate_crd_name(group, kind);
        let skipped = crd
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(SKIP_CRD_NAME_CHECK_ANNOTATION))
            .is_some();
        if name == want {
            out.push(finding(
                Severity::Ok,
                "crd-name",
                format!("{name} (kind {kind})"),
            ));
        } else if skipped {
            out.push(finding(
                Severity::Warning,
                "crd-name",
                format!(
                    "{name} should be {want} for kind {kind}; the check is skipped by the {SKIP_CRD_NAME_CHECK_ANNOTATION} annotation"
                ),
            ));
        } else {
            out.push(finding(
                Severity::Error,
                "crd-name",
                format!(
                    "{name} should be {want}: Cluster API finds the CRD of kind {kind} in group {group} by that name (contract.CalculateCRDName)"
                ),
            ));
        }
    }
    if !any {
        out.push(finding(
            Severity::Warning,
            "crd-name",
            "the release defines no CustomResourceDefinition",
        ));
    }
}

fn check_contract_labels(contract: Option<&str>, objects: &[Value], out: &mut Vec<Finding>) {
    let Some(contract) = contract else {
        out.push(finding(
            Severity::Warning,
            "contract-label",
            "the contract of the release is unknown, so the CRD contract labels were not checked",
        ));
        return;
    };
    let label = format!("cluster.x-k8s.io/{contract}");
    for crd in crds(objects) {
        let name = crd_name(crd);
        let served = served_versions(crd);
        match crd
            .pointer("/metadata/labels")
            .and_then(|l| l.get(&label))
            .and_then(Value::as_str)
        {
            None => out.push(finding(
                Severity::Error,
                "contract-label",
                format!(
                    "{name} lacks the label {label}: Cluster API reads from it which API versions of the CRD follow contract {contract}"
                ),
            )),
            Some(value) => {
                let unknown: Vec<&str> = value
                    .split('_')
                    .filter(|v| !v.is_empty() && !served.contains(v))
                    .collect();
                if value.trim().is_empty() {
                    out.push(finding(
                        Severity::Error,
                        "contract-label",
                        format!("{name}: the label {label} names no API version"),
                    ));
                } else if unknown.is_empty() {
                    out.push(finding(
                        Severity::Ok,
                        "contract-label",
                        format!("{name}: {label}={value}"),
                    ));
                } else {
                    out.push(finding(
                        Severity::Error,
                        "contract-label",
                        format!(
                            "{name}: the label {label}={value} names versions the CRD does not serve: {}",
                            unknown.join(", ")
                        ),
                    ));
                }
            }
        }
    }
}

fn check_infra_cluster(contract: Option<&str>, objects: &[Value], out: &mut Vec<Finding>) {
    let infra: Vec<&Value> = crds(objects)
        .filter(|c| crd_kind(c).ends_with("Cluster") && crd_kind(c).len() > "Cluster".len())
        .collect();
    if infra.is_empty() {
        let kinds: Vec<&str> = crds(objects).map(crd_kind).collect();
        out.push(finding(
            Severity::Error,
            "infra-cluster",
            format!(
                "no InfraCluster CRD (a kind named <Provider>Cluster) among the release's CRDs ({})",
                if kinds.is_empty() {
                    "none".to_string()
                } else {
                    kinds.join(", ")
                }
            ),
        ));
        return;
    }
    for crd in infra {
        let (kind, group) = (crd_kind(crd), crd_group(crd));
        out.push(finding(
            Severity::Ok,
            "infra-cluster",
            format!("InfraCluster kind {kind} in group {group}"),
        ));
        check_namespaced(crd, "infra-cluster-scope", out);
        match storage_schema(crd) {
            None => out.push(finding(
                Severity::Error,
                "infra-cluster-schema",
                format!("{kind}: the CRD has no openAPIV3Schema to check"),
            )),
            Some((version, schema)) => {
                check_endpoint(kind, version, schema, out);
                check_ready(kind, version, schema, contract, out);
            }
        }
        check_template(objects, crd, out);
        check_aggregated_role(objects, crd, out);
    }
}

fn check_namespaced(crd: &Value, check: &'static str, out: &mut Vec<Finding>) {
    let scope = str_at(crd, "/spec/scope");
    if scope == "Namespaced" {
        out.push(finding(
            Severity::Ok,
            check,
            format!("{} is namespaced", crd_kind(crd)),
        ));
    } else {
        out.push(finding(
            Severity::Error,
            check,
            format!(
                "{} must be namespace-scoped, its CRD has scope {scope:?}",
                crd_kind(crd)
            ),
        ));
    }
}

fn check_endpoint(kind: &str, version: &str, schema: &Value, out: &mut Vec<Finding>) {
    const CHECK: &str = "infra-cluster-endpoint";
    let path = ["spec", "controlPlaneEndpoint"];
    match property(schema, &path) {
        Some(ep) => {
            let host = has_type(property(ep, &["host"]), "string");
            let port = has_type(property(ep, &["port"]), "integer");
            if host && port {
                out.push(finding(
                    Severity::Ok,
                    CHECK,
                    format!("{kind} {version}: spec.controlPlaneEndpoint {{host, port}}"),
                ));
            } else {
                out.push(finding(
                    Severity::Error,
                    CHECK,
                    format!(
                        "{kind} {version}: spec.controlPlaneEndpoint must have host (string) and port (integer)"
                    ),
                ));
            }
        }
        None if open_at(schema, &path) => out.push(finding(
            Severity::Warning,
            CHECK,
            format!(
                "{kind} {version}: the schema leaves spec open, so spec.controlPlaneEndpoint cannot be checked"
            ),
        )),
        None => out.push(finding(
            Severity::Error,
            CHECK,
            format!("{kind} {version}: spec.controlPlaneEndpoint is missing"),
        )),
    }
}

fn check_ready(
    kind: &str,
    version: &str,
    schema: &Value,
    contract: Option<&str>,
    out: &mut Vec<Finding>,
) {
    const CHECK: &str = "infra-cluster-status";
    let ready = has_type(property(schema, &["status", "ready"]), "boolean");
    let provisioned = has_type(
        property(schema, &["status", "initialization", "provisioned"]),
        "boolean",
    );
    let open = open_at(schema, &["status", "initialization", "provisioned"])
        || open_at(schema, &["status", "ready"]);
    let (severity, message) = match (contract, ready, provisioned) {
        (Some("v1beta1"), true, _) => (Severity::Ok, "status.ready (boolean)".to_string()),
        (Some("v1beta1"), false, _) => (
            Severity::Error,
            "status.ready (boolean) is missing; the v1beta1 contract reads it".to_string(),
        ),
        (Some("v1beta2"), _, true) => (
            Severity::Ok,
            "status.initialization.provisioned (boolean)".to_string(),
        ),
        (Some("v1beta2"), true, false) => (
            Severity::Warning,
            "only status.ready: the v1beta2 contract reads status.initialization.provisioned (status.ready is the v1beta1 field, read only for compatibility)".to_string(),
        ),
        (Some("v1beta2"), false, false) => (
            Severity::Error,
            "status.initialization.provisioned (boolean) is missing; the v1beta2 contract reads it".to_string(),
        ),
        (_, true, _) | (_, _, true) => (
            Severity::Ok,
            "status.ready or status.initialization.provisioned (boolean)".to_string(),
        ),
        _ => (
            Severity::Error,
            "neither status.ready (v1beta1) nor status.initialization.provisioned (v1beta2) is declared".to_string(),
        ),
    };
    if severity == Severity::Error && open {
        out.push(finding(
            Severity::Warning,
            CHECK,
            format!("{kind} {version}: the schema leaves status open, so the readiness field cannot be checked"),
        ));
    } else {
        out.push(finding(
            severity,
            CHECK,
            format!("{kind} {version}: {message}"),
        ));
    }
}

fn check_template(objects: &[Value], infra: &Value, out: &mut Vec<Finding>) {
    const CHECK: &str = "infra-cluster-template";
    let (kind, group) = (crd_kind(infra), crd_group(infra));
    let want_kind = format!("{kind}Template");
    let Some(t) = crds(objects).find(|c| crd_kind(c) == want_kind && crd_group(c) == group) else {
        out.push(finding(
            Severity::Error,
            CHECK,
            format!(
                "no {want_kind} CRD in group {group} (ClusterClass needs the template of {kind})"
            ),
        ));
        return;
    };
    check_namespaced(t, CHECK, out);
    match storage_schema(t) {
        Some((version, schema)) => {
            let path = ["spec", "template", "spec"];
            if property(schema, &path).is_some() {
                out.push(finding(
                    Severity::Ok,
                    CHECK,
                    format!("{want_kind} {version}: spec.template.spec"),
                ));
            } else if open_at(schema, &path) {
                out.push(finding(
                    Severity::Warning,
                    CHECK,
                    format!(
                        "{want_kind} {version}: the schema leaves spec open, so spec.template.spec cannot be checked"
                    ),
                ));
            } else {
                out.push(finding(
                    Severity::Error,
                    CHECK,
                    format!("{want_kind} {version}: spec.template.spec is missing"),
                ));
            }
        }
        None => out.push(finding(
            Severity::Error,
            CHECK,
            format!("{want_kind}: the CRD has no openAPIV3Schema to check"),
        )),
    }
}

const FULL_VERBS: [&str; 7] = [
    "create", "delete", "get", "list", "patch", "update", "watch",
];

fn strings(v: Option<&Value>) -> Vec<&str> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn check_aggregated_role(objects: &[Value], infra: &Value, out: &mut Vec<Finding>) {
    const CHECK: &str = "aggregate-to-manager";
    let (kind, group) = (crd_kind(infra), crd_group(infra));
    let plural = str_at(infra, "/spec/names/plural");
    let roles: Vec<&Value> = objects
        .iter()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("ClusterRole"))
        .filter(|o| {
            o.pointer("/metadata/labels")
                .and_then(|l| l.get(AGGREGATE_TO_MANAGER_LABEL))
                .and_then(Value::as_str)
                == Some("true")
        })
        .collect();
    let mut verbs: BTreeSet<&str> = BTreeSet::new();
    let mut granting = Vec::new();
    for role in &roles {
        for rule in role
            .get("rules")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let groups = strings(rule.get("apiGroups"));
            let resources = strings(rule.get("resources"));
            if (groups.contains(&group) || groups.contains(&"*"))
                && (resources.contains(&plural) || resources.contains(&"*"))
            {
                verbs.extend(strings(rule.get("verbs")));
                granting.push(str_at(role, "/metadata/name"));
            }
        }
    }
    let missing: Vec<&str> = if verbs.contains("*") {
        Vec::new()
    } else {
        FULL_VERBS
            .iter()
            .copied()
            .filter(|v| !verbs.contains(v))
            .collect()
    };
    granting.dedup();
    let sponsored = group == SIG_INFRASTRUCTURE_GROUP;
    let lacking = if sponsored {
        Severity::Warning
    } else {
        Severity::Error
    };
    if granting.is_empty() {
        out.push(finding(
            lacking,
            CHECK,
            format!(
                "no ClusterRole labelled {AGGREGATE_TO_MANAGER_LABEL}: \"true\" grants access to {plural}.{group}; the core controller must read and write {kind} objects{}",
                if sponsored { " (its own role covers this group, but the label is the documented way)" } else { "" }
            ),
        ));
    } else if !missing.is_empty() {
        out.push(finding(
            lacking,
            CHECK,
            format!(
                "ClusterRole {} grants {plural}.{group} but not the verbs {}",
                granting.join(", "),
                missing.join(", ")
            ),
        ));
    } else {
        out.push(finding(
            Severity::Ok,
            CHECK,
            format!(
                "ClusterRole {} grants full access to {plural}.{group}",
                granting.join(", ")
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flect_plurals_of_provider_kinds() {
        for (kind, plural) in [
            ("awscluster", "awsclusters"),
            ("awsclusterstaticidentity", "awsclusterstaticidentities"),
            ("ipaddress", "ipaddresses"),
            ("ipaddressclaim", "ipaddressclaims"),
            ("kubeadmconfig", "kubeadmconfigs"),
            ("machinepolicy", "machinepolicies"),
            ("dockermachinepool", "dockermachinepools"),
            ("vspherevm", "vspherevms"),
            ("clusterclass", "clusterclasses"),
            ("extensionconfig", "extensionconfigs"),
            ("status", "statuses"),
            ("index", "indices"),
            ("fooindex", "fooindices"),
            ("matrix", "matrices"),
            ("person", "people"),
            ("salesperson", "salespeople"),
            ("series", "series"),
            ("news", "news"),
            ("leaf", "leaves"),
            ("knife", "knives"),
            ("day", "days"),
            ("potato", "potatoes"),
            ("photo", "photos"),
            ("box", "boxes"),
            ("bus", "buses"),
            ("datum", "data"),
            ("criterion", "criteria"),
            ("machines", "machines"),
            ("", ""),
        ] {
            assert_eq!(pluralize(kind), plural, "{kind}");
        }
        assert_eq!(
            calculate_crd_name(
                "infrastructure.cluster.x-k8s.io",
                "AWSClusterStaticIdentity"
            ),
            "awsclusterstaticidentities.infrastructure.cluster.x-k8s.io"
        );
        assert_eq!(
            calculate_crd_name("cluster.x-k8s.io", "ClusterClass"),
            "clusterclasses.cluster.x-k8s.io"
        );
    }

    fn crd(kind: &str, plural: &str, scope: &str, labels: Value, schema: Value) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.infrastructure.foo.example"), "labels": labels},
            "spec": {
                "group": "infrastructure.foo.example",
                "scope": scope,
                "names": {"kind": kind, "plural": plural},
                "versions": [{"name": "v1beta2", "served": true, "storage": true,
                              "schema": {"openAPIV3Schema": schema}}]
            }
        })
    }

    fn good_release() -> Vec<Value> {
        let labels = json!({"cluster.x-k8s.io/v1beta2": "v1beta2"});
        let cluster_schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"controlPlaneEndpoint": {"type": "object", "properties": {
                "host": {"type": "string"}, "port": {"type": "integer", "format": "int32"}}}}},
            "status": {"type": "object", "properties": {
                "initialization": {"type": "object", "properties": {"provisioned": {"type": "boolean"}}}}}
        }});
        let template_schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"template": {"type": "object", "properties": {
                "spec": {"type": "object"}}}}}}});
        vec![
            crd(
                "FooCluster",
                "fooclusters",
                "Namespaced",
                labels.clone(),
                cluster_schema,
            ),
            crd(
                "FooClusterTemplate",
                "fooclustertemplates",
                "Namespaced",
                labels,
                template_schema,
            ),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": "capi-foo-clusters", "labels": {AGGREGATE_TO_MANAGER_LABEL: "true"}},
                   "rules": [{"apiGroups": ["infrastructure.foo.example"], "resources": ["fooclusters"],
                              "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}]}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "m"}}),
        ]
    }

    fn worst(findings: &[Finding]) -> Severity {
        findings
            .iter()
            .map(|f| f.severity)
            .max()
            .unwrap_or(Severity::Ok)
    }

    #[test]
    fn a_conforming_infrastructure_release_passes() {
        let f = verify(
            ProviderType::Infrastructure,
            Some("v1beta2"),
            &good_release(),
        );
        assert_eq!(worst(&f), Severity::Ok, "{f:#?}");
        assert!(f.iter().any(|f| f.check == "aggregate-to-manager"));
    }

    #[test]
    fn contract_breaches_are_reported() {
        let mut objs = good_release();
        // Wrong CRD name, cluster-scoped, v1beta1 status only, no label.
        objs[0]["metadata"]["name"] = json!("foocluster.infrastructure.foo.example");
        objs[0]["spec"]["scope"] = json!("Cluster");
        objs[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"] =
            json!({"type": "object", "properties": {"ready": {"type": "boolean"}}});
        objs[0]["metadata"]["labels"] = json!({});
        objs.remove(1);
        objs[1]["rules"][0]["verbs"] = json!(["get", "list"]);
        let f = verify(ProviderType::Infrastructure, Some("v1beta2"), &objs);
        let errors: Vec<&str> = f
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .map(|f| f.check)
            .collect();
        assert_eq!(
            errors,
            [
                "crd-name",
                "contract-label",
                "infra-cluster-scope",
                "infra-cluster-template",
                "aggregate-to-manager"
            ],
            "{f:#?}"
        );
        assert!(
            f.iter()
                .any(|f| f.check == "infra-cluster-status" && f.severity == Severity::Warning)
        );
        // Under v1beta1 the same status passes.
        let f = verify(ProviderType::Infrastructure, Some("v1beta1"), &objs);
        assert!(
            f.iter()
                .any(|f| f.check == "infra-cluster-status" && f.severity == Severity::Ok)
        );
    }

    #[test]
    fn no_infra_cluster_and_skipped_names() {
        let mut objs = good_release();
        objs.retain(|o| o["kind"] != "CustomResourceDefinition");
        objs.push(crd(
            "FooMachine",
            "foomachine",
            "Namespaced",
            json!({"cluster.x-k8s.io/v1beta2": "v1beta1_v1beta2"}),
            json!({"type": "object"}),
        ));
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
        // v1beta1 is not served by the CRD.
        assert_eq!(by("contract-label"), [Severity::Error]);
        // Bootstrap providers have no InfraCluster to check.
        let f = verify(ProviderType::Bootstrap, None, &objs);
        assert!(f.iter().all(|f| !f.check.starts_with("infra-")));
    }

    #[test]
    fn real_core_and_kubeadm_releases_follow_the_crd_name_rule()
    -> Result<(), Box<dyn std::error::Error>> {
        let Some(shared) = capi_test_support::shared_dir() else {
            eprintln!(
                "SKIPPED real_core_and_kubeadm_releases_follow_the_crd_name_rule: ../shared (or CAPI_SHARED_DIR) not found"
            );
            return Ok(());
        };
        for (t, label, file) in [
            (ProviderType::Core, "cluster-api", "core-components.yaml"),
            (
                ProviderType::Bootstrap,
                "bootstrap-kubeadm",
                "bootstrap-components.yaml",
            ),
            (
                ProviderType::ControlPlane,
                "control-plane-kubeadm",
                "control-plane-components.yaml",
            ),
        ] {
            let text = std::fs::read_to_string(
                shared
                    .join("testdata/providers")
                    .join(label)
                    .join("v1.12.0")
                    .join(file),
            )?;
            let objs =
                crate::pipeline::parse_objects(&crate::pipeline::substitute(&text, |_| None)?)?;
            let f = verify(t, Some("v1beta2"), &objs);
            assert_eq!(worst(&f), Severity::Ok, "{label}: {f:#?}");
        }
        Ok(())
    }
}
