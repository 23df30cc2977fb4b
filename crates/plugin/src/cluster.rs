//! The management cluster: connecting (kubeconfig, context), server-side apply of arbitrary
//! objects, and reading and patching the operator's provider objects.

use std::{collections::HashMap, path::PathBuf, sync::Mutex, time::Duration};

use anyhow::{Context, bail};
use capi_operator_api::{AnyProvider, GROUP, ProviderApi, ProviderType, VERSION, v1alpha2};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, Config,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams},
    config::{KubeConfigOptions, Kubeconfig},
    discovery::Scope,
};
use serde_json::{Value, json};

/// Field manager of everything the plugin writes.
pub const FIELD_MANAGER: &str = "kubectl-capi_providers";

/// The User-Agent of the plugin's Kubernetes API requests.
pub const USER_AGENT: &str = concat!("kubectl-capi_providers/", env!("CARGO_PKG_VERSION"));

/// How to reach the cluster.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ClusterFlags {
    /// Path of the kubeconfig (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use (default: the current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
}

/// A connection to the management cluster.
pub struct Cluster {
    /// The client.
    pub client: Client,
    discovery: Mutex<HashMap<(String, String), (ApiResource, bool)>>,
}

/// The API of provider type `t`.
pub fn provider_resource(t: ProviderType) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, t.kind()), t.plural())
}

/// The API of provider type `t` in `api`.
pub fn provider_resource_of(api: ProviderApi, t: ProviderType) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(api.group(), api.version(), t.kind()),
        t.plural(),
    )
}

fn gvk_of(api_version: &str, kind: &str) -> GroupVersionKind {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    GroupVersionKind::gvk(group, version, kind)
}

/// Whether a kube error is the apiserver's "not found".
pub fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

impl Cluster {
    /// Connects with the kubeconfig and context the flags name.
    pub async fn connect(flags: &ClusterFlags) -> anyhow::Result<Cluster> {
        let options = KubeConfigOptions {
            context: flags.context.clone(),
            ..KubeConfigOptions::default()
        };
        let mut config = match &flags.kubeconfig {
            Some(path) => {
                let kc = Kubeconfig::read_from(path)
                    .with_context(|| format!("reading kubeconfig {}", path.display()))?;
                Config::from_custom_kubeconfig(kc, &options)
                    .await
                    .with_context(|| format!("loading kubeconfig {}", path.display()))?
            }
            None if flags.context.is_some() => Config::from_kubeconfig(&options)
                .await
                .context("loading the kubeconfig")?,
            None => Config::infer()
                .await
                .context("finding the cluster (kubeconfig or in-cluster)")?,
        };
        config.read_timeout = Some(Duration::from_secs(60));
        // kube sends no User-Agent of its own: name the plugin, as kubectl names itself.
        config.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_static(USER_AGENT),
        ));
        let client = Client::try_from(config).context("creating the Kubernetes client")?;
        Ok(Cluster {
            client,
            discovery: Mutex::new(HashMap::new()),
        })
    }

    /// The resource serving `kind` of `api_version`, and whether it is namespaced.
    pub async fn resolve(
        &self,
        api_version: &str,
        kind: &str,
    ) -> anyhow::Result<(ApiResource, bool)> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(r) = self
            .discovery
            .lock()
            .ok()
            .and_then(|d| d.get(&key).cloned())
        {
            return Ok(r);
        }
        let gvk = gvk_of(api_version, kind);
        let (ar, caps) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .with_context(|| {
                format!(
                    "the cluster does not serve {kind} of {api_version} (is its CRD installed?)"
                )
            })?;
        let r = (ar, caps.scope == Scope::Namespaced);
        if let Ok(mut d) = self.discovery.lock() {
            d.insert(key, r.clone());
        }
        Ok(r)
    }

    /// A dynamic API for objects of `kind` of `api_version` in `namespace` (ignored for
    /// cluster-scoped kinds; `None` lists across namespaces).
    pub async fn api(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> anyhow::Result<Api<DynamicObject>> {
        let (ar, namespaced) = self.resolve(api_version, kind).await?;
        Ok(match (namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &ar),
            _ => Api::all_with(self.client.clone(), &ar),
        })
    }

    /// Server-side applies `obj` (forcing conflicts, as the operator does).
    pub async fn apply(&self, obj: &Value) -> anyhow::Result<()> {
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let ns = obj.pointer("/metadata/namespace").and_then(Value::as_str);
        if api_version.is_empty() || kind.is_empty() || name.is_empty() {
            bail!("an object lacks apiVersion, kind or metadata.name");
        }
        let api = self.api(api_version, kind, ns).await?;
        api.patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(obj),
        )
        .await
        .with_context(|| {
            format!(
                "applying {kind} {}{name}",
                ns.map(|n| format!("{n}/")).unwrap_or_default()
            )
        })?;
        Ok(())
    }

    /// Server-side applies a namespace (no-op when it exists with other owners).
    pub async fn ensure_namespace(&self, name: &str) -> anyhow::Result<()> {
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
        if api.get_opt(name).await?.is_some() {
            return Ok(());
        }
        self.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))
            .await
    }

    /// Waits until the CRDs `names` are Established.
    pub async fn wait_established(
        &self,
        names: &[String],
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let deadline = tokio::time::Instant::now() + timeout;
        for name in names {
            loop {
                let ok = api.get_opt(name).await?.is_some_and(|c| {
                    c.status
                        .and_then(|s| s.conditions)
                        .into_iter()
                        .flatten()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
                if ok {
                    break;
                }
                if tokio::time::Instant::now() >= deadline {
                    bail!("CustomResourceDefinition {name} did not become Established");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Ok(())
    }

    /// Every provider object of every kind, in every namespace, in clusterctl's type order.
    pub async fn providers(&self) -> anyhow::Result<Vec<AnyProvider>> {
        let mut out = Vec::new();
        for t in ProviderType::ALL {
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &provider_resource(t));
            let list = match api.list(&ListParams::default()).await {
                Ok(l) => l,
                Err(e) if not_found(&e) => bail!(
                    "the cluster does not serve {} objects: the operator's CRDs are not installed (run `kubectl capi-providers init`)",
                    t.kind()
                ),
                Err(e) => return Err(e).context(format!("listing {} objects", t.kind())),
            };
            let mut items: Vec<AnyProvider> = list
                .items
                .into_iter()
                .map(|o| to_provider(t, o))
                .collect::<anyhow::Result<_>>()?;
            items.sort_by(|a, b| (a.namespace(), a.name()).cmp(&(b.namespace(), b.name())));
            out.extend(items);
        }
        Ok(out)
    }

    /// The provider object `t` `namespace/name`, if it exists.
    pub async fn provider(
        &self,
        t: ProviderType,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<Option<AnyProvider>> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &provider_resource(t));
        match api.get_opt(name).await {
            Ok(Some(o)) => Ok(Some(to_provider(t, o)?)),
            Ok(None) => Ok(None),
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(e).context(format!("reading {} {namespace}/{name}", t.kind())),
        }
    }

    /// The provider object `t` `namespace/name` of `api`, if it exists (a v1alpha2 object as
    /// the operator reads it).
    pub async fn provider_of(
        &self,
        api: ProviderApi,
        t: ProviderType,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<Option<AnyProvider>> {
        if api == ProviderApi::Management {
            return self.provider(t, namespace, name).await;
        }
        let dynamic: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            namespace,
            &provider_resource_of(api, t),
        );
        match dynamic.get_opt(name).await {
            Ok(Some(o)) => Ok(Some(go_provider(t, o)?)),
            Ok(None) => Ok(None),
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(e).context(format!("reading {} {namespace}/{name}", t.kind())),
        }
    }

    /// Every v1alpha2 object of cluster-api-operator's API with its JSON, in clusterctl's type
    /// order; `None` when the cluster does not serve that API.
    pub async fn go_providers(&self) -> anyhow::Result<Option<Vec<(AnyProvider, Value)>>> {
        let mut out = Vec::new();
        for t in ProviderType::ALL {
            let api: Api<DynamicObject> = Api::all_with(
                self.client.clone(),
                &provider_resource_of(ProviderApi::ClusterApiOperator, t),
            );
            let list = match api.list(&ListParams::default()).await {
                Ok(l) => l,
                Err(e) if not_found(&e) => return Ok(None),
                Err(e) => return Err(e).context(format!("listing v1alpha2 {} objects", t.kind())),
            };
            for o in list.items {
                let v = with_type(t, v1alpha2::API_VERSION, o)?;
                out.push((go_provider_value(t, v.clone())?, v));
            }
        }
        Ok(Some(out))
    }

    /// Merge-patches the provider object `p` with `patch`.
    pub async fn patch_provider(&self, p: &AnyProvider, patch: &Value) -> anyhow::Result<()> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            p.namespace(),
            &provider_resource_of(p.api, p.provider_type),
        );
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        api.patch(p.name(), &params, &Patch::Merge(patch))
            .await
            .with_context(|| format!("updating {}", describe(p)))?;
        Ok(())
    }
}

/// `Kind namespace/name` of a provider.
pub fn describe(p: &AnyProvider) -> String {
    format!("{} {}/{}", p.provider_type.kind(), p.namespace(), p.name())
}

/// A dynamic object's JSON with its apiVersion and kind (lists leave them out).
fn with_type(t: ProviderType, api_version: &str, o: DynamicObject) -> anyhow::Result<Value> {
    let mut v = serde_json::to_value(o)?;
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), json!(api_version));
        m.insert("kind".into(), json!(t.kind()));
    }
    Ok(v)
}

/// A v1alpha2 object as the operator reads it (an untranslatable spec reads as empty).
fn go_provider_value(t: ProviderType, v: Value) -> anyhow::Result<AnyProvider> {
    v1alpha2::view_value(v)
        .map(|(p, _)| p)
        .map_err(|e| anyhow::anyhow!("reading a v1alpha2 {} object: {e}", t.kind()))
}

fn go_provider(t: ProviderType, o: DynamicObject) -> anyhow::Result<AnyProvider> {
    go_provider_value(t, with_type(t, v1alpha2::API_VERSION, o)?)
}

fn to_provider(t: ProviderType, o: DynamicObject) -> anyhow::Result<AnyProvider> {
    let mut v = serde_json::to_value(o)?;
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), json!(format!("{GROUP}/{VERSION}")));
        m.insert("kind".into(), json!(t.kind()));
    }
    AnyProvider::from_value(v).map_err(|e| anyhow::anyhow!("reading a {} object: {e}", t.kind()))
}
