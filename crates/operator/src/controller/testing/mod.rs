//! Test-only parts of the controller: the mocked API server the fast tier runs against, the
//! scenarios walked through it, and the seeded fault-injection tier.

pub mod fake_api;
mod faults;
mod scenarios;
