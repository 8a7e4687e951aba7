//! decode_instructions on arbitrary bytes: never panics; whatever decodes re-encodes to exactly
//! the input, decodes again to the same value, and formats.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ofproto::instruction::{decode_instructions, encode_instructions};
use ofproto::text::instructions::format_instructions;
use ofproto::wire::Reader;

fuzz_target!(|data: &[u8]| {
    if let Ok(insts) = decode_instructions(&mut Reader::new(data)) {
        let mut again = Vec::new();
        encode_instructions(&insts, &mut again);
        assert_eq!(again.as_slice(), data);
        assert_eq!(decode_instructions(&mut Reader::new(&again)).as_ref(), Ok(&insts));
        let _ = format_instructions(&insts);
    }
});
