//! Tests that need root without the process node (e.g. running the binary as the image runs it).

mod image;
