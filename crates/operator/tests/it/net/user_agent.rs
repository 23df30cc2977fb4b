//! The operator's Kubernetes API requests name it and its version in User-Agent: the operator
//! runs against a local HTTP server standing in for the API server, which records them.

use std::{process::Stdio, time::Duration};

use capi_fake_remotes::FakeServer;

type TestResult = Result<(), Box<dyn std::error::Error>>;

// Several threads: the plugin runs as a blocking child process while the server answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_requests_name_the_operator() -> TestResult {
    let dir = std::env::temp_dir().join(format!("capi-operator-agent-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // Answers 404 to everything: only the requests matter.
    let server = FakeServer::start(dir.clone(), &[]).await?;
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"{}\"}}\nusers:\n- name: u\n  user: {{token: t}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n",
            server.url()
        ),
    )?;
    let mut operator = tokio::process::Command::new(env!("CARGO_BIN_EXE_capi-provider-operator"))
        .arg("run")
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("POD_NAMESPACE")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while server.requests().is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    operator.kill().await?;
    let _ = std::fs::remove_dir_all(&dir);
    let requests = server.requests();
    assert!(!requests.is_empty(), "the operator sent no request");
    let want = format!("capi-provider-operator/{}", env!("CARGO_PKG_VERSION"));
    for req in requests {
        assert_eq!(req.user_agent.as_deref(), Some(want.as_str()), "{req:?}");
    }
    Ok(())
}
