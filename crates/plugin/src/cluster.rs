//! The management cluster as the plugin sees it: connecting (kubeconfig, context, the
//! plugin's User-Agent), and reading and patching provider objects with the plugin's messages.
//! Applying, discovery, CRD waits and reading provider objects of either API are
//! [`capi_cluster_io`]'s, shared with the operator; here they only get the plugin's field
//! manager and its error wording.

use std::{path::PathBuf, time::Duration};

use anyhow::{Context, bail};
use capi_cluster_io::{
    ServerSideApply,
    established::wait_all_established,
    provider_kind::{object_value, provider_of_value, read_provider},
};
use capi_operator_api::{AnyProvider, ProviderApi, ProviderType};
use kube::{
    Api, Client, Config,
    api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::{Value, json};

pub use capi_cluster_io::provider_kind::provider_resource as provider_resource_of;

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
    io: ServerSideApply,
}

/// The API of provider type `t` of this operator's API.
pub fn provider_resource(t: ProviderType) -> ApiResource {
    provider_resource_of(ProviderApi::Management, t)
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
            io: ServerSideApply::new(client.clone(), FIELD_MANAGER),
            client,
        })
    }

    /// The resource serving `kind` of `api_version`, and whether it is namespaced.
    pub async fn resolve(
        &self,
        api_version: &str,
        kind: &str,
    ) -> anyhow::Result<(ApiResource, bool)> {
        let r = self.io.resolve_kind(api_version, kind).await?;
        Ok((r.resource, r.namespaced))
    }

    /// A dynamic API for objects of `kind` of `api_version` in `namespace` (ignored for
    /// cluster-scoped kinds; `None` lists across namespaces).
    pub async fn api(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> anyhow::Result<Api<DynamicObject>> {
        let r = self.io.resolve_kind(api_version, kind).await?;
        Ok(r.api(&self.client, namespace))
    }

    /// Server-side applies `obj` (forcing conflicts, as the operator does).
    pub async fn apply(&self, obj: &Value) -> anyhow::Result<()> {
        self.io.apply(obj).await?;
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
        wait_all_established(&self.client, names, timeout).await?;
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
                .map(|o| read_provider(ProviderApi::Management, t, o))
                .collect::<Result<_, _>>()?;
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
            Ok(Some(o)) => Ok(Some(read_provider(ProviderApi::Management, t, o)?)),
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
            Ok(Some(o)) => Ok(Some(read_provider(api, t, o)?)),
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
                let v = object_value(ProviderApi::ClusterApiOperator, t, o)?;
                out.push((
                    provider_of_value(ProviderApi::ClusterApiOperator, t, v.clone())?,
                    v,
                ));
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
