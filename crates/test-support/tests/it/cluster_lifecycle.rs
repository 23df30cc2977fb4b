//! `cluster-up.sh` / `cluster-down.sh` on a private cluster: up is idempotent, the API answers
//! /readyz through kubectl, and down leaves no process and no listening port behind.

use std::{net::TcpStream, path::PathBuf, process::Command, time::Duration};

use capi_test_support::workspace_root;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn script(name: &str) -> PathBuf {
    workspace_root().join("e2e/scripts").join(name)
}

fn run(cmd: &mut Command) -> Result<String, Box<dyn std::error::Error>> {
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
fn up_is_idempotent_and_down_leaves_nothing() -> TestResult {
    let dir = std::env::temp_dir().join(format!("capi-lifecycle-{}", std::process::id()));
    let kubeconfig = run(Command::new(script("cluster-up.sh")).arg("--dir").arg(&dir))?;
    let again = run(Command::new(script("cluster-up.sh")).arg("--dir").arg(&dir))?;
    assert_eq!(
        kubeconfig, again,
        "a second cluster-up must reuse the running cluster"
    );

    let kubectl = dir.join("kubectl");
    let readyz =
        run(Command::new(&kubectl).args(["--kubeconfig", &kubeconfig, "get", "--raw", "/readyz"]))?;
    assert_eq!(readyz, "ok");

    let ports_env = std::fs::read_to_string(dir.join("ports.env"))?;
    let ports: Vec<u16> = ports_env
        .lines()
        .filter_map(|l| l.split_once('=').and_then(|(_, v)| v.parse().ok()))
        .collect();
    assert_eq!(ports.len(), 4);
    let mut pids = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "pid") {
            pids.push(std::fs::read_to_string(&path)?.trim().to_string());
        }
    }
    assert_eq!(
        pids.len(),
        5,
        "etcd, apiserver, controller-manager, scheduler, kwok"
    );
    let api_port = ports[2];
    assert!(
        TcpStream::connect(("127.0.0.1", api_port)).is_ok(),
        "apiserver port not listening"
    );

    run(Command::new(script("cluster-down.sh"))
        .arg("--dir")
        .arg(&dir))?;
    run(Command::new(script("cluster-down.sh"))
        .arg("--dir")
        .arg(&dir))?;
    assert!(!dir.exists(), "state directory left behind");
    for pid in &pids {
        assert!(
            !PathBuf::from(format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .map(|s| s.contains(") Z "))
                    .unwrap_or(true),
            "process {pid} still running"
        );
    }
    for port in ports {
        let open = TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            Duration::from_millis(300),
        )
        .is_ok();
        assert!(!open, "port {port} still listening");
    }
    Ok(())
}
