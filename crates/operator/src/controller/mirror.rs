//! The operator-wide image mirror: the flags' setting, with the watched ConfigMap's over it.
//! A change of the ConfigMap that changes the setting wakes every provider, so each one is
//! rendered again with the new images and pull secrets; a malformed ConfigMap is kept as an
//! error the install phases report (nothing is applied while it lasts).
//!
//! With an owner (`--image-mirror-config-owner`, the chart's release), only a ConfigMap
//! carrying that release's labels is used: one of the watched name put there by anything else
//! (a leftover, another tool, someone claiming the name first) is refused the same way as a
//! malformed one, so it can neither redirect the images nor undo the mirror. The labels are no
//! secret — whoever may write ConfigMaps in that namespace can set them too — which is why
//! docs/rbac.md counts that right as powerful as cluster-admin.

use capi_components::mirror::{IMAGES_KEY, ImageMirror, PULL_SECRETS_KEY};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher::Event;
use tokio::sync::watch;

/// The label naming the chart's release on every object it renders (Kubernetes' recommended
/// `instance` label); the mirror ConfigMap must carry the owner's value.
pub const OWNER_LABEL: &str = "app.kubernetes.io/instance";
/// The label naming the application on every object the chart renders.
pub const NAME_LABEL: &str = "app.kubernetes.io/name";
/// [`NAME_LABEL`]'s value on the chart's objects.
pub const NAME_VALUE: &str = "capi-provider-operator";

use super::{index::Index, routing::Target};

/// What the reconciles read: the setting, or why it cannot be used.
pub type Setting = Result<ImageMirror, String>;

/// The current setting, filled by the ConfigMap's watch.
pub struct MirrorSetting {
    base: ImageMirror,
    config: Option<(String, String)>,
    owner: Option<String>,
    current: watch::Sender<Option<Setting>>,
}

impl MirrorSetting {
    /// The setting of `base` (the flags) and the ConfigMap `config` (namespace, name) names.
    pub fn new(base: ImageMirror, config: Option<(String, String)>) -> MirrorSetting {
        // Without a ConfigMap there is nothing to wait for.
        let initial = config.is_none().then(|| Ok(base.clone()));
        MirrorSetting {
            base,
            config,
            owner: None,
            current: watch::Sender::new(initial),
        }
    }

    /// The same, using only a ConfigMap labelled as the chart's release `owner` renders it.
    pub fn owned_by(self, owner: Option<String>) -> MirrorSetting {
        MirrorSetting { owner, ..self }
    }

    /// The ConfigMap watched, if any.
    pub fn config(&self) -> Option<&(String, String)> {
        self.config.as_ref()
    }

    /// The setting now; `None` until the ConfigMap's watch has listed it once.
    pub fn current(&self) -> Option<Setting> {
        self.current.borrow().clone()
    }

    /// Waits until the ConfigMap's watch has listed it once: rendering before would install
    /// the release's images and undo the mirror for a moment.
    pub async fn listed(&self) {
        let mut rx = self.current.subscribe();
        // An error means the sender is gone, which only happens at exit.
        let _ = rx.wait_for(Option::is_some).await;
    }

    /// Takes in a watch event of the ConfigMap; `true` when the setting changed.
    fn feed(&self, ev: &Event<ConfigMap>, relisted: &mut bool) -> bool {
        let next = match ev {
            Event::Init => {
                *relisted = false;
                return false;
            }
            Event::InitApply(cm) | Event::Apply(cm) => {
                *relisted = true;
                self.of(Some(cm))
            }
            Event::Delete(_) => self.of(None),
            // A relist without the ConfigMap: it was deleted while the watch was down.
            Event::InitDone if !*relisted => self.of(None),
            Event::InitDone => return false,
        };
        self.current.send_if_modified(|cur| {
            let changed = cur.as_ref() != Some(&next);
            *cur = Some(next);
            changed
        })
    }

    /// The setting with `cm` (or without any ConfigMap).
    fn of(&self, cm: Option<&ConfigMap>) -> Setting {
        let Some(cm) = cm else {
            return Ok(self.base.clone());
        };
        let name = self
            .config
            .as_ref()
            .map(|(ns, n)| format!("ConfigMap {ns}/{n}"))
            .unwrap_or_default();
        if let Some(owner) = &self.owner
            && !owned_by(cm, owner)
        {
            return Err(format!(
                "{name} is not release {owner}'s: it lacks the labels {OWNER_LABEL}={owner} and \
                 {NAME_LABEL}={NAME_VALUE} the chart sets, so nothing of it is used"
            ));
        }
        let data = cm.data.clone().unwrap_or_default();
        ImageMirror::parse(
            data.get(IMAGES_KEY).map(String::as_str),
            data.get(PULL_SECRETS_KEY).map(String::as_str),
        )
        .map(|m| m.over(&self.base))
        .map_err(|e| format!("{name}: {e}"))
    }
}

/// Whether `cm` carries the labels the chart's release `owner` renders on it.
fn owned_by(cm: &ConfigMap, owner: &str) -> bool {
    let labels = cm.metadata.labels.as_ref();
    let has = |k: &str, v: &str| labels.and_then(|l| l.get(k)).is_some_and(|x| x == v);
    has(OWNER_LABEL, owner) && has(NAME_LABEL, NAME_VALUE)
}

/// Routes the ConfigMap's watch events: a change of the setting wakes every provider.
pub fn wake_all_on_change(
    setting: std::sync::Arc<MirrorSetting>,
    index: std::sync::Arc<Index>,
) -> impl FnMut(&Event<ConfigMap>) -> Vec<Target> + Send + 'static {
    let mut relisted = false;
    move |ev| {
        if !setting.feed(ev, &mut relisted) {
            return Vec::new();
        }
        match setting.current() {
            Some(Err(e)) => {
                tracing::warn!(error = %e, "image mirror setting unusable; providers keep what is installed");
            }
            _ => tracing::info!("image mirror setting changed; rendering every provider again"),
        }
        index.targets_where(|_| true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(images: &str) -> ConfigMap {
        ConfigMap {
            data: Some([(IMAGES_KEY.to_string(), images.to_string())].into()),
            ..ConfigMap::default()
        }
    }

    #[test]
    fn changes_of_the_setting_only_are_news() -> Result<(), capi_components::mirror::MirrorError> {
        let base = ImageMirror::all(Some("flag.example"), &[])?;
        let s = MirrorSetting::new(base.clone(), Some(("ops".into(), "mirror".into())));
        assert_eq!(s.current(), None, "not listed yet");
        let mut relisted = false;
        assert!(!s.feed(&Event::Init, &mut relisted));
        assert!(
            s.feed(&Event::InitDone, &mut relisted),
            "listed: no ConfigMap"
        );
        assert_eq!(s.current(), Some(Ok(base.clone())));
        assert!(s.feed(
            &Event::Apply(cm("all: {repository: cm.example}")),
            &mut relisted
        ));
        assert!(!s.feed(
            &Event::Apply(cm("all: {repository: cm.example}")),
            &mut relisted
        ));
        assert!(s.feed(&Event::Apply(cm("all: [")), &mut relisted));
        assert!(
            matches!(s.current(), Some(Err(e)) if e.starts_with("ConfigMap ops/mirror: image mirror setting images:"))
        );
        assert!(s.feed(&Event::Delete(cm("")), &mut relisted));
        assert_eq!(s.current(), Some(Ok(base)));
        Ok(())
    }

    fn labelled(images: &str, labels: &[(&str, &str)]) -> ConfigMap {
        let mut c = cm(images);
        c.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        c
    }

    #[test]
    fn with_an_owner_only_the_releases_configmap_is_used() -> Result<(), Box<dyn std::error::Error>>
    {
        let base = ImageMirror::all(Some("flag.example"), &[])?;
        let s = MirrorSetting::new(
            base.clone(),
            Some(("ops".into(), "capi-image-mirror".into())),
        )
        .owned_by(Some("capi".into()));
        let images = "all: {repository: evil.example}";
        let chart = [(OWNER_LABEL, "capi"), (NAME_LABEL, NAME_VALUE)];
        let forged_elsewhere = [(OWNER_LABEL, "other"), (NAME_LABEL, NAME_VALUE)];
        for foreign in [
            cm(images),
            labelled(images, &chart[..1]),
            labelled(images, &forged_elsewhere),
        ] {
            let Err(e) = s.of(Some(&foreign)) else {
                panic!("a ConfigMap without release capi's labels was used: {foreign:?}");
            };
            assert!(
                e.starts_with("ConfigMap ops/capi-image-mirror is not release capi's"),
                "{e}"
            );
        }
        let used = s.of(Some(&labelled(images, &chart)))?;
        assert_eq!(used, ImageMirror::parse(Some(images), None)?.over(&base));
        Ok(())
    }
}
