//! The operator image, checked without a container runtime (none runs on the CI machines):
//! the Dockerfile against the Deployment, the Helm chart, the workspace and the binary it
//! packages; then the binary run the way the Deployment runs the image — user 65532, no
//! capabilities, no_new_privs, a read-only root filesystem, cwd `/`, only the Deployment's
//! environment and args — installing a provider and handing its Lease over on SIGTERM.

use crate::support;

use std::{
    collections::BTreeSet,
    os::unix::fs::PermissionsExt,
    process::{Command, Stdio},
    time::Duration,
};

use capi_test_support::{private_cluster, wait_for, workspace_root};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use serde_json::Value;
use support::*;

/// One stage of a Dockerfile: its base image, alias and instructions (continuations joined).
struct Stage {
    from: String,
    alias: Option<String>,
    instructions: Vec<(String, String)>,
}

impl Stage {
    fn all(&self, name: &str) -> Vec<&str> {
        self.instructions
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn one(&self, name: &str) -> Result<&str, String> {
        match self.all(name).as_slice() {
            [v] => Ok(v),
            other => Err(format!(
                "stage FROM {}: {} {name} instructions, expected 1",
                self.from,
                other.len()
            )),
        }
    }
}

fn parse_dockerfile(text: &str) -> Result<Vec<Stage>, String> {
    let mut stages: Vec<Stage> = Vec::new();
    let mut line = String::new();
    for raw in text.lines() {
        let t = raw.trim();
        if line.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if let Some(head) = t.strip_suffix('\\') {
            line.push_str(head);
            line.push(' ');
            continue;
        }
        line.push_str(t);
        let full = std::mem::take(&mut line);
        let (name, rest) = full.split_once(' ').unwrap_or((full.as_str(), ""));
        let (name, rest) = (name.to_ascii_uppercase(), rest.trim().to_string());
        if name == "FROM" {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let alias = match words.as_slice() {
                [_] => None,
                [_, as_, a] if as_.eq_ignore_ascii_case("as") => Some(a.to_string()),
                _ => return Err(format!("FROM {rest}: not IMAGE [AS NAME]")),
            };
            stages.push(Stage {
                from: words[0].to_string(),
                alias,
                instructions: Vec::new(),
            });
        } else {
            let stage = stages
                .last_mut()
                .ok_or_else(|| format!("{name} before any FROM"))?;
            stage.instructions.push((name, rest));
        }
    }
    Ok(stages)
}

/// The exec form of ENTRYPOINT/CMD (a JSON array).
fn exec_form(value: &str) -> Result<Vec<String>, String> {
    serde_json::from_str(value).map_err(|e| format!("{value}: not the exec form: {e}"))
}

fn workspace_field(key: &str) -> Result<String, String> {
    let text =
        std::fs::read_to_string(workspace_root().join("Cargo.toml")).map_err(|e| e.to_string())?;
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
        })
        .ok_or_else(|| format!("Cargo.toml has no {key}"))
}

fn version_tuple(v: &str) -> Vec<u64> {
    v.split('.').filter_map(|p| p.parse().ok()).collect()
}

fn yaml(path: &str) -> Result<Value, Box<dyn std::error::Error>> {
    Ok(capi_yaml::from_str(&std::fs::read_to_string(
        workspace_root().join(path),
    )?)?)
}

/// The operator container of manifests/operator/deployment.yaml and its pod securityContext.
fn deployment() -> Result<(Value, Value), Box<dyn std::error::Error>> {
    let d = yaml("manifests/operator/deployment.yaml")?;
    let pod = d["spec"]["template"]["spec"].clone();
    let c = pod["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == "operator"))
        .cloned()
        .ok_or("no container named operator")?;
    Ok((c, pod["securityContext"].clone()))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The port of `--flag=:PORT` in `args`.
fn flag_port(args: &[String], flag: &str) -> Option<u64> {
    args.iter()
        .find_map(|a| a.strip_prefix(&format!("{flag}=")))
        .and_then(|v| v.rsplit(':').next())
        .and_then(|p| p.parse().ok())
}

/// Debian release codename → version, for the build and runtime bases to agree (the binary
/// links the build stage's glibc).
fn debian_version(image: &str) -> Option<u32> {
    [
        ("bookworm", 12),
        ("trixie", 13),
        ("debian12", 12),
        ("debian13", 13),
    ]
    .iter()
    .find(|(n, _)| image.contains(n))
    .map(|(_, v)| *v)
}

#[test]
fn dockerfile_agrees_with_the_manifests_chart_workspace_and_binary() -> TestResult {
    let root = workspace_root();
    let stages = parse_dockerfile(&std::fs::read_to_string(root.join("Dockerfile"))?)?;
    let [build, run] = stages.as_slice() else {
        return Err(format!("expected a build and a runtime stage, got {}", stages.len()).into());
    };

    // Build stage: a Rust toolchain new enough for the workspace, the locked release build.
    let rust = build
        .from
        .strip_prefix("docker.io/library/rust:")
        .ok_or_else(|| {
            format!(
                "build stage FROM {}: not the official rust image",
                build.from
            )
        })?;
    let toolchain = rust.split('-').next().unwrap_or_default();
    let msrv = workspace_field("rust-version")?;
    assert!(
        version_tuple(toolchain) >= version_tuple(&msrv),
        "rust:{toolchain} is older than the workspace's rust-version {msrv}"
    );
    let script = build.all("RUN").join(" && ");
    assert!(
        script.contains(
            "cargo build --release --locked -p capi-provider-operator --bin capi-provider-operator"
        ),
        "the build stage must build the operator release binary from Cargo.lock: {script}"
    );
    let built = script
        .split("&&")
        .find_map(|c| {
            c.trim()
                .strip_prefix("cp target/release/capi-provider-operator ")
        })
        .map(str::trim)
        .ok_or("the build stage does not copy the binary out of target/")?;
    assert_eq!(
        build.all("COPY"),
        vec![". ."],
        "the build stage copies the workspace"
    );

    // Runtime stage: distroless, the same Debian release, the binary as ENTRYPOINT.
    assert_eq!(run.from, "gcr.io/distroless/cc-debian12:nonroot");
    assert_eq!(
        debian_version(&build.from),
        debian_version(&run.from),
        "build ({}) and runtime ({}) bases must share a Debian release: the binary links the build stage's glibc",
        build.from,
        run.from
    );
    let alias = build
        .alias
        .as_deref()
        .ok_or("the build stage has no name")?;
    let copy = run.one("COPY")?;
    let dest = copy
        .strip_prefix(&format!("--from={alias} {built} "))
        .ok_or_else(|| format!("COPY {copy}: not the binary {built} of stage {alias}"))?;
    assert_eq!(exec_form(run.one("ENTRYPOINT")?)?, vec![dest.to_string()]);
    let cmd = exec_form(run.one("CMD")?)?;

    // The Deployment runs the image as the image's user, with what the image expects.
    let (container, pod_security) = deployment()?;
    let user = run.one("USER")?;
    assert_eq!(
        user,
        format!(
            "{}:{}",
            pod_security["runAsUser"], pod_security["runAsGroup"]
        ),
        "the image's USER and the Deployment's runAsUser/runAsGroup"
    );
    assert_eq!(pod_security["runAsNonRoot"], true);
    let sc = &container["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(strings(&sc["capabilities"]["drop"]), vec!["ALL"]);
    let args = strings(&container["args"]);
    assert_eq!(args.first().map(String::as_str), Some("run"));
    assert_eq!(cmd.first().map(String::as_str), Some("run"));
    let ports: Vec<(String, u64)> = container["ports"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter_map(|p| {
                    Some((
                        p["name"].as_str()?.to_string(),
                        p["containerPort"].as_u64()?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    for (flag, name) in [
        ("--metrics-bind-address", "metrics"),
        ("--health-probe-bind-address", "health"),
    ] {
        let port = ports.iter().find(|(n, _)| n == name).map(|(_, p)| *p);
        assert_eq!(
            flag_port(&args, flag),
            port,
            "Deployment {flag} vs port {name}"
        );
        assert_eq!(
            flag_port(&cmd, flag),
            port,
            "image CMD {flag} vs port {name}"
        );
    }

    // The allocator setting that keeps the RSS down (docs/performance.md) holds however the
    // image is run: the image, the Deployment and the chart set the same value.
    let env_of = |c: &Value, name: &str| {
        c["env"].as_array().and_then(|es| {
            es.iter()
                .find(|e| e["name"] == name)
                .and_then(|e| e["value"].as_str().map(String::from))
        })
    };
    let tunables =
        env_of(&container, "GLIBC_TUNABLES").ok_or("the Deployment does not set GLIBC_TUNABLES")?;
    for tunable in ["glibc.malloc.trim_threshold=", "glibc.malloc.arena_max="] {
        assert!(
            tunables.contains(tunable),
            "GLIBC_TUNABLES {tunables:?} does not set {tunable}"
        );
    }
    assert_eq!(
        run.all("ENV"),
        vec![format!("GLIBC_TUNABLES={tunables}").as_str()],
        "the image's ENV and the Deployment's GLIBC_TUNABLES"
    );
    let chart_deployment = std::fs::read_to_string(
        root.join("manifests/helm/capi-provider-operator/templates/deployment.yaml"),
    )?;
    assert!(
        chart_deployment.contains(&format!(
            "- name: GLIBC_TUNABLES\n          value: {tunables}\n"
        )),
        "the chart's Deployment does not set GLIBC_TUNABLES={tunables}"
    );

    // Every flag the image and the Deployment pass exists.
    let help = Command::new(operator_bin())
        .args(["run", "--help"])
        .output()?;
    let help = String::from_utf8_lossy(&help.stdout);
    for a in cmd.iter().chain(&args).filter(|a| a.starts_with("--")) {
        let flag = a.split('=').next().unwrap_or(a);
        assert!(
            help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")),
            "{flag} (image CMD or Deployment args) is not a flag of `run`"
        );
    }

    // One version everywhere: workspace, Deployment image, chart appVersion.
    let version = format!("v{}", workspace_field("version")?);
    let image = container["image"].as_str().unwrap_or_default();
    let values = yaml("manifests/helm/capi-provider-operator/values.yaml")?;
    let chart = yaml("manifests/helm/capi-provider-operator/Chart.yaml")?;
    let repository = values["image"]["repository"].as_str().unwrap_or_default();
    assert_eq!(image, format!("{repository}:{version}"), "Deployment image");
    // The chart's tag defaults to its appVersion, which must be the workspace's version.
    assert_eq!(
        values["image"]["tag"], "",
        "chart values image.tag overrides appVersion"
    );
    assert_eq!(chart["appVersion"], version.as_str(), "chart appVersion");

    // The build context: no build outputs or history, but everything the build reads.
    let ignore: BTreeSet<String> = std::fs::read_to_string(root.join(".dockerignore"))?
        .lines()
        .map(|l| l.trim().trim_end_matches('/').to_string())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for must in ["target", ".git"] {
        assert!(ignore.contains(must), ".dockerignore must exclude {must}");
    }
    for needed in ["Cargo.toml", "Cargo.lock", "crates"] {
        assert!(
            root.join(needed).exists(),
            "{needed} missing from the build context"
        );
        assert!(!ignore.contains(needed), ".dockerignore excludes {needed}");
    }

    // The runtime base has glibc and libgcc only: the binary may need nothing else.
    let out = Command::new("readelf")
        .args(["-d"])
        .arg(operator_bin())
        .output()
        .map_err(|e| format!("readelf (package binutils) is needed to check the binary: {e}"))?;
    if !out.status.success() {
        return Err(format!("readelf -d: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let allowed = [
        "libc.so.6",
        "libm.so.6",
        "libgcc_s.so.1",
        "libpthread.so.0",
        "libdl.so.2",
        "librt.so.1",
        "ld-linux-x86-64.so.2",
        "ld-linux-aarch64.so.1",
    ];
    let text = String::from_utf8_lossy(&out.stdout);
    let needed: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1)?.split(']').next())
        .collect();
    assert!(
        !needed.is_empty(),
        "readelf found no NEEDED entries:\n{text}"
    );
    for lib in needed {
        assert!(
            allowed.contains(&lib),
            "the binary needs {lib}, which gcr.io/distroless/cc-debian12 does not ship"
        );
    }
    Ok(())
}

fn tool(name: &str) -> bool {
    Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// `/proc/PID/status` field `key`.
fn proc_status(pid: u32, key: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{key}:"))
                .map(|v| v.trim().to_string())
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_as_the_deployment_runs_the_image() -> TestResult {
    let is_root = proc_status(std::process::id(), "Uid")
        .is_some_and(|u| u.split_whitespace().next() == Some("0"));
    if !is_root {
        return Err(
            "running as the image runs needs root to drop to user 65532 on a read-only \
             root filesystem (make integration runs as root)"
                .into(),
        );
    }
    for needed in ["unshare", "setpriv"] {
        if !tool(needed) {
            return Err(format!("{needed} is not installed: install util-linux").into());
        }
    }
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    let (ns, core_ns) = ("image-operator", "image-core");
    cluster.ensure_namespace(ns)?;
    load_core(cluster, &client, core_ns).await?;

    // What the image holds, readable by user 65532 (the target directory may not be): the
    // binary at the ENTRYPOINT path, and a kubeconfig with its credentials inline, standing
    // for the ServiceAccount token the Pod would mount.
    let dir = std::env::temp_dir().join(format!("capi-image-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("usr/local/bin"))?;
    let bin = dir.join("usr/local/bin/capi-provider-operator");
    std::fs::copy(operator_bin(), &bin)?;
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        cluster.kubectl_ok(&["config", "view", "--raw", "--flatten", "--minify"])?,
    )?;
    for (p, mode) in [
        (&dir, 0o755),
        (&dir.join("usr"), 0o755),
        (&dir.join("usr/local"), 0o755),
        (&dir.join("usr/local/bin"), 0o755),
        (&bin, 0o755),
        (&kubeconfig, 0o644),
    ] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))?;
    }

    // The Deployment's args, on free loopback ports instead of :8080/:8081.
    let (container, pod_security) = deployment()?;
    let (metrics, health) = (free_port()?, free_port()?);
    let args: Vec<String> = strings(&container["args"])
        .into_iter()
        .map(|a| {
            if a.starts_with("--metrics-bind-address=") {
                format!("--metrics-bind-address=127.0.0.1:{metrics}")
            } else if a.starts_with("--health-probe-bind-address=") {
                format!("--health-probe-bind-address=127.0.0.1:{health}")
            } else {
                a
            }
        })
        .collect();
    let uid = pod_security["runAsUser"].to_string();
    let gid = pod_security["runAsGroup"].to_string();
    let log_path = dir.with_extension("log");
    let log = std::fs::File::create(&log_path)?;
    let pod_name = "capi-provider-operator-7d9f8-x2x4k";
    let mut child = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(r#"mount -o remount,bind,ro / && exec "$@""#)
        .args([
            "sh",
            "setpriv",
            "--reuid",
            &uid,
            "--regid",
            &gid,
            "--clear-groups",
        ])
        .args([
            "--no-new-privs",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
        ])
        .arg(&bin)
        .args(&args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .env("KUBECONFIG", &kubeconfig)
        .env("POD_NAME", pod_name)
        .env("POD_NAMESPACE", ns)
        .current_dir("/")
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    let pid = child.id();
    let logs = || std::fs::read_to_string(&log_path).unwrap_or_default();

    let result = async {
        let ready = wait_for(Duration::from_secs(60), || async {
            (get(health, "/readyz").ok()?.0 == 200).then_some(())
        })
        .await;
        if ready.is_none() {
            return Err(format!("/readyz never true\n{}", logs()).into());
        }
        // The process really runs as the Deployment says (the exec chain keeps the pid).
        assert_eq!(
            proc_status(pid, "Uid")
                .as_deref()
                .and_then(|u| u.split_whitespace().next()),
            Some(uid.as_str())
        );
        assert_eq!(proc_status(pid, "NoNewPrivs").as_deref(), Some("1"));
        assert_eq!(
            proc_status(pid, "CapEff").as_deref(),
            Some("0000000000000000")
        );
        let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))?;
        let root_ro = mounts.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(4) == Some(&"/") && f.get(5).is_some_and(|o| o.split(',').any(|x| x == "ro"))
        });
        assert!(
            root_ro,
            "the root filesystem is not read-only for the operator:\n{mounts}"
        );

        // It leads, in the Pod's namespace, under the Pod's name.
        let leases = Api::<Lease>::namespaced(client.clone(), ns);
        let holder = wait_for(Duration::from_secs(30), || async {
            leases
                .get_opt("capi-provider-operator")
                .await
                .ok()??
                .spec?
                .holder_identity
        })
        .await
        .ok_or_else(|| format!("no Lease capi-provider-operator in {ns}\n{}", logs()))?;
        assert!(holder.starts_with(pod_name), "Lease holder {holder}");

        // It installs a provider: fetch, render, apply, status, all unprivileged and read-only.
        apply(cluster, &core_provider(core_ns, "v0.2.0", 2))?;
        wait_condition(
            &client,
            ("CoreProvider", core_ns, "cluster-api"),
            "Ready",
            "True",
            None,
            Duration::from_secs(90),
        )
        .await
        .map_err(|e| format!("{e}\n{}", logs()))?;
        let (code, body) = get(metrics, "/metrics")?;
        assert_eq!(code, 200);
        assert!(
            body.lines()
                .any(|l| l.starts_with("capi_operator_provider_ready{")
                    && l.contains(core_ns)
                    && l.ends_with(" 1")),
            "{body}"
        );

        // --log-format=json: every line is a JSON object.
        let text = logs();
        assert!(!text.trim().is_empty(), "the operator logged nothing");
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let v: Value =
                serde_json::from_str(line).map_err(|e| format!("not JSON ({e}): {line}"))?;
            assert!(v.is_object(), "{line}");
        }

        // SIGTERM (what the kubelet sends): exit 0 within the Deployment's grace period (30 s,
        // after which the kubelet kills), Lease released for the next replica. The operator
        // drains for at most 20 s (leader::DRAIN_ON_TERMINATION), then releases the Lease: a
        // bound equal to the drain would fail a drain that used its whole budget, as allowed.
        Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()?;
        let grace = Duration::from_secs(30);
        let status = wait_for(grace, || {
            let s = child.try_wait().ok().flatten();
            async move { s }
        })
        .await
        .ok_or_else(|| {
            format!(
                "the operator did not exit within the {grace:?} grace period of SIGTERM\n{}",
                logs()
            )
        })?;
        assert!(status.success(), "exit status {status}\n{}", logs());
        let released = leases
            .get_opt("capi-provider-operator")
            .await?
            .and_then(|l| l.spec?.holder_identity)
            .unwrap_or_default();
        assert!(released.is_empty(), "the Lease is still held by {released}");
        Ok::<(), Box<dyn std::error::Error>>(())
    }
    .await;
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&log_path);
    result
}

/// The image `make image` pushed (e2e/scripts/operator-image.sh) to the registry storage of
/// `make images`, read blob by blob from that storage: an index of linux/amd64 and linux/arm64
/// whose configurations are the Dockerfile's runtime stage (ENV, USER, ENTRYPOINT, CMD), with the
/// binary of each platform at the Dockerfile's path, CA certificates and the nonroot user 65532.
#[test]
fn make_image_builds_what_the_dockerfile_declares() -> TestResult {
    let stages = parse_dockerfile(&std::fs::read_to_string(
        workspace_root().join("Dockerfile"),
    )?)?;
    let run = stages.last().ok_or("no stage in the Dockerfile")?;
    let chart = yaml("manifests/helm/capi-provider-operator/values.yaml")?;
    let app = yaml("manifests/helm/capi-provider-operator/Chart.yaml")?;
    let repo = chart["image"]["repository"]
        .as_str()
        .ok_or("no image.repository")?;
    let tag = app["appVersion"].as_str().ok_or("no appVersion")?;
    let store = capi_test_support::images_store().join("public/docker/registry/v2");
    let link = store.join(format!(
        "repositories/{repo}/_manifests/tags/{tag}/current/link"
    ));
    let top = std::fs::read_to_string(&link)
        .map_err(|e| format!("no {repo}:{tag} stored ({e}): run `make image`"))?;
    let path = |digest: &str| {
        let hex = digest.trim().trim_start_matches("sha256:").to_string();
        store.join(format!(
            "blobs/sha256/{}/{hex}/data",
            &hex[..2.min(hex.len())]
        ))
    };
    let json = |digest: &str| -> Result<Value, Box<dyn std::error::Error>> {
        Ok(serde_json::from_slice(&std::fs::read(path(digest))?)?)
    };
    let index = json(&top)?;
    let dest = run
        .one("COPY")?
        .split_whitespace()
        .last()
        .ok_or("COPY without a destination")?
        .trim_start_matches('/')
        .to_string();
    let mut archs = Vec::new();
    for m in index["manifests"].as_array().ok_or("not an index")? {
        let arch = m["platform"]["architecture"].as_str().unwrap_or_default();
        archs.push(arch.to_string());
        let manifest = json(m["digest"].as_str().unwrap_or_default())?;
        let config = json(manifest["config"]["digest"].as_str().unwrap_or_default())?;
        assert_eq!(config["architecture"], arch);
        let c = &config["config"];
        for env in run.all("ENV") {
            assert!(
                strings(&c["Env"]).contains(&env.to_string()),
                "{arch}: {env} not in {c}"
            );
        }
        assert_eq!(c["User"], run.one("USER")?, "{arch}: USER");
        assert_eq!(
            strings(&c["Entrypoint"]),
            exec_form(run.one("ENTRYPOINT")?)?
        );
        assert_eq!(strings(&c["Cmd"]), exec_form(run.one("CMD")?)?);
        let layers = manifest["layers"].as_array().ok_or("no layers")?;
        let layer = path(layers[0]["digest"].as_str().unwrap_or_default());
        let listing = Command::new("tar").arg("-tvzf").arg(&layer).output()?;
        let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
        let entry = |name: &str| listing.lines().find(|l| l.ends_with(&format!(" {name}")));
        let bin = entry(&dest).ok_or_else(|| format!("{arch}: no {dest} in\n{listing}"))?;
        assert!(bin.starts_with("-rwxr-xr-x 0/0"), "{arch}: {bin}");
        assert!(
            entry("etc/ssl/certs/ca-certificates.crt").is_some(),
            "{arch}: CA certificates"
        );
        let file = |name: &str| -> Result<Vec<u8>, Box<dyn std::error::Error>> {
            let out = Command::new("tar")
                .arg("-xzOf")
                .arg(&layer)
                .arg(name)
                .output()?;
            Ok(out.stdout)
        };
        let passwd = String::from_utf8(file("etc/passwd")?)?;
        assert!(
            passwd.contains("nonroot:x:65532:65532:"),
            "{arch}: {passwd}"
        );
        // The ELF header's e_machine: the binary of each platform is built for it.
        let elf = file(&dest)?;
        let machine = elf.get(18..20).map(|b| u16::from_le_bytes([b[0], b[1]]));
        let want = if arch == "amd64" { 0x3e } else { 0xb7 };
        assert_eq!(machine, Some(want), "{arch}: the binary's machine");
    }
    archs.sort();
    assert_eq!(archs, ["amd64", "arm64"], "the index's platforms");
    Ok(())
}
