//! cargo-fuzz target for one CNI invocation of `flowmesh-cni`: the environment (`KEY=VALUE`
//! lines before the first NUL byte) and the network configuration on stdin (the rest), through
//! the plugin's whole path: `cargo fuzz run fuzz_cni`. The socket is pinned to a path that does
//! not exist, so nothing is ever sent anywhere.
//!
//! No input may panic; the plugin always answers with JSON on stdout or an exit code.
#![no_main]

use std::collections::BTreeMap;

use agent_shim::cni::{CniEnv, NetConf};
use libfuzzer_sys::fuzz_target;

const NO_SOCKET: &str = "/nonexistent/flowmesh-fuzz/cni.sock";

fuzz_target!(|data: &[u8]| {
    let (env_part, stdin) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for line in String::from_utf8_lossy(env_part).lines() {
        if let Some((k, v)) = line.split_once('=') {
            env.insert(k.to_string(), v.to_string());
        }
    }
    env.insert("FLOWMESH_CNI_SOCKET".into(), NO_SOCKET.into());
    let get = |k: &str| env.get(k).cloned();
    let _ = CniEnv::from_lookup(get);
    if let Ok(conf) = NetConf::parse(stdin) {
        if let Ok(e) = CniEnv::from_lookup(get) {
            let _ = conf.check_command(e.command);
        }
    }
    let out = agent_shim::plugin::run(get, stdin);
    if out.exit_code != 0 {
        assert!(out.stdout.is_some(), "a failure prints a CNI error");
    }
});
