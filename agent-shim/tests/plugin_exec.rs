//! flowmesh-cni executed as a process (no shim daemon, no Open vSwitch): VERSION, the error
//! JSON when the shim is down, and the socket protocol against a stand-in shim.

use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

fn run_cni(env: &[(&str, &str)], stdin: &str) -> (i32, Value) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_flowmesh-cni"))
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn flowmesh-cni");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    let out = child.wait_with_output().expect("wait");
    let text = String::from_utf8_lossy(&out.stdout);
    let v = if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(text.trim()).expect("stdout is JSON")
    };
    (out.status.code().unwrap_or(-1), v)
}

fn conf(socket: &Path) -> String {
    json!({"cniVersion": "1.0.0", "name": "fm", "type": "flowmesh-cni", "socket": socket})
        .to_string()
}

const ADD_ENV: [(&str, &str); 6] = [
    ("CNI_COMMAND", "ADD"),
    ("CNI_CONTAINERID", "c1"),
    ("CNI_NETNS", "/var/run/netns/x"),
    ("CNI_IFNAME", "eth0"),
    ("CNI_PATH", "/opt/cni/bin"),
    ("CNI_ARGS", "K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web"),
];

#[test]
fn version_needs_no_shim() {
    let (code, v) = run_cni(&[("CNI_COMMAND", "VERSION")], "");
    assert_eq!(code, 0);
    assert_eq!(v["cniVersion"], "1.1.0");
    assert!(v["supportedVersions"]
        .as_array()
        .is_some_and(|a| a.contains(&json!("1.0.0"))));
}

#[test]
fn shim_down_is_try_again_later() {
    let dir = std::env::temp_dir().join(format!("fm-cni-test-{}", std::process::id()));
    let (code, v) = run_cni(&ADD_ENV, &conf(&dir.join("missing.sock")));
    assert_eq!(code, 1);
    assert_eq!(v["code"], 11);
    assert_eq!(v["cniVersion"], "1.0.0");
    assert!(v["details"]
        .as_str()
        .is_some_and(|d| d.contains("missing.sock")));
}

#[test]
fn requests_and_responses_follow_the_socket_protocol() {
    let dir = std::env::temp_dir().join(format!("fm-cni-proto-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let sock = dir.join("cni.sock");
    let _ = std::fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock).expect("bind");
    let server = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for reply in [
            json!({"status": "ok", "result": {"cniVersion": "1.0.0", "ips": []}}),
            json!({"status": "error", "code": 103, "msg": "refused", "details": "d"}),
        ] {
            let (mut conn, _) = listener.accept().expect("accept");
            let mut buf = Vec::new();
            conn.read_to_end(&mut buf).expect("read request to EOF");
            seen.push(serde_json::from_slice::<Value>(&buf).expect("request JSON"));
            conn.write_all(reply.to_string().as_bytes()).expect("reply");
        }
        seen
    });
    let (code, v) = run_cni(&ADD_ENV, &conf(&sock));
    assert_eq!((code, v), (0, json!({"cniVersion": "1.0.0", "ips": []})));
    let (code, v) = run_cni(&ADD_ENV, &conf(&sock));
    assert_eq!(code, 1);
    assert_eq!(
        v,
        json!({"cniVersion": "1.0.0", "code": 103, "msg": "refused", "details": "d"})
    );
    let seen = server.join().expect("server");
    assert_eq!(seen[0]["command"], "ADD");
    assert_eq!(seen[0]["containerId"], "c1");
    assert_eq!(seen[0]["netns"], "/var/run/netns/x");
    assert_eq!(seen[0]["ifname"], "eth0");
    assert_eq!(seen[0]["args"]["K8S_POD_NAME"], "web");
    assert_eq!(seen[0]["config"]["name"], "fm");
    let _ = std::fs::remove_dir_all(&dir);
}
