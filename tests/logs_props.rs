//! Property tests of the CRI log decoder (`podwarden logs`): what a
//! container runtime writes, `<time> <stream> <P|F> <content>` per entry,
//! comes back as the container wrote it, and no input (a container controls
//! its log's content) makes the decoder panic or grow its output beyond one
//! byte per input line. Bounded case counts.

use podwarden::logs::reader::decode;
use proptest::prelude::*;

/// One runtime entry: stream, partial flag, content (no newline: the
/// runtime splits on them).
fn entry() -> impl Strategy<Value = (bool, bool, Vec<u8>)> {
    (
        any::<bool>(),
        any::<bool>(),
        proptest::collection::vec(any::<u8>().prop_filter("no newline", |b| *b != b'\n'), 0..64),
    )
}

fn encode(entries: &[(bool, bool, Vec<u8>)]) -> (Vec<u8>, Vec<u8>) {
    let (mut raw, mut want) = (Vec::new(), Vec::new());
    for (i, (stderr, partial, content)) in entries.iter().enumerate() {
        let stream = if *stderr { "stderr" } else { "stdout" };
        raw.extend_from_slice(
            format!("2026-01-01T00:00:{:02}.{i:09}Z {stream} {} ", i % 60, if *partial { 'P' } else { 'F' }).as_bytes(),
        );
        raw.extend_from_slice(content);
        raw.push(b'\n');
        want.extend_from_slice(content);
        if !partial {
            want.push(b'\n');
        }
    }
    (raw, want)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn cri_entries_decode_to_what_the_container_wrote(entries in proptest::collection::vec(entry(), 0..40)) {
        let (raw, want) = encode(&entries);
        prop_assert_eq!(decode(&raw), want);
    }

    #[test]
    fn any_bytes_decode_without_panic_and_without_growing(raw in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let out = decode(&raw);
        let lines = raw.split(|b| *b == b'\n').count();
        prop_assert!(out.len() <= raw.len() + lines, "{} bytes out of {}", out.len(), raw.len());
    }

    #[test]
    fn decoding_whole_entries_in_pieces_equals_decoding_all(entries in proptest::collection::vec(entry(), 1..40), cut in any::<prop::sample::Index>()) {
        // `logs -f` decodes whole entries chunk by chunk: any split at an
        // entry boundary gives the same text
        let (raw, want) = encode(&entries);
        let ends: Vec<usize> = raw.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i + 1).collect();
        let at = ends[cut.index(ends.len())];
        let mut got = decode(&raw[..at]);
        got.extend(decode(&raw[at..]));
        prop_assert_eq!(got, want);
    }
}
