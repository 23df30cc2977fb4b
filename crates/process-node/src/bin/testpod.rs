//! `capi-process-node-testpod`: a tiny program the process node's tests run as a "container".
//!
//! Flags: `--print-env`, `--cat PATH` (repeatable), `--list-pods` (in-cluster API call),
//! `--serve PORT` (HTTP: /readyz, /healthz, /set?ready=0|1, /set?healthy=0|1, /env,
//! /file?path=P, /api?path=P), `--exit CODE` (exit at once with CODE after the other actions).

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

#[derive(Default)]
struct Flags {
    ready: AtomicBool,
    healthy: AtomicBool,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut serve = None;
    let mut exit = None;
    let mut i = 0;
    while i < args.len() {
        let next = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--print-env" => {
                let mut vars: Vec<_> = std::env::vars().collect();
                vars.sort();
                vars.iter().for_each(|(k, v)| println!("ENV {k}={v}"));
            }
            "--cat" => {
                let content = std::fs::read_to_string(&next).unwrap_or_else(|e| format!("<{e}>"));
                println!("FILE {next}: {content}");
                i += 1;
            }
            "--list-pods" => {
                let ns = std::fs::read_to_string(format!("{SA_DIR}/namespace")).unwrap_or_default();
                let (code, _) = api_get(&format!("/api/v1/namespaces/{ns}/pods")).await;
                println!("LIST-PODS {code}");
            }
            "--serve" => {
                serve = next.parse::<u16>().ok();
                i += 1;
            }
            "--exit" => {
                exit = next.parse::<i32>().ok();
                i += 1;
            }
            other => println!("ARG {other}"),
        }
        i += 1;
    }
    if let Some(code) = exit {
        eprintln!("testpod: exiting with {code}");
        std::process::exit(code);
    }
    if let Some(port) = serve {
        serve_http(port).await;
    }
}

/// GET `path` from the API server with the in-cluster credentials: (status, body).
async fn api_get(path: &str) -> (u16, String) {
    let host = std::env::var("KUBERNETES_SERVICE_HOST").unwrap_or_default();
    let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_default();
    let token = std::fs::read_to_string(format!("{SA_DIR}/token")).unwrap_or_default();
    let ca = std::fs::read(format!("{SA_DIR}/ca.crt")).unwrap_or_default();
    let client = reqwest::Certificate::from_pem(&ca).and_then(|c| {
        reqwest::Client::builder()
            .add_root_certificate(c)
            .no_proxy()
            .build()
    });
    let client = match client {
        Ok(c) => c,
        Err(e) => return (0, format!("client: {e}")),
    };
    let url = format!("https://{host}:{port}{path}");
    match client.get(&url).bearer_auth(token.trim()).send().await {
        Ok(r) => {
            let code = r.status().as_u16();
            (code, r.text().await.unwrap_or_default())
        }
        Err(e) => (0, format!("GET {url}: {e:?}")),
    }
}

async fn serve_http(port: u16) {
    let flags = Arc::new(Flags::default());
    flags.ready.store(true, Ordering::SeqCst);
    flags.healthy.store(true, Ordering::SeqCst);
    let listener = match tokio::net::TcpListener::bind(("0.0.0.0", port)).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("testpod: binding port {port}: {e}");
            std::process::exit(3);
        }
    };
    println!("SERVING {port}");
    loop {
        let Ok((mut sock, _)) = listener.accept().await else {
            continue;
        };
        let flags = flags.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 8192];
            let n = sock.read(&mut buf).await.unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]).into_owned();
            let target = req.split_whitespace().nth(1).unwrap_or("/").to_string();
            let (code, body) = answer(&target, &flags).await;
            let resp = format!(
                "HTTP/1.1 {code} X\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = sock.write_all(resp.as_bytes()).await;
        });
    }
}

fn query(target: &str) -> (String, HashMap<String, String>) {
    let (path, q) = target.split_once('?').unwrap_or((target, ""));
    let params = q
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.replace("%2F", "/")))
        .collect();
    (path.to_string(), params)
}

async fn answer(target: &str, flags: &Flags) -> (u16, String) {
    let (path, params) = query(target);
    let flag = |f: &AtomicBool| {
        if f.load(Ordering::SeqCst) {
            (200, "ok".to_string())
        } else {
            (503, "failing".to_string())
        }
    };
    match path.as_str() {
        "/readyz" => flag(&flags.ready),
        "/healthz" => flag(&flags.healthy),
        "/set" => {
            if let Some(v) = params.get("ready") {
                flags.ready.store(v == "1", Ordering::SeqCst);
            }
            if let Some(v) = params.get("healthy") {
                flags.healthy.store(v == "1", Ordering::SeqCst);
            }
            (200, "set".into())
        }
        "/env" => {
            let mut vars: Vec<_> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
            vars.sort();
            (200, vars.join("\n"))
        }
        "/file" => {
            match std::fs::read_to_string(params.get("path").map(String::as_str).unwrap_or("")) {
                Ok(c) => (200, c),
                Err(e) => (404, e.to_string()),
            }
        }
        "/api" => {
            let (code, body) = api_get(params.get("path").map(String::as_str).unwrap_or("/")).await;
            (200, format!("{code}\n{body}"))
        }
        _ => (404, "not found".into()),
    }
}
