//! The operator-wide image mirror: clusterctl's `images:` overrides (an `all` entry, then one per
//! component, then one per component and image name; later entries win per field) and image
//! pull secrets, applied to every Deployment and DaemonSet of a rendered provider.
//!
//! The rewrite runs before the provider's own `spec.deployment` customizations, so a container
//! image override in the provider's spec wins over the mirror, piece by piece: an override of
//! the tag alone keeps the mirror's repository.

use std::collections::BTreeMap;

use capi_operator_api::ImageMeta;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::customize::alter_image;

/// The ConfigMap key holding the `images:` overrides, in clusterctl's format.
pub const IMAGES_KEY: &str = "images";
/// The ConfigMap key holding the names of the image pull secrets, a YAML list.
pub const PULL_SECRETS_KEY: &str = "imagePullSecrets";
/// The override entry every component reads first.
pub const ALL: &str = "all";
/// The component name of cert-manager's images, as clusterctl names it.
pub const CERT_MANAGER: &str = "cert-manager";

/// A mirror setting that cannot be used; the message names the key and the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("image mirror setting {key}: {reason}")]
pub struct MirrorError {
    /// The key (or flag) at fault.
    pub key: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Image overrides and pull secrets for every provider.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageMirror {
    /// clusterctl's `images:` map: `all`, a component (`cluster-api`, `infrastructure-aws`,
    /// `cert-manager`) or `component/image-name`.
    pub images: BTreeMap<String, ImageMeta>,
    /// Names of Secrets added to every provider Deployment's `imagePullSecrets`.
    pub pull_secrets: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MetaIn {
    #[serde(default)]
    repository: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    tag: Option<String>,
}

impl ImageMirror {
    /// A mirror moving every image to `repository` (`all: {repository}`), with `pull_secrets`
    /// (the operator's flags), checked as the ConfigMap's setting is.
    pub fn all(
        repository: Option<&str>,
        pull_secrets: &[String],
    ) -> Result<ImageMirror, MirrorError> {
        let images = repository
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(|r| format!("all: {{repository: {}}}", serde_json::Value::from(r)));
        let secrets = serde_json::Value::from(pull_secrets.to_vec()).to_string();
        ImageMirror::parse(images.as_deref(), Some(&secrets))
    }

    /// Reads the `images` text (clusterctl's `images:` map, as YAML) and the `imagePullSecrets`
    /// text (a YAML list of Secret names, or of `{name: ...}`); either may be absent.
    pub fn parse(
        images: Option<&str>,
        pull_secrets: Option<&str>,
    ) -> Result<ImageMirror, MirrorError> {
        let fail = |key: &str, reason: String| MirrorError {
            key: key.to_string(),
            reason,
        };
        let mut m = ImageMirror::default();
        if let Some(text) = images.filter(|t| !t.trim().is_empty()) {
            let map: BTreeMap<String, MetaIn> = capi_yaml::from_str(text).map_err(|e| {
                fail(
                    IMAGES_KEY,
                    format!("not a map of component to {{repository, name, tag}}: {e}"),
                )
            })?;
            for (component, meta) in map {
                let meta = ImageMeta {
                    repository: meta.repository.map(|r| r.trim_end_matches('/').to_string()),
                    name: meta.name,
                    tag: meta.tag,
                };
                check_meta(&component, &meta).map_err(|r| fail(IMAGES_KEY, r))?;
                m.images.insert(component, meta);
            }
        }
        if let Some(text) = pull_secrets.filter(|t| !t.trim().is_empty()) {
            #[derive(Deserialize)]
            #[serde(untagged)]
            enum Entry {
                Name(String),
                Ref { name: String },
            }
            let list: Vec<Entry> = capi_yaml::from_str(text)
                .map_err(|e| fail(PULL_SECRETS_KEY, format!("not a list of Secret names: {e}")))?;
            let names: Vec<String> = list
                .into_iter()
                .map(|e| match e {
                    Entry::Name(n) | Entry::Ref { name: n } => n,
                })
                .collect();
            if let Some(bad) = names.iter().find(|n| !is_dns_name(n)) {
                return Err(fail(
                    PULL_SECRETS_KEY,
                    format!("{bad:?} is not a Secret name"),
                ));
            }
            m.add_pull_secrets(names.iter().map(String::as_str));
        }
        Ok(m)
    }

    /// This setting over `base`: an override entry here replaces the same entry of `base` piece
    /// by piece; pull secrets are the union (base first).
    pub fn over(mut self, base: &ImageMirror) -> ImageMirror {
        let mut images = base.images.clone();
        for (k, v) in std::mem::take(&mut self.images) {
            let slot = images.entry(k).or_default();
            *slot = merge(slot, &v);
        }
        let mut out = ImageMirror {
            images,
            pull_secrets: base.pull_secrets.clone(),
        };
        out.add_pull_secrets(self.pull_secrets.iter().map(String::as_str));
        out
    }

    /// Whether the setting changes nothing.
    pub fn is_empty(&self) -> bool {
        self.images.is_empty() && self.pull_secrets.is_empty()
    }

    /// The pieces applied to `image` of `component`: `all`, then `component`, then
    /// `component/name`, a later entry winning per piece (clusterctl's order).
    pub fn meta_for(&self, component: &str, image: &str) -> ImageMeta {
        let name = capi_operator_api::image::split_reference(image)
            .name
            .unwrap_or_default();
        [
            ALL.to_string(),
            component.to_string(),
            format!("{component}/{name}"),
        ]
        .iter()
        .filter_map(|k| self.images.get(k))
        .fold(ImageMeta::default(), |acc, m| merge(&acc, m))
    }

    /// `image` of `component` as the mirror moves it (unchanged without an entry). A digest
    /// stays attached, so an image pinned by digest is pulled by the same digest from the
    /// mirror.
    pub fn alter(&self, component: &str, image: &str) -> String {
        let meta = self.meta_for(component, image);
        if meta == ImageMeta::default() {
            return image.to_string();
        }
        let digest = image.split_once('@').map(|(_, d)| d);
        let tag_overridden = meta.tag.is_some();
        let mut out = alter_image(image, &meta);
        // As clusterctl does, a tag override keeps the image's digest.
        if let (true, Some(d)) = (tag_overridden, digest)
            && !out.contains('@')
        {
            out.push('@');
            out.push_str(d);
        }
        out
    }

    /// Rewrites the images of the containers and init containers of every Deployment and
    /// DaemonSet of `objects`, which belong to `component` (a manifest label).
    pub fn rewrite_images(&self, objects: &mut [Value], component: &str) {
        if self.images.is_empty() {
            return;
        }
        for c in workload_containers(objects) {
            if let Some(img) = c.get("image").and_then(Value::as_str) {
                let moved = self.alter(component, img);
                c["image"] = json!(moved);
            }
        }
    }

    /// Adds the pull secrets to every Deployment and DaemonSet of `objects`, after those the
    /// pod template names already (the release's, or the provider's `spec.deployment`).
    pub fn add_pull_secrets_to(&self, objects: &mut [Value]) {
        if self.pull_secrets.is_empty() {
            return;
        }
        for o in objects.iter_mut().filter(|o| is_workload(o)) {
            let Some(pod) = o
                .pointer_mut("/spec/template/spec")
                .and_then(Value::as_object_mut)
            else {
                continue;
            };
            let list = pod.entry("imagePullSecrets").or_insert_with(|| json!([]));
            if !list.is_array() {
                *list = json!([]);
            }
            if let Some(arr) = list.as_array_mut() {
                for s in &self.pull_secrets {
                    if !arr
                        .iter()
                        .any(|e| e.get("name").and_then(Value::as_str) == Some(s))
                    {
                        arr.push(json!({"name": s}));
                    }
                }
            }
        }
    }

    fn add_pull_secrets<'a>(&mut self, names: impl Iterator<Item = &'a str>) {
        for n in names.map(str::trim).filter(|n| !n.is_empty()) {
            if !self.pull_secrets.iter().any(|s| s == n) {
                self.pull_secrets.push(n.to_string());
            }
        }
    }
}

fn merge(base: &ImageMeta, over: &ImageMeta) -> ImageMeta {
    ImageMeta {
        repository: over.repository.clone().or_else(|| base.repository.clone()),
        name: over.name.clone().or_else(|| base.name.clone()),
        tag: over.tag.clone().or_else(|| base.tag.clone()),
    }
}

fn check_meta(component: &str, m: &ImageMeta) -> Result<(), String> {
    let bad = |piece: &str, v: &str| {
        format!(
            "{component}.{piece}: {v:?} {}",
            "is not usable in an image reference"
        )
    };
    if let Some(r) = &m.repository
        && (r.is_empty()
            || r.contains(char::is_whitespace)
            || r.contains('@')
            || r.starts_with('/'))
    {
        return Err(bad("repository", r));
    }
    if let Some(n) = &m.name
        && (n.is_empty() || n.contains(['/', ':', '@']) || n.contains(char::is_whitespace))
    {
        return Err(bad("name", n));
    }
    if let Some(t) = &m.tag
        && (t.is_empty() || t.contains(['/', ':', '@']) || t.contains(char::is_whitespace))
    {
        return Err(bad("tag", t));
    }
    if component.is_empty() || component.split('/').count() > 2 {
        return Err(format!(
            "{component:?} is not all, a component, or component/image-name"
        ));
    }
    Ok(())
}

fn is_dns_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 253
        && n.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && !n.starts_with(['-', '.'])
}

fn is_workload(o: &Value) -> bool {
    matches!(
        o.get("kind").and_then(Value::as_str),
        Some("Deployment" | "DaemonSet")
    )
}

/// The containers and init containers of the Deployments and DaemonSets of `objects`.
fn workload_containers(objects: &mut [Value]) -> impl Iterator<Item = &mut Value> {
    objects
        .iter_mut()
        .filter(|o| is_workload(o))
        .filter_map(|o| {
            o.pointer_mut("/spec/template/spec")
                .and_then(Value::as_object_mut)
        })
        .flat_map(|pod| {
            pod.iter_mut()
                .filter(|(k, _)| *k == "containers" || *k == "initContainers")
                .filter_map(|(_, v)| v.as_array_mut())
                .flat_map(|a| a.iter_mut())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    const IMAGES: &str = "
all:
  repository: mirror.example/capi/
infrastructure-aws:
  repository: mirror.example/aws
cluster-api/cluster-api-controller:
  tag: v1.12.9
";

    #[test]
    fn all_then_component_then_image_name() -> TestResult {
        let m = ImageMirror::parse(Some(IMAGES), None)?;
        assert_eq!(
            m.alter(
                "cluster-api",
                "registry.k8s.io/cluster-api/kubeadm-bootstrap-controller:v1.12.0"
            ),
            "mirror.example/capi/kubeadm-bootstrap-controller:v1.12.0",
            "the all entry replaces the repository, trailing slash trimmed"
        );
        assert_eq!(
            m.alter(
                "infrastructure-aws",
                "registry.k8s.io/cluster-api-aws/cluster-api-aws-controller:v2.8.0"
            ),
            "mirror.example/aws/cluster-api-aws-controller:v2.8.0",
        );
        assert_eq!(
            m.alter(
                "cluster-api",
                "registry.k8s.io/cluster-api/cluster-api-controller:v1.12.0"
            ),
            "mirror.example/capi/cluster-api-controller:v1.12.9",
            "per image name: the tag moves, the all repository stays"
        );
        assert_eq!(
            m.alter("cert-manager", "busybox"),
            "mirror.example/capi/busybox"
        );
        assert_eq!(ImageMirror::default().alter("x", "busybox"), "busybox");
        Ok(())
    }

    #[test]
    fn digests_survive_the_rewrite() -> TestResult {
        let m = ImageMirror::parse(Some(IMAGES), None)?;
        let d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        assert_eq!(
            m.alter("infrastructure-x", &format!("r.io/a/ctl:v1@{d}")),
            format!("mirror.example/capi/ctl:v1@{d}")
        );
        assert_eq!(
            m.alter("infrastructure-x", &format!("localhost:5000/ctl@{d}")),
            format!("mirror.example/capi/ctl@{d}")
        );
        assert_eq!(
            m.alter(
                "cluster-api",
                &format!("r.io/cluster-api-controller:v1@{d}")
            ),
            format!("mirror.example/capi/cluster-api-controller:v1.12.9@{d}"),
            "a tag override keeps the digest, as clusterctl's does"
        );
        Ok(())
    }

    fn deployment(image: &str, pull: Value) -> Value {
        json!({"kind": "Deployment", "metadata": {"name": "m"}, "spec": {"template": {"spec": {
            "imagePullSecrets": pull,
            "initContainers": [{"name": "init", "image": "r.io/init:v1"}],
            "containers": [{"name": "manager", "image": image}]}}}})
    }

    #[test]
    fn workloads_only_and_pull_secrets_merge() -> TestResult {
        let m = ImageMirror::parse(Some(IMAGES), Some("[mirror-pull, {name: second}]"))?;
        let mut objs = vec![
            deployment(
                "r.io/x/ctl:v1",
                json!([{"name": "own"}, {"name": "second"}]),
            ),
            json!({"kind": "Pod", "spec": {"containers": [{"name": "c", "image": "r.io/x/ctl:v1"}]}}),
        ];
        m.rewrite_images(&mut objs, "addon-helm");
        m.add_pull_secrets_to(&mut objs);
        let pod = &objs[0]["spec"]["template"]["spec"];
        assert_eq!(pod["containers"][0]["image"], "mirror.example/capi/ctl:v1");
        assert_eq!(
            pod["initContainers"][0]["image"],
            "mirror.example/capi/init:v1"
        );
        assert_eq!(
            pod["imagePullSecrets"],
            json!([{"name": "own"}, {"name": "second"}, {"name": "mirror-pull"}]),
            "the template's own secrets first, no duplicate"
        );
        assert_eq!(
            objs[1]["spec"]["containers"][0]["image"], "r.io/x/ctl:v1",
            "not a workload"
        );
        Ok(())
    }

    #[test]
    fn the_configmap_wins_over_the_flags_per_piece() -> TestResult {
        let flags = ImageMirror::all(Some("flag.example/capi"), &["flag-pull".into()])?;
        let cm = ImageMirror::parse(
            Some("all: {tag: v9}\ncert-manager: {repository: cm.example/cm}"),
            Some("[cm-pull]"),
        )?;
        let m = cm.over(&flags);
        assert_eq!(
            m.alter("cluster-api", "r.io/ctl:v1"),
            "flag.example/capi/ctl:v9"
        );
        assert_eq!(
            m.alter("cert-manager", "quay.io/jetstack/cert-manager-webhook:v1"),
            "cm.example/cm/cert-manager-webhook:v9"
        );
        assert_eq!(m.pull_secrets, vec!["flag-pull", "cm-pull"]);
        Ok(())
    }

    #[test]
    fn malformed_settings_are_refused_with_the_key() {
        for (images, secrets, key) in [
            (Some("all: [a, b]"), None, IMAGES_KEY),
            (Some("all: {registry: x}"), None, IMAGES_KEY),
            (Some("all: {tag: 'a b'}"), None, IMAGES_KEY),
            (Some("a/b/c: {tag: v1}"), None, IMAGES_KEY),
            (None, Some("mirror-pull"), PULL_SECRETS_KEY),
            (None, Some("[Bad_Name]"), PULL_SECRETS_KEY),
        ] {
            match ImageMirror::parse(images, secrets) {
                Err(e) => assert_eq!(e.key, key, "{images:?} {secrets:?}: {e}"),
                Ok(m) => panic!("{images:?} {secrets:?} accepted: {m:?}"),
            }
        }
    }
}
