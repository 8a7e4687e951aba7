//! flowmeshctl.
fn main() {}
