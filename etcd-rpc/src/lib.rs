//! A small etcd v3 client: the KV, Watch and Lease calls flowmesh makes, over tonic, compiled
//! from `proto/etcd.proto` with protox (no system `protoc` at build time).
//!
//! Requests go to one member at a time (the *pinned* one, as etcd's own Go client does). A
//! request that fails in a way that proves it was not applied (the connection could not be
//! made, or the member has no raft leader) moves the pin to the next member and is sent again
//! there; reads and stream openings are also sent again after a broken connection. Every
//! unary request carries a deadline (`ConnectOptions::request_timeout`, also sent to etcd as
//! `grpc-timeout`); a request that misses it moves the pin too, so the next one tries another
//! member. Connections are watched with HTTP/2 keep-alive pings, so a member that stops
//! answering without closing its socket is found without waiting for TCP.

mod client;
mod ops;

/// The generated messages and clients (package `etcdserverpb`).
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("etcdserverpb");
}

pub use client::{Client, ConnectOptions, Error, LeaseKeepAliveStream, LeaseKeeper, WatchStream};
pub use ops::{
    prefix_end, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
pub use pb::event::EventType;
pub use pb::{Event, KeyValue};
