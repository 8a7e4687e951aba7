//! TLS with mutual authentication against Open vSwitch `ssl:` controller targets: a switch
//! whose certificate our CA signed completes the handshake; one signed by another CA is
//! refused. Certificates are generated at test time.

mod session_support;

use std::path::Path;
use std::time::Duration;

use flowmesh_tests::{BridgeSpec, OvsSandbox};
use ofproto::session::{
    server_config, DisconnectCause, Listener, SessionConfig, SessionEvent, TlsPem,
};
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use session_support::{runtime, wait_for};

struct Ca {
    cert: Certificate,
    key: KeyPair,
}

fn ca(name: &str) -> Ca {
    let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate().expect("key");
    let cert = p.self_signed(&key).expect("self-signed CA");
    Ca { cert, key }
}

/// A leaf certificate signed by `ca`: (cert PEM, key PEM).
fn leaf(ca: &Ca, name: &str) -> (String, String) {
    let mut p = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("params");
    p.distinguished_name.push(DnType::CommonName, name);
    p.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let key = KeyPair::generate().expect("key");
    let cert = p.signed_by(&key, &ca.cert, &ca.key).expect("signed");
    (cert.pem(), key.serialize_pem())
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write pem");
    p.display().to_string()
}

/// A one-bridge sandbox whose switch presents `switch` and trusts `trusted_ca`.
fn ssl_switch(dpid: u64, switch: &(String, String), trusted_ca: &Ca, target: &str) -> OvsSandbox {
    let sbx = OvsSandbox::builder()
        .bridge(BridgeSpec::new("br0", dpid))
        .start()
        .expect("sandbox");
    let dir = sbx.run_dir().to_owned();
    let key = write(&dir, "switch-key.pem", &switch.1);
    let cert = write(&dir, "switch-cert.pem", &switch.0);
    let ca = write(&dir, "ca.pem", &trusted_ca.cert.pem());
    sbx.vsctl(&["set-ssl", &key, &cert, &ca]).expect("set-ssl");
    sbx.vsctl(&["set-controller", "br0", target])
        .expect("ssl controller");
    sbx.vsctl(&["set", "controller", "br0", "max_backoff=1000"])
        .ok();
    sbx
}

#[test]
fn tls_with_mutual_auth_accepts_our_ca_and_refuses_another() {
    let rt = runtime();
    let ours = ca("flowmesh test CA");
    let theirs = ca("some other CA");
    let (ctl_cert, ctl_key) = leaf(&ours, "flowmesh controller");
    let tls = server_config(&TlsPem {
        cert_chain: ctl_cert.into_bytes(),
        key: ctl_key.into_bytes(),
        client_ca: ours.cert.pem().into_bytes(),
    })
    .expect("server config");
    let (listener, mut events) = rt
        .block_on(Listener::bind(
            "127.0.0.1:0".parse().expect("addr"),
            Some(tls),
            SessionConfig::default(),
        ))
        .expect("bind");
    assert!(listener.target().starts_with("ssl:127.0.0.1:"));

    let good = leaf(&ours, "switch signed by our CA");
    let _good_sbx = ssl_switch(0x51, &good, &ours, &listener.target());
    let (h, info) = wait_for(&rt, &mut events, Duration::from_secs(20), |ev| match ev {
        SessionEvent::Ready { handle, info, .. } => Some((handle, info)),
        SessionEvent::Disconnected { cause, .. } => panic!("good switch refused: {cause}"),
        _ => None,
    })
    .expect("TLS switch ready");
    assert_eq!(info.dpid, 0x51);
    rt.block_on(h.barrier()).expect("barrier over TLS");

    // The switch trusts us, but its certificate comes from a CA we do not know.
    let rogue = leaf(&theirs, "switch signed by another CA");
    let _rogue_sbx = ssl_switch(0x52, &rogue, &ours, &listener.target());
    let cause = wait_for(&rt, &mut events, Duration::from_secs(20), |ev| match ev {
        SessionEvent::Ready { info, .. } if info.dpid == 0x52 => {
            panic!("a switch with a foreign certificate became ready")
        }
        SessionEvent::Disconnected {
            dpid: None, cause, ..
        } => Some(cause),
        _ => None,
    })
    .expect("the foreign switch is refused");
    match cause {
        DisconnectCause::Tls(text) => assert!(
            text.to_lowercase().contains("certificate"),
            "TLS refusal names the certificate: {text}"
        ),
        other => panic!("expected a TLS refusal, got {other}"),
    }
}

#[test]
fn a_check_refuses_a_certificate_of_our_ca_at_the_handshake() {
    let rt = runtime();
    let ours = ca("flowmesh test CA");
    let (ctl_cert, ctl_key) = leaf(&ours, "flowmesh controller");
    // The controller's check requires a node's subject; here: the CN must name one.
    let check: ofproto::session::ClientCheck = std::sync::Arc::new(|der: &[u8]| {
        if der.windows(12).any(|w| w == b"system:node:") {
            Ok(())
        } else {
            Err("the switch certificate names no node".into())
        }
    });
    let tls = ofproto::session::server_config_checked(
        &TlsPem {
            cert_chain: ctl_cert.into_bytes(),
            key: ctl_key.into_bytes(),
            client_ca: ours.cert.pem().into_bytes(),
        },
        Some(check),
    )
    .expect("server config");
    let (listener, mut events) = rt
        .block_on(Listener::bind(
            "127.0.0.1:0".parse().expect("addr"),
            Some(tls),
            SessionConfig::default(),
        ))
        .expect("bind");
    let nobody = leaf(&ours, "an admin, not a node");
    let _nobody_sbx = ssl_switch(0x61, &nobody, &ours, &listener.target());
    let cause = wait_for(&rt, &mut events, Duration::from_secs(20), |ev| match ev {
        SessionEvent::Ready { .. } => panic!("a certificate naming no node became ready"),
        SessionEvent::Disconnected {
            dpid: None, cause, ..
        } => Some(cause),
        _ => None,
    })
    .expect("refused at the handshake");
    match cause {
        DisconnectCause::Tls(text) => assert!(text.contains("names no node"), "{text}"),
        other => panic!("expected a TLS refusal, got {other}"),
    }
    let node = leaf(&ours, "system:node:n1");
    let _node_sbx = ssl_switch(0x62, &node, &ours, &listener.target());
    let info = wait_for(&rt, &mut events, Duration::from_secs(20), |ev| match ev {
        SessionEvent::Ready { info, .. } => Some(info),
        _ => None,
    })
    .expect("the node's switch is accepted");
    assert_eq!(info.dpid, 0x62);
}
