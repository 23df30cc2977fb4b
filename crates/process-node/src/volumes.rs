//! Pod volumes as host directories under the state dir, written the way kubelet's atomic
//! writer does so that file watchers see updates.

use std::{
    collections::{BTreeMap, HashMap},
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec},
    core::v1::{
        ConfigMapProjection, DownwardAPIVolumeFile, KeyToPath, Pod, SecretProjection,
        ServiceAccount, ServiceAccountTokenProjection, Volume,
    },
};
use kube::{Api, Client, api::PostParams};

use crate::{
    env::Objects,
    error::{Error, Result, io},
    fields::{self, Addresses},
};

/// File path inside a volume → (content, mode).
type Files = BTreeMap<String, (Vec<u8>, u32)>;

/// A cached service account token and when to renew it.
struct Token {
    value: String,
    renew_at: Instant,
}

/// The volumes of one pod.
pub struct Volumes {
    root: PathBuf,
    written: HashMap<String, Files>,
    tokens: HashMap<String, Token>,
}

impl Volumes {
    /// Volumes under `root` (the pod's `volumes/` directory).
    pub fn new(root: PathBuf) -> Volumes {
        Volumes {
            root,
            written: HashMap::new(),
            tokens: HashMap::new(),
        }
    }

    /// The host directory of volume `name` (a hostPath volume's own path).
    pub fn host_path(&self, pod: &Pod, name: &str) -> PathBuf {
        let host = pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .find(|v| v.name == name)
            .and_then(|v| v.host_path.as_ref());
        match host {
            Some(h) => PathBuf::from(&h.path),
            None => self.root.join(name),
        }
    }

    /// Brings every volume up to date. A missing non-optional Secret or ConfigMap is an
    /// `Error::Mount`, as kubelet's FailedMount.
    pub async fn sync(&mut self, client: &Client, pod: &Pod, addr: &Addresses) -> Result<()> {
        let volumes = pod.spec.iter().flat_map(|s| s.volumes.iter().flatten());
        for v in volumes {
            self.sync_one(client, pod, addr, v)
                .await
                .map_err(|e| match e {
                    Error::Mount(m) => Error::Mount(format!(
                        "MountVolume.SetUp failed for volume {:?} : {m}",
                        v.name
                    )),
                    other => other,
                })?;
        }
        Ok(())
    }

    async fn sync_one(
        &mut self,
        client: &Client,
        pod: &Pod,
        addr: &Addresses,
        v: &Volume,
    ) -> Result<()> {
        let dir = self.root.join(&v.name);
        if let Some(h) = &v.host_path {
            // As a container runtime does for a hostPath without a type: an existing path of any
            // kind (a socket, say) is used as it is; an absent one becomes a directory.
            if std::path::Path::new(&h.path).exists() {
                return Ok(());
            }
            return std::fs::create_dir_all(&h.path).map_err(io(format!("hostPath {}", h.path)));
        }
        let files = if let Some(s) = &v.secret {
            let proj = SecretProjection {
                name: s.secret_name.clone().unwrap_or_default(),
                items: s.items.clone(),
                optional: s.optional,
            };
            let mut f = Files::new();
            secret_files(client, pod, &proj, mode(s.default_mode), &mut f).await?;
            Some(f)
        } else if let Some(c) = &v.config_map {
            let proj = ConfigMapProjection {
                name: c.name.clone(),
                items: c.items.clone(),
                optional: c.optional,
            };
            let mut f = Files::new();
            config_map_files(client, pod, &proj, mode(c.default_mode), &mut f).await?;
            Some(f)
        } else if let Some(d) = &v.downward_api {
            let mut f = Files::new();
            downward_files(
                pod,
                addr,
                d.items.iter().flatten(),
                mode(d.default_mode),
                &mut f,
            );
            Some(f)
        } else if let Some(p) = &v.projected {
            Some(self.projected_files(client, pod, addr, p).await?)
        } else {
            // emptyDir, and anything else, is a plain directory.
            None
        };
        match files {
            Some(files) if self.written.get(&v.name) != Some(&files) => {
                write_atomic(&dir, &files)?;
                self.written.insert(v.name.clone(), files);
                Ok(())
            }
            Some(_) => Ok(()),
            None => {
                std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))
            }
        }
    }

    async fn projected_files(
        &mut self,
        client: &Client,
        pod: &Pod,
        addr: &Addresses,
        p: &k8s_openapi::api::core::v1::ProjectedVolumeSource,
    ) -> Result<Files> {
        let default = mode(p.default_mode);
        let mut files = Files::new();
        for src in p.sources.iter().flatten() {
            if let Some(s) = &src.secret {
                secret_files(client, pod, s, default, &mut files).await?;
            }
            if let Some(c) = &src.config_map {
                config_map_files(client, pod, c, default, &mut files).await?;
            }
            if let Some(d) = &src.downward_api {
                downward_files(pod, addr, d.items.iter().flatten(), default, &mut files);
            }
            if let Some(t) = &src.service_account_token {
                let token = self.token(client, pod, t).await?;
                files.insert(t.path.clone(), (token.into_bytes(), default));
            }
        }
        Ok(files)
    }

    /// A bound token from the TokenRequest API, renewed after 80% of its lifetime as kubelet does.
    async fn token(
        &mut self,
        client: &Client,
        pod: &Pod,
        t: &ServiceAccountTokenProjection,
    ) -> Result<String> {
        let key = format!("{:?}/{:?}/{}", t.audience, t.expiration_seconds, t.path);
        if let Some(tok) = self.tokens.get(&key)
            && Instant::now() < tok.renew_at
        {
            return Ok(tok.value.clone());
        }
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let sa = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into());
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: t.audience.iter().cloned().collect(),
                expiration_seconds: Some(t.expiration_seconds.unwrap_or(3600)),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: pod.metadata.name.clone(),
                    uid: pod.metadata.uid.clone(),
                }),
            },
            ..Default::default()
        };
        let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        let answer = api
            .create_token_request(&sa, &PostParams::default(), &request)
            .await
            .map_err(|e| {
                Error::Mount(format!("requesting a token for service account {sa}: {e}"))
            })?;
        let status = answer
            .status
            .ok_or_else(|| Error::Mount("the TokenRequest answer has no status".into()))?;
        let lifetime = status
            .expiration_timestamp
            .0
            .duration_since(jiff::Timestamp::now());
        let secs = lifetime.as_secs_f64().max(10.0) * 0.8;
        self.tokens.insert(
            key,
            Token {
                value: status.token.clone(),
                renew_at: Instant::now() + Duration::from_secs_f64(secs),
            },
        );
        Ok(status.token)
    }
}

fn mode(m: Option<i32>) -> u32 {
    m.map(|m| m as u32).unwrap_or(0o644)
}

/// Selects `items` (or every key) of `data` into `files`.
fn project(
    data: BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<KeyToPath>>,
    what: &str,
    default: u32,
    files: &mut Files,
) -> Result<()> {
    match items {
        None => files.extend(data.into_iter().map(|(k, v)| (k, (v, default)))),
        Some(items) => {
            for it in items {
                let v = data.get(&it.key).ok_or_else(|| {
                    Error::Mount(format!("configuration of {what} has no key {:?}", it.key))
                })?;
                files.insert(
                    it.path.clone(),
                    (v.clone(), it.mode.map(|m| m as u32).unwrap_or(default)),
                );
            }
        }
    }
    Ok(())
}

async fn secret_files(
    client: &Client,
    pod: &Pod,
    s: &SecretProjection,
    default: u32,
    files: &mut Files,
) -> Result<()> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    match Objects::new(client, ns).secret(&s.name).await? {
        Some(data) => project(
            data,
            s.items.as_ref(),
            &format!("secret {:?}", s.name),
            default,
            files,
        ),
        None if s.optional == Some(true) => Ok(()),
        None => Err(Error::Mount(format!("secret \"{}\" not found", s.name))),
    }
}

async fn config_map_files(
    client: &Client,
    pod: &Pod,
    c: &ConfigMapProjection,
    default: u32,
    files: &mut Files,
) -> Result<()> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    match Objects::new(client, ns).config_map(&c.name).await? {
        Some(data) => project(
            data,
            c.items.as_ref(),
            &format!("configmap {:?}", c.name),
            default,
            files,
        ),
        None if c.optional == Some(true) => Ok(()),
        None => Err(Error::Mount(format!("configmap \"{}\" not found", c.name))),
    }
}

fn downward_files<'a>(
    pod: &Pod,
    addr: &Addresses,
    items: impl Iterator<Item = &'a DownwardAPIVolumeFile>,
    default: u32,
    files: &mut Files,
) {
    let containers: Vec<_> = pod.spec.iter().flat_map(|s| s.containers.iter()).collect();
    for it in items {
        let value = if let Some(f) = &it.field_ref {
            fields::field(pod, &f.field_path, addr)
        } else if let Some(r) = &it.resource_field_ref {
            let c = containers
                .iter()
                .find(|c| Some(&c.name) == r.container_name.as_ref())
                .or(containers.first());
            c.and_then(|c| fields::resource(c, r))
        } else {
            None
        };
        let m = it.mode.map(|m| m as u32).unwrap_or(default);
        files.insert(it.path.clone(), (value.unwrap_or_default().into_bytes(), m));
    }
}

/// Writes `files` into a fresh `..<timestamp>` directory and swaps the `..data` symlink to it
/// in one rename; the visible names are symlinks through `..data` (kubelet's atomic writer).
pub fn write_atomic(dir: &Path, files: &Files) -> Result<()> {
    let err = |p: &Path| io(format!("writing volume file {}", p.display()));
    std::fs::create_dir_all(dir).map_err(err(dir))?;
    let now = jiff::Timestamp::now();
    let stamp = format!("..{}", now.strftime("%Y_%m_%d_%H_%M_%S.%f"));
    let new_dir = dir.join(&stamp);
    std::fs::create_dir_all(&new_dir).map_err(err(&new_dir))?;
    for (path, (content, mode)) in files {
        let target = new_dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(err(parent))?;
        }
        std::fs::write(&target, content).map_err(err(&target))?;
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(*mode & 0o7777))
            .map_err(err(&target))?;
    }
    let data = dir.join("..data");
    let old = std::fs::read_link(&data).ok();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&stamp, &tmp).map_err(err(&tmp))?;
    std::fs::rename(&tmp, &data).map_err(err(&data))?;
    let top: std::collections::BTreeSet<String> = files
        .keys()
        .filter_map(|p| p.split('/').next().map(str::to_string))
        .collect();
    for name in &top {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(name), &link)
                .map_err(err(&link))?;
        }
    }
    remove_stale(dir, &top);
    if let Some(old) = old
        && old != Path::new(&stamp)
    {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(())
}

/// Removes visible names no longer in the volume.
fn remove_stale(dir: &Path, keep: &std::collections::BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("..") && !keep.contains(&name) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_writer_swaps_data() {
        let dir = std::env::temp_dir().join(format!("cpn-aw-{}", std::process::id()));
        let mut f = Files::new();
        f.insert("a".into(), (b"1".to_vec(), 0o644));
        f.insert("sub/b".into(), (b"2".to_vec(), 0o600));
        write_atomic(&dir, &f).unwrap();
        assert_eq!(std::fs::read(dir.join("sub/b")).unwrap(), b"2");
        f.remove("sub/b");
        f.insert("a".into(), (b"3".to_vec(), 0o644));
        write_atomic(&dir, &f).unwrap();
        assert_eq!(std::fs::read(dir.join("a")).unwrap(), b"3");
        assert!(std::fs::symlink_metadata(dir.join("sub")).is_err());
        let stamps = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("..2")
            })
            .count();
        assert_eq!(stamps, 1);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
