//! decode_actions on arbitrary bytes: never panics; whatever decodes re-encodes to exactly the
//! input, decodes again to the same value, and formats.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ofproto::action::{decode_actions, encode_actions};
use ofproto::text::actions::format_actions;
use ofproto::wire::Reader;

fuzz_target!(|data: &[u8]| {
    if let Ok(actions) = decode_actions(&mut Reader::new(data)) {
        let mut again = Vec::new();
        encode_actions(&actions, &mut again);
        assert_eq!(again.as_slice(), data);
        assert_eq!(decode_actions(&mut Reader::new(&again)).as_ref(), Ok(&actions));
        let _ = format_actions(&actions);
    }
});
