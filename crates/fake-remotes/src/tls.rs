//! TLS in front of a fake server: a private CA and a certificate for 127.0.0.1 it signed, made
//! with the openssl command line, and a listener that terminates TLS and passes the bytes on to
//! the plain-HTTP fake (which records each request). Clients trust the CA through what they are
//! given ([`TlsFront::ca`]), as a real private GitHub Enterprise or mirror is trusted.

use std::{
    io,
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
};

use tokio::{net::TcpListener, task::JoinHandle};
use tokio_rustls::{
    TlsAcceptor,
    rustls::{
        ServerConfig,
        pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    },
};

/// A running TLS front; stops when dropped, and removes its certificates.
pub struct TlsFront {
    port: u16,
    ca: String,
    dir: PathBuf,
    task: JoinHandle<()>,
}

impl TlsFront {
    /// Starts a TLS front on an ephemeral 127.0.0.1 port for `backend` (`host:port`).
    pub async fn start(backend: &str) -> io::Result<TlsFront> {
        let dir = std::env::temp_dir().join(format!(
            "capi-tls-front-{}-{}",
            std::process::id(),
            backend.replace([':', '.'], "-")
        ));
        std::fs::create_dir_all(&dir)?;
        let ca = certificates(&dir)?;
        let acceptor = acceptor(&dir)?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let backend = backend.to_string();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, backend) = (acceptor.clone(), backend.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    if let Ok(mut plain) = tokio::net::TcpStream::connect(&backend).await {
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                    }
                });
            }
        });
        Ok(TlsFront {
            port,
            ca,
            dir,
            task,
        })
    }

    /// The port it listens on (https://127.0.0.1:PORT).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The private CA's certificate (PEM) the front's certificate chains to.
    pub fn ca(&self) -> &str {
        &self.ca
    }

    /// Where the CA's certificate is, as a file (for a client that takes a path).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn acceptor(dir: &Path) -> io::Result<TlsAcceptor> {
    let invalid =
        |e: &dyn std::fmt::Display| io::Error::new(io::ErrorKind::InvalidData, e.to_string());
    let certs = CertificateDer::pem_file_iter(dir.join("tls.crt"))
        .map_err(|e| invalid(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(&e))?;
    let key = PrivateKeyDer::from_pem_file(dir.join("tls.key")).map_err(|e| invalid(&e))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(&e))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| invalid(&e))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn openssl(args: &[&str], dir: &Path) -> io::Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

/// A private CA (PEM, returned) and a certificate for 127.0.0.1 it signed, with its key, in
/// `dir`.
fn certificates(dir: &Path) -> io::Result<String> {
    openssl(
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-subj",
            "/CN=fake-remotes-ca",
        ],
        dir,
    )?;
    openssl(
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "tls.key",
            "-out",
            "tls.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
        dir,
    )?;
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )?;
    openssl(
        &[
            "x509",
            "-req",
            "-days",
            "2",
            "-set_serial",
            "2",
            "-in",
            "tls.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-extfile",
            "ext.cnf",
            "-out",
            "tls.crt",
        ],
        dir,
    )?;
    std::fs::read_to_string(dir.join("ca.crt"))
}
