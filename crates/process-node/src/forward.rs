//! Makes the host's kube-apiserver (bound to the host's 127.0.0.1 only) reachable at 127.0.0.1
//! inside a pod's network namespace, by plain TCP forwarding; TLS stays end to end.

use std::{net::SocketAddr, path::Path};

use tokio::{net::TcpStream, task::JoinHandle};

use crate::error::{Error, Result, io, sys};

/// Binds 127.0.0.1:`port` inside the network namespace at `netns` and forwards each connection
/// to `target` in the agent's own namespace. Abort the handle to stop it.
pub async fn start(netns: &Path, port: u16, target: SocketAddr) -> Result<JoinHandle<()>> {
    let listener = bind_in_netns(netns.to_path_buf(), port).await?;
    Ok(tokio::spawn(async move {
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    }))
}

/// A socket keeps the namespace it was created in, so a short-lived thread enters the pod's
/// namespace (setns affects only the calling thread) just to create the listener.
async fn bind_in_netns(netns: std::path::PathBuf, port: u16) -> Result<tokio::net::TcpListener> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let result = (|| -> Result<std::net::TcpListener> {
            let f = std::fs::File::open(&netns).map_err(io(format!("{}", netns.display())))?;
            nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(sys("entering the pod network namespace"))?;
            let l = std::net::TcpListener::bind(("127.0.0.1", port))
                .map_err(io(format!("binding 127.0.0.1:{port} in the pod")))?;
            l.set_nonblocking(true).map_err(io("set_nonblocking"))?;
            Ok(l)
        })();
        let _ = tx.send(result);
    });
    let std_listener = rx
        .await
        .map_err(|_| Error::Network("the forwarder thread died".into()))??;
    tokio::net::TcpListener::from_std(std_listener).map_err(io("registering the forwarder"))
}
