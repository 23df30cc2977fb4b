//! Tests that run real provider managers (or the agent itself) on the process node: they need root
//! and the agent binary (`make process-node`), and say SKIPPED otherwise.

mod process_node;
