//! FLOW_MOD encode and decode of a realistic overlay flow (match in_port, ip, nw_dst, reg1;
//! actions move tun_id -> reg2, set_field eth_src, set_field reg3, dec_ttl, output).
//!
//! `cargo bench -p ofproto --bench flowmod` — criterion's throughput is messages/s.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ofproto::action::{Action, FieldSlice};
use ofproto::oxm::{Field, Match};
use ofproto::{decode_message, Flow, FlowMod, Message};
use std::hint::black_box;
use std::net::Ipv4Addr;

fn overlay_flow_mod() -> Message {
    let flow = Flow::new(
        20,
        100,
        Match::new()
            .in_port(3)
            .eth_type(0x0800)
            .reg(1, 0x64)
            .ipv4_dst(Ipv4Addr::new(10, 244, 0, 2), 32),
    )
    .cookie(0x3000)
    .apply(vec![
        Action::move_(
            FieldSlice::range(Field::TunnelId, 0, 32),
            FieldSlice::whole(Field::Reg(2)),
        ),
        Action::set_field(Field::EthSrc, &[0x0a, 0x58, 0, 0, 0, 1]),
        Action::set_field_u64(Field::Reg(3), 7),
        Action::DecTtl,
        Action::output(2),
    ]);
    Message::FlowMod(FlowMod::add(flow))
}

fn bench(c: &mut Criterion) {
    let msg = overlay_flow_mod();
    let bytes = msg.encode(1);
    // The decode loop must measure a successful decode of exactly this message.
    match decode_message(&bytes) {
        Ok((back, used)) => assert!(back == msg && used == bytes.len(), "round trip"),
        Err(e) => panic!("the benchmark FLOW_MOD does not decode: {e}"),
    }
    let mut g = c.benchmark_group("flow_mod");
    g.throughput(Throughput::Elements(1));
    g.bench_function("encode", |b| {
        let mut buf = Vec::with_capacity(256);
        b.iter(|| {
            buf.clear();
            black_box(&msg).encode_into(black_box(7), &mut buf);
            black_box(buf.len())
        })
    });
    g.bench_function("decode", |b| {
        b.iter(|| {
            let r = decode_message(black_box(&bytes));
            black_box(r.is_ok())
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
