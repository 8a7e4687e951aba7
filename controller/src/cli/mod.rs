//! flowmeshctl.
