//! flowmesh-shim: the node daemon. Registers the node with the controller, sets up br0, tun0,
//! routes and host NAT, and serves flowmesh-cni's requests on a unix socket.

use clap::Parser;

use agent_shim::daemon::{run, Args, LogFormat};

fn main() {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("flowmesh-shim: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = rt.block_on(run(args)) {
        tracing::error!(error = %e, "flowmesh-shim failed");
        std::process::exit(1);
    }
}
