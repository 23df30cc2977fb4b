//! `capi-fake-github --dir DIR --listen ADDR --repo OWNER/REPO=LABEL[,LABEL...]...`: serves
//! releases in clusterctl's local-repository layout through GitHub's releases API, for the
//! demo and for manual tests. Prints the URL it listens on, then serves until killed.

use capi_test_support::fake_github::FakeGitHub;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut dir = None;
    let mut listen = "127.0.0.1:0".to_string();
    let mut repos: Vec<(String, Vec<String>)> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dir" => dir = args.next(),
            "--listen" => listen = args.next().ok_or("--listen needs a value")?,
            "--repo" => {
                let spec = args.next().ok_or("--repo needs OWNER/REPO=LABEL")?;
                let (repo, labels) = spec
                    .split_once('=')
                    .ok_or("--repo needs OWNER/REPO=LABEL")?;
                repos.push((
                    repo.to_string(),
                    labels.split(',').map(str::to_string).collect(),
                ));
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let dir = dir.ok_or("--dir is required")?;
    let label_refs: Vec<Vec<&str>> = repos
        .iter()
        .map(|(_, l)| l.iter().map(String::as_str).collect())
        .collect();
    let spec: Vec<(&str, &[&str])> = repos
        .iter()
        .zip(label_refs.iter())
        .map(|((r, _), l)| (r.as_str(), l.as_slice()))
        .collect();
    let server = FakeGitHub::start_on(std::path::Path::new(&dir), &spec, &listen).await?;
    println!("{}", server.url);
    std::future::pending::<()>().await;
    Ok(())
}
