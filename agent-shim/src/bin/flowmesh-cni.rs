//! flowmesh-cni: the CNI plugin a container runtime executes. It forwards each ADD, DEL, CHECK,
//! STATUS and GC to flowmesh-shim over its unix socket and answers VERSION itself.

use std::io::{Read, Write};

fn main() {
    let mut stdin = Vec::new();
    // An unreadable stdin is reported like an empty configuration (decode failure).
    let _ = std::io::stdin()
        .take(agent_shim::protocol::MAX_MESSAGE)
        .read_to_end(&mut stdin);
    let outcome = agent_shim::plugin::run(|k| std::env::var(k).ok(), &stdin);
    if let Some(v) = outcome.stdout {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{v}");
        let _ = out.flush();
    }
    std::process::exit(outcome.exit_code);
}
