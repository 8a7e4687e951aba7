//! The store-side fence the election sets and the etcd backend's writes compare.

use std::sync::{Arc, Mutex};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The store-side fence: while set, every etcd write also compares the leader key's mod
/// revision with the generation, so a deposed leader's writes fail.
#[derive(Clone, Debug, Default)]
pub struct Fence(Arc<Mutex<Option<(String, i64)>>>);

impl Fence {
    /// The comparison to add to a write, if any.
    pub fn current(&self) -> Option<(String, i64)> {
        lock(&self.0).clone()
    }
    /// Set or clear the comparison (the election does, as it wins and loses).
    pub fn set(&self, f: Option<(String, i64)>) {
        *lock(&self.0) = f;
    }
}
