//! cargo-fuzz target for the OpenFlow 1.3 message decoder: `cargo fuzz run fuzz_message`
//! (seed the corpus with `ofproto/tests/data/msg/*.hex`, converted to binary).
//!
//! No input may panic; an input that decodes must re-encode to bytes that decode to the same
//! value, and its text rendering must not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((header, msg, used)) = ofproto::decode_frame(data) {
        assert!(used <= data.len());
        let bytes = msg.encode(header.xid);
        let (_, again, _) = ofproto::decode_frame(&bytes).expect("re-encoded message decodes");
        assert_eq!(again, msg);
        assert_eq!(again.encode(header.xid), bytes);
        let _ = again.display(header.xid).to_string();
    }
    let mut framer = ofproto::Framer::new();
    framer.push(data);
    while let Ok(Some(_)) = framer.next_message() {}
});
