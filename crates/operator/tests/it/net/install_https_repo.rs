//! End-to-end: a provider installed from a release repository on a plain HTTPS server (as an
//! internal Artifactory, Nexus or nginx mirror serves one: clusterctl's `<base>/<version>/<file>`
//! layout, generated directory listings, basic authentication, a certificate from a private CA),
//! with the credentials and the CA bundle from the provider's Secret; `latest` resolved from the
//! listing; wrong credentials and an untrusted certificate reported with their own messages;
//! then the same server trusted through the operator-wide `--ca-bundle` instead.

use crate::support;

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use capi_test_support::{private_cluster, workspace_root};
use serde_json::Value;
use support::*;

const T: Duration = Duration::from_secs(90);

/// The HTTPS server (e2e/scripts/https-repo.py), killed on drop.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(
    root: &Path,
    certs: &Path,
    user_password: &str,
) -> Result<Server, Box<dyn std::error::Error>> {
    let script = workspace_root().join("e2e/scripts/https-repo.py");
    let mut child = Command::new("python3")
        .arg(&script)
        .arg(root)
        .arg(certs.join("apiserver.crt"))
        .arg(certs.join("apiserver.key"))
        .arg(user_password)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
    let port = line.trim().parse()?;
    Ok(Server { child, port })
}

/// `DIR/capi/core/<version>/` holding the sample core releases v0.1.0 and v0.2.0.
fn repository(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    for v in ["v0.1.0", "v0.2.0"] {
        let from = samples().join("sample-core").join(v);
        let to = dir.join("capi/core").join(v);
        std::fs::create_dir_all(&to)?;
        for f in ["core-components.yaml", "metadata.yaml"] {
            std::fs::copy(from.join(f), to.join(f))?;
        }
    }
    Ok(())
}

/// A private CA's certificates under `work/certs` and the sample repository served from
/// `work/www` with basic authentication (mirror / s3cret-pass).
fn mirror(work: &Path) -> Result<(Server, std::path::PathBuf), Box<dyn std::error::Error>> {
    let certs = work.join("certs");
    let ok = Command::new(workspace_root().join("e2e/scripts/make-certs.sh"))
        .arg(&certs)
        .status()?;
    assert!(ok.success(), "make-certs.sh failed");
    repository(&work.join("www"))?;
    let server = serve(&work.join("www"), &certs, "mirror:s3cret-pass")?;
    Ok((server, certs))
}

fn provider(kind: &str, ns: &str, name: &str, url: &str, secret: &str) -> String {
    format!(
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: {kind}\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  secretName: {secret}\n  fetchConfig:\n    url: {url}\n"
    )
}

fn secret(ns: &str, name: &str, user: &str, password: &str, ca: Option<&str>) -> String {
    let ca = ca.map_or(String::new(), |c| {
        format!("  HTTP_CA_BUNDLE: |\n{}", capi_test_support::indent(c, 4))
    });
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {ns}\nstringData:\n  HTTP_USERNAME: {user}\n  HTTP_PASSWORD: {password}\n{ca}"
    )
}

fn message(p: &Value, type_: &str) -> String {
    condition(p, type_)
        .and_then(|c| c.get("message"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn installs_from_a_private_https_repository() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    let (server, certs) = mirror(&cluster.dir().join("https-repo"))?;
    let url = format!("https://127.0.0.1:{}/capi/core", server.port);
    let ca = std::fs::read_to_string(certs.join("ca.crt"))?;

    let operator = start_operator(cluster, &["--config-retry-seconds", "2"])?;
    let log = |e: Box<dyn std::error::Error>| -> Box<dyn std::error::Error> {
        format!("{e}\n--- operator log ---\n{}", operator.logs()).into()
    };

    // (kind, namespace/name, URL, password, CA bundle given, condition reached, what it says)
    let pinned = format!("{url}/v0.1.0/core-components.yaml");
    let cases = [
        // No version: the newest the listing names.
        (
            "CoreProvider",
            "https-core",
            &url,
            "s3cret-pass",
            true,
            ("Ready", "True", None),
            "v0.2.0",
        ),
        (
            "BootstrapProvider",
            "https-pinned",
            &pinned,
            "s3cret-pass",
            true,
            ("ProviderInstalled", "True", None),
            "v0.1.0",
        ),
        // Wrong password: refused, and said so (the password is not).
        (
            "ControlPlaneProvider",
            "https-denied",
            &url,
            "wrong-pass",
            true,
            ("Stalled", "True", Some("ComponentsFetchError")),
            "denied",
        ),
        // No CA bundle: the certificate is not trusted, and the message says what fixes it.
        (
            "InfrastructureProvider",
            "https-untrusted",
            &url,
            "s3cret-pass",
            false,
            ("Stalled", "True", Some("ComponentsFetchError")),
            "HTTP_CA_BUNDLE",
        ),
    ];
    for (kind, ns, url, password, with_ca, (type_, status, reason), says) in cases {
        cluster.ensure_namespace(ns)?;
        let ca = with_ca.then_some(ca.as_str());
        apply(cluster, &secret(ns, "mirror", "mirror", password, ca))?;
        apply(cluster, &provider(kind, ns, "sample", url, "mirror"))?;
        let p = wait_condition(&client, (kind, ns, "sample"), type_, status, reason, T)
            .await
            .map_err(log)?;
        let shown = format!(
            "{} {}",
            p.pointer("/status/installedVersion")
                .unwrap_or(&Value::Null),
            message(&p, type_)
        );
        assert!(shown.contains(says), "{kind} {ns}: {shown}");
        assert!(
            !shown.contains("wrong-pass") && !shown.contains("s3cret"),
            "{shown}"
        );
    }
    // The same server, trusted through the operator's own bundle instead of the Secret's.
    drop(operator);
    site_ca_bundle(cluster, &client, &certs, &pinned).await?;
    drop(server);
    Ok(())
}

/// One CA for the whole site (`--ca-bundle`, a file the chart mounts from a ConfigMap): a
/// provider whose Secret gives only credentials is installed from the private-CA server at
/// `url`, and an operator given an empty bundle refuses to start instead of ignoring it.
async fn site_ca_bundle(
    cluster: &capi_test_support::TestCluster,
    client: &kube::Client,
    certs: &Path,
    url: &str,
) -> TestResult {
    let empty = certs.join("empty.pem");
    std::fs::write(&empty, "# no certificate\n")?;
    let refused = Command::new(operator_bin())
        .args(["run", "--ca-bundle"])
        .arg(&empty)
        .env("KUBECONFIG", cluster.kubeconfig())
        .output()?;
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("holds no certificate"),
        "an empty --ca-bundle must stop the start: {said}"
    );

    let bundle = certs.join("ca.crt").to_string_lossy().into_owned();
    let operator = start_operator(cluster, &["--ca-bundle", &bundle])?;
    let ns = "https-site-ca";
    cluster.ensure_namespace(ns)?;
    apply(
        cluster,
        &secret(ns, "mirror", "mirror", "s3cret-pass", None),
    )?;
    apply(
        cluster,
        &provider("BootstrapProvider", ns, "site-ca", url, "mirror"),
    )?;
    let installed = ("BootstrapProvider", ns, "site-ca");
    let p = wait_condition(client, installed, "ProviderInstalled", "True", None, T)
        .await
        .map_err(|e| format!("{e}\n--- operator log ---\n{}", operator.logs()))?;
    assert_eq!(
        p.pointer("/status/installedVersion"),
        Some(&Value::from("v0.1.0"))
    );
    Ok(())
}
