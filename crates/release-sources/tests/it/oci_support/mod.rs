//! Helpers for the OCI source tests: a real registry (Debian's `docker-registry`, distribution
//! v2.8) per test, a tiny HTTP server to inject failures, and a token service for the registry's
//! bearer-token authentication.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::{
    fs,
    io::Write as _,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicU32, AtomicUsize, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use base64::Engine;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};

/// Environment variable overriding the registry binary's path.
pub const REGISTRY_BIN_ENV: &str = "CAPI_DOCKER_REGISTRY";

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A directory removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let p =
            std::env::temp_dir().join(format!("capi-oci-test-{label}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The registry binary; a missing one fails the test (it must not pass silently).
pub fn registry_binary() -> PathBuf {
    let p = std::env::var_os(REGISTRY_BIN_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/docker-registry"));
    assert!(
        p.is_file(),
        "{} is missing: the OCI source tests run a real registry from Debian's docker-registry \
         package (distribution v2.8); run `make deps` to install it (or set {REGISTRY_BIN_ENV})",
        p.display()
    );
    p
}

/// How the registry authenticates clients.
pub enum Auth {
    /// Everyone may pull and push.
    Anonymous,
    /// Basic authentication against an htpasswd file (bcrypt entries, the only kind
    /// distribution accepts).
    Htpasswd { user: String, password: String },
    /// Bearer tokens from a token service, signed by the key of `root_cert`.
    Token {
        realm: String,
        service: String,
        issuer: String,
        root_cert: PathBuf,
    },
}

/// Serving certificate and key for a TLS registry.
pub struct TlsFiles {
    pub ca_cert: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A private CA and a serving certificate for 127.0.0.1 signed by it (rustls refuses a CA
/// certificate used directly as a server certificate).
pub fn make_tls(dir: &Path) -> TlsFiles {
    let f = |n: &str| dir.join(n);
    run(Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .arg("-keyout")
        .arg(f("ca.key"))
        .arg("-out")
        .arg(f("ca.crt"))
        .args(["-subj", "/CN=capi-oci-test-ca"]));
    run(Command::new("openssl")
        .args(["req", "-newkey", "rsa:2048", "-nodes"])
        .arg("-keyout")
        .arg(f("tls.key"))
        .arg("-out")
        .arg(f("tls.csr"))
        .args(["-subj", "/CN=127.0.0.1"]));
    fs::write(
        f("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run(Command::new("openssl")
        .args(["x509", "-req", "-days", "2", "-set_serial", "2"])
        .arg("-in")
        .arg(f("tls.csr"))
        .arg("-CA")
        .arg(f("ca.crt"))
        .arg("-CAkey")
        .arg(f("ca.key"))
        .arg("-extfile")
        .arg(f("ext.cnf"))
        .arg("-out")
        .arg(f("tls.crt")));
    TlsFiles {
        ca_cert: f("ca.crt"),
        cert: f("tls.crt"),
        key: f("tls.key"),
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running registry, killed on drop.
pub struct TestRegistry {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub host: String,
    /// Whether it speaks HTTPS.
    pub tls: bool,
    log: PathBuf,
    _dir: Option<TempDir>,
}

impl TestRegistry {
    /// Starts a registry with filesystem storage in a fresh temporary directory, listening on
    /// 127.0.0.1 on a free port, and waits until `/v2/` answers.
    pub async fn start(auth: Auth, tls: Option<&TlsFiles>) -> TestRegistry {
        let bin = registry_binary();
        let dir = TempDir::new("registry");
        let auth_yaml = match &auth {
            Auth::Anonymous => String::new(),
            Auth::Htpasswd { user, password } => {
                let hash = bcrypt::hash(password, 4).unwrap();
                let file = dir.path().join("htpasswd");
                fs::write(&file, format!("{user}:{hash}\n")).unwrap();
                format!(
                    "auth:\n  htpasswd:\n    realm: capi-test\n    path: {}\n",
                    file.display()
                )
            }
            Auth::Token {
                realm,
                service,
                issuer,
                root_cert,
            } => format!(
                "auth:\n  token:\n    realm: {realm}\n    service: {service}\n    issuer: {issuer}\n    rootcertbundle: {}\n",
                root_cert.display()
            ),
        };
        let tls_yaml = tls
            .map(|t| {
                format!(
                    "  tls:\n    certificate: {}\n    key: {}\n",
                    t.cert.display(),
                    t.key.display()
                )
            })
            .unwrap_or_default();
        // A port picked here may be taken before the registry binds it; try a few.
        for _ in 0..5 {
            let port = free_port();
            let host = format!("127.0.0.1:{port}");
            let config = dir.path().join("config.yml");
            fs::write(
                &config,
                format!(
                    "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {host}\n  secret: capi-oci-test\n{tls_yaml}{auth_yaml}",
                    dir.path().join("data").display()
                ),
            )
            .unwrap();
            let log = dir.path().join(format!("registry-{port}.log"));
            let out = fs::File::create(&log).unwrap();
            let child = Command::new(&bin)
                .arg("serve")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
            let mut reg = TestRegistry {
                child,
                host,
                tls: tls.is_some(),
                log,
                _dir: None,
            };
            match reg.wait_ready().await {
                Ok(()) => {
                    reg._dir = Some(dir);
                    return reg;
                }
                Err(log) if log.contains("address already in use") => {}
                Err(log) => panic!("the registry did not start:\n{log}"),
            }
        }
        panic!("no free port for the registry");
    }

    async fn wait_ready(&mut self) -> Result<(), String> {
        let probe = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let url = format!("{}/v2/", self.base_url());
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return Err(self.log());
            }
            // Any HTTP answer (200 or 401) means it serves.
            if probe.get(&url).send().await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = self.child.kill();
        Err(format!("timed out waiting for {url}\n{}", self.log()))
    }

    /// `http://HOST` or `https://HOST`.
    pub fn base_url(&self) -> String {
        format!(
            "{}://{}",
            if self.tls { "https" } else { "http" },
            self.host
        )
    }

    /// A reference string for `repo_and_tag` on this registry (`http://` when plain HTTP).
    pub fn reference(&self, repo_and_tag: &str) -> String {
        if self.tls {
            format!("{}/{repo_and_tag}", self.host)
        } else {
            format!("http://{}/{repo_and_tag}", self.host)
        }
    }

    /// What the registry logged.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// -------------------------------------------------------------------------------------------
// A tiny HTTP/1.1 server (one request per connection)

/// A request as the handler sees it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// Path and query.
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }

    pub fn query(&self, key: &str) -> Vec<String> {
        reqwest::Url::parse(&format!("http://x{}", self.target))
            .map(|u| {
                u.query_pairs()
                    .filter(|(k, _)| k == key)
                    .map(|(_, v)| v.into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// An answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub fn json(status: u16, value: &serde_json::Value) -> Reply {
        Reply::status(status)
            .header("Content-Type", "application/json")
            .body(serde_json::to_vec(value).unwrap())
    }

    pub fn header(mut self, k: &str, v: &str) -> Reply {
        self.headers.push((k.into(), v.into()));
        self
    }

    pub fn body(mut self, b: impl Into<Vec<u8>>) -> Reply {
        self.body = b.into();
        self
    }
}

type Handler = Arc<dyn Fn(Request) -> Reply + Send + Sync>;

/// A local HTTP server answering with a handler; stops on drop.
pub struct TinyServer {
    pub url: String,
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl TinyServer {
    pub async fn start(handler: impl Fn(Request) -> Reply + Send + Sync + 'static) -> TinyServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let handler: Handler = Arc::new(handler);
        let task = tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let handler = handler.clone();
                tokio::spawn(async move {
                    let Some(req) = read_request(&mut sock).await else {
                        return;
                    };
                    let head_only = req.method == "HEAD";
                    // Handlers may run commands (token signing); keep them off the runtime.
                    let Ok(reply) = tokio::task::spawn_blocking(move || handler(req)).await else {
                        return;
                    };
                    let mut out = format!("HTTP/1.1 {} X\r\n", reply.status);
                    for (k, v) in &reply.headers {
                        out.push_str(&format!("{k}: {v}\r\n"));
                    }
                    out.push_str(&format!(
                        "Content-Length: {}\r\nConnection: close\r\n\r\n",
                        reply.body.len()
                    ));
                    let mut bytes = out.into_bytes();
                    if !head_only {
                        bytes.extend_from_slice(&reply.body);
                    }
                    let _ = sock.write_all(&bytes).await;
                    let _ = sock.shutdown().await;
                });
            }
        });
        TinyServer {
            url: format!("http://{addr}"),
            addr,
            task,
        }
    }
}

impl Drop for TinyServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn read_request(sock: &mut tokio::net::TcpStream) -> Option<Request> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > 1 << 20 {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_string();
    let target = first.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Request {
        method,
        target,
        headers,
        body,
    })
}

// -------------------------------------------------------------------------------------------
// A token service for distribution's `auth: token`

/// Issues RS256 JWTs the registry trusts (the signing certificate is the registry's root
/// bundle, and travels in the token's `x5c` header). Authenticated users get what they ask
/// for; anonymous ones get a token granting nothing; a wrong password gets 401.
pub struct TokenService {
    pub server: TinyServer,
    pub cert: PathBuf,
    /// Tokens issued so far.
    pub issued: Arc<AtomicUsize>,
    pub service: String,
    pub issuer: String,
    /// The refresh token the service accepts in an OAuth2 refresh grant.
    pub refresh_token: String,
}

fn b64url(data: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data)
}

impl TokenService {
    pub async fn start(dir: &Path, user: &str, password: &str) -> TokenService {
        let key = dir.join("token.key");
        let cert = dir.join("token.crt");
        run(Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            ])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .args(["-subj", "/CN=capi-oci-test-token-issuer"]));
        let pem = fs::read_to_string(&cert).unwrap();
        // x5c holds the DER certificate in standard base64: the PEM body without line breaks.
        let x5c: String = pem
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect::<Vec<_>>()
            .concat();
        let issued = Arc::new(AtomicUsize::new(0));
        let (service, issuer) = (
            "capi-test-registry".to_string(),
            "capi-test-issuer".to_string(),
        );
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        );
        let refresh_token = format!("refresh-{password}");
        let refresh = refresh_token.clone();
        let counter = issued.clone();
        let (svc, iss) = (service.clone(), issuer.clone());
        let server = TinyServer::start(move |req: Request| {
            if req.path() != "/token" {
                return Reply::status(404);
            }
            // GET with Basic credentials (Docker's flow), or POST of an OAuth2 refresh grant.
            let (subject, scopes) = if req.method == "POST" {
                let form = Request {
                    target: format!("/?{}", String::from_utf8_lossy(&req.body)),
                    ..req.clone()
                };
                let grant = form.query("grant_type");
                if grant != ["refresh_token"] || form.query("refresh_token") != [refresh.clone()] {
                    return Reply::status(401);
                }
                let scopes: Vec<String> = form
                    .query("scope")
                    .iter()
                    .flat_map(|s| s.split_whitespace().map(str::to_string))
                    .collect();
                (Some("user"), scopes)
            } else {
                match req.header("authorization") {
                    Some(a) if a == expected => (Some("user"), req.query("scope")),
                    Some(_) => return Reply::status(401),
                    None => (None, Vec::new()),
                }
            };
            let mut access = Vec::new();
            if subject.is_some() {
                for scope in scopes {
                    // repository:NAME:ACTIONS
                    let mut parts = scope.splitn(2, ':');
                    let (Some(kind), Some(rest)) = (parts.next(), parts.next()) else {
                        continue;
                    };
                    let Some((name, actions)) = rest.rsplit_once(':') else {
                        continue;
                    };
                    access.push(serde_json::json!({
                        "type": kind, "name": name, "actions": actions.split(',').collect::<Vec<_>>()
                    }));
                }
            }
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs();
            let header = serde_json::json!({"typ": "JWT", "alg": "RS256", "x5c": [x5c]});
            let claims = serde_json::json!({
                "iss": iss, "sub": subject.unwrap_or(""), "aud": svc,
                "exp": now + 300, "nbf": now - 10, "iat": now - 10,
                "jti": format!("t{}", counter.fetch_add(1, Ordering::SeqCst)),
                "access": access,
            });
            let input = format!(
                "{}.{}",
                b64url(&serde_json::to_vec(&header).unwrap()),
                b64url(&serde_json::to_vec(&claims).unwrap())
            );
            let mut child = Command::new("openssl")
                .args(["dgst", "-sha256", "-sign"])
                .arg(&key)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "openssl dgst -sign failed");
            let token = format!("{input}.{}", b64url(&out.stdout));
            Reply::json(
                200,
                &serde_json::json!({"token": token, "access_token": token, "expires_in": 300}),
            )
        })
        .await;
        TokenService {
            server,
            cert,
            issued,
            service,
            issuer,
            refresh_token,
        }
    }

    /// The registry configuration trusting this service.
    pub fn registry_auth(&self) -> Auth {
        Auth::Token {
            realm: format!("{}/token", self.server.url),
            service: self.service.clone(),
            issuer: self.issuer.clone(),
            root_cert: self.cert.clone(),
        }
    }
}
