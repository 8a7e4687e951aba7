//! cargo-fuzz target for `flowmeshctl apply -f` manifests (YAML, and JSON as YAML), as the
//! client and the controller's Apply RPC parse them: `cargo fuzz run fuzz_manifest`.
//!
//! No input may panic; every object parsed must describe itself.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match kinds::manifest::parse_documents(text) {
        Ok(docs) => {
            for d in &docs {
                assert!(d.index >= 1);
                let _ = d.object.describe();
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
