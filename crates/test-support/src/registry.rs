//! A real OCI registry for end-to-end tests: Debian's `docker-registry` (distribution),
//! plain HTTP on a free loopback port, storage in a temporary directory. The OCI source's own
//! tests (crates/components) need authentication and TLS and keep a richer helper.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

/// A registry child process, killed (and its storage removed) on drop.
pub struct PlainRegistry {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub host: String,
    dir: PathBuf,
}

impl Drop for PlainRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl PlainRegistry {
    /// Starts the registry (`CAPI_DOCKER_REGISTRY` or `/usr/bin/docker-registry`) and waits
    /// until it accepts connections.
    pub async fn start() -> Result<PlainRegistry, String> {
        let bin = std::env::var_os("CAPI_DOCKER_REGISTRY")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/usr/bin/docker-registry"));
        if !bin.exists() {
            return Err(format!(
                "{} is missing: install Debian's docker-registry package (e2e/scripts/deps.sh does)",
                bin.display()
            ));
        }
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("capi-registry-{}-{n}", std::process::id()));
        let io = |e: std::io::Error| format!("starting the registry: {e}");
        std::fs::create_dir_all(&dir).map_err(io)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(io)?
            .port();
        let host = format!("127.0.0.1:{port}");
        let config = dir.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {host}\n  secret: capi-test\n",
                dir.join("data").display()
            ),
        )
        .map_err(io)?;
        let log = std::fs::File::create(dir.join("registry.log")).map_err(io)?;
        let child = Command::new(&bin)
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(io)?)
            .stderr(log)
            .spawn()
            .map_err(io)?;
        let reg = PlainRegistry { child, host, dir };
        for _ in 0..100 {
            if std::net::TcpStream::connect(&reg.host).is_ok() {
                return Ok(reg);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!("the registry on {} did not start", reg.host))
    }
}
