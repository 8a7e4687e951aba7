//! `flowmesh-bench opshape [--ops N] [--flows-per-op K] [--rounds R]`: what one small change
//! costs Open vSwitch by the shape of the messages that carry it, measured on one real bridge
//! (its own `ovs-vswitchd`) through flowmesh's session:
//!
//! * **bundle**: what the reconciler sends for every change: an ONF bundle (OPEN, K
//!   BUNDLE_ADDs, prepare BARRIER, then COMMIT and BARRIER), awaited until its last reply;
//! * **batch**: the same K FLOW_MODs as plain messages closed by one BARRIER (not atomic: the
//!   shape the reconciler does not use, for the comparison).
//!
//! Each operation adds K flows or deletes the K flows the previous one added (strict), so the
//! table stays small and steady; the operations of a round go one after the other (each
//! awaited). Rounds alternate the shapes. Reported per operation: ovs-vswitchd's CPU (from
//! /proc, user + system) and wall time, and this process's CPU (the session side). Final
//! line: `key=value`.

use std::time::Instant;

use ofproto::message::Message;
use ofproto::session::{Listener, SessionConfig, SwitchHandle};
use ofproto::FlowMod;

use super::flows::overlay_flows;
use super::push::first_ready;
use super::{arg_value, cpu_secs, median};
use crate::sandbox::{BridgeSpec, OvsSandbox};

const BRIDGE: &str = "br0";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    Bundle,
    Batch,
}

/// Runs the benchmark; prints figures and the closing `key=value` line.
pub fn main(args: &[String]) -> Result<(), String> {
    let ops: u32 = arg_value(args, "--ops", 2_000)?;
    let k: u32 = arg_value(args, "--flows-per-op", 8)?;
    let rounds: usize = arg_value(args, "--rounds", 3)?;
    if ops < 2 || k == 0 || rounds == 0 {
        return Err("--ops must be at least 2, --flows-per-op and --rounds at least 1".into());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let (listener, mut events) = rt
        .block_on(Listener::bind(
            "127.0.0.1:0".parse().map_err(|e| format!("{e}"))?,
            None,
            SessionConfig::default(),
        ))
        .map_err(|e| format!("bind: {e}"))?;
    let sbx = OvsSandbox::builder()
        .bridge(BridgeSpec::new(BRIDGE, 1))
        .controller(listener.target())
        .start()
        .map_err(|e| format!("sandbox: {e}"))?;
    let vswitchd = sbx
        .vswitchd_pid()
        .ok_or("the sandbox has no ovs-vswitchd pid")?;
    let handle = rt.block_on(first_ready(&mut events))?;
    let flows = overlay_flows(k);
    let adds: Vec<Message> = flows
        .iter()
        .map(|f| Message::FlowMod(FlowMod::add(f.clone())))
        .collect();
    let dels: Vec<Message> = flows
        .iter()
        .map(|f| Message::FlowMod(FlowMod::delete_strict(f.clone())))
        .collect();
    // Warm-up, not judged.
    rt.block_on(run(&handle, Shape::Bundle, 200, &adds, &dels))?;
    rt.block_on(run(&handle, Shape::Batch, 200, &adds, &dels))?;
    let me = std::process::id();
    let mut res: Vec<(Shape, f64, f64, f64)> = Vec::new();
    for round in 0..rounds {
        for shape in [Shape::Bundle, Shape::Batch] {
            let (o0, m0) = (cpu_secs(vswitchd), cpu_secs(me));
            let wall = rt.block_on(run(&handle, shape, ops, &adds, &dels))?;
            let (o1, m1) = (cpu_secs(vswitchd), cpu_secs(me));
            let per = |a: Option<f64>, b: Option<f64>| {
                a.zip(b)
                    .map_or(f64::NAN, |(a, b)| (b - a) * 1e6 / f64::from(ops))
            };
            let (ovs_us, me_us) = (per(o0, o1), per(m0, m1));
            let wall_us = wall * 1e6 / f64::from(ops);
            println!(
                "round {}: {shape:?}: {ops} ops of {k} flow-mods: ovs-vswitchd {ovs_us:.0} us CPU per op, wall {wall_us:.0} us per op, session side {me_us:.0} us CPU per op",
                round + 1
            );
            res.push((shape, ovs_us, wall_us, me_us));
        }
    }
    let med = |s: Shape, f: fn(&(Shape, f64, f64, f64)) -> f64| {
        median(&res.iter().filter(|r| r.0 == s).map(f).collect::<Vec<_>>())
    };
    let (b_ovs, b_wall, b_me) = (
        med(Shape::Bundle, |r| r.1),
        med(Shape::Bundle, |r| r.2),
        med(Shape::Bundle, |r| r.3),
    );
    let (p_ovs, p_wall, p_me) = (
        med(Shape::Batch, |r| r.1),
        med(Shape::Batch, |r| r.2),
        med(Shape::Batch, |r| r.3),
    );
    println!(
        "ops={ops} flows_per_op={k} rounds={rounds} bundle_vswitchd_us_per_op={b_ovs:.0} batch_vswitchd_us_per_op={p_ovs:.0} bundle_wall_us_per_op={b_wall:.0} batch_wall_us_per_op={p_wall:.0} bundle_session_us_per_op={b_me:.0} batch_session_us_per_op={p_me:.0} vswitchd_ratio_bundle_vs_batch={:.2}",
        b_ovs / p_ovs
    );
    drop(listener);
    Ok(())
}

/// `ops` operations of one shape, one after the other (adds, then deletes of the same flows,
/// alternately); the wall time. The table is checked empty afterwards (`ops` is even) or
/// holding the K flows (odd).
async fn run(
    handle: &SwitchHandle,
    shape: Shape,
    ops: u32,
    adds: &[Message],
    dels: &[Message],
) -> Result<f64, String> {
    let t = Instant::now();
    for i in 0..ops {
        let msgs = if i % 2 == 0 { adds } else { dels }.to_vec();
        match shape {
            Shape::Bundle => handle
                .send_bundle(msgs)
                .await
                .map_err(|e| format!("bundle {i}: {e}"))?,
            Shape::Batch => handle
                .send_batch(msgs)
                .await
                .map_err(|e| format!("batch {i}: {e}"))?,
        }
    }
    let wall = t.elapsed().as_secs_f64();
    if ops % 2 == 1 {
        // Leave the table empty for the next round.
        handle
            .send_batch(dels.to_vec())
            .await
            .map_err(|e| format!("clearing: {e}"))?;
    }
    Ok(wall)
}
