//! The operator's own key for the config hash (`capi_components::rotation::HashKey`): read
//! from a Secret of its namespace, created with 32 random bytes at the first start. Every
//! replica reads the same Secret (a create that loses the race reads the winner's), so the
//! hash is the same whichever replica leads and across restarts.

use anyhow::{Context, bail};
use capi_components::rotation::HashKey;
use capi_operator_api::{CONFIG_HASH_KEY_DATA, CONFIG_HASH_KEY_LABEL, CONFIG_HASH_KEY_SECRET};
use k8s_openapi::{
    ByteString, api::core::v1::Secret, apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{Api, Client, api::PostParams};
use ring::rand::SecureRandom;

/// [`load_or_create`], retried with back-off (1 s doubling, at most 30 s) until it succeeds:
/// an apiserver not reachable yet, or a malformed Secret an admin must delete, keeps the
/// process alive and saying why instead of exiting into a crash loop.
pub async fn load_retrying(client: &Client, namespace: &str) -> HashKey {
    let mut delay = std::time::Duration::from_secs(1);
    loop {
        match load_or_create(client, namespace).await {
            Ok(key) => return key,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), retry_in = ?delay, "the config hash key is not available yet");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(30));
            }
        }
    }
}

/// The key kept in `namespace`, created when absent.
pub async fn load_or_create(client: &Client, namespace: &str) -> anyhow::Result<HashKey> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let what = format!("Secret {namespace}/{CONFIG_HASH_KEY_SECRET} (the config hash key)");
    if let Some(s) = api
        .get_opt(CONFIG_HASH_KEY_SECRET)
        .await
        .with_context(|| format!("reading {what}"))?
    {
        return key_of(&s, &what);
    }
    let mut bytes = vec![0u8; HashKey::MIN_BYTES];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| anyhow::anyhow!("no random bytes for {what}"))?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(CONFIG_HASH_KEY_SECRET.into()),
            namespace: Some(namespace.into()),
            labels: Some(
                [
                    (CONFIG_HASH_KEY_LABEL.to_string(), "true".to_string()),
                    (
                        "app.kubernetes.io/name".to_string(),
                        "capi-provider-operator".to_string(),
                    ),
                ]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        data: Some([(CONFIG_HASH_KEY_DATA.to_string(), ByteString(bytes))].into()),
        ..Secret::default()
    };
    let params = PostParams {
        field_manager: Some(capi_cluster_io::server_side_apply::OPERATOR_FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    match api.create(&params, &secret).await {
        Ok(s) => {
            tracing::info!(secret = %format!("{namespace}/{CONFIG_HASH_KEY_SECRET}"), "created the config hash key");
            key_of(&s, &what)
        }
        // Another replica created it first: its key is the one.
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let s = api
                .get(CONFIG_HASH_KEY_SECRET)
                .await
                .with_context(|| format!("reading {what}"))?;
            key_of(&s, &what)
        }
        Err(e) => Err(e).with_context(|| format!("creating {what}")),
    }
}

/// The key a Secret holds; one too short or missing is refused (never printed).
pub fn key_of(s: &Secret, what: &str) -> anyhow::Result<HashKey> {
    let bytes = s
        .data
        .as_ref()
        .and_then(|d| d.get(CONFIG_HASH_KEY_DATA))
        .map(|b| b.0.as_slice())
        .unwrap_or_default();
    if bytes.len() < HashKey::MIN_BYTES {
        bail!(
            "{what} holds no key of at least {} bytes under {CONFIG_HASH_KEY_DATA:?}; delete it and the operator creates a new one (each provider's managers that read a Secret then roll once)",
            HashKey::MIN_BYTES
        );
    }
    Ok(HashKey::new(bytes))
}
