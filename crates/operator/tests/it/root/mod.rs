//! Tests that need root but no node of their own (running the binary as the image runs it).

mod image;
