//! cargo-fuzz target for the shim's unix-socket protocol: what `flowmesh-shim` decodes from a
//! connection before it acts (the request, its network configuration, its command and the
//! names derived from it): `cargo fuzz run fuzz_shim_protocol`.
//!
//! No input may panic; a request that decodes re-encodes to JSON that decodes again, and the
//! error answer for it encodes.
#![no_main]

use agent_shim::cni::{code, CniError, NetConf};
use agent_shim::protocol::{ShimRequest, ShimResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let req = match serde_json::from_slice::<ShimRequest>(data) {
        Ok(r) => r,
        Err(e) => {
            let resp = ShimResponse::Error(CniError::new(
                code::DECODE,
                "malformed request",
                e.to_string(),
            ));
            serde_json::to_vec(&resp).expect("error responses encode");
            return;
        }
    };
    let bytes = serde_json::to_vec(&req).expect("requests encode");
    serde_json::from_slice::<ShimRequest>(&bytes).expect("re-encoded request decodes");
    if let Ok(conf) = NetConf::from_value(req.config.clone()) {
        let _ = conf.check_command(req.command);
    }
    if agent_shim::cni::valid_container_id(&req.container_id)
        && agent_shim::cni::valid_ifname(&req.ifname)
    {
        let name = agent_shim::pod::host_veth_name(&req.container_id, &req.ifname);
        assert!(name.len() <= 15, "host veth names fit IFNAMSIZ: {name}");
    }
    for v in req.args.values() {
        let _ = agent_shim::pod::parse_mac(v);
    }
});
