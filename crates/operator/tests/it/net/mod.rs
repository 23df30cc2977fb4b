//! Tests whose subject is fetching from local servers: registries, fake GitHub/GitLab, HTTPS repositories.

mod huge_listing;
mod install_github;
mod install_https_repo;
mod install_oci;
mod user_agent;
