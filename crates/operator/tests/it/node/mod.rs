//! Tests that run real provider managers on a node of their own: they need root and the images
//! of `make images`, and fail, saying so, without them. They run on the real node (`cluster-up.sh --real-node`: containerd pulls the release
//! images of `make images`); `helm_chart` holds the chart-value checks `operator_image` runs.

mod credential_rotation;
mod current_releases;
mod handover_from_go_operator;
mod helm_chart;
mod image_pull;
mod large_releases;
mod move_workload;
mod operator_image;
mod real_providers;
mod workload_cluster;
