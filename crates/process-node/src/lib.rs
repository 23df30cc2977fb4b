//! A node agent for the local control plane: it registers a Node and runs the Pods scheduled
//! to it as local processes, each in its own network and mount namespace, the way a kubelet
//! would run containers. Images map to local binaries through an images file.

pub mod agent;
pub mod container;
pub mod env;
pub mod error;
pub mod events;
pub mod expand;
pub mod fields;
pub mod forward;
pub mod images;
pub mod net;
pub mod node;
pub mod pod;
pub mod probe;
pub mod trampoline;
pub mod volumes;
