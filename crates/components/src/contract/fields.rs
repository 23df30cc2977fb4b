//! Applies the contract tables of `rules.rs` to a release: finds the CRDs each contract of the
//! provider type covers, picks the CRD version that follows the contract version (as Cluster
//! API does, from the `cluster.x-k8s.io/<contract>` label) and checks each field rule against
//! that version's openAPI schema.

use serde_json::Value;

use capi_operator_api::ProviderType;

use super::{
    Finding, Severity,
    crd::{crd_group, crd_kind, crds, open_at, property, str_at},
    finding,
    rules::{CONTRACTS, Contract, Match, Need, Presence, Rule, Shape, TEMPLATE_SPEC, Version},
};

/// The CRDs of the release that follow `c`, and those that are their templates.
fn covered<'a>(c: &Contract, objects: &'a [Value]) -> (Vec<&'a Value>, Vec<&'a Value>) {
    let (mut own, mut templates) = (Vec::new(), Vec::new());
    for crd in crds(objects) {
        let kind = crd_kind(crd);
        match c.matches {
            Match::Any => own.push(crd),
            Match::Kind(group, k) => {
                if crd_group(crd) == group && kind == k {
                    own.push(crd);
                }
            }
            Match::Suffix(suffix) => {
                if is_named(kind, suffix) {
                    own.push(crd);
                } else if kind
                    .strip_suffix("Template")
                    .is_some_and(|base| is_named(base, suffix))
                {
                    templates.push(crd);
                }
            }
        }
    }
    (own, templates)
}

/// `<Provider><suffix>`, with a provider part.
pub(super) fn is_named(kind: &str, suffix: &str) -> bool {
    kind.len() > suffix.len() && kind.ends_with(suffix)
}

/// The CRD version that follows `contract`, with its schema: the last version the CRD's
/// contract label names (Cluster API picks that one), else the version named like the
/// contract (the core's own types), else the stored one.
pub(super) fn contract_version<'a>(crd: &'a Value, contract: &str) -> Option<&'a Value> {
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array)?;
    let named = |n: &str| {
        versions
            .iter()
            .find(|v| v.get("name").and_then(Value::as_str) == Some(n))
    };
    let label = crd
        .pointer("/metadata/labels")
        .and_then(|l| l.get(format!("cluster.x-k8s.io/{contract}")))
        .and_then(Value::as_str)
        .unwrap_or("");
    label
        .rsplit('_')
        .find_map(named)
        .or_else(|| named(contract))
        .or_else(|| {
            versions
                .iter()
                .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        })
        .or_else(|| versions.last())
}

/// Checks every contract of provider type `t` against `objects`.
pub(super) fn check_contract_fields(
    t: ProviderType,
    contract: Option<&str>,
    objects: &[Value],
    out: &mut Vec<Finding>,
) {
    for c in CONTRACTS.iter().filter(|c| c.provider == t) {
        let (own, templates) = covered(c, objects);
        check_presence(c, objects, &own, out);
        for crd in &own {
            if c.namespaced && !c.summary {
                check_scope(c.check, c.name, crd, out);
            }
            match pick_version(c, contract, crd) {
                Ok((v, label)) => check_crd(c, v, label, crd, out),
                Err(f) => out.push(f),
            }
        }
        check_templates(c, contract, &own, &templates, out);
    }
}

fn check_presence(c: &Contract, objects: &[Value], own: &[&Value], out: &mut Vec<Finding>) {
    if !own.is_empty() {
        if !c.summary {
            for crd in own {
                out.push(finding(
                    Severity::Ok,
                    c.check,
                    format!(
                        "{} kind {} in group {}",
                        c.name,
                        crd_kind(crd),
                        crd_group(crd)
                    ),
                ));
            }
        }
        return;
    }
    if c.presence != Presence::Required {
        return;
    }
    let kinds: Vec<&str> = crds(objects).map(crd_kind).collect();
    let naming = match c.matches {
        Match::Suffix(s) => format!(" (a kind named <Provider>{s})"),
        Match::Kind(g, k) => format!(" ({k} in group {g})"),
        Match::Any => String::new(),
    };
    out.push(finding(
        Severity::Error,
        c.check,
        format!(
            "no {} CRD{naming} among the release's CRDs ({})",
            c.name,
            if kinds.is_empty() {
                "none".to_string()
            } else {
                kinds.join(", ")
            }
        ),
    ));
}

pub(super) fn check_scope(check: &'static str, name: &str, crd: &Value, out: &mut Vec<Finding>) {
    let scope = str_at(crd, "/spec/scope");
    let kind = crd_kind(crd);
    if scope == "Namespaced" {
        out.push(finding(
            Severity::Ok,
            check,
            format!("{name}: {kind} is namespaced"),
        ));
    } else {
        out.push(finding(
            Severity::Error,
            check,
            format!("{name}: {kind} must be namespace-scoped, its CRD has scope {scope:?}"),
        ));
    }
}

/// The contract version's rules to check `crd` with. With the contract unknown, the first
/// version the CRD passes (else the newest), so a release is not failed for a guess.
fn pick_version<'a>(
    c: &'a Contract,
    contract: Option<&str>,
    crd: &Value,
) -> Result<(&'a Version, &'static str), Finding> {
    match contract {
        Some(name) => c
            .versions
            .iter()
            .find(|v| v.name == name)
            .map(|v| (v, ""))
            .ok_or_else(|| {
                finding(
                    Severity::Warning,
                    c.check,
                    format!(
                        "{} of {}: no rules for contract {name} (known: {}), so its fields were not checked",
                        c.name,
                        crd_kind(crd),
                        c.versions.iter().map(|v| v.name).collect::<Vec<_>>().join(", ")
                    ),
                )
            }),
        None => {
            let passes = |v: &&Version| {
                let mut f = Vec::new();
                check_crd(c, v, "", crd, &mut f);
                f.iter().all(|f| f.severity == Severity::Ok)
            };
            let v = c
                .versions
                .iter()
                .find(passes)
                .or_else(|| c.versions.last())
                .ok_or_else(|| finding(Severity::Warning, c.check, "no contract versions known"))?;
            Ok((v, " (contract unknown: checked as this version)"))
        }
    }
}

/// One CRD against one contract version.
fn check_crd(c: &Contract, v: &Version, note: &str, crd: &Value, out: &mut Vec<Finding>) {
    let kind = crd_kind(crd);
    let Some(version) = contract_version(crd, v.name) else {
        out.push(finding(
            Severity::Error,
            c.check,
            format!("{} contract {}: {kind} has no versions", c.name, v.name),
        ));
        return;
    };
    let crd_version = version.get("name").and_then(Value::as_str).unwrap_or("");
    let Some(schema) = version.pointer("/schema/openAPIV3Schema") else {
        out.push(finding(
            Severity::Error,
            c.check,
            format!(
                "{} contract {}{note}: {kind} {crd_version} has no openAPIV3Schema to check",
                c.name, v.name
            ),
        ));
        return;
    };
    let subject = Subject {
        contract: c.name,
        contract_version: v.name,
        kind,
        crd_version,
        note,
        schema,
        version,
    };
    if c.summary {
        out.push(summarize(c.check, &subject, v.rules));
    } else {
        for r in v.rules {
            if let Some(f) = check_rule(r, &subject) {
                out.push(f);
            }
        }
    }
}

/// What a rule is checked against, and what its findings name.
struct Subject<'a> {
    contract: &'a str,
    contract_version: &'a str,
    kind: &'a str,
    crd_version: &'a str,
    note: &'a str,
    schema: &'a Value,
    /// The CRD version object (for the scale subresource).
    version: &'a Value,
}

impl Subject<'_> {
    fn head(&self) -> String {
        format!(
            "{} contract {}{}: {} {}",
            self.contract, self.contract_version, self.note, self.kind, self.crd_version
        )
    }
}

/// How a field stands against its rule.
enum Found {
    /// Declared with the shape.
    Fits,
    /// Declared with another shape.
    Misfit,
    /// Not declared; the schema leaves the place open, so it cannot be told.
    Open,
    Absent,
}

fn found(s: &Subject<'_>, path: &str, shape: Shape) -> Found {
    if shape == Shape::Scale {
        return match s.version.pointer("/subresources/scale") {
            None => Found::Absent,
            Some(scale) if scale_fits(scale) => Found::Fits,
            Some(_) => Found::Misfit,
        };
    }
    let parts: Vec<&str> = path.split('.').collect();
    match property(s.schema, &parts) {
        Some(p) if fits(p, shape) => Found::Fits,
        Some(_) => Found::Misfit,
        None if open_at(s.schema, &parts) => Found::Open,
        None => Found::Absent,
    }
}

fn scale_fits(scale: &Value) -> bool {
    let at = |k: &str| scale.get(k).and_then(Value::as_str);
    at("specReplicasPath") == Some(".spec.replicas")
        && at("statusReplicasPath") == Some(".status.replicas")
        && at("labelSelectorPath") == Some(".status.selector")
}

fn ty(s: &Value) -> &str {
    s.get("type").and_then(Value::as_str).unwrap_or("")
}

fn has(s: &Value, path: &[&str], want: &str) -> bool {
    property(s, path).is_some_and(|p| ty(p) == want)
}

fn fits(s: &Value, shape: Shape) -> bool {
    let items = || s.get("items").unwrap_or(&Value::Null);
    match shape {
        Shape::Bool => ty(s) == "boolean",
        Shape::Str => ty(s) == "string",
        Shape::Int => ty(s) == "integer",
        Shape::Object => ty(s) == "object",
        Shape::List => ty(s) == "array",
        Shape::StrList => ty(s) == "array" && ty(items()) == "string",
        Shape::Endpoint => {
            ty(s) == "object" && has(s, &["host"], "string") && has(s, &["port"], "integer")
        }
        Shape::FailureDomainMap => {
            ty(s) == "object" && s.get("additionalProperties").is_some_and(Value::is_object)
        }
        Shape::FailureDomainList => ty(s) == "array" && has(items(), &["name"], "string"),
        Shape::Addresses => {
            ty(s) == "array"
                && has(items(), &["type"], "string")
                && has(items(), &["address"], "string")
        }
        Shape::Scale => false,
    }
}

/// Whether the rule applies: a `When` rule only once its trigger is declared.
fn applies(r: &Rule, s: &Subject<'_>) -> Option<Need> {
    match r.need {
        Need::When(trigger) => {
            let parts: Vec<&str> = trigger.split('.').collect();
            property(s.schema, &parts).map(|_| Need::Required)
        }
        need => Some(need),
    }
}

fn check_rule(r: &Rule, s: &Subject<'_>) -> Option<Finding> {
    let need = applies(r, s)?;
    let (head, path, shape) = (s.head(), r.path, r.shape.describe());
    let trigger = match r.need {
        Need::When(t) => format!(" (required once {t} is declared)"),
        _ => String::new(),
    };
    let (severity, message) = match (found(s, path, r.shape), need) {
        (Found::Fits, _) => (Severity::Ok, format!("{head}: {path} ({shape})")),
        (Found::Misfit, _) => (
            Severity::Error,
            format!("{head}: {path} is declared but is not a {shape}"),
        ),
        (_, Need::Optional) => return None,
        (absence, _) => match (r.also, absence) {
            (Some((old, old_shape)), _) if matches!(found(s, old, old_shape), Found::Fits) => (
                Severity::Ok,
                format!(
                    "{head}: {old} in place of {path}; accepted while the contract keeps its compatibility with the older field"
                ),
            ),
            (_, Found::Open) => (
                Severity::Warning,
                format!("{head}: the schema leaves {path} open, so it cannot be checked"),
            ),
            _ => (
                Severity::Error,
                format!("{head}: required field {path} ({shape}) is missing{trigger}"),
            ),
        },
    };
    Some(finding(severity, r.check, message))
}

/// One finding for all of a contract's rules (the externally managed InfraCluster).
fn summarize(check: &'static str, s: &Subject<'_>, rules: &[Rule]) -> Finding {
    let (mut settable, mut problems, mut worst) = (Vec::new(), Vec::new(), Severity::Ok);
    for f in rules
        .iter()
        .filter_map(|r| check_rule(r, s).map(|f| (r.path, f)))
    {
        match f {
            (path, f) if f.severity == Severity::Ok => settable.push(path),
            (path, f) => {
                worst = worst.max(f.severity);
                problems.push(format!("{path}: {}", f.message));
            }
        }
    }
    let head = s.head();
    let who = "an external system (annotation cluster.x-k8s.io/managed-by)";
    let message = match worst {
        Severity::Ok => format!("{head}: {who} can set {}", settable.join(", ")),
        Severity::Warning => format!(
            "{head}: whether {who} can set what the contract asks of it cannot be told: {}",
            problems.join("; ")
        ),
        Severity::Error => format!(
            "{head}: {who} cannot set what the contract asks of it (the apiserver prunes undeclared fields): {}",
            problems.join("; ")
        ),
    };
    finding(worst, check, message)
}

fn check_templates(
    c: &Contract,
    contract: Option<&str>,
    own: &[&Value],
    templates: &[&Value],
    out: &mut Vec<Finding>,
) {
    let (presence, check) = c.template;
    if check.is_empty() {
        return;
    }
    for crd in own {
        let want = format!("{}Template", crd_kind(crd));
        let group = crd_group(crd);
        let Some(t) = templates
            .iter()
            .find(|t| crd_kind(t) == want && crd_group(t) == group)
        else {
            let severity = match presence {
                Presence::Required => Severity::Error,
                Presence::ForClusterClass => Severity::Warning,
                Presence::Optional => continue,
            };
            let why = if presence == Presence::Required {
                "the contract requires it"
            } else {
                "ClusterClass needs it"
            };
            out.push(finding(
                severity,
                check,
                format!(
                    "{}: no {want} CRD in group {group} ({why} for {})",
                    c.name,
                    crd_kind(crd)
                ),
            ));
            continue;
        };
        check_scope(check, c.name, t, out);
        let rule = Rule {
            check,
            ..TEMPLATE_SPEC
        };
        // The template's only rule is the same in every contract version.
        let version = contract
            .or_else(|| c.versions.last().map(|v| v.name))
            .unwrap_or_default();
        check_template(c.name, version, t, &rule, out);
    }
}

fn check_template(name: &str, contract: &str, t: &Value, rule: &Rule, out: &mut Vec<Finding>) {
    let Some(version) = contract_version(t, contract) else {
        return;
    };
    let Some(schema) = version.pointer("/schema/openAPIV3Schema") else {
        out.push(finding(
            Severity::Error,
            rule.check,
            format!("{}: the CRD has no openAPIV3Schema to check", crd_kind(t)),
        ));
        return;
    };
    let template = format!("{name}Template");
    let s = Subject {
        contract: &template,
        contract_version: contract,
        kind: crd_kind(t),
        crd_version: version.get("name").and_then(Value::as_str).unwrap_or(""),
        note: "",
        schema,
        version,
    };
    if let Some(f) = check_rule(rule, &s) {
        out.push(f);
    }
}
